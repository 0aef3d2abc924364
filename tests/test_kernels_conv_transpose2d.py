"""conv_transpose2d_acc (both paths) == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import conv_transpose2d as ct
from kernels.conv_transpose2d import conv_transpose2d_acc, conv_transpose2d_direct, conv_transpose2d_gemm
from tests import naive

W_RANGES = [(np.int8, -128, 127), (np.int8, -8, 7), (np.int16, -255, 255), (np.int16, -32768, 32767),
            (np.int32, -2 ** 31, 2 ** 31 - 1)]


@st.composite
def convt_case(draw):
    groups = draw(st.integers(1, 3))
    cin_g = draw(st.integers(1, 5))
    cout_g = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h, w = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    # ONNX: out = s*(in-1) + output_padding + (k-1)*d + 1 - pad_begin - pad_end; explore around it
    ho_onnx = sh * (h - 1) + (kh - 1) * dh + 1 - pads[0] - pads[2]
    wo_onnx = sw * (w - 1) + (kw - 1) * dw + 1 - pads[1] - pads[3]
    ho = draw(st.integers(max(1, ho_onnx - 1), max(1, ho_onnx + 2)))
    wo = draw(st.integers(max(1, wo_onnx - 1), max(1, wo_onnx + 2)))
    xd, xlo, xhi = draw(naive.value_ranges())
    x = draw(naive.int_arrays((n, cin_g * groups, h, w), xd, xlo, xhi))
    x_zp = draw(naive.zero_points(xlo, xhi))
    wd, wlo, whi = draw(st.sampled_from(W_RANGES))
    wt = draw(naive.int_arrays((cin_g * groups, cout_g, kh, kw), wd, wlo, whi))
    return x, x_zp, wt, (sh, sw), pads, (dh, dw), groups, (ho, wo)


def _check(case):
    expected = naive.conv_transpose2d_acc(*case)
    for fn in (conv_transpose2d_acc, conv_transpose2d_direct, conv_transpose2d_gemm):
        out = fn(*case)
        assert out.dtype == np.int64, fn.__name__
        np.testing.assert_array_equal(out, expected, err_msg=fn.__name__)


@settings(deadline=None, max_examples=examples(100))
@given(convt_case())
def test_conv_transpose2d_matches_twin(case):
    _check(case)


def test_conv_transpose2d_stride2_upsample_edges():
    x = np.array([[[[-128, 127], [127, -128]]]], dtype=np.int8).repeat(6, axis=1)
    w = np.full((6, 2, 4, 4), 127, np.int16)
    w[:, 1] = -128
    _check((x, -128, w, (2, 2), (1, 1, 1, 1), (1, 1), 1, (4, 4)))
    _check((x, 127, w, (2, 2), (0, 0, 0, 0), (2, 1), 2, (9, 7)))


def test_conv_transpose2d_gemm_blocks(monkeypatch):
    # force several output-channel blocks in the GEMM path
    monkeypatch.setattr(ct, "COLS_BLOCK", 20)
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, size=(1, 8, 3, 3)).astype(np.uint8)
    w = rng.integers(-255, 256, size=(8, 5, 2, 2)).astype(np.int16)
    case = (x, 100, w, (2, 2), (0, 0, 0, 0), (1, 1), 2, (6, 6))
    np.testing.assert_array_equal(conv_transpose2d_gemm(*case), naive.conv_transpose2d_acc(*case))


@st.composite
def tiled_case(draw):
    groups = draw(st.integers(1, 3))
    cin_g = draw(st.sampled_from([1, 1, 2, 5]))
    cout_g = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    xd, xlo, xhi = draw(naive.value_ranges())
    x = draw(naive.int_arrays((n, cin_g * groups, h, w), xd, xlo, xhi))
    x_zp = draw(naive.zero_points(xlo, xhi))
    wd, wlo, whi = draw(st.sampled_from(W_RANGES))
    wt = draw(naive.int_arrays((cin_g * groups, cout_g, kh, kw), wd, wlo, whi))
    return x, x_zp, wt, (kh, kw), (0, 0, 0, 0), (1, 1), groups, (h * kh, w * kw)


@settings(deadline=None, max_examples=examples(120))
@given(tiled_case())
def test_conv_transpose2d_tiles_match_twin(case):
    x, _, w, stride, pads, dilation, _, out_hw = case
    assert ct.tiled(x.shape, w.shape, stride, pads, dilation, out_hw)
    expected = naive.conv_transpose2d_acc(*case)
    acc = ct.conv_transpose2d_tiles(*case, w_cache={})
    if acc.dtype.kind == "f":
        np.testing.assert_array_equal(acc, np.rint(acc))
    got = ct.untile(np.ascontiguousarray(acc.astype(np.int64)), w.shape[2], w.shape[3], x.shape[2], x.shape[3])
    np.testing.assert_array_equal(got, expected)


def test_conv_transpose2d_tiles_geometry():
    x = np.zeros((1, 2, 3, 4), np.int16)
    w = np.ones((2, 3, 2, 2), np.int8)
    assert ct.tiled(x.shape, w.shape, (2, 2), (0, 0, 0, 0), (1, 1), (6, 8))
    for stride, pads, dil, out_hw in (((2, 1), (0,) * 4, (1, 1), (6, 4)), ((2, 2), (0, 1, 0, 1), (1, 1), (6, 6)),
                                      ((2, 2), (0,) * 4, (2, 1), (6, 8)), ((2, 2), (0,) * 4, (1, 1), (7, 8))):
        assert not ct.tiled(x.shape, w.shape, stride, pads, dil, out_hw)
        with pytest.raises(ValueError, match="kernel == stride"):
            ct.conv_transpose2d_tiles(x, 0, w, stride, pads, dil, 1, out_hw)


def test_conv_transpose2d_validation():
    x = np.zeros((1, 4, 3, 3), np.int8)
    w = np.zeros((4, 2, 3, 3), np.int16)
    good = dict(stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1, out_hw=(5, 5))
    assert conv_transpose2d_acc(x, 0, w, **good).shape == (1, 2, 5, 5)
    assert conv_transpose2d_acc(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 2, (5, 5)).shape == (1, 4, 5, 5)
    with pytest.raises(ValueError, match="input channels"):
        conv_transpose2d_acc(x, 0, np.zeros((3, 2, 3, 3), np.int16), **good)
    with pytest.raises(ValueError, match="groups"):
        conv_transpose2d_acc(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 3, (5, 5))
    with pytest.raises(ValueError, match="out_hw"):
        conv_transpose2d_acc(x, 0, w, (1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 5))
