"""ort_qladd (onnxruntime's QLinearAdd) and its float32 primitives == golden twins, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.ort_qladd import cvt_ps2dq, fma_f32, ort_qladd
from tests import naive_ort as N


@st.composite
def qladd_case(draw):
    dtype = draw(st.sampled_from(N.DTYPES_8))
    n = draw(st.integers(1, 40))
    a = draw(N.int8_arrays(n, dtype))
    b = draw(N.int8_arrays(n, dtype))
    sa, sb, sc = draw(N.related_scales(3))
    return a, sa, draw(N.zero_point(dtype)), b, sb, draw(N.zero_point(dtype)), sc, draw(N.zero_point(dtype)), dtype


@settings(deadline=None, max_examples=examples(300))
@given(qladd_case())
def test_ort_qladd_matches_twin(case):
    *args, dtype = case
    expected = N.qladd(*args, dtype)
    out = np.empty(args[0].shape, dtype=dtype)
    ort_qladd(*args, out)
    np.testing.assert_array_equal(out, expected)


@st.composite
def f32_values(draw):
    """float32 values over a wide exponent range, both signs, sometimes small integers."""
    if draw(st.booleans()):
        return np.float32(draw(st.integers(-255, 255)))
    mant = draw(st.integers(2 ** 23, 2 ** 24 - 1))
    return np.float32(draw(st.sampled_from([1, -1])) * mant * 2.0 ** draw(st.integers(-60, 30)))


@settings(deadline=None, max_examples=examples(1000))
@given(f32_values(), f32_values(), f32_values())
def test_fma_f32_is_correctly_rounded(x, y, z):
    assert np.float32(fma_f32(float(x), float(y), float(z))) == N.fma(x, y, z)


def test_fma_f32_double_rounding_traps():
    # x*y + z lands within 2**-60 of a float32 halfway point: a float64 sum rounded twice would be wrong.
    half = 2.0 ** -24  # half an ulp of 1.0 in float32
    for z, x, y in [(1.0, half, 1.0 + 2.0 ** -23), (1.0, half, 1.0 - 2.0 ** -24), (1.0, -half, 1.0 + 2.0 ** -23),
                    (-1.0, half, 1.0 + 2.0 ** -23), (2.0 ** 20, 2.0 ** -4, 1.0 + 2.0 ** -23)]:
        x, y, z = np.float32(x), np.float32(y), np.float32(z)
        assert np.float32(fma_f32(float(x), float(y), float(z))) == N.fma(x, y, z), (x, y, z)


def test_cvt_ps2dq_rounding_and_indefinite():
    for u in [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.0 ** 31 - 128, -2.0 ** 31, 2.0 ** 31, -2.0 ** 32, np.inf,
              -np.inf, np.nan, 3.49999976]:
        assert cvt_ps2dq(float(np.float32(u))) == N.cvt_ps2dq(np.float32(u)), u


def test_zero_point_is_added_before_rounding():
    # (a - za) * sa / sc = 0.5 exactly. ONNX: rint(0.5) + 125 = 125. onnxruntime: rint(125.5) = 126.
    a = np.array([1, 3], np.uint8)
    b = np.array([0, 0], np.uint8)
    out = np.empty(2, np.uint8)
    ort_qladd(a, 0.5, 0, b, 0.25, 0, 1.0, 125, out)
    assert out.tolist() == [126, 126]  # 125.5 -> 126, 126.5 -> 126
    np.testing.assert_array_equal(out, N.qladd(a, 0.5, 0, b, 0.25, 0, 1.0, 125, np.uint8))


def test_huge_ratio_gives_integer_indefinite():
    # a * 2**24 >= 2**31: cvtps2dq returns -2**31, which saturates to the *minimum* (not the maximum).
    a = np.array([255, 128, 127, 1], np.uint8)  # 128 * 2**24 = 2**31 is already out of range
    b = np.zeros(4, np.uint8)
    out = np.empty(4, np.uint8)
    ort_qladd(a, 2.0 ** 12, 0, b, 1.0, 0, 2.0 ** -12, 0, out)
    assert out.tolist() == [0, 0, 255, 255]
    np.testing.assert_array_equal(out, N.qladd(a, 2.0 ** 12, 0, b, 1.0, 0, 2.0 ** -12, 0, np.uint8))


def test_ort_qladd_validation():
    a = np.zeros(3, np.int8)
    out = np.empty(3, np.int8)
    with pytest.raises(ValueError, match="one dtype"):
        ort_qladd(a, 1.0, 0, np.zeros(3, np.uint8), 1.0, 0, 1.0, 0, out)
    with pytest.raises(ValueError, match="one length"):
        ort_qladd(a, 1.0, 0, np.zeros(4, np.int8), 1.0, 0, 1.0, 0, out)
    with pytest.raises(ValueError, match="positive finite"):
        ort_qladd(a, 0.0, 0, a, 1.0, 0, 1.0, 0, out)
    with pytest.raises(ValueError, match="out_zp"):
        ort_qladd(a, 1.0, 0, a, 1.0, 0, 1.0, 200, out)
    with pytest.raises(ValueError, match="dtype"):
        ort_qladd(np.zeros(3, np.int16), 1.0, 0, np.zeros(3, np.int16), 1.0, 0, 1.0, 0, np.empty(3, np.int16))
