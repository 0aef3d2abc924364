"""TFLite's MAXIMUM and MINIMUM on integers: the larger (smaller) of two integers that share one quantization
(TFLite requires it of both inputs and the output), clamped to [qmin, qmax]."""
import numpy as np

from ._jit import njit_noalloc


def tfl_maxmin(a, b, maximum: bool, qmin: int, qmax: int, out_dtype):
    """Element-wise max (``maximum``) or min of ``a`` and ``b`` (broadcast to each other)."""
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        raise ValueError("tfl_maxmin: integer inputs are required")
    x, y = (np.ascontiguousarray(v, np.int64) for v in np.broadcast_arrays(a, b))
    out = np.empty(x.size, out_dtype)
    _kernel(x.reshape(-1), y.reshape(-1), bool(maximum), int(qmin), int(qmax), out)
    return out.reshape(x.shape)


@njit_noalloc
def _kernel(a, b, maximum, qmin, qmax, out):
    for i in range(a.size):
        r = max(a[i], b[i]) if maximum else min(a[i], b[i])
        out[i] = min(max(r, qmin), qmax)
