"""ort_qlgavgpool (onnxruntime's QLinearGlobalAveragePool) == golden twin, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.ort_qlgavgpool import ort_qlgavgpool
from tests import naive_ort as N


@st.composite
def gap_case(draw):
    dtype = draw(st.sampled_from(N.DTYPES_8))
    rows = draw(st.integers(1, 6))
    n = draw(st.sampled_from([1, 2, 3, 4, 7, 9, 16, 49, 64, 196, 225, 1000]))
    x = draw(N.int8_arrays(rows * n, dtype)).reshape(rows, n)
    sx, sy = draw(N.related_scales(2))
    return x, sx, draw(N.zero_point(dtype)), sy, draw(N.zero_point(dtype)), dtype


@settings(deadline=None, max_examples=300)
@given(gap_case())
def test_ort_qlgavgpool_matches_twin(case):
    *args, dtype = case
    out = np.empty(args[0].shape[0], dtype=dtype)
    try:
        expected = N.qlgavgpool(*args, dtype)
    except ValueError:  # onnxruntime throws: the kernel must refuse too
        with pytest.raises(ValueError):
            ort_qlgavgpool(*args, out)
        return
    ort_qlgavgpool(*args, out)
    np.testing.assert_array_equal(out, expected)


def test_tie_rounds_to_even_offset():
    # mean (x - zx) * sx / sy = 2.5: MlasRequantizeOutput adds the zero point after rounding -> 2 + 7 = 9.
    x = np.array([[2, 3]], np.uint8)
    out = np.empty(1, np.uint8)
    ort_qlgavgpool(x, 2.0, 0, 2.0, 7, out)
    assert out.tolist() == [np.rint(2.5) + 7]
    np.testing.assert_array_equal(out, N.qlgavgpool(x, 2.0, 0, 2.0, 7, np.uint8))


def test_out_of_range_factor_refused():
    x = np.zeros((1, 4), np.int8)
    out = np.empty(1, np.int8)
    with pytest.raises(ValueError, match="range"):
        ort_qlgavgpool(x, 1024.0, 0, 1.0, 0, out)  # 1024 / 4 = 256
    with pytest.raises(ValueError, match="range"):
        ort_qlgavgpool(x, 2.0 ** -40, 0, 1.0, 0, out)
    with pytest.raises(ValueError, match="shape"):
        ort_qlgavgpool(x, 1.0, 0, 1.0, 0, np.empty(2, np.int8))
