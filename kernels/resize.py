"""Bilinear resize accumulators in fixed point (separable weights precomputed by the caller)."""
import numpy as np

from ._jit import njit_noalloc
from .checks import as_int, check_int_array

X_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)
MAX_FRAC_BITS = 22


@njit_noalloc
def _resize_linear_acc(x, x_zp, y0, y1, wy, x0, x1, wx, one, out):
    """out[n, c, o, p] = (one - wy)*((one - wx)*d00 + wx*d01) + wy*((one - wx)*d10 + wx*d11), int64."""
    n_img, n_c = x.shape[0], x.shape[1]
    ho = y0.shape[0]
    wo = x0.shape[0]
    for n in range(n_img):
        for c in range(n_c):
            for o in range(ho):
                r0 = y0[o]
                r1 = y1[o]
                b = wy[o]
                a = one - b
                for p in range(wo):
                    c0 = x0[p]
                    c1 = x1[p]
                    v = wx[p]
                    u = one - v
                    d00 = np.int64(x[n, c, r0, c0]) - x_zp
                    d01 = np.int64(x[n, c, r0, c1]) - x_zp
                    d10 = np.int64(x[n, c, r1, c0]) - x_zp
                    d11 = np.int64(x[n, c, r1, c1]) - x_zp
                    out[n, c, o, p] = a * (u * d00 + v * d01) + b * (u * d10 + v * d11)


def _index_array(arr, name, length_name, limit=None):
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D integer array ({length_name},)")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if limit is not None and arr.size and (int(arr.min()) < 0 or int(arr.max()) >= limit):
        raise ValueError(f"{name} entries must be in [0, {limit})")
    return arr


def resize_linear_acc(x, x_zp, y0, y1, wy, x0, x1, wx, frac_bits) -> np.ndarray:
    """Bilinear interpolation accumulator with ``frac_bits``-bit fractional weights (NCHW).

    Parameters
    ----------
    x : ndarray [N, C, H, W], int8/uint8/int16/uint16
    x_zp : int
        Input zero point (|x_zp| <= 2**16).
    y0, y1, wy : integer ndarrays (Ho,)
        Source rows (in [0, H)) and weight of row y1, 0 <= wy <= 2**frac_bits.
    x0, x1, wx : integer ndarrays (Wo,)
        Source columns (in [0, W)) and weight of column x1, 0 <= wx <= 2**frac_bits.
    frac_bits : int
        F, 0..22.

    Returns
    -------
    int64 ndarray [N, C, Ho, Wo]
        With ``d(i, j) = x[n, c, i, j] - x_zp`` and ``ONE = 2**F``::

            acc[n, c, o, p] = (ONE - wy[o]) * ((ONE - wx[p]) * d(y0[o], x0[p]) + wx[p] * d(y0[o], x1[p]))
                            +  wy[o]        * ((ONE - wx[p]) * d(y1[o], x0[p]) + wx[p] * d(y1[o], x1[p]))

        i.e. the interpolated value times 2**(2F), exact (|acc| <= 2**(2F) * 2**17).
    """
    check_int_array(x, "x", ndim=4, dtypes=X_DTYPES)
    x_zp = as_int(x_zp, "x_zp")
    if abs(x_zp) > 1 << 16:
        raise ValueError("x_zp must satisfy |x_zp| <= 2**16")
    frac_bits = as_int(frac_bits, "frac_bits")
    if not 0 <= frac_bits <= MAX_FRAC_BITS:
        raise ValueError(f"frac_bits must be in [0, {MAX_FRAC_BITS}], got {frac_bits}")
    n, c, h, w = x.shape
    one = 1 << frac_bits
    y0 = _index_array(y0, "y0", "Ho", h)
    y1 = _index_array(y1, "y1", "Ho", h)
    wy = _index_array(wy, "wy", "Ho", one + 1)
    x0 = _index_array(x0, "x0", "Wo", w)
    x1 = _index_array(x1, "x1", "Wo", w)
    wx = _index_array(wx, "wx", "Wo", one + 1)
    if not (y0.shape == y1.shape == wy.shape):
        raise ValueError(f"y0, y1, wy must have the same length, got {y0.shape}, {y1.shape}, {wy.shape}")
    if not (x0.shape == x1.shape == wx.shape):
        raise ValueError(f"x0, x1, wx must have the same length, got {x0.shape}, {x1.shape}, {wx.shape}")
    out = np.empty((n, c, y0.shape[0], x0.shape[0]), dtype=np.int64)
    _resize_linear_acc(x, x_zp, y0, y1, wy, x0, x1, wx, one, out)
    return out
