"""TFLite's integer SOFTMAX over the last axis (builtin reference kernels), int8 and int16, on (rows, depth) views.

int8 (``reference_ops::Softmax``, gemmlowp fixed point; output scale 1/256, zero point -128). Prepare, float64::

    (M, ls) = QuantizeMultiplier(min(beta * s_in * 2**26, 2**31 - 1))       (0 <= ls <= 31; at 31 diff_min is 0)
    diff_min = -floor(31 * 2**26 / 2**ls)

Per row, with d = q - max(row): entries with d < diff_min give -128; the others
``z = srdhm(d << ls, M)`` (Q5.26), ``e = exp_on_negative_values(z)`` (Q0.31, gemmlowp: Taylor series around -1/8 on
[-1/4, 0) times exp(-2**k) per set bit of the remainder), ``sum += rdbpot(e, 12)`` (Q12.19). Then
``h = clz(sum)``, ``r = one_over_one_plus_x((sum << h) - 2**31)`` (Newton-Raphson, 3 steps) and
``y = clamp(rdbpot(srdhm(r, e), 12 - h + 31 - 8) - 128, -128, 127)``. Every constant is its defining real value
rounded to the fixed-point format (``_const``). Where the sum reaches 512 (``h <= 3``: 512 or more entries near
the row's maximum) that shift is 32 or more, outside what gemmlowp's RoundingDivideByPOT allows on int32 (undefined
behaviour in C++): LiteRT built for x86 computes it with x86's shift (count taken mod 32) and an all-ones mask,
``(v >> (shift mod 32)) + (v > -1)``, which saturates the row to 127 (measured on EfficientNet-B0's 1,000-class
SOFTMAX); npu-sim computes that (``_rdbpot_wide``). Other CPUs (an Arm's shift saturates) differ there.

int16 (``reference_ops::SoftmaxInt16``; zero points 0, output scale 2**-15): two 513-entry interpolated tables
built in float64 (TFLite gen_lut; LiteRT 2.15 measured: the float32 LUTPopulate of later releases differs in two
entries of 1/(1+x) and in some outputs): exp on [-10, 0] and 1/(1+x) on [0, 1], outputs on [-1, 1]. Per row::

    z = mbqm32(q - max, M, s)  with (M, s) = QuantizeMultiplier(s_in * beta / (10/65535));  e = lut(exp, sat16(z + 32767))
    sum = sum(e);  h = clz(sum);  t = ((sum << (h - 1)) + 2**13) >> 14
    r = lut(1/(1+x), sat16(t - 98304));  y = clamp((e * r + 2**(30 - h)) >> (31 - h), 0, 32767)

``lut(T, v) = T[256 + (v >> 7)] + ((T[i+1] - T[i]) * (v & 127) + 64) >> 7``.
"""
import math

import numpy as np

from ._jit import njit, njit_noalloc
from .tflite_fixedpoint import mbqm32, rdbpot, srdhm, tfl_quantize_multiplier, wrap32

INT32_MAX = 2 ** 31 - 1


def _const(real: float, frac_bits: int) -> int:
    """A gemmlowp fixed-point constant: the real value in Q(31-frac_bits).frac_bits, rounded to nearest."""
    return int(math.floor(real * 2.0 ** frac_bits + 0.5))


EXP_M1_8 = _const(math.exp(-1.0 / 8.0), 31)          # exp(-1/8), Q0.31
ONE_THIRD = _const(1.0 / 3.0, 31)
EXP_BARREL = np.array([_const(math.exp(-2.0 ** k), 31) for k in range(-2, 5)], np.int64)  # exp(-2**k), k=-2..4
C48_17 = _const(48.0 / 17.0, 29)                     # Q2.29
CM32_17 = -_const(32.0 / 17.0, 29)


def softmax8_params(s_in: float, beta: float = 1.0, smallest: float = 1.0) -> tuple[int, int, int]:
    """(M, ls, diff_min) of TFLite's int8 softmax (PreprocessSoftmaxScaling, CalculateInputRadius).
    ``smallest``: beta * s_in * 2**26 must exceed it (TFLite: 1; Vela's exp table takes down to 0.5, left shift 0)."""
    real = min(float(beta) * float(np.float32(s_in)) * float(1 << 26), float(2 ** 31 - 1))
    if not real > smallest:
        raise ValueError(f"softmax input scale too small: beta * s_in * 2**26 must exceed {smallest:g}")
    m, ls = tfl_quantize_multiplier(real)
    diff_min = -int(math.floor(31.0 * (1 << 26) / (1 << ls)))
    return m, ls, diff_min


def tfl_softmax8(rows, m: int, ls: int, diff_min: int):
    if rows.ndim != 2 or rows.dtype != np.int8 or not 0 <= ls <= 31:
        raise ValueError("tfl_softmax8: (rows, depth) int8 input and a left shift in [0, 31] are required")
    out = np.empty(rows.shape, np.int8)
    _softmax8(np.ascontiguousarray(rows), int(m), int(ls), int(diff_min), EXP_BARREL, out)
    return out


@njit
def _sat_shl(x, e):
    """x << e saturated to int32."""
    thr = (1 << (31 - e)) - 1
    if x > thr:
        return INT32_MAX
    if x < -thr:
        return -INT32_MAX - 1
    return x << e


@njit
def _exp_on_interval(a):
    """exp(a) for a in [-1/4, 0), Q0.31 in and out."""
    x = wrap32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rdbpot(x4, 2)
    t = wrap32(srdhm(wrap32(x4_over_4 + x3), ONE_THIRD) + x2)
    t = rdbpot(t, 1)
    return wrap32(EXP_M1_8 + srdhm(EXP_M1_8, wrap32(x + t)))


@njit
def exp_on_negative_values(a, barrel):
    """exp(a) for a <= 0 in Q5.26, result Q0.31 (gemmlowp, 5 integer bits)."""
    quarter = 1 << 24
    amq = (a & (quarter - 1)) - quarter
    result = _exp_on_interval(_sat_shl(amq, 5))
    rem = wrap32(amq - a)
    for k in range(7):  # exponents -2..4: bit 26 + exponent of the remainder
        if rem & (1 << (24 + k)):
            result = srdhm(result, barrel[k])
    if a == 0:
        result = INT32_MAX
    return result


@njit
def one_over_one_plus_x(a):
    """1/(1+a) for a in [0, 1), Q0.31 in and out (gemmlowp Newton-Raphson)."""
    s = a + INT32_MAX
    half = (s + 1) // 2 if s >= 0 else -((-s + 1) // 2)  # RoundingHalfSum: (s + sign) / 2, C division
    x = wrap32(C48_17 + srdhm(half, CM32_17))
    for _ in range(3):
        hx = srdhm(half, x)
        one_minus = wrap32((1 << 29) - hx)
        x = wrap32(x + _sat_shl(srdhm(x, one_minus), 2))
    return _sat_shl(x, 1)


@njit
def _clz32(v):
    """Count of leading zero bits of a 32-bit value."""
    n = 0
    while n < 32 and not (v >> (31 - n)) & 1:
        n += 1
    return n


@njit
def _rdbpot_wide(v, e):
    """RoundingDivideByPOT of an int32 by 32 or more bits as LiteRT on x86 computes it (module docstring)."""
    thr = -1 + (1 if v < 0 else 0)
    return (v >> (e & 31)) + (1 if v > thr else 0)


@njit_noalloc
def _softmax8(x, m, ls, diff_min, barrel, out):
    """TFLite int8 SOFTMAX per row: max-subtract, fixed-point exp, sum, reciprocal, rescale to the output."""
    rows, depth = x.shape
    for i in range(rows):
        mx = -128
        for c in range(depth):
            mx = max(mx, np.int64(x[i, c]))
        total = 0
        for c in range(depth):
            d = np.int64(x[i, c]) - mx
            if d >= diff_min:
                e = exp_on_negative_values(srdhm(wrap32(d << ls), m), barrel)
                total = wrap32(total + rdbpot(e, 12))
        h = _clz32(total & 0xFFFFFFFF)
        scale = one_over_one_plus_x(wrap32(((total << h) & 0xFFFFFFFF) - (1 << 31)))
        shift = 12 - h + 31 - 8
        for c in range(depth):
            d = np.int64(x[i, c]) - mx
            if d >= diff_min:
                e = exp_on_negative_values(srdhm(wrap32(d << ls), m), barrel)
                v = srdhm(scale, e)
                y = (rdbpot(v, shift) if shift < 32 else _rdbpot_wide(v, shift)) - 128
                out[i, c] = min(max(y, -128), 127)
            else:
                out[i, c] = -128


# ---- int16 ------------------------------------------------------------------------------------------------------
def _round_away(v: float) -> float:
    return math.copysign(math.floor(abs(v) + 0.5), v)


def gen_lut16(fn, in_min: float, in_max: float, out_min: float, out_max: float) -> np.ndarray:
    """TFLite's 513-entry int16 table (gen_lut, float64): 512 samples of ``fn`` over [in_min, in_max], each
    lowered by half its midpoint interpolation error, plus the end point; output scaled by 65536/(out_max-out_min),
    rounded half away from zero, saturated to int16."""
    step = (in_max - in_min) / 512
    half = step / 2
    inv = 65536.0 / (out_max - out_min)
    lut = np.empty(513, np.int16)
    for i in range(512):
        val, mid, nxt = fn(in_min + i * step), fn(in_min + i * step + half), fn(in_min + (i + 1) * step)
        sample = _round_away(val * inv)
        err = _round_away((nxt * inv + sample) / 2) - _round_away(mid * inv)
        lut[i] = int(min(max(sample - _round_away(err / 2), -32768.0), 32767.0))
    lut[512] = int(min(max(_round_away(fn(in_max) * inv), -32768.0), 32767.0))
    return lut


def softmax16_tables() -> tuple[np.ndarray, np.ndarray]:
    """TFLite's exp table on [-10, 0] and 1/(1+x) table on [0, 1] of the int16 softmax (outputs on [-1, 1])."""
    return (gen_lut16(math.exp, -10.0, 0.0, -1.0, 1.0),
            gen_lut16(lambda v: 1.0 / (1.0 + v), 0.0, 1.0, -1.0, 1.0))


def softmax16_params(s_in: float, beta: float = 1.0) -> tuple[int, int]:
    return tfl_quantize_multiplier(float(np.float32(s_in)) * float(beta) / (10.0 / 65535.0))


def tfl_softmax16(rows, m: int, s: int, exp_lut, recip_lut):
    if rows.ndim != 2 or rows.dtype != np.int16 or exp_lut.shape != (513,) or recip_lut.shape != (513,):
        raise ValueError("tfl_softmax16: (rows, depth) int16 input and two 513-entry tables are required")
    out = np.empty(rows.shape, np.int16)
    _softmax16(np.ascontiguousarray(rows), int(m), int(s), exp_lut.astype(np.int64), recip_lut.astype(np.int64), out)
    return out


@njit
def lut16_lookup(v, lut):
    """TFLite's 513-entry int16 LUT with 7-bit linear interpolation, index 256 + (v >> 7)."""
    idx = 256 + (v >> 7)
    base = lut[idx]
    return base + (((lut[idx + 1] - base) * (v & 0x7F) + 64) >> 7)


@njit
def _softmax16(x, m, s, exp_lut, recip_lut, out):
    """TFLite int16 SOFTMAX per row: exp table on the rescaled difference, sum, 1/(1+x) table, scale."""
    rows, depth = x.shape
    e = np.empty(depth, np.int64)
    for i in range(rows):
        mx = -32768
        for c in range(depth):
            mx = max(mx, np.int64(x[i, c]))
        total = 0
        for c in range(depth):
            z = mbqm32(np.int64(x[i, c]) - mx, m, s) + 32767
            z = min(max(z, -32768), 32767)
            e[c] = lut16_lookup(z, exp_lut)
            total += e[c]
        h = _clz32(total & 0xFFFFFFFF)
        t = ((total << (h - 1)) + (1 << 13)) >> 14
        t = min(max(t - 98304, -32768), 32767)
        r = lut16_lookup(t, recip_lut)
        shift = 31 - h
        for c in range(depth):
            y = (e[c] * r + (np.int64(1) << (shift - 1))) >> shift
            out[i, c] = min(max(y, 0), 32767)
