"""requantize / requantize_float == their golden twins, bit for bit."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.fixedpoint import quantize_multiplier
from kernels.requantize import requantize, requantize_float, requantize_row, saturation_bounds
from tests import naive


@st.composite
def acc_arrays(draw, shape, acc_bits):
    """int64 accumulators: typical 32-bit sums, values near 2**(bits-1) for overflow, tiny, fixed edges, or the
    edges of an ``acc_bits``-bit accumulator, its extremes and one past them (64 bits, no limit: the fixed edges)."""
    kind = draw(st.sampled_from(["int32", "int24", "int48", "small", "edges", "width", "width"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if kind == "int32":
        return rng.integers(-2 ** 31, 2 ** 31, size=shape, dtype=np.int64)
    if kind == "int24":
        return rng.integers(-2 ** 23, 2 ** 23, size=shape, dtype=np.int64)
    if kind == "int48":
        return rng.integers(-2 ** 47, 2 ** 47, size=shape, dtype=np.int64)
    if kind == "small":
        return rng.integers(-300, 301, size=shape, dtype=np.int64)
    edges = [0, 1, -1, 2 ** 31 - 1, -2 ** 31, 2 ** 15, -2 ** 15 - 1, 2 ** 23 - 1, -2 ** 23]
    if kind == "width" and acc_bits < 64:
        half = 2 ** (acc_bits - 1)
        edges = [half - 1, half, -half, -half - 1]
    return rng.choice(np.array(edges, dtype=np.int64), size=shape)


@st.composite
def requant_case(draw):
    """Accumulators (at the edges of the drawn acc_bits among others), biases (0 in about two channels of three, so
    that those edges reach the width check unchanged), multipliers and an output range."""
    acc_bits = draw(st.sampled_from([8, 16, 24, 32, 33, 40, 48, 49, 64]))
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 6)))
    acc = draw(acc_arrays(shape, acc_bits))
    n_c = shape[1]
    bias = np.array([draw(st.integers(-2 ** 31, 2 ** 31 - 1)) if draw(st.integers(0, 2)) == 0 else 0
                     for _ in range(n_c)], dtype=np.int64)
    mult, shift = draw(naive.multiplier_arrays(n_c))
    dtype, zp, qmin, qmax = draw(naive.out_params())
    saturate = draw(st.booleans())
    return acc, bias, mult, shift, zp, qmin, qmax, acc_bits, saturate, dtype


@settings(deadline=None, max_examples=examples(250))
@given(requant_case())
def test_requantize_matches_twin(case):
    acc, bias, mult, shift, zp, qmin, qmax, acc_bits, saturate, dtype = case
    try:
        expected, exp_count = naive.requantize(acc, bias, mult, shift, zp, qmin, qmax, acc_bits, saturate, dtype)
    except ValueError:
        with pytest.raises(ValueError):
            requantize(acc, bias, mult, shift, zp, qmin, qmax, acc_bits, saturate, np.empty(acc.shape, dtype))
        return
    out = np.empty(acc.shape, dtype=dtype)
    count = requantize(acc, bias, mult, shift, zp, qmin, qmax, acc_bits, saturate, out)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)
    assert count == exp_count
    # the same with saturation bounds prepared once by the caller
    bound = saturation_bounds(np.asarray(mult, np.int64), np.asarray(shift, np.int64), zp, qmin, qmax)
    out2 = np.empty(acc.shape, dtype=dtype)
    assert requantize(acc, bias, mult, shift, zp, qmin, qmax, acc_bits, saturate, out2, bound=bound) == exp_count
    np.testing.assert_array_equal(out2, expected)


@st.composite
def float_case(draw):
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 6)))
    acc = draw(acc_arrays(shape, 32))  # the float path wraps the sum to int32
    n_c = shape[1]
    bias = np.array([draw(st.integers(-2 ** 31, 2 ** 31 - 1)) if draw(st.booleans()) else 0
                     for _ in range(n_c)], dtype=np.int64)
    scales = []
    for _ in range(n_c):
        kind = draw(st.sampled_from(["log", "log", "zero", "half"]))
        if kind == "zero":
            scales.append(0.0)
        elif kind == "half":
            scales.append(draw(st.sampled_from([0.5, 0.25, 1.5, 2.0 ** -20])))
        else:
            scales.append(2.0 ** draw(st.floats(-40.0, 6.0)))
    scale = np.array(scales, dtype=np.float32)
    dtype, zp, qmin, qmax = draw(naive.out_params())
    return acc, bias, scale, zp, qmin, qmax, dtype


@settings(deadline=None, max_examples=examples(150))
@given(float_case())
def test_requantize_float_matches_twin(case):
    acc, bias, scale, zp, qmin, qmax, dtype = case
    expected, exp_wraps = naive.requantize_float(acc, bias, scale, zp, qmin, qmax, dtype)
    out = np.empty(acc.shape, dtype=dtype)
    wraps = requantize_float(acc, bias, scale, zp, qmin, qmax, out)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)
    assert wraps == exp_wraps


# ------------------------------------------------------------------------------------------------------
# explicit edge cases
# ------------------------------------------------------------------------------------------------------
def _rq(acc, mult, shift, out_zp=0, qmin=-128, qmax=127, acc_bits=32, saturate=True, bias=0, dtype=np.int8):
    """requantize on one channel, asserted equal to the twin on the same inputs (outputs and overflow count); the
    kernel's (outputs list, count) for the caller's hand-derived expectations."""
    acc = np.asarray(acc, dtype=np.int64).reshape(1, 1, -1)
    out = np.empty(acc.shape, dtype=dtype)
    n = requantize(acc, np.array([bias]), np.array([mult]), np.array([shift]), out_zp, qmin, qmax, acc_bits,
                   saturate, out)
    expected, n_expected = naive.requantize(acc, [bias], [mult], [shift], out_zp, qmin, qmax, acc_bits, saturate, dtype)
    np.testing.assert_array_equal(out, expected)
    assert n == n_expected
    return out.ravel().tolist(), n


@settings(deadline=None, max_examples=examples(60))
@given(st.lists(st.integers(-(2 ** 24), 2 ** 24), min_size=1, max_size=40), st.floats(2.0 ** -30, 4.0))
def test_compact_accumulators_match_int64(values, real):
    # int32 and exact-float accumulators (what compact conv/matmul results are) requantize identically
    m, r = quantize_multiplier(real)
    ref = _rq(values, m, r, bias=7, acc_bits=32)
    for dt in (np.int32, np.float32, np.float64):
        acc = np.asarray(values, dtype=dt).reshape(1, 1, -1)
        out = np.empty(acc.shape, np.int8)
        n = requantize(acc, np.array([7]), np.array([m]), np.array([r]), 0, -128, 127, 32, True, out)
        assert (out.ravel().tolist(), n) == ref, dt


def test_ties_round_toward_plus_infinity():
    # factor 0.5: x = +-1, +-3, +-5 are exact ties
    m, r = quantize_multiplier(0.5)
    assert (m, r) == (2 ** 30, 31) == naive.quantize_multiplier(0.5)
    assert _rq([-5, -3, -1, 1, 3, 5], m, r)[0] == [-2, -1, 0, 1, 2, 3]


def test_saturation_to_dtype_edges():
    m, r = quantize_multiplier(1.0)
    assert (m, r) == naive.quantize_multiplier(1.0)
    assert _rq([-1000, -129, -128, 127, 128, 1000], m, r)[0] == [-128, -128, -128, 127, 127, 127]
    out, _ = _rq([-40000, 40000, 0], m, r, dtype=np.int16, qmin=-32768, qmax=32767)
    assert out == [-32768, 32767, 0]
    out, _ = _rq([-1, 0, 300], m, r, out_zp=0, dtype=np.uint8, qmin=0, qmax=255)
    assert out == [0, 0, 255]


def test_acc_overflow_wrap_and_saturate():
    m, r = 1, 0  # identity factor
    acc = [2 ** 31 - 1, -2 ** 31, 5]
    out, n = _rq(acc, m, r, bias=1, acc_bits=32, saturate=False, dtype=np.int32, qmin=-2 ** 31,
                 qmax=2 ** 31 - 1)
    assert n == 1 and out == [-2 ** 31, -2 ** 31 + 1, 6]
    out, n = _rq(acc, m, r, bias=1, acc_bits=32, saturate=True, dtype=np.int32, qmin=-2 ** 31, qmax=2 ** 31 - 1)
    assert n == 1 and out == [2 ** 31 - 1, -2 ** 31 + 1, 6]
    out, n = _rq([2 ** 40], m, r, bias=-1, acc_bits=64, dtype=np.int32, qmin=-2 ** 31, qmax=2 ** 31 - 1)
    assert n == 0 and out == [2 ** 31 - 1]


@pytest.mark.parametrize("saturate", [False, True])
def test_acc_overflow_checked_per_channel(saturate):
    """The loop checks the accumulator width only on the channels its caller did not prove safe
    (``limit_acc[c]``): a channel that overflows is counted and wrapped/saturated exactly as the twin does, and a
    proven channel next to it is the twin's too; the check left off the overflowing channel would not be."""
    from kernels.requantize import requantize_loop
    acc = np.array([[[2 ** 31 - 1, -2 ** 31, 5, 7], [100, -100, 3, 0]]], np.int64)
    bias = np.array([2 ** 20, -2], np.int64)  # channel 0: 2**31 - 1 + 2**20 passes 32 bits by far
    mult, shift = np.array([1, 1], np.int64), np.array([8, 0], np.int64)
    bound = saturation_bounds(mult, shift, 0, -2 ** 31, 2 ** 31 - 1)
    expected, n_expected = naive.requantize(acc, bias, mult, shift, 0, -2 ** 31, 2 ** 31 - 1, 32, saturate, np.int32)
    assert n_expected == 1

    def run(check):
        out = np.empty(acc.shape, np.int32)
        n = requantize_loop(acc, bias, mult, shift, bound, 0, -2 ** 31, 2 ** 31 - 1, np.array(check), -2 ** 31,
                            2 ** 31 - 1, 32, saturate, out)
        return out, n
    out, n = run([True, False])
    assert n == 1
    np.testing.assert_array_equal(out, expected)
    out, n = run([False, False])
    assert n == 0 and not np.array_equal(out, expected)


def test_huge_accumulators_saturate_exactly():
    # ordinary multipliers take the clamped fast path: exact (saturated) results even past 2**48
    assert _rq([2 ** 50, -2 ** 50, 2 ** 61], 2 ** 30, 31, acc_bits=64)[0] == [127, -128, 127]
    _rq([2 ** 50], 2 ** 30, 31, acc_bits=48)  # wrapped/saturated into range first: fine


def test_acc_outside_mrs_domain_raises_on_general_path():
    # a multiplier so small (r = 60) that no saturation bound below 2**31 exists: general path, refuses
    with pytest.raises(ValueError):
        _rq([2 ** 50], 2 ** 30, 60, acc_bits=64)


def test_extreme_scales():
    acc = [-2 ** 31, -1, 0, 1, 2 ** 31 - 1]
    for real in (2.0 ** 6, 2.0 ** -31, 2.0 ** -40):
        assert quantize_multiplier(real) == naive.quantize_multiplier(real)
    m, r = quantize_multiplier(2.0 ** 6)
    assert _rq(acc, m, r)[0] == [-128, -64, 0, 64, 127]
    m, r = quantize_multiplier(2.0 ** -31)
    assert _rq(acc, m, r)[0] == [-1, 0, 0, 0, 1]
    assert quantize_multiplier(2.0 ** -40) == (0, 0)
    assert _rq(acc, 0, 0, out_zp=-3)[0] == [-3] * 5


def test_requantize_validation():
    acc = np.zeros((1, 2, 3), dtype=np.int64)
    ok = dict(bias=np.zeros(2, np.int64), mult=np.ones(2, np.int64), shift=np.zeros(2, np.int64))
    out = np.empty((1, 2, 3), np.int8)
    with pytest.raises(ValueError, match="dtype"):
        requantize(acc.astype(np.uint32), **ok, out_zp=0, qmin=-128, qmax=127, acc_bits=32, saturate_acc=True,
                   out=out)
    with pytest.raises(ValueError, match="shape"):
        requantize(acc, np.zeros(3, np.int64), ok["mult"], ok["shift"], 0, -128, 127, 32, True, out)
    with pytest.raises(ValueError, match="qmin"):
        requantize(acc, **ok, out_zp=0, qmin=-129, qmax=127, acc_bits=32, saturate_acc=True, out=out)
    with pytest.raises(ValueError, match="mult"):
        requantize(acc, ok["bias"], np.full(2, 2 ** 31), ok["shift"], 0, -128, 127, 32, True, out)
    with pytest.raises(ValueError, match="out must have shape"):
        requantize(acc, **ok, out_zp=0, qmin=-128, qmax=127, acc_bits=32, saturate_acc=True,
                   out=np.empty((2, 3), np.int8))
    with pytest.raises(ValueError, match="acc_bits"):
        requantize(acc, **ok, out_zp=0, qmin=-128, qmax=127, acc_bits=65, saturate_acc=True, out=out)


def test_requantize_float_ties_and_wrap():
    acc = np.array([1, 3, 5, -1, -3, 2 ** 31 - 1], dtype=np.int64).reshape(1, 1, -1)
    out = np.empty(acc.shape, np.int32)
    n = requantize_float(acc, np.array([0]), np.array([0.5], np.float32), 0, -2 ** 31, 2 ** 31 - 1, out)
    # half to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2;
    # float32(2**31 - 1) == 2**31, times 0.5 -> 2**30
    assert n == 0
    assert out.ravel().tolist() == [0, 2, 2, 0, -2, 2 ** 30]
    out8 = np.empty(acc.shape, np.int8)
    n = requantize_float(acc, np.array([1]), np.array([1.0], np.float32), 3, -128, 127, out8)
    assert n == 1  # (2**31 - 1) + 1 wraps to -2**31
    assert out8.ravel().tolist() == [5, 7, 9, 3, 1, -128]


def test_requantize_float_rounds_product_to_float32():
    # v * s is not representable in float32: the product is rounded to float32 before rint
    v = 2 ** 24 + 1
    s = np.float32(1.0 + 2.0 ** -23)
    acc = np.array([v], dtype=np.int64).reshape(1, 1, 1)
    out = np.empty(acc.shape, np.int32)
    requantize_float(acc, np.array([0]), np.array([s], np.float32), 0, -2 ** 31, 2 ** 31 - 1, out)
    expected = int(np.rint(np.float32(np.float32(v) * s)))
    assert out[0, 0, 0] == expected


@settings(deadline=None, max_examples=examples(60))
@given(st.sampled_from([np.int8, np.uint8, np.int16, np.uint16]), st.data())
def test_narrow_integer_accumulators_match_int64(dtype, data):
    # a quantized tensor read directly as the accumulator, its zero point folded into the bias (rescale ops)
    info = np.iinfo(dtype)
    values = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=40))
    zp = data.draw(st.integers(int(info.min), int(info.max)))
    m, r = data.draw(naive.multipliers())
    wide = np.asarray(values, np.int64).reshape(1, 1, -1)
    ref, out = np.empty(wide.shape, np.int16), np.empty(wide.shape, np.int16)
    n_ref = requantize(wide - zp, np.array([0]), np.array([m]), np.array([r]), 3, -32768, 32767, 64, False, ref)
    n = requantize(wide.astype(dtype), np.array([-zp]), np.array([m]), np.array([r]), 3, -32768, 32767, 64, False,
                   out)
    assert n == n_ref
    np.testing.assert_array_equal(out, ref)


def test_saturation_bounds_small_multiplier_large_shift():
    """An affine with many fraction bits (M = 1 or small, r up to 46) gets a bound past 2**31 -- the branch-free
    path -- and gives the twin's integers, at the bound's edges and for accumulators up to 2**47."""
    mult = np.array([1, 3, 1, 2 ** 20 + 1, 2 ** 31 - 1], np.int64)
    shift = np.array([40, 46, 8, 50, 62], np.int64)
    zp, qmin, qmax = -3, -128, 127
    bound = saturation_bounds(mult, shift, zp, qmin, qmax)
    assert (bound[[0, 1, 3]] > 1 << 31).all() and (bound[:4] > 0).all() and (bound * mult <= 1 << 62).all()
    rng = np.random.default_rng(1)
    acc = rng.integers(-2 ** 47, 2 ** 47, size=(2, 5, 40), dtype=np.int64)
    for c in range(5):  # values around the bound and around the rounding edges
        if bound[c]:
            acc[0, c, :6] = [bound[c], -bound[c], bound[c] - 1, 1 - bound[c], bound[c] // 2, 0]
        acc[1, c, :3] = [(1 << int(shift[c])) // 2 // max(1, int(mult[c])), -1, 1]
    bias = np.array([5, -7, 0, 2 ** 40, -2 ** 40], np.int64)
    expected, _ = naive.requantize(acc, bias, mult, shift, zp, qmin, qmax, 64, True, np.int8)
    out = np.empty(acc.shape, np.int8)
    assert requantize(acc, bias, mult, shift, zp, qmin, qmax, 64, True, out, bound=bound) == 0
    np.testing.assert_array_equal(out, expected)


@settings(deadline=None, max_examples=examples(60))
@given(st.integers(2, 40), st.integers(1, 3), st.data())
def test_requantize_by_columns_matches_twin(n_c, outer, data):
    """Inner size 1 (a Gemm's columns as channels) runs along the channels; same integers as the twin."""
    from kernels.requantize import by_columns
    mult, shift = data.draw(naive.multiplier_arrays(n_c))
    dtype, zp, qmin, qmax = data.draw(naive.out_params())
    acc = data.draw(acc_arrays((outer, n_c, 1), 64))
    bias = np.array([data.draw(st.integers(-2 ** 31, 2 ** 31 - 1)) for _ in range(n_c)], np.int64)
    expected, _ = naive.requantize(acc, bias, mult, shift, zp, qmin, qmax, 64, True, dtype)
    out = np.empty(acc.shape, dtype)
    requantize(acc, bias, mult, shift, zp, qmin, qmax, 64, True, out)
    np.testing.assert_array_equal(out, expected)
    bound = saturation_bounds(np.asarray(mult, np.int64), np.asarray(shift, np.int64), zp, qmin, qmax)
    if int(bound.min()) > 0:
        assert by_columns(acc, out, False, bound)


@settings(deadline=None, max_examples=examples(60))
@given(st.integers(1, 300), st.sampled_from([np.int64, np.int32, np.float32]), st.data())
def test_one_row_without_a_check_is_requantize_rows_own_case(n, acc_dtype, data):
    """A per-tensor requantization of one row with no accumulator check runs requantize_row alone (no loop compiled
    for it): the twin's integers; with a check the loop runs and counts as before."""
    import kernels.requantize as rq
    mult, shift = data.draw(naive.multiplier_arrays(1))
    dtype, zp, qmin, qmax = data.draw(naive.out_params())
    acc = data.draw(acc_arrays((1, 1, n), 64))
    if acc_dtype is not np.int64:
        acc = np.clip(acc, -2 ** 23, 2 ** 23).astype(acc_dtype)  # a float32 holds exact integers below 2**24
    bias = np.array([data.draw(st.integers(-2 ** 31, 2 ** 31 - 1))], np.int64)
    bound = saturation_bounds(np.asarray(mult, np.int64), np.asarray(shift, np.int64), zp, qmin, qmax)
    for acc_bits in (64, 32):
        expected, overflows = naive.requantize(acc.astype(np.int64), bias, mult, shift, zp, qmin, qmax, acc_bits,
                                               True, dtype)
        out = np.empty(acc.shape, dtype)
        loops = []
        real = rq.requantize_loop

        def loop(*args):
            loops.append(1)
            return real(*args)
        rq.requantize_loop = loop
        try:
            got = requantize(acc, bias, mult, shift, zp, qmin, qmax, acc_bits, True, out)
        finally:
            rq.requantize_loop = real
        np.testing.assert_array_equal(out, expected)
        assert got == overflows
        assert bool(loops) == (acc_bits < 64 or int(bound[0]) == 0)


def test_bound_at_int32_edge():
    """Bounds just below and at 2**31 (valid: any L >= the computed one with L*|M| <= 2**62 is a saturation bound):
    below, the clamped accumulator is multiplied as int32 x int32 -> int64; at 2**31, in int64. Same integers."""
    mult = np.array([(1 << 31) - 1, -((1 << 31) - 1), 1 << 30, 1234567891], np.int64)
    shift = np.array([46, 46, 40, 44], np.int64)
    bias = np.array([0, -(1 << 31), (1 << 31) - 1, 12345], np.int64)
    ran = 0
    for dtype, zp, qmin, qmax in ((np.int8, 3, -128, 127), (np.int16, -7, -32768, 32767),
                                  (np.int32, 0, -2 ** 31, 2 ** 31 - 1)):
        edges = [2 ** 31 - 1, -2 ** 31 + 1, 2 ** 31, -2 ** 31, 2 ** 31 + 1, -2 ** 31 - 1, 2 ** 32, -2 ** 32, 0, 1, -1,
                 2 ** 45 + 2 ** 44, -(2 ** 45) - 1]
        acc = np.array([[edges] * 4], np.int64)
        expected, _ = naive.requantize(acc, bias, mult, shift, zp, qmin, qmax, 64, True, dtype)
        computed = saturation_bounds(mult, shift, zp, qmin, qmax)
        for lim in ((1 << 31) - 1, 1 << 31):
            bound = np.maximum(computed, lim).astype(np.int64)
            if not ((computed > 0).all() and (bound * np.abs(mult) <= 1 << 62).all()):
                continue
            out = np.empty(acc.shape, dtype)
            assert requantize(acc, bias, mult, shift, zp, qmin, qmax, 64, True, out, bound=bound) == 0
            np.testing.assert_array_equal(out, expected)
            ran += 1
    assert ran == 4  # int8 and int16 outputs, both bounds


SRC_TYPES = {  # accumulator dtype of a requantize_row caller -> the value range its callers guarantee
    np.int8: (-128, 127), np.int16: (-2 ** 15, 2 ** 15 - 1), np.int32: (-2 ** 31, 2 ** 31 - 1),
    np.int64: (-2 ** 40, 2 ** 40), np.float32: (-2 ** 24, 2 ** 24), np.float64: (-2 ** 40, 2 ** 40)}


@st.composite
def row_case(draw):
    """One channel's run for requantize_row: accumulators of every caller's dtype (edges of its range included),
    a bias, multiplier, output range and zero point that take either loop (the folded constant is checked
    against 2**61: large biases, shifts and zero points fall back), and a saturation bound > 0."""
    sdt = draw(st.sampled_from(list(SRC_TYPES)))
    lo, hi = SRC_TYPES[sdt]
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    src = rng.integers(lo, hi, size=n, endpoint=True, dtype=np.int64)
    src[:min(n, 4)] = draw(st.permutations([lo, hi, 0, -1]))[:min(n, 4)]
    mult, shift = draw(naive.multipliers(allow_negative=True))
    edges = [0, 1, -7, 2 ** 31 - 1, -2 ** 31, 2 ** 40, -(2 ** 45)]
    # |bias*mult| just past 2**61 (the limit of the folded constant) and 2**63 - |mult|*max|src|/2, where
    # bias*mult + src*mult leaves int64 at the run's extremes
    ext = abs(mult) * max(-lo, hi)
    fold = [s * (t // abs(mult)) for t in (3 << 60, 2 ** 63 - ext // 2) for s in (1, -1)] if abs(mult) > 1 else [0]
    bias = draw(st.sampled_from(edges) | st.sampled_from(fold) | st.integers(-2 ** 33, 2 ** 33))
    dtype, zp, qmin, qmax = draw(naive.out_params())
    bound = int(saturation_bounds(np.array([mult]), np.array([shift]), zp, qmin, qmax)[0])
    assume(bound > 0)
    return src.astype(sdt), bias, mult, shift, bound, zp, qmin, qmax, dtype


@settings(deadline=None, max_examples=examples(400))
@given(row_case())
def test_requantize_row_matches_twin(case):
    """requantize_row (each of its loops: the folded one for int32-valued accumulators and shifts of 32 or more,
    the clamped ones) == the Python-integer twin of requantize on the same run."""
    src, bias, mult, shift, bound, zp, qmin, qmax, dtype = case
    expected, _ = naive.requantize(src.astype(np.int64).reshape(1, 1, -1), [bias], [mult], [shift], zp, qmin, qmax,
                                   64, False, dtype)
    out = np.empty(src.size, dtype)
    requantize_row(src, out, bias, mult, shift, bound, zp, qmin, qmax)
    np.testing.assert_array_equal(out, expected.reshape(-1))


def test_requantize_row_extremes():
    """The folded loop at its limits: int32 extremes times the largest multipliers, a bias and zero point that
    put the folded constant just under and over 2**61 (the clamped loop then), negative multipliers."""
    src = np.array([-2 ** 31, -2 ** 31 + 1, -1, 0, 1, 2 ** 31 - 1], np.int32)
    for mult in (2 ** 31 - 1, -(2 ** 31 - 1), 1 << 30, 1):
        for shift in (0, 1, 31, 40, 62):
            for bias in (0, 2 ** 29, -(2 ** 29), 2 ** 30 + 5, 3 << 30, -(3 << 30), 2 ** 40):
                for dtype, zp, qmin, qmax in ((np.int8, 0, -128, 127), (np.int16, -300, -32768, 32767),
                                              (np.uint8, 255, 0, 255), (np.int32, 0, -2 ** 31, 2 ** 31 - 1)):
                    bound = int(saturation_bounds(np.array([mult]), np.array([shift]), zp, qmin, qmax)[0])
                    if bound == 0:
                        continue
                    expected, _ = naive.requantize(src.astype(np.int64).reshape(1, 1, -1), [bias], [mult], [shift],
                                                   zp, qmin, qmax, 64, False, dtype)
                    out = np.empty(src.size, dtype)
                    requantize_row(src, out, bias, mult, shift, bound, zp, qmin, qmax)
                    np.testing.assert_array_equal(out, expected.reshape(-1), err_msg=str((mult, shift, bias)))
