"""kernels/pointwise_small.py == golden twins (naive.int_matmul, then naive.requantize), bit for bit."""
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from budget import examples
from kernels import pointwise_small
from tests import naive

X_RANGES = [r for r in naive.VALUE_RANGES if r[0] in (np.int8, np.uint8, np.int16, np.uint16)
            and r[2] - r[1] > 15]  # whole-type ranges (the kernel's bound is over the dtype, not the data)


def _twin(x, x_zp, w, bias, mult, shift, out_zp, qmin, qmax, out_dtype, acc_bits=64):
    """The board: int64 dot products, then requantization with an ``acc_bits`` accumulator (wrapping)."""
    n_img, cin, npix = x.shape
    acc = np.zeros((n_img, w.shape[0], npix), np.int64)
    for n in range(n_img):
        acc[n] = naive.int_matmul(w, x[n].astype(np.int64) - x_zp)
    return naive.requantize(acc.reshape(n_img, w.shape[0], npix), bias, mult, shift, out_zp, qmin, qmax, acc_bits,
                            False, out_dtype)[0]


@settings(deadline=None, max_examples=examples(150))
@given(st.data())
def test_pointwise_small_matches_twin(data):
    dt, lo, hi = data.draw(naive.value_ranges(X_RANGES))
    n_img = data.draw(st.integers(1, 3))
    cin, cout = data.draw(st.integers(1, 70)), data.draw(st.integers(1, 70))
    npix = data.draw(st.integers(1, pointwise_small.MAX_PIXELS))
    x = data.draw(naive.int_arrays((n_img, cin, npix), dt, lo, hi))
    x_zp = data.draw(naive.zero_points(lo, hi))
    # weights of 1, 2 and 4 bytes (the kernel picks the narrowest type that holds them)
    wdt, wlo, whi = data.draw(st.sampled_from([(np.int8, -128, 127), (np.int16, -32768, 32767),
                                               (np.int32, -70000, 70000)]))
    w = data.draw(naive.int_arrays((cout, cin), wdt, wlo, whi))
    bias = data.draw(naive.int_arrays((cout,), np.int64, -2 ** 40, 2 ** 40))
    mult, shift = data.draw(naive.multiplier_arrays(cout, allow_negative=True))
    out_dtype, out_zp, qmin, qmax = data.draw(naive.out_params(naive.out_ranges_like(dt)))
    # among up to 70 channels one usually has a shift past the saturation bound's reach (r > 62 - bits of the
    # output range), which is never fused: cap the shifts there in most examples, so most examples compare
    if data.draw(st.integers(0, 4)):
        shift = naive.fusable_shifts(shift, out_zp, qmin, qmax)
    acc_bits = data.draw(st.sampled_from([64, 64, 64, 48, 32, 24]))
    prep = pointwise_small.prepare(dt, x_zp, w, bias, mult, shift, out_zp, qmin, qmax, acc_bits)
    expected = _twin(x, x_zp, w, bias, mult, shift, out_zp, qmin, qmax, out_dtype, acc_bits)
    if prep is None:  # only where the board's accumulator could overflow (counted by the unfused path), or some
        # channel has no saturation bound (a huge shift): the twin still defines it
        from kernels.requantize import saturation_bounds
        x_dev = max(abs(lo - x_zp), abs(hi - x_zp))
        acc_max = x_dev * int(np.abs(w.astype(np.int64)).sum(axis=1).max()) + int(np.abs(bias).max())
        assert acc_max >= 1 << (acc_bits - 1) or int(saturation_bounds(mult, shift, out_zp, qmin, qmax).min()) == 0
        event("not fused")
        return
    out = np.empty(expected.shape, out_dtype)
    pointwise_small.run(x, prep, out)
    np.testing.assert_array_equal(out, expected)


def test_pointwise_small_extremes():
    """Every product at its extreme and a multiplier at its largest: the int64 sums and the requantization
    are exact (int16 codes against int16 weights, 70 terms, the output saturating and not)."""
    x = np.full((1, 70, 2), -32768, np.int16)
    x[0, :, 1] = 32767
    w = np.full((3, 70), -32768, np.int16)
    w[1] = 32767
    w[2, ::2] = 1
    mult, shift = np.array([2 ** 31 - 1, 2 ** 30, -(2 ** 31 - 1)]), np.array([29, 20, 28])
    bias = np.array([5, -(2 ** 40), 0])
    for out_dtype, qmin, qmax in [(np.int16, -32768, 32767), (np.int32, -2 ** 31, 2 ** 31 - 1)]:
        prep = pointwise_small.prepare(np.int16, 32767, w, bias, mult, shift, 3, qmin, qmax, 64)
        out = np.empty((1, 3, 2), out_dtype)
        pointwise_small.run(x, prep, out)
        np.testing.assert_array_equal(out, _twin(x, 32767, w, bias, mult, shift, 3, qmin, qmax, out_dtype))


def test_pointwise_small_refuses_what_it_cannot_prove():
    w = np.full((2, 1024), 127, np.int8)
    ok = (np.zeros(2, np.int64), np.full(2, 2 ** 30), np.full(2, 40), 0, -128, 127)
    bias, mult, shift, out_zp, qmin, qmax = ok
    assert pointwise_small.prepare(np.int16, 0, w, bias, mult, shift, out_zp, qmin, qmax, 48) is not None
    # 2**15 * 1024 * 127 reaches a 32-bit accumulator: the unfused path must count the overflows
    assert pointwise_small.prepare(np.int16, 0, w, bias, mult, shift, out_zp, qmin, qmax, 32) is None
    assert pointwise_small.prepare(np.int32, 0, w, bias, mult, shift, out_zp, qmin, qmax, 48) is None
    prep = pointwise_small.prepare(np.int8, 0, w, bias, mult, shift, out_zp, qmin, qmax, 32)
    with pytest.raises(ValueError, match="shapes"):
        pointwise_small.run(np.zeros((1, 1023, 1), np.int8), prep, np.empty((1, 2, 1), np.int8))
    with pytest.raises(ValueError, match="dtype"):
        pointwise_small.run(np.zeros((1, 1024, 1), np.int32), prep, np.empty((1, 2, 1), np.int8))


def test_pointwise_small_int32_accumulators_at_their_bound():
    """int32 accumulators where max|x - x_zp| * max_c sum|w[c]| < 2**31: at 65535 * 32768 = 2**31 - 32768 the
    sums are exact in int32; one more weight unit and the kernel accumulates in int64 (still exact)."""
    for cin, acc_dtype in ((32768, np.int32), (32769, np.int64)):
        w = np.ones((2, cin), np.int8)
        w[1] = -1
        x = np.full((1, cin, 1), 32767, np.int16)
        mult, shift = np.array([1 << 30, 1 << 30]), np.array([46, 46])
        prep = pointwise_small.prepare(np.int16, -32768, w, np.zeros(2, np.int64), mult, shift, 0, -32768, 32767,
                                       64)
        assert prep[-1] is acc_dtype and prep[1].dtype == np.int8
        out = np.empty((1, 2, 1), np.int16)
        pointwise_small.run(x, prep, out)
        expected = _twin(x, -32768, w, np.zeros(2, np.int64), mult, shift, 0, -32768, 32767, np.int16)
        np.testing.assert_array_equal(out, expected)
        assert abs(int(out[0, 0, 0])) > 0  # the sums reached the output, not a saturated zero
