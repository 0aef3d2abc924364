"""Quantized elementwise multiplication (integer Mul)."""
import numpy as np

from ._jit import njit
from .requantize import as_3d, as_int, check_int_array, check_multiplier, check_out, clamp, mrs_checked

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)


@njit
def _mul(a, a_zp, b, b_zp, mult, shift, direct, out_zp, qmin, qmax, out):
    """out = clamp(mrs((a - a_zp) * (b - b_zp), mult, shift) + out_zp) on (outer, mid, inner) arrays; a and b
    may have size 1 along any of the three axes (numpy broadcasting: index times 0), out has the full shape.
    ``direct``: the wrapper proved |product| < 2**31 and shift >= 1 (branch-free, vectorizes)."""
    n_o, n_c, n_i = out.shape
    rnd = np.int64(0) if shift == 0 else np.int64(1) << (shift - 1)
    so, sc, si = int(a.shape[0] > 1), int(a.shape[1] > 1), int(a.shape[2] > 1)
    to, tc, ti = int(b.shape[0] > 1), int(b.shape[1] > 1), int(b.shape[2] > 1)
    for o in range(n_o):
        for c in range(n_c):
            ra = a[o * so, c * sc]
            rb = b[o * to, c * tc]
            dst = out[o, c]
            if direct:
                for i in range(n_i):
                    p = (np.int64(ra[i * si]) - a_zp) * (np.int64(rb[i * ti]) - b_zp)
                    y = ((p * mult + rnd) >> shift) + out_zp
                    dst[i] = min(max(y, qmin), qmax)
            else:
                for i in range(n_i):
                    p = (np.int64(ra[i * si]) - a_zp) * (np.int64(rb[i * ti]) - b_zp)
                    dst[i] = clamp(mrs_checked(p, mult, shift) + out_zp, qmin, qmax)
    return out


def mul(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out) -> None:
    """Quantized ``a * b`` with broadcasting over (outer, mid, inner).

    Parameters
    ----------
    a, b : ndarrays, int8/uint8/int16/uint16, C-contiguous: 1-D of out's length, or 3-D whose every axis is
        out's or 1 (broadcast)
    a_zp, b_zp : int
        Input zero points, |zp| <= 2**16.
    mult, shift : int
        Fixed-point factor ``a_scale * b_scale / out_scale`` (|mult| < 2**31, 0 <= shift <= 62).
    out_zp, qmin, qmax : int
    out : 1-D or 3-D ndarray (the full shape), int8/uint8/int16/uint16/int32
        Preallocated, written in place.

    Notes
    -----
    Exact integer semantics per element::

        out = clamp(mul_round_shift((a - a_zp) * (b - b_zp), mult, shift) + out_zp, qmin, qmax)

    (the product is below 2**34 in magnitude, well inside the exact domain of mul_round_shift). When the
    dtypes bound the product below 2**31 and shift >= 1, ``mul_round_shift`` is the plain
    ``(p*mult + 2**(shift-1)) >> shift`` (no branches), which is what the loop then uses.
    """
    check_int_array(a, "a", dtypes=IN_DTYPES)
    check_int_array(b, "b", dtypes=IN_DTYPES)
    out3 = out.reshape(1, 1, -1) if out.ndim == 1 else out
    a3, b3 = as_3d(a, out3.shape), as_3d(b, out3.shape)
    out_zp, qmin, qmax = check_out(out3, out3.shape, out_zp, qmin, qmax)
    a_zp = as_int(a_zp, "a_zp")
    b_zp = as_int(b_zp, "b_zp")
    if abs(a_zp) > 1 << 16 or abs(b_zp) > 1 << 16:
        raise ValueError("zero points must satisfy |zp| <= 2**16")
    mult = as_int(mult, "mult")
    shift = as_int(shift, "shift")
    check_multiplier(mult, shift, "mul")
    ia, ib = np.iinfo(a.dtype), np.iinfo(b.dtype)
    pmax = max(abs(ia.min - a_zp), abs(ia.max - a_zp)) * max(abs(ib.min - b_zp), abs(ib.max - b_zp))
    direct = shift >= 1 and pmax < 2**31
    _mul(a3, a_zp, b3, b_zp, mult, shift, direct, out_zp, qmin, qmax, out3)
