"""The AMX convolution tiles (kernels/conv_amx.py, tdpbsud) == golden twins, bit for bit: the tile loop against a
plainly written tile product that wraps in int32 (naive.tdpbsud_element) on random bytes, several quad blocks and
channel tails; whole convolutions against the plain int64 sum (naive.conv2d_acc) over random geometries, both
activation dtypes, zero points, the fused requantization with extreme multipliers and saturation; the exactness
bound just inside and just outside; the same integers with the tiles off (the byte quads); and the compiled code
really is AMX code. The layout helpers are checked on every machine; the rest where the CPU and the OS allow AMX."""
import os
import subprocess
import sys
from unittest import mock

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import conv_amx, conv_int16, conv_u8s8
from kernels.conv2d_gemm import (bind_gemm_requantized, bind_matmul_requantized, conv2d_gemm, conv2d_gemm_blocks,
                                 int_kernel)
from tests import naive
from tests.test_kernels_conv2d import check_bound_runs, fused_case

WINS = conv_amx.wins  # the rule, before the fixture below replaces it
needs_amx = pytest.mark.skipif(not conv_amx.AVAILABLE, reason="needs AMX-INT8 and the OS's permission (the byte "
                                                              "quads or int16 pairs run instead)")
RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


@pytest.fixture(autouse=True, scope="module")
def _tiles_everywhere():
    """The tiles on every shape of 16+ input channels (``wins`` would leave some small ones to the byte quads):
    correctness does not depend on where they win. ``test_wins_rule`` checks the rule itself."""
    with mock.patch.object(conv_amx, "wins", lambda w_shape, groups=1: w_shape[1] >= conv_amx.MIN_CHANNELS):
        yield


def test_wins_rule():
    """Tiles from 16 input channels per group where the dot product is long (K >= 96) or the group's output
    channels many (>= 64); a 128-channel output of 2 groups has 64 per group."""
    shapes = [((16, 32, 1, 1), 1), ((16, 64, 1, 1), 1), ((16, 128, 1, 1), 1), ((16, 32, 3, 3), 1),
              ((96, 16, 1, 1), 1), ((24, 96, 1, 1), 1), ((64, 24, 1, 1), 1), ((32, 8, 3, 3), 1),
              ((128, 16, 1, 1), 2), ((126, 16, 1, 1), 2)]
    assert [WINS(s, g) for s, g in shapes] == [False, False, True, True, True, True, True, False, True, False]


def _rowsum(w) -> int:
    return int(np.abs(w.astype(np.int64)).reshape(w.shape[0], -1).sum(axis=1).max(initial=0))


def test_words_and_blocks():
    """Quad planes per group: whole blocks of at most 16 quads, as even as possible (padding under one quad per
    block)."""
    for cin_g in range(1, 700):
        nq = -(-cin_g // 4)
        padded = conv_amx.words(cin_g)
        kb = conv_amx.block_quads(padded)
        assert kb <= 16 and padded % kb == 0 and padded // kb == -(-nq // 16)
        assert nq <= padded < nq + padded // kb
    assert [conv_amx.words(c) for c in (16, 64, 65, 96, 160, 960)] == [4, 16, 18, 24, 42, 240]


def test_pack_weights_tiles():
    w = np.arange(-100, 100).astype(np.int8)[:5 * 18 * 2].reshape(5, 18, 2, 1)  # 18 inputs: 5 quads, 2 taps
    a = conv_amx.pack_weights(w, 1)
    assert a.shape == (1, 2, 16, 4 * 5) and a.dtype == np.int8
    for c in range(5):
        for t in range(2):
            assert list(a[0, t, c, :18]) == list(w[c, :, t, 0]) and not a[0, t, c, 18:].any()
    assert not a[0, :, 5:].any()
    g = conv_amx.pack_weights(np.ones((6, 3, 1, 1), np.int8), 2)  # 2 groups of 3 outputs
    assert g.shape == (2, 1, 16, 4) and g[:, 0, :3, :3].all() and g.sum() == 18


@needs_amx
@settings(deadline=None, max_examples=examples(40))
@given(st.data())
def test_tiles_match_the_tile_twin(data):
    """_tiles on random planes, weights over the whole int8 range (sums that wrap int32 included), 1-40 quads (one to
    three blocks), 1-40 output channels (one or two C tiles per block, padded rows), 1-3 taps at random offsets, 1-70
    pixels: every element == the twin's wrapped int32 sum of tdpbsud words."""
    nq = conv_amx.words(4 * data.draw(st.integers(1, 40)))
    taps = data.draw(st.integers(1, 3))
    cout = data.draw(st.integers(1, 40))
    npix = data.draw(st.integers(1, 70))
    plane = npix + 40 + data.draw(st.integers(0, 9))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    xp = rng.integers(-2 ** 31, 2 ** 31, nq * plane + 32, dtype=np.int64).astype(np.int32)
    tap_off = rng.integers(0, 9, taps)
    offs = (np.arange(nq)[:, None] * plane + tap_off).reshape(-1).astype(np.int64)
    w = rng.integers(-128, 128, (cout, 4 * nq, taps, 1)).astype(np.int8)
    wa = conv_amx.pack_weights(w, 1)[0]
    cols = -(-npix // 32) * 32
    wide = np.zeros((wa.shape[1], cols), np.int32)
    conv_amx.KERNELS.tiles_compact.py_func.__globals__["_tiles"](xp, offs, wa, npix, wide)
    for m in range(cout):
        for j in range(0, cols, 7 if cols > 40 else 1):
            expected = 0
            for t in range(taps):
                expected = naive.tdpbsud_element(expected, wa[t, m], xp[offs[t::taps] + j])
            assert wide[m, j] == expected, (m, j)


@st.composite
def case_amx(draw):
    groups = draw(st.integers(1, 2))
    cin_g = draw(st.sampled_from([16, 17, 23, 32, 45, 64, 65, 70, 96]))  # one block, partial quads, two blocks
    cout_g = draw(st.sampled_from([1, 5, 16, 17, 32, 33, 40]))  # one C tile, two, a padded tail
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    top, left, bottom, right = pads
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - top - bottom), 5))
    wd = draw(st.integers(max(1, dw * (kw - 1) + 1 - left - right), 40))  # > 32 outputs per row: several blocks
    dtype = draw(st.sampled_from([np.uint8, np.int8]))
    lo, hi = RANGES[np.dtype(dtype)]
    x = draw(naive.int_arrays((draw(st.integers(1, 2)), cin_g * groups, h, wd), dtype, lo, hi))
    x_zp = draw(naive.zero_points(lo, hi))
    w = draw(naive.int_arrays((cout_g * groups, cin_g, kh, kw), np.int8, -128, 127))
    return x, x_zp, w, (sh, sw), pads, (dh, dw), groups


def _blocks(x, x_zp, w, stride, pads, dilation, groups, block_cols=8192):
    expected = naive.conv2d_acc(x, x_zp, w, stride, pads, dilation, groups)
    n_img, cout, ho, wo = expected.shape
    cg = cout // groups
    got = np.zeros((n_img, cout, ho * wo), np.int64)
    for n, g, c0, c1, acc, off in conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups,
                                                     block_cols=block_cols):
        assert acc.dtype == np.int32
        got[n, g * cg:(g + 1) * cg, c0:c1] = acc.astype(np.int64) + off[:, None]
    return expected, got.reshape(expected.shape)


@needs_amx
@settings(deadline=None, max_examples=examples(60))
@given(case_amx(), st.sampled_from([1, 7, 8192]))
def test_conv_amx_matches_twin(case, block_cols):
    x, x_zp, w = case[:3]
    assert int_kernel(x.dtype, x_zp, any(case[4]), w, _rowsum(w)) is conv_amx
    expected, got = _blocks(*case, block_cols=block_cols)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(conv2d_gemm(*case), expected)


@needs_amx
@settings(deadline=None, max_examples=examples(80))
@given(fused_case(case_amx()), st.booleans())
def test_conv_amx_requantized_matches_twins(case, wide_acc):
    """The fused requantization on the tiles (signed and extreme multipliers, saturating outputs, biases at the
    accumulator's edge), one bound run reused on other data of the same shape."""
    if wide_acc:
        case = case[:13] + (64,) + case[14:]
    x = case[0]
    assert int_kernel(x.dtype, case[1], any(case[4]), case[2], _rowsum(case[2])) is conv_amx
    lo, hi = RANGES[x.dtype]
    flipped = (lo + hi - x.astype(np.int64)).astype(x.dtype)
    check_bound_runs(bind_gemm_requantized, case, [x, flipped], block_cols=7)


@needs_amx
@settings(deadline=None, max_examples=examples(40))
@given(st.data())
def test_matmul_on_tiles_matches_twins(data):
    m, k, n = data.draw(st.integers(1, 40)), data.draw(st.integers(16, 150)), data.draw(st.integers(1, 40))
    dtype = data.draw(st.sampled_from([np.uint8, np.int8]))
    lo, hi = RANGES[np.dtype(dtype)]
    a = data.draw(naive.int_arrays((m, k), dtype, lo, hi))
    x_zp = data.draw(naive.zero_points(lo, hi))
    w = data.draw(naive.int_arrays((k, n), np.int8, -128, 127))
    mult, shift = data.draw(naive.multiplier_arrays(n, allow_negative=True))
    dt, out_zp, qmin, qmax = data.draw(naive.out_params())
    shift = naive.fusable_shifts(shift, out_zp, qmin, qmax)
    bias = np.array([data.draw(st.integers(-2 ** 20, 2 ** 20)) for _ in range(n)], np.int64)
    out = np.empty((m, n), dt)
    run = bind_matmul_requantized(a, x_zp, w, bias, mult, shift, out_zp, qmin, qmax, 64, out, block_cols=7)
    assert run is not None
    acc = naive.int_matmul(a.astype(np.int64) - x_zp, w.astype(np.int64))
    expected, _ = naive.requantize(acc.T[None], bias, mult, shift, out_zp, qmin, qmax, 64, False, dt)
    run(a, out)
    np.testing.assert_array_equal(out, expected[0].T)


@needs_amx
@pytest.mark.parametrize("dtype,x_val,zp", [(np.uint8, 255, 0), (np.int8, 127, -128)])
def test_conv_amx_at_the_bound(dtype, x_val, zp):
    """K = 65,793 channels, every product at |255 * -128|: 255 * sum|w| = 2**31 - 127, the largest the proof admits;
    one more channel and the tiles refuse (the int16 pairs run), exactly."""
    for k, tiles in ((65793, True), (65794, False)):
        w = np.full((2, k, 1, 1), -128, np.int8)
        w[1] = 127
        x = np.full((1, k, 1, 33), x_val, dtype)
        x[0, ::2, 0, 1::3] = RANGES[np.dtype(dtype)][0]
        assert int_kernel(x.dtype, zp, False, w, _rowsum(w)) is (conv_amx if tiles else conv_int16)
        expected = np.einsum("kp,ck->cp", x[0, :, 0].astype(np.int64) - zp, w[:, :, 0, 0].astype(np.int64))
        got = np.zeros_like(expected)
        for _, _, c0, c1, acc, off in conv2d_gemm_blocks(x, zp, w, (1, 1), (0, 0, 0, 0), (1, 1), 1):
            got[:, c0:c1] = acc.astype(np.int64) + off[:, None]
        np.testing.assert_array_equal(got, expected)


@needs_amx
def test_tiles_off_give_the_same_integers():
    """Both paths on one machine: the tiles, then (AVAILABLE False) the byte quads, then the int16 pairs, on a
    stride-2 3x3 convolution of 70 channels and its fused requantization: identical integers."""
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (2, 70, 9, 37)).astype(np.int8)
    w = rng.integers(-128, 128, (33, 70, 3, 3)).astype(np.int8)
    args = (x, 5, w, (2, 2), (1, 1, 1, 1), (1, 1), 1)
    runs = []
    for amx, quads in ((True, True), (False, True), (False, False)):
        with mock.patch.object(conv_amx, "AVAILABLE", amx), mock.patch.object(conv_u8s8, "AVAILABLE", quads):
            mod = int_kernel(x.dtype, 5, True, w, _rowsum(w))
            assert mod is (conv_amx if amx else conv_u8s8 if quads else conv_int16)
            out = np.empty((2, 33, 5, 19), np.int8)
            run = bind_gemm_requantized(*args, np.zeros(33, np.int64), np.full(33, 1 << 30, np.int64),
                                        np.full(33, 14, np.int64), 3, -128, 127, 32, out)
            run(x, out)
            runs.append((conv2d_gemm(*args), out.copy()))
    for acc, out in runs[1:]:
        np.testing.assert_array_equal(acc, runs[0][0])
        np.testing.assert_array_equal(out, runs[0][1])


@needs_amx
def test_tiles_compile_to_amx():
    tiles = conv_amx.KERNELS.tiles_compact.py_func.__globals__["_tiles"]
    fresh = numba.njit(tiles.py_func)
    xp = np.zeros(200, np.int32)
    wide = np.zeros((16, 32), np.int32)
    fresh(xp, np.array([0], np.int64), np.zeros((1, 16, 4), np.int8), 32, wide)
    asm = fresh.inspect_asm(fresh.signatures[0])
    for op in ("ldtilecfg", "tileloadd", "tdpbsud", "tilestored", "tilerelease"):
        assert op in asm, op


def test_amx_off_by_environment():
    """NPU_SIM_CPU=avx512vnni: the tiles are off whatever the CPU (the byte quads or pairs run)."""
    code = "from kernels import conv_amx; print(conv_amx.AVAILABLE, conv_amx.KERNELS)"
    env = dict(os.environ, NPU_SIM_CPU="avx512vnni")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "None"]
