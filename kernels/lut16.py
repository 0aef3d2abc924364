"""Lookup table for 16-bit inputs: ``2**k + 1`` entries over the whole input code range, linear interpolation
between neighbouring entries in fixed point."""
import numpy as np

from ._jit import njit_noalloc
from .checks import array_key, as_int, cached_bind, check_int_array, check_out
from .requantize import clamp

IN_DTYPES = (np.int16, np.uint16)
TABLE_DTYPES = (np.int16, np.uint16)


@njit_noalloc
def _lut16(x, table, offset, shift, qmin, qmax, out):
    """u = x - offset; idx = u >> shift; frac = u & (2**shift - 1);
    out = clamp(t[idx] + (((t[idx+1] - t[idx]) * frac + 2**shift // 2) >> shift)), all in int64."""
    mask = (np.int64(1) << shift) - 1
    half = (np.int64(1) << shift) >> 1
    for i in range(x.shape[0]):
        u = np.int64(x[i]) - offset
        idx = u >> shift
        frac = u & mask
        base = np.int64(table[idx])
        nxt = np.int64(table[idx + 1])
        y = base + (((nxt - base) * frac + half) >> shift)
        out[i] = clamp(y, qmin, qmax)


def lut16(x, table, qmin, qmax, out, cache=None) -> None:
    """Interpolated table lookup of every element of a 16-bit integer array.

    Parameters
    ----------
    x : 1-D ndarray, int16 or uint16
        Input codes.
    table : 1-D ndarray of ``2**k + 1`` entries (1 <= k <= 16), int16 or uint16
        Entry ``j`` is the output code at input code ``x_min + j * 2**(16-k)`` (``x_min`` = -32768 for int16,
        0 for uint16); the last entry sits one step past the largest input code.
    qmin, qmax : int
        Output clamp, inside the range of ``out``'s dtype.
    out : 1-D ndarray, same length as ``x``, int8/uint8/int16/uint16/int32
        Preallocated, written in place.
    cache : dict, optional
        Owned by the caller for a constant ``table``, ``qmin``, ``qmax`` (one per graph node): keeps the validated
        arguments, so a later call with the same shapes and dtypes goes straight to the loop.

    Notes
    -----
    Exact integer semantics per element, with ``s = 16 - k`` and every intermediate in int64::

        u    = x - x_min                      # 0 .. 65535
        idx  = u >> s                         # 0 .. 2**k - 1
        frac = u & (2**s - 1)
        d    = table[idx + 1] - table[idx]
        y    = table[idx] + ((d * frac + 2**(s-1)) >> s)    # floor shift: ties round toward +infinity
        out  = clamp(y, qmin, qmax)

    (``2**(s-1)`` is 0 when s == 0, a full table.) ``y`` always lies between the two entries, so the clamp only
    matters for entries outside [qmin, qmax].
    """
    cached_bind(cache, array_key(x, out), lambda: _bind(x, table, qmin, qmax, out))(x, out)


def _bind(x, table, qmin, qmax, out):
    """:func:`lut16` validated for arrays like ``x`` and ``out``: returns ``run(x, out)``."""
    check_int_array(x, "x", ndim=1, dtypes=IN_DTYPES)
    check_int_array(table, "table", ndim=1, dtypes=TABLE_DTYPES)
    n = table.shape[0]
    k = (n - 1).bit_length() - 1
    if n < 3 or n != (1 << k) + 1 or k > 16:
        raise ValueError(f"table must have 2**k + 1 entries with 1 <= k <= 16, got {n}")
    _, qmin, qmax = check_out(out, x.shape, 0, qmin, qmax)
    qmin, qmax = as_int(qmin, "qmin"), as_int(qmax, "qmax")
    args = (int(np.iinfo(x.dtype).min), 16 - k, qmin, qmax)
    return lambda x, out: _lut16(x, table, *args, out)
