"""3x3 depthwise convolution, stride 1 or 2, dilation 1: the hot loop of mobile networks.

Same result as :func:`kernels.conv2d.conv2d_direct` (which dispatches here when the shape fits), computed
row by row with the nine taps in registers: for each output row, ``acc[ow] = sum of 9 products`` read from
three rows of the zero-point-subtracted, zero-bordered input plane (unit-stride reads for stride 1,
interleaved stride-2 reads for stride 2; both vectorize).

The arithmetic is float32 on integer values and is exact: the wrapper only takes this path when
``9 * max|x - x_zp| * max|w| < 2**24``, so every product and every partial sum is an integer below 2**24
(exactly representable; IEEE operations with representable exact results are exact). In practice: 8-bit
activations with 8-bit weights.
"""
import numpy as np

from ._jit import njit
from .requantize import requantize_row

F32_EXACT = 1 << 24


def applies(x, w, stride, dilation, groups, bound, strides=(2,)) -> bool:
    """True when :func:`depthwise3x3` computes ``conv2d_acc`` exactly for these arguments and is the faster
    path: measured on MobileNetV2, it wins for stride 2 (its polyphase-free strided reads), while the generic
    direct loop is faster for stride 1; ``strides`` widens the choice (the tests use both)."""
    cout, cin_g, kh, kw = w.shape
    return (cin_g == 1 and kh == 3 and kw == 3 and tuple(dilation) == (1, 1) and stride[0] == stride[1]
            and stride[0] in strides and groups == x.shape[1] and 9 * bound < F32_EXACT)


@njit
def _depthwise3x3(x, x_zp, w, s, top, left, bottom, right, out, fuse, bias, mult, shift, bound, out_zp, qmin,
                  qmax):
    """Row-wise 3x3 depthwise loop (float32, exact; see module docstring). ``fuse``: requantize each output
    row on the spot, as ``kernels.requantize``'s branch-free path (bound[c] > 0 for every channel)."""
    n_img, c_in, h, wd = x.shape
    cout = w.shape[0]
    per = cout // c_in  # channel multiplier
    ho = out.shape[2]
    wo = out.shape[3]
    hp = top + h + bottom
    wp = left + wd + right
    plane = np.zeros((hp, wp), np.float32)  # borders stay 0 = x_zp - x_zp, what padding contributes
    acc = np.empty(wo, np.float32)
    for n in range(n_img):
        for ci in range(c_in):
            src = x[n, ci]
            for i in range(h):
                prow = plane[top + i]
                for j in range(wd):
                    prow[left + j] = np.float32(np.int64(src[i, j]) - x_zp)
            for m in range(per):
                co = ci * per + m
                w0 = np.float32(w[co, 0, 0, 0])
                w1 = np.float32(w[co, 0, 0, 1])
                w2 = np.float32(w[co, 0, 0, 2])
                w3 = np.float32(w[co, 0, 1, 0])
                w4 = np.float32(w[co, 0, 1, 1])
                w5 = np.float32(w[co, 0, 1, 2])
                w6 = np.float32(w[co, 0, 2, 0])
                w7 = np.float32(w[co, 0, 2, 1])
                w8 = np.float32(w[co, 0, 2, 2])
                for oh in range(ho):
                    a = plane[oh * s]
                    b = plane[oh * s + 1]
                    c = plane[oh * s + 2]
                    if s == 1:
                        for ow in range(wo):
                            acc[ow] = (w0 * a[ow] + w1 * a[ow + 1] + w2 * a[ow + 2]
                                       + w3 * b[ow] + w4 * b[ow + 1] + w5 * b[ow + 2]
                                       + w6 * c[ow] + w7 * c[ow + 1] + w8 * c[ow + 2])
                    else:
                        for ow in range(wo):
                            j = 2 * ow
                            acc[ow] = (w0 * a[j] + w1 * a[j + 1] + w2 * a[j + 2]
                                       + w3 * b[j] + w4 * b[j + 1] + w5 * b[j + 2]
                                       + w6 * c[j] + w7 * c[j + 1] + w8 * c[j + 2])
                    dst = out[n, co, oh]
                    if fuse:
                        requantize_row(acc, dst, bias[co], mult[co], shift[co], bound[co], out_zp, qmin, qmax)
                    else:
                        for ow in range(wo):
                            dst[ow] = np.int64(acc[ow])
    return out
