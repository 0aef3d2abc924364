"""TFLite integer RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR (int8 and int16; NCHW here).

Neither op changes the quantization: integers are picked or interpolated as they are (zero point included).

Nearest (TFLite GetNearestNeighbor; ``scale`` and the product in float32)::

    scale = align_corners and out > 1 ? float32(in - 1) / float32(out - 1) : float32(in) / float32(out)
    v     = float32(o + (half_pixel ? 0.5 : 0)) * scale
    src   = min(align_corners ? round_half_away(v) : floor(v), in - 1)     (then max(src, 0) if half_pixel)

Bilinear (TFLite ResizeBilinearInteger, the default double-rounding build), per axis with 10 fraction bits::

    scale10 = (1024 * in + out / 2) / out      (in - 1, out - 1 with align_corners; C division)
    p       = o * scale10 (+ scale10 / 2 - 512 with half_pixel)
    lo      = max(p / 1024, 0);  hi = min((p + 1023) / 1024, in - 1)      (C division: toward zero)
    y       = sum over the four neighbours of q * wy * wx  (int64), wy = 1024 - (p - 1024 lo) for lo, p - 1024 lo for hi
    out     = (y + (y > 0 ? 2**19 : -2**19)) / 2**20   (C division, i.e. ties away from zero)

With half_pixel the first source position can be negative (p < 0): then lo = hi = 0 and the weights
(1024 - p, p) still sum to 1024, as in TFLite.
"""
import math

import numpy as np

from ._jit import njit_noalloc


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def nearest_indices(n_in: int, n_out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """Source index of every output index (TFLite GetNearestNeighbor, float32)."""
    f32 = np.float32
    if align_corners and n_out > 1:
        scale = f32(f32(n_in - 1) / f32(n_out - 1))
    else:
        scale = f32(f32(n_in) / f32(n_out))
    offset = f32(0.5) if half_pixel else f32(0.0)
    idx = np.empty(n_out, np.int64)
    for o in range(n_out):
        v = float(f32(f32(f32(o) + offset) * scale))
        src = int(math.copysign(math.floor(abs(v) + 0.5), v)) if align_corners else int(math.floor(v))
        src = min(src, n_in - 1)
        if half_pixel:
            src = max(0, src)
        idx[o] = src
    return idx


def bilinear_axis(n_in: int, n_out: int, align_corners: bool, half_pixel: bool):
    """(p, lo, hi) int64 arrays of one axis: the Q10 source position and its two neighbours."""
    if align_corners and n_out > 1:
        scale10 = _c_div(1024 * (n_in - 1) + (n_out - 1) // 2, n_out - 1)
    else:
        scale10 = _c_div(1024 * n_in + n_out // 2, n_out)
    p = np.empty(n_out, np.int64)
    lo = np.empty(n_out, np.int64)
    hi = np.empty(n_out, np.int64)
    for o in range(n_out):
        v = o * scale10 + (_c_div(scale10, 2) - 512 if half_pixel else 0)
        p[o] = v
        lo[o] = max(_c_div(v, 1024), 0)
        hi[o] = min(_c_div(v + 1023, 1024), n_in - 1)
    return p, lo, hi


def tfl_resize_nearest(x, out_hw, align_corners: bool, half_pixel: bool):
    if x.ndim != 4 or x.dtype.kind not in "iu":
        raise ValueError("tfl_resize_nearest: NCHW integer input required")
    iy = nearest_indices(x.shape[2], out_hw[0], align_corners, half_pixel)
    ix = nearest_indices(x.shape[3], out_hw[1], align_corners, half_pixel)
    return np.ascontiguousarray(x[:, :, iy][:, :, :, ix])


def tfl_resize_bilinear(x, out_hw, align_corners: bool, half_pixel: bool):
    if x.ndim != 4 or x.dtype not in (np.dtype(np.int8), np.dtype(np.int16)):
        raise ValueError("tfl_resize_bilinear: NCHW int8/int16 input required")
    if align_corners and half_pixel:
        raise ValueError("tfl_resize_bilinear: align_corners and half_pixel_centers exclude each other (TFLite)")
    py, y0, y1 = bilinear_axis(x.shape[2], out_hw[0], align_corners, half_pixel)
    px, x0, x1 = bilinear_axis(x.shape[3], out_hw[1], align_corners, half_pixel)
    out = np.empty(x.shape[:2] + tuple(out_hw), x.dtype)
    _bilinear(np.ascontiguousarray(x), py, y0, y1, px, x0, x1, out)
    return out


@njit_noalloc
def _bilinear(x, py, y0, y1, px, x0, x1, out):
    """TFLite integer bilinear resize: 10-bit fixed-point weights, sum of the 4 neighbours, rounded at 2^20."""
    n, c = x.shape[0], x.shape[1]
    ho, wo = out.shape[2], out.shape[3]
    half = np.int64(1) << 19
    for b in range(n):
        for ch in range(c):
            for oy in range(ho):
                fy = py[oy] - 1024 * y0[oy]
                wy0 = np.int64(1024) - fy
                for ox in range(wo):
                    fx = px[ox] - 1024 * x0[ox]
                    wx0 = np.int64(1024) - fx
                    s = (np.int64(x[b, ch, y0[oy], x0[ox]]) * wy0 * wx0
                         + np.int64(x[b, ch, y1[oy], x0[ox]]) * fy * wx0
                         + np.int64(x[b, ch, y0[oy], x1[ox]]) * wy0 * fx
                         + np.int64(x[b, ch, y1[oy], x1[ox]]) * fy * fx)
                    if s > 0:
                        r = (s + half) >> 20
                    else:
                        r = -((half - s) >> 20)
                    out[b, ch, oy, ox] = r
