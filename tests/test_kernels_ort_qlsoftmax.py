"""qlinear_softmax (onnxruntime's QLinearSoftmax) == golden twin, bit for bit; board onnx == onnxruntime."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from kernels.ort_qlsoftmax import qlinear_softmax
from tests import naive_ort as N


@st.composite
def case(draw):
    dtype = draw(st.sampled_from([np.int8, np.uint8]))
    info = np.iinfo(dtype)
    rows, d = draw(st.integers(1, 3)), draw(st.integers(1, 40))
    x = np.array(draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=rows * d, max_size=rows * d)),
                 dtype).reshape(rows, d)
    zy = -128 if dtype == np.int8 else 0
    return x, np.float32(draw(st.floats(1e-3, 0.5))), np.float32(1 / 255), zy, dtype


@settings(deadline=None, max_examples=150)
@given(case())
def test_qlinear_softmax_matches_twin(c):
    from kernels.ort_qlsoftmax import defined
    x, sx, sy, zy, dtype = c
    out = np.empty(x.shape, dtype)
    if not defined(sx, x.shape[1], sy):  # onnxruntime itself overflows (undefined behaviour): refused
        with pytest.raises(ValueError, match="overflows"):
            qlinear_softmax(x, sx, sy, zy, out)
        return
    qlinear_softmax(x, sx, sy, zy, out)
    np.testing.assert_array_equal(out, N.qlsoftmax(x, sx, sy, zy, dtype))


def _model(path, dtype, sx, zx, shape, axis):
    t = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    zy = np.array(0 if dtype == np.uint8 else -128, dtype)
    inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"), numpy_helper.from_array(np.array(zx, dtype), "zx"),
             numpy_helper.from_array(np.array(1 / 255, np.float32), "sy"), numpy_helper.from_array(zy, "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x"]),
             helper.make_node("Softmax", ["x"], ["y"], axis=axis),
             helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("xq", t, list(shape))],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_board_onnx_matches_onnxruntime_qlinear_softmax(tmp_path):
    import npu_sim
    rng = np.random.default_rng(0)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    mismatches = total = 0
    for trial in range(16):
        dtype = (np.int8, np.uint8)[trial % 2]
        info = np.iinfo(dtype)
        shape, axis = ((2, 5, 37), -1) if trial < 8 else ((2, 6, 7), 1)
        path = _model(tmp_path / f"m{trial}.onnx", dtype, rng.uniform(0.02, 0.3), int(rng.integers(-10, 10))
                      + (128 if dtype == np.uint8 else 0), shape, axis)
        x = rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
        ref = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]
        sim = npu_sim.load(path, board="onnx")
        assert any(n.attrs.get("arithmetic") == "onnxruntime QLinearSoftmax" for n in sim.program.nodes)
        got = sim.run({"xq": x})["out"]
        mismatches += int(np.count_nonzero(got != ref))
        total += got.size
    assert mismatches == 0, f"{mismatches} of {total}"
