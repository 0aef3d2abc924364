"""mul == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.fixedpoint import quantize_multiplier
from kernels.mul import bind, mul
from tests import naive


@st.composite
def mul_case(draw):
    n = draw(st.integers(1, 40))
    ad, alo, ahi = draw(naive.value_ranges())
    bd, blo, bhi = draw(naive.second_range((ad, alo, ahi)))
    a = draw(naive.int_arrays((n,), ad, alo, ahi))
    b = draw(naive.int_arrays((n,), bd, blo, bhi))
    a_zp = draw(naive.zero_points(alo, ahi))
    b_zp = draw(naive.zero_points(blo, bhi))
    mult, shift = draw(naive.multipliers())
    dtype, out_zp, qmin, qmax = draw(naive.out_params(naive.out_ranges_like((ad, alo, ahi))))
    return a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, dtype


@settings(deadline=None, max_examples=examples(150))
@given(mul_case())
def test_mul_matches_twin(case):
    *args, dtype = case
    expected = naive.mul(*args, dtype)
    out = np.empty(args[0].shape, dtype=dtype)
    mul(*args, out)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def test_mul_extremes():
    a = np.array([-32768, 32767, -32768, 1, -1], np.int16)
    b = np.array([-32768, 32767, 32767, 1, 1], np.int16)
    m, r = quantize_multiplier(2.0 ** -30)
    out = np.empty(5, np.int16)
    mul(a, 0, b, 0, m, r, 0, -32768, 32767, out)
    # 2**30 / 2**30 = 1; (2**15 - 1)**2 / 2**30 = 0.99997 -> 1; -2**15*(2**15-1)/2**30 = -0.99997 -> -1;
    # +-1/2**30 -> 0
    assert out.tolist() == [1, 1, -1, 0, 0]
    h_m, h_r = quantize_multiplier(0.5)
    out8 = np.empty(4, np.uint8)
    mul(np.array([1, 3, 255, 0], np.uint8), 0, np.array([1, 1, 255, 0], np.uint8), 0, h_m, h_r, 10, 0, 255,
        out8)
    assert out8.tolist() == [11, 12, 255, 10]  # ties 0.5 -> 1, 1.5 -> 2; 65025/2 saturates


def _edge(a_zp, b_zp, c):
    """The largest |mult| for which the int64 bounds of kernels.mul._mul hold with the constant c, for uint16
    operands: pmax*|mult| + c < 2**63, and for a row times a constant
    max|x|*dev_other*|mult| + |x_zp|*dev_other*|mult| + c < 2**63 for either operand x."""
    dev_a = max(abs(0 - a_zp), abs(65535 - a_zp))
    dev_b = max(abs(0 - b_zp), abs(65535 - b_zp))
    lim = (1 << 63) - c - 1
    return min(lim // (dev_a * dev_b), lim // ((65535 + abs(a_zp)) * dev_b), lim // ((65535 + abs(b_zp)) * dev_a))


def test_mul_direct_path_bound():
    # the branch-free loops run up to the edge of their int64 proof, with the output zero point folded into the
    # constant up to a tighter edge; at and just past each edge, with every product at its extreme, they equal
    # the twin
    a = np.array([0, 65535, 0, 65535, 1, 32768], np.uint16)
    b = np.array([0, 65535, 65535, 0, 65534, 32767], np.uint16)
    for a_zp, b_zp in ((-65536, -65536), (65536, -65536), (0, 0), (32768, 32768), (-3, 7)):
        for shift in (0, 1, 31, 45, 47, 62):
            for dtype, out_zp, qmin, qmax in ((np.int16, -7, -32768, 32767), (np.int16, 32767, -5, 32767),
                                              (np.int32, 0, -2 ** 31, 2 ** 31 - 1)):
                # the branch-free loops (c = 2**(shift-1) + |out_zp|) and out_zp folded (|out_zp| * 2**shift)
                rnd = (1 << shift) >> 1
                edge = _edge(a_zp, b_zp, rnd + abs(out_zp))
                fold_edge = _edge(a_zp, b_zp, rnd + (abs(out_zp) << shift))
                near = [max(0, min(e, (1 << 31) - 1)) for e in (edge, edge + 1, fold_edge, fold_edge + 1)]
                for mult in set(near) | {-near[0], -near[2]}:
                    expected = naive.mul(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, dtype)
                    out = np.empty(a.shape, dtype)
                    run = bind(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out)
                    assert (run.direct, run.fold) == (abs(mult) <= edge, abs(mult) <= fold_edge)
                    run(a, b, out)
                    np.testing.assert_array_equal(out, expected)
                    # one operand broadcast along the inner axis (its value folded into the multiplier)
                    for i in (0, 1, 5):
                        bb = b[i:i + 1].reshape(1, 1, 1)
                        exp_b = naive.mul(a, a_zp, np.repeat(b[i:i + 1], a.size), b_zp, mult, shift, out_zp, qmin,
                                          qmax, dtype)
                        out = np.empty((1, 1, a.size), dtype)
                        mul(a.reshape(1, 1, -1), a_zp, bb, b_zp, mult, shift, out_zp, qmin, qmax, out)
                        np.testing.assert_array_equal(out.reshape(-1), exp_b)
                        mul(bb, b_zp, a.reshape(1, 1, -1), a_zp, mult, shift, out_zp, qmin, qmax, out)
                        np.testing.assert_array_equal(out.reshape(-1), exp_b)


def test_mul_validation():
    out = np.empty(3, np.int8)
    with pytest.raises(ValueError, match="dtype"):
        mul(np.zeros(3, np.int32), 0, np.zeros(3, np.int8), 0, 1, 0, 0, -128, 127, out)
    with pytest.raises(ValueError, match="shift"):
        mul(np.zeros(3, np.int8), 0, np.zeros(3, np.int8), 0, 1, 63, 0, -128, 127, out)


@settings(deadline=None, max_examples=examples(100))
@given(naive.broadcast_case(), st.data())
def test_mul_broadcast_matches_twin(case, data):
    shape, a, b, a_zp, b_zp = case
    mult, shift = data.draw(naive.multipliers())
    dtype, out_zp, qmin, qmax = data.draw(naive.out_params())
    rest = (mult, shift, out_zp, qmin, qmax)

    def full(v):
        return np.broadcast_to(v, shape).reshape(-1).copy()

    def twin(x, y):
        return naive.mul(full(x), a_zp, full(y), b_zp, *rest, dtype).reshape(shape)

    expected = twin(a, b)
    out = np.empty(shape, dtype)
    mul(a, a_zp, b, b_zp, *rest, out)
    np.testing.assert_array_equal(out, expected)
    # what a graph node keeps: one bound run, called on other data of the same shapes (every element changed) and
    # again on the first; operands of other shapes (here flat full arrays) get their own bind
    a2, b2 = ~a, ~b
    expected2 = twin(a2, b2)
    run = bind(a, a_zp, b, b_zp, *rest, np.empty(shape, dtype))
    run_flat = bind(full(a), a_zp, full(b), b_zp, *rest, np.empty(expected.size, dtype))
    for r, x, y, want in ((run, a, b, expected), (run, a2, b2, expected2), (run, a, b, expected),
                          (run_flat, full(a2), full(b2), expected2), (run_flat, full(a), full(b), expected)):
        out = np.empty(shape, dtype)
        r(x, y, out if r is run else out.reshape(-1))
        np.testing.assert_array_equal(out, want)
