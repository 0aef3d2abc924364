"""Exact rounding rules for the variations of ``explain``: each works on Python integers (no width limit) and on
numpy integer arrays (int64, or object arrays of Python integers where int64 could overflow), with ``r`` a number or
an array.

``f(n, r)`` rounds ``n / 2**r`` (``r >= 0``); ``double_rounding`` is TFLite's MultiplyByQuantizedMultiplier and
``two_stage`` the same two stages with other rules at each.
"""
from __future__ import annotations

import numpy as np


def _half(r):
    return (1 << r) >> 1  # 2**(r-1), 0 for r == 0


def _sign(n):
    return 1 - 2 * (n < 0)


def half_up(n, r):
    """Ties toward +inf."""
    return (n + _half(r)) >> r


def half_even(n, r):
    q = n >> r
    rem, h = n - (q << r), _half(r)
    return q + ((rem > h) | ((rem == h) & (r > 0) & ((q & 1) == 1)))


def half_away(n, r):
    return _sign(n) * ((abs(n) + _half(r)) >> r)


def floor_shift(n, r):
    return n >> r


def toward_zero(n, r):
    return _sign(n) * (abs(n) >> r)


ROUNDINGS = (("rounding half up", half_up), ("rounding half to even", half_even),
             ("rounding half away from zero", half_away), ("truncation toward -inf", floor_shift),
             ("truncation toward 0", toward_zero))


def two_stage(x, m, s, first=half_up, second=half_away):
    """``second(first((x * 2**max(s, 0)) * m, 31), max(-s, 0))``: TFLite's MultiplyByQuantizedMultiplier with the
    defaults (gemmlowp's SaturatingRoundingDoublingHighMul is exactly ``floor((a*m + 2**30) / 2**31)``, ties
    toward +inf, and RoundingDivideByPOT rounds ties away from zero); other rules at either stage otherwise."""
    left, right = (s > 0) * s, (s < 0) * -s
    return second(first((x << left) * m, 31), right)


def double_rounding(x, m, s):
    """TFLite's MultiplyByQuantizedMultiplier(x, M, s)."""
    return two_stage(x, m, s)


def float32_rule(x, ratio):
    return np.rint(np.asarray(x).astype(np.float32) * np.asarray(ratio, np.float32)).astype(np.int64)


def wrap(x, bits: int):
    m = 1 << bits
    return ((x + (m >> 1)) % m) - (m >> 1)


def saturate(x, bits: int):
    return np.clip(x, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
