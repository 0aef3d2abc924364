"""The channels-last depthwise kernel in channel blocks (kernels/depthwise_nhwc.py), through
conv2d_direct.bind_direct_requantized, == golden twins (naive.conv2d_acc + naive.requantize), bit for bit: random
geometries of 64-192 channels (several blocks, a partial last one) and output planes of 16-256 pixels (tails of the
16-pixel transposes and the pixel tiles), odd and even kernels, strides, dilations, padding; int8 and uint8
activations with zero points at the edges, weights up to int16, extreme multipliers, biases that fold into one
constant per lane and biases that do not (both requantization loops), saturation; one bound run reused on other
data; each for every instruction set's tiles the host can run."""
import contextlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import depthwise_nhwc
from kernels.conv2d_direct import bind_direct_requantized
from tests import naive
from tests.test_kernels_conv2d import check_bound_runs
from tests.test_kernels_conv_int16 import HOST_ISAS, per_isa

pytestmark = pytest.mark.skipif(not depthwise_nhwc.AVAILABLE, reason="needs AVX-512BW or AVX2 (other kernels run)")

X8 = [(np.int8, -128, 127), (np.uint8, 0, 255)]
OUT8 = [(np.int8, -128, 127), (np.uint8, 0, 255)]


@contextlib.contextmanager
def _using(isa):
    """depthwise_nhwc running the tiles of instruction set ``isa``, spied on."""
    with mock.patch.object(depthwise_nhwc, "KERNELS", depthwise_nhwc.kernel_set(isa)), \
            mock.patch.object(depthwise_nhwc, "bind", wraps=depthwise_nhwc.bind) as spy:
        yield spy


@st.composite
def nhwc_case(draw):
    """A fused case (the arguments of bind_direct_requantized) that depthwise_nhwc.wins."""
    c = 32 * draw(st.integers(2, 6))
    kh, kw = draw(st.sampled_from([(3, 3), (5, 5), (3, 3), (1, 1), (2, 3), (4, 4), (3, 1)]))
    sh, sw = draw(st.sampled_from([(1, 1), (2, 2), (1, 1), (2, 1), (1, 2)]))
    dh, dw = draw(st.sampled_from([(1, 1), (1, 1), (2, 2), (1, 2)]))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(4, dh * (kh - 1) + 1 - pads[0] - pads[2]), 24))
    wd = draw(st.integers(max(4, dw * (kw - 1) + 1 - pads[1] - pads[3]), 24))
    ho = naive.conv_out_size(h, pads[0], pads[2], kh, sh, dh)
    wo = naive.conv_out_size(wd, pads[1], pads[3], kw, sw, dw)
    limit = depthwise_nhwc.MAX_PIXELS_S2 if sw == 2 else depthwise_nhwc.MAX_PIXELS
    if not depthwise_nhwc.MIN_PIXELS <= ho * wo <= limit:
        h, wd, pads, sh, sw, dh, dw = 14, 14, (kh // 2, kw // 2, kh // 2, kw // 2), 1, 1, 1, 1
    dtype, lo, hi = draw(st.sampled_from(X8))
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), c, h, wd), dtype, lo, hi))
    wdt, wlo, whi = draw(st.sampled_from([(np.int8, -128, 127), (np.int16, -32767, 32767), (np.int8, -3, 3)]))
    w = draw(naive.int_arrays((c, 1, kh, kw), wdt, wlo, whi))
    ms = [draw(naive.multipliers(allow_negative=True)) for _ in range(1 if draw(st.booleans()) else c)]
    mult = np.array([m for m, _ in ms] * (c // len(ms)), np.int64)
    shift = np.array([r for _, r in ms] * (c // len(ms)), np.int64)
    odt, out_zp, qmin, qmax = draw(naive.out_params(OUT8))
    if draw(st.integers(0, 4)):  # most examples: every channel has a saturation bound, so they fuse
        shift = naive.fusable_shifts(shift, out_zp, qmin, qmax)
    # biases small, at the int32 ends, or far past them (no folded constant per lane: the general loop)
    values = st.one_of(st.integers(-2 ** 20, 2 ** 20), st.sampled_from([0, -2 ** 31, 2 ** 31 - 1]),
                       st.integers(-2 ** 45, 2 ** 45))
    bias = np.array([draw(values) for _ in range(c)], np.int64)
    return x, draw(naive.zero_points(lo, hi)), w, (sh, sw), pads, (dh, dw), c, bias, mult, shift, out_zp, qmin, \
        qmax, 64, odt


@per_isa
@settings(deadline=None, max_examples=examples(150))
@given(nhwc_case())
def test_depthwise_nhwc_matches_twins(isa, case):
    x = case[0]
    info = np.iinfo(x.dtype)
    flipped = (int(info.min) + int(info.max) - x.astype(np.int64)).astype(x.dtype)  # every element changed
    with _using(isa) as spy:
        fused = check_bound_runs(bind_direct_requantized, case, [x, flipped])
    assert spy.called == fused
    event(f"fused: {fused}")


@per_isa
@pytest.mark.parametrize("dtype,lo,hi", X8)
def test_depthwise_nhwc_extremes(isa, dtype, lo, hi):
    """Activations at both ends of their range against int16 weights at +-32767 (the largest accumulators, exact),
    zero points at both ends, saturating outputs; folded and unfolded requantization (bias 2**40)."""
    c = 96
    rng = np.random.default_rng(lo & 0xFF)
    x = rng.choice(np.array([lo, hi], np.int64), (1, c, 9, 11)).astype(dtype)
    one = np.ones(c, np.int64)
    for k in (3, 5):
        w = rng.choice(np.array([-32767, 32767], np.int64), (c, 1, k, k)).astype(np.int16)
        for x_zp in (lo, hi):
            for bias, mult, shift in ((one * 7, one * ((1 << 31) - 1), one * 40), (one << 40, one << 30, one * 31),
                                      (-one, -(one << 30), one * 44)):
                case = (x, x_zp, w, (1, 1), (k // 2,) * 4, (1, 1), c, bias, mult, shift, 3, -128, 127, 64, np.int8)
                with _using(isa) as spy:
                    assert check_bound_runs(bind_direct_requantized, case, [x, x[:, ::-1].copy()])
                assert spy.called


def test_depthwise_nhwc_rule():
    w = np.ones((64, 1, 3, 3), np.int8)
    assert depthwise_nhwc.wins(np.uint8, np.uint8, w, 64, 1, 14, 14, 14, 14)
    assert depthwise_nhwc.wins(np.int8, np.int8, w, 960, 1, 7, 7, 7, 7)
    assert not depthwise_nhwc.wins(np.int16, np.int8, w, 64, 1, 14, 14, 14, 14)  # 16-bit activations
    assert not depthwise_nhwc.wins(np.int8, np.int16, w, 64, 1, 14, 14, 14, 14)  # 16-bit outputs
    assert not depthwise_nhwc.wins(np.int8, np.int8, w, 48, 1, 14, 14, 14, 14)   # not a multiple of 32
    assert not depthwise_nhwc.wins(np.int8, np.int8, w, 64, 2, 14, 14, 14, 14)   # a channel multiplier
    assert not depthwise_nhwc.wins(np.int8, np.int8, w, 64, 1, 3, 3, 3, 3)       # fewer than 16 pixels
    assert depthwise_nhwc.wins(np.int8, np.int8, w, 64, 1, 14, 14, 7, 7, 2)      # column stride 2: small planes
    assert not depthwise_nhwc.wins(np.int8, np.int8, w, 64, 1, 28, 28, 14, 14, 2)
    assert not depthwise_nhwc.wins(np.int8, np.int8, np.full((64, 1, 3, 3), 40000), 64, 1, 14, 14, 14, 14)


def test_lane_channels():
    """Each group of 2L lanes holds its channels' even ones, then its odd ones: a permutation of the block."""
    lanes = depthwise_nhwc.lane_channels(16, 64)
    assert list(lanes[:18]) == list(range(0, 32, 2)) + [1, 3]
    assert sorted(lanes) == list(range(64))
    assert list(depthwise_nhwc.lane_channels(8, 32)[:10]) == [0, 2, 4, 6, 8, 10, 12, 14, 1, 3]


def test_host_isa_first():
    assert depthwise_nhwc.KERNELS.isa.name == HOST_ISAS[0]
