"""Depthwise convolutions of small planes, channels last, with the requantization fused (int32 accumulators).

On a small plane (MobileNetV2's 14x14 and 7x7 layers of 384-960 channels) the per-channel kernels of
:mod:`kernels.depthwise` and :mod:`kernels.depthwise_int16` pay a fixed cost per channel (plane set-up, a tile of
64 outputs for 49, one requantization call) that is several times the multiply-adds. Here the image is first
copied into a channels-last padded buffer ``xt`` (``xt[r*wp + c, ch] = x[ch, r - top, c - left] - x_zp``, zero
on the border; int16 where every ``x - x_zp`` fits it, as for 8-bit activations, with the weights int16 too:
half the memory traffic of int32 operands), every
output pixel then sums its taps with vector operations across the channels (a kernel row of 3 or 5 taps in one
pass, the accumulator row loaded and stored once per kernel row), the int32
accumulators are transposed back to one row per channel and each row is requantized by ``requantize_row``,
exactly as the other depthwise kernels requantize theirs. :func:`wins` says where (measured).

Exactness. Every partial sum of an output is a sum of a subset of its terms ``(x - x_zp) * w[c, t]`` (the border
adds 0), at most ``max|x - x_zp| * sum_t |w[c, t]|`` in magnitude; the caller
(:func:`kernels.conv2d_direct.bind_direct_requantized`) admits only convolutions where that is below 2**31 - 1 for
every channel,
so the int32 products and sums are the exact integers, whatever the order. The requantization is the shared
``requantize_row`` on the same integers and per-channel arguments: the same outputs.
"""
import numpy as np

from ._jit import njit_noalloc
from .requantize import requantize_row

MAX_PIXELS = 64  # wins: output planes up to 8x8 (measured: 2.2x faster on 7x7, none on 14x14)
MIN_CHANNELS = 16


def xt_dtype(x_dtype, x_zp):
    """int16 where every ``x - x_zp`` of ``x_dtype`` fits it (8-bit activations), else int32."""
    info = np.iinfo(x_dtype)
    return np.int16 if max(abs(int(info.min) - int(x_zp)), abs(int(info.max) - int(x_zp))) < 1 << 15 else np.int32


def wins(channels: int, ho: int, wo: int, per: int) -> bool:
    """Where this kernel runs instead of the per-channel ones: one output channel per input channel, at least
    :data:`MIN_CHANNELS` channels and output planes of at most :data:`MAX_PIXELS` pixels (docs/PERFORMANCE.md)."""
    return per == 1 and channels >= MIN_CHANNELS and ho * wo <= MAX_PIXELS


@njit_noalloc
def _fill(xn, zp, xt, top, left, wp):
    """``xt[(ih + top)*wp + iw + left, ch] = xn[ch, ih, iw] - zp`` (the border cells are left as they are: 0)."""
    c, h, wd = xn.shape
    for ih in range(h):
        for iw in range(wd):
            dst = xt[(ih + top) * wp + iw + left]
            for ch in range(c):
                dst[ch] = np.int32(xn[ch, ih, iw]) - zp  # fits xt's dtype (xt_dtype)


@njit_noalloc
def _taps(a, xt, w, q, kw, dw, first):
    """``a[ch] (+)= sum_kx xt[q + kx*dw, ch] * w[kx, ch]`` (``w`` one kernel row's weights, (kw, C)): one kernel
    row of one output pixel, its taps summed in one pass over the channels (3 and 5 taps written out: one load
    and store of ``a`` per kernel row instead of per tap)."""
    c = a.shape[0]
    if kw == 3:
        s0, s1, s2 = xt[q], xt[q + dw], xt[q + 2 * dw]
        w0, w1, w2 = w[0], w[1], w[2]
        if first:
            for ch in range(c):
                a[ch] = (np.int32(s0[ch]) * np.int32(w0[ch]) + np.int32(s1[ch]) * np.int32(w1[ch])
                         + np.int32(s2[ch]) * np.int32(w2[ch]))
        else:
            for ch in range(c):
                a[ch] += (np.int32(s0[ch]) * np.int32(w0[ch]) + np.int32(s1[ch]) * np.int32(w1[ch])
                          + np.int32(s2[ch]) * np.int32(w2[ch]))
        return
    if kw == 5:
        s0, s1, s2, s3, s4 = xt[q], xt[q + dw], xt[q + 2 * dw], xt[q + 3 * dw], xt[q + 4 * dw]
        w0, w1, w2, w3, w4 = w[0], w[1], w[2], w[3], w[4]
        if first:
            for ch in range(c):
                a[ch] = (np.int32(s0[ch]) * np.int32(w0[ch]) + np.int32(s1[ch]) * np.int32(w1[ch])
                         + np.int32(s2[ch]) * np.int32(w2[ch]) + np.int32(s3[ch]) * np.int32(w3[ch])
                         + np.int32(s4[ch]) * np.int32(w4[ch]))
        else:
            for ch in range(c):
                a[ch] += (np.int32(s0[ch]) * np.int32(w0[ch]) + np.int32(s1[ch]) * np.int32(w1[ch])
                          + np.int32(s2[ch]) * np.int32(w2[ch]) + np.int32(s3[ch]) * np.int32(w3[ch])
                          + np.int32(s4[ch]) * np.int32(w4[ch]))
        return
    if first:
        for ch in range(c):
            a[ch] = 0
    for kx in range(kw):
        src = xt[q + kx * dw]
        wt = w[kx]
        for ch in range(c):
            a[ch] += np.int32(src[ch]) * np.int32(wt[ch])


@njit_noalloc
def _depthwise_cl(x, x_zp, w, kh, sh, sw, top, left, dh, dw, wo, wp, xt, acc, acc_t, bias, mult, shift, bound,
                  out_zp, qmin, qmax, out):
    """``out`` (N, C, Ho*Wo) = the requantized depthwise convolution of ``x`` (N, C, H, W); ``w`` (kh, kw, C)
    (int16 or int32); scratch: ``xt`` (Hp*wp, C) of :func:`xt_dtype` with a zero border (only its interior is
    written), ``acc`` int32 (Ho*Wo, C), ``acc_t`` int32 (C, Ho*Wo). Allocates nothing."""
    n_img, c = x.shape[0], x.shape[1]
    npix = acc.shape[0]
    kw = w.shape[1]
    zp = np.int32(x_zp)
    for n in range(n_img):
        _fill(x[n], zp, xt, top, left, wp)
        for p in range(npix):
            oh = p // wo
            ow = p - oh * wo
            for ky in range(kh):
                _taps(acc[p], xt, w[ky], (oh * sh + ky * dh) * wp + ow * sw, kw, dw, ky == 0)
        for ch in range(c):
            row = acc_t[ch]
            for p in range(npix):
                row[p] = acc[p, ch]
            requantize_row(row, out[n, ch], bias[ch], mult[ch], shift[ch], bound[ch], out_zp, qmin, qmax)


def bind(x_shape, x_zp, w, stride, pads, dilation, out_shape, bias, mult, shift, bound, out_zp, qmin, qmax):
    """``run(x, out)`` of :func:`_depthwise_cl` for inputs of ``x_shape`` and ``out`` (N, C, Ho, Wo), ``w``
    (C, 1, kh, kw); the caller validated every argument and proved the int32 bound (module docstring)."""
    n_img, c, h, wd = x_shape
    kh = w.shape[2]
    top, left, bottom, right = pads
    hp, wp = top + h + bottom, left + wd + right
    ho, wo = out_shape[2], out_shape[3]
    wdt = np.int16 if w.size == 0 or int(np.abs(w.astype(np.int64)).max()) < 1 << 15 else np.int32
    wt = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0).astype(wdt))
    head = (x_zp, wt, kh, stride[0], stride[1], top, left, dilation[0], dilation[1], wo, wp)
    tail = (bias, mult, shift, bound, out_zp, qmin, qmax)

    def run(x, out):
        _depthwise_cl(x, *head, np.zeros((hp * wp, c), xt_dtype(x.dtype, x_zp)), np.empty((ho * wo, c), np.int32),
                      np.empty((c, ho * wo), np.int32), *tail, out.reshape(n_img, c, ho * wo))
        return out

    return run
