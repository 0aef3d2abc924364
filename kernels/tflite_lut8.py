"""TFLite's int8 lookup-table activations (LOGISTIC, TANH, EXP): a 256-entry table built in float32, then a lookup.

Table (TFLite PopulateLookupTable, float32 throughout, ``round`` = half away from zero)::

    for v in [-128, 127]:  table[uint8(v)] = clamp(round(f(float32(s_in * (v - zp_in))) * (1 / s_out)) + zp_out)

``f`` is 1/(1 + exp(-x)), tanh(x) or exp(x), evaluated in float64 and rounded to float32 (the correctly rounded value a
float32 libm returns). The run is ``y = table[uint8(x)]``.
"""
import math

import numpy as np

from ._jit import njit_noalloc

def _exp_f32(v: float) -> np.float32:
    """exp(v) correctly rounded to float32: +inf past float32's range, as a float32 libm returns it (without
    float64's OverflowError beyond exp(709) or numpy's overflow warning on the cast)."""
    if v > 89.0:  # exp(89) > float32's largest value plus half an ulp: rounds to inf
        return np.float32(np.inf)
    with np.errstate(over="ignore"):
        return np.float32(math.exp(v))


FUNCTIONS = {
    "Sigmoid": lambda x: np.float32(1.0) / (np.float32(1.0) + _exp_f32(-float(x))),
    "Tanh": lambda x: np.float32(math.tanh(float(x))),
    "Exp": lambda x: _exp_f32(float(x)),  # EXP's LUTPopulate
}


def _round_away(v: np.float32) -> float:
    return float(np.float32(math.copysign(math.floor(abs(float(v)) + 0.5), float(v))))


def build_lut8(fn: str, s_in, zp_in: int, s_out, zp_out: int, qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """The 256-entry int8 table, indexed by ``uint8(v)``."""
    f = FUNCTIONS[fn]
    s_in, s_out = np.float32(s_in), np.float32(s_out)
    inv = np.float32(np.float32(1.0) / s_out)
    table = np.empty(256, np.int8)
    for v in range(-128, 128):
        x = np.float32(s_in * np.float32(v - zp_in))
        r = _round_away(np.float32(np.float32(f(x)) * inv))
        q = int(r) + zp_out
        table[v & 0xFF] = min(max(q, qmin), qmax)
    return table


def lut8_lookup(x, table):
    if x.dtype != np.int8 or table.shape != (256,) or table.dtype != np.int8:
        raise ValueError("lut8_lookup: int8 input and a 256-entry int8 table are required")
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, np.int8)
    _lookup(flat, table, out)
    return out.reshape(x.shape)


@njit_noalloc
def _lookup(x, table, out):
    """out[i] = table[x[i] as an unsigned byte] (the table is ordered 0..127, -128..-1)."""
    for i in range(x.size):
        out[i] = table[np.int64(x[i]) & 0xFF]
