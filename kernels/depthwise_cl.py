"""Depthwise convolutions of small planes, channels last, with the requantization fused (int32 accumulators).

On a small plane (MobileNetV2's 14x14 and 7x7 layers of 384-960 channels) the per-channel kernels of
:mod:`kernels.depthwise` and :mod:`kernels.depthwise_int16` pay a fixed cost per channel (plane set-up, a tile of
64 outputs for 49, one requantization call) that is several times the multiply-adds. Here the image is first
copied into a channels-last padded buffer ``xt`` (``xt[r*wp + c, ch] = x[ch, r - top, c - left] - x_zp``, zero
on the border), every output pixel then sums its taps with vector operations across the channels, the int32
accumulators are transposed back to one row per channel and each row is requantized by ``requantize_row``,
exactly as the other depthwise kernels requantize theirs. :func:`wins` says where (measured).

Exactness. Every partial sum of an output is a sum of a subset of its terms ``(x - x_zp) * w[c, t]`` (the border
adds 0), at most ``taps * max|x - x_zp| * max|w|`` in magnitude; the caller
(:func:`kernels.conv2d_direct.bind_direct_requantized`) admits only convolutions where that is below 2**31 - 1,
so the int32 products and sums are the exact integers, whatever the order. The requantization is the shared
``requantize_row`` on the same integers and per-channel arguments: the same outputs.
"""
import numpy as np

from ._jit import njit_noalloc
from .requantize import requantize_row

MAX_PIXELS = 64  # wins: output planes up to 8x8 (measured: 2.2x faster on 7x7, none on 14x14)
MIN_CHANNELS = 16


def wins(channels: int, ho: int, wo: int, per: int) -> bool:
    """Where this kernel runs instead of the per-channel ones: one output channel per input channel, at least
    :data:`MIN_CHANNELS` channels and output planes of at most :data:`MAX_PIXELS` pixels (docs/PERFORMANCE.md)."""
    return per == 1 and channels >= MIN_CHANNELS and ho * wo <= MAX_PIXELS


@njit_noalloc
def _depthwise_cl(x, x_zp, w, kh, kw, sh, sw, top, left, dh, dw, wo, wp, xt, acc, acc_t, bias, mult, shift, bound,
                  out_zp, qmin, qmax, out):
    """``out`` (N, C, Ho*Wo) = the requantized depthwise convolution of ``x`` (N, C, H, W); ``w`` int32
    (kh*kw, C); scratch: ``xt`` int32 (Hp*wp, C) with a zero border (only its interior is written), ``acc``
    int32 (Ho*Wo, C), ``acc_t`` int32 (C, Ho*Wo). Allocates nothing."""
    n_img, c, h, wd = x.shape
    npix = acc.shape[0]
    zp = np.int32(x_zp)
    for n in range(n_img):
        for ih in range(h):
            for iw in range(wd):
                dst = xt[(ih + top) * wp + iw + left]
                for ch in range(c):
                    dst[ch] = np.int32(x[n, ch, ih, iw]) - zp
        for p in range(npix):
            a = acc[p]
            for ch in range(c):
                a[ch] = 0
            oh = p // wo
            ow = p - oh * wo
            for ky in range(kh):
                for kx in range(kw):
                    src = xt[(oh * sh + ky * dh) * wp + ow * sw + kx * dw]
                    wt = w[ky * kw + kx]
                    for ch in range(c):
                        a[ch] += src[ch] * wt[ch]
        for ch in range(c):
            row = acc_t[ch]
            for p in range(npix):
                row[p] = acc[p, ch]
            requantize_row(row, out[n, ch], bias[ch], mult[ch], shift[ch], bound[ch], out_zp, qmin, qmax)


def bind(x_shape, x_zp, w, stride, pads, dilation, out_shape, bias, mult, shift, bound, out_zp, qmin, qmax):
    """``run(x, out)`` of :func:`_depthwise_cl` for inputs of ``x_shape`` and ``out`` (N, C, Ho, Wo), ``w``
    (C, 1, kh, kw); the caller validated every argument and proved the int32 bound (module docstring)."""
    n_img, c, h, wd = x_shape
    kh, kw = w.shape[2], w.shape[3]
    top, left, bottom, right = pads
    hp, wp = top + h + bottom, left + wd + right
    ho, wo = out_shape[2], out_shape[3]
    w32 = np.ascontiguousarray(w.reshape(c, kh * kw).T.astype(np.int32))
    head = (x_zp, w32, kh, kw, stride[0], stride[1], top, left, dilation[0], dilation[1], wo, wp)
    tail = (bias, mult, shift, bound, out_zp, qmin, qmax)

    def run(x, out):
        xt = np.zeros((hp * wp, c), np.int32)
        _depthwise_cl(x, *head, xt, np.empty((ho * wo, c), np.int32), np.empty((c, ho * wo), np.int32), *tail,
                      out.reshape(n_img, c, ho * wo))
        return out

    return run
