"""TFLite integer MUL (int8, int16): ``y = clamp(mbqm32((q1 - zp1)(q2 - zp2), M, s) + zp_out, qmin, qmax)``,
``M, s`` from ``s1*s2/s_out``. Operands are broadcast by the caller."""
import numpy as np

from ._jit import njit_noalloc
from .tflite_fixedpoint import mbqm32, wrap32


def tfl_mul(a, b, zp1, zp2, m, s, out_zp, qmin, qmax, out_dtype):
    a, b = np.broadcast_arrays(a, b)
    shape = a.shape
    a = np.ascontiguousarray(a).reshape(-1)
    b = np.ascontiguousarray(b).reshape(-1)
    if not 0 <= m < 2 ** 31 or not -31 <= s <= 30:
        raise ValueError("tfl_mul: multiplier/shift outside TFLite's range")
    out = np.empty(a.size, out_dtype)
    _kernel(a, b, int(zp1), int(zp2), int(m), int(s), int(out_zp), int(qmin), int(qmax), out)
    return out.reshape(shape)


@njit_noalloc
def _kernel(a, b, zp1, zp2, m, s, out_zp, qmin, qmax, out):
    """Elementwise MUL over flat arrays: mbqm32 of the product of the centred operands, plus zp_out, clamped."""
    for i in range(a.size):
        p = wrap32((np.int64(a[i]) - zp1) * (np.int64(b[i]) - zp2))
        y = mbqm32(p, m, s) + out_zp
        out[i] = min(max(y, qmin), qmax)
