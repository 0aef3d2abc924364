"""2-D convolution accumulator (NCHW), exact in int64: :func:`conv2d_acc`, the public entry point.

``conv2d_acc`` returns the raw accumulator; bias, scaling and clamping are ``kernels.requantize``'s job.
Two interchangeable paths compute it:

* :func:`kernels.conv2d_direct.conv2d_direct` -- a numba loop over output planes (used for depthwise
  convolutions, where a GEMM per group would be tiny);
* :func:`kernels.conv2d_gemm.conv2d_gemm` -- im2col (numba, zero point subtracted while converting to float)
  followed by the exact chunked float GEMM of :mod:`kernels.gemm`, one GEMM per (image, group); 1x1 / stride 1 /
  no-pad convolutions skip the im2col gather and only convert; stride-1 convolutions stack their taps
  (:mod:`kernels.conv2d_hilo`); 16-bit activations use the int16-pair kernel of :mod:`kernels.conv_int16` where
  it is proven exact and the CPU has it.

Both are checked bit for bit against ``tests/naive.py::conv2d_acc`` and against each other. The shared argument
checks are in :mod:`kernels.conv2d_common`.
"""
import numpy as np

from .checks import check_int_array
from .conv2d_common import W_DTYPES
from .conv2d_direct import conv2d_direct
from .conv2d_gemm import conv2d_gemm


def conv2d_acc(x, x_zp, w, stride, pads, dilation, groups, compact=False) -> np.ndarray:
    """Integer 2-D convolution accumulator (ONNX Conv / ConvInteger geometry, NCHW).

    Parameters
    ----------
    x : ndarray [N, Cin, H, W], int8/uint8/int16/uint16
        Raw quantized activations.
    x_zp : int
        Activation zero point (subtracted from every input value; padding equals x_zp, i.e. contributes 0).
    w : ndarray [Cout, Cin // groups, kh, kw], int8/int16/int32
        Weights with their zero point already removed.
    stride : (sh, sw), each >= 1
    pads : (top, left, bottom, right), each >= 0
    dilation : (dh, dw), each >= 1
    groups : int, divides Cin and Cout
    compact : bool
        Allow an int32 result where the direct (depthwise) loop proved it exact.

    Returns
    -------
    int64 ndarray [N, Cout, Ho, Wo]
        ``Ho = (H + top + bottom - dh*(kh-1) - 1) // sh + 1`` (same for Wo) and::

            acc[n, co, oh, ow] = sum_{ci_local, ky, kx} (x[n, g*Cin_g + ci_local, ih, iw] - x_zp)
                                                         * w[co, ci_local, ky, kx]
            ih = oh*sh + ky*dh - top,  iw = ow*sw + kx*dw - left,  g = co // (Cout // groups)

        with out-of-bounds (ih, iw) terms equal to 0. Exact: the wrapper rejects inputs whose sums could
        exceed int64.

    Notes
    -----
    Depthwise convolutions (Cin // groups == 1) use :func:`kernels.conv2d_direct.conv2d_direct`, all others
    :func:`kernels.conv2d_gemm.conv2d_gemm`.
    """
    check_int_array(w, "w", ndim=4, dtypes=W_DTYPES)
    if w.shape[1] == 1:
        return conv2d_direct(x, x_zp, w, stride, pads, dilation, groups, compact)
    return conv2d_gemm(x, x_zp, w, stride, pads, dilation, groups)
