"""Per-channel integer affine with one rounding: BatchNormalization and Add/Sub of a constant on the board.

For every element of channel ``c`` (input laid out as (outer, C, inner))::

    acc = (x - x_zp) * W[c] + B[c]                       (int64, exact: the caller keeps |acc| < 2**62)
    out = clamp(floor((acc + 2**(F-1)) / 2**F) + out_zp, qmin, qmax)      (F >= 1; ties toward +infinity)
"""
import numpy as np

from ._jit import njit_noalloc
from .checks import as_int, check_int_array, check_out, per_channel_int64
from .requantize import fits_int64, scale_row

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)
ACC_LIMIT = 1 << 62


@njit_noalloc
def _affine(x, x_zp, w, b, f_bits, out_zp, qmin, qmax, folded, out):
    """out = clamp(((x - x_zp) * w[c] + b[c] + 2^(F-1)) >> F + out_zp, qmin, qmax) over (outer, C, inner).

    ``folded``: ``b`` holds ``b[c] + 2^(F-1) - x_zp*w[c] + out_zp*2^F`` and the wrapper proved that ``x*w[c] + b``
    stays inside int64, so each row is ``(x*w[c] + b) >> F`` (the same integer: adding ``out_zp*2^F`` before the
    floor shift adds ``out_zp`` after it) through :func:`scale_row`."""
    n_outer, n_c, n_inner = x.shape
    half = np.int64(1) << (f_bits - 1)
    for o in range(n_outer):
        for c in range(n_c):
            if folded:
                scale_row(x[o, c], w[c], b[c], f_bits, np.int64(0), qmin, qmax, out[o, c])
                continue
            wc = w[c]
            bc = b[c] + half
            for i in range(n_inner):
                y = (((np.int64(x[o, c, i]) - x_zp) * wc + bc) >> f_bits) + out_zp
                out[o, c, i] = min(max(y, qmin), qmax)


def _fold(x_dtype, x_zp, w, b, f_bits, out_zp):
    """``b[c] + 2^(F-1) - x_zp*w[c] + out_zp*2^F`` (int64) when ``x*w[c]`` plus it provably stays inside int64 for
    every x of ``x_dtype``, else None (Python ints: exact)."""
    folded = [int(bc) + (1 << (f_bits - 1)) - x_zp * int(wc) + (out_zp << f_bits) for wc, bc in zip(w, b)]
    if not fits_int64(x_dtype, int(np.abs(w).max(initial=0)), max(map(abs, folded), default=0)):
        return None
    return np.array(folded, np.int64)


def affine(x, x_zp, w, b, f_bits, out_zp, qmin, qmax, out) -> None:
    """Per-channel affine ``(x - x_zp) * w[c] + b[c]`` rounded once at ``f_bits`` fraction bits (see the module).

    Parameters
    ----------
    x : ndarray (outer, C, inner), int8/uint8/int16/uint16, C-contiguous
    x_zp : int, |x_zp| <= 2**16
    w, b : integer ndarrays (C,): the factor and the offset, both with ``f_bits`` fraction bits
    f_bits : int in [1, 62]
    out_zp, qmin, qmax : int
    out : ndarray (outer, C, inner), preallocated, written in place

    Raises ValueError when ``|x - x_zp| * |w| + |b|`` could reach 2**62 (the sum would not be exact).
    """
    bind(x, x_zp, w, b, f_bits, out_zp, qmin, qmax, out)(x, out)


def bind(x, x_zp, w, b, f_bits, out_zp, qmin, qmax, out):
    """:func:`affine` validated once for arrays shaped, typed and laid out like ``x`` and ``out``: returns
    ``run(x, out)`` for such arrays (the constant arguments bound)."""
    check_int_array(x, "x", ndim=3, dtypes=IN_DTYPES)
    out_zp, qmin, qmax = check_out(out, x.shape, out_zp, qmin, qmax)
    x_zp = as_int(x_zp, "x_zp")
    if abs(x_zp) > 1 << 16:
        raise ValueError("x_zp must satisfy |x_zp| <= 2**16")
    f_bits = as_int(f_bits, "f_bits")
    if not 1 <= f_bits <= 62:
        raise ValueError("f_bits must be in [1, 62]")
    n_c = x.shape[1]
    w = per_channel_int64(w, n_c, "w")
    b = per_channel_int64(b, n_c, "b")
    info = np.iinfo(x.dtype)
    dev = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp))
    if n_c and dev * int(np.abs(w).max()) + int(np.abs(b).max()) + (1 << (f_bits - 1)) >= ACC_LIMIT:
        raise ValueError("affine: |x - x_zp| * |w| + |b| must stay below 2**62")
    folded = _fold(x.dtype, x_zp, w, b, f_bits, out_zp)
    args = (x_zp, w, b, f_bits, out_zp, qmin, qmax, False) if folded is None else \
        (x_zp, w, folded, f_bits, out_zp, qmin, qmax, True)

    def run(x, out):
        _affine(x, *args, out)

    run.args = args  # the loop's arguments (the last: whether the constants were folded)
    return run
