"""conv2d_acc (both paths) == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.conv2d import conv2d_acc
from kernels.conv2d_direct import conv2d_direct
from kernels.conv2d_gemm import conv2d_gemm, conv2d_gemm_blocks
from tests import naive

# weights with the zero point removed: int8 symmetric, int8 - zp (int16), 16-bit weights, and wide int32
W_RANGES = [(np.int8, -128, 127), (np.int8, -8, 7), (np.int16, -255, 255), (np.int16, -32768, 32767),
            (np.int32, -65535, 65535), (np.int32, -2 ** 31, 2 ** 31 - 1)]


@st.composite
def conv_case(draw, w_ranges=W_RANGES, pointwise=False):
    groups = draw(st.integers(1, 3))
    cin_g = draw(st.integers(1, 3))
    cout_g = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    if pointwise:
        kh = kw = sh = sw = dh = dw = 1
        pads = (0, 0, 0, 0)
        cin_g = draw(st.integers(1, 40))
    else:
        kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    top, left, bottom, right = pads
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - top - bottom), 7))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - left - right), 7))
    xd, xlo, xhi = draw(naive.value_ranges())
    x = draw(naive.int_arrays((n, cin_g * groups, h, w), xd, xlo, xhi))
    x_zp = draw(naive.zero_points(xlo, xhi))
    wd, wlo, whi = draw(st.sampled_from(w_ranges))
    wt = draw(naive.int_arrays((cout_g * groups, cin_g, kh, kw), wd, wlo, whi))
    return x, x_zp, wt, (sh, sw), pads, (dh, dw), groups


def _check(case):
    x, x_zp, w, stride, pads, dilation, groups = case
    expected = naive.conv2d_acc(x, x_zp, w, stride, pads, dilation, groups)
    for fn in (conv2d_acc, conv2d_direct, conv2d_gemm):
        out = fn(x, x_zp, w, stride, pads, dilation, groups)
        assert out.dtype == np.int64, fn.__name__
        np.testing.assert_array_equal(out, expected, err_msg=fn.__name__)
        if fn is not conv2d_gemm:  # compact results (int32 where proven exact) hold the same integers
            small = fn(x, x_zp, w, stride, pads, dilation, groups, compact=True)
            assert small.dtype in (np.int64, np.int32), fn.__name__
            np.testing.assert_array_equal(small.astype(np.int64), expected, err_msg=f"{fn.__name__} compact")
    # column blocks (as the fused requantization consumes them), with a tiny block size
    n_img, cout = expected.shape[:2]
    got = np.zeros((n_img, cout, expected.shape[2] * expected.shape[3]), np.int64)
    cg = cout // groups
    for n, g, c0, c1, acc, off in conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups, block_cols=3):
        if acc.dtype.kind == "f":
            np.testing.assert_array_equal(acc, np.rint(acc))
        got[n, g * cg:(g + 1) * cg, c0:c1] = acc.astype(np.int64) + off[:, None]
    np.testing.assert_array_equal(got.reshape(expected.shape), expected, err_msg="blocks")


@settings(deadline=None, max_examples=examples(120))
@given(conv_case())
def test_conv2d_matches_twin(case):
    _check(case)


@settings(deadline=None, max_examples=examples(40))
@given(conv_case(pointwise=True))
def test_conv2d_pointwise_matches_twin(case):
    _check(case)


@settings(deadline=None, max_examples=examples(80))
@given(conv_case(), conv_case(pointwise=True))
def test_conv2d_byte_split_matches_twin(case, pw_case):
    # the byte split at every K (production uses it from HILO_MIN_K reduction terms on, where the int16-pair
    # kernel does not apply)
    from unittest import mock
    import kernels.conv2d_gemm as gemm_path
    with mock.patch.object(gemm_path, "HILO_MIN_K", 0), mock.patch.object(gemm_path.conv_int16, "AVAILABLE", False):
        _check(case)
        _check(pw_case)


@settings(deadline=None, max_examples=examples(60))
@given(conv_case(), conv_case(pointwise=True))
def test_conv2d_byte_planes_match_twin(case, pw_case):
    """16-bit activations whose convolution the integer kernels cannot take whole run as the high and low byte
    planes on them (kernels.conv2d_gemm.byte_planes), here forced on every 16-bit case (the whole-16-bit plan
    refused), 8-bit ones unchanged."""
    from unittest import mock
    import kernels.conv2d_gemm as gemm_path
    plan = gemm_path.conv_int16.plan
    refuse_16 = lambda dtype, pad, wabs: np.dtype(dtype).itemsize == 1 and plan(dtype, pad, wabs)  # noqa: E731
    with mock.patch.object(gemm_path.conv_int16, "plan", refuse_16):
        for c in (case, pw_case):
            x, x_zp, w, groups = c[0], c[1], c[2], c[6]
            if x.dtype.itemsize == 2:
                wabs = int(np.abs(w.reshape(len(w), -1).astype(np.int64)).sum(axis=1).max())
                event("byte planes" if gemm_path.byte_planes(x.dtype, x_zp, any(c[4]), w, wabs, groups=groups)
                      else "float")
            _check(c)


@pytest.mark.parametrize("dtype,x_zp", [(np.int16, 0), (np.int16, -32768), (np.int16, 32767), (np.uint16, 0),
                                        (np.uint16, 65535), (np.uint16, 12345)])
def test_conv2d_byte_planes_past_the_int16_pair_bound(dtype, x_zp):
    """A 3x3 convolution of 64 channels with weights at +-127: sum|w| = 73,152, past the int16 pairs' bound for
    16-bit activations (65,535), within the byte planes' (16.7 million). Extreme activations and zero points."""
    import kernels.conv2d_gemm as gemm_path
    rng = np.random.default_rng(x_zp & 0xFFFF)
    info = np.iinfo(dtype)
    x = rng.choice(np.array([info.min, info.max, x_zp], np.int64), (2, 64, 7, 9)).astype(dtype)
    w = rng.choice(np.array([-127, 127], np.int64), (5, 64, 3, 3)).astype(np.int8)
    planes = gemm_path.byte_planes(dtype, x_zp, True, w, 64 * 9 * 127)  # every channel's sum|w|: 73,152
    assert planes is not None or not gemm_path.conv_int16.AVAILABLE
    _check((x, x_zp, w, (1, 1), (1, 1, 1, 1), (1, 1), 1))
    _check((x, x_zp, w, (2, 1), (0, 1, 2, 0), (1, 2), 1))


@settings(deadline=None, max_examples=examples(60))
@given(st.data())
def test_conv2d_split_rows_match_twin(data):
    """16-bit activations where some output channels pass the int16 pairs' bound (sum|w| > 65,535): those
    channels' weights in pieces within it (kernels.conv2d_gemm.split_rows), added in int64; the other channels
    whole. Extreme activations and zero points, any padding, stride and dilation."""
    import kernels.conv2d_gemm as gemm_path
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    cin, cout = -(-517 // (kh * kw)) + data.draw(st.integers(0, 600 // (kh * kw))), data.draw(st.integers(2, 9))
    stride, dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))), (1, data.draw(st.integers(1, 2)))
    pads = tuple(data.draw(st.integers(0, 2)) for _ in range(4))
    dtype = data.draw(st.sampled_from([np.int16, np.uint16]))
    info = np.iinfo(dtype)
    x_zp = data.draw(st.sampled_from([int(info.min), int(info.max), 0, 12345]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    h = max(1, dilation[0] * (kh - 1) + 1 - pads[0] - pads[2]) + data.draw(st.integers(0, 4))
    wd = max(1, dilation[1] * (kw - 1) + 1 - pads[1] - pads[3]) + data.draw(st.integers(0, 4))
    x = rng.choice(np.array([info.min, info.max, x_zp, x_zp + 1 if x_zp < info.max else x_zp - 1], np.int64),
                   (1, cin, h, wd)).astype(dtype)
    w = rng.integers(-20, 21, (cout, cin, kh, kw)).astype(np.int8)
    heavy = rng.permutation(cout)[:data.draw(st.integers(1, cout - 1))]
    w[heavy] = rng.choice(np.array([-127, 127], np.int8), (heavy.size, cin, kh, kw))  # sum|w| = 127 * K
    rows = cout + heavy.size * (-(-cin * kh * kw // (65535 // 127)) - 1)  # +-127 weights: 516 to a piece
    split = gemm_path.split_rows(w, np.dtype(dtype), x_zp, any(pads))
    if gemm_path.conv_int16.AVAILABLE:
        assert (split is None) == (rows >= 2 * cout)  # else the byte planes
        assert split is None or split[1][0] == rows
    event("split" if split is not None else "byte planes")
    _check((x, x_zp, w, stride, pads, dilation, 1))


def test_split_rows_pieces_add_up_to_the_weights():
    import kernels.conv2d_gemm as gemm_path
    rng = np.random.default_rng(1)
    w = rng.integers(-10, 11, (8, 96, 3, 3)).astype(np.int8)
    w[[1, 6]] = 127  # 864 * 127 = 109,728: two pieces each
    split = gemm_path.split_rows(w, np.dtype(np.int16), 0, True)
    if not gemm_path.conv_int16.AVAILABLE:
        assert split is None
        return
    w32, shape, levels, mod = split
    assert shape == (10, 96, 3, 3) and mod is gemm_path.conv_int16
    assert len(levels) == 1 and levels[0][0] == 8 and levels[0][1].tolist() == [1, 6]
    assert gemm_path.split_rows(w[[0, 2, 3]], np.dtype(np.int16), 0, True) is None  # nothing past the bound
    assert gemm_path.split_rows(w[[1, 6]], np.dtype(np.int16), 0, True) is None  # every row: the byte planes
    assert gemm_path.split_rows(w, np.dtype(np.int8), 0, True) is None  # 8-bit activations fit whole


def test_conv2d_depthwise_3x3_edges():
    rng = np.random.default_rng(0)
    x = rng.choice(np.array([-128, 127], np.int8), size=(1, 5, 6, 6))
    w = rng.choice(np.array([-127, 127, -255, 255], np.int16), size=(5, 1, 3, 3))
    for zp in (-128, 0, 127):
        case = (x, zp, w, (1, 1), (1, 1, 1, 1), (1, 1), 5)
        _check(case)
        _check((x, zp, w, (2, 2), (0, 1, 1, 0), (1, 1), 5))


def test_conv2d_uint16_float32_chunking():
    # K = 45. bound = 65535*|w|: |w| = 300 -> bound > 2**24 -> float64; |w| = 9 -> kc32 = 28 < 32 -> float64;
    # |w| = 8 -> kc32 = 32 -> float32 in 2 chunks (32 + 13); |w| = 7 -> kc32 = 36 -> float32 chunks 36 + 9.
    for wmax in (300, 9, 8, 7):
        x = np.full((1, 5, 4, 4), 65535, np.uint16)
        x[0, 0, 0, 0] = 0
        w = np.full((3, 5, 3, 3), wmax, np.int16)
        w[1] = -wmax
        _check((x, 0, w, (1, 1), (1, 1, 1, 1), (1, 1), 1))


def test_conv2d_16bit_byte_split_edges():
    # 16-bit activations x 8-bit weights run as two float32 GEMMs on the bytes of x - center (hilo_ok): the
    # exactness limit is K * 128 * max|w| <= 2**24 - 1, i.e. K <= 1023 at |w| = 128; K = 1024 takes float64.
    # (Where the CPU allows, the int16-pair kernel takes most of these: off here, tested in test_kernels_conv_int16.)
    from unittest import mock
    from kernels import conv_int16
    with mock.patch.object(conv_int16, "AVAILABLE", False):
        _byte_split_edges()


def _byte_split_edges():
    from kernels.conv2d_hilo import hilo_ok
    assert hilo_ok(np.int16, None, 128, 1023) and not hilo_ok(np.int16, None, 128, 1024)
    assert hilo_ok(np.uint16, -32768, 128, 9) and not hilo_ok(np.uint16, 32768, 128, 9)
    assert not hilo_ok(np.int8, None, 128, 9) and not hilo_ok(np.int16, None, 0, 9)
    rng = np.random.default_rng(3)
    for dtype, lo, hi, zps in ((np.int16, -32768, 32767, (-32768, 0, 32767, -65536, 65536)),
                               (np.uint16, 0, 65535, (0, 32768, 65535, -1, 65536))):
        for cin in (341, 342):  # kernel 1x3: K = 1023 (byte split at its limit) and 1026 (float64)
            x = np.full((1, cin, 2, 4), lo, dtype)  # every byte part at -128: all products at the bound
            w = np.full((2, cin, 1, 3), -128, np.int16)
            w[1] = 127
            for zp in zps:
                _check((x, zp, w, (1, 1), (0, 1, 0, 1), (1, 1), 1))
        for cin in (1023, 1024):  # the same limit for 1x1 convolutions (no padding)
            x = np.full((1, cin, 2, 3), lo, dtype)
            x[0, ::2, 1] = hi
            w = np.full((2, cin, 1, 1), -128, np.int16)
            w[1] = 127
            for zp in zps:
                _check((x, zp, w, (1, 1), (0, 0, 0, 0), (1, 1), 1))
        vals = np.array([lo, hi, lo + 1, hi - 1, (lo + hi) // 2, (lo + hi) // 2 + 1, lo + 255, lo + 256], dtype)
        x = rng.choice(vals, size=(2, 6, 5, 7))
        w = rng.choice(np.array([-128, 127, -1, 0, 1], np.int16), size=(4, 3, 3, 2))
        for zp in zps:
            _check((x, zp, w, (1, 1), (1, 2, 0, 1), (1, 2), 2))


def test_conv2d_zero_inputs():
    x = np.full((1, 4, 3, 3), 7, np.uint8)
    w = np.ones((2, 4, 3, 3), np.int16)
    out = conv2d_acc(x, 7, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert out.shape == (1, 2, 3, 3) and out.dtype == np.int64 and not out.any()


def test_conv2d_validation():
    x = np.zeros((1, 4, 5, 5), np.int8)
    w = np.zeros((2, 4, 3, 3), np.int16)
    good = dict(stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    conv2d_acc(x, 0, w, **good)
    with pytest.raises(ValueError, match="groups"):
        conv2d_acc(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 3)
    with pytest.raises(ValueError, match="input channels per group"):
        conv2d_acc(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 2)
    with pytest.raises(ValueError, match="stride"):
        conv2d_acc(x, 0, w, (0, 1), (0, 0, 0, 0), (1, 1), 1)
    with pytest.raises(ValueError, match="pads"):
        conv2d_acc(x, 0, w, (1, 1), (0, -1, 0, 0), (1, 1), 1)
    with pytest.raises(ValueError, match="empty output"):
        conv2d_acc(x, 0, w, (1, 1), (0, 0, 0, 0), (3, 3), 1)
    with pytest.raises(ValueError, match="dtype"):
        conv2d_acc(x.astype(np.int32), 0, w, **good)
    with pytest.raises(ValueError, match="dtype"):
        conv2d_acc(x, 0, w.astype(np.float32), **good)
    with pytest.raises(ValueError, match="x_zp"):
        conv2d_acc(x, 0.5, w, **good)


@st.composite
def fused_case(draw, conv=None):
    """A conv_case (int32 weights at most 16 bits: full ones never fuse) with requantization per channel or per
    tensor (one multiplier): signed multipliers; biases small, anywhere in int32 or at its ends. In three draws of
    four the fusion conditions hold (so most examples compare): shifts small enough for a saturation bound, an
    accumulator width that holds the largest |accumulator| A and biases within its room (|bias| <= 2**(acc_bits-1)
    - 1 - A, the edge included); else any shift and width, and biases also one past the room."""
    x, x_zp, wt, stride, pads, dilation, groups = draw(conv if conv is not None else conv_case(W_RANGES[:-1]))
    cout = wt.shape[0]
    ms = [draw(naive.multipliers(allow_negative=True)) for _ in range(1 if draw(st.booleans()) else cout)]
    mult = np.array([m for m, _ in ms] * (cout // len(ms)), np.int64)
    shift = np.array([r for _, r in ms] * (cout // len(ms)), np.int64)
    dtype, out_zp, qmin, qmax = draw(naive.out_params(naive.out_ranges_like(x.dtype)))
    info = np.iinfo(x.dtype)
    x_dev = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp))
    acc_max = x_dev * int(np.abs(wt.astype(np.int64)).max()) * wt[0].size
    fit = draw(st.integers(0, 3)) > 0
    if fit:  # every channel has a saturation bound
        shift = naive.fusable_shifts(shift, out_zp, qmin, qmax)
    acc_bits = draw(st.sampled_from([b for b in (16, 24, 32, 48, 64) if not fit or acc_max < 2 ** (b - 1)]))
    room = 2 ** (acc_bits - 1) - 1 - acc_max  # the largest |bias| that fuses
    edges = [0, -2 ** 31, 2 ** 31 - 1, 1 - 2 ** 31] + ([room, -room, room + 1, -room - 1] if acc_bits < 64 else [])
    lim = min(room, 2 ** 31 - 1) if fit else 2 ** 31 - 1
    values = st.one_of(st.integers(-min(lim, 2 ** 20), min(lim, 2 ** 20)), st.integers(-lim, lim),
                       st.sampled_from([b for b in edges if not fit or abs(b) <= room]))
    bias = np.array([draw(values) for _ in range(cout)], np.int64)
    return x, x_zp, wt, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax, acc_bits, dtype


@settings(deadline=None, max_examples=examples(120))
@given(fused_case())
def test_direct_requantized_matches_twins(case):
    event("fused" if _check_fused(case) else "not fused")


def _check_fused(case):
    """conv2d_direct_requantized of a fused_case == the twins (naive.conv2d_acc, naive.requantize); whether it
    fused."""
    from kernels.conv2d_direct import conv2d_direct_requantized
    x, x_zp, wt, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax, acc_bits, dtype = case
    acc = naive.conv2d_acc(x, x_zp, wt, stride, pads, dilation, groups)
    n, c, h, w = acc.shape
    out = np.empty(acc.shape, dtype)
    if not conv2d_direct_requantized(x, x_zp, wt, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin,
                                     qmax, acc_bits, out):
        return False  # not provably fusable: the caller requantizes separately (covered by the requantize tests)
    expected, overflows = naive.requantize(acc.reshape(n, c, h * w), bias, mult, shift, out_zp, qmin, qmax,
                                           acc_bits, False, dtype)
    assert overflows == 0  # fusion is only allowed where overflow is impossible
    np.testing.assert_array_equal(out, expected.reshape(acc.shape))
    return True


def test_direct_requantized_refuses_when_overflow_is_possible():
    from kernels.conv2d_direct import conv2d_direct_requantized
    x = np.full((1, 1, 3, 3), 127, np.int8)
    w = np.full((1, 1, 3, 3), 127, np.int8)
    out = np.empty((1, 1, 1, 1), np.int8)
    one = np.array([1], np.int64)
    # 9 * 127 * 127 = 145161 needs 19 bits: a 16-bit accumulator could overflow, so no fusion
    assert not conv2d_direct_requantized(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 1, 0 * one, one << 30, one * 31,
                                         0, -128, 127, 16, out)
    assert conv2d_direct_requantized(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 1, 0 * one, one << 30, one * 31,
                                     0, -128, 127, 32, out)
    assert out[0, 0, 0, 0] == 127


@pytest.mark.parametrize("path", ["direct-depthwise", "direct-dense", "gemm-pointwise", "gemm-3x3"])
def test_requantization_fuses_with_a_dead_channel(path):
    """A channel of a trained model whose weights are all but zero gets a tiny multiplier with a large shift
    (here 60) and may get a bias near the accumulator's limit: no saturation bound fits int64 for it, so the fused
    kernels clamp it at the accumulator's proven reach instead (kernels.requantize.saturation_bounds' ``reach``),
    and the overflow check is per channel (|w| summed over the channel's taps). Fused, and equal to the twins."""
    from kernels.conv2d_direct import conv2d_direct_requantized
    from kernels.conv2d_gemm import conv2d_gemm_requantized
    rng = np.random.default_rng(11)
    cin, cout, k, groups = {"direct-depthwise": (8, 8, 3, 8), "direct-dense": (3, 4, 3, 1),
                            "gemm-pointwise": (32, 16, 1, 1), "gemm-3x3": (16, 16, 3, 1)}[path]
    x = rng.integers(-128, 128, (1, cin, 12, 14)).astype(np.int8)
    wt = rng.integers(-127, 128, (cout, cin // groups, k, k)).astype(np.int8)
    wt[1] = 0
    wt[1].reshape(-1)[0] = 1  # the dead channel
    mult = rng.integers(1 << 29, 1 << 30, cout).astype(np.int64)
    shift = np.full(cout, 38, np.int64)
    shift[1] = 60
    bias = rng.integers(-5000, 5000, cout).astype(np.int64)
    bias[1] = 2 ** 31 - 1000  # and a bias at the edge of the 32-bit accumulator: it cannot overflow with these weights
    pads = (k // 2,) * 4
    out = np.empty((1, cout, 12, 14), np.int8)
    run = conv2d_direct_requantized if path.startswith("direct") else conv2d_gemm_requantized
    assert run(x, 3, wt, (1, 1), pads, (1, 1), groups, bias, mult, shift, -4, -128, 127, 32, out)
    acc = naive.conv2d_acc(x, 3, wt, (1, 1), pads, (1, 1), groups)
    expected, overflows = naive.requantize(acc.reshape(1, cout, -1), bias, mult, shift, -4, -128, 127, 32, False,
                                           np.int8)
    assert overflows == 0
    np.testing.assert_array_equal(out, expected.reshape(acc.shape))


@st.composite
def depthwise_case(draw, dtypes=None):
    """The shapes kernels/depthwise.py takes: one input channel per group, kernel 1-5 (3x3 most often), stride
    1-3, dilation 1-2, channel multiplier 1-2, 8-bit activations (float32 path) or 16-bit ones (float64)."""
    c = draw(st.integers(1, 4))
    per = draw(st.integers(1, 2))
    kh, kw = draw(st.sampled_from([(3, 3), (3, 3), (1, 1), (5, 5), (3, 1), (2, 3)]))
    sh = draw(st.sampled_from([1, 2, 2, 3]))
    sw = draw(st.sampled_from([sh, 1, 2]))
    dh, dw = draw(st.sampled_from([(1, 1), (1, 1), (2, 2), (1, 2)]))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - pads[0] - pads[2]), 40))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pads[1] - pads[3]), 40))
    xd, xlo, xhi = draw(naive.value_ranges(dtypes or naive.VALUE_RANGES))
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), c, h, w), xd, xlo, xhi))
    wd, wlo, whi = draw(st.sampled_from(W_RANGES[:4]))
    wt = draw(naive.int_arrays((c * per, 1, kh, kw), wd, wlo, whi))
    return x, draw(naive.zero_points(xlo, xhi)), wt, (sh, sw), pads, (dh, dw), c


@settings(deadline=None, max_examples=examples(150))
@given(depthwise_case())
def test_depthwise_matches_twin(case):
    from kernels import depthwise
    x, x_zp, wt, stride, pads, dilation, groups = case
    _check(case)
    # the kernel itself, whatever float dtype makes it exact
    expected = naive.conv2d_acc(x, x_zp, wt, stride, pads, dilation, groups)
    info = np.iinfo(x.dtype)
    bound = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp)) * max(1, int(np.abs(wt.astype(np.int64)).max()))
    fdt = depthwise.plan(wt.shape[2] * wt.shape[3], bound)
    assert fdt is not None
    out = np.empty(expected.shape, np.int64)
    depthwise.depthwise(x, x_zp, wt.reshape(wt.shape[0], -1).astype(fdt), wt.shape[2], wt.shape[3], stride, pads,
                        dilation, out)
    np.testing.assert_array_equal(out, expected)


def test_depthwise_extremes():
    """Every product and the whole sum at the float32 limit's side: 8-bit extremes, zero points at both ends."""
    for xdt, vals in ((np.int8, (-128, 127)), (np.uint8, (0, 255))):
        for zp in (int(vals[0]), int(vals[1])):
            for fill in vals:
                x = np.full((1, 3, 9, 9), fill, xdt)
                w = np.full((3, 1, 3, 3), -128, np.int8)
                w[1] = 127
                for stride in ((1, 1), (2, 2)):
                    _check((x, zp, w, stride, (1, 1, 1, 1), (1, 1), 3))
                    _check_fused((x, zp, w, stride, (1, 1, 1, 1), (1, 1), 3, np.array([-2 ** 31 + 1, 0, 2 ** 31 - 1]),
                                  np.array([2 ** 31 - 1, 1 << 30, 1 << 30]), np.array([50, 0, 31]), -3, -128, 127, 64,
                                  np.int8))


@settings(deadline=None, max_examples=examples(120))
@given(fused_case(depthwise_case()))
def test_depthwise_requantized_matches_twins(case):
    event("fused" if _check_fused(case) else "not fused")


@settings(deadline=None, max_examples=examples(40))
@given(fused_case(depthwise_case(naive.VALUE_RANGES[:2])))
def test_depthwise_requantized_bound_run_reused(case):
    """What a graph node keeps, one bound run, gives the twins' result on other data of the same shape and dtype
    (called repeatedly); another input shape gets its own bind, also exact."""
    from kernels.conv2d_direct import bind_direct_requantized
    x = case[0]
    fused = check_bound_runs(bind_direct_requantized, case, [x, ~x, x])  # ~x: every element changed
    event("fused" if fused else "not fused")
    if not fused:
        return
    x2 = np.concatenate([x, ~x], axis=0)
    # the fusion proof depends on the dtypes, weights and requantization only: the other shape fuses too
    assert check_bound_runs(bind_direct_requantized, (x2,) + case[1:], [x2, x2[::-1].copy()])


@settings(deadline=None, max_examples=examples(40))
@given(depthwise_case(), st.booleans())
def test_depthwise_bound_run_reused(case, compact):
    """The unfused path a graph node keeps (``bind_direct``: the accumulators, requantized separately) gives the
    twin's accumulators on other data of the same shape and dtype, called repeatedly, in a fresh array each time;
    int32 only where ``compact`` allows it."""
    from kernels.conv2d_direct import bind_direct
    x, x_zp, wt, stride, pads, dilation, groups = case
    run = bind_direct(x, x_zp, wt, stride, pads, dilation, groups, compact)
    outs = []
    for xi in (x, ~x, x):  # ~x: every element changed
        expected = naive.conv2d_acc(xi, x_zp, wt, stride, pads, dilation, groups)
        got = run(xi)
        assert got.dtype == np.int64 or (compact and got.dtype == np.int32)
        np.testing.assert_array_equal(got, expected)
        outs.append(got)
    assert outs[0] is not outs[2]


def check_bound_runs(bind, case, inputs, **kw):
    """``bind`` (``kernels.conv2d_direct.bind_direct_requantized`` or ``kernels.conv2d_gemm.bind_gemm_requantized``)
    for a fused_case's arguments, then the one run it returns on each of ``inputs`` (the shape and dtype of the
    case's ``x``), each checked against the twins (naive.conv2d_acc, naive.requantize); whether it fused (bind did
    not return None)."""
    x, x_zp, wt, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax, acc_bits, dtype = case
    accs = [naive.conv2d_acc(xi, x_zp, wt, stride, pads, dilation, groups) for xi in inputs]
    run = bind(x, x_zp, wt, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax, acc_bits,
               np.empty(accs[0].shape, dtype), **kw)
    if run is None:
        return False
    for xi, acc in zip(inputs, accs):
        assert xi.shape == x.shape and xi.dtype == x.dtype
        out = np.empty(acc.shape, dtype)
        run(xi, out)
        n, c, h, w = acc.shape
        expected, overflows = naive.requantize(acc.reshape(n, c, h * w), bias, mult, shift, out_zp, qmin, qmax,
                                               acc_bits, False, dtype)
        assert overflows == 0  # fusion is only allowed where overflow is impossible
        np.testing.assert_array_equal(out, expected.reshape(acc.shape))
    return True


def _blocks_with_cache(x, x_zp, w, stride, pads, dilation, groups, w_cache):
    expected = naive.conv2d_acc(x, x_zp, w, stride, pads, dilation, groups)
    n_img, cout = expected.shape[:2]
    got = np.zeros((n_img, cout, expected.shape[2] * expected.shape[3]), np.int64)
    cg = cout // groups
    for n, g, c0, c1, acc, off in conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups, block_cols=5,
                                                     w_cache=w_cache):
        got[n, g * cg:(g + 1) * cg, c0:c1] = acc.astype(np.int64) + off[:, None]
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)


@settings(deadline=None, max_examples=examples(80))
@given(conv_case(), st.integers(1, 3), st.sampled_from([np.int8, np.uint8, np.int16, np.uint16]))
def test_gemm_blocks_plan_cache_follows_shape_dtype_and_zero_point(case, extra, other_dtype):
    """The plan kept in ``w_cache`` is reused for a repeated call and replaced (never reused stale) when the input
    shape, dtype or zero point changes."""
    x, x_zp, w, stride, pads, dilation, groups = case
    cache = {}
    for _ in range(2):
        _blocks_with_cache(x, x_zp, w, stride, pads, dilation, groups, cache)
    _blocks_with_cache(np.concatenate([x] * (1 + extra), axis=2), x_zp, w, stride, pads, dilation, groups, cache)
    _blocks_with_cache(np.concatenate([x, x[..., :extra]], axis=3), x_zp, w, stride, pads, dilation, groups, cache)
    info = np.iinfo(other_dtype)
    x2 = np.clip(x.astype(np.int64), info.min, info.max).astype(other_dtype)
    _blocks_with_cache(x2, int(info.max) - 1, w, stride, pads, dilation, groups, cache)
    _blocks_with_cache(x, x_zp, w, stride, pads, dilation, groups, cache)
