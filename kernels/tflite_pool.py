"""TFLite integer AVERAGE_POOL_2D and MEAN (NCHW here).

Average pool (input and output share their quantization): the raw integers of the in-bounds window cells are
summed and divided by their count ``n`` rounding half away from zero (C division)::

    y = clamp(acc > 0 ? (acc + n/2) / n : (acc - n/2) / n, qmin, qmax)

Mean over the trailing axis of a (rows, n) view (TFLite QuantizedMeanOrSum), with ``M, s`` from ``s_in/s_out``::

    k  = min(floor(log2 n), 32, 31 + s);  M' = (M << k) / n (truncating);  s' = s - k
    y  = clamp(mbqm32(sum(q) - n*zp_in, M', s') + zp_out, qmin, qmax)
"""
import numpy as np

from ._jit import njit_noalloc
from .tflite_fixedpoint import mbqm32, wrap32



def tfl_avgpool(x, kernel, stride, pads, qmin, qmax):
    if x.ndim != 4 or x.dtype.kind not in "iu":
        raise ValueError("tfl_avgpool: NCHW integer input required")
    kh, kw = kernel
    sh, sw = stride
    top, left, bottom, right = pads
    if not (0 <= top < kh and 0 <= bottom < kh and 0 <= left < kw and 0 <= right < kw):
        raise ValueError("tfl_avgpool: pads must be smaller than the kernel (every window has a cell)")
    n, c, h, w = x.shape
    ho = (h + top + bottom - kh) // sh + 1
    wo = (w + left + right - kw) // sw + 1
    out = np.empty((n, c, ho, wo), x.dtype)
    _avg(np.ascontiguousarray(x), kh, kw, sh, sw, top, left, int(qmin), int(qmax), out)
    return out


@njit_noalloc
def _avg(x, kh, kw, sh, sw, top, left, qmin, qmax, out):
    """Average pool: in-bounds window sum divided by the cell count, rounding half away from zero."""
    n, c, h, w = x.shape
    ho, wo = out.shape[2], out.shape[3]
    for b in range(n):
        for ch in range(c):
            for oy in range(ho):
                y0 = oy * sh - top
                for ox in range(wo):
                    x0 = ox * sw - left
                    acc = 0
                    cnt = 0
                    for dy in range(kh):
                        yy = y0 + dy
                        if yy < 0 or yy >= h:
                            continue
                        for dx in range(kw):
                            xx = x0 + dx
                            if xx < 0 or xx >= w:
                                continue
                            acc += np.int64(x[b, ch, yy, xx])
                            cnt += 1
                    half = cnt // 2
                    if acc > 0:
                        r = (acc + half) // cnt
                    else:
                        r = -((-(acc - half)) // cnt)  # C division truncates toward zero
                    out[b, ch, oy, ox] = min(max(r, qmin), qmax)


def mean_multiplier(mult: int, shift: int, n: int) -> tuple[int, int]:
    """TFLite's (M', s') for a mean over ``n`` elements (see the module docstring)."""
    k = min(n.bit_length() - 1, 32, 31 + shift)
    return (mult << k) // n, shift - k


def tfl_mean(x2, in_zp, mult, shift, out_zp, qmin, qmax, out_dtype):
    """Mean over axis 1 of a 2-D (rows, n) integer array; ``mult, shift`` are QuantizeMultiplier(s_in/s_out)."""
    if x2.ndim != 2 or x2.shape[1] < 1:
        raise ValueError("tfl_mean: a 2-D (rows, n) array is required")
    m2, s2 = mean_multiplier(int(mult), int(shift), int(x2.shape[1]))
    out = np.empty(x2.shape[0], out_dtype)
    _mean(np.ascontiguousarray(x2), int(in_zp), m2, s2, int(out_zp), int(qmin), int(qmax), out)
    return out


@njit_noalloc
def _mean(x, in_zp, m, s, out_zp, qmin, qmax, out):
    """Mean of each row of a (rows, n) view with the count folded into the multiplier (module docstring)."""
    rows, n = x.shape
    for r in range(rows):
        acc = 0
        for i in range(n):
            acc += np.int64(x[r, i])
        acc = wrap32(acc - n * in_zp)
        y = mbqm32(acc, m, s) + out_zp
        out[r] = min(max(y, qmin), qmax)
