"""row_sums == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.requantize import saturation_bounds
from kernels.row_sum import bind_requantized, row_sums, row_sums_requantized
from tests import naive


@settings(deadline=None, max_examples=examples(100))
@given(st.data())
def test_row_sums_match_twin(data):
    dt, lo, hi = data.draw(naive.value_ranges(naive.OUT_RANGES))
    shape = (data.draw(st.integers(0, 6)), data.draw(st.integers(0, 300)))
    x = data.draw(naive.int_arrays(shape, dt, lo, hi))
    out = np.empty(shape[0], np.int64)
    row_sums(x, out)
    np.testing.assert_array_equal(out, naive.row_sums(x))


def test_row_sums_extremes_and_validation():
    x = np.full((2, 100000), 32767, np.int16)
    x[1] = -32768
    out = np.empty(2, np.int64)
    row_sums(x, out)
    assert out.tolist() == [32767 * 100000, -32768 * 100000]
    with pytest.raises(ValueError, match="int64"):
        row_sums(x, np.empty(2, np.int32))
    with pytest.raises(ValueError, match="dtype"):
        row_sums(x.astype(np.int64), out)


@settings(deadline=None, max_examples=examples(150))
@given(st.data())
def test_row_sums_requantized_matches_twins(data):
    """row sums then requantize (naive.row_sums, naive.requantize) in one call; False (bind: None) exactly where
    fusion is not proven. What a graph node keeps, one bound run, gives the twins' result on other data of the
    same shape too (called repeatedly); another shape gets its own bind."""
    dt, lo, hi = data.draw(naive.value_ranges(naive.OUT_RANGES))
    shape = (data.draw(st.integers(1, 6)), data.draw(st.integers(1, 300)))
    mult, shift = data.draw(naive.multipliers(allow_negative=True))
    bias = data.draw(st.integers(-2 ** 40, 2 ** 40))
    out_dtype, out_zp, qmin, qmax = data.draw(naive.out_params())
    acc_bits = data.draw(st.sampled_from([32, 48, 64]))
    args = (bias, mult, shift, out_zp, qmin, qmax, acc_bits)
    info = np.iinfo(dt)
    reach = shape[1] * max(-int(info.min), int(info.max)) + abs(bias)
    proven = (reach < 2 ** (acc_bits - 1)
              and int(saturation_bounds(np.array([mult]), np.array([shift]), out_zp, qmin, qmax, reach)[0]) > 0)
    for rows in (shape[0], shape[0] + 1):
        x = data.draw(naive.int_arrays((rows, shape[1]), dt, lo, hi))
        out = np.empty(rows, out_dtype)
        assert row_sums_requantized(x, *args, out) == proven
        run = bind_requantized(x, *args, np.empty(rows, out_dtype))
        assert (run is not None) == proven
        if not proven:
            continue
        x2 = data.draw(naive.int_arrays((rows, shape[1]), dt, lo, hi))  # other data, the same shape and dtype
        results = [(x, out)]
        for xi in (x, x2, x):
            results.append((xi, np.empty(rows, out_dtype)))
            run(xi, results[-1][1])
        for xi, got in results:
            acc = naive.row_sums(xi).reshape(1, 1, rows)
            expected, overflows = naive.requantize(acc, [bias], [mult], [shift], out_zp, qmin, qmax, acc_bits, False,
                                                   out_dtype)
            assert overflows == 0
            np.testing.assert_array_equal(got, expected.reshape(rows))
