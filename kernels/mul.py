"""Quantized elementwise multiplication (integer Mul)."""
import numpy as np

from ._jit import njit
from .requantize import as_int, check_int_array, check_multiplier, check_out, clamp, mrs_checked

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)


@njit
def _mul(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out):
    """out[i] = clamp(mrs((a[i] - a_zp) * (b[i] - b_zp), mult, shift) + out_zp), product in int64."""
    for i in range(a.shape[0]):
        p = (np.int64(a[i]) - a_zp) * (np.int64(b[i]) - b_zp)
        y = mrs_checked(p, mult, shift) + out_zp
        out[i] = clamp(y, qmin, qmax)
    return out


def mul(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out) -> None:
    """Quantized ``a * b`` on 1-D arrays of equal length (the caller broadcasts).

    Parameters
    ----------
    a, b : 1-D ndarrays, int8/uint8/int16/uint16
    a_zp, b_zp : int
        Input zero points, |zp| <= 2**16.
    mult, shift : int
        Fixed-point factor ``a_scale * b_scale / out_scale`` (|mult| < 2**31, 0 <= shift <= 62).
    out_zp, qmin, qmax : int
    out : 1-D ndarray, same length, int8/uint8/int16/uint16/int32
        Preallocated, written in place.

    Notes
    -----
    Exact integer semantics per element::

        out = clamp(mul_round_shift((a - a_zp) * (b - b_zp), mult, shift) + out_zp, qmin, qmax)

    (the product is below 2**34 in magnitude, well inside the exact domain of mul_round_shift).
    """
    check_int_array(a, "a", ndim=1, dtypes=IN_DTYPES)
    check_int_array(b, "b", ndim=1, dtypes=IN_DTYPES)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same length, got {a.shape} and {b.shape}")
    out_zp, qmin, qmax = check_out(out, a.shape, out_zp, qmin, qmax)
    a_zp = as_int(a_zp, "a_zp")
    b_zp = as_int(b_zp, "b_zp")
    if abs(a_zp) > 1 << 16 or abs(b_zp) > 1 << 16:
        raise ValueError("zero points must satisfy |zp| <= 2**16")
    mult = as_int(mult, "mult")
    shift = as_int(shift, "shift")
    check_multiplier(mult, shift, "mul")
    _mul(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out)
