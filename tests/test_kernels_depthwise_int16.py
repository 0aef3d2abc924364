"""The int16 tap-pair depthwise kernel (kernels/depthwise_int16.py), through kernels.depthwise.depthwise, == golden
twin (tests/naive.py conv2d_acc with groups = channels, and naive.requantize for the fused requantization), bit
for bit: random geometries (kernel sizes, strides, dilations, padding, channel multipliers, rows shorter than a
vector and several tiles long), the exactness bound just inside / just outside, padding values at the int16 edges;
each for every instruction set's tiles the host can run (AVX-512BW hosts run the AVX2 tiles too)."""
import contextlib
import platform
from unittest import mock

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import depthwise, depthwise_int16
from kernels.requantize import saturation_bounds
from tests import naive
from tests.codegen import compile_for
from tests.test_kernels_conv_int16 import per_isa

pytestmark = pytest.mark.skipif(not depthwise_int16.AVAILABLE,
                                reason="needs AVX-512BW or AVX2 (the float path runs instead)")


@contextlib.contextmanager
def _using(isa):
    """depthwise_int16 running the tiles of instruction set ``isa``, at column stride 2 too (where
    kernels.depthwise_s2 would take it: off here)."""
    with mock.patch.object(depthwise_int16, "KERNELS", depthwise_int16.kernel_set(isa)), \
            mock.patch.object(depthwise, "column_pairs", return_value=None):
        yield

X16 = [(np.int16, -32768, 32767), (np.uint16, 0, 65535)]
X8 = [(np.int8, -128, 127), (np.uint8, 0, 255)]


def _run(x, x_zp, wt, stride, pads, dilation, out, fuse=False, rq=None):
    """kernels.depthwise.depthwise as its callers call it (float64 weights: 16-bit activations never take float32),
    and whether the int16 kernel ran."""
    wf = wt.reshape(wt.shape[0], -1).astype(np.float64)
    kh, kw = wt.shape[2:]
    with mock.patch.object(depthwise_int16, "bind", wraps=depthwise_int16.bind) as spy:
        if fuse:
            depthwise.depthwise(x, x_zp, wf, kh, kw, stride, pads, dilation, out, True, *rq)
        else:
            depthwise.depthwise(x, x_zp, wf, kh, kw, stride, pads, dilation, out)
    return spy.called


def _check(x, x_zp, wt, stride, pads, dilation, int_path=True):
    expected = naive.conv2d_acc(x, x_zp, wt, stride, pads, dilation, x.shape[1])
    for dt in (np.int64, np.int32):  # the int32 result conv2d_direct's compact mode asks for where it fits
        if dt is np.int32 and np.abs(expected).max(initial=0) >= 1 << 31:
            continue
        out = np.empty(expected.shape, dt)
        assert _run(x, x_zp, wt, stride, pads, dilation, out) == int_path
        np.testing.assert_array_equal(out, expected)
    return expected


def _check_fused(x, x_zp, wt, stride, pads, dilation, bias, mult, shift, out_zp, qmin, qmax, dtype):
    acc = naive.conv2d_acc(x, x_zp, wt, stride, pads, dilation, x.shape[1])
    lims = saturation_bounds(mult, shift, out_zp, qmin, qmax)
    if lims.size and int(lims.min()) == 0:
        return False  # no branch-free requantization (the caller does not fuse)
    out = np.empty(acc.shape, dtype)
    assert _run(x, x_zp, wt, stride, pads, dilation, out, True, (bias, mult, shift, lims, out_zp, qmin, qmax)) \
        == _admitted(wt, x.dtype, stride)
    n, c, h, w = acc.shape
    expected, overflows = naive.requantize(acc.reshape(n, c, h * w), bias, mult, shift, out_zp, qmin, qmax, 64,
                                           False, dtype)
    assert overflows == 0
    np.testing.assert_array_equal(out, expected.reshape(acc.shape))
    return True


@st.composite
def dw16_case(draw):
    c = draw(st.integers(1, 4))
    per = draw(st.integers(1, 2))  # channel multiplier
    kh, kw = draw(st.sampled_from([(3, 3), (5, 5), (3, 3), (5, 5), (1, 1), (1, 2), (3, 1), (2, 3), (4, 4), (7, 7)]))
    sh = draw(st.sampled_from([1, 2, 1, 3]))
    sw = draw(st.sampled_from([sh, 1, 2]))
    dh, dw = draw(st.sampled_from([(1, 1), (1, 1), (2, 2), (1, 2), (3, 1)]))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h_min = max(1, dh * (kh - 1) + 1 - pads[0] - pads[2])  # up to 19 (7x7, dilation 3)
    h = draw(st.integers(h_min, max(h_min, 12)))
    # rows shorter than one 16-lane vector up to several 64-output tiles
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pads[1] - pads[3]), 150))
    xd, xlo, xhi = draw(naive.value_ranges(X16 + X8))
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), c, h, w), xd, xlo, xhi))
    wd, wlo, whi = draw(st.sampled_from([(np.int8, -128, 127), (np.int8, -8, 7), (np.int16, -2000, 2000)]))
    wt = draw(naive.int_arrays((c * per, 1, kh, kw), wd, wlo, whi))
    return x, draw(naive.zero_points(xlo, xhi)), wt, (sh, sw), pads, (dh, dw)


def _admitted(wt, x_dtype, stride) -> bool:
    """Whether the int16-pair kernel runs: the bound, and for 8-bit activations at least PAIR_MIN_TAPS_8BIT taps
    at column stride 1 (the centred padding stays within +-2**15 for 16-bit and +-128 for 8-bit zero points)."""
    v = 1 << (8 * np.dtype(x_dtype).itemsize - 1)
    taps = wt.shape[2] * wt.shape[3]
    if np.dtype(x_dtype).itemsize == 1 and (taps < depthwise.PAIR_MIN_TAPS_8BIT or stride[1] != 1):
        return False
    return int(np.abs(wt.astype(np.int64)).reshape(wt.shape[0], -1).sum(axis=1).max()) * v <= (1 << 31) - 1


@per_isa
@settings(deadline=None, max_examples=examples(200))
@given(dw16_case())
def test_depthwise_int16_matches_twin(isa, case):
    with _using(isa):
        _check(*case, int_path=_admitted(case[2], case[0].dtype, case[3]))


@per_isa
@settings(deadline=None, max_examples=examples(150))
@given(dw16_case(), st.data())
def test_depthwise_int16_requantized_matches_twin(isa, case, data):
    cout = case[2].shape[0]
    ms = [data.draw(naive.multipliers()) for _ in range(cout)]
    mult = np.array([m for m, _ in ms], np.int64)
    shift = np.array([r for _, r in ms], np.int64)
    bias = np.array([data.draw(st.integers(-2 ** 40, 2 ** 40)) for _ in range(cout)], np.int64)
    dtype, out_zp, qmin, qmax = data.draw(naive.out_params(naive.out_ranges_like(case[0].dtype)))
    # a shift past the saturation bound's reach (r > 62 - bits of the output range) leaves a channel without a
    # bound, which the caller never fuses: cap it there in most examples, so most examples compare
    if data.draw(st.integers(0, 4)):
        shift = naive.fusable_shifts(shift, out_zp, qmin, qmax)
    with _using(isa):
        fused = _check_fused(*case, bias, mult, shift, out_zp, qmin, qmax, dtype)
    event(f"requantization fused: {fused}")


def _bound_case(last):
    """One channel, 1x3 kernel (32767, 32767, last): sum|w| = 65534 + |last|."""
    return np.array([32767, 32767, last], np.int16).reshape(1, 1, 1, 3)


@per_isa
@pytest.mark.parametrize("dtype,lo", [(np.int16, -32768), (np.uint16, 0)])
@pytest.mark.parametrize("x_zp_of", ["lo", "hi", "mid"])
def test_depthwise_int16_at_the_bound(isa, dtype, lo, x_zp_of):
    """sum|w| * 2**15 == 2**31 - 1 (sum|w| = 65535) is admitted and exact; one more falls back to float64."""
    info = np.iinfo(dtype)
    x_zp = {"lo": int(info.min), "hi": int(info.max), "mid": int(info.min) + (1 << 15)}[x_zp_of]
    x = np.full((1, 1, 3, 40), lo, dtype)  # centred value -2**15 everywhere
    x[0, 0, 1, ::3] = info.max
    for last, int_path in ((1, True), (-1, True), (2, False)):
        w = _bound_case(last)
        assert (65534 + abs(last)) * (1 << 15) <= (1 << 31) - 1 or not int_path
        with _using(isa):
            _check(x, x_zp, w, (1, 1), (0, 1, 0, 1), (1, 1), int_path=int_path)
    # the bound itself
    assert depthwise_int16.plan(dtype, 0, 65535) and not depthwise_int16.plan(dtype, 0, 65536)


@per_isa
def test_depthwise_int16_reaches_the_int32_extreme(isa):
    """Centred inputs all -2**15 and sum|w| = 65535: the int32 pair sums reach -65535 * 2**15 exactly."""
    x = np.full((1, 1, 1, 37), -32768, np.int16)
    w = _bound_case(1)
    with _using(isa):
        acc = _check(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1))
    assert int(acc.min()) == -65535 * 32768


@pytest.mark.parametrize("dtype,x_zp", [(np.int16, -32768), (np.int16, 32767), (np.uint16, 0), (np.uint16, 65535),
                                        (np.int16, 0), (np.uint16, 32768)])
@pytest.mark.parametrize("stride", [(1, 1), (2, 2), (2, 1), (1, 2)])
@per_isa
def test_depthwise_int16_padding_at_the_edges(isa, dtype, x_zp, stride):
    """Padding values (x_zp - center) at -2**15 and 2**15 - 1, extreme inputs and weights, 5x5 and 3x3."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(x_zp & 0xFFFF)
    x = rng.choice(np.array([info.min, info.max, 0 if dtype == np.int16 else 1 << 15], np.int64),
                   (1, 3, 9, 21)).astype(dtype)
    for k in (3, 5):
        w = rng.choice(np.array([-128, 127], np.int64), (3, 1, k, k)).astype(np.int8)
        pads = (k // 2,) * 4
        lims_args = (np.array([5, -7, 2 ** 40]), np.array([1 << 30] * 3), np.array([40, 31, 45]))
        with _using(isa):
            _check(x, x_zp, w, stride, pads, (1, 1))
            assert _check_fused(x, x_zp, w, stride, pads, (1, 1), *lims_args, -3, -32768, 32767, np.int16)


@pytest.mark.parametrize("dtype,x_zp", [(np.int8, -128), (np.int8, 127), (np.uint8, 0), (np.uint8, 255)])
@pytest.mark.parametrize("stride", [(1, 1), (2, 1), (2, 2)])
@per_isa
def test_depthwise_int16_8bit_extremes(isa, dtype, x_zp, stride):
    """8-bit activations on the pair kernel (5x5; column stride 2 takes the float loop): extreme inputs, int16
    weights at +-32767 and padding values at the ends of the centred range (+-128); exact against the twin, fused
    and not."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(x_zp & 0xFF)
    x = rng.choice(np.array([info.min, info.max], np.int64), (1, 3, 9, 21)).astype(dtype)
    w = rng.choice(np.array([-32767, 32767], np.int64), (3, 1, 5, 5)).astype(np.int16)
    rq = (np.array([5, -7, 2 ** 40]), np.array([1 << 30] * 3), np.array([40, 31, 45]))
    with _using(isa):
        _check(x, x_zp, w, stride, (2, 2, 2, 2), (1, 1), int_path=stride[1] == 1)
        assert _check_fused(x, x_zp, w, stride, (2, 2, 2, 2), (1, 1), *rq, -3, -128, 127, np.int8)


def test_depthwise_int16_refuses_what_it_cannot_prove():
    x = np.zeros((1, 1, 4, 4), np.int16)
    # a weight outside int16 (sum|w| would pass the bound's test on its own)
    w = np.zeros((1, 1, 3, 3), np.int64)
    w[0, 0, 1, 1] = 40000
    _check(x, 0, w, (1, 1), (1, 1, 1, 1), (1, 1), int_path=False)
    # 8-bit activations keep the float32 path below 3x3 and at column stride 2 (faster there), take the pair kernel
    # from 3x3 at column stride 1 on (row stride 2 included)
    out = np.empty((1, 1, 4, 4), np.int64)
    x8 = x.astype(np.int8)
    assert not _run(x8, 0, np.ones((1, 1, 2, 3), np.int8), (1, 1), (0, 1, 1, 1), (1, 1), out)
    assert _run(x8, 0, np.ones((1, 1, 3, 3), np.int8), (1, 1), (1, 1, 1, 1), (1, 1), out)
    assert _run(x8, 0, np.ones((1, 1, 5, 5), np.int8), (1, 1), (2, 2, 2, 2), (1, 1), out)
    assert _run(x8, 0, np.ones((1, 1, 3, 3), np.int8), (2, 1), (1, 1, 1, 1), (1, 1), np.empty((1, 1, 2, 4),
                                                                                              np.int64))
    assert not _run(x8, 0, np.ones((1, 1, 3, 3), np.int8), (2, 2), (1, 1, 1, 1), (1, 1), np.empty((1, 1, 2, 2),
                                                                                                  np.int64))
    # neither AVX-512BW nor AVX2: the float path
    with mock.patch.object(depthwise_int16, "AVAILABLE", False):
        _check(x, 0, np.ones((1, 1, 3, 3), np.int8), (1, 1), (1, 1, 1, 1), (1, 1), int_path=False)


def test_depthwise_int16_weight_cache():
    """The packed weights are kept per weight array, and leave with it."""
    x = np.arange(2 * 30 * 30, dtype=np.int16).reshape(1, 2, 30, 30) * 7
    w = np.array([[1, -2, 3], [4, 5, -6], [7, 8, 9]] * 2, np.int8).reshape(2, 1, 3, 3)
    wf = w.reshape(2, -1).astype(np.float64)
    expected = naive.conv2d_acc(x, -5, w, (1, 1), (1, 1, 1, 1), (1, 1), 2)
    before = len(depthwise._PREP)
    for _ in range(2):
        out = np.empty(expected.shape, np.int64)
        depthwise.depthwise(x, -5, wf, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), out)
        np.testing.assert_array_equal(out, expected)
        assert len(depthwise._PREP) == before + 1
    wf2 = -wf  # another array: its own entry
    out = np.empty(expected.shape, np.int64)
    depthwise.depthwise(x, -5, wf2, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), out)
    np.testing.assert_array_equal(out, -expected)
    del wf, wf2
    assert len(depthwise._PREP) == before


def test_depthwise_int16_pairing():
    """Taps kx and kx + s share a word (s = sw / gcd(dw, sw)); a tap left alone gets a zero high weight."""
    wf = np.arange(1, 26, dtype=np.float64).reshape(1, 25)
    pa, w32, sumw, s_max, d = depthwise_int16.prepare(wf, 5, 5, 1, 1)
    assert d == 1 and list(pa[:3]) == [0, 2, 4] and len(pa) == 15 and s_max == int(sumw[0]) == 325
    assert [(int(v) & 0xFFFF, int(v) >> 16) for v in w32[0, :3]] == [(1, 2), (3, 4), (5, 0)]
    pa, w32, _, _, d = depthwise_int16.prepare(wf, 5, 5, 2, 1)  # stride 2: (0, 2), (1, 3), (4, -)
    assert d == 1 and list(pa[:3]) == [0, 1, 4]
    assert [(int(v) & 0xFFFF, int(v) >> 16) for v in w32[0, :3]] == [(1, 3), (2, 4), (5, 0)]
    _, _, _, _, d = depthwise_int16.prepare(wf, 5, 5, 1, 2)
    assert d == 2


HASWELL_TILES = """
from kernels import depthwise_int16
fresh = CompileOnly(depthwise_int16.kernel_set("avx2").depthwise16.py_func)
x = np.arange(-40, 40, dtype=np.int16).reshape(1, 1, 1, 80)
prep = depthwise_int16.prepare(np.array([[1.0, -2.0, 3.0]]), 1, 3, 1, 1)
out = np.empty((1, 1, 1, 78), np.int64)
depthwise_int16.KERNELS = type("K", (), {"isa": depthwise_int16.ISAS["avx2"], "depthwise16": fresh})
run = depthwise_int16.bind(x.shape, x.dtype, 0, prep, 1, 3, (1, 1), (0, 0, 0, 0), (1, 1), out.shape)
run(x, out)  # compiles the tiles for the arguments bind passes; runs nothing compiled for Haswell
llvm, asm = fresh.llvm(), fresh.asm()
assert "llvm.x86.avx2.pmadd.wd" in llvm and "avx512" not in llvm
assert "vpmaddwd" in asm and "zmm" not in asm and not re.search("ymm(1[6-9]|[23][0-9])|[{]", asm)
print("ok")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 code generation")
def test_avx2_tiles_are_avx2_code(tmp_path):
    """The AVX2 depthwise tiles compiled for an AVX2-only CPU (Haswell) are AVX2 code -- no zmm register, no
    ymm16-31, no EVEX mask, no AVX-512 intrinsic. Compiled only, never run (tests/codegen.py); the per-set tests
    run the AVX2 tiles wherever the CPU has AVX2."""
    res = compile_for("haswell", "+avx2", HASWELL_TILES, tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


@settings(deadline=None, max_examples=examples(200))
@given(st.data())
def test_depthwise_int16_row_blocks(data):
    """The row blocks cover the output rows in order, at most rows_blk each, every row's kernel rows over input
    rows inside its block's pairs, and cost no more (tiles times pairs plus BLOCK_COST per block) than one block
    per set of kernel rows, the partition before the cost model."""
    kh, kw = data.draw(st.sampled_from([(3, 3), (5, 5), (7, 7), (3, 1), (1, 5)]))
    sh, dh = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
    top, bottom = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    h = data.draw(st.integers(max(1, dh * (kh - 1) + 1 - top - bottom), 40))
    ho = (top + h + bottom - dh * (kh - 1) - 1) // sh + 1
    wq, rows_blk = data.draw(st.integers(1, 120)), data.draw(st.integers(1, 40))
    wo = data.draw(st.integers(1, wq))
    pa = depthwise_int16.prepare(np.ones((1, kh * kw)), kh, kw, 1, 1)[0]
    first = np.searchsorted(pa // kw, np.arange(kh + 1))
    blocks = depthwise_int16.row_blocks(ho, h, kh, kw, sh, top, dh, pa, rows_blk, wq, wo)
    assert blocks[0, 0] == 0 and blocks[-1, 1] == ho and (blocks[1:, 0] == blocks[:-1, 1]).all()
    assert ((blocks[:, 1] > blocks[:, 0]) & (blocks[:, 1] - blocks[:, 0] <= rows_blk)).all()
    need = []
    for oh in range(ho):
        rows = [ky for ky in range(kh) if 0 <= oh * sh - top + ky * dh < h]
        need.append((int(first[rows[0]]), int(first[rows[-1] + 1])) if rows else (0, 0))
        b = blocks[(blocks[:, 0] <= oh) & (oh < blocks[:, 1])][0]
        assert not rows or b[2] <= need[-1][0] and need[-1][1] <= b[3]

    def cost(parts):
        return sum(-(-((oh1 - oh0 - 1) * wq + wo) // depthwise_int16.NB) * (k1 - k0) + depthwise_int16.BLOCK_COST
                   for oh0, oh1, k0, k1 in parts)
    old = []
    for oh in range(ho):
        if old and old[-1][2:] == list(need[oh]) and oh - old[-1][0] < rows_blk:
            old[-1][1] = oh + 1
        else:
            old.append([oh, oh + 1, *need[oh]])
    assert cost(blocks.tolist()) <= cost(old)
