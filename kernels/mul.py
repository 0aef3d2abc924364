"""Quantized elementwise multiplication (integer Mul)."""
import numpy as np

from ._jit import njit
from .requantize import as_3d, as_int, check_int_array, check_multiplier, check_out, clamp, mrs_checked

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)


@njit
def _scaled_row(src, zp, k, rnd, shift, out_zp, qmin, qmax, dst, step):
    """dst[i] = clamp((((src[i*step] - zp) * k + rnd) >> shift) + out_zp): the direct path of :func:`_mul` for a
    row whose other operand is constant (``k`` = that operand times the multiplier)."""
    if step == 1:  # unit stride, spelled out so that the loop vectorizes
        for i in range(dst.shape[0]):
            y = (((np.int64(src[i]) - zp) * k + rnd) >> shift) + out_zp
            dst[i] = min(max(y, qmin), qmax)
        return
    y = (((np.int64(src[0]) - zp) * k + rnd) >> shift) + out_zp
    y = min(max(y, qmin), qmax)
    for i in range(dst.shape[0]):
        dst[i] = y


@njit
def _mul(a, a_zp, b, b_zp, mult, shift, direct, pmax_small, out_zp, qmin, qmax, out):
    """out = clamp(mrs((a - a_zp) * (b - b_zp), mult, shift) + out_zp) on (outer, mid, inner) arrays; a and b
    may have size 1 along any of the three axes (numpy broadcasting: index times 0), out has the full shape.
    ``direct``: the wrapper proved ``|product| * |mult| + 2**(shift-1) + 2**32 < 2**63``, so
    ``((p*mult + 2**(shift-1)) >> shift) + out_zp`` is exact in int64 (branch-free, vectorizes); a row whose
    operand is constant along the inner axis folds it into the multiplier (same product, one multiply less).
    ``pmax_small``: every product is below 2**31 in magnitude (8-bit operands), so it is multiplied as int32."""
    n_o, n_c, n_i = out.shape
    rnd = np.int64(0) if shift == 0 else np.int64(1) << (shift - 1)
    m = np.int64(mult)
    m32 = np.int64(np.int32(mult))  # |mult| < 2**31 (validated)
    small = direct and pmax_small
    so, sc, si = int(a.shape[0] > 1), int(a.shape[1] > 1), int(a.shape[2] > 1)
    to, tc, ti = int(b.shape[0] > 1), int(b.shape[1] > 1), int(b.shape[2] > 1)
    for o in range(n_o):
        for c in range(n_c):
            ra = a[o * so, c * sc]
            rb = b[o * to, c * tc]
            dst = out[o, c]
            if direct and si == 1 and ti == 1 and small:
                for i in range(n_i):  # |p| < 2**31: a 32x32->64-bit multiply (pmuldq)
                    p = np.int32((np.int64(ra[i]) - a_zp) * (np.int64(rb[i]) - b_zp))
                    y = ((np.int64(p) * m32 + rnd) >> shift) + out_zp
                    dst[i] = min(max(y, qmin), qmax)
            elif direct and si == 1 and ti == 1:
                for i in range(n_i):
                    p = (np.int64(ra[i]) - a_zp) * (np.int64(rb[i]) - b_zp)
                    y = ((p * m + rnd) >> shift) + out_zp
                    dst[i] = min(max(y, qmin), qmax)
            elif direct and si == 1:
                _scaled_row(ra, a_zp, (np.int64(rb[0]) - b_zp) * m, rnd, shift, out_zp, qmin, qmax, dst, 1)
            elif direct:
                _scaled_row(rb, b_zp, (np.int64(ra[0]) - a_zp) * m, rnd, shift, out_zp, qmin, qmax, dst, ti)
            else:
                for i in range(n_i):
                    p = (np.int64(ra[i * si]) - a_zp) * (np.int64(rb[i * ti]) - b_zp)
                    dst[i] = clamp(mrs_checked(p, mult, shift) + out_zp, qmin, qmax)
    return out


def mul(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out, cache=None) -> None:
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

    cache : dict, optional
        Owned by the caller for constant ``a_zp, b_zp, mult, shift, out_zp, qmin, qmax`` (one per graph node):
        keeps the validated arguments, so a later call with the same shapes and dtypes goes straight to the loop.

    Notes
    -----
    Exact integer semantics per element::

        out = clamp(mul_round_shift((a - a_zp) * (b - b_zp), mult, shift) + out_zp, qmin, qmax)

    (the product is below 2**34 in magnitude, well inside the exact domain of mul_round_shift). When the
    dtypes bound ``|p*mult| + 2**(shift-1) + 2**32`` below 2**63 (every 16-bit product with a normalized
    multiplier and |zp| <= 2**15), ``mul_round_shift`` followed by the clamp is the plain
    ``clamp(((p*mult + 2**(shift-1)) >> shift) + out_zp)`` in int64 (no branches), which the loop then uses.
    """
    key = None
    if cache is not None:
        key = (a.shape, a.dtype, b.shape, b.dtype, out.shape, out.dtype)
        hit = cache.get("key") == key
        if hit and a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous:
            s3, args = cache["shapes"], cache["args"]
            _mul(a.reshape(s3[0]), args[0], b.reshape(s3[1]), *args[1:], out.reshape(s3[2]))
            return
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
    # |p*mult| + rounding term (+ out_zp) stays inside int64: the plain formula is mul_round_shift exactly (its
    # saturation at 2**62 only ever changes values that the final clamp saturates anyway)
    direct = pmax * abs(mult) + (1 << max(shift - 1, 0)) + (1 << 32) < 1 << 63
    _mul(a3, a_zp, b3, b_zp, mult, shift, direct, pmax < 1 << 31, out_zp, qmin, qmax, out3)
    if key is not None:
        cache["key"], cache["shapes"] = key, (a3.shape, b3.shape, out3.shape)
        cache["args"] = (a_zp, b_zp, mult, shift, direct, pmax < 1 << 31, out_zp, qmin, qmax)
