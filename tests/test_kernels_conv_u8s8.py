"""The byte-quad convolution kernel (kernels/conv_u8s8.py, AVX-512 VNNI vpdpbusd) == golden twins, bit for bit:
the plain int64 sum (naive.conv2d_acc) and the kernel's own formulation with int32 lanes that wrap
(naive.conv2d_acc_u8s8); random geometries, uint8 and int8 activations, zero points, extreme multipliers and
saturation through the fused requantization; the exactness bound just inside and just outside; and the compiled
tile really is vpdpbusd code (a regression to scalar or pair code fails)."""
from unittest import mock

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import conv_amx, conv_int16, conv_u8s8, cpu
from kernels.conv2d_gemm import (bind_gemm_requantized, bind_matmul_requantized, conv2d_gemm, conv2d_gemm_blocks,
                                 int_kernel)
from tests import naive
from tests.codegen import compile_for
from tests.test_kernels_conv2d import check_bound_runs, fused_case


pytestmark = pytest.mark.skipif(not conv_u8s8.AVAILABLE, reason="needs AVX-512 VNNI or AVX-VNNI (the int16 pairs run instead)")
LIMIT = (1 << 31) - 1
# the byte-quad instruction sets this CPU runs (kernels.cpu: the AVX-VNNI set also on AVX-512 VNNI with VL)
HOST_SETS = [name for name in conv_u8s8.ISAS if conv_u8s8.runs(name, cpu.features())] if conv_u8s8.AVAILABLE else []
per_set = pytest.mark.parametrize("isa", HOST_SETS)


@pytest.fixture(autouse=True, scope="module")
def _byte_quads_not_amx():
    """The AMX tiles (kernels/conv_amx.py) off: on AMX CPUs they would take the convolutions of 16+ channels."""
    with mock.patch.object(conv_amx, "AVAILABLE", False):
        yield


RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def _rowsum(w) -> int:
    return int(np.abs(w.astype(np.int64)).reshape(w.shape[0], -1).sum(axis=1).max(initial=0))


def _check(x, x_zp, w, stride, pads, dilation, groups, quads=True, block_cols=8192, twin=True):
    """conv2d_gemm_blocks (and conv2d_gemm) == the twins; ``quads``: whether the byte-quad kernel must be the one
    that ran."""
    padded = any(pads)
    assert (int_kernel(x.dtype, x_zp, padded, w, _rowsum(w)) is conv_u8s8) == quads
    expected = naive.conv2d_acc(x, x_zp, w, stride, pads, dilation, groups)
    if twin:
        np.testing.assert_array_equal(naive.conv2d_acc_u8s8(x, x_zp, w, stride, pads, dilation, groups), expected)
    n_img, cout, ho, wo = expected.shape
    cg = cout // groups
    got = np.zeros((n_img, cout, ho * wo), np.int64)
    kinds = set()
    for n, g, c0, c1, acc, off in conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups,
                                                     block_cols=block_cols):
        kinds.add(acc.dtype)
        got[n, g * cg:(g + 1) * cg, c0:c1] = acc.astype(np.int64) + off[:, None]
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)
    if quads:
        assert kinds == {np.dtype(np.int32)}
    np.testing.assert_array_equal(conv2d_gemm(x, x_zp, w, stride, pads, dilation, groups), expected)
    return expected


@st.composite
def case8(draw):
    groups = draw(st.integers(1, 2))
    cin_g = draw(st.integers(3, 10))  # partial last quads (3, 5, 6, 7, 9, 10 channels) and full ones
    cout_g = draw(st.sampled_from([1, 3, 4, 5, 12, 13, 17]))  # the 12-channel tile, the 4-channel tail, padding
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    top, left, bottom, right = pads
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - top - bottom), 7))
    wd = draw(st.integers(max(1, dw * (kw - 1) + 1 - left - right), 40))  # > 32 outputs per row: several tiles
    dtype = draw(st.sampled_from([np.uint8, np.int8]))
    lo, hi = RANGES[np.dtype(dtype)]
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), cin_g * groups, h, wd), dtype, lo, hi))
    x_zp = draw(naive.zero_points(lo, hi))
    w = draw(naive.int_arrays((cout_g * groups, cin_g, kh, kw), np.int8, -128, 127))
    return x, x_zp, w, (sh, sw), pads, (dh, dw), groups


@per_set
@settings(deadline=None, max_examples=examples(120))
@given(case=case8(), block_cols=st.sampled_from([1, 7, 8192]))
def test_conv_u8s8_matches_twins(isa, case, block_cols):
    with mock.patch.object(conv_u8s8, "KERNELS", conv_u8s8.kernel_set(isa)):
        _check(*case, block_cols=block_cols)


@per_set
@settings(deadline=None, max_examples=examples(150))
@given(case=fused_case(case8()), wide_acc=st.booleans())
def test_conv_u8s8_requantized_matches_twins(isa, case, wide_acc):
    """The fused requantization on the byte quads (signed and extreme multipliers, saturating outputs, biases at
    the accumulator's edge), one bound run reused on other data of the same shape."""
    if wide_acc:
        case = case[:13] + (64,) + case[14:]
    x = case[0]
    assert int_kernel(x.dtype, case[1], any(case[4]), case[2], _rowsum(case[2])) is conv_u8s8
    lo, hi = RANGES[x.dtype]
    flipped = (lo + hi - x.astype(np.int64)).astype(x.dtype)  # every element changed, still in range
    with mock.patch.object(conv_u8s8, "KERNELS", conv_u8s8.kernel_set(isa)):
        check_bound_runs(bind_gemm_requantized, case, [x, flipped], block_cols=7)


@settings(deadline=None, max_examples=examples(80))
@given(st.data())
def test_matmul_on_quads_matches_twins(data):
    """Gemm rows (M, K) @ constant int8 weights (K, N) as a 1x1 convolution on the byte quads, requantized per
    column (per-tensor multipliers broadcast), == naive.int_matmul + naive.requantize."""
    m, k, n = data.draw(st.integers(1, 40)), data.draw(st.integers(3, 70)), data.draw(st.integers(1, 30))
    dtype = data.draw(st.sampled_from([np.uint8, np.int8]))
    lo, hi = RANGES[np.dtype(dtype)]
    a = data.draw(naive.int_arrays((m, k), dtype, lo, hi))
    x_zp = data.draw(naive.zero_points(lo, hi))
    w = data.draw(naive.int_arrays((k, n), np.int8, -128, 127))
    per_tensor = data.draw(st.booleans())
    mult, shift = data.draw(naive.multiplier_arrays(1 if per_tensor else n, allow_negative=True))
    dt, out_zp, qmin, qmax = data.draw(naive.out_params())
    shift = naive.fusable_shifts(shift, out_zp, qmin, qmax)
    bias = np.array([data.draw(st.integers(-2 ** 20, 2 ** 20)) for _ in range(n)], np.int64)
    out = np.empty((m, n), dt)
    run = bind_matmul_requantized(a, x_zp, w, bias, mult, shift, out_zp, qmin, qmax, 64, out, block_cols=7)
    acc = naive.int_matmul(a.astype(np.int64) - x_zp, w.astype(np.int64))
    mult_c, shift_c = np.broadcast_to(mult, (n,)), np.broadcast_to(shift, (n,))
    expected, _ = naive.requantize(acc.T[None], bias, mult_c, shift_c, out_zp, qmin, qmax, 64, False, dt)
    assert run is not None  # >= 3 channels of int8 weights, shifts with saturation bounds: fused on the quads
    for trial in (a, (lo + hi - a.astype(np.int64)).astype(dtype)):
        if trial is not a:
            acc = naive.int_matmul(trial.astype(np.int64) - x_zp, w.astype(np.int64))
            expected, _ = naive.requantize(acc.T[None], bias, mult_c, shift_c, out_zp, qmin, qmax, 64, False, dt)
        run(trial, out)
        np.testing.assert_array_equal(out, expected[0].T)


def test_conv_u8s8_plan_bounds():
    lim = LIMIT // 255  # 255 * sum|w| <= 2**31 - 1
    for dt in (np.uint8, np.int8):
        assert conv_u8s8.plan(dt, None, lim) and not conv_u8s8.plan(dt, None, lim + 1)
        assert conv_u8s8.plan(dt, 0, lim) and conv_u8s8.plan(dt, 255, lim)
        assert not conv_u8s8.plan(dt, -1, 1) and not conv_u8s8.plan(dt, 256, 1)  # padding must be a byte
    assert 65793 * 128 <= lim < 65794 * 128  # every K <= 65,793 taps of int8 weights is admitted
    for dt in (np.int16, np.uint16, np.int32):
        assert not conv_u8s8.plan(dt, None, 1)
    assert conv_u8s8.x_center(np.int8) == -128 and conv_u8s8.x_center(np.uint8) == 0
    assert conv_u8s8.weights_fit(np.array([-128, 127])) and not conv_u8s8.weights_fit(np.array([-129, 0]))
    assert not conv_u8s8.weights_fit(np.array([128])) and conv_u8s8.weights_fit(np.zeros(0, np.int16))
    assert [conv_u8s8.wins((8, c, 1, 1)) for c in (1, 2, 3, 4, 960)] == [False, False, True, True, True]


@pytest.mark.parametrize("dtype,x_val,zp", [(np.uint8, 255, 0), (np.int8, 127, -128), (np.uint8, 0, 255)])
def test_conv_u8s8_at_the_bound(dtype, x_val, zp):
    """K = 65,793 taps, every product at |255 * -128|: 255 * sum|w| = 2**31 - 127, the largest the proof admits
    with int8 weights; one more tap and the byte quads refuse: the int16 pairs run (their centred bound, 128 per
    weight unit, still holds), exactly."""
    for k, quads in ((65793, True), (65794, False)):
        w = np.full((2, k, 1, 1), -128, np.int8)
        w[1] = 127
        x = np.full((1, k, 1, 33), x_val, dtype)
        x[0, ::2, 0, 1::3] = RANGES[np.dtype(dtype)][0]  # some other values in most columns
        assert int_kernel(x.dtype, zp, False, w, _rowsum(w)) is (conv_u8s8 if quads else conv_int16)
        u0 = x[0, :, 0, 0].astype(np.int64) - conv_u8s8.x_center(dtype)  # column 0: every byte u = x_val - center
        expected = np.einsum("kp,ck->cp", x[0, :, 0].astype(np.int64) - zp, w[:, :, 0, 0].astype(np.int64))
        got = np.zeros_like(expected)
        for _, _, c0, c1, acc, off in conv2d_gemm_blocks(x, zp, w, (1, 1), (0, 0, 0, 0), (1, 1), 1):
            if quads:  # the raw int32 lanes: channel 0's column 0 at -255 * 128 * 65793 = -(2**31 - 128) or 0
                assert acc.dtype == np.int32 and int(acc[0, 0]) == int((u0 * -128).sum())
            got[:, c0:c1] = acc.astype(np.int64) + off[:, None]
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("zp", [-128, 127, 0])
def test_conv_u8s8_padding_bytes_at_both_ends(zp):
    """int8 activations: padding bytes u = zp + 128 from 0 to 255, against weights at both ends."""
    rng = np.random.default_rng(zp & 0xFF)
    x = rng.integers(-128, 128, (1, 6, 5, 37)).astype(np.int8)
    w = rng.choice(np.array([-128, 127], np.int8), (13, 6, 3, 3))
    _check(x, zp, w, (1, 1), (2, 1, 1, 2), (1, 1), 1)
    _check(x, zp, w, (2, 2), (1, 1, 1, 1), (2, 1), 1)


def test_pack_weights_quads():
    w = np.arange(-60, 60, 2).astype(np.int8).reshape(5, 6, 2, 1)  # 5 channels, 6 inputs (a partial quad), 2x1 taps
    p = conv_u8s8.pack_weights(w, 1)
    assert p.shape == (1, 2 * 2, 8) and p.dtype == np.int32
    b = p.view(np.uint8).reshape(1, 4, 8, 4).astype(np.int8)  # the four bytes of each word, little-endian
    for c in range(5):
        for t in range(2):
            assert list(b[0, t, c]) == list(w[c, :4, t, 0])
            assert list(b[0, 2 + t, c]) == list(w[c, 4:, t, 0]) + [0, 0]
    assert not p[0, :, 5:].any()


def test_int16_weights_and_few_channels_stay_on_pairs():
    x = np.full((1, 4, 3, 40), 9, np.uint8)
    assert int_kernel(x.dtype, 3, True, np.full((2, 4, 3, 3), 200, np.int16), 7200) is conv_int16
    assert int_kernel(x.dtype, 3, True, np.ones((2, 2, 3, 3), np.int8), 18) is conv_int16  # wins: < 3 channels
    assert int_kernel(np.dtype(np.int16), 3, True, np.ones((2, 4, 3, 3), np.int8), 36) is conv_int16


@pytest.mark.skipif(conv_u8s8.ISA != "avx512vnni", reason="the CPU has no AVX-512 VNNI (kernels.cpu)")
def test_tiles_compile_to_vpdpbusd():
    """The byte-quad tile compiled fresh (no cache: inspect_asm needs the compiled text) is vpdpbusd code and
    computes the lane sums of the twin's dpbusd, the unsigned and signed operands the right way round."""
    tiles = conv_u8s8.KERNELS.tiles_compact.py_func.__globals__["_tiles"]
    fresh = numba.njit(tiles.py_func)
    rng = np.random.default_rng(1)
    xp = rng.integers(-2 ** 31, 2 ** 31, 64, dtype=np.int64).astype(np.int32)
    xp[:8] = np.int32(-1)  # bytes 255
    offs = np.array([0, 3, 5], np.int64)
    w32 = rng.integers(-2 ** 31, 2 ** 31, (3, 16), dtype=np.int64).astype(np.int32)
    w32[0, :4] = np.frombuffer(bytes([0x80] * 4), np.int32)[0]  # bytes -128
    wide = np.zeros((16, 32), np.int32)
    fresh(xp, offs, w32, 32, wide)
    for m in range(16):
        for j in range(32):
            lane = 0
            for kk in range(3):
                lane = naive.dpbusd(lane, xp[offs[kk] + j], w32[kk, m])
            assert wide[m, j] == lane, (m, j)
    asm = fresh.inspect_asm(fresh.signatures[0])
    assert "vpdpbusd" in asm and "zmm" in asm
    assert "vpmaddwd" not in asm and "vpdpwssd" not in asm


def test_without_vnni_the_pairs_run():
    """A CPU without AVX-512 VNNI (AVAILABLE False, as _host_has_vnni finds from LLVM's host features or a
    NUMBA_CPU_NAME override): the int16 pairs take the same convolutions, with the same integers."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 8, 6, 35)).astype(np.int8)
    w = rng.integers(-128, 128, (5, 8, 3, 3)).astype(np.int8)
    with_quads = _check(x, -3, w, (1, 1), (1, 1, 1, 1), (1, 1), 1, twin=False)
    with mock.patch.object(conv_u8s8, "AVAILABLE", False):
        assert not conv_u8s8.plan(np.int8, None, 1)
        assert int_kernel(x.dtype, -3, True, w, _rowsum(w)) is conv_int16
        np.testing.assert_array_equal(conv2d_gemm(x, -3, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), with_quads)


ALDERLAKE_TILES = """
from kernels import conv_u8s8
tiles = CompileOnly(conv_u8s8.kernel_set("avxvnni").tiles_compact.py_func.__globals__["_tiles"].py_func)
tiles(np.zeros(64, np.int32), np.array([0, 3], np.int64), np.zeros((2, 8), np.int32), 16, np.zeros((8, 16), np.int32))
asm = tiles.asm()
assert "vpdpbusd" in asm and all(line.split()[0] == "{vex}" for line in asm.splitlines() if "vpdpbusd" in line)
assert "zmm" not in asm and not re.search("ymm(1[6-9]|[23][0-9])", asm)
print("ok")
"""


def test_avxvnni_tiles_are_vex_code(tmp_path):
    """The AVX-VNNI byte quads compiled for a CPU with AVX-VNNI and no AVX-512 (Alder Lake) are 256-bit VEX code:
    every vpdpbusd the {vex} form, no zmm register, no ymm16-31. Compiled only, never run (tests/codegen.py):
    this CPU may lack AVX-VNNI; the per-set tests above run the same tiles where the CPU has the instructions."""
    res = compile_for("alderlake", "+avx2,+avxvnni", ALDERLAKE_TILES, tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]
