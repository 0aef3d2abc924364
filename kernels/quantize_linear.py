"""ONNX QuantizeLinear of a float32 tensor with one scale and zero point (the model input's stub):
``saturate(round_half_even(x / scale) + zp)`` in float32, as ``npu_sim.ir.QParams.quantize`` computes it."""
import numpy as np

from ._jit import njit_noalloc
from .checks import as_int, check_int_array

OUT_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)


@njit_noalloc
def _quantize_linear(x, scale, zp, qmin, qmax, out):
    """out[i] = clamp(rint(x[i] / scale) + zp, qmin, qmax) in float32 (IEEE division, ties to even; NaN -> 0)."""
    z = np.float32(zp)
    lo = np.float32(qmin)
    hi = np.float32(qmax)
    zero = np.float32(0.0)
    for i in range(x.shape[0]):
        v = np.rint(x[i] / scale) + z
        v = zero if v != v else v
        out[i] = min(max(v, lo), hi)


def quantize_linear(x, scale, zp, qmin, qmax, out) -> None:
    """Quantize ``x`` (float32, 1-D, C-contiguous) into ``out`` (8/16-bit integers, same shape).

    Per element, in float32: ``v = rint(x / scale) + zp`` (IEEE division, round half to even, then the zero point
    added in float32), NaN -> 0, clamped to [qmin, qmax] (exact float32 integers for 8/16-bit types), converted.
    ``scale`` is a float32 scalar, ``zp``/``qmin``/``qmax`` ints with qmin <= qmax inside out's type.
    """
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 1 or not x.flags.c_contiguous:
        raise ValueError("x must be a C-contiguous 1-D float32 array")
    check_int_array(out, "out", ndim=1, dtypes=OUT_DTYPES)
    if out.shape != x.shape:
        raise ValueError(f"out must have shape {x.shape}, got {out.shape}")
    if not isinstance(scale, np.float32):
        raise ValueError("scale must be a numpy float32 scalar")
    zp, qmin, qmax = as_int(zp, "zp"), as_int(qmin, "qmin"), as_int(qmax, "qmax")
    info = np.iinfo(out.dtype)
    if not info.min <= qmin <= qmax <= info.max:
        raise ValueError(f"need {info.min} <= qmin <= qmax <= {info.max} for out dtype {out.dtype}")
    if abs(zp) > 1 << 16:
        raise ValueError("zp must satisfy |zp| <= 2**16")
    _quantize_linear(x, scale, zp, qmin, qmax, out)
