"""Convolutions of 8/16-bit activations as exact int32 dot products of int16 pairs (x86 ``vpmaddwd``, which LLVM
fuses with the accumulation into the VNNI ``vpdpwssd`` where the CPU has it).

Used by :func:`kernels.conv2d_gemm.conv2d_gemm_blocks` where :func:`plan` proves it exact and the CPU has
AVX-512BW or AVX2 (:data:`AVAILABLE`; :data:`KERNELS` is the tile code of the best of the two for
:func:`kernels.cpu.features`, chosen once at import: :func:`select`); elsewhere the float paths of :mod:`kernels.conv2d_gemm` run. Checked bit for bit
against ``tests/naive.py::conv2d_acc`` for both instruction sets (``tests/test_kernels_conv_int16.py``).

Layout. The centred activations ``v = x - center`` (int16; padding cells hold ``pad = x_zp - center``) of each
pair of input channels ``(2p, 2p+1)`` share one int32 plane: low half channel ``2p``, high half ``2p+1`` (an odd
last channel is paired with zeros). As in :mod:`kernels.depthwise`, each pair plane holds the ``sh*sw``
polyphase components of the padded plane, row pitch ``wq``, so output ``(oh, ow)`` of tap ``(ky, kx)`` reads
component ``((ky*dh) % sh, (kx*dw) % sw)`` at ``[oh + (ky*dh)//sh, ow + (kx*dw)//sw]``: on the "wide" output
grid of pitch ``wq`` (columns ``>= Wo`` computed and discarded) every (pair, tap) term of ``NB`` consecutive
outputs is ``NV`` unaligned vector loads. The weights are packed alike, one int32 per (pair, tap, output channel).
A register tile of ``MR`` output channels x ``NB`` outputs accumulates all (pair, tap) terms with ``vpmaddwd``
(lane i: ``a[2i]*b[2i] + a[2i+1]*b[2i+1]``, 16x16-bit products exact in 32 bits) and int32 additions. The
instruction set fixes the vector (AVX-512BW: 16 int32 lanes, ``llvm.x86.avx512.pmaddw.d.512``; AVX2: 8 lanes,
``llvm.x86.avx2.pmadd.wd``) and the tile that fits its registers (:data:`ISAS`); the arithmetic is the same.

Exactness. Every int32 value the tile forms -- a product, a pair sum, a partial sum over (pair, tap) terms in
any order -- is a sum of a subset of the terms ``w[c, k] * v[k]`` of one output ``c``, so its magnitude is at
most ``S_c * V`` with ``S_c = sum_k |w[c, k]|`` and ``V`` the largest possible ``|v|`` (from the activation
dtype and the padding value). :func:`plan` admits a convolution only when ``max_c S_c * V <= 2**31 - 1`` and
every ``v`` fits int16, and packs only weights that fit int16 (:func:`weights_fit`); then no int32 operation
wraps and the results are the exact integer sums, whatever the vector width, tile shape or summation order (so
both instruction sets give identical results). The junk columns of the wide grid and the zero/padding slack they
read are sums of the same kind of bounded terms.
"""
import functools
import types as pytypes

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import cpu
from ._jit import njit, njit_noalloc
from .polyphase import plane_geometry, tap_offsets
from .requantize import requantize_row

PACK_ROWS = 4       # packed weights hold the output channels rounded up to this (a multiple of every MR_TAIL)
INT32_LIMIT = (1 << 31) - 1
V_RANGE = (-(1 << 15), (1 << 15) - 1)


class Isa:
    """One instruction set's tile: ``lanes`` int32 lanes per vector (``vpmaddwd`` intrinsic ``madd``), ``nv``
    vectors per tile row (``nb = nv * lanes`` outputs per tile), ``mr`` output channels per register tile and
    ``mr_tail`` for the remaining channels (``mr_tail`` divides ``PACK_ROWS`` and ``mr``). ``per_word`` input
    channels share one int32 (2 int16 halves here; 4 bytes for :mod:`kernels.conv_u8s8`, whose ``madd`` is the
    accumulating ``vpdpbusd``: ``dot=True``, ``acc = madd(acc, x, w)`` instead of ``acc + madd(x, w)``)."""

    def __init__(self, name, madd, lanes, nv, mr, mr_tail, per_word=2, dot=False):
        self.name, self.madd, self.lanes, self.nv, self.mr, self.mr_tail = name, madd, lanes, nv, mr, mr_tail
        self.nb = nv * lanes
        self.per_word, self.dot = per_word, dot


ISAS = {
    # 12 x 2 accumulators + 2 inputs + 1 weight of 32 zmm registers
    "avx512bw": Isa("avx512bw", "llvm.x86.avx512.pmaddw.d.512", 16, 2, 12, 4),
    # 6 x 2 accumulators + 2 inputs + 1 weight of 16 ymm registers
    "avx2": Isa("avx2", "llvm.x86.avx2.pmadd.wd", 8, 2, 6, 2),
}


NEEDS = {"avx512bw": ("avx512bw",), "avx2": ("avx2",)}  # the features (kernels.cpu) each of ISAS needs


def select(feats) -> str | None:
    """The best of :data:`ISAS` a CPU with features ``feats`` (:mod:`kernels.cpu`) runs ("avx512bw", else
    "avx2"), or None."""
    return next((name for name in ISAS if runs(name, feats)), None)


def runs(name: str, feats) -> bool:
    """True when the tiles of set ``name`` run on a CPU with features ``feats``."""
    return cpu.has(feats, *NEEDS[name])


X_DTYPES = tuple(np.dtype(d) for d in (np.int8, np.uint8, np.int16, np.uint16))


def x_center(dtype) -> int:
    """The value subtracted from activations of ``dtype`` before they are paired: 2**15 for uint16, 128 for uint8,
    0 for signed types (the centred values fit int16)."""
    return {np.dtype(np.uint16): 1 << 15, np.dtype(np.uint8): 128}.get(np.dtype(dtype), 0)


def plan(dtype, pad, wabs_rowsum_max: int) -> bool:
    """True when the int16-pair kernel computes the convolution exactly (see the module docstring).

    ``dtype``: the activation dtype (8 or 16 bits, signed or unsigned: the centred values fit int16); ``pad``: the
    centred padding value (None without padding); ``wabs_rowsum_max``: ``max_c sum_k |w[c, k]|``."""
    dt = np.dtype(dtype)
    if not AVAILABLE or dt not in X_DTYPES:
        return False
    if pad is not None and not V_RANGE[0] <= pad <= V_RANGE[1]:
        return False
    v_max = max(1 << (8 * dt.itemsize - 1), 0 if pad is None else abs(pad))  # the largest |v|: 2**7 or 2**15
    return wabs_rowsum_max * v_max <= INT32_LIMIT


def weights_fit(w) -> bool:
    """True when every weight is an int16 value (what :func:`pack_weights` can pack; :func:`plan`'s bound
    alone allows weights up to 65535 in magnitude)."""
    return w.size == 0 or (int(w.min()) >= V_RANGE[0] and int(w.max()) <= V_RANGE[1])


_I16, _I32, _I64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)


def _make_tile(isa, mr):
    """Intrinsic ``tile(xp, base, offs, w32, m0, out, col)`` of :class:`Isa` ``isa``: for m < mr and j < isa.nb,
    ``out[m0 + m, col + j] = sum_kk pmaddwd(xp[base + offs[kk] + j], w32[kk, m0 + m])`` (int32 pairs, see the
    module docstring). The caller guarantees every index is in bounds (no checks here)."""

    @intrinsic
    def tile(typingctx, xp, base, offs, w32, m0, out, col):
        sig = types.void(xp, base, offs, w32, m0, out, col)

        def codegen(context, builder, sig, args):
            xa, base, oa, wa, m0, outa, col = args
            lanes, nv = isa.lanes, isa.nv
            vec = ir.VectorType(_I32, lanes)
            v16 = vec if isa.dot else ir.VectorType(_I16, 2 * lanes)  # vpdpbusd takes its bytes as <16 x i32>
            madd = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vec, [vec, v16, v16] if isa.dot else [v16, v16]), isa.madd)
            xs_, os_, ws_, outs_ = [cgutils.create_struct_proxy(sig.args[i])(context, builder, value=args[i])
                                    for i in (0, 2, 3, 5)]
            xptr, optr, wptr, outptr = xs_.data, os_.data, ws_.data, outs_.data
            wstride = builder.extract_value(ws_.strides, 0)  # bytes
            ostride = builder.extract_value(outs_.strides, 0)
            n_k = builder.extract_value(os_.shape, 0)
            zero = ir.Constant(vec, None)
            accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(nv)] for _ in range(mr)]
            splat_mask = ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes)
            wbase = builder.gep(builder.bitcast(wptr, _I32.as_pointer()), [m0])
            with cgutils.for_range(builder, n_k) as loop:
                kk = loop.index
                p = builder.gep(xptr, [builder.add(base, builder.load(builder.gep(optr, [kk])))])
                xs = [builder.bitcast(builder.load(builder.bitcast(builder.gep(p, [ir.Constant(_I64, v * lanes)]),
                                                                   vec.as_pointer()), align=4), v16)
                      for v in range(nv)]
                wrow = builder.bitcast(builder.gep(builder.bitcast(wbase, ir.IntType(8).as_pointer()),
                                                   [builder.mul(kk, wstride)]), _I32.as_pointer())
                for m in range(mr):
                    wv = builder.load(builder.gep(wrow, [ir.Constant(_I64, m)]))
                    ws = builder.insert_element(zero, wv, ir.Constant(_I32, 0))
                    ws = builder.bitcast(builder.shuffle_vector(ws, ws, splat_mask), v16)
                    for v in range(nv):
                        a = accs[m][v]
                        prev = builder.load(a)
                        acc = (builder.call(madd, [prev, xs[v], ws]) if isa.dot
                               else builder.add(prev, builder.call(madd, [xs[v], ws])))
                        builder.store(acc, a)
            obase = builder.gep(builder.bitcast(outptr, ir.IntType(8).as_pointer()), [builder.mul(m0, ostride)])
            for m in range(mr):
                row = builder.bitcast(builder.gep(obase, [builder.mul(ir.Constant(_I64, m), ostride)]),
                                      _I32.as_pointer())
                row = builder.gep(row, [col])
                for v in range(nv):
                    dst = builder.bitcast(builder.gep(row, [ir.Constant(_I64, v * lanes)]), vec.as_pointer())
                    builder.store(builder.load(accs[m][v]), dst, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile


@njit
def _pair_planes(x, n, c0, center, pad, top, left, sh, sw, wq, psz, xp):
    """Fill ``xp`` (pairs, plane length) with the int32-packed centred pair planes of channels ``c0 + [0, 2*pairs)``
    of image ``n`` (module docstring): every cell first the packed padding value, then the input values at
    component ``(r % sh, c % sw)``, position ``(r // sh)*wq + c // sw`` of padded cell ``(r, c)``. At stride 1 (one
    component) only the cells no input value lands on get the padding value: the border and the slack (a 1x1
    convolution: the slack only)."""
    cin = x.shape[1]
    h = x.shape[2]
    wd = x.shape[3]
    n_pairs, plane = xp.shape
    for p in range(n_pairs):
        ca = c0 + 2 * p
        has_b = ca + 1 < cin
        pv = (np.int32(pad) & 0xFFFF) | ((np.int32(pad) if has_b else np.int32(0)) << 16)
        dst = xp[p]
        if sh == 1 and sw == 1:
            for j in range(top * wq):
                dst[j] = pv
            for ih in range(h):
                r0 = (top + ih) * wq
                for j in range(r0, r0 + left):
                    dst[j] = pv
                for j in range(r0 + left + wd, r0 + wq):
                    dst[j] = pv
            for j in range((top + h) * wq, plane):
                dst[j] = pv
        else:
            for j in range(plane):
                dst[j] = pv
        for ih in range(h):
            r = top + ih
            row0 = ((r % sh) * sw) * psz + (r // sh) * wq
            sa = x[n, ca, ih]
            if sw == 1:
                d = dst[row0 + left:row0 + left + wd]
                if has_b:
                    sb = x[n, ca + 1, ih]
                    for j in range(wd):
                        d[j] = ((np.int32(sa[j]) - center) & 0xFFFF) | ((np.int32(sb[j]) - center) << 16)
                else:
                    for j in range(wd):
                        d[j] = (np.int32(sa[j]) - center) & 0xFFFF
                continue
            if sw == 2:  # even input columns land in phase left % 2, odd ones in the other (unit-stride stores)
                de = dst[row0 + (left % 2) * psz + left // 2:]
                do = dst[row0 + ((left + 1) % 2) * psz + (left + 1) // 2:]
                sb = x[n, ca + 1, ih] if has_b else sa
                hb = np.int32(-1) if has_b else np.int32(0)  # keeps the high half only for a real second channel
                for j in range((wd + 1) // 2):
                    de[j] = ((np.int32(sa[2 * j]) - center) & 0xFFFF) | (((np.int32(sb[2 * j]) - center) << 16) & hb)
                for j in range(wd // 2):
                    do[j] = (((np.int32(sa[2 * j + 1]) - center) & 0xFFFF)
                             | (((np.int32(sb[2 * j + 1]) - center) << 16) & hb))
                continue
            for iw in range(wd):
                c = left + iw
                b = (np.int32(x[n, ca + 1, ih, iw]) - center) << 16 if has_b else np.int32(0)
                dst[row0 + (c % sw) * psz + c // sw] = ((np.int32(sa[iw]) - center) & 0xFFFF) | b


def _tiles(xp, offs, w32, npix, wide):
    """``wide[m, j] = sum_kk pmaddwd(xp[offs[kk] + j], w32[kk, m])`` for j < npix rounded up to NB, every
    (padded) output channel m; ``xp`` flat, with at least NB - 1 readable cells past the last valid read.
    (A template, like the next two: :func:`kernel_set` compiles it per :class:`Isa`, binding ``NB``, ``MR``,
    ``MR_TAIL``, ``_tile`` and ``_tile_tail`` to the instruction set's values.)"""
    mp = w32.shape[1]
    for col in range(0, npix, NB):
        m0 = 0
        while m0 + MR <= mp:
            _tile(xp, col, offs, w32, m0, wide, col)
            m0 += MR
        while m0 < mp:
            _tile_tail(xp, col, offs, w32, m0, wide, col)
            m0 += MR_TAIL


def _tiles_compact(xp, offs, w32, rows, wq, wo, wide, acc):
    """:func:`_tiles` for ``rows`` output rows (of pitch ``wq`` on the wide grid), then
    ``acc[c, r*wo + j] = wide[c, r*wq + j]`` for the channels of ``acc``, r < rows and j < wo."""
    _tiles(xp, offs, w32, (rows - 1) * wq + wo, wide)
    for c in range(acc.shape[0]):
        src = wide[c]
        dst = acc[c]
        for r in range(rows):
            s = src[r * wq:r * wq + wo]
            d = dst[r * wo:(r + 1) * wo]
            for j in range(wo):
                d[j] = s[j]


def _conv_requantized(x, center, pad, top, left, sh, sw, wq, psz, rows, wo, offs, w32, xp, wide, yb, bias, mult,
                      shift, bound, out_zp, qmin, qmax, out):
    """The whole convolution into ``out`` (N, Cout, Ho*Wo) in one call, each finished block of each channel
    requantized on the spot by ``requantize_row`` (``bias`` per output channel, the centring offset included;
    every ``bound`` > 0, no accumulator-width check: :func:`kernels.conv2d_gemm.conv2d_gemm_requantized` proved
    both unnecessary): rows without junk columns (``wq == wo``) as one run; short rows (``wo < 32``) as the whole
    wide block into ``yb`` (``out``'s dtype, a wide row long; the junk columns' sums are bounded like the others), then
    copied row by row; longer rows one by one. (Per-call overhead, not arithmetic: the integers are the same.)"""
    n_img, cin = x.shape[0], x.shape[1]
    groups = w32.shape[0]
    cin_g = cin // groups
    cout_g = out.shape[1] // groups
    ho = out.shape[2] // wo
    flat = xp.reshape(-1)
    for n in range(n_img):
        for g in range(groups):
            _planes(x, n, g * cin_g, center, pad, top, left, sh, sw, wq, psz, xp)
            for r0 in range(0, ho, rows):
                r1 = min(ho, r0 + rows)
                # reads reach offs[-1] + r0*wq + npix rounded up to NB: inside the last pair's plane and its slack
                _tiles(flat[r0 * wq:], offs, w32[g], (r1 - r0 - 1) * wq + wo, wide)
                npix = (r1 - r0 - 1) * wq + wo
                whole = wq == wo or wo < 32  # one run of npix (into yb when it holds junk columns), or row by row
                runs, run = (1, npix) if whole else (r1 - r0, wo)
                for c in range(cout_g):
                    co = g * cout_g + c
                    src = wide[c]
                    dst = out[n, co]
                    for r in range(runs):  # one call site: requantize_row's loops compiled once into this kernel
                        d = yb[:npix] if wq != wo and whole else dst[(r0 + r) * wo:(r0 + r) * wo + run]
                        requantize_row(src[r * wq:r * wq + run], d, bias[co], mult[co], shift[co], bound[co], out_zp,
                                       qmin, qmax)
                    if wq != wo and whole:
                        for r in range(r1 - r0):
                            d = dst[(r0 + r) * wo:(r0 + r + 1) * wo]
                            s = yb[r * wq:r * wq + wo]
                            for j in range(wo):
                                d[j] = s[j]


class KernelSet:
    """The compiled tiles of one :class:`Isa`: ``tiles_compact`` and ``conv_requantized`` (the templates
    :func:`_tiles_compact` and :func:`_conv_requantized`), with the tile geometry ``isa`` and the function that
    fills the packed input planes, ``planes`` (:func:`_pair_planes` here, its signature). ``tiles`` replaces the
    register tiles' loop (:func:`_tiles`, same signature; the AMX tiles of :mod:`kernels.conv_amx`), ``words``
    the packed words per pixel of ``cin_g`` input channels (default ``ceil(cin_g / per_word)``)."""

    def __init__(self, isa, planes=None, tiles=None, words=None):
        self.isa = isa
        self.planes = _pair_planes if planes is None else planes
        self.words = words if words is not None else (lambda cin_g: -(-cin_g // isa.per_word))
        globs = dict(globals(), NB=isa.nb, MR=isa.mr, MR_TAIL=isa.mr_tail, _planes=self.planes)
        if tiles is None:
            globs.update(_tile=_make_tile(isa, isa.mr), _tile_tail=_make_tile(isa, isa.mr_tail))
            globs["_tiles"] = compile_template(_tiles, isa.name, globs)
        else:
            globs["_tiles"] = tiles
        for fn in (_tiles_compact, _conv_requantized):  # both call _tiles
            globs[fn.__name__] = compile_template(fn, isa.name, globs)
        self.tiles_compact, self.conv_requantized = globs["_tiles_compact"], globs["_conv_requantized"]


def compile_template(fn, suffix, globs):
    """``njit_noalloc`` of a copy of template ``fn`` reading its globals from ``globs``, named ``fn_<suffix>`` (its
    own entry in Numba's on-disk cache, which keys functions by qualified name and bytecode, not by globals). The
    templates allocate nothing: their callers pass every scratch array."""
    copy = pytypes.FunctionType(fn.__code__, globs, f"{fn.__name__}_{suffix}")
    copy.__qualname__ = copy.__name__
    copy.__doc__ = fn.__doc__
    return njit_noalloc(copy)


@functools.cache
def kernel_set(name: str) -> KernelSet:
    """The :class:`KernelSet` of instruction set ``name`` (a key of :data:`ISAS`), built once. Any set runs on a
    CPU with its instructions: tests run the AVX2 set on AVX-512 hosts too."""
    return KernelSet(ISAS[name])


ISA = select(cpu.features())
AVAILABLE = ISA is not None
KERNELS = kernel_set(ISA) if AVAILABLE else None  # what Layout (hence blocks and bind_requantized) runs
NB = KERNELS.isa.nb if AVAILABLE else 0  # outputs per tile of KERNELS (npu_sim.ops.mac: smaller planes go elsewhere)


def _skew(pitch: int) -> int:
    """``pitch`` (int32 words) rounded up to 16 more than a multiple of 32: rows of planes and of the wide grid
    then start 64 bytes apart modulo 128, so the 12-16 rows a tile reads or writes at once fall in different
    L1 cache sets (a pitch of a multiple of 4 KiB put them all in one set: 2-3x slower tiles on such shapes)."""
    return pitch + (16 - pitch % 32) % 32


class Layout:
    """The shape-dependent part of the int16-pair convolution of one input shape: the plane geometry, the read
    offset of every (pair, tap) and the rows per block, computed once per shape (callers keep it in their cache),
    for the tiles of :data:`KERNELS` or the given ``kernels`` (a :class:`KernelSet`; its ``NB`` sets the plane slack
    and the wide-grid rounding, its ``per_word`` the packed words per pixel).
    ``buffers()`` allocates the scratch planes (fresh per call: concurrent users never share them)."""

    def __init__(self, x_shape, w_shape, groups, stride, pads, dilation, ho, wo, block_cols, mp, kernels=None):
        self.kernels = kernels = KERNELS if kernels is None else kernels
        nb = kernels.isa.nb
        h, wd = x_shape[2], x_shape[3]
        cin_g, kh, kw = w_shape[1], w_shape[2], w_shape[3]
        sh, sw = stride
        top, left, bottom, right = pads
        dh, dw = dilation
        self.wq, self.psz = wq, psz = plane_geometry(h, wd, top, left, bottom, right, sh, sw)
        n_pairs = kernels.words(cin_g)  # packed words per input pixel
        plane = _skew(sh * sw * psz + nb)
        tap_off = tap_offsets(kh, kw, sh, sw, dh, dw, psz, wq)
        self.offs = (np.arange(n_pairs)[:, None] * plane + tap_off).reshape(-1).astype(np.int64)
        self.rows = rows = max(1, min(ho, block_cols // wo))
        self.ho, self.wo, self.top, self.left, self.sh, self.sw = ho, wo, top, left, sh, sw
        self.cout_g = w_shape[0] // groups
        self.xp_shape = (n_pairs, plane)
        self.wide_shape = (mp, _skew(-(-((rows - 1) * wq + wo) // nb) * nb))

    def buffers(self):
        return np.empty(self.xp_shape, np.int32), np.empty(self.wide_shape, np.int32)


def pack_weights(w, groups: int) -> np.ndarray:
    """int32 [groups, pairs*taps, Cout_g rounded up to PACK_ROWS] (for every instruction set): the pair
    (w[c, 2p, t], w[c, 2p+1, t]) of output channel c at row p*taps + t (low half channel 2p), zero for padded
    channels and the odd last channel."""
    cout, cin_g, kh, kw = w.shape
    cout_g = cout // groups
    n_pairs = (cin_g + 1) // 2
    mp = -(-cout_g // PACK_ROWS) * PACK_ROWS
    w16 = np.zeros((groups, mp, 2 * n_pairs, kh * kw), np.int32)
    w16[:, :cout_g, :cin_g] = w.reshape(groups, cout_g, cin_g, kh * kw)
    lo, hi = w16[:, :, 0::2], w16[:, :, 1::2]  # (groups, mp, pairs, taps)
    packed = (lo & 0xFFFF) | (hi << 16)
    return np.ascontiguousarray(packed.reshape(groups, mp, n_pairs * kh * kw).transpose(0, 2, 1))


def blocks(x, center, pad, w32, layout):
    """The blocks of :func:`kernels.conv2d_gemm.conv2d_gemm_blocks` (without the offset): yields
    ``(n, g, col0, col1, acc)``, ``acc`` int32 (Cout_g, col1 - col0) holding the exact sums of ``(x - center) * w``
    over the padded input (padding ``pad``), for whole output rows. The caller checked :func:`plan` and built
    ``layout`` (:class:`Layout`) for this input shape and geometry."""
    n_img = x.shape[0]
    groups = w32.shape[0]
    cin_g = x.shape[1] // groups
    L = layout
    xp, wide = L.buffers()
    flat = xp.reshape(-1)
    for n in range(n_img):
        for g in range(groups):
            L.kernels.planes(x, n, g * cin_g, center, pad, L.top, L.left, L.sh, L.sw, L.wq, L.psz, xp)
            for r0 in range(0, L.ho, L.rows):
                r1 = min(L.ho, r0 + L.rows)
                acc = np.empty((L.cout_g, (r1 - r0) * L.wo), np.int32)
                # reads reach offs[-1] + r0*wq + npix rounded up to NB: inside the last pair's plane and its slack
                L.kernels.tiles_compact(flat[r0 * L.wq:], L.offs, w32[g], r1 - r0, L.wq, L.wo, wide, acc)
                yield n, g, r0 * L.wo, r1 * L.wo, acc


def bind_requantized(center, pad, w32, layout, bias, mult, shift, bound, out_zp, qmin, qmax):
    """:func:`_conv_requantized` with the layout's geometry and tiles bound once (the caller validated every
    argument): returns ``run(x, out)``, ``out`` (N, Cout, Ho*Wo); scratch planes fresh per call."""
    L = layout
    kernel = L.kernels.conv_requantized
    head = (center, pad, L.top, L.left, L.sh, L.sw, L.wq, L.psz, L.rows, L.wo, L.offs, w32)
    tail = (bias, mult, shift, bound, out_zp, qmin, qmax)

    def run(x, out):
        kernel(x, *head, np.empty(L.xp_shape, np.int32), np.empty(L.wide_shape, np.int32),
               np.empty(L.wide_shape[1] if L.wo < 32 else 0, out.dtype), *tail, out)

    return run
