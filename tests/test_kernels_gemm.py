"""int_matmul / int_matmul_loops == Python-integer matrix product, bit for bit, on every path."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import gemm
from kernels.gemm import int_matmul, int_matmul_loops
from tests import naive

GEMM_RANGES = naive.VALUE_RANGES + [(np.int32, -2 ** 31, 2 ** 31 - 1), (np.int64, -2 ** 30, 2 ** 30)]


@st.composite
def gemm_case(draw):
    m = draw(st.integers(1, 6))
    k = draw(st.integers(0, 80))
    n = draw(st.integers(1, 6))
    da, alo, ahi = draw(naive.value_ranges(GEMM_RANGES))
    db, blo, bhi = draw(st.sampled_from(GEMM_RANGES))
    if draw(st.booleans()):
        # narrow the ranges so that max|a| * max|b| lands near 2**24 / kc for some kc <= K: exercises the
        # chunk split of the float32 path at its exactness limit
        kc = draw(st.integers(1, max(1, k)))
        amax = draw(st.integers(1, 4096))
        bmax = max(1, gemm.F32_LIMIT // kc // amax)
        da, alo, ahi = np.int32, -amax, amax
        db, blo, bhi = np.int32, -bmax, bmax
    a = draw(naive.int_arrays((m, k), da, alo, ahi))
    b = draw(naive.int_arrays((k, n), db, blo, bhi))
    return a, b


@settings(deadline=None, max_examples=examples(150))
@given(gemm_case())
def test_int_matmul_matches_twin(case):
    a, b = case
    if gemm.abs_max(a) * gemm.abs_max(b) * a.shape[1] >= 2 ** 63:
        with pytest.raises(ValueError, match="exceeds int64"):
            int_matmul(a, b)
        return
    expected = naive.int_matmul(a, b)
    out = int_matmul(a, b)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, expected)
    small = int_matmul(a, b, compact=True)
    np.testing.assert_array_equal(small.astype(np.int64), expected)
    out_loops = int_matmul_loops(a, b)
    assert out_loops.dtype == np.int64
    np.testing.assert_array_equal(out_loops, expected)
    cache = {}  # constant b: its range and float copies kept between calls give the same integers
    for a_i in (a, a[::-1].copy()):
        got = int_matmul(a_i, b, compact=True, b_cache=cache)
        np.testing.assert_array_equal(got.astype(np.int64), naive.int_matmul(a_i, b))


def test_plan_paths():
    assert gemm.plan(0, 10) == ("zero", 0)
    assert gemm.plan(5, 0) == ("zero", 0)
    assert gemm.plan(127 * 255, 96) == ("f32", 96)
    assert gemm.plan(65535 * 32767, 1000) == ("f64", 1000)
    assert gemm.plan(2 ** 47, 1000) == ("f64", 63)
    assert gemm.plan(2 ** 48, 1000) == ("loops", 0)  # 31-term float64 chunks: below min(K, 32)
    assert gemm.plan(2 ** 60, 4)[0] == "loops"
    # a chunk of fewer than min(K, 32) terms is not worth a float32 BLAS call
    bound = gemm.F32_LIMIT // 20
    assert gemm.plan(bound, 100)[0] == "f64"
    assert gemm.plan(bound, 20) == ("f32", 20)


@pytest.mark.parametrize("k", [1, 31, 32, 33, 64, 65, 200])
def test_float32_limit_all_extremes(k):
    """All products equal to the bound: every chunk sums to kc * bound <= 2**24 - 1 and must stay exact,
    while one more term per chunk would pass 2**24 with an odd value and round."""
    amax = 1
    bmax = gemm.F32_LIMIT // min(k, 32) if k >= 32 else gemm.F32_LIMIT // k
    a = np.full((3, k), amax, dtype=np.int64)
    b = np.full((k, 2), bmax, dtype=np.int64)
    b[:, 1] = -bmax
    a[1] = -amax
    method, kc = gemm.plan(amax * bmax, k)
    assert method == "f32"
    expected = naive.int_matmul(a, b)
    np.testing.assert_array_equal(int_matmul(a, b), expected)
    np.testing.assert_array_equal(int_matmul_loops(a, b), expected)


def test_float64_path_large_values():
    rng = np.random.default_rng(1)
    a = rng.integers(-2 ** 31, 2 ** 31, size=(5, 40), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2 ** 15, 2 ** 15, size=(40, 3)).astype(np.int16)
    a[0, :] = -2 ** 31
    b[:, 0] = -2 ** 15
    assert gemm.plan(2 ** 31 * 2 ** 15, 40)[0] == "f64"
    np.testing.assert_array_equal(int_matmul(a, b), naive.int_matmul(a, b))


def test_loops_path_and_zero():
    a = np.array([[2 ** 40, -3], [1, 2 ** 40]], dtype=np.int64)
    b = np.array([[2 ** 20, 1], [5, -2 ** 21]], dtype=np.int64)
    np.testing.assert_array_equal(int_matmul(a, b), naive.int_matmul(a, b))
    z = int_matmul(np.zeros((3, 4), np.int8), np.ones((4, 2), np.uint8))
    assert z.dtype == np.int64 and z.shape == (3, 2) and not z.any()
    e = int_matmul(np.ones((3, 0), np.int8), np.ones((0, 2), np.int8))
    assert e.dtype == np.int64 and e.shape == (3, 2) and not e.any()


def test_int8_extremes():
    a = np.full((4, 300), -128, dtype=np.int8)
    b = np.full((300, 3), -128, dtype=np.int8)
    b[:, 1] = 127
    out = int_matmul(a, b)
    assert out[0, 0] == 300 * 128 * 128 and out[0, 1] == -300 * 128 * 127
    np.testing.assert_array_equal(out, naive.int_matmul(a, b))


def test_validation():
    with pytest.raises(ValueError, match="inner dimensions"):
        int_matmul(np.zeros((2, 3), np.int8), np.zeros((4, 2), np.int8))
    with pytest.raises(ValueError, match="integer"):
        int_matmul(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.int8))
    with pytest.raises(ValueError, match="2-D"):
        int_matmul(np.zeros((2, 3, 1), np.int8), np.zeros((3, 2), np.int8))
    with pytest.raises(ValueError, match="contiguous"):
        int_matmul(np.zeros((3, 2), np.int8).T, np.zeros((3, 2), np.int8))


def test_small_m_int32_path_edges():
    # constant b with at most SMALL_M rows: int32 accumulation where K * max|a| * max|b| < 2**31, at its edge
    # every product at the bound (all partial sums of one sign), just past it the float path
    for bmax, dt in ((127, np.int8), (128, np.int16), (32767, np.int16)):
        k = 64
        amax = gemm.INT32_MAX // (k * bmax)
        for a_val in (amax, amax + 1):
            for m in (1, gemm.SMALL_M, gemm.SMALL_M + 1):
                a = np.full((m, k), -a_val, np.int32)
                a[0, ::3] = a_val
                b = np.full((k, 3), bmax, np.int32)
                b[:, 1] = -bmax
                b[::5, 2] = 0
                cache = {}
                for _ in range(2):
                    got = int_matmul(a, b, compact=True, b_cache=cache)
                    np.testing.assert_array_equal(got.astype(np.int64), naive.int_matmul(a, b))
                    np.testing.assert_array_equal(int_matmul(a, b, b_cache=cache), naive.int_matmul(a, b))
                narrow = a_val == amax and m <= gemm.SMALL_M
                assert ("narrow" in cache) == narrow and (not narrow or cache["narrow"].dtype == dt)
