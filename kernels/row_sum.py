"""Exact int64 sums of the rows of a 2-D integer array: the accumulator of GlobalAveragePool and ReduceMean over
trailing axes (``npu_sim/ops/pool.py`` removes the zero point and requantizes it)."""
import numpy as np

from ._jit import njit
from .requantize import check_int_array

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)


@njit
def _row_sums(x, out):
    """out[r] = sum(x[r, :]) in int64 (exact: the wrapper bounds n * max|x| below 2**63)."""
    for r in range(x.shape[0]):
        row = x[r]
        s = np.int64(0)
        for i in range(row.shape[0]):
            s += np.int64(row[i])
        out[r] = s
    return out


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
