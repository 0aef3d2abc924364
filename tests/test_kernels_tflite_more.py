"""LEAKY_RELU / PRELU (``kernels/tflite_slope.py``) and MAXIMUM / MINIMUM (``kernels/tflite_maxmin.py``) ==
their golden twins (tests/naive_tflite.py), bit for bit, with saturated inputs and extreme scales; the lowering's
factors are TFLite's Prepare's (float32 products and quotients). (LiteRT is the oracle of the twins' formulas: the
leaky/prelu/maxmin fixtures, tests/test_tflite_frontend.py.)"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.tflite_fixedpoint import tfl_quantize_multiplier
from kernels.tflite_maxmin import tfl_maxmin
from kernels.tflite_slope import tfl_slope
from tests import naive_tflite as nt

DTYPES = st.sampled_from([np.int8, np.int16])


def _ints(rng, dtype, n, extreme):
    info = np.iinfo(dtype)
    v = rng.integers(info.min, info.max + 1, size=n)
    if extreme:  # saturated inputs: the type's ends
        v[rng.random(n) < 0.3] = info.min
        v[rng.random(n) < 0.3] = info.max
    return v.astype(dtype)


def _factor(real):
    m, s = tfl_quantize_multiplier(real)
    return (m, s) if s <= 30 else (0, 0)  # beyond TFLite's left shift the lowering refuses the scales


@settings(deadline=None, max_examples=150)
@given(st.integers(0, 2 ** 32 - 1), DTYPES, st.floats(1e-6, 1e3), st.floats(1e-6, 1e3), st.floats(0.0, 4.0),
       st.integers(-128, 127), st.integers(-128, 127), st.booleans())
def test_leaky_relu(seed, dtype, s_in, s_out, alpha, zi, zo, extreme):
    f32 = np.float32
    m1, s1 = _factor(float(f32(f32(s_in) / f32(s_out))))
    m2, s2 = _factor(float(f32(f32(f32(s_in) * f32(alpha)) / f32(s_out))))
    if dtype == np.int16:
        zi = zo = 0  # TFLite's 16-bit activations are symmetric
    x = _ints(np.random.default_rng(seed), dtype, 97, extreme)
    info = np.iinfo(dtype)
    got = tfl_slope(x, np.ones(1, np.int64), zi, 0, m1, s1, m2, s2, zo, info.min, info.max, dtype)
    assert got.dtype == dtype
    assert got.tolist() == nt.slope(x, [1] * x.size, zi, 0, m1, s1, m2, s2, zo, info.min, info.max)


@settings(deadline=None, max_examples=150)
@given(st.integers(0, 2 ** 32 - 1), st.floats(1e-6, 1e3), st.floats(1e-6, 1e3), st.floats(1e-5, 1.0),
       st.integers(-128, 127), st.integers(-128, 127), st.integers(-128, 127), st.booleans(),
       st.integers(-128, 0), st.integers(0, 127))
def test_prelu_broadcasts_its_alpha_per_channel(seed, s_in, s_out, s_a, zi, zo, za, extreme, lo, hi):
    f32 = np.float32
    m1, s1 = _factor(float(f32(f32(s_in) / f32(s_out))))
    m2, s2 = _factor(float(f32(f32(f32(s_in) * f32(s_a)) / f32(s_out))))
    rng = np.random.default_rng(seed)
    x = _ints(rng, np.int8, 2 * 3 * 5, extreme).reshape(1, 2, 3, 5)
    alpha = _ints(rng, np.int8, 5, extreme).reshape(1, 1, 5)
    got = tfl_slope(x, alpha, zi, za, m1, s1, m2, s2, zo, lo, hi, np.int8)
    want = nt.slope(x, np.broadcast_to(alpha, x.shape), zi, za, m1, s1, m2, s2, zo, lo, hi)
    assert got.shape == x.shape and got.reshape(-1).tolist() == want


@settings(deadline=None, max_examples=100)
@given(st.integers(0, 2 ** 32 - 1), DTYPES, st.booleans(), st.booleans(), st.booleans())
def test_maximum_minimum(seed, dtype, maximum, scalar, extreme):
    rng = np.random.default_rng(seed)
    a = _ints(rng, dtype, 24, extreme).reshape(2, 3, 4)
    b = _ints(rng, dtype, 1 if scalar else 24, extreme).reshape(() if scalar else (2, 3, 4))
    info = np.iinfo(dtype)
    lo, hi = sorted(rng.integers(info.min, info.max + 1, size=2).tolist())
    got = tfl_maxmin(a, b, maximum, lo, hi, dtype)
    assert got.shape == a.shape and got.dtype == dtype
    assert got.reshape(-1).tolist() == nt.maxmin(a, np.broadcast_to(b, a.shape), maximum, lo, hi)


def test_the_extreme_factors_saturate_as_tflite_does():
    # a factor of 2**20 saturates every non-zero input; a tiny one flushes to the zero point
    x = np.array([-128, -1, 0, 1, 127], np.int8)
    m, s = tfl_quantize_multiplier(2.0 ** 20)
    big = tfl_slope(x, np.ones(1, np.int64), 0, 0, m, s, m, s, 0, -128, 127, np.int8)
    assert big.tolist() == [-128, -128, 0, 127, 127] == nt.slope(x, [1] * 5, 0, 0, m, s, m, s, 0, -128, 127)
    m, s = tfl_quantize_multiplier(1e-12)
    assert tfl_slope(x, np.ones(1, np.int64), 0, 0, m, s, m, s, 5, -128, 127, np.int8).tolist() == [5] * 5


def test_kernels_refuse_what_tflite_cannot_compute():
    x = np.zeros(3, np.int8)
    with pytest.raises(ValueError):
        tfl_slope(x.astype(np.float32), np.ones(1), 0, 0, 1 << 30, 0, 1 << 30, 0, 0, -128, 127, np.int8)
    with pytest.raises(ValueError):
        tfl_slope(x, np.ones(1), 0, 0, 1 << 31, 0, 1 << 30, 0, 0, -128, 127, np.int8)
    with pytest.raises(ValueError):
        tfl_maxmin(x.astype(np.float32), x, True, -128, 127, np.int8)
