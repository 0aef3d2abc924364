"""kernels/tflite_fixedpoint.py and kernels/tflite_requantize.py == their golden twins (tests/naive_tflite.py)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.tflite_fixedpoint import tfl_quantize_multiplier
from kernels.tflite_requantize import tfl_requantize
from tests import naive_tflite as nt


def test_documented_example():
    m, s = tfl_quantize_multiplier(0.0123456)
    assert (m, s) == (1696766344, -6)
    acc = np.array([[[-99995]]], np.int64)
    z = np.zeros(1, np.int64)
    y = tfl_requantize(acc, z, np.array([m], np.int64), np.array([s], np.int64), False, 0, -2 ** 15, 2 ** 15 - 1,
                       out=np.empty((1, 1, 1), np.int16))
    assert int(y[0, 0, 0]) == -1235  # double rounding (the exact value is -1234.498)


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
       | st.floats(min_value=0, max_value=1e-8))
def test_quantize_multiplier(d):
    assert tfl_quantize_multiplier(d) == nt.quantize_multiplier(d)


@st.composite
def case(draw):
    wide = draw(st.booleans())
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 5)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    lim = 2 ** 46 if wide else 2 ** 31
    kind = draw(st.sampled_from(["full", "small", "edge"]))
    if kind == "full":
        acc = rng.integers(-lim, lim, size=shape, dtype=np.int64)
    elif kind == "small":
        acc = rng.integers(-5000, 5000, size=shape, dtype=np.int64)
    else:
        acc = rng.choice(np.array([0, 1, -1, 2 ** 31 - 1, -2 ** 31, 2 ** 30, -2 ** 30 - 1], np.int64), size=shape)
    c = shape[1]
    bias = rng.integers(-2 ** 20, 2 ** 20, size=c, dtype=np.int64) if draw(st.booleans()) else np.zeros(c, np.int64)
    mult = np.array([draw(st.sampled_from([0, 2 ** 30, 2 ** 31 - 1, 0x7FFF0000 - 1, 0x7FFF0000]) |
                          st.integers(2 ** 30, 2 ** 31 - 1)) for _ in range(c)], np.int64)
    # the kernel's shift range, [-31, 7] wide and [-31, 30] not: small shifts in about half the non-wide draws
    shifts = st.integers(-31, 7) if wide else st.integers(-31, 4) | st.integers(-31, 30) | st.sampled_from([-31, 30])
    shift = np.array([draw(shifts) for _ in range(c)], np.int64)
    dtype = np.int16 if wide else draw(st.sampled_from([np.int8, np.int16]))
    info = np.iinfo(dtype)
    zp = 0 if wide else draw(st.integers(-20, 20))
    return acc, bias, mult, shift, wide, zp, int(info.min), int(info.max), dtype


@settings(deadline=None, max_examples=examples(200))
@given(case())
def test_requantize_matches_twin(cs):
    acc, bias, mult, shift, wide, zp, qmin, qmax, dtype = cs
    got = tfl_requantize(acc, bias, mult, shift, wide, zp, qmin, qmax, out=np.empty(acc.shape, dtype))
    want = nt.requantize(acc, bias, mult, shift, wide, zp, qmin, qmax, dtype)
    np.testing.assert_array_equal(got, want)
