"""Fixed-point primitives shared by the kernels.

A real factor ``a`` (a ratio of scales) is represented as an integer multiplier ``M`` and a right shift ``r``
with ``a ~= M * 2**-r``. ``quantize_multiplier`` makes the pair once, at preparation time; the kernels only
ever call ``mul_round_shift`` on integers.

Rounding rule of the board ("single rounding", ties toward +infinity, as TOSA ``apply_scale`` and the NPU
"natural" mode)::

    mul_round_shift(x, M, r) = floor((x * M + 2**(r-1)) / 2**r)      for r >= 1
                             = x * M                                  for r == 0

computed exactly, as a wide hardware multiplier would, for |x| < 2**48, |M| < 2**31 and 0 <= r <= 62.
"""
import math

from ._jit import njit

MULTIPLIER_BITS = 31  # M in [2**30, 2**31) for any non-zero factor
MAX_SHIFT = 62


class UnrepresentableScale(ValueError):
    """A factor that no ``(M, r)`` pair represents: not finite, or so large that it needs a left shift."""


def quantize_multiplier(real: float, bits: int = MULTIPLIER_BITS) -> tuple[int, int]:
    """Return ``(M, r)`` with ``real ~= M * 2**-r``, ``M`` having exactly ``bits`` significant bits.

    ``M = round_half_away_from_zero(mantissa * 2**bits)`` with the mantissa in [0.5, 1) (so M in
    [2**(bits-1), 2**bits)); if rounding reaches ``2**bits`` the mantissa is halved. A factor whose shift
    would exceed ``MAX_SHIFT`` is too small to represent and flushes to ``(0, 0)``; zero gives ``(0, 0)``.
    Negative factors keep their sign in ``M``. The caller decides whether a flushed or negative factor is
    legal on its board (the deployability check reports it). A non-finite factor, or one of ``2**exp`` with
    ``exp > bits`` (it would need a left shift), raises ``UnrepresentableScale``.
    """
    if not math.isfinite(real):
        raise UnrepresentableScale(f"cannot represent non-finite factor {real!r} as a fixed-point multiplier")
    if real == 0.0:
        return 0, 0
    sign = -1 if real < 0 else 1
    mant, exp = math.frexp(abs(real))
    m = math.floor(mant * (1 << bits) + 0.5)  # half away from zero (mant > 0)
    if m == 1 << bits:
        m //= 2
        exp += 1
    r = bits - exp
    if r > MAX_SHIFT:
        return 0, 0
    if r < 0:
        raise UnrepresentableScale(f"factor {real!r} is too large for a fixed-point multiplier (needs a left shift)")
    return sign * m, r


SATURATION = 1 << 62  # results are clamped to [-2**62, 2**62]; every caller clamps far tighter


@njit
def mul_round_shift(x, m, r):
    """``clamp(floor((x*m + 2**(r-1)) / 2**r), -2**62, 2**62)`` (``x*m`` when r == 0), exact.

    Domain: |x| < 2**48, |m| < 2**31, r in [0, 62]. The product can need 79 bits, so a large ``x`` is split
    as ``hi * 2**24 + lo`` with ``lo`` in [0, 2**24): both partial products fit in 56 bits and the shifts
    compose exactly (a floor of a floor is a floor). Results whose magnitude would pass 2**62 can only occur
    with |x| >= 2**31 and r < 24 (a factor above 64) and saturate.
    """
    if -(1 << 31) <= x < (1 << 31):
        if r == 0:
            return x * m
        return (x * m + (1 << (r - 1))) >> r
    hi = x >> 24
    lo = x - (hi << 24)
    if r >= 24:
        t = lo * m + (1 << (r - 1))  # |t| < 2**55 + 2**61
        return (hi * m + (t >> 24)) >> (r - 24)
    if m == 0:
        return 0
    # result = big * 2**(24-r) + c with c = (lo*m + rounding) >> r, |c| < 2**56 (lo >= 0 pulls a negative x back
    # toward 0 when m > 0, and the other way when m < 0). Where |big * 2**(24-r)| >= 2**62 + 2**56, the result
    # saturates with big's sign whatever c is; below that, the sum stays under 2**63 (no int64 overflow).
    big = hi * m  # |big| < 2**55
    lim = (1 << (38 + r)) + (1 << (32 + r))
    if big >= lim:
        return SATURATION
    if big <= -lim:
        return -SATURATION
    t = lo * m + ((1 << (r - 1)) if r > 0 else 0)
    res = (big << (24 - r)) + (t >> r)
    if res > SATURATION:
        return SATURATION
    if res < -SATURATION:
        return -SATURATION
    return res
