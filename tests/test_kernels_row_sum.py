"""row_sums == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.row_sum import row_sums
from tests import naive


@settings(deadline=None, max_examples=100)
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
