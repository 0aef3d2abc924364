"""Nearest-neighbour Resize of NCHW planes: a gather with precomputed source rows and columns."""
import numpy as np

from ._jit import njit_noalloc
from .checks import check_int_array

X_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)


@njit_noalloc
def _resize_nearest(x, rows, cols, out):
    """out[n, c, o, p] = x[n, c, rows[o], cols[p]]; an output row whose source row is the previous one's is a copy
    of it (upsampling repeats rows)."""
    n_img, n_c = x.shape[0], x.shape[1]
    wo = cols.shape[0]
    for n in range(n_img):
        for c in range(n_c):
            for o in range(rows.shape[0]):
                dst = out[n, c, o]
                if o > 0 and rows[o] == rows[o - 1]:
                    prev = out[n, c, o - 1]
                    for p in range(wo):  # an explicit loop: numba's slice assignment is several times slower
                        dst[p] = prev[p]
                    continue
                src = x[n, c, rows[o]]
                for p in range(wo):
                    dst[p] = src[cols[p]]


def resize_nearest(x, rows, cols, out) -> None:
    """``out[n, c, o, p] = x[n, c, rows[o], cols[p]]``.

    Parameters
    ----------
    x : ndarray [N, C, H, W], 8/16/32-bit integers, C-contiguous
    rows : integer ndarray (Ho,), entries in [0, H)
    cols : integer ndarray (Wo,), entries in [0, W)
    out : ndarray [N, C, Ho, Wo] of x's dtype, C-contiguous, written in place
    """
    check_int_array(x, "x", ndim=4, dtypes=X_DTYPES)
    check_int_array(out, "out", ndim=4, dtypes=(x.dtype,))
    n, c, h, w = x.shape
    for arr, name, limit in ((rows, "rows", h), (cols, "cols", w)):
        if not isinstance(arr, np.ndarray) or arr.dtype != np.int64 or arr.ndim != 1:
            raise ValueError(f"{name} must be a 1-D int64 array")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= limit):
            raise ValueError(f"{name} entries must be in [0, {limit})")
    if out.shape != (n, c, rows.size, cols.size):
        raise ValueError(f"out must have shape {(n, c, rows.size, cols.size)}, got {out.shape}")
    _resize_nearest(x, np.ascontiguousarray(rows), np.ascontiguousarray(cols), out)
