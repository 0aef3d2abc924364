"""ort_qlgavgpool (onnxruntime's QLinearGlobalAveragePool) == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.ort_qladd import fma_f32
from kernels.ort_qlgavgpool import ort_qlgavgpool
from tests import naive_ort as N


@st.composite
def gap_case(draw):
    dtype = draw(st.sampled_from(N.DTYPES_8))
    rows = draw(st.integers(1, 6))
    n = draw(st.sampled_from([1, 2, 3, 4, 7, 9, 16, 49, 64, 196, 225, 1000]))
    x = draw(N.int8_arrays(rows * n, dtype)).reshape(rows, n)
    sx, sy = draw(N.related_scales(2))
    return x, sx, draw(N.zero_point(dtype)), sy, draw(N.zero_point(dtype)), dtype


@settings(deadline=None, max_examples=examples(300))
@given(gap_case())
def test_ort_qlgavgpool_matches_twin(case):
    *args, dtype = case
    out = np.empty(args[0].shape[0], dtype=dtype)
    try:
        expected = N.qlgavgpool(*args, dtype)
    except ValueError:  # onnxruntime throws: the kernel must refuse too
        with pytest.raises(ValueError):
            ort_qlgavgpool(*args, out)
        return
    ort_qlgavgpool(*args, out)
    np.testing.assert_array_equal(out, expected)


WRAP_N = 8421505  # 255 * n = 2**31 + 127: the largest |x - x_zp| summed over n cells passes int32


@pytest.mark.parametrize("dtype,x_edge,x_zp", [(np.uint8, 255, 0), (np.int8, -128, 127)])
def test_int32_sum_wraps_like_onnxruntime(dtype, x_edge, x_zp):
    """Rows of n = WRAP_N cells whose sum minus the zero point is +-(2**31 + 127), then exactly at the int32 limit
    (2**31 - 1 or -2**31: cells moved one step toward the zero point) and one past it: MLAS's int32 lanes wrap, so
    the mean flips sign -- kernel == twin, and only the row at the limit saturates toward its true sign."""
    info = np.iinfo(dtype)
    toward_zp = 1 if x_edge < x_zp else -1
    at_limit = 128 if toward_zp < 0 else 127  # 255 * n - 128 = 2**31 - 1; -(255 * n) + 127 = -2**31
    x = np.full((3, WRAP_N), x_edge, dtype)
    x[1, :at_limit] = x_edge + toward_zp
    x[2, :at_limit - 1] = x_edge + toward_zp
    out = np.empty(3, dtype)
    ort_qlgavgpool(x, 1.0, x_zp, 1.0, 0, out)  # factor 1 / n: the mean, far past either clamp
    np.testing.assert_array_equal(out, N.qlgavgpool(x, 1.0, x_zp, 1.0, 0, dtype))
    true_end, wrapped_end = (info.max, info.min) if toward_zp < 0 else (info.min, info.max)
    assert out.tolist() == [wrapped_end, true_end, wrapped_end]


def test_tie_rounds_to_even_offset():
    # mean (x - zx) * sx / sy = 2.5: MlasRequantizeOutput adds the zero point after rounding -> 2 + 7 = 9.
    x = np.array([[2, 3]], np.uint8)
    out = np.empty(1, np.uint8)
    ort_qlgavgpool(x, 2.0, 0, 2.0, 7, out)
    assert out.tolist() == [np.rint(2.5) + 7]
    np.testing.assert_array_equal(out, N.qlgavgpool(x, 2.0, 0, 2.0, 7, np.uint8))


def test_out_of_range_factor_refused():
    x = np.zeros((1, 4), np.int8)
    out = np.empty(1, np.int8)
    with pytest.raises(ValueError, match="range"):
        ort_qlgavgpool(x, 1024.0, 0, 1.0, 0, out)  # 1024 / 4 = 256
    with pytest.raises(ValueError, match="range"):
        ort_qlgavgpool(x, 2.0 ** -40, 0, 1.0, 0, out)
    with pytest.raises(ValueError, match="shape"):
        ort_qlgavgpool(x, 1.0, 0, 1.0, 0, np.empty(2, np.int8))


@pytest.mark.parametrize("sign", [1, -1])
def test_twin_round_f32_overflows_like_ieee(sign):
    """The twins' float32 rounding (naive_ort.round_f32, behind the QLinearAdd twin's fma) past FLT_MAX: FLT_MAX up
    to the midpoint between FLT_MAX and 2**128, infinity from it on (the tie goes to the even 2**128) -- as
    numpy's float32 cast of the exact float64 sum and the kernels' fma_f32 round."""
    top = float(np.finfo(np.float32).max)  # 2**128 - 2**104
    for z, want in ((2.0 ** 103 - 2.0 ** 79, top), (2.0 ** 103, np.inf), (2.0 ** 104, np.inf), (top, np.inf)):
        x, z = sign * top, sign * z
        got = N.fma(np.float32(x), np.float32(1.0), np.float32(z))  # x + z is exact in float64
        with np.errstate(over="ignore"):
            assert got == np.float32(x + z) == np.float32(fma_f32(x, 1.0, z)) == sign * want
