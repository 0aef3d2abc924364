"""affine (BatchNormalization, Add/Sub of a constant) == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.affine import affine, bind
from tests import naive


@st.composite
def affine_case(draw):
    """f_bits over the whole domain [1, 62]; factors and offsets up to the kernel's exactness limit
    max|x - zx| * |w| + |b| + 2**(f_bits-1) < 2**62 (x over its dtype; the edge included)."""
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 9)))
    xd, lo, hi = draw(naive.value_ranges())
    x = draw(naive.int_arrays(shape, xd, lo, hi))
    x_zp = draw(naive.zero_points(lo, hi))
    f_bits = draw(st.integers(1, 62))
    info = np.iinfo(xd)
    dev = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp))
    room = (1 << 62) - 1 - (1 << (f_bits - 1))
    w_lim = min(room // max(dev, 1), 1 << 47)
    w = np.array([draw(st.one_of(st.integers(-w_lim, w_lim), st.sampled_from([0, 1, -1, w_lim, -w_lim])))
                  for _ in range(shape[1])], np.int64)
    b_lim = room - dev * int(np.abs(w).max())
    b = np.array([draw(st.one_of(st.integers(-b_lim, b_lim), st.sampled_from([b_lim, -b_lim])))
                  for _ in range(shape[1])], np.int64)
    dtype, out_zp, qmin, qmax = draw(naive.out_params(naive.out_ranges_like(xd)))
    return x, x_zp, w, b, f_bits, out_zp, qmin, qmax, dtype


@settings(deadline=None, max_examples=examples(200))
@given(affine_case())
def test_affine_matches_twin(case):
    *args, dtype = case
    expected = naive.affine(*args, dtype)
    out = np.empty(args[0].shape, dtype=dtype)
    affine(*args, out)
    np.testing.assert_array_equal(out, expected)


def test_affine_ties_round_up_and_saturate():
    x = np.array([-3, -1, 0, 1, 3, 127], np.int8).reshape(1, 1, 6)
    out = np.empty(x.shape, np.int8)
    # y = x / 2 (w = 1, F = 1): -1.5 -> -1, -0.5 -> 0, 0.5 -> 1, 1.5 -> 2
    affine(x, 0, np.array([1]), np.array([0]), 1, 0, -128, 127, out)
    assert out.ravel().tolist() == [-1, 0, 0, 1, 2, 64]
    affine(x, 0, np.array([1 << 20]), np.array([0]), 1, 0, -128, 127, out)  # huge factor: saturates
    assert out.ravel().tolist() == [-128, -128, 0, 127, 127, 127]


def test_affine_refuses_inexact_sums():
    x = np.zeros((1, 1, 4), np.int16)
    out = np.empty(x.shape, np.int16)
    with pytest.raises(ValueError, match="2\\*\\*62"):
        affine(x, 0, np.array([1 << 47]), np.array([0]), 8, 0, -32768, 32767, out)
    with pytest.raises(ValueError, match="f_bits"):
        affine(x, 0, np.array([1]), np.array([0]), 0, 0, -32768, 32767, out)


@pytest.mark.parametrize("out_dtype", [np.int32, np.int16])
def test_affine_folded_path_edge(out_dtype):
    # the folded loop (x*w + b') >> F with b' = b + 2^(F-1) - x_zp*w + out_zp*2^F runs while
    # max|x| * |w| + |b'| < 2^63; at the edge and one past it (the plain loop), both equal the twin
    x = np.array([-32768, -32767, -1, 0, 1, 32766, 32767], np.int16).reshape(1, 1, -1)
    w, f_bits = 1 << 46, 40
    info = np.iinfo(out_dtype)
    out_zp = 3 << 21  # out_zp * 2^40 = 3 * 2^61: with max|x| * w = 2^61, |b'| must stay below 3 * 2^61
    for b, folded in ((-(1 << 39) - 1, True), (-(1 << 39), False), (-(1 << 39) - 5, True), (1, False)):
        expected = naive.affine(x, 0, [w], [b], f_bits, out_zp, info.min, info.max, out_dtype)
        out = np.empty(x.shape, out_dtype)
        run = bind(x, 0, np.array([w]), np.array([b]), f_bits, out_zp, info.min, info.max, out)
        assert run.args[-1] is folded
        run(x, out)
        np.testing.assert_array_equal(out, expected)


@settings(deadline=None, max_examples=examples(100))
@given(affine_case())
def test_affine_bound_run_matches_twin(case):
    # what a graph node keeps: one bound run, called on other data of the same shape and dtype (every element
    # changed) and again on the first; another shape (here twice the outer axis) gets its own bind
    x, *args, dtype = case
    x2 = ~x
    wide = np.concatenate([x, x2])
    run = bind(x, *args, np.empty(x.shape, dtype))
    run_wide = bind(wide, *args, np.empty(wide.shape, dtype))
    for r, xi in ((run, x), (run, x2), (run, x), (run_wide, wide), (run_wide, wide[::-1].copy())):
        out = np.empty(xi.shape, dtype=dtype)
        r(xi, out)
        np.testing.assert_array_equal(out, naive.affine(xi, *args, dtype))


@pytest.mark.parametrize("w", [(1 << 31) - 1, 1 << 31, -(1 << 31) + 1, -(1 << 31), 3, -3])
@pytest.mark.parametrize("x_dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_affine_int32_factor_edge(w, x_dtype):
    # |w| < 2^31 multiplies as int32 x int32 -> int64 (pmuldq); at the edge and one past it, equal to the twin
    info = np.iinfo(x_dtype)
    x = np.array([info.min, info.min + 1, -1 if info.min else 1, 0, info.max - 1, info.max], x_dtype)
    x = x.reshape(1, 1, -1)
    for f_bits, out_dtype, out_zp, qmin, qmax in ((33, np.int16, -5, -32768, 32767), (40, np.int8, 3, -100, 127),
                                                 (20, np.int32, 7, -2 ** 31, 2 ** 31 - 1)):
        b = np.array([12345], np.int64)
        x_zp = int(info.min) // 3
        expected = naive.affine(x, x_zp, [w], b, f_bits, out_zp, qmin, qmax, out_dtype)
        out = np.empty(x.shape, out_dtype)
        affine(x, x_zp, np.array([w]), b, f_bits, out_zp, qmin, qmax, out)
        np.testing.assert_array_equal(out, expected)
