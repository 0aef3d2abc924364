"""TFLite's int16 LOGISTIC and TANH (the builtin reference kernels, ``reference_integer_ops::Logistic/Tanh``).

Both read one 256-entry table of the sigmoid in Q0.16 with linear interpolation, using tanh(x) = 2 sigmoid(2x) - 1.
TFLite's table is documented as sigmoid(i/24) in Q0.16 but is not exactly that formula: measured against LiteRT
(every int16 input of LOGISTIC and TANH at several input scales, ``models/tflite_op_sweep.py``; each entry is
determined by the outputs), it equals ``min(round(65536 * sigmoid(i / 24)), 65535)`` (float64, half away from
zero) plus 1 at the 44 indices of ``TABLE_PLUS_ONE`` (``sigmoid_table``). Inputs (zero point 0) are
first brought to the scale 1/(3 * 4096), where +-2**17 stands for +-10.7::

    v = (q * mult + (ls > 0 ? 2**(ls - 1) : 0)) >> ls          (int32)

``(mult, ls)`` (``input_rescale``): for a power-of-two input scale that TFLite takes as such (Logistic: exactly
2**-12; Tanh: 2**-12 or 2**-11) ``mult = 3 << (12 + log2 s)``, ``ls = 0``; otherwise, in float64,
``m = s * 4096 * 3``, doubled (``ls += 1``) while ``m <= 32767 / 2`` and ``ls <= 30``, ``mult = trunc(m)``.

Logistic (Q0.15 out)::

    a = |v|;  u = a >> 9
    r = u >= 255 ? 0x7FFF << 10 : (T[u] << 9) + (a & 0x1FF) * (T[u+1] - T[u])
    y = (v >= 0 ? r + 512 : 2**25 - r + 511) >> 10

Tanh (Q0.15 out)::

    a = |v|;  u = a >> 8
    r = u >= 255 ? 0xFFFF << 8 : (T[u] << 8) + (a & 0xFF) * (T[u+1] - T[u])
    y = (v >= 0 ? r - 2**23 + 128 : 2**23 - r + 127) >> 8          (arithmetic shift)
"""
import math

import numpy as np

from ._jit import njit_noalloc


# Where LiteRT's table is one above round(65536 * sigmoid(i / 24)) (measured; every other entry equals it).
TABLE_PLUS_ONE = (4, 8, 12, 14, 15, 16, 17, 19, 20, 21, 22, 25, 27, 28, 29, 30, 31, 33, 34, 35, 37, 39, 40, 41, 43,
                  44, 45, 46, 49, 50, 54, 62, 63, 64, 66, 82, 86, 93, 100, 103, 112, 116, 135, 255)


def sigmoid_table() -> np.ndarray:
    """The 256-entry Q0.16 sigmoid table: sigmoid(i/24) rounded (float64, half away from zero), capped at 65535,
    with LiteRT's measured +1 corrections."""
    t = np.empty(256, np.int64)
    for i in range(256):
        v = 65536.0 / (1.0 + math.exp(-i / 24.0))
        t[i] = min(int(math.floor(v + 0.5)), 65535) + (1 if i in TABLE_PLUS_ONE else 0)
    return t


TABLE = sigmoid_table()


def _checked_log2(scale: float):
    """TFLite CheckedLog2 in float32: (is a power of two within 1e-3 of an exponent, rounded exponent)."""
    f32 = np.float32
    x_log2 = f32(f32(np.log(f32(scale))) * f32(f32(1.0) / f32(np.log(f32(2.0)))))
    rounded = f32(math.copysign(math.floor(abs(float(x_log2)) + 0.5), float(x_log2)))
    return abs(float(f32(x_log2 - rounded))) < 1e-3, int(rounded)


def input_rescale(fn: str, scale: float) -> tuple[int, int]:
    """(mult, ls) of the rescale to 1/(3*4096) for LOGISTIC (``fn = "Sigmoid"``) or TANH (TFLite's prepare)."""
    pot, log2 = _checked_log2(scale)
    ls = 12 + log2
    pot = pot and (ls == 0 if fn == "Sigmoid" else ls in (0, 1))
    if pot:
        return 3 << ls, 0
    m = float(np.float32(scale)) * 4096.0 * 3.0
    ls = 0
    while m <= 32767.0 / 2.0 and ls <= 30:
        ls += 1
        m *= 2.0
    return int(m), ls


def tfl_sigmoid16(x, fn: str, mult: int, ls: int):
    if x.dtype != np.int16:
        raise ValueError("tfl_sigmoid16: int16 input required")
    if fn not in ("Sigmoid", "Tanh") or not 0 < mult <= 32767 or not 0 <= ls <= 31:
        raise ValueError("tfl_sigmoid16: Sigmoid/Tanh with a multiplier in (0, 32767] and a shift in [0, 31]")
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, np.int16)
    if fn == "Sigmoid":
        _logistic(flat, int(mult), int(ls), TABLE, out)
    else:
        _tanh(flat, int(mult), int(ls), TABLE, out)
    return out.reshape(x.shape)


@njit_noalloc
def _logistic(x, mult, ls, table, out):
    """int16 LOGISTIC: rescaled input, 256-entry sigmoid table with 9-bit interpolation, mirrored for v < 0."""
    rnd = (1 << (ls - 1)) if ls > 0 else 0
    for i in range(x.size):
        v = (np.int64(x[i]) * mult + rnd) >> ls
        a = -v if v < 0 else v
        u = a >> 9
        if u >= 255:
            r = np.int64(0x7FFF) << 10
        else:
            ua = table[u]
            r = (ua << 9) + (a & 0x1FF) * (table[u + 1] - ua)
        if v >= 0:
            r = r + 512
        else:
            r = (1 << 25) - r + 511
        out[i] = r >> 10


@njit_noalloc
def _tanh(x, mult, ls, table, out):
    """int16 TANH: rescaled input, 256-entry table with 8-bit interpolation, mirrored for v < 0."""
    rnd = (1 << (ls - 1)) if ls > 0 else 0
    for i in range(x.size):
        v = (np.int64(x[i]) * mult + rnd) >> ls
        a = -v if v < 0 else v
        u = a >> 8
        if u >= 255:
            r = np.int64(0xFFFF) << 8
        else:
            ua = table[u]
            r = (ua << 8) + (a & 0xFF) * (table[u + 1] - ua)
        if v >= 0:
            r = r - (1 << 23) + 128
        else:
            r = (1 << 23) - r + 127
        out[i] = r >> 8
