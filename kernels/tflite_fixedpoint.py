"""TFLite's fixed-point primitives (the default, double-rounding build), restated.

Preparation (plain Python, once per op)::

    tfl_quantize_multiplier(d) -> (M, s)     d ~= M * 2**(s - 31), M in [2**30, 2**31), s > 0 a left shift

``frexp`` gives the mantissa q in [0.5, 1); ``M = round_half_away(q * 2**31)``; a mantissa that rounds up to
2**31 is halved (exponent + 1); exponents below -31 flush to (0, 0).

Run time (Numba, integers only)::

    srdhm(a, b)      saturating rounding doubling high multiply of two int32 values: floor((a*b + 2**30) / 2**31)
                     (ties toward +infinity); the one saturating case a = b = -2**31 gives 2**31 - 1.
    rdbpot(x, e)     rounding divide by 2**e, ties away from zero.
    mbqm32(x, M, s)  rdbpot(srdhm(x * 2**max(s, 0), M), max(-s, 0)): the int32 MultiplyByQuantizedMultiplier.
    mbqm64(x, M, s)  the int64 overload (16x8 ops): M reduced to 16 bits, rm = (M + 2**15) >> 16 (0x7FFF when
                     M >= 0x7FFF0000), then (x*rm + 2**(14 - s)) >> (15 - s), truncated to int32.

Values are carried in int64 and wrapped to int32 where TFLite stores an int32.
"""
import math

from ._jit import njit

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def tfl_quantize_multiplier(d: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: (M, s) with d ~= M * 2**(s - 31); (0, 0) for 0 or tiny factors."""
    if not math.isfinite(d) or d < 0:
        raise ValueError(f"QuantizeMultiplier needs a finite non-negative factor, got {d!r}")
    if d == 0.0:
        return 0, 0
    q, e = math.frexp(d)
    m = math.floor(q * (1 << 31) + 0.5)  # half away from zero (q > 0): std::round
    if m == 1 << 31:
        m //= 2
        e += 1
    if e < -31:
        return 0, 0
    return int(m), int(e)


@njit
def wrap32(x):
    """Two's-complement wrap of an int64 to the int32 range."""
    x = x & 0xFFFFFFFF
    if x >= 0x80000000:
        x -= 0x100000000
    return x


@njit
def srdhm(a, b):
    """SaturatingRoundingDoublingHighMul: floor((a*b + 2^30) / 2^31); INT32_MIN * INT32_MIN saturates."""
    if a == INT32_MIN and b == INT32_MIN:
        return INT32_MAX
    return (a * b + (1 << 30)) >> 31


@njit
def rdbpot(x, e):
    """RoundingDivideByPOT: x / 2^e rounded to nearest, ties away from zero."""
    if e == 0:
        return x
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


@njit
def mbqm32(x, m, s):
    """MultiplyByQuantizedMultiplier (int32, double rounding): rdbpot(srdhm(x << left, M), right)."""
    left = s if s > 0 else 0
    right = -s if s < 0 else 0
    return rdbpot(srdhm(wrap32(x << left), m), right)


@njit
def mbqm64(x, m, s):
    """The int64 (16x8) overload: 16-bit reduced multiplier, one rounding, truncated to int32."""
    rm = (m + (1 << 15)) >> 16 if m < 0x7FFF0000 else 0x7FFF
    total = 15 - s
    return wrap32((x * rm + (1 << (total - 1))) >> total)
