"""The channels-last depthwise kernel of small planes (kernels/depthwise_cl.py), through
conv2d_direct.bind_direct_requantized, == golden twins (naive.conv2d_acc + naive.requantize), bit for bit: random
geometries with at least 16 channels and output planes of at most 64 pixels, 8- and 16-bit activations, zero
points, extreme multipliers and saturation; one bound run reused on other data."""
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import depthwise, depthwise_cl
from kernels.conv2d_direct import bind_direct_requantized
from tests import naive
from tests.test_kernels_conv2d import check_bound_runs, fused_case


@st.composite
def small_depthwise(draw):
    c = draw(st.integers(16, 40))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    top, left, bottom, right = pads
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - top - bottom), 9))
    wd = draw(st.integers(max(1, dw * (kw - 1) + 1 - left - right), 9))
    dtype, lo, hi = draw(st.sampled_from([(np.int8, -128, 127), (np.uint8, 0, 255), (np.int16, -32768, 32767),
                                          (np.uint16, 0, 65535)]))
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), c, h, wd), dtype, lo, hi))
    x_zp = draw(naive.zero_points(lo, hi))
    w = draw(naive.int_arrays((c, 1, kh, kw), np.int8, -128, 127))
    return x, x_zp, w, (sh, sw), pads, (dh, dw), c


@settings(deadline=None, max_examples=examples(150))
@given(fused_case(small_depthwise()))
def test_depthwise_cl_matches_twins(case):
    x, x_zp, w, stride, pads, dilation, groups = case[:7]
    ho = naive.conv_out_size(x.shape[2], pads[0], pads[2], w.shape[2], stride[0], dilation[0])
    wo = naive.conv_out_size(x.shape[3], pads[1], pads[3], w.shape[3], stride[1], dilation[1])
    if ho * wo > depthwise_cl.MAX_PIXELS:
        return
    assert depthwise_cl.wins(x.shape[1], ho, wo, 1)
    info = np.iinfo(x.dtype)
    flipped = (int(info.min) + int(info.max) - x.astype(np.int64)).astype(x.dtype)  # every element changed
    # column stride 2 takes kernels.depthwise_s2 where it can: off here, so this kernel is checked at every stride
    with mock.patch.object(depthwise, "column_pairs", return_value=None), \
            mock.patch.object(depthwise_cl, "bind", wraps=depthwise_cl.bind) as spy:
        fused = check_bound_runs(bind_direct_requantized, case, [x, flipped])
    assert spy.called == fused


def test_depthwise_cl_rule():
    assert depthwise_cl.wins(16, 7, 7, 1) and depthwise_cl.wins(960, 8, 8, 1)
    assert not depthwise_cl.wins(15, 7, 7, 1) and not depthwise_cl.wins(960, 14, 14, 1)
    assert not depthwise_cl.wins(960, 7, 7, 2)  # a channel multiplier: the per-channel kernels


def test_depthwise_cl_extremes():
    """Every activation at an end of its range against weights at both ends: the largest accumulators the int32
    bound admits here, exact, and saturating outputs."""
    c = 24
    for dtype, lo, hi in ((np.uint8, 0, 255), (np.int16, -32768, 32767)):
        x = np.full((1, c, 7, 7), lo, dtype)
        x[:, ::2] = hi
        w = np.full((c, 1, 5, 5), -128, np.int8)
        w[1::3] = 127
        one = np.ones(c, np.int64)
        for mult, shift in ((one * ((1 << 31) - 1), one * 40), (one << 30, one * 31)):
            case = (x, lo, w, (1, 1), (2, 2, 2, 2), (1, 1), c, one * 7, mult, shift, 3, -128, 127, 48, np.int8)
            assert check_bound_runs(bind_direct_requantized, case, [x, x[:, ::-1].copy()])


def test_depthwise_cl_wide_weights():
    """Weights past int16 (int32, +-40000) with 8-bit activations: the kernel keeps int32 weights there (int16
    elsewhere), exact against the twins; 3x3 and 5x5 kernels (a kernel row per pass) and a 1x2 one (tap by tap)."""
    rng = np.random.default_rng(7)
    c = 20
    x = rng.integers(-128, 128, (2, c, 6, 7)).astype(np.int8)
    one = np.ones(c, np.int64)
    for kh, kw in ((3, 3), (5, 5), (1, 2)):
        w = rng.choice(np.array([-40000, 40000, -32768, 1], np.int64), (c, 1, kh, kw)).astype(np.int32)
        pads = (kh // 2, kw // 2, kh // 2, kw // 2)
        case = (x, -128, w, (1, 1), pads, (1, 1), c, one * 3, one << 30, one * 44, 0, -128, 127, 48, np.int8)
        assert check_bound_runs(bind_direct_requantized, case, [x, x[:, ::-1].copy()])
