"""resize_linear_acc == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.resize import resize_linear_acc
from tests import naive


@st.composite
def resize_case(draw):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    ho, wo = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    xd, lo, hi = draw(naive.value_ranges())
    x = draw(naive.int_arrays((n, c, h, w), xd, lo, hi))
    x_zp = draw(naive.zero_points(lo, hi))
    f = draw(st.sampled_from([0, 1, 7, 10, 15, 22]))
    one = 1 << f

    def weights(k):
        return np.array([draw(st.one_of(st.sampled_from([0, one]), st.integers(0, one))) for _ in range(k)],
                        dtype=np.int64)

    y0 = np.array([draw(st.integers(0, h - 1)) for _ in range(ho)], np.int64)
    y1 = np.minimum(y0 + 1, h - 1)
    x0 = np.array([draw(st.integers(0, w - 1)) for _ in range(wo)], np.int64)
    x1 = np.minimum(x0 + 1, w - 1)
    if draw(st.booleans()):  # arbitrary index pairs are legal too
        y1 = np.array([draw(st.integers(0, h - 1)) for _ in range(ho)], np.int64)
        x1 = np.array([draw(st.integers(0, w - 1)) for _ in range(wo)], np.int64)
    return x, x_zp, y0, y1, weights(ho), x0, x1, weights(wo), f


@settings(deadline=None, max_examples=examples(100))
@given(resize_case())
def test_resize_linear_acc_matches_twin(case):
    expected = naive.resize_linear_acc(*case)
    out = resize_linear_acc(*case)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, expected)


def test_resize_extremes():
    x = np.array([[[[0, 65535], [65535, 0]]]], np.uint16)
    f = 22
    one = 1 << f
    idx = np.array([0], np.int64)
    args = (x, -65536, idx, idx + 1, np.array([one]), idx, idx + 1, np.array([one]), f)
    out = resize_linear_acc(*args)
    assert out[0, 0, 0, 0] == (0 + 65536) * one * one
    np.testing.assert_array_equal(out, naive.resize_linear_acc(*args))
    half = np.array([one // 2])
    args = (x, 0, idx, idx + 1, half, idx, idx + 1, half, f)
    out = resize_linear_acc(*args)
    assert out[0, 0, 0, 0] == 2 * 65535 * (one // 2) ** 2
    np.testing.assert_array_equal(out, naive.resize_linear_acc(*args))


def test_resize_validation():
    x = np.zeros((1, 1, 2, 2), np.int8)
    i = np.array([0, 1], np.int64)
    with pytest.raises(ValueError, match="y1"):
        resize_linear_acc(x, 0, i, i + 1, i, i, i, i, 4)
    with pytest.raises(ValueError, match="wx"):
        resize_linear_acc(x, 0, i, i, i, i, i, np.array([0, 17]), 4)
    with pytest.raises(ValueError, match="frac_bits"):
        resize_linear_acc(x, 0, i, i, i, i, i, i, 23)
    with pytest.raises(ValueError, match="same length"):
        resize_linear_acc(x, 0, i, i, i[:1], i, i, i, 4)
