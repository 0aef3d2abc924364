"""softmax_lut8 / softmax_lut16 == golden twins (tests/naive_norm.py), bit for bit; accuracy against float softmax;
saturation, extreme scales, validation."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.fixedpoint import quantize_multiplier
from kernels.softmax import recip_q30, softmax_lut8, softmax_lut16
from npu_sim.ops.softmax import exp2_table, exp_position, exp_table_8, recip_table
from tests import naive, naive_norm

RANGES_8 = [(np.int8, -128, 127), (np.uint8, 0, 255), (np.int8, -8, 7), (np.uint8, 0, 15)]
RANGES_16 = [(np.int16, -32768, 32767), (np.uint16, 0, 65535)]


@st.composite
def rows(draw, ranges):
    """Short rows, or rows of up to 300 (a sum of up to 300 * 2**30: the reciprocal's shift h up to 38)."""
    dtype, lo, hi = draw(st.sampled_from(ranges))
    shape = (draw(st.integers(1, 3)), draw(st.one_of(st.integers(1, 24), st.integers(25, 300))))
    return draw(naive.int_arrays(shape, dtype, lo, hi))


@st.composite
def recip_luts(draw):
    k = draw(st.integers(1, 12))
    table = recip_table(k)
    if draw(st.integers(0, 4)) == 0:  # any valid (non-increasing, in range) table: the kernel must still agree
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        table = np.sort(rng.integers(2 ** 29, 2 ** 30, size=table.size, endpoint=True))[::-1].copy()
    return table


@st.composite
def out_stage(draw):
    """The output factor 2**-31 / s_out of usual output scales, or any (M, r) the kernel accepts (|M| < 2**31,
    negative too: the Notes' mul_round_shift is signed; only the exponent's pos_mult must be >= 0)."""
    dtype, out_zp, qmin, qmax = draw(naive.out_params())
    kind = draw(st.sampled_from(["u8", "u16", "log", "any"]))
    if kind == "any":
        m, r = draw(naive.multipliers(allow_negative=True))
    else:
        s_out = {"u8": 1 / 255, "u16": 1 / 65535}.get(kind) or 2.0 ** draw(st.floats(-20, 4, allow_nan=False))
        m, r = quantize_multiplier(2.0 ** -31 / s_out)
    return m, r, out_zp, qmin, qmax, dtype


@st.composite
def lut8_case(draw):
    x = draw(rows(RANGES_8))
    scale = 2.0 ** draw(st.floats(-16, 4, allow_nan=False))
    exp_lut = exp_table_8(scale)
    if draw(st.integers(0, 4)) == 0:
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        exp_lut = rng.integers(0, 2 ** 30, size=256, endpoint=True)
        exp_lut[0] = 2 ** 30
    return (x, exp_lut, draw(recip_luts()), *draw(out_stage()))


@st.composite
def lut16_case(draw):
    x = draw(rows(RANGES_16 + RANGES_8))
    k = draw(st.integers(1, 12))
    scale = 2.0 ** draw(st.floats(-20, 2, allow_nan=False))
    pos_mult, pos_shift, frac = exp_position(scale, k)
    if draw(st.booleans()):
        frac = draw(st.integers(k, k + 30))
        pos_mult, pos_shift = quantize_multiplier(min(scale / math.log(2) * 2.0 ** frac, 2.0 ** 30))
    return (x, pos_mult, pos_shift, frac, exp2_table(k), draw(recip_luts()), *draw(out_stage()))


@settings(deadline=None, max_examples=examples(200))
@given(lut8_case())
def test_softmax_lut8_matches_twin(case):
    *args, dtype = case
    expected = naive_norm.softmax_lut8(*args, dtype)
    out = np.empty(args[0].shape, dtype)
    softmax_lut8(*args, out)
    np.testing.assert_array_equal(out, expected)
    # through a node's cache: the same input again, and its rows reversed (same shape), then fewer rows
    x = args[0]
    cache = {}
    for data in (x, np.ascontiguousarray(x[::-1]), np.ascontiguousarray(x[: max(1, x.shape[0] - 1)])):
        out = np.empty(data.shape, dtype)
        softmax_lut8(data, *args[1:], out, cache=cache)
        np.testing.assert_array_equal(out, naive_norm.softmax_lut8(data, *args[1:], dtype))


@settings(deadline=None, max_examples=examples(200))
@given(lut16_case())
def test_softmax_lut16_matches_twin(case):
    *args, dtype = case
    expected = naive_norm.softmax_lut16(*args, dtype)
    out = np.empty(args[0].shape, dtype)
    softmax_lut16(*args, out)
    np.testing.assert_array_equal(out, expected)


@settings(deadline=None, max_examples=examples(50))
@given(lut16_case(), st.integers(0, 2 ** 32 - 1))
def test_softmax_lut16_cache_is_reused_and_exact(case, seed):
    """The per-node cache (exp2_q30 of every distance, computed once) gives the twin's integers on a second,
    different input of the same dtype too, and on one of another shape (validated again)."""
    *args, dtype = case
    x = args[0]
    info = np.iinfo(x.dtype)
    x2 = np.random.default_rng(seed).integers(info.min, info.max, x.shape, endpoint=True).astype(x.dtype)
    cache = {}
    for data in (x, x2, np.ascontiguousarray(np.concatenate([x2, x]))):
        out = np.empty(data.shape, dtype)
        softmax_lut16(data, *args[1:], out, cache=cache)
        np.testing.assert_array_equal(out, naive_norm.softmax_lut16(data, *args[1:], dtype))
    assert cache["run"][0][0] == 2 ** 30  # the cached arguments: exp2_q30 of distance 0 first


@settings(deadline=None, max_examples=examples(200))
@given(st.integers(2 ** 30, 2 ** 62), st.integers(7, 12))
def test_reciprocal_accuracy(s, k):
    y, h = recip_q30(s, recip_table(k), k)
    assert y == naive_norm.recip_q30(s, recip_table(k))[0]
    # interpolation error <= (2**-K)**2 / 4, squared by the Newton step (< 2**-30 for K >= 7), plus the
    # truncated mantissa and three roundings of 2**-31 each: < 2**-27
    assert abs(y / 2 ** 30 * s / 2 ** h - 1) < 2 ** -27


def _float_softmax(x, scale):
    z = (x.astype(np.float64) - x.max(axis=1, keepdims=True)) * scale
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("bits,scale", [(8, 1 / 16), (8, 0.1), (8, 1.0), (8, 1e-4), (16, 1e-4), (16, 3e-3),
                                        (16, 0.05), (16, 1e-7)])
def test_softmax_accuracy_against_float(bits, scale):
    """Output within 0.5 LSB (+ a tiny table/reciprocal error) of the float softmax rounded to the output grid:
    8-bit outputs at 1/255, 16-bit outputs at 1/65535."""
    rng = np.random.default_rng(bits)
    if bits == 8:
        x = rng.integers(-128, 128, size=(64, 40)).astype(np.int8)
        s_out, dtype, lim = 1 / 255, np.uint8, 0.5 + 1e-4
        out = np.empty(x.shape, dtype)
        softmax_lut8(x, exp_table_8(scale), recip_table(9), *quantize_multiplier(2 ** -31 / s_out), 0, 0, 255, out)
    else:
        x = rng.integers(-32768, 32768, size=(64, 40)).astype(np.int16)
        s_out, dtype, lim = 1 / 65535, np.int16, 0.5 + 0.02
        out = np.empty(x.shape, dtype)
        softmax_lut16(x, *exp_position(scale, 9), exp2_table(9), recip_table(9),
                      *quantize_multiplier(2 ** -31 / s_out), -32768, -32768, 32767, out)
    zp = 0 if bits == 8 else -32768
    err = np.abs((out.astype(np.float64) - zp) - _float_softmax(x, scale) / s_out)
    assert err.max() <= lim, err.max()


def test_softmax_extremes_and_saturation():
    x = np.array([[5, 5, 5, 5], [127, -128, -128, -128], [0, 0, 0, 0]], np.int8)
    m, r = quantize_multiplier(2 ** -31 * 255)
    out = np.empty(x.shape, np.uint8)
    softmax_lut8(x, exp_table_8(1e-9), recip_table(9), m, r, 0, 0, 255, out)   # scale ~0: uniform
    assert out.tolist() == [[64, 64, 64, 64]] * 3
    softmax_lut8(x, exp_table_8(50.0), recip_table(9), m, r, 0, 0, 255, out)   # huge scale: one-hot on the max
    assert out[1].tolist() == [255, 0, 0, 0]
    one = np.array([[3]], np.int8)  # a single element: exactly 1.0
    o1 = np.empty((1, 1), np.uint8)
    softmax_lut8(one, exp_table_8(0.1), recip_table(9), m, r, 0, 0, 255, o1)
    assert o1[0, 0] == 255
    o2 = np.empty(x.shape, np.int8)  # saturation at a narrowed range (a fused clamp)
    softmax_lut8(x, exp_table_8(50.0), recip_table(9), m, r, -128, -100, 100, o2)
    assert o2[1].tolist() == [100, -100, -100, -100]
    x16 = np.array([[32767, -32768, 0]], np.int16)
    o3 = np.empty(x16.shape, np.int16)
    softmax_lut16(x16, *exp_position(100.0, 9), exp2_table(9), recip_table(9),
                  *quantize_multiplier(2 ** -31 * 65535), -32768, -32768, 32767, o3)
    assert o3.tolist() == [[32767, -32768, -32768]]


def test_softmax_validation():
    x = np.zeros((2, 3), np.int8)
    out = np.empty((2, 3), np.uint8)
    m, r = quantize_multiplier(2 ** -31 * 255)
    good = exp_table_8(0.1)
    with pytest.raises(ValueError, match="exp_lut\\[0\\]"):
        bad = good.copy()
        bad[0] -= 1
        softmax_lut8(x, bad, recip_table(9), m, r, 0, 0, 255, out)
    with pytest.raises(ValueError, match="2\\*\\*K \\+ 1"):
        softmax_lut8(x, good, recip_table(9)[:-1], m, r, 0, 0, 255, out)
    with pytest.raises(ValueError, match="non-increasing"):
        softmax_lut8(x, good, recip_table(9)[::-1].copy(), m, r, 0, 0, 255, out)
    with pytest.raises(ValueError, match="span"):
        softmax_lut8(np.array([[-128, 127]], np.int8), good[:100], recip_table(9), m, r, 0, 0, 255,
                     np.empty((1, 2), np.uint8))
    with pytest.raises(ValueError, match="dtype"):
        softmax_lut8(x.astype(np.int16), good, recip_table(9), m, r, 0, 0, 255, out)
    with pytest.raises(ValueError, match="frac_bits"):
        softmax_lut16(x.astype(np.int16), 1, 1, 3, exp2_table(9), recip_table(9), m, r, 0, 0, 255, out)
    with pytest.raises(ValueError, match="exp2_lut"):
        softmax_lut16(x.astype(np.int16), 1, 1, 12, exp_table_8(0.1)[:257], recip_table(9), m, r, 0, 0, 255, out)
    with pytest.raises(ValueError, match="empty"):
        softmax_lut8(np.zeros((2, 0), np.int8), good, recip_table(9), m, r, 0, 0, 255, np.empty((2, 0), np.uint8))
