"""The int16-pair convolution kernel (kernels/conv_int16.py), through conv2d_gemm_blocks, == golden twin, bit for
bit: random geometries, the exactness bound just inside / just outside, extreme values and padding; each for every
instruction set's tiles the host can run (AVX-512BW hosts run the AVX2 tiles too)."""
import contextlib
import platform
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import conv_amx, conv_int16, conv_u8s8, cpu
from kernels.conv2d_gemm import conv2d_gemm, conv2d_gemm_blocks
from tests import naive
from tests.codegen import compile_for
from tests.test_kernels_conv2d import check_bound_runs, fused_case

pytestmark = pytest.mark.skipif(not conv_int16.AVAILABLE,
                                reason="needs AVX-512BW or AVX2 (the float paths run instead)")
# the instruction sets of the pairs this CPU runs (kernels.cpu), the widest first
HOST_ISAS = [name for name in conv_int16.ISAS if conv_int16.runs(name, cpu.features())]
per_isa = pytest.mark.parametrize("isa", HOST_ISAS)


@contextlib.contextmanager
def _using(isa):
    """conv_int16 (and so conv2d) running the tiles of instruction set ``isa``, for 8-bit activations too (the byte
    quads of conv_u8s8 and the AMX tiles of conv_amx, which would take most of them on VNNI and AMX CPUs, off)."""
    with mock.patch.object(conv_int16, "KERNELS", conv_int16.kernel_set(isa)), \
            mock.patch.object(conv_u8s8, "AVAILABLE", False), mock.patch.object(conv_amx, "AVAILABLE", False):
        yield


def _blocks(x, x_zp, w, stride, pads, dilation, groups, block_cols=8192):
    """conv2d_gemm_blocks assembled, with the dtype of every block's accumulator."""
    expected_shape = naive.conv2d_acc(x[:, :, :1, :1], 0, w[:, :, :1, :1], (1, 1), (0, 0, 0, 0), (1, 1),
                                      groups).shape[:2]
    out = {}
    kinds = set()
    cg = expected_shape[1] // groups
    for n, g, c0, c1, acc, off in conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups,
                                                     block_cols=block_cols):
        kinds.add(acc.dtype)
        for c in range(cg):
            out[(n, g * cg + c, c0)] = acc[c].astype(np.int64) + off[c]
    return out, kinds


def _check(x, x_zp, w, stride, pads, dilation, groups, int_path=True, block_cols=8192):
    expected = naive.conv2d_acc(x, x_zp, w, stride, pads, dilation, groups)
    n_img, cout, ho, wo = expected.shape
    got, kinds = _blocks(x, x_zp, w, stride, pads, dilation, groups, block_cols)
    flat = expected.reshape(n_img, cout, ho * wo)
    for (n, c, c0), row in got.items():
        np.testing.assert_array_equal(row, flat[n, c, c0:c0 + row.size])
    assert sum(r.size for r in got.values()) == expected.size
    assert kinds == ({np.dtype(np.int32)} if int_path else kinds - {np.dtype(np.int32)}), kinds
    np.testing.assert_array_equal(conv2d_gemm(x, x_zp, w, stride, pads, dilation, groups), expected)
    return expected


@st.composite
def case16(draw):
    groups = draw(st.integers(1, 2))
    cin_g = draw(st.integers(1, 5))  # odd counts: the last pair holds one channel
    cout_g = draw(st.sampled_from([1, 3, 4, 5, 12, 13, 17]))  # the 12-channel tile, the 4-channel tail, padding
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    top, left, bottom, right = pads
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - top - bottom), 9))
    wd = draw(st.integers(max(1, dw * (kw - 1) + 1 - left - right), 40))  # > 32 outputs per row: several tiles
    dtype, lo, hi = draw(naive.value_ranges([(np.int16, -32768, 32767), (np.uint16, 0, 65535), (np.int8, -128, 127),
                                            (np.uint8, 0, 255)]))
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), cin_g * groups, h, wd), dtype, lo, hi))
    x_zp = draw(naive.zero_points(lo, hi))
    # int8 weights; int16 weights small enough for the pair kernel at any shape here (45 taps * 1400 * 2**15 <
    # 2**31); and int16 weights at full range, which pass the kernel's bound only on small kernels
    wd, wlo, whi = draw(st.sampled_from([(np.int8, -128, 127), (np.int8, -128, 127), (np.int16, -1400, 1400),
                                         (np.int16, -32768, 32767)]))
    w = draw(naive.int_arrays((cout_g * groups, cin_g, kh, kw), wd, wlo, whi))
    return x, x_zp, w, (sh, sw), pads, (dh, dw), groups


def _admitted(x_dtype, w) -> bool:
    """Whether the pair kernel runs: ``max_c sum|w| * 2**(bits-1) <= 2**31 - 1`` (every centred activation and
    padding value of an in-range zero point is within +-2**(bits-1))."""
    rowsum = int(np.abs(w.astype(np.int64)).reshape(w.shape[0], -1).sum(axis=1).max())
    return rowsum << (8 * np.dtype(x_dtype).itemsize - 1) <= (1 << 31) - 1


@per_isa
@settings(deadline=None, max_examples=examples(150))
@given(case16(), st.sampled_from([1, 7, 8192]))
def test_conv_int16_matches_twin(isa, case, block_cols):
    with _using(isa):
        _check(*case, int_path=_admitted(case[0].dtype, case[2]), block_cols=block_cols)


def test_conv_int16_plan_bounds():
    # max_c sum|w| * 32768 <= 2**31 - 1  <=>  sum|w| <= 65535; centred padding within int16
    assert conv_int16.plan(np.int16, None, 65535) and not conv_int16.plan(np.int16, None, 65536)
    assert conv_int16.plan(np.uint16, -32768, 1) and conv_int16.plan(np.uint16, 32767, 1)
    assert not conv_int16.plan(np.uint16, -32769, 1) and not conv_int16.plan(np.int16, 32768, 1)
    # 8-bit activations: |v| <= 128 (centred), or the padding value when it is larger
    lim8 = ((1 << 31) - 1) // 128
    for dt in (np.int8, np.uint8):
        assert conv_int16.plan(dt, None, lim8) and not conv_int16.plan(dt, None, lim8 + 1)
        assert conv_int16.plan(dt, -128, lim8) and not conv_int16.plan(dt, -129, lim8)
    assert conv_int16.plan(np.int8, 1000, ((1 << 31) - 1) // 1000) and not conv_int16.plan(np.int8, 1000, lim8)
    assert not conv_int16.plan(np.int32, None, 1)
    with mock.patch.object(conv_int16, "AVAILABLE", False):
        assert not conv_int16.plan(np.int16, None, 1)


@per_isa
@pytest.mark.parametrize("dtype,lo,hi", [(np.int16, -32768, 32767), (np.uint16, 0, 65535)])
def test_conv_int16_at_the_bound(isa, dtype, lo, hi):
    # every term at its extreme: all v = -32768 (x = lo, centred), sum|w| = 65535 -> |acc| = 2**31 - 32768,
    # the largest the proof admits; one more unit of weight and the float paths take over (still exact)
    cin = 58  # 58 channels x 3x3 = 522 taps: 516 of 127 and the remainder make sum|w| = 65535 / 65536
    for total, int_path in ((65535, True), (65536, False)):
        w = np.zeros((3, cin, 3, 3), np.int16)
        flat = w.reshape(3, -1)
        flat[:, :516] = 127
        flat[:, 516] = total - 516 * 127
        flat[1] *= -1  # a negative-weight channel: acc = +32768 * 65535
        assert np.abs(flat).sum(axis=1).max() == total
        x = np.full((1, cin, 4, 5), lo, dtype)
        center = 32768 if dtype == np.uint16 else 0
        x2 = np.where(np.indices(x.shape).sum(axis=0) % 2 == 0, lo, hi).astype(dtype)
        with _using(isa):
            _check(x, center, w.astype(np.int16), (1, 1), (0, 0, 0, 0), (1, 1), 1, int_path=int_path)
            # padding cells at the extremes of the centred range, and alternating extreme inputs
            for zp in (lo, hi):
                _check(x2, zp, w.astype(np.int16), (1, 1), (1, 1, 1, 1), (1, 1), 1, int_path=int_path)


@per_isa
@pytest.mark.parametrize("dtype,lo,center", [(np.int8, -128, 0), (np.uint8, 0, 128)])
def test_conv_int16_8bit_at_the_bound(isa, dtype, lo, center):
    # 8-bit activations all at the centred extreme -128 against int16 weights: 512 channels of +-32767 make
    # sum|w| = 16776704 <= (2**31 - 1) // 128, |acc| = 128 * 16776704 = 2**31 - 65536: exact in int32
    cin = 512
    w = np.full((2, cin, 1, 1), 32767, np.int16)
    w[1] *= -1
    x = np.full((1, cin, 3, 40), lo, dtype)
    with _using(isa):
        acc = _check(x, center, w, (1, 1), (0, 0, 0, 0), (1, 1), 1)
        _check(x, lo + 255, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)  # padding at the other extreme (+127)
    assert int(np.abs(acc).max()) == 128 * 32767 * cin


@per_isa
def test_conv_int16_padding_outside_int16_falls_back(isa):
    x = np.full((1, 4, 5, 5), 7, np.uint16)
    w = np.ones((2, 4, 3, 3), np.int8)
    with _using(isa):
        _check(x, -1, w, (1, 1), (1, 1, 1, 1), (1, 1), 1, int_path=False)  # pad = -1 - 32768
        _check(x, -1, w, (1, 1), (0, 0, 0, 0), (1, 1), 1, int_path=True)   # no padding: admitted
        x = np.full((1, 4, 5, 5), -7, np.int16)
        _check(x, 32768, w, (1, 1), (1, 0, 0, 1), (1, 1), 1, int_path=False)


def test_pack_weights_pairs():
    w = np.arange(-20, 25).astype(np.int8).reshape(5, 3, 3, 1)  # 5 channels, 3 inputs (odd), 3x1 taps
    p = conv_int16.pack_weights(w, 1)
    assert p.shape == (1, 2 * 3, 8)
    lo = (p << 16) >> 16
    hi = p >> 16
    for c in range(5):
        for t in range(3):
            assert lo[0, t, c] == w[c, 0, t, 0] and hi[0, t, c] == w[c, 1, t, 0]
            assert lo[0, 3 + t, c] == w[c, 2, t, 0] and hi[0, 3 + t, c] == 0
    assert not p[0, :, 5:].any()


def _requantized(case, out_dtype=None):
    """conv2d_gemm_requantized of a fused_case, checked against the twins; whether it fused."""
    from kernels.conv2d_gemm import conv2d_gemm_requantized
    x, x_zp, wt, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax, acc_bits, dtype = case
    acc = naive.conv2d_acc(x, x_zp, wt, stride, pads, dilation, groups)
    out = np.empty(acc.shape, dtype)
    if not conv2d_gemm_requantized(x, x_zp, wt, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin,
                                   qmax, acc_bits, out, block_cols=7):
        return False
    n, c, h, w = acc.shape
    expected, overflows = naive.requantize(acc.reshape(n, c, h * w), bias, mult, shift, out_zp, qmin, qmax,
                                           acc_bits, False, dtype)
    assert overflows == 0  # fusion is only allowed where overflow is impossible
    np.testing.assert_array_equal(out, expected.reshape(acc.shape))
    return True


@per_isa
@settings(deadline=None, max_examples=examples(200))
@given(fused_case(case16()), st.booleans())
def test_gemm_requantized_matches_twins(isa, case, wide_acc):
    if wide_acc:  # no accumulator limit: fusion then only needs every saturation bound (more cases fuse)
        case = case[:13] + (64,) + case[14:]
    with _using(isa):
        _requantized(case)


@per_isa
@settings(deadline=None, max_examples=examples(60))
@given(fused_case(case16()), st.integers(1, 3))
def test_gemm_requantized_bound_run_reused(isa, case, crop):
    """What a graph node keeps, one bound run, gives the twins' result on other data of the same shape and dtype
    (called repeatedly); a wider input and the other 16-bit dtype get their own bind, also exact."""
    with _using(isa):
        _bound_runs(case, crop)


def _bound_runs(case, crop):
    from kernels.conv2d_gemm import bind_gemm_requantized
    x, x_zp = case[0], case[1]
    if not check_bound_runs(bind_gemm_requantized, case, [x, ~x, x], block_cols=7):  # ~x: every element changed
        return
    wider = np.concatenate([x, x[..., :crop]], axis=3)  # more columns: other planes, offsets and rows per block
    # the fusion proof depends on the dtypes, zero point, weights and requantization only: the wider input fuses
    assert check_bound_runs(bind_gemm_requantized, (wider,) + case[1:], [wider, ~wider], block_cols=7)
    other = (x.astype(np.int32) + (32768 if x.dtype == np.int16 else -32768)).astype(
        np.uint16 if x.dtype == np.int16 else np.int16)  # the other 16-bit dtype: another centre
    check_bound_runs(bind_gemm_requantized, (other, x_zp ^ 1) + case[2:], [other, ~other], block_cols=7)


def test_gemm_requantized_refuses_what_it_cannot_prove():
    from kernels.conv2d_gemm import conv2d_gemm_requantized
    x = np.full((1, 2, 4, 40), -32768, np.int16)
    w = np.full((3, 2, 1, 1), 127, np.int8)
    one = np.ones(3, np.int64)
    args = (x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 1, 0 * one, one << 30, one * 31, 0, -32768, 32767)
    out = np.empty((1, 3, 4, 40), np.int16)
    # |acc| <= 32768 * 254 < 2**23: a 24-bit accumulator is proven safe, a 23-bit one is not
    assert not conv2d_gemm_requantized(*args, 23, out)
    assert conv2d_gemm_requantized(*args, 24, out)
    assert (out == -32768).all()
    # multiplier 1 at shift 62 (a dead channel): no saturation bound fits int64, the accumulator's reach does
    assert conv2d_gemm_requantized(*args[:7], 0 * one, 0 * one + 1, 62 * one, 0, -32768, 32767, 64, out)
    assert (out == 0).all()  # -32768 * 254 * 2**-62 rounds to 0
    x8 = np.full(x.shape, -128, np.int8)  # 8-bit activations fuse too: -128 * 254 * 2**-1 = -16256 -> -128
    out8 = np.empty(out.shape, np.int8)
    assert conv2d_gemm_requantized(x8, *args[1:11], -128, 127, 64, out8) and (out8 == -128).all()
    with pytest.raises(ValueError, match="out must have shape"):
        conv2d_gemm_requantized(*args, 64, out[:, :2])


@pytest.mark.parametrize("big", [1 << 15, 40000, -(1 << 15) - 1])
def test_weights_outside_int16_take_the_float_path(big):
    """plan's bound admits a row sum up to 65535, but a single weight beyond int16 cannot be packed: such a
    convolution (int32 weight array) must leave the int16-pair path and still be exact."""
    x = np.full((1, 1, 2, 40), 3, np.int16)
    w = np.array([[[[big]]], [[[-7]]]], np.int32)
    assert not conv_int16.weights_fit(w) and conv_int16.weights_fit(w[1:])
    _check(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 1, int_path=False)
    mult, shift = np.array([1 << 30, 1 << 30]), np.array([31, 31])
    case = (x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 1, np.zeros(2, np.int64), mult, shift, 0, -(1 << 31),
            (1 << 31) - 1, 48, np.int32)
    assert not _requantized(case)  # the fused path declines too


HASWELL_TILES = """
from kernels import conv_int16
tiles = CompileOnly(conv_int16.kernel_set("avx2").tiles_compact.py_func.__globals__["_tiles"].py_func)
tiles(np.zeros(64, np.int32), np.array([0, 3], np.int64), np.ones((2, 8), np.int32), 16, np.zeros((8, 16), np.int32))
llvm, asm = tiles.llvm(), tiles.asm()
assert "llvm.x86.avx2.pmadd.wd" in llvm and "avx512" not in llvm
assert "vpmaddwd" in asm and "zmm" not in asm and not re.search("ymm(1[6-9]|[23][0-9])|[{]", asm)
print("ok")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 code generation")
def test_avx2_tiles_are_avx2_code(tmp_path):
    """The AVX2 tiles compiled for an AVX2-only CPU (Haswell) are AVX2 code -- no zmm register, no ymm16-31, no
    EVEX mask, no AVX-512 intrinsic. Compiled only, never run (tests/codegen.py); the per-set tests above run the
    AVX2 tiles wherever the CPU has AVX2."""
    res = compile_for("haswell", "+avx2", HASWELL_TILES, tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]
