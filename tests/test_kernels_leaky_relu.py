"""leaky_relu == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.fixedpoint import quantize_multiplier
from kernels.leaky_relu import leaky_relu
from tests import naive


@st.composite
def leaky_case(draw):
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 8)))
    xd, lo, hi = draw(naive.value_ranges())
    x = draw(naive.int_arrays(shape, xd, lo, hi))
    x_zp = draw(naive.zero_points(lo, hi))
    pos_mult, pos_shift = draw(naive.multipliers())
    neg_mult, neg_shift = draw(naive.multiplier_arrays(shape[1], allow_negative=True))
    dtype, out_zp, qmin, qmax = draw(naive.out_params(naive.out_ranges_like(xd)))
    return x, x_zp, pos_mult, pos_shift, neg_mult, neg_shift, out_zp, qmin, qmax, dtype


@settings(deadline=None, max_examples=examples(150))
@given(leaky_case())
def test_leaky_relu_matches_twin(case):
    *args, dtype = case
    expected = naive.leaky_relu(*args, dtype)
    out = np.empty(args[0].shape, dtype=dtype)
    leaky_relu(*args, out)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def test_leaky_relu_slopes():
    x = np.array([-128, -3, -1, 0, 1, 127], np.int8).reshape(1, 1, 6)
    one_m, one_r = quantize_multiplier(1.0)
    out = np.empty(x.shape, np.int8)
    for alpha, expected in ((0.5, [-64, -1, 0, 0, 1, 127]),  # -1.5 -> -1, -0.5 -> 0 (ties toward +inf)
                            (-0.5, [64, 2, 1, 0, 1, 127]),  # 1.5 -> 2, 0.5 -> 1
                            (0.0, [0, 0, 0, 0, 1, 127]),
                            (2.0, [-128, -6, -2, 0, 1, 127])):
        m, r = quantize_multiplier(alpha)
        args = (x, 0, one_m, one_r, np.array([m]), np.array([r]), 0, -128, 127)
        leaky_relu(*args, out)
        assert out.ravel().tolist() == expected, alpha
        assert naive.leaky_relu(*args, np.int8).ravel().tolist() == expected, alpha  # the twin agrees by hand too


def test_leaky_relu_validation():
    x = np.zeros((1, 2, 3), np.int8)
    out = np.empty((1, 2, 3), np.int8)
    with pytest.raises(ValueError, match="neg_mult"):
        leaky_relu(x, 0, 1, 0, np.zeros(3, np.int64), np.zeros(2, np.int64), 0, -128, 127, out)
    with pytest.raises(ValueError, match="3-D"):
        leaky_relu(x.reshape(2, 3), 0, 1, 0, np.zeros(2, np.int64), np.zeros(2, np.int64), 0, -128, 127, out)
