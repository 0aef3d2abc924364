"""maxpool2d / avgpool2d == golden twins, bit for bit."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.fixedpoint import quantize_multiplier
from kernels.pool2d import _bind_maxpool, avgpool2d, maxpool2d
from tests import naive

POOL_RANGES = naive.VALUE_RANGES + [(np.int32, -2 ** 31, 2 ** 31 - 1)]
ZP_LIMIT = 2 ** 32 - 1  # avgpool2d accepts zero points with |zp| < 2**32


def _out_len(size, lo, hi, k, s, d, ceil):
    span = size + lo + hi - d * (k - 1) - 1
    return (-(-span // s) if ceil else span // s) + 1


@st.composite
def pool_geometry(draw, dilated=True):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilated else (1, 1)
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    top, left, bottom, right = pads
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - top - bottom), 7))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - left - right), 7))
    ceil = draw(st.booleans())
    ho = _out_len(h, top, bottom, kh, sh, dh, ceil)
    wo = _out_len(w, left, right, kw, sw, dw, ceil)
    return h, w, (kh, kw), (sh, sw), pads, (dh, dw), (ho, wo)


@st.composite
def maxpool_case(draw):
    h, w, kernel, stride, pads, dilation, out_hw = draw(pool_geometry())
    assume(naive.maxpool_window_ok(h, w, kernel, stride, pads, dilation, out_hw))
    xd, lo, hi = draw(naive.value_ranges(POOL_RANGES))
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w), xd, lo, hi))
    return x, kernel, stride, pads, dilation, out_hw


@settings(deadline=None, max_examples=examples(120))
@given(maxpool_case())
def test_maxpool2d_matches_twin(case):
    expected = naive.maxpool2d(*case)
    out = maxpool2d(*case)
    assert out.dtype == expected.dtype == case[0].dtype
    np.testing.assert_array_equal(out, expected)


@st.composite
def large_maxpool_case(draw):
    """Windows of 3..13 cells a side (YOLOX's SPP: 5, 9, 13 at stride 1, same padding), strides 1-2, dilation 1-2,
    paddings up to k-1 a side, every input dtype: the sizes where the separable kernel is chosen."""
    kh, kw = draw(st.integers(3, 13)), draw(st.integers(3, 13))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    if draw(st.booleans()):
        pads = (kh // 2, kw // 2, (kh - 1) // 2, (kw - 1) // 2)
    else:
        pads = (draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)), draw(st.integers(0, kh - 1)),
                draw(st.integers(0, kw - 1)))
    top, left, bottom, right = pads
    h_min, w_min = max(1, dh * (kh - 1) + 1 - top - bottom), max(1, dw * (kw - 1) + 1 - left - right)
    h, w = draw(st.integers(h_min, max(h_min, 16))), draw(st.integers(w_min, max(w_min, 16)))
    ceil = draw(st.booleans())
    out_hw = _out_len(h, top, bottom, kh, sh, dh, ceil), _out_len(w, left, right, kw, sw, dw, ceil)
    assume(naive.maxpool_window_ok(h, w, (kh, kw), (sh, sw), pads, (dh, dw), out_hw))
    xd, lo, hi = draw(naive.value_ranges(POOL_RANGES))
    x = draw(naive.int_arrays((1, draw(st.integers(1, 3)), h, w), xd, lo, hi))
    return x, (kh, kw), (sh, sw), pads, (dh, dw), out_hw


@settings(deadline=None, max_examples=examples(160))
@given(large_maxpool_case())
def test_large_maxpool2d_both_kernels_match_twin(case):
    """The kernel maxpool2d picks, and each of the two (direct and separable) forced, equal the twin."""
    expected = naive.maxpool2d(*case)
    np.testing.assert_array_equal(maxpool2d(*case), expected)
    for separable in (False, True):
        out = _bind_maxpool(*case, separable=separable)(case[0])
        assert out.dtype == case[0].dtype
        np.testing.assert_array_equal(out, expected)


@st.composite
def avgpool_case(draw):
    """Every input dtype the kernel takes (int32 too: window sums past 2**31, the wide mul_round_shift); the input
    zero point inside the data's range or anywhere up to the kernel's limit |zp| < 2**32, the output's too in a
    quarter of the draws."""
    h, w, kernel, stride, pads, _, out_hw = draw(pool_geometry(dilated=False))
    xd, lo, hi = draw(naive.value_ranges(POOL_RANGES))
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w), xd, lo, hi))
    wide_zp = st.one_of(st.sampled_from([-ZP_LIMIT, ZP_LIMIT]), st.integers(-ZP_LIMIT, ZP_LIMIT))
    x_zp = draw(st.one_of(naive.zero_points(lo, hi), wide_zp))
    n_tab = kernel[0] * kernel[1] + 1
    if draw(st.booleans()):
        # the usual table: ratio / n for every divisor n
        ratio = 2.0 ** draw(st.floats(-12.0, 6.0))
        pairs = [(0, 0)] + [quantize_multiplier(ratio / n) for n in range(1, n_tab)]
        mult = np.array([p[0] for p in pairs], np.int64)
        shift = np.array([p[1] for p in pairs], np.int64)
    else:
        mult, shift = draw(naive.multiplier_arrays(n_tab))
    dtype, out_zp, qmin, qmax = draw(naive.out_params(naive.out_ranges_like(x.dtype)))
    if draw(st.integers(0, 3)) == 0:
        out_zp = draw(wide_zp)
    out_shape = (x.shape[0], x.shape[1]) + out_hw
    return x, x_zp, kernel, stride, pads, draw(st.booleans()), mult, shift, out_zp, qmin, qmax, out_shape, dtype


@settings(deadline=None, max_examples=examples(120))
@given(avgpool_case())
def test_avgpool2d_matches_twin(case):
    *args, out_shape, dtype = case
    expected = naive.avgpool2d(*args, out_shape, dtype)
    out = np.empty(out_shape, dtype=dtype)
    avgpool2d(*args, out)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def test_maxpool_padding_never_wins():
    x = np.full((1, 1, 2, 2), -128, np.int8)
    out = maxpool2d(x, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (2, 2))
    assert (out == -128).all() and out.dtype == np.int8
    x16 = np.full((1, 1, 2, 3), -32768, np.int16)
    out = maxpool2d(x16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 2))
    assert (out == -32768).all() and out.dtype == np.int16
    xu = np.array([[[[5, 7], [3, 65535]]]], np.uint16)
    out = maxpool2d(xu, (2, 2), (1, 1), (1, 1, 0, 0), (1, 1), (2, 2))
    assert out.ravel().tolist() == [5, 7, 5, 65535]


@pytest.mark.parametrize("separable", [False, True])
def test_maxpool_window_larger_than_input(separable):
    """A 13x13 window over a 1x1 input (pads 12 and 0): every cell but one is padding, the one cell wins; over a
    2x3 input at pads 6 each window holds 6 cells, the smallest values included."""
    x = np.array([[[[-128]]]], np.int8)
    for pads in ((12, 12, 0, 0), (0, 0, 12, 12), (6, 6, 6, 6)):
        out = _bind_maxpool(x, (13, 13), (1, 1), pads, (1, 1), (1, 1), separable=separable)(x)
        assert out.tolist() == [[[[-128]]]]
    x = np.array([[[[-32768, -32767, -32768], [-32768, -32768, -32768]]]], np.int16)
    out = _bind_maxpool(x, (13, 13), (1, 1), (6, 6, 6, 6), (1, 1), (2, 3), separable=separable)(x)
    np.testing.assert_array_equal(out, naive.maxpool2d(x, (13, 13), (1, 1), (6, 6, 6, 6), (1, 1), (2, 3)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32])
def test_maxpool_spp_13x13_same_padding(dtype):
    """YOLOX's SPP pools (5, 9, 13 at stride 1, pad k//2) on a 13x13 map: the separable kernel (chosen), the
    direct one and the twin agree; all-minimum and all-maximum inputs come out unchanged."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(13)
    x = rng.integers(info.min, info.max, size=(1, 4, 13, 13), dtype=dtype, endpoint=True)
    x[0, 1] = info.min
    x[0, 2] = info.max
    x[0, 3, ::2] = info.min
    for k in (5, 9, 13):
        geometry = (k, k), (1, 1), (k // 2,) * 4, (1, 1), (13, 13)
        expected = naive.maxpool2d(x, *geometry)
        np.testing.assert_array_equal(maxpool2d(x, *geometry), expected)
        for separable in (False, True):
            np.testing.assert_array_equal(_bind_maxpool(x, *geometry, separable=separable)(x), expected)
        assert (expected[0, 1] == info.min).all() and (expected[0, 2] == info.max).all()


def test_maxpool_all_padding_window_rejected():
    x = np.zeros((1, 1, 2, 2), np.int8)
    with pytest.raises(ValueError, match="padding"):
        maxpool2d(x, (2, 2), (2, 2), (2, 0, 0, 0), (1, 1), (2, 1))


def test_avgpool_count_include_pad_divisors():
    # 3x3 window, pad 1 on a 2x2 input of ones (x_zp 0): corner windows hold 4 in-bounds cells of 9
    x = np.ones((1, 1, 2, 2), np.int8)
    one = 1 << 30, 30
    mult = np.array([0] + [one[0]] * 9, np.int64)
    shift = np.array([0] + [one[1]] * 9, np.int64)
    # factor 1 for every n: the output is just the window sum
    out = np.empty((1, 1, 2, 2), np.int16)
    avgpool2d(x, 0, (3, 3), (1, 1), (1, 1, 1, 1), True, mult, shift, 0, -32768, 32767, out)
    assert (out == 4).all()
    # divisor tables that reveal n: mult[n] = n (shift 0)
    mult_n = np.arange(10, dtype=np.int64)
    zero = np.zeros(10, np.int64)
    for include, n in ((True, 9), (False, 4)):
        avgpool2d(x, 0, (3, 3), (1, 1), (1, 1, 1, 1), include, mult_n, zero, 0, -32768, 32767, out)
        assert (out == 4 * n).all()


def test_avgpool_ceil_window_outside_padded_extent():
    # H=3, k=2, s=2, pads 0, ceil: second window covers rows 2..3 -> row 3 outside even the padded extent
    x = np.full((1, 1, 3, 3), 10, np.uint8)
    mult_n = np.arange(5, dtype=np.int64)
    out = np.empty((1, 1, 2, 2), np.int32)
    avgpool2d(x, 0, (2, 2), (2, 2), (0, 0, 0, 0), True, mult_n, np.zeros(5, np.int64), 0, -2 ** 31,
              2 ** 31 - 1, out)
    # sums: 40, 20, 20, 10; n (include pad, padded extent = input): 4, 2, 2, 1
    assert out.ravel().tolist() == [160, 40, 40, 10]


def test_avgpool_rounding_and_saturation():
    x = np.array([[[[-128, 127], [127, 127]]]], np.int8)
    m, r = quantize_multiplier(1 / 4)
    mult = np.array([0, 0, 0, 0, m], np.int64)
    shift = np.array([0, 0, 0, 0, r], np.int64)
    out = np.empty((1, 1, 1, 1), np.int8)
    avgpool2d(x, -128, (2, 2), (2, 2), (0, 0, 0, 0), False, mult, shift, -128, -128, 127, out)
    # s = 0 + 255*3 = 765, 765/4 = 191.25 -> 191, -128 -> 63
    assert out[0, 0, 0, 0] == 63
    avgpool2d(x, -128, (2, 2), (2, 2), (0, 0, 0, 0), False, mult * 0 + (1 << 30), shift * 0 + 29, -128, -128,
              127, out)
    assert out[0, 0, 0, 0] == 127  # 765*2 - 128 saturates


def test_avgpool_validation():
    x = np.zeros((1, 1, 4, 4), np.int8)
    out = np.empty((1, 1, 2, 2), np.int8)
    with pytest.raises(ValueError, match="kh\\*kw \\+ 1"):
        avgpool2d(x, 0, (2, 2), (2, 2), (0, 0, 0, 0), False, np.zeros(4, np.int64), np.zeros(4, np.int64), 0,
                  -128, 127, out)
    with pytest.raises(ValueError, match="out must have shape"):
        avgpool2d(x, 0, (2, 2), (2, 2), (0, 0, 0, 0), False, np.zeros(5, np.int64), np.zeros(5, np.int64), 0,
                  -128, 127, np.empty((1, 2, 2, 2), np.int8))


def test_maxpool2d_cache_keeps_geometry_per_input_shape():
    """With a cache the geometry is validated once per input shape and dtype; another shape is validated again."""
    cache = {}
    x = np.arange(2 * 3 * 6 * 6, dtype=np.int16).reshape(2, 3, 6, 6)
    for _ in range(2):
        np.testing.assert_array_equal(maxpool2d(x, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (3, 3), cache=cache),
                                      naive.maxpool2d(x, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (3, 3)))
    x2 = -x[:, :, :4, :4].copy()
    np.testing.assert_array_equal(maxpool2d(x2, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (2, 2), cache=cache),
                                  naive.maxpool2d(x2, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (2, 2)))
    with pytest.raises(ValueError, match="padding"):
        maxpool2d(x2, (1, 1), (2, 2), (0, 0, 3, 0), (1, 1), (4, 2), cache={})
