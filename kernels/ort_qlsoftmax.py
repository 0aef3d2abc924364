"""onnxruntime's fused QLinearSoftmax (com.microsoft, CPU, 8-bit): the ``onnx`` board's arithmetic for a Softmax
group that onnxruntime fuses.

Prepared once (float64, then stored as float32), for the row length ``D`` and input scale ``s``::

    b = max(0, ln(FLT_MAX / D) - 5) / s
    E[k] = float32(exp((k - 255 + b) * s))            k = 0..255 (k = 255 - (max - x))

Per row, in IEEE float32::

    sum = 0; for x in row: sum = f32(sum + E[255 - max + x])            (in row order)
    y   = min(rint(f32(f32(E[255 - max + x] * Y) / sum)) + zy, qmax)    Y = floor(f32(1 / y_scale))

(int8 rows use the same table through onnxruntime's shifted indexing, which is the same ``255 - max + x``.)
``qmax`` is 255, or 127 for int8 outputs: onnxruntime 1.32 saturates there (older releases stored int8(min(y,
255)), which wraps 128..255 to negative values: microsoft/onnxruntime#29728). y >= zy, so no lower clamp.
"""
import math

import numpy as np

from ._jit import njit
from .checks import as_int, check_int_array

FLT_MAX = float(np.finfo(np.float32).max)


def exp_table(x_scale: float, reduce_len: int) -> np.ndarray:
    """onnxruntime's 256-entry float table (double arithmetic, float32 entries)."""
    s = float(np.float32(x_scale))
    shift = max(0.0, math.log(FLT_MAX / reduce_len) - 5.0) / s
    return np.array([math.exp((k - 255 + shift) * s) for k in range(256)], dtype=np.float64).astype(np.float32)


@njit
def _qlinear_softmax(x, table, y_mul, y_zp, q_max, out):
    """Rows of ``x`` (rows, D) -> ``out``; see the module docstring."""
    rows, d = x.shape
    for r in range(rows):
        row = x[r]
        xmax = row[0]
        for j in range(d):
            if row[j] > xmax:
                xmax = row[j]
        total = np.float32(0.0)
        for j in range(d):
            total = np.float32(total + table[255 - np.int64(xmax) + np.int64(row[j])])
        for j in range(d):
            v = np.float32(np.float32(table[255 - np.int64(xmax) + np.int64(row[j])] * y_mul) / total)
            q = np.int64(np.rint(v)) + y_zp
            if q > q_max:
                q = q_max
            out[r, j] = q
    return out


def _y_mul(y_scale) -> np.float32:
    return np.float32(math.floor(np.float32(1.0) / np.float32(y_scale)))


def defined(x_scale, reduce_len: int, y_scale) -> bool:
    """Whether onnxruntime's arithmetic stays finite: the largest entry times ``Y`` must not overflow float32
    (with a short row and a large input scale it does, and onnxruntime's float-to-int conversion of infinity
    is undefined behaviour)."""
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.float32(exp_table(x_scale, reduce_len)[255] * _y_mul(y_scale))))


def qlinear_softmax(x, x_scale, y_scale, y_zp, out) -> None:
    """onnxruntime's QLinearSoftmax over the last axis of 2-D ``x`` (rows, D), int8 or uint8, into ``out``.

    ValueError where its arithmetic overflows (see :func:`defined`)."""
    check_int_array(x, "x", ndim=2, dtypes=(np.int8, np.uint8))
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError("out must have the shape and dtype of x")
    if not defined(x_scale, x.shape[1], y_scale):
        raise ValueError("onnxruntime's QLinearSoftmax overflows float32 for this scale and row length")
    table = exp_table(x_scale, x.shape[1])
    y_mul = _y_mul(y_scale)
    _qlinear_softmax(x, table, y_mul, as_int(y_zp, "y_zp"), 127 if x.dtype == np.int8 else 255, out)
