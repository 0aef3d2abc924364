"""Quantized elementwise addition / subtraction with per-input rescaling (TFLite-style integer Add/Sub)."""
import numpy as np

from ._jit import njit, njit_noalloc
from .fixedpoint import mul_round_shift
from .checks import as_3d, as_int, check_int_array, check_multiplier, check_out
from .requantize import clamp, clamp_out, mrs_checked

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)
MAX_LEFT_SHIFT = 32


@njit
def _add_direct(x, y, left_shift, am, ca, a_shift, bm, cb, b_shift, om, co, out_shift):
    """One element of the ``direct`` path of :func:`_add_rescaled` before the output zero point and the clamp:
    ``((va + vb) * out_mult + co) >> out_shift`` with ``va = ((x << left_shift) * am + ca) >> a_shift`` (vb alike).
    The zero points are folded into ``ca = 2**(a_shift-1) - (a_zp << left_shift) * a_mult`` and ``cb`` (a Sub
    negates vb exactly as ``bm = -b_mult``, ``cb = 2**(b_shift-1) - 1 + (b_zp << left_shift) * b_mult``:
    ``-floor(z / 2**s) = floor((2**s - 1 - z) / 2**s)``); ``co = 2**(out_shift-1)``, plus ``out_zp << out_shift``
    when that fits too. The wrapper proved every shifted input, ``va + vb`` and multiplier below 2**31 in
    magnitude: each product is int32 x int32 -> int64 (pmuldq) and nothing leaves int64."""
    va = (np.int64(np.int32(np.int64(x) << left_shift)) * am + ca) >> a_shift
    vb = (np.int64(np.int32(np.int64(y) << left_shift)) * bm + cb) >> b_shift
    return (np.int64(np.int32(va + vb)) * om + co) >> out_shift


@njit
def _shifted(d, left_shift):
    """``d * 2**left_shift`` for :func:`mul_round_shift`, raising ValueError (as :func:`mrs_checked` does) when
    that leaves its domain [-2**48, 2**48): checked before the shift, which past 2**63 would wrap (an int32 input
    minus a zero point, shifted by 32)."""
    lim = np.int64(1) << (48 - left_shift)
    if d < -lim or d >= lim:
        raise ValueError("mul_round_shift input outside [-2**48, 2**48): input shifted too far left")
    return d << left_shift


@njit
def _add_row(ra, rb, left_shift, am, ca, a_shift, bm, cb, b_shift, om, co, out_shift, out_zp, qmin, qmax, dst):
    """``dst[i] = clamp(_add_direct(ra[i], rb[i]) + out_zp, qmin, qmax)`` for a row without broadcasting (unit
    stride: vectorized), without the addition when ``out_zp`` is folded (0 here)."""
    info = np.iinfo(dst.dtype)
    full = qmin == info.min and qmax == info.max
    am, bm, om = np.int64(np.int32(am)), np.int64(np.int32(bm)), np.int64(np.int32(om))  # |m| < 2**31: pmuldq
    if out_zp == 0:
        for i in range(dst.shape[0]):
            y = _add_direct(ra[i], rb[i], left_shift, am, ca, a_shift, bm, cb, b_shift, om, co, out_shift)
            dst[i] = clamp_out(y, full, qmin, qmax, dst)
        return
    for i in range(dst.shape[0]):
        y = _add_direct(ra[i], rb[i], left_shift, am, ca, a_shift, bm, cb, b_shift, om, co, out_shift)
        dst[i] = clamp_out(y + out_zp, full, qmin, qmax, dst)


@njit_noalloc
def _add_rescaled(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult,
                  out_shift, out_zp, qmin, qmax, fold, out):
    """out = clamp(mrs(va + sign_b*vb, out_mult, out_shift) + out_zp, qmin, qmax) on (outer, mid, inner) arrays,
    va/vb the rescaled inputs (int64); a and b may have size 1 along any axis (numpy broadcasting: index times 0).
    Where the wrapper proved the bounds of :func:`_add_direct` (shifts >= 1), so ``mrs(x, m, r) =
    (x*m + 2**(r-1)) >> r`` exactly, without branches (the loop vectorizes); ``fold``: with ``out_zp << out_shift``
    in the output constant too. Elsewhere :func:`_add_checked` runs (its own kernel: a model whose additions are
    all proven compiles only this one)."""
    n_o, n_c, n_i = out.shape
    so, sc, si = int(a.shape[0] > 1), int(a.shape[1] > 1), int(a.shape[2] > 1)
    to, tc, ti = int(b.shape[0] > 1), int(b.shape[1] > 1), int(b.shape[2] > 1)
    am = np.int64(np.int32(a_mult))
    bm = np.int64(np.int32(b_mult))
    om = np.int64(np.int32(out_mult))
    ca = (np.int64(1) << (a_shift - 1)) - (np.int64(a_zp) << left_shift) * am
    cb = (np.int64(1) << (b_shift - 1)) - (np.int64(b_zp) << left_shift) * bm
    if sign_b < 0:
        bm = -bm
        cb = (np.int64(1) << b_shift) - 1 - cb
    co = np.int64(1) << (out_shift - 1)
    zo = out_zp
    if fold:
        co += np.int64(out_zp) << out_shift
        zo = 0
    for o in range(n_o):
        for c in range(n_c):
            ra = a[o * so, c * sc]
            rb = b[o * to, c * tc]
            dst = out[o, c]
            if si == 1 and ti == 1:
                _add_row(ra, rb, left_shift, am, ca, a_shift, bm, cb, b_shift, om, co, out_shift, zo, qmin, qmax, dst)
            else:
                for i in range(n_i):
                    y = _add_direct(ra[i * si], rb[i * ti], left_shift, am, ca, a_shift, bm, cb, b_shift, om, co,
                                    out_shift)
                    dst[i] = clamp(y + zo, qmin, qmax)


@njit_noalloc
def _add_checked(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift,
                 out_zp, qmin, qmax, out):
    """:func:`_add_rescaled` where its bounds are not proven: each step through ``mul_round_shift`` with its
    domain checked."""
    n_o, n_c, n_i = out.shape
    so, sc, si = int(a.shape[0] > 1), int(a.shape[1] > 1), int(a.shape[2] > 1)
    to, tc, ti = int(b.shape[0] > 1), int(b.shape[1] > 1), int(b.shape[2] > 1)
    for o in range(n_o):
        for c in range(n_c):
            ra = a[o * so, c * sc]
            rb = b[o * to, c * tc]
            dst = out[o, c]
            for i in range(n_i):
                va = mul_round_shift(_shifted(np.int64(ra[i * si]) - a_zp, left_shift), a_mult, a_shift)
                vb = mul_round_shift(_shifted(np.int64(rb[i * ti]) - b_zp, left_shift), b_mult, b_shift)
                dst[i] = clamp(mrs_checked(va + sign_b * vb, out_mult, out_shift) + out_zp, qmin, qmax)


def direct_ok(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, out_mult, out_shift,
              out_zp) -> tuple[bool, bool]:
    """Whether the bounds of :func:`_add_direct` hold (Python ints: exact): shifts >= 1; every raw input and input
    minus zero point shifted left, and every rescaled sum, in (-2**31, 2**31); the folded constants keep each
    product plus constant inside int64. Second: whether they also hold with ``out_zp << out_shift`` folded."""
    if min(a_shift, b_shift, out_shift) < 1:
        return False, False
    info_a, info_b = np.iinfo(a.dtype), np.iinfo(b.dtype)
    xa = max(abs(info_a.min - a_zp), abs(info_a.max - a_zp)) << left_shift
    xb = max(abs(info_b.min - b_zp), abs(info_b.max - b_zp)) << left_shift
    raw_a = max(-info_a.min, info_a.max) << left_shift
    raw_b = max(-info_b.min, info_b.max) << left_shift
    # |mrs(x, m, r)| <= (|x|*|m| + 2**(r-1)) / 2**r + 1
    va = (xa * abs(a_mult) >> a_shift) + 1
    vb = (xb * abs(b_mult) >> b_shift) + 1
    ca = (1 << (a_shift - 1)) + (abs(a_zp) << left_shift) * abs(a_mult)
    cb = (1 << (b_shift - 1)) + (abs(b_zp) << left_shift) * abs(b_mult)
    direct = (max(xa, xb, raw_a, raw_b, va + vb) < 2**31 and raw_a * abs(a_mult) + ca < 2**63
              and raw_b * abs(b_mult) + cb < 2**63)
    co = (1 << (out_shift - 1)) + (abs(out_zp) << out_shift)
    return direct, direct and (va + vb) * abs(out_mult) + co < 2**63


def add_rescaled(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift,
                 out_zp, qmin, qmax, out) -> None:
    """Quantized ``a + b`` (or ``a - b``) with broadcasting over (outer, mid, inner).

    Parameters
    ----------
    a, b : ndarrays, int8/uint8/int16/uint16/int32, C-contiguous: 1-D of out's length, or 3-D whose every
        axis is out's or 1 (broadcast)
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
    out : 1-D or 3-D ndarray (the full shape), int8/uint8/int16/uint16/int32
        Preallocated, written in place.

    Notes
    -----
    Exact integer semantics per element (``mrs`` = ``fixedpoint.mul_round_shift``)::

        va = mrs((a - a_zp) * 2**left_shift, a_mult, a_shift)
        vb = mrs((b - b_zp) * 2**left_shift, b_mult, b_shift)
        out = clamp(mrs(va + sign_b * vb, out_mult, out_shift) + out_zp, qmin, qmax)

    ValueError if a value reaching ``mrs`` leaves its exact domain [-2**48, 2**48).
    """
    bind(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift, out_zp, qmin,
         qmax, out)(a, b, out)


def bind(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift, out_zp, qmin,
         qmax, out):
    """:func:`add_rescaled` validated once for arrays shaped, typed and laid out like ``a``, ``b`` and ``out``:
    returns ``run(a, b, out)`` for such arrays (the constant arguments bound)."""
    check_int_array(a, "a", dtypes=IN_DTYPES)
    check_int_array(b, "b", dtypes=IN_DTYPES)
    out3 = out.reshape(1, 1, -1) if out.ndim == 1 else out
    a3, b3 = as_3d(a, out3.shape), as_3d(b, out3.shape)
    out_zp, qmin, qmax = check_out(out3, out3.shape, out_zp, qmin, qmax)
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
    direct, fold = direct_ok(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, out_mult, out_shift,
                             out_zp)
    s3a, s3b, s3o = a3.shape, b3.shape, out3.shape
    head = (a_zp, a_mult, a_shift)
    rest = (b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift, out_zp, qmin, qmax)
    if direct:
        rest += (fold,)

    def run(a, b, out):
        (_add_rescaled if direct else _add_checked)(a.reshape(s3a), *head, b.reshape(s3b), *rest, out.reshape(s3o))

    run.direct, run.fold = direct, fold  # which paths it proved
    return run
