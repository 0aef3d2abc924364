"""TFLite integer ADD / SUB (int8 and int16, general scales)::

    v1 = (q1 - zp1) << L ;  v2 = (q2 - zp2) << L          L = 20 (int8) or 15 (int16)
    r  = mbqm32(v1, M1, s1) +/- mbqm32(v2, M2, s2)          M_i from s_i / (2 max(s1, s2))
    y  = clamp(mbqm32(r, Mo, so) + zp_out, qmin, qmax)       Mo from 2 max(s1, s2) / (2**L s_out)

Operands are broadcast by the caller (flat arrays of equal size).
"""
import numpy as np

from ._jit import njit_noalloc
from .tflite_fixedpoint import mbqm32, wrap32


def tfl_add(a, b, zp1, zp2, m1, s1, m2, s2, mo, so, left_shift, subtract, out_zp, qmin, qmax, out_dtype):
    a, b = np.broadcast_arrays(a, b)
    shape = a.shape
    a = np.ascontiguousarray(a).reshape(-1)
    b = np.ascontiguousarray(b).reshape(-1)
    for m, s in ((m1, s1), (m2, s2), (mo, so)):
        if not 0 <= m < 2 ** 31 or not -31 <= s <= 30:
            raise ValueError("tfl_add: multiplier/shift outside TFLite's range")
    if not 0 <= left_shift <= 24:
        raise ValueError("tfl_add: left shift must be in [0, 24]")
    out = np.empty(a.size, out_dtype)
    _kernel(a, b, int(zp1), int(zp2), int(m1), int(s1), int(m2), int(s2), int(mo), int(so), int(left_shift),
            bool(subtract), int(out_zp), int(qmin), int(qmax), out)
    return out.reshape(shape)


@njit_noalloc
def _kernel(a, b, zp1, zp2, m1, s1, m2, s2, mo, so, ls, subtract, out_zp, qmin, qmax, out):
    """Elementwise ADD/SUB over flat arrays: both operands left-shifted, rescaled, summed, rescaled (module docstring)."""
    for i in range(a.size):
        v1 = mbqm32(wrap32((np.int64(a[i]) - zp1) << ls), m1, s1)
        v2 = mbqm32(wrap32((np.int64(b[i]) - zp2) << ls), m2, s2)
        r = wrap32(v1 - v2 if subtract else v1 + v2)
        y = mbqm32(r, mo, so) + out_zp
        out[i] = min(max(y, qmin), qmax)
