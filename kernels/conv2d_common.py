"""Shared pieces of the 2-D convolution kernels (NCHW): argument checks and geometry.

:func:`out_size` (output length along one axis), :func:`check_geometry` and :func:`validate_conv2d` (argument
checks and the int64 exactness bound), :func:`requant_args` (the per-channel arguments of a fused
requantization), and the two small njit helpers the strategies share, :func:`valid_range` (the output range a
tap reads inside the input) and :func:`sub_zero_point`. Used by :mod:`kernels.conv2d` and its strategies
(:mod:`kernels.conv2d_direct`, :mod:`kernels.conv2d_gemm`), :mod:`kernels.conv_transpose2d` and
:mod:`kernels.pool2d`.
"""
import numpy as np

from ._jit import njit
from .checks import as_int, as_int_tuple, check_int_array, check_multiplier, check_out, per_channel_int64
from .gemm import abs_max

X_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)
W_DTYPES = (np.int8, np.int16, np.int32)
INT64_SAFE = (1 << 63) - 1


def out_size(size: int, pad_lo: int, pad_hi: int, k: int, stride: int, dil: int) -> int:
    """Output length of a convolution along one axis: ``(size + lo + hi - dil*(k-1) - 1) // stride + 1``."""
    return (size + pad_lo + pad_hi - dil * (k - 1) - 1) // stride + 1


def check_geometry(x, x_zp, w, stride, pads, dilation, groups):
    """Shared argument checks of the convolution kernels (also used by conv_transpose2d): dtypes, zero point,
    and positive strides/dilations, non-negative pads; returns them as Python ints."""
    check_int_array(x, "x", ndim=4, dtypes=X_DTYPES)
    check_int_array(w, "w", ndim=4, dtypes=W_DTYPES)
    x_zp = as_int(x_zp, "x_zp")
    if abs(x_zp) > 1 << 16:
        raise ValueError(f"x_zp {x_zp} out of range for 8/16-bit activations")
    stride = as_int_tuple(stride, 2, "stride")
    pads = as_int_tuple(pads, 4, "pads")
    dilation = as_int_tuple(dilation, 2, "dilation")
    groups = as_int(groups, "groups")
    if min(stride) < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if min(dilation) < 1:
        raise ValueError(f"dilation must be >= 1, got {dilation}")
    if min(pads) < 0:
        raise ValueError(f"pads must be >= 0, got {pads}")
    return x_zp, stride, pads, dilation, groups


def validate_conv2d(x, x_zp, w, stride, pads, dilation, groups, wmax=None):
    """Check the arguments of conv2d_acc; return normalized Python ints and the output shape."""
    x_zp, (sh, sw), (top, left, bottom, right), (dh, dw), groups = check_geometry(x, x_zp, w, stride, pads,
                                                                                  dilation, groups)
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    if groups < 1 or cin % groups or cout % groups:
        raise ValueError(f"groups={groups} must divide Cin={cin} and Cout={cout}")
    if cin_g != cin // groups:
        raise ValueError(f"w has {cin_g} input channels per group, expected Cin/groups = {cin // groups}")
    if kh < 1 or kw < 1:
        raise ValueError(f"kernel must be at least 1x1, got {kh}x{kw}")
    ho = out_size(h, top, bottom, kh, sh, dh)
    wo = out_size(wd, left, right, kw, sw, dw)
    if ho < 1 or wo < 1:
        raise ValueError(f"empty output {ho}x{wo}: input {h}x{wd}, pads {pads}, kernel {kh}x{kw}, "
                         f"dilation {(dh, dw)}")
    # exactness of the int64 accumulation: every |partial sum| <= K * max|x - zp| * max|w|
    info = np.iinfo(x.dtype)  # bounds from the dtype: no pass over the data, same plan every call
    x_dev = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp))
    bound = x_dev * (abs_max(w) if wmax is None else wmax)
    if bound * cin_g * kh * kw > INT64_SAFE:
        raise ValueError("conv2d accumulator could exceed int64")
    return (x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, (n, cout, ho, wo), bound)


def requant_args(bias, mult, shift, out, shape, out_zp, qmin, qmax, name):
    """Validated per-output-channel requantization arguments of a fused convolution: ``bias``, ``mult``,
    ``shift`` as int64 arrays of ``shape[1]`` entries, and the output's ``out_zp, qmin, qmax``."""
    cout = shape[1]
    bias = per_channel_int64(bias, cout, "bias")
    mult = per_channel_int64(mult, cout, "mult")
    shift = per_channel_int64(shift, cout, "shift")
    check_multiplier(mult, shift, name)
    return (bias, mult, shift) + tuple(check_out(out, shape, out_zp, qmin, qmax))


@njit
def valid_range(n_out, n_in, stride, offset):
    """Output indices o in [0, n_out) with 0 <= o*stride + offset < n_in, as (lo, hi), 0 <= lo <= hi <= n_out."""
    # o >= ceil(-offset / stride) and o <= floor((n_in - 1 - offset) / stride)
    lo = -((offset) // stride)  # ceil(-offset / stride)
    hi = (n_in - 1 - offset) // stride + 1
    if lo < 0:
        lo = 0
    if lo > n_out:
        lo = n_out
    if hi > n_out:
        hi = n_out
    if hi < lo:
        hi = lo
    return lo, hi


@njit
def sub_zero_point(x2d, x_zp, out):
    """out[i, j] = x2d[i, j] - x_zp, converted (exactly) to out's dtype."""
    rows, cols = x2d.shape
    for i in range(rows):
        for j in range(cols):
            out[i, j] = np.int64(x2d[i, j]) - x_zp
    return out
