"""onnxruntime's 8-bit QLinearGlobalAveragePool, bit for bit as its CPU kernel computes it on x86-64.

onnxruntime fuses an 8-bit QDQ ``GlobalAveragePool`` group into ``com.microsoft.QLinearGlobalAveragePool``.
MLAS (``MlasQLinearGlobalAveragePoolNchw``/``Nhwc``) sums each channel's image in int32, adds the bias
``-x_zp * image_size``, and requantizes with ``MlasRequantizeOutput`` (the same float32 rule as QLinearConv) by
the single float32 factor ``x_scale / (out_scale * image_size)``. ONNX's definition (dequantize, float mean,
divide by the output scale, round) rounds differently on ties and near-ties.
"""
import numpy as np

from ._jit import njit
from .ort_qladd import DTYPES, as_scale, as_zero_point, f32
from .checks import check_int_array

MAX_IMAGE_SIZE = 1 << 24          # onnxruntime refuses image_size >= 2**24
MIN_SCALE = 2.0 ** -32            # ... and a factor outside [2**-32, 256)
MAX_SCALE = 256.0


def qlgavgpool_scale(x_scale, out_scale, image_size: int) -> float:
    """``f32(x_scale / f32(out_scale * image_size))``, raising ValueError where onnxruntime throws.

    onnxruntime rejects ``image_size >= 2**24`` and a factor outside ``[2**-32, 256)`` ("parameter out of
    computation range").
    """
    x_scale = as_scale(x_scale, "x_scale")
    out_scale = as_scale(out_scale, "out_scale")
    if isinstance(image_size, (bool, np.bool_)) or not isinstance(image_size, (int, np.integer)):
        raise ValueError(f"image_size must be an integer, got {image_size!r}")
    if not 1 <= int(image_size) < MAX_IMAGE_SIZE:
        raise ValueError(f"image_size must be in [1, 2**24), got {image_size}")
    den = np.float32(np.float64(out_scale) * np.float64(np.float32(int(image_size))))
    scale = np.float32(np.float64(x_scale) / np.float64(den))
    if not MIN_SCALE <= float(scale) < MAX_SCALE:
        raise ValueError(f"QLinearGlobalAveragePool factor {float(scale)!r} is outside onnxruntime's range "
                         f"[2**-32, 256)")
    return float(scale)


@njit
def _qlgavgpool(x, bias, scale, out_zp, qmin, qmax, out):
    """Per row: acc = wrap32(sum(row) + bias); out = clamp(rint(clamp(f32(f32(acc)*scale))) + out_zp)."""
    lo = np.float64(qmin - out_zp)
    hi = np.float64(qmax - out_zp)
    for r in range(x.shape[0]):
        acc = np.int64(bias)
        for i in range(x.shape[1]):
            acc += np.int64(x[r, i])
        acc = ((acc + 2147483648) % 4294967296) - 2147483648  # int32 lanes wrap
        f = f32(f32(np.float64(acc)) * scale)
        f = min(max(f, lo), hi)
        out[r] = np.int64(np.rint(f)) + out_zp
    return out


def ort_qlgavgpool(x, x_scale, x_zp, out_scale, out_zp, out) -> None:
    """onnxruntime's ``QLinearGlobalAveragePool`` on 8-bit data (MLAS, x86-64): one mean per row.

    Parameters
    ----------
    x : 2-D C-contiguous ndarray (rows, image_size), int8 or uint8
        One row per (image, channel): the spatial cells flattened.
    x_scale, out_scale : float
        Positive finite scales, taken as float32.
    x_zp, out_zp : int
        Zero points inside the dtype range.
    out : 1-D ndarray (rows,) of the dtype of ``x``, written in place.

    Notes
    -----
    Exact semantics per row (``f32`` = round to float32 half to even, ``n = image_size``)::

        scale = f32(x_scale / f32(out_scale * n))       # ValueError if n >= 2**24 or scale not in [2**-32, 256)
        acc = wrap_int32(sum(x[row]) - x_zp * n)       # int32 accumulation
        f = f32(f32(acc) * scale)                       # int32 -> float32 rounds half to even
        f = min(max(f, qmin - out_zp), qmax - out_zp)   # qmin/qmax: the dtype range
        out = rint(f) + out_zp                          # rint: half to even
    """
    check_int_array(x, "x", ndim=2, dtypes=DTYPES)
    check_int_array(out, "out", ndim=1, dtypes=DTYPES)
    if out.dtype != x.dtype or out.shape != (x.shape[0],):
        raise ValueError(f"out must be {x.dtype} of shape ({x.shape[0]},), got {out.dtype} {out.shape}")
    x_zp = as_zero_point(x_zp, x.dtype, "x_zp")
    out_zp = as_zero_point(out_zp, x.dtype, "out_zp")
    scale = qlgavgpool_scale(x_scale, out_scale, x.shape[1])
    info = np.iinfo(x.dtype)
    _qlgavgpool(x, -x_zp * x.shape[1], scale, out_zp, info.min, info.max, out)
