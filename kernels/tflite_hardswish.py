"""TFLite's int8 HARD_SWISH (reference kernel), 16-bit fixed point throughout.

Preparation (float32 scales, ``QuantizeMultiplier`` then the 16-bit reduction ``(M + 2**15) >> 16``, 0x7FFF
from 0x7FFF7FFF up)::

    hires = s_in / 128;  (M_out, e_out) from hires / s_out (e_out <= 0);  (M_relu, e_relu) from hires / (3 / 32768)

Per element (int16 values; srdhm16 = rounding doubling high multiply, ties toward +inf, a = b = -32768 gives
32767; sdhm16 = the same without rounding, C division; rdbpot = rounding divide by 2**e, ties away from zero)::

    h      = (q - zp_in) * 128
    pre    = srdhm16(h, M_out)
    r      = h;  if e_relu > 0: r = sat16(r << (e_relu - 1))
    r      = srdhm16(r, M_relu)
    if e_relu > 0: r = sat16(r << 1)   else if e_relu < 0: r = rdbpot(r, -e_relu)
    r      = (r + 32768) >> 1                           (0 .. 32767: relu6(x + 3) / 6 in Q0.15)
    y      = clamp(rdbpot(sdhm16(r, pre), -e_out) + zp_out, -128, 127)
"""
import numpy as np

from ._jit import njit, njit_noalloc

I16_MIN, I16_MAX = -32768, 32767


def reduce_multiplier16(m: int) -> int:
    """TFLite DownScaleInt32ToInt16Multiplier."""
    if m < 0:
        raise ValueError("multiplier must be non-negative")
    return 32767 if m >= 2 ** 31 - 1 - 2 ** 15 else (m + 2 ** 15) >> 16


def tfl_hardswish(x, in_zp: int, out_zp: int, m_out: int, e_out: int, m_relu: int, e_relu: int):
    if x.dtype != np.int8:
        raise ValueError("tfl_hardswish: int8 input required")
    if not (0 <= m_out <= I16_MAX and 0 <= m_relu <= I16_MAX and -15 <= e_out <= 0 and -15 <= e_relu <= 15):
        raise ValueError("tfl_hardswish: 16-bit multipliers with exponents in TFLite's range are required")
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, np.int8)
    _kernel(flat, int(in_zp), int(out_zp), int(m_out), int(e_out), int(m_relu), int(e_relu), out)
    return out.reshape(x.shape)


@njit
def _trunc_div_pot(v, e):
    """v / 2^e truncated toward zero (C integer division by a power of two)."""
    if v >= 0:
        return v >> e
    return -((-v) >> e)


@njit
def srdhm16(a, b):
    """16-bit SaturatingRoundingDoublingHighMul: (a*b + nudge) / 2^15 truncated, nudge = +-2^14."""
    if a == I16_MIN and b == I16_MIN:
        return I16_MAX
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    return _trunc_div_pot(ab + nudge, 15)


@njit
def sdhm16(a, b):
    """16-bit saturating doubling high multiply without rounding: a*b / 2^15 truncated."""
    if a == I16_MIN and b == I16_MIN:
        return I16_MAX
    return _trunc_div_pot(a * b, 15)


@njit
def sat_shl16(v, amount):
    """v * 2^amount saturated to int16."""
    r = v * (1 << amount)
    return min(max(r, I16_MIN), I16_MAX)


@njit
def rdbpot16(x, e):
    """RoundingDivideByPOT: x / 2^e rounded to nearest, ties away from zero."""
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


@njit_noalloc
def _kernel(x, in_zp, out_zp, m_out, e_out, m_relu, e_relu, out):
    """TFLite int8 HARD_SWISH per element, 16-bit fixed point: the rescaled input times the gate relu6(x+3)/6."""
    for i in range(x.size):
        h = (np.int64(x[i]) - in_zp) * 128
        pre = srdhm16(h, m_out)
        r = h
        if e_relu > 0:
            r = sat_shl16(r, e_relu - 1)
        r = srdhm16(r, m_relu)
        if e_relu > 0:
            r = sat_shl16(r, 1)
        elif e_relu < 0:
            r = rdbpot16(r, -e_relu)
        r = (r + 32768) >> 1
        y = rdbpot16(sdhm16(r, pre), -e_out) + out_zp
        out[i] = min(max(y, -128), 127)
