"""Golden twins of the lookup-table kernels (``kernels/lut8.py``, ``kernels/lut16.py``) and of the table builders
of ``npu_sim/ops/lut.py``: plainly written, one element at a time, with Python integers and floats.

They restate the specification directly from the formulas and never call the kernels or the builders.
"""
import math

import numpy as np


def lut8(x, table, out_dtype):
    """out[i] = table[x[i] - qmin], qmin = the input dtype's minimum (-128 int8, 0 uint8)."""
    qmin = -128 if x.dtype == np.int8 else 0
    return np.array([int(table[int(v) - qmin]) for v in x.reshape(-1)], dtype=out_dtype).reshape(x.shape)


def lut_codes(x, table, out_dtype):
    """out[i] = table[x[i] - qmin], qmin = the input dtype's minimum (8- or 16-bit input, one entry per code)."""
    qmin = int(np.iinfo(x.dtype).min)
    return np.array([int(table[int(v) - qmin]) for v in x.reshape(-1)], dtype=out_dtype).reshape(x.shape)


def lut16(x, table, qmin, qmax, out_dtype):
    """Interpolated lookup: entry j at input code x_min + j * 2**s, s = 16 - log2(len(table) - 1);
    y = t[i] + floor(((t[i+1] - t[i]) * frac + 2**s // 2) / 2**s), clamped to [qmin, qmax]."""
    k = int(round(math.log2(len(table) - 1)))
    s = 16 - k
    x_min = -32768 if x.dtype == np.int16 else 0
    out = []
    for v in x.reshape(-1):
        u = int(v) - x_min
        i, frac = u // 2 ** s, u % 2 ** s
        base, nxt = int(table[i]), int(table[i + 1])
        y = base + ((nxt - base) * frac + 2 ** s // 2) // 2 ** s
        out.append(min(max(y, int(qmin)), int(qmax)))
    return np.array(out, dtype=out_dtype).reshape(x.shape)


# ---- table builders -----------------------------------------------------------------------------------------
def _x(code, s_in, z_in):
    """ONNX DequantizeLinear of one code: float32((q - z) * s)."""
    return float(np.float32(np.float32(code - z_in) * np.float32(s_in)))


def _v(f, code, s_in, z_in, s_out, z_out):
    """Real-valued output code f(x) / s_out + z_out, with f a numpy float64 function called on one value."""
    with np.errstate(all="ignore"):
        y = float(f(np.array([_x(code, s_in, z_in)], np.float64))[0])
    return y / float(np.float32(s_out)) + z_out


def _round_clamp(v, lo, hi):
    if v != v:
        raise ValueError("NaN")
    if v == math.inf:
        return hi
    if v == -math.inf:
        return lo
    r = math.floor(v)
    d = v - r
    if d > 0.5 or (d == 0.5 and r % 2 == 1):  # half to even
        r += 1
    return min(max(int(r), lo), hi)


def table8(f, in_dtype, s_in, z_in, s_out, z_out, lo, hi):
    """256 entries clamp(round_half_even(f(x(q)) / s_out + z_out), lo, hi) over the input storage codes."""
    q0 = -128 if in_dtype == np.int8 else 0
    return [_round_clamp(_v(f, q, s_in, z_in, s_out, z_out), lo, hi) for q in range(q0, q0 + 256)]


def table16(f, in_dtype, s_in, z_in, s_out, z_out, lo, hi, entries, correction="midpoint"):
    """2**k + 1 entries at codes x_min + j 2**s; midpoint correction as documented in npu_sim/ops/lut.py."""
    k = int(round(math.log2(entries - 1)))
    s = 16 - k
    x_min = -32768 if in_dtype == np.int16 else 0
    codes = [x_min + j * 2 ** s for j in range(entries)]
    w = [min(max(_v(f, c, s_in, z_in, s_out, z_out), lo), hi) for c in codes]
    if correction == "midpoint":
        excess = []
        for j in range(entries - 1):
            mid = min(max(_v(f, codes[j] + 2 ** s // 2, s_in, z_in, s_out, z_out), lo), hi) if s else w[j]
            excess.append((w[j] + w[j + 1]) / 2 - mid)
        corrected = []
        for j in range(entries):
            if j == 0:
                m = excess[0] / 2
            elif j == entries - 1:
                m = excess[-1] / 2
            else:
                m = (excess[j - 1] + excess[j]) / 4
            left = abs(w[j] - w[j - 1]) if j > 0 else math.inf
            right = abs(w[j + 1] - w[j]) if j < entries - 1 else math.inf
            room = min(left, right) / 2
            corrected.append(w[j] - min(max(m, -room), room))
        w = corrected
    return [_round_clamp(v, lo, hi) for v in w]
