"""Resize, HardSwish, int16 Logistic/Tanh and Softmax kernels of the tflite arithmetic, and the int16 softmax's
tables, == their golden twins (tests/naive_tflite.py), bit for bit, including saturated inputs and extreme scales.
(LiteRT itself is the oracle of the twins' formulas: tests/test_tflite_oracle.py and models/tflite_op_sweep.py.)"""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.tflite_fixedpoint import tfl_quantize_multiplier
from kernels.tflite_hardswish import reduce_multiplier16, tfl_hardswish
from kernels.tflite_resize import tfl_resize_bilinear, tfl_resize_nearest
from kernels.tflite_sigmoid16 import TABLE, TABLE_PLUS_ONE, input_rescale, tfl_sigmoid16
from kernels.tflite_softmax import (C48_17, CM32_17, EXP_BARREL, EXP_M1_8, ONE_THIRD, gen_lut16, softmax8_params,
                                    softmax16_params, softmax16_tables, tfl_softmax8, tfl_softmax16)
from tests import naive_tflite as nt

DTYPES = st.sampled_from([np.int8, np.int16])
TWIN_TABLES = nt.softmax16_tables()


def _ints(rng, dtype, n, extreme=False):
    info = np.iinfo(dtype)
    v = rng.integers(info.min, info.max + 1, size=n)
    if extreme:  # saturated inputs: the type's ends
        v[rng.random(n) < 0.3] = info.min
        v[rng.random(n) < 0.3] = info.max
    return v.astype(dtype)


@settings(deadline=None, max_examples=examples(60))
@given(st.integers(0, 2 ** 32 - 1), DTYPES, st.integers(1, 5), st.integers(1, 5), st.integers(1, 11),
       st.integers(1, 11), st.sampled_from([(False, False), (True, False), (False, True)]), st.booleans())
def test_resize(seed, dtype, h, w, ho, wo, flags, extreme):
    x = _ints(np.random.default_rng(seed), dtype, 2 * 3 * h * w, extreme).reshape(2, 3, h, w)
    ac, hp = flags
    np.testing.assert_array_equal(tfl_resize_bilinear(x, (ho, wo), ac, hp), nt.resize_bilinear(x, (ho, wo), ac, hp))
    np.testing.assert_array_equal(tfl_resize_nearest(x, (ho, wo), ac, hp), nt.resize_nearest(x, (ho, wo), ac, hp))


def _hardswish_params(s_in, s_out):
    f32 = np.float32
    hires = f32(f32(1 / 128) * f32(s_in))
    m_out, e_out = tfl_quantize_multiplier(float(f32(hires / f32(s_out))))
    m_relu, e_relu = tfl_quantize_multiplier(float(f32(hires / f32(f32(3) / f32(32768)))))
    return reduce_multiplier16(m_out), e_out, reduce_multiplier16(m_relu), e_relu


@settings(deadline=None, max_examples=examples(100))
@given(st.floats(1e-4, 2.0), st.floats(0.05, 40.0), st.integers(-128, 127), st.integers(-128, 127))
def test_hardswish(s_in, ratio, zi, zo):
    s_out = s_in / ratio  # output scale between ~s_in/40 and 20*s_in: exponents from about -15 up to +9
    m_out, e_out, m_relu, e_relu = _hardswish_params(s_in, s_out)
    if e_out > 0 or e_out < -15 or not -15 <= e_relu <= 15:
        return  # LiteRT refuses these at prepare time (e_out > 0); the lowering refuses the others
    x = np.arange(-128, 128, dtype=np.int8)
    got = tfl_hardswish(x, zi, zo, m_out, e_out, m_relu, e_relu)
    assert got.tolist() == nt.hardswish(x, zi, zo, m_out, e_out, m_relu, e_relu)


def test_hardswish_extreme_multipliers():
    x = np.arange(-128, 128, dtype=np.int8)
    for m_out, e_out, m_relu, e_relu in ((32767, 0, 32767, 15), (16384, -15, 16384, -15), (0, 0, 0, 0),
                                         (32767, -7, 32767, 7), (16384, 0, 32767, 1)):
        got = tfl_hardswish(x, -128, 127, m_out, e_out, m_relu, e_relu)
        assert got.tolist() == nt.hardswish(x, -128, 127, m_out, e_out, m_relu, e_relu)


def test_sigmoid_table():
    assert TABLE.tolist() == nt.sigmoid_table(TABLE_PLUS_ONE)
    assert TABLE[0] == 32768 and TABLE[255] == 65535 and np.all(np.diff(TABLE) >= 0)


@settings(deadline=None, max_examples=examples(80))
@given(st.sampled_from(["Sigmoid", "Tanh"]), st.floats(-23.0, 1.4), st.integers(0, 2 ** 32 - 1))
def test_sigmoid16(fn, log2_scale, seed):
    mult, ls = input_rescale(fn, 2.0 ** log2_scale)
    x = _ints(np.random.default_rng(seed), np.int16, 400, extreme=True)
    assert tfl_sigmoid16(x, fn, mult, ls).tolist() == nt.sigmoid16(x, fn, mult, ls, nt.sigmoid_table(TABLE_PLUS_ONE))


def test_sigmoid16_every_input_power_of_two_scales():
    x = np.arange(-32768, 32768, dtype=np.int16)
    table = nt.sigmoid_table(TABLE_PLUS_ONE)
    for fn, scale in (("Sigmoid", 2.0 ** -12), ("Tanh", 2.0 ** -12), ("Tanh", 2.0 ** -11), ("Sigmoid", 2.0 ** -9)):
        mult, ls = input_rescale(fn, scale)
        assert tfl_sigmoid16(x, fn, mult, ls).tolist() == nt.sigmoid16(x, fn, mult, ls, table)
    assert input_rescale("Sigmoid", 2.0 ** -12) == (3, 0) and input_rescale("Tanh", 2.0 ** -11) == (6, 0)


def test_softmax8_of_512_or_more_near_equal_entries_is_litert_on_x86():
    """EfficientNet-B0 (random weights: 1,000 almost equal logits): LiteRT's reference kernel gives 127 everywhere
    (its final shift is 32: undefined in C++, x86's shift); rows of fewer near-maximal entries stay exact."""
    m, ls, diff_min = softmax8_params(0.00382905)
    same = np.zeros((1, 1000), np.int8)
    assert set(tfl_softmax8(same, m, ls, diff_min)[0].tolist()) == {127} == set(nt.softmax8(same, m, ls, diff_min)[0])
    m, ls, diff_min = softmax8_params(0.1)  # entries 100 below the maximum count for exp(-10): nothing
    rows = np.full((2, 1000), -100, np.int8)
    rows[0, :600] = 0  # 600 at the maximum: the shift is 32 still
    rows[1, :300] = 0  # 300: the sum stays below 512, an ordinary row
    got = tfl_softmax8(rows, m, ls, diff_min)
    assert got.tolist() == nt.softmax8(rows, m, ls, diff_min)
    assert set(got[0, :600].tolist()) == {127}
    assert set(got[1, :300].tolist()) == {-127}  # 1/300 of 256 rounds to 1


@settings(deadline=None, max_examples=examples(80))
@given(st.integers(0, 2 ** 32 - 1), st.floats(-25.0, 6.0), st.integers(1, 40), st.booleans())
def test_softmax8(seed, log2_scale, depth, extreme):
    s_in = 2.0 ** log2_scale  # from 3e-8 (just above TFLite's limit) to 64 (the multiplier saturates)
    m, ls, diff_min = softmax8_params(s_in)
    rows = _ints(np.random.default_rng(seed), np.int8, 6 * depth, extreme).reshape(6, depth)
    assert tfl_softmax8(rows, m, ls, diff_min).tolist() == nt.softmax8(rows, m, ls, diff_min)


@settings(deadline=None, max_examples=examples(80))
@given(st.integers(0, 2 ** 32 - 1), st.floats(-25.0, 2.0), st.integers(1, 40), st.booleans())
def test_softmax16(seed, log2_scale, depth, extreme):
    """Kernel with the kernel's tables == twin with the twin's tables."""
    m, s = softmax16_params(2.0 ** log2_scale)
    rows = _ints(np.random.default_rng(seed), np.int16, 6 * depth, extreme).reshape(6, depth)
    assert tfl_softmax16(rows, m, s, *softmax16_tables()).tolist() == nt.softmax16(rows, m, s, *TWIN_TABLES)


def test_softmax16_tables():
    """The tables the int16 softmax runs with == TFLite's gen_lut restated (nt.int16_lut), entry by entry."""
    exp_lut, recip_lut = softmax16_tables()
    assert exp_lut.tolist() == TWIN_TABLES[0]
    assert recip_lut.tolist() == TWIN_TABLES[1]


def _sigmoid(v):
    return 1 / (1 + math.exp(-v))


@settings(deadline=None, max_examples=examples(25))
@given(st.sampled_from([math.exp, math.tanh, _sigmoid]), st.floats(-12.0, 4.0), st.floats(2.0 ** -6, 16.0),
       st.floats(-2.0, 0.0, exclude_max=True), st.floats(0.25, 4.0))
def test_gen_lut16(fn, in_min, in_width, out_min, out_width):
    """gen_lut16 == nt.int16_lut for other functions and ranges, outputs saturating when out_width is narrow."""
    args = (fn, in_min, in_min + in_width, out_min, out_min + out_width)
    assert gen_lut16(*args).tolist() == nt.int16_lut(*args)


def test_softmax_constants_and_tables():
    # the gemmlowp constants, derived from their real values, are the published ones
    assert (EXP_M1_8, ONE_THIRD, C48_17, CM32_17) == (1895147668, 715827883, 1515870810, -1010580540)
    assert EXP_BARREL.tolist() == [1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242]
    exp_lut, recip_lut = softmax16_tables()
    assert exp_lut[512] == 32767 and recip_lut[0] == 32767 and recip_lut[512] == 16384
    assert np.all(np.diff(exp_lut.astype(int)) >= 0) and np.all(np.diff(recip_lut.astype(int)) <= 0)
