"""onnxruntime's fused QLinearAveragePool (com.microsoft, CPU), 2-D NCHW: the ``onnx`` board's arithmetic for an
8-bit AveragePool group that onnxruntime fuses.

Per output cell, all in IEEE float32 (``f32`` = round to float32)::

    hs = oh*sh - top;  he = min(hs + kh, H);  hs = max(hs, 0)       (same for w; padding never summed)
    acc = 0; for h in [hs, he): for w in [ws, we):  acc = f32(acc + f32(x_scale * f32(x[h, w] - x_zp)))
    n   = kh*kw if count_include_pad else (he - hs) * (we - ws)     (onnxruntime's count, ceil_mode borders too)
    y   = clamp(rint(f32(f32(f32(acc / n) / y_scale) + y_zp)), qmin, qmax)   (zero point added before rounding)

The row-major summation order is onnxruntime's, so the float32 sums are identical.
"""
import numpy as np

from ._jit import njit
from .checks import as_int, as_int_tuple, check_int_array, check_out


@njit
def _qlinear_avgpool(x, x_scale, x_zp, y_scale, y_zp, kh, kw, sh, sw, top, left, include_pad, qmin, qmax, out):
    """The loop of :func:`qlinear_avgpool` (float32 throughout; see the module docstring)."""
    n_img, n_c, h, w = x.shape
    ho, wo = out.shape[2], out.shape[3]
    zpx = np.float32(x_zp)
    zpy = np.float32(y_zp)
    lo = np.float32(qmin)
    hi = np.float32(qmax)
    for n in range(n_img):
        for c in range(n_c):
            plane = x[n, c]
            for oh in range(ho):
                hs = oh * sh - top
                he = min(hs + kh, h)
                hs = max(hs, 0)
                for ow in range(wo):
                    ws = ow * sw - left
                    we = min(ws + kw, w)
                    ws = max(ws, 0)
                    acc = np.float32(0.0)
                    for i in range(hs, he):
                        for j in range(ws, we):
                            acc = np.float32(acc + np.float32(x_scale * np.float32(np.float32(plane[i, j]) - zpx)))
                    cnt = kh * kw if include_pad else (he - hs) * (we - ws)
                    v = np.float32(np.float32(np.float32(acc / np.float32(cnt)) / y_scale) + zpy)
                    out[n, c, oh, ow] = np.int64(np.rint(min(max(v, lo), hi)))
    return out


def qlinear_avgpool(x, x_scale, x_zp, y_scale, y_zp, kernel, stride, pads, count_include_pad, qmin, qmax, out):
    """onnxruntime's QLinearAveragePool on NCHW int8/uint8 ``x`` into preallocated ``out`` [N, C, Ho, Wo].

    ``x_scale``/``y_scale`` are float32, ``pads`` = (top, left, bottom, right) (only top/left move windows).
    """
    check_int_array(x, "x", ndim=4, dtypes=(np.int8, np.uint8))
    if out.ndim != 4 or out.shape[:2] != x.shape[:2]:
        raise ValueError(f"out must be [N, C, Ho, Wo] matching x {x.shape}, got {out.shape}")
    check_out(out, out.shape, 0, qmin, qmax)
    kh, kw = as_int_tuple(kernel, 2, "kernel")
    sh, sw = as_int_tuple(stride, 2, "stride")
    top, left, _, _ = as_int_tuple(pads, 4, "pads")
    _qlinear_avgpool(x, np.float32(x_scale), as_int(x_zp, "x_zp"), np.float32(y_scale), as_int(y_zp, "y_zp"), kh,
                     kw, sh, sw, top, left, bool(count_include_pad), as_int(qmin, "qmin"), as_int(qmax, "qmax"), out)
