"""TFLite's LEAKY_RELU and PRELU (int8/int16 reference kernels), restated.

Per element, with ``v = x - in_zp``::

    v >= 0:  y = out_zp + mbqm32(v, M1, s1)                        (the identity factor in_scale / out_scale)
    v <  0:  y = out_zp + mbqm32(v * (alpha - alpha_zp), M2, s2)   (in_scale * alpha_scale / out_scale)

clamped to [qmin, qmax]. LEAKY_RELU is the case ``alpha - alpha_zp = 1`` with its slope folded into the second
factor (in_scale * alpha / out_scale); PRELU reads its quantized alpha tensor, broadcast to the input.
"""
import numpy as np

from ._jit import njit_noalloc
from .tflite_fixedpoint import mbqm32, wrap32


def tfl_slope(x, alpha, in_zp: int, alpha_zp: int, m1: int, s1: int, m2: int, s2: int, out_zp: int, qmin: int,
              qmax: int, out_dtype):
    """``x`` through the two slopes; ``alpha``: integers broadcastable to ``x`` (LEAKY_RELU: ``[1]``, zp 0)."""
    if x.dtype.kind not in "iu" or not (0 <= m1 < 2 ** 31 and 0 <= m2 < 2 ** 31) or \
            not (-31 <= s1 <= 30 and -31 <= s2 <= 30):
        raise ValueError("tfl_slope: integer input and TFLite multipliers/shifts are required")
    flat = np.ascontiguousarray(x).reshape(-1)
    a = np.ascontiguousarray(np.broadcast_to(np.asarray(alpha, np.int64), x.shape)).reshape(-1)
    out = np.empty(flat.size, out_dtype)
    _kernel(flat, a, int(in_zp), int(alpha_zp), int(m1), int(s1), int(m2), int(s2), int(out_zp), int(qmin),
            int(qmax), out)
    return out.reshape(x.shape)


@njit_noalloc
def _kernel(x, alpha, in_zp, alpha_zp, m1, s1, m2, s2, out_zp, qmin, qmax, out):
    for i in range(x.size):
        v = np.int64(x[i]) - in_zp
        if v >= 0:
            r = mbqm32(v, m1, s1)
        else:
            r = mbqm32(wrap32(v * (alpha[i] - alpha_zp)), m2, s2)
        r += out_zp
        out[i] = min(max(r, qmin), qmax)
