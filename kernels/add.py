"""Quantized elementwise addition / subtraction with per-input rescaling (TFLite-style integer Add/Sub)."""
import numpy as np

from ._jit import njit
from .requantize import as_int, check_int_array, check_multiplier, check_out, clamp, mrs_checked

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)
MAX_LEFT_SHIFT = 32


@njit
def _add_rescaled(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult,
                  out_shift, out_zp, qmin, qmax, out):
    """out[i] = clamp(mrs(va + sign_b*vb, out_mult, out_shift) + out_zp), va/vb the rescaled inputs (int64)."""
    for i in range(a.shape[0]):
        va = mrs_checked((np.int64(a[i]) - a_zp) << left_shift, a_mult, a_shift)
        vb = mrs_checked((np.int64(b[i]) - b_zp) << left_shift, b_mult, b_shift)
        s = va + sign_b * vb
        y = mrs_checked(s, out_mult, out_shift) + out_zp
        out[i] = clamp(y, qmin, qmax)
    return out


@njit
def _add_rescaled_direct(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult,
                         out_shift, out_zp, qmin, qmax, out):
    """:func:`_add_rescaled` when the wrapper proved every ``mrs`` argument below 2**31 in magnitude: the
    products then fit int64 and ``mrs(x, m, r) = (x*m + 2**(r-1)) >> r`` directly (r >= 1), branch-free."""
    ra = np.int64(1) << (a_shift - 1)
    rb = np.int64(1) << (b_shift - 1)
    ro = np.int64(1) << (out_shift - 1)
    for i in range(a.shape[0]):
        va = (((np.int64(a[i]) - a_zp) << left_shift) * a_mult + ra) >> a_shift
        vb = (((np.int64(b[i]) - b_zp) << left_shift) * b_mult + rb) >> b_shift
        y = (((va + sign_b * vb) * out_mult + ro) >> out_shift) + out_zp
        out[i] = min(max(y, qmin), qmax)
    return out


def _direct_ok(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, out_shift) -> bool:
    """True when every mul_round_shift argument of the add is provably in (-2**31, 2**31) and shifts >= 1."""
    if min(a_shift, b_shift, out_shift) < 1:
        return False
    info_a, info_b = np.iinfo(a.dtype), np.iinfo(b.dtype)
    xa = max(abs(info_a.min - a_zp), abs(info_a.max - a_zp)) << left_shift
    xb = max(abs(info_b.min - b_zp), abs(info_b.max - b_zp)) << left_shift
    # |mrs(x, m, r)| <= (|x|*|m| + 2**(r-1)) / 2**r + 1
    va = (xa * abs(a_mult) >> a_shift) + 1
    vb = (xb * abs(b_mult) >> b_shift) + 1
    return xa < 2**31 and xb < 2**31 and va + vb < 2**31


def add_rescaled(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift,
                 out_zp, qmin, qmax, out) -> None:
    """Quantized ``a + b`` (or ``a - b``) on 1-D arrays of equal length (the caller broadcasts).

    Parameters
    ----------
    a, b : 1-D ndarrays, int8/uint8/int16/uint16/int32
    a_zp, b_zp : int
        Input zero points.
    a_mult, a_shift, b_mult, b_shift : int
        Fixed-point factors taking each input to the common intermediate scale (|mult| < 2**31,
        0 <= shift <= 62).
    left_shift : int
        Headroom shift applied to both inputs before rescaling, 0..32.
    sign_b : int
        +1 for Add, -1 for Sub.
    out_mult, out_shift : int
        Fixed-point factor from the intermediate scale to the output scale.
    out_zp, qmin, qmax : int
    out : 1-D ndarray of the same length, int8/uint8/int16/uint16/int32
        Preallocated, written in place.

    Notes
    -----
    Exact integer semantics per element (``mrs`` = ``fixedpoint.mul_round_shift``)::

        va = mrs((a - a_zp) * 2**left_shift, a_mult, a_shift)
        vb = mrs((b - b_zp) * 2**left_shift, b_mult, b_shift)
        out = clamp(mrs(va + sign_b * vb, out_mult, out_shift) + out_zp, qmin, qmax)

    ValueError if a value reaching ``mrs`` leaves its exact domain [-2**48, 2**48).
    """
    check_int_array(a, "a", ndim=1, dtypes=IN_DTYPES)
    check_int_array(b, "b", ndim=1, dtypes=IN_DTYPES)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same length, got {a.shape} and {b.shape}")
    out_zp, qmin, qmax = check_out(out, a.shape, out_zp, qmin, qmax)
    a_zp = as_int(a_zp, "a_zp")
    b_zp = as_int(b_zp, "b_zp")
    if abs(a_zp) >= 1 << 32 or abs(b_zp) >= 1 << 32:
        raise ValueError("zero points must satisfy |zp| < 2**32")
    vals = [as_int(v, name) for v, name in ((a_mult, "a_mult"), (a_shift, "a_shift"), (b_mult, "b_mult"),
                                            (b_shift, "b_shift"), (out_mult, "out_mult"),
                                            (out_shift, "out_shift"))]
    a_mult, a_shift, b_mult, b_shift, out_mult, out_shift = vals
    check_multiplier(a_mult, a_shift, "a")
    check_multiplier(b_mult, b_shift, "b")
    check_multiplier(out_mult, out_shift, "out")
    left_shift = as_int(left_shift, "left_shift")
    if not 0 <= left_shift <= MAX_LEFT_SHIFT:
        raise ValueError(f"left_shift must be in [0, {MAX_LEFT_SHIFT}], got {left_shift}")
    sign_b = as_int(sign_b, "sign_b")
    if sign_b not in (1, -1):
        raise ValueError(f"sign_b must be +1 or -1, got {sign_b}")
    kernel = _add_rescaled
    if _direct_ok(a, int(a_zp), a_mult, a_shift, b, int(b_zp), b_mult, b_shift, left_shift, out_shift):
        kernel = _add_rescaled_direct
    kernel(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift,
           out_zp, qmin, qmax, out)
