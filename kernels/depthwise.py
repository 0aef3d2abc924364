"""Depthwise convolution (one input channel per group, any kernel size, stride, dilation, channel multiplier),
in exact float arithmetic, with the requantization optionally fused in: the hot loop of mobile networks.

Same result as :func:`kernels.conv2d_direct.conv2d_direct` (which dispatches here when :func:`plan` allows it).

Layout. Each input plane, with ``x_zp`` subtracted, is written into the ``sh*sw`` polyphase components of its
zero-bordered padded plane ``P`` (shape ``(top + H + bottom, left + W + right)``): component ``(py, px)`` holds
``P[r*sh + py, c*sw + px]`` at ``[r, c]``, row pitch ``wq``. The border holds 0 = ``x_zp - x_zp``, exactly what
padding contributes; it is written once per call (every channel overwrites the same interior cells). Output
``(oh, ow)`` of tap ``(ky, kx)`` reads component ``((ky*dh) % sh, (kx*dw) % sw)`` at
``[oh + (ky*dh)//sh, ow + (kx*dw)//sw]``, so for a block of output rows every tap is one flat unit-stride
loop over a "wide" row range of pitch ``wq`` (columns ``>= Wo`` are computed and discarded). All reads stay
inside the component because ``(Ho-1)*sh + (kh-1)*dh < top + H + bottom`` (same for W).

Exactness. The arithmetic is float32 (or float64) on integer values. :func:`plan` picks float32 only when
``taps * max|x - x_zp| * max|w| < 2**24`` (float64: ``< 2**53``): every input, product and partial sum is then
an integer of magnitude below the mantissa limit, exactly representable, and IEEE operations whose exact
result is representable return it exactly, in any order. The wide junk columns hold sums of the same kind of
bounded terms, so they are finite and harmless.

Fused requantization: each block of accumulators goes through ``requantize_row`` (the branch-free path of
``kernels.requantize``), which truncates the float accumulator to int64 (exact: it is an integer).

Column stride 2 (8- and 16-bit activations): :func:`depthwise` runs :mod:`kernels.depthwise_s2` instead (int16
column pairs read from the centred plane, int32 accumulators); 16-bit activations elsewhere
:mod:`kernels.depthwise_int16` (int16 tap pairs), and 8-bit ones from 3x3 at row stride 1 -- each where
``kernels.conv_int16.plan`` proves it exact and the host has AVX-512BW or AVX2; the packed weights are kept per
weight array (the callers keep one float weight array per node).
"""
import weakref

import numpy as np

from . import depthwise_int16, depthwise_s2
from ._jit import njit, njit_noalloc
from .polyphase import phase_offsets, plane_geometry, tap_offsets
from .requantize import requantize_row

F32_LIMIT = 1 << 24
F64_LIMIT = 1 << 53
BLOCK = 4096  # accumulator elements per block (16 KiB of float32: stays in L1 with its input rows)
VEC = 64      # loop lengths are rounded up to a multiple of this (see _depthwise)


def plan(taps: int, bound: int):
    """Float dtype that computes a depthwise convolution exactly, or None.

    ``bound`` is ``max|x - x_zp| * max|w|``; every partial sum is at most ``taps * bound``."""
    if taps * bound < F32_LIMIT:
        return np.float32
    if taps * bound < F64_LIMIT:
        return np.float64
    return None


@njit
def _fill_row(src, dst, x_zp):
    """dst[j] = src[j] - x_zp (unit stride), converted exactly to dst's float dtype."""
    for j in range(dst.shape[0]):
        dst[j] = np.int64(src[j]) - x_zp


@njit
def _fill_plane_s2(xc, xq, rowoff, qe, qo, x_zp):
    """Deinterleave every row of the plane xc into its two column phases: xq[rowoff[i] + qe + j] = xc[i, 2j] - x_zp,
    xq[rowoff[i] + qo + j] = xc[i, 2j+1] - x_zp.

    Computed in xq's float type: the input value and x_zp (|x_zp| <= 2**16) are exact floats and so is their
    difference (|x - x_zp| < 2**17 < 2**24), so the float subtraction returns exactly the integer difference --
    the same values as an integer subtraction, in a loop that vectorizes far better with the stride-2 reads (one
    call per plane: 96x112x112 int8 planes 0.59 -> 0.13 ms)."""
    h, wd = xc.shape
    no = wd // 2
    z = xq.dtype.type(x_zp)  # exact float arithmetic, as in _fill_row_s2
    for i in range(h):
        src = xc[i]
        a = rowoff[i] + qe
        b = rowoff[i] + qo
        de = xq[a:a + no]
        do = xq[b:b + no]
        for j in range(no):
            de[j] = xq.dtype.type(src[2 * j]) - z
            do[j] = xq.dtype.type(src[2 * j + 1]) - z
        if wd > 2 * no:
            xq[a + no] = np.int64(src[2 * no]) - x_zp


@njit
def _fill_row_strided(src, dst, x_zp, step):
    """dst[j] = src[j * step] - x_zp."""
    for j in range(dst.shape[0]):
        dst[j] = np.int64(src[j * step]) - x_zp


@njit
def _fill_plane(xc, xq, q0, wq, x_zp):
    """Stride-1 layout: xq[q0 + i*wq + j] = xc[i, j] - x_zp."""
    h, wd = xc.shape
    for i in range(h):
        src = xc[i]
        dst = xq[q0 + i * wq:q0 + i * wq + wd]
        for j in range(wd):
            dst[j] = np.int64(src[j]) - x_zp


@njit
def _taps_kx3(acc, xq, toff, base, wrow, kh):
    """acc = sum over the kh*3 taps t of wrow[t] * xq[toff[t] + base + j], three taps per pass (few enough
    operands for each loop to vectorize)."""
    n = acc.shape[0]
    for ky in range(kh):
        t = ky * 3
        w0 = wrow[t]
        w1 = wrow[t + 1]
        w2 = wrow[t + 2]
        o0 = toff[t] + base
        o1 = toff[t + 1] + base
        o2 = toff[t + 2] + base
        a0 = xq[o0:o0 + n]
        a1 = xq[o1:o1 + n]
        a2 = xq[o2:o2 + n]
        if ky == 0:
            for j in range(n):
                acc[j] = w0 * a0[j] + w1 * a1[j] + w2 * a2[j]
        else:
            for j in range(n):
                acc[j] += w0 * a0[j] + w1 * a1[j] + w2 * a2[j]


@njit
def _taps_kx5(acc, xq, toff, base, wrow, kh):
    """acc = sum over the kh*5 taps t of wrow[t] * xq[toff[t] + base + j], a kernel row of five taps per pass
    (one load and store of acc per kernel row instead of per tap)."""
    n = acc.shape[0]
    for ky in range(kh):
        t = ky * 5
        w0, w1, w2, w3, w4 = wrow[t], wrow[t + 1], wrow[t + 2], wrow[t + 3], wrow[t + 4]
        o0, o1, o2, o3, o4 = (toff[t] + base, toff[t + 1] + base, toff[t + 2] + base, toff[t + 3] + base,
                              toff[t + 4] + base)
        a0, a1, a2, a3, a4 = xq[o0:o0 + n], xq[o1:o1 + n], xq[o2:o2 + n], xq[o3:o3 + n], xq[o4:o4 + n]
        if ky == 0:
            for j in range(n):
                acc[j] = w0 * a0[j] + w1 * a1[j] + w2 * a2[j] + w3 * a3[j] + w4 * a4[j]
        else:
            for j in range(n):
                acc[j] += w0 * a0[j] + w1 * a1[j] + w2 * a2[j] + w3 * a3[j] + w4 * a4[j]


@njit
def _tap(acc, a0, w0):
    """acc += w0*a0."""
    for j in range(acc.shape[0]):
        acc[j] += w0 * a0[j]


@njit
def _copy(src, dst):
    """dst[j] = src[j] over dst's length."""
    for j in range(dst.shape[0]):
        dst[j] = src[j]


@njit
def _copy_rows(src, dst, pitch):
    """dst[i, j] = src[i*pitch + j] for the rows of dst (2-D)."""
    rows, cols = dst.shape
    for i in range(rows):
        d = dst[i]
        for j in range(cols):
            d[j] = src[i * pitch + j]


@njit
def _store_rows(src, dst, pitch):
    """dst[i, j] = int(src[i*pitch + j]) (exact float integers to integers) for the rows of dst (2-D)."""
    rows, cols = dst.shape
    for i in range(rows):
        d = dst[i]
        for j in range(cols):
            d[j] = np.int64(src[i * pitch + j])


def _geometry(x_shape, kh, kw, sh, sw, top, left, bottom, right, dh, dw):
    """What :func:`_depthwise` needs of the shapes, worked out once per bind: ``(toff, rowoff, col_q, col_iw0,
    col_cnt, wq, rows_blk)`` -- each tap's read offset in the polyphase plane (:func:`kernels.polyphase.
    tap_offsets`), where the input rows land (:func:`kernels.polyphase.phase_offsets`), the row pitch and the
    output rows per block."""
    h, wd = x_shape[2], x_shape[3]
    wq, psz = plane_geometry(h, wd, top, left, bottom, right, sh, sw)
    rowoff, col_q, col_iw0, col_cnt = phase_offsets(h, wd, top, left, sh, sw, psz, wq)
    return tap_offsets(kh, kw, sh, sw, dh, dw, psz, wq), rowoff, col_q, col_iw0, col_cnt, wq, max(1, BLOCK // wq)


@njit_noalloc
def _depthwise(x, x_zp, wf, kh, kw, sh, sw, left, toff, rowoff, col_q, col_iw0, col_cnt, wq, rows_blk, xq, acc, yb, out,
               fuse, bias, mult, shift, bound, out_zp, qmin, qmax):
    """Depthwise convolution, see the module docstring; geometry from :func:`_geometry`. ``wf``: float weights
    (Cout, kh*kw), same dtype as the zeroed plane buffer ``xq`` (sh*sw*hq*wq) and the accumulator buffer ``acc``
    (>= max(BLOCK, wq) + wq); ``yb`` (``out``'s dtype, ``rows_blk*wq + VEC``) holds a block's requantized rows.
    Without ``fuse``, ``out`` (an integer array) receives the accumulators; with it, their requantization
    (``bound[c] > 0`` for every channel, as :func:`kernels.requantize.saturation_bounds` gives). Allocates nothing
    (:func:`kernels._jit.njit_noalloc`)."""
    n_img, c_in, h, wd = x.shape
    cout = wf.shape[0]
    per = cout // c_in  # channel multiplier
    ho = out.shape[2]
    wo = out.shape[3]
    taps = kh * kw
    zero = xq.dtype.type(0)
    for n in range(n_img):
        for ci in range(c_in):
            xc = x[n, ci]
            if sw == 1 and sh == 1 and wd < 32:  # short rows: one call per plane
                _fill_plane(xc, xq, rowoff[0] + col_q[0], wq, x_zp)
            elif sw == 1:
                for ih in range(h):
                    q0 = rowoff[ih] + col_q[0]
                    _fill_row(xc[ih], xq[q0:q0 + wd], x_zp)
            elif sw == 2:
                qe = col_q[left % 2]  # even input columns land in phase left % 2, odd ones in the other
                qo = col_q[(left + 1) % 2]
                _fill_plane_s2(xc, xq, rowoff, qe, qo, x_zp)
            else:
                for ih in range(h):
                    for px in range(sw):
                        cnt = col_cnt[px]
                        if cnt > 0:
                            q0 = rowoff[ih] + col_q[px]
                            _fill_row_strided(xc[ih, col_iw0[px]:], xq[q0:q0 + cnt], x_zp, sw)
            for mm in range(per):
                co = ci * per + mm
                wrow = wf[co]
                for oh0 in range(0, ho, rows_blk):
                    oh1 = min(ho, oh0 + rows_blk)
                    base = oh0 * wq
                    # rounded up to a multiple of VEC: short loops then run entirely in the vectorized body (the
                    # extra columns read the zero slack of the buffers and are discarded)
                    length = ((oh1 - oh0 - 1) * wq + wo + VEC - 1) // VEC * VEC
                    blk = acc[:length]
                    if kw == 3:
                        _taps_kx3(blk, xq, toff, base, wrow, kh)
                    elif kw == 5:
                        _taps_kx5(blk, xq, toff, base, wrow, kh)
                    else:
                        blk[:] = zero
                        for t in range(taps):
                            o = toff[t] + base
                            _tap(blk, xq[o:o + length], wrow[t])
                    if fuse:
                        requantize_row(blk, yb, bias[co], mult[co], shift[co], bound[co], out_zp, qmin, qmax)
                        if wo < 32:
                            _copy_rows(yb, out[n, co, oh0:oh1], wq)
                        else:
                            for oh in range(oh0, oh1):
                                k0 = (oh - oh0) * wq
                                _copy(yb[k0:k0 + wo], out[n, co, oh])
                    else:
                        _store_rows(acc, out[n, co, oh0:oh1], wq)


def buffers(x_shape, w_shape, stride, pads, dtype):
    """Zeroed plane buffer and accumulator buffer for :func:`_depthwise`."""
    wq, psz = plane_geometry(*x_shape[2:], *pads, *stride)
    xq = np.zeros(stride[0] * stride[1] * psz + VEC, dtype)
    acc = np.zeros(max(BLOCK, wq) + wq + VEC, dtype)
    return xq, acc


_PREP = {}  # (id(wf), kernel module name) -> (weakref to wf, geometry key, the module's prepare result)


def _cached_prep(wf, module, *geo):
    """``module.prepare(wf, *geo)`` (:mod:`kernels.depthwise_int16` or :mod:`kernels.depthwise_s2`), kept while
    ``wf`` lives (entries leave with their array)."""
    key = (id(wf), module.__name__)
    geo_key = geo + (wf.shape, wf.dtype.str)
    entry = _PREP.get(key)
    if entry is not None and entry[0]() is wf and entry[1] == geo_key:
        return entry[2]
    prep = module.prepare(wf, *geo)
    _PREP[key] = (weakref.ref(wf, lambda _, k=key: _PREP.pop(k, None)), geo_key, prep)
    return prep


def _int16_admits(x_dtype, x_zp, s_max, sumw, fuse, bias) -> bool:
    """Whether :mod:`kernels.depthwise_int16` or :mod:`kernels.depthwise_s2` computes a call on ``x_dtype`` inputs
    exactly (their module docstrings): ``s_max`` and ``sumw`` from their ``prepare``."""
    if x_dtype not in depthwise_int16.X_DTYPES:
        return False
    pad = int(x_zp) - depthwise_int16.x_center(x_dtype)
    if not depthwise_int16.plan(x_dtype, pad, s_max):
        return False
    # the correction pad * sum_t w folded into the bias stays far inside int64
    corr = abs(pad) * (int(np.abs(sumw).max()) if sumw.size else 0)
    return not fuse or not bias.size or int(np.abs(bias).max()) + corr < 1 << 62


# 8-bit activations: the float32 loop is exact, and faster than the int16-pair kernel (which packs a pair plane
# per channel) below 3x3 and for 3x3 strided in both directions on large planes; from 3x3 at column stride 1 on
# the pair kernel is faster, ~1.1-1.6x at row stride 1 (measured: MobileNetV2 and PP-OCR det/rec 3x3 layers at
# 7x7-160x160, 5x5 at 2x96-20x20), 1.05-1.9x at PP-OCR's row stride 2 (3x3 and 5x5 at 3x96-24x160; AVX2)
PAIR_MIN_TAPS_8BIT = 9


def column_pairs(x_dtype, x_zp, wf, kh, kw, stride, dilation, fuse=False, bias=None):
    """The prepared weights of :mod:`kernels.depthwise_s2` (column stride 2: int16 column pairs, faster than the
    float loop and the pair kernel at every measured shape, 8- and 16-bit) where it takes the convolution and
    proves it exact, else None."""
    if not depthwise_s2.takes(x_dtype, stride, dilation):
        return None
    prep = _cached_prep(wf, depthwise_s2, kh, kw)
    if prep is None or not _int16_admits(np.dtype(x_dtype), x_zp, prep[2], prep[1], fuse, bias):
        return None
    return prep


def takes_pairs(x_dtype, kh, kw, stride) -> bool:
    """Whether :func:`bind` tries the int16-pair kernel first: 16-bit activations, and 8-bit ones with at least
    ``PAIR_MIN_TAPS_8BIT`` taps at column stride 1 (where it is proven exact and the CPU has it)."""
    dt = np.dtype(x_dtype)
    return (depthwise_int16.AVAILABLE and dt in depthwise_int16.X_DTYPES
            and (dt.itemsize == 2 or kh * kw >= PAIR_MIN_TAPS_8BIT and stride[1] == 1))


def bind(x_shape, x_dtype, x_zp, wf, kh, kw, stride, pads, dilation, out_shape, fuse=False, bias=None, mult=None,
         shift=None, bound=None, out_zp=0, qmin=0, qmax=0):
    """The depthwise convolution of :func:`depthwise` for inputs of ``x_shape``/``x_dtype`` and outputs of
    ``out_shape``, decided and set up once: returns ``run(x, out)`` (arguments already validated by the caller,
    ``wf`` float (Cout, kh*kw) of the dtype :func:`plan` chose). At column stride 2 the column-pair kernel
    (:func:`column_pairs`), else where :func:`takes_pairs` the int16-pair kernel, each where it is proven exact;
    everything else :func:`_depthwise`. Scratch buffers are fresh per call."""
    prep = column_pairs(x_dtype, x_zp, wf, kh, kw, stride, dilation, fuse, bias)
    if prep is not None:
        return depthwise_s2.bind(x_shape, x_dtype, x_zp, prep, kh, kw, stride, pads, dilation, out_shape, fuse,
                                 bias, mult, shift, bound, out_zp, qmin, qmax)
    if takes_pairs(x_dtype, kh, kw, stride):
        prep = _cached_prep(wf, depthwise_int16, kh, kw, stride[1], dilation[1])
        if prep is not None and _int16_admits(np.dtype(x_dtype), x_zp, prep[3], prep[2], fuse, bias):
            return depthwise_int16.bind(x_shape, x_dtype, x_zp, prep, kh, kw, stride, pads, dilation, out_shape,
                                        fuse, bias, mult, shift, bound, out_zp, qmin, qmax)
    none = np.zeros(0, np.int64)
    if not fuse:
        bias = mult = shift = bound = none
    geo = _geometry(x_shape, kh, kw, *stride, *pads, *dilation)
    head = (x_zp, wf, kh, kw, stride[0], stride[1], pads[1]) + geo
    tail = (fuse, bias, mult, shift, bound, out_zp, qmin, qmax)
    w_shape = (wf.shape[0], 1, kh, kw)
    n_yb = geo[-1] * geo[-2] + VEC if fuse else 1  # rows_blk * wq

    def run(x, out):
        _depthwise(x, *head, *buffers(x_shape, w_shape, stride, pads, wf.dtype), np.empty(n_yb, out.dtype), out,
                   *tail)
        return out

    return run


def depthwise(x, x_zp, wf, kh, kw, stride, pads, dilation, out, fuse=False, bias=None, mult=None, shift=None,
              bound=None, out_zp=0, qmin=0, qmax=0):
    """:func:`bind` for ``x`` and ``out``, run once."""
    return bind(x.shape, x.dtype, x_zp, wf, kh, kw, stride, pads, dilation, out.shape, fuse, bias, mult, shift,
                bound, out_zp, qmin, qmax)(x, out)
