"""A Relu/Clip the lowering folds into a Concat (no QuantizeLinear between them) clamps the Concat's output: every
input it rescales to the output quantization is clamped to the folded bounds, as onnxruntime computes the group."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import npu_sim


def _concat_relu(path) -> str:
    """a, b -> Q/DQ -> Concat -> Relu -> Q/DQ: inputs and output of different scales, the output's zero point
    below the Relu's bound (int8, zp -20), so the Relu is not implied by the output's range."""
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             (("sa", 0.02, np.float32), ("za", 0, np.int8), ("sb", 0.05, np.float32), ("zb", 0, np.int8),
              ("sy", 0.03, np.float32), ("zy", -20, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "sa", "za"], ["ad"]),
             helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"]),
             helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"]),
             helper.make_node("Concat", ["ad", "bd"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 6]) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


@pytest.mark.parametrize("board", ["default", "onnx"])
def test_relu_folded_into_concat_clamps_every_rescaled_input(tmp_path, board):
    path = _concat_relu(tmp_path / "concat_relu.onnx")
    feeds = {"a": np.linspace(-2.0, 2.0, 6, dtype=np.float32).reshape(1, 6),
             "b": np.linspace(-4.0, 4.0, 6, dtype=np.float32).reshape(1, 6)}
    sim = npu_sim.load(path, board=board)
    got = sim.run(feeds, raw=True)["y"].astype(np.int64)
    ref = np.rint(ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0] / 0.03) - 20
    assert got.min() >= 0 - 20  # the Relu: no output code below the zero point
    assert np.abs(got - ref).max() <= 1, (got, ref)
