"""Quantized elementwise multiplication (integer Mul)."""
import numpy as np

from ._jit import njit, njit_noalloc
from .checks import as_3d, as_int, check_int_array, check_multiplier, check_out
from .requantize import clamp, clamp_out, fits_int64, mrs_checked, scale_row

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)


@njit
def _mul_row(ra, a_zp, rb, b_zp, m, c, shift, small, out_zp, qmin, qmax, dst):
    """dst[i] = clamp((((ra[i] - a_zp) * (rb[i] - b_zp) * m + c) >> shift) + out_zp, qmin, qmax): the direct path of
    :func:`_mul` for a row without broadcasting (``out_zp`` = 0: folded into ``c``, one addition less).
    ``small``: every product is below 2**31 in magnitude (8-bit operands), so the product times ``m`` is a
    32x32->64-bit multiply (pmuldq)."""
    info = np.iinfo(dst.dtype)
    full = qmin == info.min and qmax == info.max
    m32 = np.int64(np.int32(m))  # |m| < 2**31 (validated)
    if out_zp == 0:
        for i in range(dst.shape[0]):
            p = (np.int64(ra[i]) - a_zp) * (np.int64(rb[i]) - b_zp)
            pm = np.int64(np.int32(p)) * m32 if small else p * m
            dst[i] = clamp_out((pm + c) >> shift, full, qmin, qmax, dst)
        return
    for i in range(dst.shape[0]):
        p = (np.int64(ra[i]) - a_zp) * (np.int64(rb[i]) - b_zp)
        pm = np.int64(np.int32(p)) * m32 if small else p * m
        dst[i] = clamp_out(((pm + c) >> shift) + out_zp, full, qmin, qmax, dst)


@njit_noalloc
def _mul(a, a_zp, b, b_zp, mult, shift, fold, pmax_small, out_zp, qmin, qmax, out):
    """out = clamp(mrs((a - a_zp) * (b - b_zp), mult, shift) + out_zp) on (outer, mid, inner) arrays; a and b
    may have size 1 along any of the three axes (numpy broadcasting: index times 0), out has the full shape.

    The wrapper proved that ``|p*mult| + 2**(shift-1) + |out_zp|`` stays inside int64 for every product ``p``, and
    so does ``|x*k| + |x_zp*k| + 2**(shift-1) + |out_zp|`` for either operand ``x`` times a constant ``k = (other
    - other_zp) * mult``; then ``((p*mult + 2**(shift-1)) >> shift) + out_zp`` is the result before the clamp
    (branch-free, vectorizes). ``fold``: the same holds with ``|out_zp|*2**shift`` in place of ``|out_zp|``, so
    the output zero point joins the constant (one addition less). A row whose operand is constant along the inner
    axis folds it into the multiplier (one multiply less). ``pmax_small``: every product is below 2**31 in
    magnitude (8-bit operands). Elsewhere :func:`_mul_checked` runs (its own kernel: a model whose products are
    all proven compiles only this one). ``a`` varies along the inner axis wherever ``b`` does (the wrapper swaps
    the operands of such a product, which commutes): one ``scale_row`` in the loop, not three."""
    n_o, n_c, n_i = out.shape
    c = (np.int64(1) << shift) >> 1
    zo = out_zp
    if fold:
        c += np.int64(out_zp) << shift
        zo = 0
    m = np.int64(mult)
    so, sc, si = int(a.shape[0] > 1), int(a.shape[1] > 1), int(a.shape[2] > 1)
    to, tc, ti = int(b.shape[0] > 1), int(b.shape[1] > 1), int(b.shape[2] > 1)
    for o in range(n_o):
        for ch in range(n_c):
            ra = a[o * so, ch * sc]
            rb = b[o * to, ch * tc]
            dst = out[o, ch]
            if si == 1 and ti == 1:
                _mul_row(ra, a_zp, rb, b_zp, m, c, shift, pmax_small, zo, qmin, qmax, dst)
                continue
            if ti == 1:
                raise ValueError("_mul: b varies along the inner axis and a does not (swap them)")
            k = (np.int64(rb[0]) - b_zp) * m  # b constant along the row: folded into the multiplier
            n = n_i if si == 1 else 1  # both constant: one value
            scale_row(ra, k, c - a_zp * k, shift, zo, qmin, qmax, dst[:n])
            if n < n_i:
                dst[:] = dst[0]


@njit_noalloc
def _mul_checked(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out):
    """:func:`_mul` where its bounds are not proven: each product through ``mul_round_shift`` with its domain
    checked."""
    n_o, n_c, n_i = out.shape
    so, sc, si = int(a.shape[0] > 1), int(a.shape[1] > 1), int(a.shape[2] > 1)
    to, tc, ti = int(b.shape[0] > 1), int(b.shape[1] > 1), int(b.shape[2] > 1)
    for o in range(n_o):
        for ch in range(n_c):
            ra = a[o * so, ch * sc]
            rb = b[o * to, ch * tc]
            dst = out[o, ch]
            for i in range(n_i):
                p = (np.int64(ra[i * si]) - a_zp) * (np.int64(rb[i * ti]) - b_zp)
                dst[i] = clamp(mrs_checked(p, mult, shift) + out_zp, qmin, qmax)


def _proven(a_dtype, a_zp, dev_a, b_dtype, b_zp, dev_b, m, c) -> bool:
    """The int64 bounds of :func:`_mul` with the constant ``|c|`` (Python ints: exact)."""
    return (dev_a * dev_b * m + c < 1 << 63 and fits_int64(a_dtype, dev_b * m, c + abs(a_zp) * dev_b * m)
            and fits_int64(b_dtype, dev_a * m, c + abs(b_zp) * dev_a * m))


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
    dtypes bound ``|p*mult| + 2**(shift-1)`` below 2**63 (and the same with either operand's zero point moved
    into the constant, for rows where the other operand is constant), ``mul_round_shift`` followed by the clamp
    is the plain ``clamp(((p*mult + 2**(shift-1)) >> shift) + out_zp)`` in int64 (no branches), which the loop
    then uses; with ``out_zp*2**shift`` inside the same bound too, ``out_zp`` joins the constant.
    """
    bind(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out)(a, b, out)


def bind(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out):
    """:func:`mul` validated once for arrays shaped, typed and laid out like ``a``, ``b`` and ``out``: returns
    ``run(a, b, out)`` for such arrays (the constant arguments bound)."""
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
    dev_a = max(abs(ia.min - a_zp), abs(ia.max - a_zp))
    dev_b = max(abs(ib.min - b_zp), abs(ib.max - b_zp))
    pmax = dev_a * dev_b
    rnd = (1 << shift) >> 1
    # out_zp added after the shift: |out_zp| of headroom covers shift 0
    direct = _proven(a.dtype, a_zp, dev_a, b.dtype, b_zp, dev_b, abs(mult), rnd + abs(out_zp))
    fold = direct and _proven(a.dtype, a_zp, dev_a, b.dtype, b_zp, dev_b, abs(mult), rnd + (abs(out_zp) << shift))
    swap = a3.shape[2] == 1 and b3.shape[2] > 1  # the varying operand first (_mul)
    s3x, s3y, s3o = (b3.shape, a3.shape, out3.shape) if swap else (a3.shape, b3.shape, out3.shape)
    x_zp, y_zp = (b_zp, a_zp) if swap else (a_zp, b_zp)
    rest = (y_zp, mult, shift) + ((fold, pmax < 1 << 31) if direct else ()) + (out_zp, qmin, qmax)
    kernel = _mul if direct else _mul_checked

    def run(a, b, out):
        x, y = (b, a) if swap else (a, b)
        kernel(x.reshape(s3x), x_zp, y.reshape(s3y), *rest, out.reshape(s3o))

    run.direct, run.fold = direct, fold  # which paths it proved
    return run
