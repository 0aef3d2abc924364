"""fixedpoint.mul_round_shift and quantize_multiplier == their golden twins (naive.mrs, naive.quantize_multiplier),
bit for bit, over their whole documented domains and at the edges where their branches change."""
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.fixedpoint import mul_round_shift, quantize_multiplier
from tests import naive

X_EDGES = [0, 1, -1, 2 ** 31 - 1, 2 ** 31, -2 ** 31, -2 ** 31 - 1, 2 ** 48 - 1, -(2 ** 48 - 1), -2 ** 48,
           2 ** 24, -2 ** 24, 2 ** 47 + 2 ** 24 - 1, -(2 ** 47) - 2 ** 24]
M_EDGES = [0, 1, -1, 2 ** 30, -2 ** 30, 2 ** 31 - 1, -(2 ** 31 - 1)]
R_EDGES = [0, 1, 23, 24, 25, 61, 62]


@st.composite
def mrs_inputs(draw):
    """x in [-2**48, 2**48) (an edge, a multiple of 2**24 give or take 1, or of a random magnitude), m in
    (-2**31, 2**31) (an edge or random), r in [0, 62]: the int32 path, the split path with r >= 24 and the
    saturating one with r < 24 all come up."""
    kind = draw(st.sampled_from(["edge", "multiple", "bits"]))
    if kind == "edge":
        x = draw(st.sampled_from(X_EDGES))
    elif kind == "multiple":
        x = draw(st.integers(-2 ** 24, 2 ** 24 - 1)) * 2 ** 24 + draw(st.sampled_from([0, 0, 1, -1]))
        x = min(max(x, -2 ** 48), 2 ** 48 - 1)
    else:
        b = draw(st.integers(0, 48))
        x = draw(st.integers(-2 ** b, 2 ** b - 1))
    m = draw(st.sampled_from(M_EDGES) | st.integers(-(2 ** 31 - 1), 2 ** 31 - 1))
    r = draw(st.sampled_from(R_EDGES) | st.integers(0, 62))
    return x, m, r


@settings(deadline=None, max_examples=examples(1500))
@given(mrs_inputs())
def test_mul_round_shift_matches_twin(case):
    """Rounding (ties toward +infinity), the exact 79-bit product and the saturation at +-2**62."""
    x, m, r = case
    assert mul_round_shift(x, m, r) == naive.mrs(x, m, r), case


def test_mul_round_shift_edges_match_twin():
    """Every combination of the edges of x, m and r (saturation of either sign included)."""
    saturated = 0
    for x, m, r in itertools.product(X_EDGES, M_EDGES, R_EDGES):
        expected = naive.mrs(x, m, r)
        assert mul_round_shift(x, m, r) == expected, (x, m, r)
        saturated += abs(expected) == naive.SAT
    assert saturated > 0


@st.composite
def factors(draw):
    """(real, bits): bits in [8, 31] (31 most often); the real of either sign is log-uniform over every binade of
    float64 (flushed, kept and too large), a power of two, a tie of the rounding to ``bits`` bits or its float
    neighbour (mantissas rounding up to 2**bits, the flush threshold at r = 62/63, the largest factor at r = 0),
    or a special value."""
    bits = draw(st.sampled_from([31, 31, 8]) | st.integers(8, 31))
    kind = draw(st.sampled_from(["log", "log", "pow2", "tie", "special"]))
    if kind == "log":
        e = draw(st.integers(-45, 33) | st.integers(-1126, 1023))
        real = math.ldexp(draw(st.integers(2 ** 52, 2 ** 53 - 1)), e - 53)
    elif kind == "pow2":
        real = math.ldexp(1.0, draw(st.integers(-1074, 1023)))
    elif kind == "tie":  # (k + 1/2) * 2**-r, k of `bits` bits
        k = draw(st.sampled_from([2 ** (bits - 1), 2 ** bits - 1]) | st.integers(2 ** (bits - 1), 2 ** bits - 1))
        r = draw(st.sampled_from([0, 61, 62, 63]) | st.integers(-1, 64))
        real = math.ldexp(2 * k + 1, -r - 1)
        real = draw(st.sampled_from([real, math.nextafter(real, 0.0), math.nextafter(real, math.inf)]))
    else:
        real = draw(st.sampled_from([0.0, 5e-324, 2.0 ** -32, 2.0 ** -33, 2.0 ** 31, 1.7976931348623157e308,
                                     math.inf, math.nan]))
    return (-real if draw(st.booleans()) else real), bits


@settings(deadline=None, max_examples=examples(1000))
@given(factors())
def test_quantize_multiplier_matches_twin(case):
    """The same (M, r) as the exact-Fraction twin (rounding half away from zero, renormalised at 2**bits, flushed
    past r = 62), or ValueError from both (left shift needed, not finite)."""
    real, bits = case
    try:
        expected = naive.quantize_multiplier(real, bits)
    except ValueError:
        with pytest.raises(ValueError):
            quantize_multiplier(real, bits)
        return
    assert quantize_multiplier(real, bits) == expected, case


def test_quantize_multiplier_literals_match_twin():
    """Hand-derived pairs at the boundaries, and the twin agrees."""
    tie_up = (2 ** 31 - 0.5) * 2.0 ** -63  # the smallest kept factor: rounds up to 2**31 at r = 63 -> (2**30, 62)
    cases = {0.5: (2 ** 30, 31), 1.0: (2 ** 30, 30), -1.0: (-2 ** 30, 30), 2.0 ** -32: (2 ** 30, 62),
             tie_up: (2 ** 30, 62), math.nextafter(tie_up, 0.0): (0, 0), 2.0 ** -40: (0, 0), 0.0: (0, 0),
             2 ** 31 - 1.0: (2 ** 31 - 1, 0), math.nextafter(2 ** 31 - 0.5, 0.0): (2 ** 31 - 1, 0),
             3 * 2.0 ** -33: (3 * 2 ** 29, 62), (2 ** 30 + 0.5) * 2.0 ** -40: (2 ** 30 + 1, 40)}
    for real, pair in cases.items():
        assert quantize_multiplier(real) == pair == naive.quantize_multiplier(real), real
    for real in (2 ** 31 - 0.5, 2.0 ** 40, math.inf, -math.inf, math.nan):
        for fn in (quantize_multiplier, naive.quantize_multiplier):
            with pytest.raises(ValueError):
                fn(real)
