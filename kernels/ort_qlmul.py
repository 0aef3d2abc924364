"""onnxruntime's 8-bit QLinearMul, bit for bit as its CPU kernel computes it on x86-64.

onnxruntime fuses an 8-bit QDQ ``Mul`` group into ``com.microsoft.QLinearMul``; MLAS (``MlasQLinearMul``, SSE2
path, used on every x86-64 CPU) multiplies the zero-point-corrected integers exactly, scales the product by one
float32 ratio and adds the output zero point in float32 *before* rounding. ONNX's definition (dequantize both,
multiply in float32, divide by the output scale, round, add the zero point) rounds differently on ties and
near-ties.
"""
import numpy as np

from ._jit import njit
from .ort_qladd import binary_args, cvt_ps2dq, f32
from .requantize import clamp


@njit
def qlmul_ratio(a_scale, b_scale, out_scale):
    """``f32(f32(a_scale * b_scale) / out_scale)``, the one float32 factor of the kernel (as float64)."""
    return f32(f32(np.float64(a_scale) * np.float64(b_scale)) / np.float64(out_scale))


@njit
def _qlmul(a, a_zp, b, b_zp, ratio, out_zp, qmin, qmax, out):
    """out[i] = clamp(cvt_ps2dq(f32(f32(p * ratio) + out_zp)), qmin, qmax), p = (a-a_zp)(b-b_zp) exactly."""
    zc = np.float64(out_zp)
    for i in range(a.shape[0]):
        p = (np.int64(a[i]) - a_zp) * (np.int64(b[i]) - b_zp)
        u = f32(f32(np.float64(p) * ratio) + zc)
        out[i] = clamp(cvt_ps2dq(u), qmin, qmax)
    return out


def ort_qlmul(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp, out) -> None:
    """onnxruntime's ``QLinearMul`` on 8-bit data (MLAS, x86-64), on 1-D arrays of equal length.

    Parameters
    ----------
    a, b : 1-D ndarrays, both int8 or both uint8 (the caller broadcasts; the operand order does not matter)
    a_scale, b_scale, out_scale : float
        Positive finite scales, taken as float32.
    a_zp, b_zp, out_zp : int
        Zero points inside the dtype range.
    out : 1-D ndarray of the same dtype and length, written in place.

    Notes
    -----
    Exact semantics per element (``f32`` = round to float32 half to even)::

        ratio = f32(f32(a_scale * b_scale) / out_scale)
        p = (a - a_zp) * (b - b_zp)                 # exact (|p| <= 65025, exact in float32 too)
        u = f32(f32(p * ratio) + out_zp)            # two float32 operations, no fused multiply-add
        r = cvtps2dq(u)                             # round half to even; -2**31 if |u| >= 2**31
        out = clamp(r, qmin, qmax)                  # int32 -> int16 -> 8 bit saturating packs
    """
    a_scale, a_zp, b_scale, b_zp, out_scale, out_zp = binary_args(a, a_scale, a_zp, b, b_scale, b_zp, out,
                                                                  out_scale, out_zp)
    info = np.iinfo(a.dtype)
    _qlmul(a, a_zp, b, b_zp, qlmul_ratio(a_scale, b_scale, out_scale), out_zp, info.min, info.max, out)
