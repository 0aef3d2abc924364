"""Exact rounding rules for the variations of ``explain``: plain Python integers (no width limit).

``f(n, r)`` rounds ``n / 2**r``; ``double_rounding`` is TFLite's MultiplyByQuantizedMultiplier.
"""
from __future__ import annotations

import numpy as np


def half_up(n: int, r: int) -> int:
    return n if r == 0 else (n + (1 << (r - 1))) >> r


def half_even(n: int, r: int) -> int:
    if r == 0:
        return n
    q, rem = n >> r, n & ((1 << r) - 1)
    half = 1 << (r - 1)
    return q + 1 if rem > half or (rem == half and q & 1) else q


def half_away(n: int, r: int) -> int:
    return n if r == 0 else (-1 if n < 0 else 1) * ((abs(n) + (1 << (r - 1))) >> r)


def floor_shift(n: int, r: int) -> int:
    return n >> r


def toward_zero(n: int, r: int) -> int:
    return (-1 if n < 0 else 1) * (abs(n) >> r)


ROUNDINGS = (("rounding half up", half_up), ("rounding half to even", half_even),
             ("rounding half away from zero", half_away), ("truncation toward -inf", floor_shift),
             ("truncation toward 0", toward_zero))


def double_rounding(x: int, m: int, s: int) -> int:
    """TFLite's MultiplyByQuantizedMultiplier(x, M, s): SaturatingRoundingDoublingHighMul(x * 2**max(s, 0), M),
    then RoundingDivideByPOT by max(-s, 0)."""
    a = x * (1 << max(s, 0))
    if a == m == -(1 << 31):
        hi = (1 << 31) - 1
    else:
        ab = a * m
        v = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
        hi = (-1 if v < 0 else 1) * (abs(v) >> 31)  # C division: truncation toward 0
    e = max(-s, 0)
    mask = (1 << e) - 1
    threshold = (mask >> 1) + (1 if hi < 0 else 0)
    return (hi >> e) + (1 if (hi & mask) > threshold else 0)


def float32_rule(x: int, ratio: np.float32) -> int:
    return int(np.rint(np.float32(np.float32(x) * ratio)))


def wrap(x: int, bits: int) -> int:
    m = 1 << bits
    return ((x + (m >> 1)) % m) - (m >> 1)


def saturate(x: int, bits: int) -> int:
    return min(max(x, -(1 << (bits - 1))), (1 << (bits - 1)) - 1)
