"""LEAKY_RELU / PRELU / ABS (``kernels/tflite_slope.py``), MAXIMUM / MINIMUM (``kernels/tflite_maxmin.py``) and the
int16 EXP table (``kernels/tflite_lut16.py``) ==
their golden twins (tests/naive_tflite.py), bit for bit, with saturated inputs and extreme scales; the lowering's
factors are TFLite's Prepare's (float32 products and quotients). (LiteRT is the oracle of the twins' formulas: the
leaky/prelu/maxmin fixtures, tests/test_tflite_frontend.py.)"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.tflite_fixedpoint import tfl_quantize_multiplier
from kernels.tflite_lut16 import lut16_apply, populate_lut16
from kernels.tflite_lut8 import build_lut8
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


@settings(deadline=None, max_examples=examples(150))
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


@settings(deadline=None, max_examples=examples(150))
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


@settings(deadline=None, max_examples=examples(100))
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


@settings(deadline=None, max_examples=examples(150))
@given(st.integers(0, 2 ** 32 - 1), DTYPES, st.floats(1e-6, 1e3), st.floats(1e-6, 1e3), st.integers(-128, 127),
       st.integers(-128, 127), st.booleans(), st.booleans())
def test_abs_is_the_slope_kernel_with_alpha_minus_one(seed, dtype, s_in, s_out, zi, zo, same_scale, extreme):
    if same_scale:
        s_out = s_in  # TFLite copies |x - zp| without rescale; the factor 1 is exact
    m, s = _factor(float(np.float32(np.float32(s_in) / np.float32(s_out))))
    if dtype == np.int16:
        zi = zo = 0
    x = _ints(np.random.default_rng(seed), dtype, 97, extreme)
    info = np.iinfo(dtype)
    got = tfl_slope(x, np.full(1, -1, np.int64), zi, 0, m, s, m, s, zo, info.min, info.max, dtype)
    assert got.tolist() == nt.abs_(x, zi, m, s, zo, info.min, info.max, rescale=not same_scale)


@settings(deadline=None, max_examples=examples(25))
@given(st.floats(1e-6, 2.7e-3), st.floats(1e-6, 1e-1))  # exp(s_in * 32767) within float32 or just past
def test_exp16_table_and_lookup(s_in, s_out):
    exp32 = lambda v: np.float32(math.exp(float(v)))  # noqa: E731
    try:
        table = populate_lut16(exp32, s_in, 0, s_out, 0, np.float32)
    except ValueError:  # the top entries overflow float32 (the lowering refuses these scales)
        f = np.float32
        with np.errstate(over="ignore"):
            inv = f(65536) / (f(s_out) * f(32767) - f(s_out) * f(-32768))
            assert not np.isfinite(exp32(f(s_in) * f(32767)) * inv)
        return
    assert table.tolist() == nt.lut16_float32(exp32, s_in, s_out)
    x = np.arange(-32768, 32768, 61, dtype=np.int16)
    assert lut16_apply(x, table).tolist() == [nt.lut16(int(v), table.tolist()) for v in x]


def test_exp8_table_saturates():
    # exp of the largest inputs passes the output range: the table's top entries are the output's qmax
    table = build_lut8("Exp", 0.1, 0, 0.05, -128)
    assert table[127] == 127 and table[-128 & 0xFF] == -128
