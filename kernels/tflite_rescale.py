"""TFLite's elementwise rescale: ``y = clamp(mbqm32(x - zp_in, M, s) + zp_out, qmin, qmax)``.

What TFLite's QUANTIZE (integer to integer), RELU/RELU6/RELU_N1_TO_1 (ReluX) and a rescaled CONCATENATION input
compute per element (int32 MultiplyByQuantizedMultiplier, double rounding).
"""
import numpy as np

from ._jit import njit_noalloc
from .tflite_fixedpoint import mbqm32


def tfl_rescale(x, in_zp: int, mult: int, shift: int, out_zp: int, qmin: int, qmax: int, out_dtype):
    if x.dtype.kind not in "iu" or not 0 <= mult < 2 ** 31 or not -31 <= shift <= 30:
        raise ValueError("tfl_rescale: integer input and a TFLite multiplier/shift are required")
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, out_dtype)
    _kernel(flat, int(in_zp), int(mult), int(shift), int(out_zp), int(qmin), int(qmax), out)
    return out.reshape(x.shape)


@njit_noalloc
def _kernel(x, in_zp, m, s, out_zp, qmin, qmax, out):
    """y = clamp(mbqm32(x - in_zp, M, s) + out_zp, qmin, qmax) over a flat array."""
    for i in range(x.size):
        r = mbqm32(np.int64(x[i]) - in_zp, m, s) + out_zp
        out[i] = min(max(r, qmin), qmax)
