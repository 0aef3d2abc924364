"""kernels/rows16.py: move_row (dst[d0 + j] = src[s0 + j] - sub) and pair_row (int16 pair words) == their plain
twins, bit for bit, for every row length (below one chunk, exactly one, one more, several with an overlapping last
chunk), every source/destination integer pair the depthwise kernels use (8/16-bit to int16 with the centring
subtraction, same-type copies), offsets anywhere in 2-D arrays, and nothing written outside the row."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels._jit import njit_noalloc
from kernels.rows16 import move_row, pair_row
from tests import naive

PAIRS = [(np.uint8, np.int16, 128), (np.int8, np.int16, 0), (np.uint16, np.int16, 32768), (np.int16, np.int16, 0),
         (np.uint8, np.uint8, 0), (np.int8, np.int8, 0), (np.int16, np.int16, 0), (np.uint16, np.uint16, 0)]


@njit_noalloc
def _move(src, s0, dst, d0, n, sub):
    """move_row called from compiled code, as the kernels call it."""
    move_row(src, s0, dst, d0, n, sub)


@settings(deadline=None, max_examples=examples(300))
@given(st.data())
def test_move_row_matches_twin(data):
    sd, dd, sub = data.draw(st.sampled_from(PAIRS))
    info = np.iinfo(sd)
    n = data.draw(st.one_of(st.integers(0, 40), st.integers(0, 300)))
    cols = n + data.draw(st.integers(0, 20))
    src = data.draw(naive.int_arrays((2, max(cols, 1)), sd, int(info.min), int(info.max)))
    s0 = data.draw(st.integers(0, src.size - n))
    dst = np.full((3, cols + 5), 77, dd)
    d0 = data.draw(st.integers(0, dst.size - n))
    expected = dst.copy().reshape(-1)
    expected[d0:d0 + n] = (src.reshape(-1)[s0:s0 + n].astype(np.int64) - sub).astype(dd)  # fits: the callers' use
    _move(src, s0, dst, d0, n, np.int64(sub))
    np.testing.assert_array_equal(dst.reshape(-1), expected)


@njit_noalloc
def _pairs(src, s0, dst, d0, n, sub):
    """pair_row called from compiled code, as the kernels call it."""
    pair_row(src, s0, dst, d0, n, sub)


@settings(deadline=None, max_examples=examples(300))
@given(st.data())
def test_pair_row_matches_twin(data):
    """pair_row == the twin: word j = (a & 0xFFFF) | (b << 16) as int32, a, b the centred cells j, j + 1 (int16)."""
    sd, _, sub = data.draw(st.sampled_from(PAIRS[:4]))
    info = np.iinfo(sd)
    n = data.draw(st.one_of(st.integers(0, 40), st.integers(0, 300)))
    src = data.draw(naive.int_arrays((2, n + 1 + data.draw(st.integers(0, 9))), sd, int(info.min), int(info.max)))
    s0 = data.draw(st.integers(0, src.size - n - 1))
    dst = np.full((2, n + 7), 77, np.int32)
    d0 = data.draw(st.integers(0, dst.size - n))
    v = src.reshape(-1).astype(np.int64) - sub
    words = (v[s0:s0 + n] & 0xFFFF) | ((v[s0 + 1:s0 + n + 1] & 0xFFFF) << 16)
    expected = dst.copy().reshape(-1)
    expected[d0:d0 + n] = words.astype(np.uint32).view(np.int32)
    _pairs(src, s0, dst, d0, n, np.int64(sub))
    np.testing.assert_array_equal(dst.reshape(-1), expected)
