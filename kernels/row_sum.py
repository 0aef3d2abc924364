"""Exact int64 sums of the rows of a 2-D integer array: the accumulator of GlobalAveragePool and ReduceMean over
trailing axes. ``npu_sim/ops/pool.py`` requantizes it (the zero point in the bias): with
:func:`row_sums_requantized` in the same kernel call where that is proven the same, else separately."""
import numpy as np

from ._jit import njit_noalloc
from .checks import check_int_array, check_multiplier, check_out
from .requantize import ACC_LIMIT, requantize_row, saturation_bounds

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)


@njit_noalloc
def _row_sums(x, out):
    """out[r] = sum(x[r, :]) in int64 (exact: the wrapper bounds n * max|x| below 2**63)."""
    for r in range(x.shape[0]):
        row = x[r]
        s = np.int64(0)
        for i in range(row.shape[0]):
            s += np.int64(row[i])
        out[r] = s


def row_sums(x, out) -> None:
    """``out[r] = x[r, 0] + ... + x[r, n-1]``, exact.

    Parameters
    ----------
    x : 2-D ndarray (rows, n), int8/uint8/int16/uint16/int32, C-contiguous
    out : int64 ndarray (rows,), preallocated, written in place
    """
    check_int_array(x, "x", ndim=2, dtypes=IN_DTYPES)
    if not isinstance(out, np.ndarray) or out.dtype != np.int64 or out.shape != x.shape[:1]:
        raise ValueError(f"out must be an int64 array of shape ({x.shape[0]},)")
    info = np.iinfo(x.dtype)
    if x.shape[1] * max(-int(info.min), int(info.max)) >= 1 << 63:
        raise ValueError("row_sums: rows too long for an exact int64 sum")
    _row_sums(x, out)


@njit_noalloc
def _row_sums_requantized(x, bias, mult, shift, bound, out_zp, qmin, qmax, acc, out):
    """acc = the row sums of x; out = requantize_row(acc) with one (bias, mult, shift, bound) for every row."""
    _row_sums(x, acc)
    requantize_row(acc, out, bias, mult, shift, bound, out_zp, qmin, qmax)


def row_sums_requantized(x, bias, mult, shift, out_zp, qmin, qmax, acc_bits, out) -> bool:
    """``out[r] = requantize(x[r, 0] + ... + x[r, n-1], bias, mult, shift, out_zp, qmin, qmax, acc_bits)`` (one
    multiplier for all rows, as ``kernels.requantize.requantize`` computes it) in one kernel call: the sums, then
    the branch-free ``requantize_row``. Used only where that is proven the same: ``n * max|x| + |bias|`` stays
    below the board's ``acc_bits`` (no overflow to count) and the multiplier has a saturation bound. Returns False,
    leaving ``out`` untouched, when that does not hold; the caller then sums and requantizes separately.

    ``x`` as :func:`row_sums`; ``bias``, ``mult``, ``shift``, ``out_zp``, ``qmin``, ``qmax``, ``acc_bits`` ints;
    ``out`` (rows,), 8/16/32-bit integers.
    """
    run = bind_requantized(x, bias, mult, shift, out_zp, qmin, qmax, acc_bits, out)
    if run is None:
        return False
    run(x, out)
    return True


def bind_requantized(x, bias, mult, shift, out_zp, qmin, qmax, acc_bits, out):
    """:func:`row_sums_requantized` validated once for arrays shaped, typed and laid out like ``x`` and ``out``:
    returns ``run(x, out)`` for such arrays, or None where the fusion is not proven."""
    check_int_array(x, "x", ndim=2, dtypes=IN_DTYPES)
    out_zp, qmin, qmax = check_out(out, x.shape[:1], out_zp, qmin, qmax)
    bias, mult, shift, acc_bits = int(bias), int(mult), int(shift), int(acc_bits)
    check_multiplier(mult, shift, "row_sums_requantized")
    info = np.iinfo(x.dtype)
    reach = x.shape[1] * max(-int(info.min), int(info.max)) + abs(bias)
    if reach >= min(1 << (acc_bits - 1), ACC_LIMIT):
        return None
    bound = int(saturation_bounds(np.array([mult]), np.array([shift]), out_zp, qmin, qmax, reach=reach)[0])
    if bound == 0:
        return None
    args = (bias, mult, shift, bound, out_zp, qmin, qmax)
    rows = x.shape[0]

    def run(x, out):
        _row_sums_requantized(x, *args, np.empty(rows, np.int64), out)

    return run
