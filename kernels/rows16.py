"""Short rows moved 16 elements at a time: the row copies and conversions of the per-channel depthwise kernels
(:mod:`kernels.depthwise_s2`, :mod:`kernels.depthwise_int16`).

Their rows are 7-112 elements: a plain loop spends most of such a row in its scalar remainder (LLVM vectorizes 64-128
elements per iteration and finishes one by one). Here a row of at least 16 elements is moved in chunks of 16, one
vector load and store each, the last chunk ending at the row's end (overlapping the one before: it writes the same
values again); shorter rows take the plain loop. Moving ``dst[j] = src[j] - sub`` (``src`` widened by its own
signedness) is exact: the callers' values fit the destination type.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit import njit_noalloc

W = 16  # elements per chunk


def _splat(builder, value, vtype):
    """The vector of type ``vtype`` with every lane ``value``."""
    v = builder.insert_element(ir.Constant(vtype, None), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, ir.Constant(vtype, None),
                                  ir.Constant(ir.VectorType(ir.IntType(32), vtype.count), [0] * vtype.count))


def make_move(w):
    """Intrinsic ``move(src, s0, dst, d0, sub)``: ``dst.data[d0 + j] = src.data[s0 + j] - sub`` for j < ``w`` (flat
    element offsets from each array's first element: any C-contiguous array), ``src``'s values sign- or zero-extended
    (by its signedness) to ``dst``'s integer type, or truncated where that is narrower (the callers' values fit). One
    vector load and store; no bounds checks."""

    @intrinsic
    def move(typingctx, src, s0, dst, d0, sub):
        sig = types.void(src, s0, dst, d0, sub)

        def codegen(context, builder, sig, args):
            sa, da = [cgutils.create_struct_proxy(sig.args[i])(context, builder, value=args[i]) for i in (0, 2)]
            st, dt = context.get_value_type(sig.args[0].dtype), context.get_value_type(sig.args[2].dtype)
            vs, vd = ir.VectorType(st, w), ir.VectorType(dt, w)
            v = builder.load(builder.bitcast(builder.gep(sa.data, [args[1]]), vs.as_pointer()), align=1)
            if dt.width > st.width:
                v = builder.sext(v, vd) if sig.args[0].dtype.signed else builder.zext(v, vd)
            elif dt.width < st.width:
                v = builder.trunc(v, vd)
            z = builder.trunc(args[4], dt) if dt.width < args[4].type.width else args[4]
            dst = builder.bitcast(builder.gep(da.data, [args[3]]), vd.as_pointer())
            builder.store(builder.sub(v, _splat(builder, z, vd)), dst, align=1)
            return context.get_dummy_value()

        return sig, codegen

    return move


_move16 = make_move(W)
_move1 = make_move(1)


@njit_noalloc
def move_row(src, s0, dst, d0, n, sub):
    """``dst.data[d0 + j] = src.data[s0 + j] - sub`` for j < n (``make_move``: chunks of 16 from 16 elements on, one
    by one below). ``sub`` an int64."""
    if n >= W:
        for j in range(0, n, W):
            j0 = min(j, n - W)
            _move16(src, s0 + j0, dst, d0 + j0, sub)
    else:
        for j in range(n):
            _move1(src, s0 + j, dst, d0 + j, sub)


def make_pairs(w):
    """Intrinsic ``pairs(src, s0, dst, d0, sub)``: the int32 words ``dst.data[d0 + j] = (a & 0xFFFF) | (b << 16)``
    with ``a = src.data[s0 + j] - sub``, ``b = src.data[s0 + j + 1] - sub`` (widened by ``src``'s signedness; the
    callers' ``a``, ``b`` fit int16) for j < ``w``: the int16 pair words of :mod:`kernels.depthwise_int16` straight from
    an input row. Two vector loads and one store; no bounds checks."""

    @intrinsic
    def pairs(typingctx, src, s0, dst, d0, sub):
        sig = types.void(src, s0, dst, d0, sub)

        def codegen(context, builder, sig, args):
            sa, da = [cgutils.create_struct_proxy(sig.args[i])(context, builder, value=args[i]) for i in (0, 2)]
            st = context.get_value_type(sig.args[0].dtype)
            i32 = ir.IntType(32)
            vs, vd = ir.VectorType(st, w), ir.VectorType(i32, w)
            zv = _splat(builder, builder.trunc(args[4], i32), vd)
            ext = builder.sext if sig.args[0].dtype.signed else builder.zext
            halves = []
            for k in range(2):
                ptr = builder.gep(sa.data, [builder.add(args[1], ir.Constant(args[1].type, k))])
                v = builder.load(builder.bitcast(ptr, vs.as_pointer()), align=1)
                halves.append(builder.sub(ext(v, vd), zv))
            lo = builder.and_(halves[0], ir.Constant(vd, [0xFFFF] * w))
            hi = builder.shl(halves[1], ir.Constant(vd, [16] * w))
            builder.store(builder.or_(lo, hi), builder.bitcast(builder.gep(da.data, [args[3]]), vd.as_pointer()),
                          align=4)
            return context.get_dummy_value()

        return sig, codegen

    return pairs


_pairs16 = make_pairs(W)
_pairs1 = make_pairs(1)


@njit_noalloc
def pair_row(src, s0, dst, d0, n, sub):
    """The pair words of ``make_pairs`` for j < n (chunks of 16 from 16 on, one by one below; reads ``src`` up to
    ``s0 + n``). ``sub`` an int64."""
    if n >= W:
        for j in range(0, n, W):
            j0 = min(j, n - W)
            _pairs16(src, s0 + j0, dst, d0 + j0, sub)
    else:
        for j in range(n):
            _pairs1(src, s0 + j, dst, d0 + j, sub)
