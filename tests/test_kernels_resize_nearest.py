"""resize_nearest == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.resize_nearest import resize_nearest
from tests import naive


@settings(deadline=None, max_examples=examples(100))
@given(st.data())
def test_resize_nearest_matches_twin(data):
    dt, lo, hi = data.draw(naive.value_ranges(naive.OUT_RANGES))
    n, c, h, w = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 7)),
                  data.draw(st.integers(1, 7)))
    x = data.draw(naive.int_arrays((n, c, h, w), dt, lo, hi))
    # sorted (upsampling: repeated rows are copies) or arbitrary source indices
    rows = np.array(data.draw(st.lists(st.integers(0, h - 1), min_size=0, max_size=12)), np.int64)
    if data.draw(st.booleans()):
        rows = np.sort(rows)
    cols = np.array(data.draw(st.lists(st.integers(0, w - 1), min_size=0, max_size=12)), np.int64)
    out = np.empty((n, c, rows.size, cols.size), x.dtype)
    resize_nearest(x, rows, cols, out)
    np.testing.assert_array_equal(out, naive.resize_nearest(x, rows, cols))


def test_resize_nearest_validation():
    x = np.zeros((1, 1, 2, 2), np.int16)
    out = np.empty((1, 1, 2, 2), np.int16)
    with pytest.raises(ValueError, match="rows entries"):
        resize_nearest(x, np.array([0, 2]), np.array([0, 1]), out)
    with pytest.raises(ValueError, match="dtype"):
        resize_nearest(x, np.array([0, 1]), np.array([0, 1]), out.astype(np.int8))
