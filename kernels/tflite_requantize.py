"""TFLite requantization of convolution / fully-connected accumulators, per output channel.

8-bit activations (``wide=False``)::

    y = clamp(mbqm32(wrap32(acc + bias[c]), M[c], s[c]) + zp_out, qmin, qmax)

16-bit activations (``wide=True``, TFLite's 16x8 ops: int64 accumulator and int64 bias)::

    y = clamp(mbqm64(acc + bias[c], M[c], s[c]) + zp_out, qmin, qmax)

``acc`` is (outer, channels, inner) int64, the exact sum of products; ``M, s`` come from
``kernels.tflite_fixedpoint.tfl_quantize_multiplier``.
"""
import numpy as np

from ._jit import njit_noalloc
from .checks import check_int_array, OUT_DTYPES
from .tflite_fixedpoint import mbqm32, mbqm64, wrap32


def tfl_requantize(acc, bias, mult, shift, wide: bool, out_zp: int, qmin: int, qmax: int, out=None):
    check_int_array(acc, "acc", 3, (np.int64,))
    c = acc.shape[1]
    for name, a in (("bias", bias), ("mult", mult), ("shift", shift)):
        check_int_array(a, name, 1, (np.int64,))
        if a.shape[0] != c:
            raise ValueError(f"{name} has {a.shape[0]} entries for {c} channels")
    if np.any(mult < 0) or np.any(mult > 2 ** 31 - 1) or np.any(shift < -31) or np.any(shift > (7 if wide else 30)):
        raise ValueError("multiplier/shift outside TFLite's range")
    if wide and (np.abs(acc).max(initial=0) >= 2 ** 47 or np.abs(bias).max(initial=0) >= 2 ** 47):
        raise ValueError("16x8 accumulator outside [-2**47, 2**47)")
    if out is None:
        out = np.empty(acc.shape, np.int8 if qmax <= 127 else np.int16)
    if out.dtype not in [np.dtype(d) for d in OUT_DTYPES] or out.shape != acc.shape:
        raise ValueError("bad output array")
    _kernel(acc, bias, mult, shift, bool(wide), int(out_zp), int(qmin), int(qmax), out)
    return out


@njit_noalloc
def _kernel(acc, bias, mult, shift, wide, out_zp, qmin, qmax, out):
    """Per-channel requantization of (outer, channels, inner) accumulators plus bias: mbqm32, or mbqm64 when wide."""
    n0, n1, n2 = acc.shape
    for c in range(n1):
        b, m, s = bias[c], mult[c], shift[c]
        for o in range(n0):
            for i in range(n2):
                v = acc[o, c, i] + b
                r = mbqm64(v, m, s) if wide else mbqm32(wrap32(v), m, s)
                r += out_zp
                if r < qmin:
                    r = qmin
                elif r > qmax:
                    r = qmax
                out[o, c, i] = r
