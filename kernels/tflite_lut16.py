"""TFLite's int16 lookup-table ops (EXP): LUTPopulate's 513-entry table over the input's whole int16 range, and
the interpolated lookup.

Table (LUTPopulateInt16, in float32 or float64: ``ftype``; ``round`` = half away from zero), with
``in_min/in_max = s_in * (-32768 - zp_in) / s_in * (32767 - zp_in)``, likewise ``out_min/out_max``, ``step =
(in_max - in_min) / 512`` and ``inv = 65536 / (out_max - out_min)``::

    entry i < 512:  round(f(x_i) * inv) - round((round((f(x_i+1) * inv + round(f(x_i) * inv)) / 2)
                                                 - round(f(x_i + step/2) * inv)) / 2)
    entry 512:      round(f(in_max) * inv)

each clamped to int16. The run is ``lut16_lookup`` (``kernels/tflite_softmax.py``): entry ``256 + (v >> 7)`` plus
the 7-bit interpolation to the next.
"""
import math

import numpy as np

from ._jit import njit_noalloc
from .tflite_softmax import lut16_lookup


def _round_away(v):
    if not math.isfinite(float(v)):
        return v
    return type(v)(math.copysign(math.floor(abs(float(v)) + 0.5), float(v)))


def populate_lut16(fn, s_in, zp_in: int, s_out, zp_out: int, ftype=np.float32) -> np.ndarray:
    """The 513-entry int16 table of ``fn`` (a function of one ``ftype`` value returning one)."""
    t = ftype
    in_min, in_max = t(s_in) * t(-32768 - zp_in), t(s_in) * t(32767 - zp_in)
    out_min, out_max = t(s_out) * t(-32768 - zp_out), t(s_out) * t(32767 - zp_out)
    step = (in_max - in_min) / t(512)
    half = step / t(2)
    inv = t(65536) / (out_max - out_min)
    with np.errstate(over="ignore"):
        if not math.isfinite(float(fn(in_max) * inv)):  # LiteRT's table is undefined there (inf - inf)
            raise ValueError("populate_lut16: the function times 65536 / output range overflows at the top of "
                             "the input range")
    table = np.empty(513, np.int16)
    for i in range(512):
        x = in_min + t(i) * step
        val, mid, nxt = fn(x), fn(x + half), fn(in_min + t(i + 1) * step)
        sample = _round_away(val * inv)
        interp = _round_away((nxt * inv + sample) / t(2))
        bias = _round_away((interp - _round_away(mid * inv)) / t(2))
        table[i] = int(min(max(float(sample - bias), -32768.0), 32767.0))
    table[512] = int(min(max(float(_round_away(fn(in_max) * inv)), -32768.0), 32767.0))
    return table


def lut16_apply(x, table):
    if x.dtype != np.int16 or table.shape != (513,):
        raise ValueError("lut16_apply: int16 input and a 513-entry table are required")
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, np.int16)
    _apply(flat, table.astype(np.int64), out)
    return out.reshape(x.shape)


@njit_noalloc
def _apply(x, table, out):
    for i in range(x.size):
        out[i] = lut16_lookup(np.int64(x[i]), table)
