"""ort_qlmul (onnxruntime's QLinearMul) == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.ort_qlmul import ort_qlmul
from tests import naive_ort as N


@st.composite
def qlmul_case(draw):
    dtype = draw(st.sampled_from(N.DTYPES_8))
    n = draw(st.integers(1, 40))
    a = draw(N.int8_arrays(n, dtype))
    b = draw(N.int8_arrays(n, dtype))
    sa, sb, sc = draw(N.related_scales(3))
    if draw(st.booleans()):  # output scale near sa*sb (the usual case) rather than independent
        sc = float(np.float32(sa * sb * draw(st.sampled_from([1.0, 2.0, 4.0, 0.5, 64.0, 100.0, 300.0]))))
    return a, sa, draw(N.zero_point(dtype)), b, sb, draw(N.zero_point(dtype)), sc, draw(N.zero_point(dtype)), dtype


@settings(deadline=None, max_examples=examples(300))
@given(qlmul_case())
def test_ort_qlmul_matches_twin(case):
    *args, dtype = case
    if not np.isfinite(np.float32(args[1]) * np.float32(args[4]) / np.float32(args[6])):
        return  # a non-finite ratio is outside any real model
    expected = N.qlmul(*args, dtype)
    out = np.empty(args[0].shape, dtype=dtype)
    ort_qlmul(*args, out)
    np.testing.assert_array_equal(out, expected)


def test_zero_point_is_added_before_rounding():
    # (a - za)(b - zb) * ratio = 53.5 exactly; ONNX gives rint(53.5) + 125 = 179, onnxruntime rint(178.5) = 178.
    a = np.array([107], np.uint8)
    b = np.array([1], np.uint8)
    out = np.empty(1, np.uint8)
    ort_qlmul(a, 0.5, 0, b, 1.0, 0, 1.0, 125, out)
    assert out.tolist() == [178]
    np.testing.assert_array_equal(out, N.qlmul(a, 0.5, 0, b, 1.0, 0, 1.0, 125, np.uint8))


def test_saturation_both_ends():
    a = np.array([-128, 127, -128, 0], np.int8)
    b = np.array([127, 127, -128, 0], np.int8)
    out = np.empty(4, np.int8)
    ort_qlmul(a, 1.0, 0, b, 1.0, 0, 1.0, 3, out)
    assert out.tolist() == [-128, 127, 127, 3]
    np.testing.assert_array_equal(out, N.qlmul(a, 1.0, 0, b, 1.0, 0, 1.0, 3, np.int8))


def test_ort_qlmul_validation():
    a = np.zeros(2, np.uint8)
    with pytest.raises(ValueError, match="one dtype"):
        ort_qlmul(a, 1.0, 0, a, 1.0, 0, 1.0, 0, np.empty(2, np.int8))
    with pytest.raises(ValueError, match="b_zp"):
        ort_qlmul(a, 1.0, 0, a, 1.0, -1, 1.0, 0, np.empty(2, np.uint8))
