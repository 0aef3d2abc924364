"""Quantized elementwise multiplication (integer Mul)."""
import numpy as np

from ._jit import njit, njit_inline
from .requantize import as_3d, as_int, check_int_array, check_multiplier, check_out, clamp, mrs_checked

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)


@njit_inline
def _mul_elem(a, a_zp, b, b_zp, mult, shift, rnd, direct, out_zp, qmin, qmax):
    """One output element; ``direct``: the wrapper proved |product| < 2**31 and shift >= 1."""
    p = (np.int64(a) - a_zp) * (np.int64(b) - b_zp)
    if direct:
        y = ((p * mult + rnd) >> shift) + out_zp
        return min(max(y, qmin), qmax)
    return clamp(mrs_checked(p, mult, shift) + out_zp, qmin, qmax)


@njit
def _mul(a, a_zp, b, b_zp, mult, shift, direct, out_zp, qmin, qmax, out):
    """out = clamp(mrs((a - a_zp) * (b - b_zp), mult, shift) + out_zp) on (outer, mid, inner) arrays; a and b
    may have size 1 along any of the three axes (numpy broadcasting), out has the full shape."""
    n_o, n_c, n_i = out.shape
    rnd = np.int64(0) if shift == 0 else np.int64(1) << (shift - 1)
    ao, ac, ai = a.shape[0] > 1, a.shape[1] > 1, a.shape[2] > 1
    bo, bc, bi = b.shape[0] > 1, b.shape[1] > 1, b.shape[2] > 1
    for o in range(n_o):
        for c in range(n_c):
            ra = a[o if ao else 0, c if ac else 0]
            rb = b[o if bo else 0, c if bc else 0]
            dst = out[o, c]
            if ai and bi:
                for i in range(n_i):
                    dst[i] = _mul_elem(ra[i], a_zp, rb[i], b_zp, mult, shift, rnd, direct, out_zp, qmin, qmax)
            elif ai:
                vb = rb[0]
                for i in range(n_i):
                    dst[i] = _mul_elem(ra[i], a_zp, vb, b_zp, mult, shift, rnd, direct, out_zp, qmin, qmax)
            elif bi:
                va = ra[0]
                for i in range(n_i):
                    dst[i] = _mul_elem(va, a_zp, rb[i], b_zp, mult, shift, rnd, direct, out_zp, qmin, qmax)
            else:
                v = _mul_elem(ra[0], a_zp, rb[0], b_zp, mult, shift, rnd, direct, out_zp, qmin, qmax)
                for i in range(n_i):
                    dst[i] = v
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
