"""Lookup tables with one entry per input code, a plain gather (exact by construction).

:func:`lut8` takes 8-bit inputs (256 entries); :func:`lut_codes` 8- or 16-bit ones (256 or 65,536 entries: the
executor's tables of whole elementwise chains, ``npu_sim/runtime/chains.py``). Both index the table by the
input's storage bytes read as unsigned (``x.view(uint8)`` / ``x.view(uint16)``), with the table rearranged once
at binding: a signed index would make the loop test every index for a negative value (Numba's wraparound), which
measured here twice the time of the gather itself.

A table of bytes indexed by bytes runs 32 elements at a time where the CPU has AVX2 (:func:`select`): the table
is 16 rows of 16 bytes, and ``vpshufb`` looks up all 32 elements' low nibbles in one row at once; each element
keeps the result of the row its high nibble names (:func:`_lut32`). 0.36 -> 0.17 ns an element here, the same
bytes (a scalar gather is two loads and a store per element: 1.4 cycles).
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import cpu
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


def select(feats) -> str | None:
    """The byte-table kernel a CPU with features ``feats`` (:mod:`kernels.cpu`) runs: "avx2" (``vpshufb`` on 32
    bytes), else None (the scalar gather)."""
    return "avx2" if cpu.has(feats, "avx2") else None


ISA = select(cpu.features())
_V32 = ir.VectorType(ir.IntType(8), 32)


@intrinsic
def _lut32(typingctx, raw, rows, out, i):
    """``out[i + j] = table[raw[i + j]]`` for j < 32 (AVX2): ``rows`` holds the table's 16 rows of 16 bytes, each
    twice (512 bytes: one 32-byte vector per row, the row in both 128-bit halves, as ``vpshufb`` looks up within
    each half). The row of the high nibble ``h`` is looked up by the low nibbles; an element keeps it where its own
    high nibble is ``h``. The caller guarantees ``i + 32 <= len``."""
    sig = types.void(raw, rows, out, i)

    def codegen(context, builder, sig, args):
        index = args[3]
        xs, rs, os_ = [cgutils.create_struct_proxy(sig.args[k])(context, builder, value=args[k]) for k in (0, 1, 2)]
        shuffle = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V32, [_V32, _V32]),
                                                 "llvm.x86.avx2.pshuf.b")
        x = builder.load(builder.bitcast(builder.gep(xs.data, [index]), _V32.as_pointer()), align=1)
        low = builder.and_(x, ir.Constant(_V32, [15] * 32))
        high = builder.lshr(x, ir.Constant(_V32, [4] * 32))
        got = ir.Constant(_V32, None)
        for h in range(16):
            row = builder.load(builder.bitcast(builder.gep(rs.data, [ir.Constant(ir.IntType(64), 32 * h)]),
                                               _V32.as_pointer()), align=1)
            mine = builder.icmp_unsigned("==", high, ir.Constant(_V32, [h] * 32))
            got = builder.select(mine, builder.call(shuffle, [row, low]), got)
        builder.store(got, builder.bitcast(builder.gep(os_.data, [index]), _V32.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


@njit_noalloc
def _gather_bytes(raw, rows, table, out):
    """:func:`_gather` for a byte table indexed by bytes, 32 at a time (:func:`_lut32`, AVX2), the tail one by
    one (and all of it one by one for arrays that are not contiguous: the vectors read and write 32 bytes in a
    row). ``rows``: :func:`byte_rows` of ``table``; ``out`` bytes."""
    n = raw.shape[0]
    i = 0
    while i + 32 <= n and raw.strides[0] == 1 and out.strides[0] == 1:
        _lut32(raw, rows, out, i)
        i += 32
    for j in range(i, n):
        out[j] = table[raw[j]]


def byte_rows(table: np.ndarray) -> np.ndarray:
    """A 256-byte table as :func:`_lut32` reads it: 16 rows of 16 bytes, each twice, as uint8."""
    return np.ascontiguousarray(np.repeat(table.view(np.uint8).reshape(16, 1, 16), 2, axis=1).reshape(-1))


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
    if x.dtype.itemsize == 1 and table.dtype.itemsize == 1 and ISA is not None:
        rows = byte_rows(raw_table)
        return lambda x, out: _gather_bytes(x.view(np.uint8), rows, raw_table, out.view(np.uint8))
    return lambda x, out: _gather(x.view(unsigned), raw_table, out)
