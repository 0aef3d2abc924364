"""Lookup tables with one entry per input code, a plain gather (exact by construction).

:func:`lut8` takes 8-bit inputs (256 entries); :func:`lut_codes` 8- or 16-bit ones (256 or 65,536 entries: the
executor's tables of whole elementwise chains, ``npu_sim/runtime/chains.py``). Both index the table by the
input's storage bytes read as unsigned (``x.view(uint8)`` / ``x.view(uint16)``), with the table rearranged once
at binding: a signed index would make the loop test every index for a negative value (Numba's wraparound), which
measured here twice the time of the gather itself.
"""
import numpy as np

from ._jit import njit_noalloc
from .checks import array_key, cached_bind, check_int_array

IN_DTYPES = (np.int8, np.uint8)
IN_DTYPES_16 = (np.int16, np.uint16)
TABLE_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)
_UNSIGNED = {1: np.uint8, 2: np.uint16}


@njit_noalloc
def _gather(raw, table, out):
    """out[i] = table[raw[i]] (raw: the input's storage read as unsigned; table: one entry per such value)."""
    for i in range(raw.shape[0]):
        out[i] = table[raw[i]]


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
    cached_bind(cache, array_key(x, out), lambda: _bind(x, table, out, IN_DTYPES))(x, out)


def lut_codes(x, table, out, cache=None) -> None:
    """:func:`lut8` for 8- or 16-bit inputs: ``table`` has one entry per code of ``x``'s dtype (256 for int8/uint8,
    65,536 for int16/uint16), ``table[j]`` the output code for input code ``qmin + j`` (``qmin`` the dtype's
    minimum); ``out[i] = table[x[i] - qmin]``. Same arguments and cache otherwise."""
    cached_bind(cache, array_key(x, out), lambda: _bind(x, table, out, IN_DTYPES + IN_DTYPES_16))(x, out)


def bind_codes(x, table, out):
    """:func:`lut_codes` validated once for arrays like ``x`` and ``out`` (1-D): returns ``run(x, out)``, which goes
    straight to the loop (for a caller that checks shapes itself, e.g. one bound run per input shape)."""
    return _bind(x, table, out, IN_DTYPES + IN_DTYPES_16)


def raw_order(table: np.ndarray, in_dtype) -> np.ndarray:
    """``table`` (entry j for code ``qmin + j``) rearranged to be indexed by the code's storage read as unsigned:
    the same table for unsigned inputs; for signed ones the two halves swapped (code -1 is stored as 0xFF...)."""
    if np.dtype(in_dtype).kind == "u":
        return np.ascontiguousarray(table)
    return np.ascontiguousarray(np.roll(table, len(table) // 2))


def _bind(x, table, out, in_dtypes):
    """:func:`lut8` / :func:`lut_codes` validated for arrays like ``x`` and ``out``: returns ``run(x, out)``."""
    check_int_array(x, "x", ndim=1, dtypes=in_dtypes)
    check_int_array(table, "table", ndim=1, dtypes=TABLE_DTYPES)
    entries = 1 << (8 * x.dtype.itemsize)
    if table.shape[0] != entries:
        raise ValueError(f"table must have {entries} entries, got {table.shape[0]}")
    check_int_array(out, "out", ndim=1)
    if out.dtype != table.dtype:
        raise ValueError(f"out dtype {out.dtype} must equal the table dtype {table.dtype}")
    if out.shape != x.shape:
        raise ValueError(f"out must have shape {x.shape}, got {out.shape}")
    raw_table, unsigned = raw_order(table, x.dtype), _UNSIGNED[x.dtype.itemsize]
    return lambda x, out: _gather(x.view(unsigned), raw_table, out)
