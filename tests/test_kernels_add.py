"""add_rescaled == golden twin, bit for bit."""
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.fixedpoint import quantize_multiplier
from kernels.add import add_rescaled, bind
from tests import naive

ADD_RANGES = naive.VALUE_RANGES + [(np.int32, -2 ** 31, 2 ** 31 - 1)]


@st.composite
def add_case(draw):
    """Independent factors, or (half the draws) tied ones so that the outputs vary instead of all rounding to the
    zero point or saturating: each input factor log-uniform where the rescaled input span (hi - lo) *
    2**left_shift * factor is in [1, 2**28] (factors >= 2**-32: smaller ones flush to 0), the output factor mapping
    the larger span onto the output range (times 2**+-4). left_shift up to MAX_LEFT_SHIFT (32)."""
    n = draw(st.integers(1, 40))
    ad, alo, ahi = draw(naive.value_ranges(ADD_RANGES))
    bd, blo, bhi = draw(naive.second_range((ad, alo, ahi), ADD_RANGES))
    a = draw(naive.int_arrays((n,), ad, alo, ahi))
    b = draw(naive.int_arrays((n,), bd, blo, bhi))
    a_zp = draw(naive.zero_points(alo, ahi))
    b_zp = draw(naive.zero_points(blo, bhi))
    left_shift = draw(st.sampled_from([0, 1, 7, 15, 20, 24, 31, 32]))
    sign_b = draw(st.sampled_from([1, -1]))
    dtype, out_zp, qmin, qmax = draw(naive.out_params(naive.out_ranges_like((ad, alo, ahi))))
    if draw(st.booleans()):
        factors = []
        for lo, hi in ((alo, ahi), (blo, bhi)):
            top = math.log2((hi - lo) * 2 ** left_shift)
            factors.append(2.0 ** draw(st.floats(max(-32.0, -top), max(-32.0, min(6.0, 28.0 - top)))))
        (a_mult, a_shift), (b_mult, b_shift) = (naive.quantize_multiplier(f) for f in factors)
        span = max(factors[0] * (ahi - alo), factors[1] * (bhi - blo)) * 2 ** left_shift
        out_mult, out_shift = naive.quantize_multiplier(min((qmax - qmin + 1) / span * 2.0 ** draw(st.floats(-4, 4)),
                                                      2.0 ** 30))
    else:
        (a_mult, a_shift), (b_mult, b_shift), (out_mult, out_shift) = (draw(naive.multipliers()) for _ in range(3))
    return (a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift, out_zp,
            qmin, qmax, dtype)


# a - a_zp = 2**32 - 1 (int32) and 2**32 - 3 shifted left by 32: past mul_round_shift's domain, refused by both;
# the kernel's int64 shift used to wrap them to -2**32 and -3 * 2**32 and return [-4194304, -12582912]
@settings(deadline=None, max_examples=examples(150))
@given(add_case())
@example((np.array([2 ** 31 - 1, 2 ** 31 - 3], np.int32), -2 ** 31, 1 << 30, 40, np.array([0, 0], np.int8), 0,
          1 << 30, 30, 32, 1, 1 << 30, 30, 0, -2 ** 31, 2 ** 31 - 1, np.int32))
def test_add_rescaled_matches_twin(case):
    *args, dtype = case
    out = np.empty(args[0].shape, dtype=dtype)
    try:
        expected = naive.add_rescaled(*args, dtype)
    except ValueError:  # an intermediate left the exact domain of mul_round_shift: the kernel must refuse too
        with pytest.raises(ValueError):
            add_rescaled(*args, out)
        return
    add_rescaled(*args, out)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def _tflite_params(sa, sb, so, left_shift=20):
    """TFLite-style Add parameters: inputs to 2*max(sa, sb) scale with 20 bits of headroom."""
    twice_max = 2 * max(sa, sb)
    a_m, a_r = quantize_multiplier(sa / twice_max)
    b_m, b_r = quantize_multiplier(sb / twice_max)
    o_m, o_r = quantize_multiplier(twice_max / ((1 << left_shift) * so))
    return a_m, a_r, b_m, b_r, o_m, o_r


def test_add_int8_edges_and_saturation():
    a = np.array([-128, 127, 0, 127, -128], np.int8)
    b = np.array([-128, 127, 0, -128, 127], np.int8)
    a_m, a_r, b_m, b_r, o_m, o_r = _tflite_params(0.1, 0.1, 0.1)
    out = np.empty(5, np.int8)
    add_rescaled(a, 0, a_m, a_r, b, 0, b_m, b_r, 20, 1, o_m, o_r, 0, -128, 127, out)
    assert out.tolist() == [-128, 127, 0, -1, -1]
    expected = naive.add_rescaled(a, 0, a_m, a_r, b, 0, b_m, b_r, 20, 1, o_m, o_r, 0, -128, 127, np.int8)
    np.testing.assert_array_equal(out, expected)
    add_rescaled(a, 0, a_m, a_r, b, 0, b_m, b_r, 20, -1, o_m, o_r, 0, -128, 127, out)
    assert out.tolist() == [0, 0, 0, 127, -128]


def test_add_tie_rounding():
    # all factors exactly 1/2 with left_shift 0: va = mrs(1, 1/2) = 1 (tie up), vb = mrs(-1, 1/2) = 0
    h_m, h_r = quantize_multiplier(0.5)
    one_m, one_r = quantize_multiplier(1.0)
    out = np.empty(2, np.int16)
    add_rescaled(np.array([1, -1], np.int16), 0, h_m, h_r, np.array([-1, -1], np.int16), 0, h_m, h_r, 0, 1,
                 one_m, one_r, 0, -32768, 32767, out)
    assert out.tolist() == [1, 0]


def test_add_domain_and_validation():
    a = np.array([2 ** 31 - 1], np.int32)
    out = np.empty(1, np.int32)
    m, r = quantize_multiplier(1.0)
    with pytest.raises(ValueError, match="2\\*\\*48"):
        add_rescaled(a, -2 ** 31, m, r, a, 0, m, r, 20, 1, m, r, 0, -2 ** 31, 2 ** 31 - 1, out)
    with pytest.raises(ValueError, match="sign_b"):
        add_rescaled(a, 0, m, r, a, 0, m, r, 0, 2, m, r, 0, -2 ** 31, 2 ** 31 - 1, out)
    with pytest.raises(ValueError, match="left_shift"):
        add_rescaled(a, 0, m, r, a, 0, m, r, 33, 1, m, r, 0, -2 ** 31, 2 ** 31 - 1, out)
    with pytest.raises(ValueError, match="does not broadcast"):
        add_rescaled(a, 0, m, r, np.zeros(2, np.int32), 0, m, r, 0, 1, m, r, 0, -2 ** 31, 2 ** 31 - 1, out)


@st.composite
def realistic_add_case(draw):
    """Adds as the board lowers them (TFLite-style scales, 8/16-bit): mostly the branch-free direct path."""
    n = draw(st.integers(1, 60))
    dt, lo, hi = draw(naive.value_ranges())
    a = draw(naive.int_arrays((n,), dt, lo, hi))
    b = draw(naive.int_arrays((n,), dt, lo, hi))
    a_zp, b_zp = draw(naive.zero_points(lo, hi)), draw(naive.zero_points(lo, hi))
    sa, sb, so = (draw(st.floats(1e-4, 10.0)) for _ in range(3))
    left = 20 if np.iinfo(dt).bits <= 8 else 15
    a_m, a_r, b_m, b_r, o_m, o_r = _tflite_params(sa, sb, so, left)
    dtype, out_zp, qmin, qmax = draw(naive.out_params())
    return (a, a_zp, a_m, a_r, b, b_zp, b_m, b_r, left, draw(st.sampled_from([1, -1])), o_m, o_r, out_zp, qmin,
            qmax, dtype)


@settings(deadline=None, max_examples=examples(100))
@given(realistic_add_case())
def test_direct_path_matches_twin(case):
    from kernels.add import direct_ok
    *args, dtype = case
    expected = naive.add_rescaled(*args, dtype)
    out = np.empty(args[0].shape, dtype=dtype)
    add_rescaled(*args, out)
    np.testing.assert_array_equal(out, expected)
    a, a_zp, a_m, a_r, b, b_zp, b_m, b_r, left, _, o_m, o_r, out_zp = args[:13]
    # ordinary adds (8-bit, or 16-bit with 16-bit zero points) to an 8/16-bit output take the branch-free path
    ordinary = np.iinfo(a.dtype).bits <= 8 or max(abs(a_zp), abs(b_zp)) < 1 << 15
    if ordinary and np.iinfo(dtype).bits <= 16 and o_r >= 24:
        assert direct_ok(a, a_zp, a_m, a_r, b, b_zp, b_m, b_r, left, o_m, o_r, out_zp)[0]


@settings(deadline=None, max_examples=examples(100))
@given(st.data())
def test_add_broadcast_matches_twin(data):
    shape, a, b, a_zp, b_zp = data.draw(naive.broadcast_case())
    sa, sb, so = (data.draw(st.floats(1e-3, 4.0)) for _ in range(3))
    left = 20 if np.iinfo(a.dtype).bits <= 8 else 15
    a_m, a_r, b_m, b_r, o_m, o_r = _tflite_params(sa, sb, so, left)
    sign = data.draw(st.sampled_from([1, -1]))
    dtype, out_zp, qmin, qmax = data.draw(naive.out_params())
    args = (a_zp, a_m, a_r)
    rest = (b_zp, b_m, b_r, left, sign, o_m, o_r, out_zp, qmin, qmax)

    def full(v):
        return np.broadcast_to(v, shape).reshape(-1).copy()

    def twin(x, y):
        return naive.add_rescaled(full(x), *args, full(y), *rest, dtype).reshape(shape)

    expected = twin(a, b)
    out = np.empty(shape, dtype)
    add_rescaled(a, *args, b, *rest, out)
    np.testing.assert_array_equal(out, expected)
    # what a graph node keeps: one bound run, called on other data of the same shapes (every element changed) and
    # again on the first; operands of other shapes (here flat full arrays) get their own bind
    a2, b2 = ~a, ~b
    expected2 = twin(a2, b2)
    run = bind(a, *args, b, *rest, np.empty(shape, dtype))
    run_flat = bind(full(a), *args, full(b), *rest, np.empty(expected.size, dtype))
    for r, x, y, want in ((run, a, b, expected), (run, a2, b2, expected2), (run, a, b, expected),
                          (run_flat, full(a2), full(b2), expected2), (run_flat, full(a), full(b), expected)):
        out = np.empty(shape, dtype)
        r(x, y, out if r is run else out.reshape(-1))
        np.testing.assert_array_equal(out, want)


def _add_direct_case(a, b, a_zp, b_zp, m, r, left, o_m, o_r, out_zp, sign, dtype):
    """add_rescaled's bound run (its flags tell the path it took) == the twin; returns the (direct, fold) flags."""
    info = np.iinfo(dtype)
    expected = naive.add_rescaled(a, a_zp, m, r, b, b_zp, m, r, left, sign, o_m, o_r, out_zp, info.min, info.max,
                                  dtype)
    out = np.empty(a.shape, dtype)
    run = bind(a, a_zp, m, r, b, b_zp, m, r, left, sign, o_m, o_r, out_zp, info.min, info.max, out)
    run(a, b, out)
    np.testing.assert_array_equal(out, expected)
    return run.direct, run.fold


@pytest.mark.parametrize("sign", [1, -1])
def test_add_direct_path_edges(sign):
    # the branch-free loop's bounds (kernels.add.direct_ok), at and one past each edge, with extreme inputs
    m, r = quantize_multiplier(0.5)
    u16 = np.array([0, 65535, 1, 65534, 32768, 0], np.uint16)
    rev = u16[::-1].copy()
    # raw inputs shifted left must fit int32: 65535 << 15 does, 65535 << 16 does not
    assert _add_direct_case(u16, rev, 0, 0, m, r, 15, m, r + 10, 3, sign, np.int32) == (True, True)
    assert _add_direct_case(u16, rev, 0, 0, m, r, 16, m, r + 10, 3, sign, np.int32) == (False, False)
    # out_zp joins the output constant while (va + vb) * |out_mult| + 2**(out_shift-1) + |out_zp| * 2**out_shift
    # < 2**63; past that it is added after the shift
    i16 = np.array([-32768, 32767, -1, 0, 1, -32767], np.int16)
    i16b = i16[::-1].copy()
    o_m, o_r = quantize_multiplier(2.0 ** -20)
    va = ((32768 << 15) * m >> r) + 1
    edge = ((1 << 63) - 1 - 2 * va * o_m - (1 << (o_r - 1))) >> o_r
    assert _add_direct_case(i16, i16b, 0, 0, m, r, 15, o_m, o_r, edge, sign, np.int32) == (True, True)
    assert _add_direct_case(i16, i16b, 0, 0, m, r, 15, o_m, o_r, -edge, sign, np.int32) == (True, True)
    assert _add_direct_case(i16, i16b, 0, 0, m, r, 15, o_m, o_r, edge + 1, sign, np.int32) == (True, False)
    assert _add_direct_case(i16, i16b, 0, 0, m, r, 15, o_m, o_r, -edge - 1, sign, np.int32) == (True, False)
    # the input constants: max|x << left| * |mult| + 2**(shift-1) + (|zp| << left) * |mult| < 2**63 (uint16 with a
    # zero point near 32768 reaches it at left 15)
    big_m = (1 << 31) - 1
    zp_edge = ((1 << 63) - 1 - (65535 << 15) * big_m - (1 << 61)) // ((1 << 15) * big_m)
    for zp, direct in ((zp_edge, True), (zp_edge + 1, False)):
        assert _add_direct_case(u16, rev, zp, 0, big_m, 62, 15, 1 << 30, 31, 0, sign, np.int32) == (direct, direct)
