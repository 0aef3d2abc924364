"""Lookup table for 8-bit inputs: one table entry per input code, a plain gather (exact by construction)."""
import numpy as np

from ._jit import njit_noalloc
from .checks import array_key, cached_bind, check_int_array

IN_DTYPES = (np.int8, np.uint8)
TABLE_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)


@njit_noalloc
def _lut8(x, table, offset, out):
    """out[i] = table[x[i] - offset] (offset = the input dtype's minimum: -128 for int8, 0 for uint8)."""
    for i in range(x.shape[0]):
        out[i] = table[np.int64(x[i]) - offset]


def lut8(x, table, out, cache=None) -> None:
    """Table lookup of every element of an 8-bit integer array.

    Parameters
    ----------
    x : 1-D ndarray, int8 or uint8
        Input codes (int4/uint4 values stored in int8/uint8 arrays are fine: they index the same table).
    table : 1-D ndarray of 256 entries, int8/uint8/int16/uint16
        ``table[j]`` is the output code for input code ``qmin + j``, ``qmin`` the input dtype's minimum
        (-128 for int8, 0 for uint8).
    out : 1-D ndarray, same length as ``x``, same dtype as ``table``
        Preallocated, written in place.
    cache : dict, optional
        Owned by the caller for a constant ``table`` (one per graph node): keeps the validated arguments, so a
        later call with the same shapes, dtypes and layout goes straight to the loop.

    Notes
    -----
    Exact integer semantics per element::

        out[i] = table[x[i] - qmin]

    Every value the table holds is a legal output (the table builder clamps), so there is no rounding or
    saturation here.
    """
    cached_bind(cache, array_key(x, out), lambda: _bind(x, table, out))(x, out)


def _bind(x, table, out):
    """:func:`lut8` validated for arrays like ``x`` and ``out``: returns ``run(x, out)``."""
    check_int_array(x, "x", ndim=1, dtypes=IN_DTYPES)
    check_int_array(table, "table", ndim=1, dtypes=TABLE_DTYPES)
    if table.shape[0] != 256:
        raise ValueError(f"table must have 256 entries, got {table.shape[0]}")
    check_int_array(out, "out", ndim=1)
    if out.dtype != table.dtype:
        raise ValueError(f"out dtype {out.dtype} must equal the table dtype {table.dtype}")
    if out.shape != x.shape:
        raise ValueError(f"out must have shape {x.shape}, got {out.shape}")
    offset = int(np.iinfo(x.dtype).min)
    return lambda x, out: _lut8(x, table, offset, out)
