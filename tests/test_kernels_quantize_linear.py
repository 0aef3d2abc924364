"""quantize_linear == golden twin (and npu_sim's QParams.quantize), bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.quantize_linear import quantize_linear
from npu_sim.ir import QParams
from tests import naive



@settings(deadline=None, max_examples=examples(150))
@given(st.data())
def test_quantize_linear_matches_twin(data):
    dtype, lo, hi = data.draw(naive.value_ranges())
    n = data.draw(st.integers(0, 200))
    scale = np.float32(2.0 ** data.draw(st.floats(-20, 4)))
    zp = data.draw(naive.zero_points(lo, hi))
    qmin, qmax = sorted(data.draw(st.integers(lo, hi)) for _ in range(2)) if data.draw(st.booleans()) else (lo, hi)
    kind = data.draw(st.sampled_from(["uniform", "ties", "specials"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    span = float(hi - lo) * float(scale)
    if kind == "uniform":
        x = rng.uniform(-span, span, n)
    elif kind == "ties":  # exact halves of the scale: round half to even decides
        x = (rng.integers(-(hi - lo), hi - lo, n, endpoint=True) + 0.5) * float(scale)
    else:
        x = rng.choice([0.0, -0.0, np.nan, np.inf, -np.inf, 1e30, -1e30, float(scale) / 2, -float(scale) / 2,
                        np.finfo(np.float32).tiny], n)
    x = x.astype(np.float32)
    out = np.empty(n, dtype)
    quantize_linear(x, scale, zp, qmin, qmax, out)
    np.testing.assert_array_equal(out, naive.quantize_linear(x, scale, zp, qmin, qmax, dtype))
    info = np.iinfo(dtype)
    if (qmin, qmax) == (info.min, info.max):
        # what the simulator computes with numpy (npu_sim.ir.QParams.quantize)
        q = QParams(np.dtype(dtype).name, np.array(scale, np.float32), np.array(zp, np.int64))
        np.testing.assert_array_equal(out, q.quantize(x))


def test_quantize_linear_ties_to_even_and_validation():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1e9, -1e9], np.float32)
    out = np.empty(7, np.int16)
    quantize_linear(x, np.float32(1.0), 0, -32768, 32767, out)
    assert out.tolist() == [0, 2, 2, 0, -2, 32767, -32768]
    with pytest.raises(ValueError, match="float32"):
        quantize_linear(x.astype(np.float64), np.float32(1.0), 0, -32768, 32767, out)
    with pytest.raises(ValueError, match="scale"):
        quantize_linear(x, 1.0, 0, -32768, 32767, out)
