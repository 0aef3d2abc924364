"""Quantized LeakyReLU / PReLU with a per-channel negative slope."""
import numpy as np

from ._jit import njit_noalloc
from .checks import as_int, check_int_array, check_multiplier, check_out, per_channel_int64
from .requantize import clamp, mrs_checked

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)


@njit_noalloc
def _leaky_relu(x, x_zp, pos_mult, pos_shift, neg_mult, neg_shift, out_zp, qmin, qmax, out):
    """out = clamp(mrs(d, pos) if d >= 0 else mrs(d, neg[c])) + out_zp), d = x - x_zp (int64)."""
    n_outer, n_c, n_inner = x.shape
    for o in range(n_outer):
        for c in range(n_c):
            nm = neg_mult[c]
            ns = neg_shift[c]
            for i in range(n_inner):
                d = np.int64(x[o, c, i]) - x_zp
                if d >= 0:
                    y = mrs_checked(d, pos_mult, pos_shift)
                else:
                    y = mrs_checked(d, nm, ns)
                out[o, c, i] = clamp(y + out_zp, qmin, qmax)


def leaky_relu(x, x_zp, pos_mult, pos_shift, neg_mult, neg_shift, out_zp, qmin, qmax, out) -> None:
    """Quantized LeakyReLU/PReLU: separate fixed-point factors for the positive and negative side.

    Parameters
    ----------
    x : ndarray (outer, C, inner), int8/uint8/int16/uint16
    x_zp : int
        Input zero point, |x_zp| <= 2**16.
    pos_mult, pos_shift : int
        Factor ``x_scale / y_scale`` for d >= 0.
    neg_mult, neg_shift : integer ndarrays (C,)
        Per-channel factor ``alpha[c] * x_scale / y_scale`` for d < 0; ``neg_mult`` may be negative or 0.
    out_zp, qmin, qmax : int
    out : ndarray (outer, C, inner), int8/uint8/int16/uint16/int32
        Preallocated, written in place.

    Notes
    -----
    Exact integer semantics per element of channel ``c``::

        d = x - x_zp
        y = mul_round_shift(d, pos_mult, pos_shift)        if d >= 0
            mul_round_shift(d, neg_mult[c], neg_shift[c])  otherwise
        out = clamp(y + out_zp, qmin, qmax)
    """
    check_int_array(x, "x", ndim=3, dtypes=IN_DTYPES)
    out_zp, qmin, qmax = check_out(out, x.shape, out_zp, qmin, qmax)
    x_zp = as_int(x_zp, "x_zp")
    if abs(x_zp) > 1 << 16:
        raise ValueError("x_zp must satisfy |x_zp| <= 2**16")
    pos_mult = as_int(pos_mult, "pos_mult")
    pos_shift = as_int(pos_shift, "pos_shift")
    check_multiplier(pos_mult, pos_shift, "leaky_relu positive side")
    n_c = x.shape[1]
    neg_mult = per_channel_int64(neg_mult, n_c, "neg_mult")
    neg_shift = per_channel_int64(neg_shift, n_c, "neg_shift")
    check_multiplier(neg_mult, neg_shift, "leaky_relu negative side")
    _leaky_relu(x, x_zp, pos_mult, pos_shift, neg_mult, neg_shift, out_zp, qmin, qmax, out)
