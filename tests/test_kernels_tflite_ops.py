"""The elementwise, pooling and LUT kernels of the tflite arithmetic == their golden twins (tests/naive_tflite.py)."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.tflite_add import tfl_add
from kernels.tflite_lut8 import build_lut8, lut8_lookup
from kernels.tflite_mul import tfl_mul
from kernels.tflite_pool import tfl_avgpool, tfl_mean
from kernels.tflite_rescale import tfl_rescale
from tests import naive_tflite as nt

DTYPES = st.sampled_from([np.int8, np.int16])
MULT = st.sampled_from([0, 2 ** 30, 2 ** 31 - 1]) | st.integers(2 ** 30, 2 ** 31 - 1)
# the kernels' shift range [-31, 30]: the usual right shifts and small left shifts in about half the draws, the rest
# anywhere in it (large left shifts wrap the int32 product, as TFLite's does) or at its ends
SHIFT = st.integers(-31, 3) | st.integers(-31, 30) | st.sampled_from([-31, 30])


def _ints(rng, dtype, n, extreme=False):
    """n values uniform over the dtype; with extreme, a third of them at the dtype's ends and a third within 3 of
    them (operands and sums that saturate)."""
    info = np.iinfo(dtype)
    v = rng.integers(info.min, info.max + 1, size=n)
    if extreme:
        kind = rng.integers(0, 6, size=n)
        near = rng.integers(0, 4, size=n)
        v = np.select([kind == 0, kind == 1, kind == 2, kind == 3],
                      [info.min, info.max, info.min + near, info.max - near], v)
    return v.astype(dtype)


@settings(deadline=None, max_examples=examples(80))
@given(st.integers(0, 2 ** 32 - 1), DTYPES, MULT, SHIFT, st.integers(-128, 127), st.integers(-128, 127), st.booleans())
def test_rescale(seed, dtype, m, s, zi, zo, extreme):
    x = _ints(np.random.default_rng(seed), dtype, 40, extreme)
    info = np.iinfo(dtype)
    got = tfl_rescale(x, zi, m, s, zo, info.min, info.max, dtype)
    assert got.tolist() == nt.rescale(x, zi, m, s, zo, info.min, info.max)


@settings(deadline=None, max_examples=examples(80))
@given(st.integers(0, 2 ** 32 - 1), DTYPES, MULT, st.integers(-31, 0), MULT, st.integers(-31, 0), MULT,
       st.integers(-31, 0), st.booleans(), st.integers(-128, 127), st.integers(-128, 127), st.integers(-128, 127),
       st.booleans())
def test_add(seed, dtype, m1, s1, m2, s2, mo, so, sub, z1, z2, zo, extreme):
    rng = np.random.default_rng(seed)
    a, b = _ints(rng, dtype, 30, extreme), _ints(rng, dtype, 30, extreme)
    ls = 20 if dtype == np.int8 else 15
    info = np.iinfo(dtype)
    got = tfl_add(a, b, z1, z2, m1, s1, m2, s2, mo, so, ls, sub, zo, info.min, info.max, dtype)
    assert got.tolist() == nt.add(a, b, z1, z2, m1, s1, m2, s2, mo, so, ls, sub, zo, info.min, info.max)


@settings(deadline=None, max_examples=examples(80))
@given(st.integers(0, 2 ** 32 - 1), DTYPES, MULT, SHIFT, st.integers(-128, 127), st.integers(-128, 127),
       st.integers(-128, 127), st.booleans())
def test_mul(seed, dtype, m, s, z1, z2, zo, extreme):
    rng = np.random.default_rng(seed)
    a, b = _ints(rng, dtype, 30, extreme), _ints(rng, dtype, 30, extreme)
    info = np.iinfo(dtype)
    got = tfl_mul(a, b, z1, z2, m, s, zo, info.min, info.max, dtype)
    assert got.tolist() == nt.mul(a, b, z1, z2, m, s, zo, info.min, info.max)


@settings(deadline=None, max_examples=examples(60))
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([np.int8, np.int16, np.uint8]), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 2), st.integers(0, 1), st.integers(0, 1), st.booleans())
def test_avgpool(seed, dtype, kh, kw, stride, pt, pl, extreme):
    x = _ints(np.random.default_rng(seed), dtype, 2 * 5 * 6, extreme).reshape(1, 2, 5, 6)
    pads = (min(pt, kh - 1), min(pl, kw - 1), min(pt, kh - 1), min(pl, kw - 1))
    info = np.iinfo(dtype)
    got = tfl_avgpool(x, (kh, kw), (stride, stride), pads, info.min, info.max)
    np.testing.assert_array_equal(got, nt.avgpool(x, (kh, kw), (stride, stride), pads, info.min, info.max))


@settings(deadline=None, max_examples=examples(60))
@given(st.integers(0, 2 ** 32 - 1), DTYPES, st.integers(1, 70), MULT, st.integers(-8, 2), st.integers(-128, 127),
       st.integers(-128, 127), st.booleans())
def test_mean(seed, dtype, n, m, s, zi, zo, extreme):
    rows = _ints(np.random.default_rng(seed), dtype, 3 * n, extreme).reshape(3, n)
    info = np.iinfo(dtype)
    got = tfl_mean(rows, zi, m, s, zo, info.min, info.max, dtype)
    assert got.tolist() == nt.mean(rows, zi, m, s, zo, info.min, info.max)


@settings(deadline=None, max_examples=examples(40))
@given(st.sampled_from(["Sigmoid", "Tanh"]), st.floats(1e-3, 0.2), st.integers(-128, 127), st.integers(0, 2 ** 32 - 1))
def test_lut8(fn, s_in, zp_in, seed):
    s_out, zp_out = (1 / 256, -128) if fn == "Sigmoid" else (1 / 128, 0)
    table = build_lut8(fn, s_in, zp_in, s_out, zp_out)
    np.testing.assert_array_equal(table, nt.lut8(fn, s_in, zp_in, s_out, zp_out, -128, 127))
    x = _ints(np.random.default_rng(seed), np.int8, 50)
    assert lut8_lookup(x, table).tolist() == [int(table[int(v) & 0xFF]) for v in x]


@pytest.mark.parametrize("s_in", [0.5, 0.7, 1.0, 1e3, 1e30])
def test_lut8_sigmoid_past_float32_exp(s_in):
    """Inputs whose exp(-x) passes float32's range (x < -88.7) or float64's (x < -709): the table holds 0 there
    (1 / (1 + inf)), as TFLite's float32 table does, with no overflow error or warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = build_lut8("Sigmoid", s_in, 0, 1 / 256, -128)
        np.testing.assert_array_equal(table, nt.lut8("Sigmoid", s_in, 0, 1 / 256, -128, -128, 127))
    assert table[128] == -128 and table[127] == 127  # v = -128 (index 0x80): sigmoid 0; v = 127: 1, clamped
