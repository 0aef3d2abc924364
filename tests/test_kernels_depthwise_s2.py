"""The column-pair depthwise kernel of column stride 2 (kernels/depthwise_s2.py), through kernels.depthwise.depthwise
and conv2d_direct.bind_direct_requantized, == golden twins (tests/naive.py conv2d_acc with groups = channels, and
naive.requantize for the fused requantization), bit for bit: random geometries (kernel sizes odd and even, row
strides and dilations, padding, channel multipliers, rows shorter than a vector and several tiles long), 8- and
16-bit activations with zero points at the edges, extreme multipliers and saturation, the exactness bound just
inside / just outside; each for every instruction set's tiles the host can run."""
import contextlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import depthwise, depthwise_s2
from kernels.conv2d_direct import bind_direct_requantized
from kernels.requantize import saturation_bounds
from tests import naive
from tests.test_kernels_conv2d import check_bound_runs
from tests.test_kernels_conv_int16 import HOST_ISAS, per_isa

pytestmark = pytest.mark.skipif(not depthwise_s2.AVAILABLE, reason="needs AVX-512BW or AVX2 (other kernels run)")

XS = [(np.int8, -128, 127), (np.uint8, 0, 255), (np.int16, -32768, 32767), (np.uint16, 0, 65535)]


@contextlib.contextmanager
def _using(isa):
    """depthwise_s2 running the tiles of instruction set ``isa``."""
    with mock.patch.object(depthwise_s2, "KERNELS", depthwise_s2.kernel_set(isa)):
        yield


def _admitted(wt, x_dtype, x_zp) -> bool:
    """The exactness bound: sum|w| * v_max <= 2**31 - 1 with v_max the largest centred value (2**7 or 2**15, or
    the centred padding value x_zp - center if larger), and weights within int16."""
    bits = 8 * np.dtype(x_dtype).itemsize
    center = 1 << (bits - 1) if np.dtype(x_dtype).kind == "u" else 0
    v_max = max(1 << (bits - 1), abs(int(x_zp) - center))
    w = wt.astype(np.int64).reshape(wt.shape[0], -1)
    return int(np.abs(w).sum(axis=1).max()) * v_max <= (1 << 31) - 1 and int(np.abs(w).max()) <= 32767


def _run(x, x_zp, wt, stride, pads, dilation, out, rq=None):
    """kernels.depthwise.depthwise as conv2d_direct calls it (float weights), and whether depthwise_s2 ran."""
    wf = wt.reshape(wt.shape[0], -1).astype(np.float64)
    kh, kw = wt.shape[2:]
    with mock.patch.object(depthwise_s2, "bind", wraps=depthwise_s2.bind) as spy:
        if rq is not None:
            depthwise.depthwise(x, x_zp, wf, kh, kw, stride, pads, dilation, out, True, *rq)
        else:
            depthwise.depthwise(x, x_zp, wf, kh, kw, stride, pads, dilation, out)
    return spy.called


def _check(x, x_zp, wt, stride, pads, dilation):
    expected = naive.conv2d_acc(x, x_zp, wt, stride, pads, dilation, x.shape[1])
    out = np.empty(expected.shape, np.int64)
    assert _run(x, x_zp, wt, stride, pads, dilation, out) == _admitted(wt, x.dtype, x_zp)
    np.testing.assert_array_equal(out, expected)
    return expected


def _check_fused(x, x_zp, wt, stride, pads, dilation, bias, mult, shift, out_zp, qmin, qmax, dtype):
    acc = naive.conv2d_acc(x, x_zp, wt, stride, pads, dilation, x.shape[1])
    lims = saturation_bounds(mult, shift, out_zp, qmin, qmax)
    if lims.size and int(lims.min()) == 0:
        return False  # no branch-free requantization (the caller does not fuse)
    out = np.empty(acc.shape, dtype)
    assert _run(x, x_zp, wt, stride, pads, dilation, out, (bias, mult, shift, lims, out_zp, qmin, qmax)) \
        == _admitted(wt, x.dtype, x_zp)
    n, c, h, w = acc.shape
    expected, overflows = naive.requantize(acc.reshape(n, c, h * w), bias, mult, shift, out_zp, qmin, qmax, 64,
                                           False, dtype)
    assert overflows == 0
    np.testing.assert_array_equal(out, expected.reshape(acc.shape))
    return True


@st.composite
def s2_case(draw):
    c = draw(st.integers(1, 4))
    per = draw(st.integers(1, 2))  # channel multiplier
    kh, kw = draw(st.sampled_from([(3, 3), (5, 5), (3, 3), (5, 5), (1, 1), (1, 2), (3, 1), (2, 3), (4, 4), (7, 7)]))
    sh = draw(st.sampled_from([2, 2, 1, 3]))
    dh = draw(st.sampled_from([1, 1, 2, 3]))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h_min = max(1, dh * (kh - 1) + 1 - pads[0] - pads[2])
    h = draw(st.integers(h_min, max(h_min, 14)))
    # output rows shorter than one 16-lane vector up to several 64-output tiles
    w = draw(st.integers(max(1, kw - pads[1] - pads[3]), 200))
    xd, xlo, xhi = draw(naive.value_ranges(XS))
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), c, h, w), xd, xlo, xhi))
    wd, wlo, whi = draw(st.sampled_from([(np.int8, -128, 127), (np.int8, -8, 7), (np.int16, -2000, 2000)]))
    wt = draw(naive.int_arrays((c * per, 1, kh, kw), wd, wlo, whi))
    return x, draw(naive.zero_points(xlo, xhi)), wt, (sh, 2), pads, (dh, 1)


@per_isa
@settings(deadline=None, max_examples=examples(200))
@given(s2_case())
def test_depthwise_s2_matches_twin(isa, case):
    with _using(isa):
        _check(*case)


@per_isa
@settings(deadline=None, max_examples=examples(150))
@given(s2_case(), st.data())
def test_depthwise_s2_requantized_matches_twin(isa, case, data):
    cout = case[2].shape[0]
    ms = [data.draw(naive.multipliers(allow_negative=True)) for _ in range(cout)]
    mult = np.array([m for m, _ in ms], np.int64)
    shift = np.array([r for _, r in ms], np.int64)
    bias = np.array([data.draw(st.integers(-2 ** 40, 2 ** 40)) for _ in range(cout)], np.int64)
    dtype, out_zp, qmin, qmax = data.draw(naive.out_params(naive.out_ranges_like(case[0].dtype)))
    if data.draw(st.integers(0, 4)):  # most examples: every channel has a saturation bound, so they compare
        shift = naive.fusable_shifts(shift, out_zp, qmin, qmax)
    with _using(isa):
        fused = _check_fused(*case, bias, mult, shift, out_zp, qmin, qmax, dtype)
    event(f"requantization fused: {fused}")


@per_isa
@pytest.mark.parametrize("dtype,lo", [(np.int16, -32768), (np.uint16, 0)])
@pytest.mark.parametrize("x_zp_of", ["lo", "hi", "mid"])
def test_depthwise_s2_at_the_bound(isa, dtype, lo, x_zp_of):
    """sum|w| * 2**15 == 2**31 - 1 (sum|w| = 65535) is admitted and exact -- the int32 sums reach -65535 * 2**15
    where every centred input is -2**15 -- one more takes another kernel."""
    info = np.iinfo(dtype)
    x_zp = {"lo": int(info.min), "hi": int(info.max), "mid": int(info.min) + (1 << 15)}[x_zp_of]
    x = np.full((1, 1, 3, 81), lo, dtype)  # centred value -2**15 everywhere
    x[0, 0, 1, ::3] = info.max
    for last in (1, -1, 2):
        w = np.array([32767, 32767, last], np.int16).reshape(1, 1, 1, 3)
        with _using(isa):
            _check(x, x_zp, w, (1, 2), (0, 1, 0, 1), (1, 1))
    x = np.full((1, 1, 1, 81), lo, dtype)
    with _using(isa):
        acc = _check(x, int(info.min) + (1 << 15), np.array([32767, 32767, 1], np.int16).reshape(1, 1, 1, 3),
                     (1, 2), (0, 0, 0, 0), (1, 1))
    assert int(acc.min()) == -65535 * 32768


@pytest.mark.parametrize("dtype,x_zp", [(np.int8, -128), (np.int8, 127), (np.uint8, 0), (np.uint8, 255),
                                        (np.int16, -32768), (np.int16, 32767), (np.uint16, 0), (np.uint16, 65535)])
@per_isa
def test_depthwise_s2_extremes(isa, dtype, x_zp):
    """Extreme inputs, weights at +-32767 (8-bit) and +-128 (16-bit), padding values at the ends of the centred
    range, 3x3 and 5x5, stride 2 and row stride 1; exact against the twin, fused (saturating) and not."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(x_zp & 0xFFFF)
    x = rng.choice(np.array([info.min, info.max], np.int64), (1, 3, 9, 71)).astype(dtype)
    wmax = 32767 if info.bits == 8 else 128
    rq = (np.array([5, -7, 2 ** 40]), np.array([1 << 30, -(1 << 31) + 1, (1 << 31) - 1]), np.array([40, 31, 45]))
    for k in (3, 5):
        w = rng.choice(np.array([-wmax, wmax], np.int64), (3, 1, k, k)).astype(np.int16)
        for stride in ((2, 2), (1, 2)):
            with _using(isa):
                _check(x, x_zp, w, stride, (k // 2,) * 4, (1, 1))
                assert _check_fused(x, x_zp, w, stride, (k // 2,) * 4, (1, 1), *rq, -3, -128, 127, np.int8)


def test_depthwise_s2_takes():
    """Column stride 2 at column dilation 1 only, 8/16-bit activations; weights past int16 refused (prepare)."""
    assert depthwise_s2.takes(np.uint8, (2, 2), (1, 1)) and depthwise_s2.takes(np.int16, (1, 2), (3, 1))
    assert not depthwise_s2.takes(np.uint8, (2, 1), (1, 1)) and not depthwise_s2.takes(np.int8, (2, 2), (1, 2))
    assert not depthwise_s2.takes(np.int32, (2, 2), (1, 1))
    assert depthwise_s2.prepare(np.array([[40000.0, 1.0, 2.0]]), 1, 3) is None
    w32, sumw, s_max = depthwise_s2.prepare(np.array([[1.0, -2.0, 3.0, 4.0, -5.0, 6.0]]), 2, 3)
    assert w32.shape == (1, 4) and list(sumw) == [7] and s_max == 21
    lo = (w32.astype(np.int64) << 48) >> 48  # the words' halves, sign-extended
    hi = w32.astype(np.int64) >> 16
    assert list(lo[0]) == [1, 3, 4, 6] and list(hi[0]) == [-2, 0, -5, 0]  # (kx 0, 1), (kx 2, none) per kernel row


@settings(deadline=None, max_examples=examples(100))
@given(st.data())
def test_conv2d_direct_takes_s2_on_small_planes(data):
    """bind_direct_requantized runs depthwise_s2 at column stride 2 also where the output plane is small enough for
    channels last (faster there, measured), exact against the twins; one bound run reused on other data."""
    c = data.draw(st.integers(16, 40))
    k = data.draw(st.sampled_from([3, 5]))
    h = data.draw(st.integers(k, 16))
    dtype, lo, hi = data.draw(naive.value_ranges(XS))
    x = data.draw(naive.int_arrays((1, c, h, h), dtype, lo, hi))
    w = data.draw(naive.int_arrays((c, 1, k, k), np.int8, -128, 127))
    ms = [data.draw(naive.multipliers(allow_negative=True)) for _ in range(c)]
    dt, out_zp, qmin, qmax = data.draw(naive.out_params(naive.out_ranges_like(dtype)))
    shift = naive.fusable_shifts(np.array([r for _, r in ms], np.int64), out_zp, qmin, qmax)
    bias = np.array([data.draw(st.integers(-2 ** 20, 2 ** 20)) for _ in range(c)], np.int64)
    case = (x, data.draw(naive.zero_points(lo, hi)), w, (2, 2), (k // 2,) * 4, (1, 1), c, bias,
            np.array([m for m, _ in ms], np.int64), shift, out_zp, qmin, qmax, 48, dt)
    flipped = (int(np.iinfo(dtype).min) + int(np.iinfo(dtype).max) - x.astype(np.int64)).astype(dtype)
    with mock.patch.object(depthwise_s2, "bind", wraps=depthwise_s2.bind) as spy:
        assert check_bound_runs(bind_direct_requantized, case, [x, flipped])
    assert spy.called


def test_host_isas_listed():
    assert depthwise_s2.KERNELS.isa.name == HOST_ISAS[0]
