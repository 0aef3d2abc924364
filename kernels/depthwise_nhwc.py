"""Depthwise convolutions of 8-bit activations channels last, in blocks of channels, with the requantization fused:
MobileNet-class layers of many channels over small and middling planes (:func:`wins`, measured).

Per image and block of ``CB`` channels (``C`` a multiple of 32):

1. The block's input planes are transposed 16 channels x 16 pixels at a time (byte shuffles, :func:`make_transpose`)
   into a channels-last padded buffer ``xt`` (int16: ``xt[(r*wp + c)*CB + ch] = x[ch, r - top, c - left] -
   x_zp``, 0 on the border, never written).
2. Each output pixel's taps are summed across the channels in vectors (:func:`make_tile`): an int16 vector of 2L
   channels (L = int32 lanes) is multiplied by two weight vectors with ``vpmaddwd``, ``(w[even ch], 0)`` and ``(0,
   w[odd ch])`` per lane, into two int32 accumulators -- the even and the odd channels of the group, so each lane
   sums exactly one channel's products (the other half's weight is 0) with no shuffles. A tile keeps ``PX``
   pixels' accumulators in registers over all taps and stores them once: ``acc[p*CB + l]``, lane ``l`` holding
   channel :func:`lane_channels` ``[l]`` (the even channels of a group of 2L, then its odd ones).
3. Every accumulator is requantized in place, vectorized across the lanes with per-lane channel arguments: the
   branch-free formula of ``kernels.requantize.requantize_row``, ``clamp(((clamp(acc + bias, -bound, bound)*mult
   + 2**(shift-1)) >> shift) + out_zp, qmin, qmax)`` (``bound`` from ``kernels.requantize.saturation_bounds``).
4. The output bytes are transposed back 16 x 16 into the NCHW output, each lane's row to its channel.

Planes whose pixel count is not a multiple of 16 (or ``PX``) take their last transpose (tile) over the last 16
(``PX``) pixels, overlapping the one before: recomputing the same values is harmless.

Exactness. Every partial sum of a lane is a sum of a subset of one channel's terms ``(x - x_zp) * w[c, t]`` (the
border adds 0; the other half of each ``vpmaddwd`` pair is multiplied by 0), at most ``max|x - x_zp| *
sum_t |w[c, t]|`` in magnitude; the caller (:func:`kernels.conv2d_direct.bind_direct_requantized`) admits only
convolutions where that is below 2**31 - 1 for every channel, and :func:`wins` only weights within int16 and 8-bit activations (``|x - x_zp| <=
255`` fits int16), so every int16 and int32 value is the exact integer. The requantization is the formula above in
int64: ``|clamp(...)*mult| <= bound*|mult| <= 2**62`` (saturation_bounds), so it is exact too, the same outputs as
``requantize_row`` (whose int32 fast path is proven equal to it).
"""
import functools

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit import njit_noalloc
from .conv_int16 import AVAILABLE, ISA, ISAS, compile_template
from .requantize import clamp_out

CB = 64          # channels per block
PX = 4           # output pixels per tile
MIN_PIXELS = 16  # wins: output planes of at least this many pixels (the transposes take 16)
MAX_PIXELS = 256  # ... and at most (measured: 0.55-0.65x the int16-pair kernel at 14x14, 0.93x at 28x28)
MAX_PIXELS_S2 = 64  # ... at column stride 2 (measured: 0.45x kernels.depthwise_s2 at 7x7, 1.35x at 14x14)
MIN_CHANNELS = 64

_I8, _I16, _I32, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_LO = [k // 2 + 16 * (k % 2) for k in range(16)]  # interleave the first halves of two 16-element vectors
_HI = [8 + k for k in _LO]                        # ... the second halves


def make_transpose(widen):
    """Intrinsic ``transpose(src, src_offs, src_base, dst, dst_offs, dst_base, zp)``: the 16 x 16 bytes
    ``src[src_base + src_offs[r] + j]`` (r, j < 16) transposed: ``dst[dst_base + dst_offs[j] + r] = src[...r, j]``,
    with ``widen`` as int16 ``src - zp`` (sign- or zero-extended by ``src``'s dtype). Four rounds of interleaving
    pairs of rows ``i``, ``i + 8`` transpose the 16 rows exactly (lowered to byte shuffles). No bounds checks."""

    @intrinsic
    def transpose(typingctx, src, src_offs, src_base, dst, dst_offs, dst_base, zp):
        sig = types.void(src, src_offs, src_base, dst, dst_offs, dst_base, zp)
        signed = src.dtype.signed

        def codegen(context, builder, sig, args):
            s, so, d, do = [cgutils.create_struct_proxy(sig.args[i])(context, builder, value=args[i])
                            for i in (0, 1, 3, 4)]
            v8, v16 = ir.VectorType(_I8, 16), ir.VectorType(_I16, 16)
            rows = []
            for r in range(16):
                off = builder.add(args[2], builder.load(builder.gep(so.data, [ir.Constant(_I64, r)])))
                rows.append(builder.load(builder.bitcast(builder.gep(s.data, [off]), v8.as_pointer()), align=1))
            lo, hi = ir.Constant(ir.VectorType(_I32, 16), _LO), ir.Constant(ir.VectorType(_I32, 16), _HI)
            for _ in range(4):
                new = [None] * 16
                for i in range(8):
                    new[2 * i] = builder.shuffle_vector(rows[i], rows[i + 8], lo)
                    new[2 * i + 1] = builder.shuffle_vector(rows[i], rows[i + 8], hi)
                rows = new
            zv = None
            if widen:
                z = builder.trunc(args[6], _I16)
                zv = builder.shuffle_vector(builder.insert_element(ir.Constant(v16, None), z, ir.Constant(_I32, 0)),
                                            ir.Constant(v16, None), ir.Constant(ir.VectorType(_I32, 16), [0] * 16))
            for j in range(16):
                off = builder.add(args[5], builder.load(builder.gep(do.data, [ir.Constant(_I64, j)])))
                v, vt = rows[j], v8
                if widen:
                    v = builder.sub(builder.sext(v, v16) if signed else builder.zext(v, v16), zv)
                    vt = v16
                builder.store(v, builder.bitcast(builder.gep(d.data, [off]), vt.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return transpose


def make_tile(isa, px):
    """Intrinsic ``tile(xt, xoffs, p0, toffs, wv, wbase, c0, acc, pitch)`` of ``kernels.conv_int16.Isa`` ``isa``
    (L = ``isa.lanes``): for the ``px`` output pixels ``p = p0 + i`` and the channel group ``c0 <= ch < c0 + 2L``,
    ``acc[p*pitch + c0 + j] = sum_t pmaddwd(xt[xoffs[p] + toffs[t] + c0 : +2L], wv[wbase + t*2*pitch + 2*c0 :
    +2L])[j]`` and ``acc[p*pitch + c0 + L + j]`` the same with the next 2L weights (module docstring). No bounds
    checks."""

    @intrinsic
    def tile(typingctx, xt, xoffs, p0, toffs, wv, wbase, c0, acc, pitch):
        sig = types.void(xt, xoffs, p0, toffs, wv, wbase, c0, acc, pitch)

        def codegen(context, builder, sig, args):
            _, _, p0, _, _, wbase, c0, _, pitch = args
            lanes = isa.lanes
            vec, v16 = ir.VectorType(_I32, lanes), ir.VectorType(_I16, 2 * lanes)
            madd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [v16, v16]), isa.madd)
            xa, xo, ta, wa, aa = [cgutils.create_struct_proxy(sig.args[i])(context, builder, value=args[i])
                                  for i in (0, 1, 3, 4, 7)]
            n_t = builder.extract_value(ta.shape, 0)
            zero = ir.Constant(vec, None)
            accs = [cgutils.alloca_once_value(builder, zero) for _ in range(2 * px)]
            xbase = [builder.add(builder.load(builder.gep(xo.data, [builder.add(p0, ir.Constant(_I64, i))])), c0)
                     for i in range(px)]
            w0 = builder.add(wbase, builder.add(c0, c0))
            two_p = builder.add(pitch, pitch)
            with cgutils.for_range(builder, n_t) as loop:
                t = loop.index
                toff = builder.load(builder.gep(ta.data, [t]))
                wp = builder.gep(wa.data, [builder.add(w0, builder.mul(t, two_p))])
                we = builder.load(builder.bitcast(wp, v16.as_pointer()), align=2)
                wo = builder.load(builder.bitcast(builder.gep(wp, [ir.Constant(_I64, 2 * lanes)]),
                                                  v16.as_pointer()), align=2)
                for i in range(px):
                    xv = builder.load(builder.bitcast(builder.gep(xa.data, [builder.add(xbase[i], toff)]),
                                                      v16.as_pointer()), align=2)
                    for a, wv in ((accs[2 * i], we), (accs[2 * i + 1], wo)):
                        builder.store(builder.add(builder.load(a), builder.call(madd, [xv, wv])), a)
            for i in range(px):
                row = builder.add(builder.mul(builder.add(p0, ir.Constant(_I64, i)), pitch), c0)
                for h in range(2):
                    dst = builder.gep(aa.data, [builder.add(row, ir.Constant(_I64, h * lanes))])
                    builder.store(builder.load(accs[2 * i + h]), builder.bitcast(dst, vec.as_pointer()), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile


_transpose_in = make_transpose(True)
_transpose_out = make_transpose(False)


@njit_noalloc
def _requantize_lanes(acc, y, n, bias, mult, shift, rnd, bound, out_zp, qmin, qmax):
    """``y[k] = clamp(((clamp(acc[k] + bias[l], -bound[l], bound[l])*mult[l] + rnd[l]) >> shift[l]) + out_zp, qmin,
    qmax)`` for the ``n`` lanes ``l`` of every pixel row ``k = p*pitch + l`` (``pitch`` = ``len(bias)``; int64,
    exact: module docstring)."""
    pitch = bias.shape[0]
    for p in range(acc.shape[0] // pitch):
        a = acc[p * pitch:p * pitch + n]
        d = y[p * pitch:p * pitch + n]
        for lane in range(n):
            v = min(max(np.int64(a[lane]) + bias[lane], -bound[lane]), bound[lane])
            r = ((v * mult[lane] + rnd[lane]) >> shift[lane]) + out_zp
            d[lane] = min(max(r, qmin), qmax)


@njit_noalloc
def _requantize_lanes_folded(acc, y, n, m32, c, shift, full, qmin, qmax):
    """The same outputs as :func:`_requantize_lanes` where every lane's ``c[l] = bias*mult + rnd + out_zp*2**shift``
    is below 2**61 in magnitude: ``y[k] = clamp((acc[k]*m32[l] + c[l]) >> shift[l], qmin, qmax)`` (``m32`` the
    int32 multipliers: one 32x32->64-bit multiply). As in ``kernels.requantize.requantize_row``: a multiple of
    ``2**shift`` added before the floor division is added after it, exactly, and the clamp into ``[-bound, bound]``
    never changes an output (``kernels.requantize.saturation_bounds``); ``|acc*m32| < 2**62`` and ``|c| < 2**61``
    keep the sum inside int64. ``full``: qmin/qmax are the output type's range (a saturating narrowing store)."""
    pitch = c.shape[0]
    for p in range(acc.shape[0] // pitch):
        a = acc[p * pitch:p * pitch + n]
        d = y[p * pitch:p * pitch + n]
        for lane in range(n):
            d[lane] = clamp_out((np.int64(a[lane]) * np.int64(m32[lane]) + c[lane]) >> shift[lane], full, qmin, qmax,
                                d)


def _depthwise_nhwc(x, x_zp, hw, src_offs, rowmap, xoffs, toffs, wv, chan_offs, bias, mult, shift, rnd, bound, m32, cf,
                    folded, full, out_zp, qmin, qmax, xt, acc, y, out, c, npix):
    """Depthwise convolution (module docstring) of ``x`` (flat N*C*H*W, 8-bit) into ``out`` (flat N*C*npix, 8-bit).
    Per block ``b`` of ``CB`` channels: ``wv`` (flat blocks x taps x 2*CB) int16 weight vectors, ``bias`` ...
    ``bound`` (blocks, CB) per lane (and ``m32``, ``cf`` of :func:`_requantize_lanes_folded`, which runs where
    ``folded``), ``chan_offs[b, l]`` = channel of lane ``l`` times ``npix``. ``rowmap[q]``: where input pixel ``q``
    lands in ``xt`` (times CB); ``src_offs``/``xoffs``/``toffs`` the row, pixel and tap offsets. Scratch: ``xt``
    int16 (zero border), ``acc`` int32 and ``y`` (out's dtype) of npix*CB. Allocates nothing.
    (A template: :func:`kernel_set` compiles it per instruction set, binding ``_tile`` and ``GROUP``.)"""
    n_img = x.shape[0] // (c * hw)
    zp = np.int64(x_zp)
    wstride = toffs.shape[0] * 2 * CB
    for n in range(n_img):
        for b in range(0, (c + CB - 1) // CB):
            ch0 = b * CB
            nch = min(CB, c - ch0)
            for cc in range(0, nch, 16):
                base = (n * c + ch0 + cc) * hw
                for q in range(0, hw, 16):
                    q = min(q, hw - 16)
                    _transpose_in(x, src_offs, base + q, xt, rowmap[q:q + 16], np.int64(cc), zp)
            for c0 in range(0, nch, GROUP):
                for p0 in range(0, npix, PX):  # the last tile overlaps the one before (npix >= PX)
                    _tile(xt, xoffs, min(p0, npix - PX), toffs, wv, b * wstride, c0, acc, np.int64(CB))
            if folded:
                _requantize_lanes_folded(acc, y, nch, m32[b], cf[b], shift[b], full, qmin, qmax)
            else:
                _requantize_lanes(acc, y, nch, bias[b], mult[b], shift[b], rnd[b], bound[b], out_zp, qmin, qmax)
            for l0 in range(0, nch, 16):
                for p in range(0, npix, 16):
                    p = min(p, npix - 16)
                    _transpose_out(y, src_offs[16:], p * CB + l0, out, chan_offs[b, l0:l0 + 16], n * c * npix + p,
                                   np.int64(0))


class KernelSet:
    """:func:`_depthwise_nhwc` compiled for one ``kernels.conv_int16.Isa`` ``isa`` (``depthwise_nhwc``)."""

    def __init__(self, isa):
        self.isa = isa
        globs = dict(globals(), _tile=make_tile(isa, PX), GROUP=2 * isa.lanes)
        self.depthwise_nhwc = compile_template(_depthwise_nhwc, isa.name, globs)


@functools.cache
def kernel_set(name: str) -> KernelSet:
    """The :class:`KernelSet` of instruction set ``name`` (a key of ``kernels.conv_int16.ISAS``), built once."""
    return KernelSet(ISAS[name])


KERNELS = kernel_set(ISA) if AVAILABLE else None  # what bind() runs


def wins(x_dtype, out_dtype, w, channels, per, h, wd, ho, wo, sw=1) -> bool:
    """Where this kernel runs (measured): 8-bit activations and outputs, int16 weights, one output channel per input
    channel, a multiple of 32 channels, at least :data:`MIN_CHANNELS`, and output planes of :data:`MIN_PIXELS` to
    :data:`MAX_PIXELS` pixels (:data:`MAX_PIXELS_S2` at column stride ``sw`` 2; input planes of at least 16), on a
    CPU with the int16-pair tiles."""
    limit = MAX_PIXELS_S2 if sw == 2 else MAX_PIXELS
    return (AVAILABLE and np.dtype(x_dtype).itemsize == 1 and np.dtype(out_dtype).itemsize == 1 and per == 1
            and channels % 32 == 0 and channels >= MIN_CHANNELS and MIN_PIXELS <= ho * wo <= limit
            and h * wd >= 16 and (w.size == 0 or int(np.abs(w.astype(np.int64)).max()) < 1 << 15))


def lane_channels(lanes, cb=CB):
    """int64 ``(cb,)``: the channel (within its block) of each lane: groups of ``2*lanes`` channels, their even
    channels first, then their odd ones (the two accumulators of :func:`make_tile`)."""
    g, j = np.divmod(np.arange(cb, dtype=np.int64), 2 * lanes)
    return g * 2 * lanes + np.where(j < lanes, 2 * j, 2 * (j - lanes) + 1)


def _weights(w, lanes, nblk):
    """int16 (nblk * taps * 2*CB): per block and tap, per group of 2L channels ``c0``, the vector ``(w[c0], 0,
    w[c0+2], 0, ...)`` at ``2*c0`` and ``(0, w[c0+1], 0, w[c0+3], ...)`` after it (zeros past the channels)."""
    c, taps = w.shape[0], w.shape[2] * w.shape[3]
    wflat = np.zeros((nblk * CB, taps), np.int64)
    wflat[:c] = w.reshape(c, taps)
    wv = np.zeros((nblk, taps, 2 * CB), np.int16)
    for c0 in range(0, CB, 2 * lanes):
        for k in range(2 * lanes):
            col = 2 * c0 + k + (2 * lanes if k % 2 else 0)
            wv[:, :, col] = wflat.reshape(nblk, CB, taps)[:, c0 + k]
    return wv.reshape(-1)


def _lane_requant(chan, bias, mult, shift, bound, out_zp, qmin, qmax, out_dtype):
    """The requantization arguments of the lanes, channel ``chan[b, l]`` each (blocks, CB): ``(bias, mult, shift,
    rnd, bound, m32, c, folded, full)`` -- those of :func:`_requantize_lanes`, the int32 multipliers and folded
    constants of :func:`_requantize_lanes_folded`, whether every lane's constant fits (tested as
    ``kernels.requantize.requantize_row`` tests it: in float, conservative) and whether qmin/qmax are the output
    type's range."""
    b_l, m_l = np.asarray(bias, np.int64)[chan], np.asarray(mult, np.int64)[chan]
    sh_l = np.asarray(shift, np.int64)[chan]
    rnd_l = np.where(sh_l > 0, np.left_shift(np.ones_like(sh_l), np.maximum(sh_l - 1, 0)), 0)
    big = np.abs(b_l.astype(np.float64)) * np.abs(m_l.astype(np.float64)) + rnd_l + abs(float(out_zp)) * 2.0 ** sh_l
    folded = bool((big < 2.0 ** 61).all())
    cf = (b_l * m_l + rnd_l + np.left_shift(np.int64(out_zp), sh_l)) if folded else b_l
    info = np.iinfo(out_dtype)
    return (b_l, m_l, sh_l, rnd_l, np.asarray(bound, np.int64)[chan], m_l.astype(np.int32), cf, folded,
            qmin == info.min and qmax == info.max)


def bind(x_shape, x_zp, w, stride, pads, dilation, out_shape, out_dtype, bias, mult, shift, bound, out_zp, qmin, qmax):
    """``run(x, out)`` of :func:`_depthwise_nhwc` for inputs of ``x_shape`` and ``out`` (N, C, Ho, Wo; 8-bit
    ``out_dtype``), ``w`` (C, 1, kh, kw); the caller validated every argument, proved the int32 bound and
    :func:`wins`."""
    _, c, h, wd = x_shape
    kh, kw = w.shape[2], w.shape[3]
    top, left, bottom, right = pads
    hp, wp = top + h + bottom, left + wd + right
    ho, wo = out_shape[2], out_shape[3]
    npix, hw = ho * wo, h * wd
    kernel = KERNELS.depthwise_nhwc
    lanes = KERNELS.isa.lanes
    nblk = (c + CB - 1) // CB
    chan = (np.arange(nblk, dtype=np.int64)[:, None] * CB + lane_channels(lanes)[None, :]).clip(0, c - 1)
    rq = _lane_requant(chan, bias, mult, shift, bound, out_zp, qmin, qmax, out_dtype)
    ky, kx = np.divmod(np.arange(kh * kw, dtype=np.int64), kw)
    oh, ow = np.divmod(np.arange(npix, dtype=np.int64), wo)
    ih, iw = np.divmod(np.arange(hw, dtype=np.int64), wd)
    src_offs = np.concatenate([np.arange(16, dtype=np.int64) * hw, np.arange(16, dtype=np.int64) * CB])
    head = (x_zp, hw, src_offs, ((ih + top) * wp + iw + left) * CB, ((oh * stride[0]) * wp + ow * stride[1]) * CB,
            ((ky * dilation[0]) * wp + kx * dilation[1]) * CB, _weights(w, lanes, nblk), chan * npix) + rq
    tail = (out_zp, qmin, qmax)

    def run(x, out):
        kernel(x.reshape(-1), *head, *tail, np.zeros(hp * wp * CB, np.int16), np.empty(npix * CB, np.int32),
               np.empty(npix * CB, out.dtype), out.reshape(-1), c, npix)
        return out

    return run
