"""Integer Softmax over the rows of a 2-D array: exp by lookup table, int64 sum, reciprocal by normalization +
interpolated table + one Newton step, fixed-point output.

Fixed-point formats (``Qa.b`` = b fraction bits):

* exponentials ``e`` are Q.30 integers in [0, 2**30]; the row maximum gives exactly ``2**30``;
* the row sum ``S`` is an int64 in [2**30, n * 2**30] (``n < 2**32``);
* the reciprocal ``y`` of the sum's mantissa is Q.30 in [2**29, 2**30];
* the probability ``p`` is Q.31 in [0, 2**31], then requantized by ``mul_round_shift``.

Two ways to get ``e`` from ``d = max - q`` (the zero point cancels):

* ``softmax_lut8`` (8-bit inputs): ``e = exp_lut[d]``, a table with one entry per possible ``d``.
* ``softmax_lut16`` (16-bit inputs): base-2 exponent split. ``pos = mul_round_shift(d, pos_mult, pos_shift)`` is
  ``d * s / ln 2`` with ``F = frac_bits`` fraction bits; ``k = pos >> F`` (integer part), the fraction's top
  ``K`` bits index ``exp2_lut`` (``2**K + 1`` entries, ``2**30 * 2**(-i / 2**K)``), the remaining ``G = F - K``
  bits interpolate linearly between neighbours, and ``e = round(v / 2**k)`` (0 once ``k >= 31``).
"""
import numpy as np

from ._jit import njit, njit_noalloc
from .checks import array_key, as_int, cached_bind, check_int_array, check_multiplier, check_out
from .requantize import clamp, mrs_checked

IN_DTYPES_8 = (np.int8, np.uint8)
IN_DTYPES_16 = (np.int16, np.uint16, np.int8, np.uint8)
ONE = 1 << 30          # 1.0 in Q.30
MAX_ROW = 1 << 32      # n * 2**30 must stay below 2**62


# --------------------------------------------------------------------------------------------------------
# njit helpers
# --------------------------------------------------------------------------------------------------------
@njit
def bit_length(v):
    """Number of significant bits of a positive int64 (``63 - clz(v)`` + 1)."""
    n = 0
    while v > 0:
        v >>= 1
        n += 1
    return n


@njit
def recip_q30(s, recip_lut, lut_bits):
    """For an int64 ``s >= 2**30``: return ``(y, h)`` with ``y / 2**30 ~= 2**h / s`` (Q.30, in [2**29, 2**30]).

    ``h = bit_length(s) - 1`` (>= 30); ``x = s >> (h - 30)`` is the mantissa in Q1.30, [2**30, 2**31).
    ``f = x - 2**30`` (30 bits): the top ``K = lut_bits`` bits index ``recip_lut`` (``2**K + 1`` entries,
    ``round(2**30 / (1 + i / 2**K))``), the low ``30 - K`` bits interpolate linearly (round half up):
    ``y0 = R[i] - ((R[i] - R[i+1]) * frac + 2**(29-K)) >> (30-K)``. One Newton step for ``1/m``:
    ``t = (x*y0 + 2**29) >> 30``, ``y1 = (y0 * (2**31 - t) + 2**29) >> 30``, clamped to [2**29, 2**30].
    """
    h = bit_length(s) - 1
    x = s >> (h - 30)
    f = x - ONE
    low = 30 - lut_bits
    idx = f >> low
    fr = f - (idx << low)
    r0 = np.int64(recip_lut[idx])
    r1 = np.int64(recip_lut[idx + 1])
    y0 = r0 - (((r0 - r1) * fr + (np.int64(1) << (low - 1))) >> low)
    t = (x * y0 + (np.int64(1) << 29)) >> 30
    y1 = (y0 * ((np.int64(1) << 31) - t) + (np.int64(1) << 29)) >> 30
    return clamp(y1, np.int64(1) << 29, np.int64(ONE)), h


@njit_noalloc
def _normalize_rows(e, out, recip_lut, lut_bits, out_mult, out_shift, out_zp, qmin, qmax):
    """Second pass shared by both variants: ``e`` (rows, n) int64 Q.30 exponentials -> ``out``.

    ``S = sum(e)``; ``(y, h) = recip_q30(S)``; ``p = (e*y + 2**(h-2)) >> (h-1)`` (Q.31);
    ``out = clamp(mul_round_shift(p, out_mult, out_shift) + out_zp, qmin, qmax)``. As ``0 <= e <= 2**30`` and
    ``y <= 2**30``, ``0 <= p <= 2**31``, so ``p * out_mult`` (|out_mult| < 2**31) fits int64 and
    ``mul_round_shift`` is the plain ``(p*out_mult + 2**(out_shift-1)) >> out_shift``.
    """
    rows, n = e.shape
    m = np.int64(out_mult)
    ro = np.int64(0) if out_shift == 0 else np.int64(1) << (out_shift - 1)
    for r in range(rows):
        s = np.int64(0)
        for i in range(n):
            s += e[r, i]
        y, h = recip_q30(s, recip_lut, lut_bits)
        sh = h - 1
        rnd = np.int64(1) << (sh - 1)
        for i in range(n):
            p = (e[r, i] * y + rnd) >> sh
            out[r, i] = clamp(((p * m + ro) >> out_shift) + out_zp, qmin, qmax)


@njit
def _row_max(row):
    """The largest value of a row, as int64."""
    m = np.int64(row[0])
    for i in range(1, row.shape[0]):
        m = max(m, np.int64(row[i]))
    return m


@njit
def _softmax_table(x, exp_lut, recip_lut, lut_bits, out_mult, out_shift, out_zp, qmin, qmax, out):
    """``e = exp_lut[min(max(row) - x, len - 1)]`` per row, then :func:`_normalize_rows` (a table shorter
    than the rows' span ends in 0: every longer distance has e = 0 too)."""
    rows, n = x.shape
    e = np.empty((rows, n), np.int64)
    last = np.int64(exp_lut.shape[0] - 1)
    for r in range(rows):
        m = _row_max(x[r])
        for i in range(n):
            e[r, i] = exp_lut[min(m - np.int64(x[r, i]), last)]
    _normalize_rows(e, out, recip_lut, lut_bits, out_mult, out_shift, out_zp, qmin, qmax)


@njit
def exp2_q30(d, pos_mult, pos_shift, frac_bits, exp2_lut, lut_bits):
    """``2**30 * 2**-(d * s / ln 2)`` for ``d >= 0``: see the module docstring (``softmax_lut16``)."""
    pos = mrs_checked(d, pos_mult, pos_shift)
    k = pos >> frac_bits
    if k >= 31:
        return np.int64(0)
    rem = pos - (k << frac_bits)
    g = frac_bits - lut_bits
    idx = rem >> g
    v = np.int64(exp2_lut[idx])
    if g > 0:
        fr = rem - (idx << g)
        v = v - (((v - np.int64(exp2_lut[idx + 1])) * fr + (np.int64(1) << (g - 1))) >> g)
    if k > 0:
        v = (v + (np.int64(1) << (k - 1))) >> k
    return v


@njit
def _exp2_values(pos_mult, pos_shift, frac_bits, exp2_lut, lut_bits, n):
    """``exp2_q30(d)`` for d = 0, 1, ... up to n - 1 or the first 0 (``exp2_q30`` is non-increasing in d:
    ``pos_mult >= 0`` and the table is non-increasing), whichever comes first."""
    t = np.empty(n, np.int64)
    for d in range(n):
        t[d] = exp2_q30(np.int64(d), pos_mult, pos_shift, frac_bits, exp2_lut, lut_bits)
        if t[d] == 0:
            return t[:d + 1]
    return t


# --------------------------------------------------------------------------------------------------------
# validation and public wrappers
# --------------------------------------------------------------------------------------------------------
def _lut(arr, name: str, lo: int, hi: int, sizes=None) -> tuple[np.ndarray, int]:
    """An int64 copy of a table with values in [lo, hi]; with ``sizes=None`` its length must be 2**K + 1
    (returns K)."""
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D integer numpy array")
    t = np.ascontiguousarray(arr, dtype=np.int64)
    k = 0
    if sizes is None:
        e = t.size - 1
        if e < 2 or e & (e - 1):
            raise ValueError(f"{name} must have 2**K + 1 entries (K >= 1), got {t.size}")
        k = e.bit_length() - 1
    elif t.size < sizes:
        raise ValueError(f"{name} must have at least {sizes} entries, got {t.size}")
    if t.size and (int(t.min()) < lo or int(t.max()) > hi):
        raise ValueError(f"{name} values must lie in [{lo}, {hi}]")
    return t, k


def _recip(recip_lut) -> tuple[np.ndarray, int]:
    t, k = _lut(recip_lut, "recip_lut", 1 << 29, ONE)
    if k > 29:
        raise ValueError("recip_lut may have at most 2**29 + 1 entries")
    if np.any(np.diff(t) > 0):
        raise ValueError("recip_lut must be non-increasing")
    return t, k


def _rows(x, dtypes) -> None:
    check_int_array(x, "x", ndim=2, dtypes=dtypes)
    if x.shape[1] == 0:
        raise ValueError("softmax rows must not be empty")
    if x.shape[1] >= MAX_ROW:
        raise ValueError(f"softmax rows must have fewer than 2**32 elements, got {x.shape[1]}")


def _out(out, shape, out_mult, out_shift, out_zp, qmin, qmax):
    out_zp, qmin, qmax = check_out(out, shape, out_zp, qmin, qmax)
    out_mult = as_int(out_mult, "out_mult")
    out_shift = as_int(out_shift, "out_shift")
    check_multiplier(out_mult, out_shift, "softmax output")
    return out_mult, out_shift, out_zp, qmin, qmax


def softmax_lut8(x, exp_lut, recip_lut, out_mult, out_shift, out_zp, qmin, qmax, out, cache=None) -> None:
    """Softmax of each row of an 8-bit array, exponentials from a direct table.

    Parameters
    ----------
    x : ndarray (rows, n), int8/uint8, C-contiguous, n >= 1
        Quantized logits (the zero point cancels in ``max - x``).
    exp_lut : integer ndarray, at least ``max(x) - min(x) + 1`` entries (256 for a full 8-bit range)
        ``exp_lut[d] ~= 2**30 * exp(-d * s_in)``, values in [0, 2**30], ``exp_lut[0] == 2**30``.
    recip_lut : integer ndarray, 2**K + 1 entries (1 <= K <= 29)
        ``round(2**30 / (1 + i / 2**K))``: non-increasing, values in [2**29, 2**30].
    out_mult, out_shift : int
        Fixed-point factor ``2**-31 / s_out``.
    out_zp, qmin, qmax : int
    out : ndarray (rows, n), 8/16/32-bit integer dtype, written in place.
    cache : dict, optional
        Owned by the caller for one graph node (constant tables and output parameters): keeps the validated
        arguments per input and output shape and dtype.

    Notes
    -----
    Per row (Python-int semantics, ``>>`` = floor)::

        e[i] = exp_lut[max(x) - x[i]]                      # Q.30, e of the maximum = 2**30
        S = sum(e)                                         # int64, [2**30, n * 2**30]
        y, h = recip_q30(S)                                # y / 2**30 ~= 2**h / S
        p[i] = (e[i]*y + 2**(h-2)) >> (h-1)                # Q.31 probability
        out[i] = clamp(mul_round_shift(p[i], out_mult, out_shift) + out_zp, qmin, qmax)
    """
    key = array_key(x, out) + (out_mult, out_shift, out_zp, qmin, qmax)
    args = cached_bind(cache, key, lambda: _bind_lut8(x, exp_lut, recip_lut, out_mult, out_shift, out_zp, qmin, qmax,
                                                      out))
    if x.size and args[0].size < 256:  # a short table must cover this input's span (a full one covers any)
        span = int(x.max()) - int(x.min())
        if args[0].size <= span:
            raise ValueError(f"exp_lut has {args[0].size} entries, the rows span {span + 1} values")
    _softmax_table(x, *args, out)


def _bind_lut8(x, exp_lut, recip_lut, out_mult, out_shift, out_zp, qmin, qmax, out):
    """The validated arguments of ``_softmax_table`` for :func:`softmax_lut8` on arrays like ``x`` and ``out``."""
    _rows(x, IN_DTYPES_8)
    table, _ = _lut(exp_lut, "exp_lut", 0, ONE, sizes=1)
    if table.size and int(table[0]) != ONE:
        raise ValueError("exp_lut[0] must be 2**30 (exp(0) in Q.30)")
    return (table,) + _recip(recip_lut) + _out(out, x.shape, out_mult, out_shift, out_zp, qmin, qmax)


def softmax_lut16(x, pos_mult, pos_shift, frac_bits, exp2_lut, recip_lut, out_mult, out_shift, out_zp, qmin, qmax,
                  out, cache=None) -> None:
    """Softmax of each row of a 16-bit (or 8-bit) array, exponentials by base-2 split + interpolated table.

    Parameters
    ----------
    x : ndarray (rows, n), int16/uint16 (int8/uint8 accepted), C-contiguous, n >= 1
    pos_mult, pos_shift : int
        ``pos_mult * 2**-pos_shift ~= s_in / ln(2) * 2**frac_bits``; ``pos_mult >= 0``.
    frac_bits : int
        ``F``: fraction bits of ``pos``, ``K <= F <= K + 30`` (so the interpolation product fits int64).
    exp2_lut : integer ndarray, 2**K + 1 entries (1 <= K <= 16)
        ``round(2**30 * 2**(-i / 2**K))``: non-increasing, ``exp2_lut[0] == 2**30``, last entry 2**29.
    recip_lut, out_mult, out_shift, out_zp, qmin, qmax, out
        As in :func:`softmax_lut8`.
    cache : dict, optional
        Owned by the caller for one graph node (constant exponent parameters and tables): keeps the validated
        arguments and ``exp2_q30`` of every possible distance, computed on the first call for an input and output
        shape and dtype and looked up after.

    Notes
    -----
    As :func:`softmax_lut8` with ``e[i] = exp2_q30(max(x) - x[i])``::

        pos = mul_round_shift(d, pos_mult, pos_shift)      # d * s_in / ln 2, F fraction bits
        k = pos >> F;  rem = pos - (k << F)                # integer part, fraction (F bits)
        if k >= 31: e = 0
        i = rem >> G;  fr = rem - (i << G)                 # G = F - K interpolation bits
        v = T[i] - (((T[i] - T[i+1]) * fr + 2**(G-1)) >> G)   (v = T[i] when G == 0)
        e = (v + 2**(k-1)) >> k                            (e = v when k == 0)
    """
    key = array_key(x, out) + (pos_mult, pos_shift, frac_bits, out_mult, out_shift, out_zp, qmin, qmax)

    def bind():
        _rows(x, IN_DTYPES_16)
        info = np.iinfo(x.dtype)
        args = _lut16_tables(pos_mult, pos_shift, frac_bits, exp2_lut, recip_lut, int(info.max) - int(info.min) + 1)
        return args + _out(out, x.shape, out_mult, out_shift, out_zp, qmin, qmax)
    _softmax_table(x, *cached_bind(cache, key, bind), out)


def _lut16_tables(pos_mult, pos_shift, frac_bits, exp2_lut, recip_lut, n_d):
    """Validated arguments of :func:`softmax_lut16` as ``(e_table, recip_lut, K)``: ``e_table[d] =
    exp2_q30(d)`` for every distance ``d < n_d`` the input dtype allows (cut after its first 0), computed once
    -- the same integers as evaluating ``exp2_q30`` per element, looked up."""
    pos_mult = as_int(pos_mult, "pos_mult")
    pos_shift = as_int(pos_shift, "pos_shift")
    check_multiplier(pos_mult, pos_shift, "softmax exponent position")
    if pos_mult < 0:
        raise ValueError("pos_mult must be >= 0")
    table, k = _lut(exp2_lut, "exp2_lut", 0, ONE)
    if k > 16:
        raise ValueError("exp2_lut may have at most 2**16 + 1 entries")
    if int(table[0]) != ONE or int(table[-1]) != ONE >> 1 or np.any(np.diff(table) > 0):
        raise ValueError("exp2_lut must be non-increasing from 2**30 to 2**29")
    frac_bits = as_int(frac_bits, "frac_bits")
    if not k <= frac_bits <= k + 30:
        raise ValueError(f"frac_bits must be in [{k}, {k + 30}], got {frac_bits}")
    recip, rk = _recip(recip_lut)
    return _exp2_values(pos_mult, pos_shift, frac_bits, table, k, n_d), recip, rk
