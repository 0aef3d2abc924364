"""What the mutation fuzzer (tests/mutants.py) found and the front door now refuses, one case each: every command
exits 2 with the same one message naming the culprit, and onnx's full check or onnxruntime refuses the model too
(or, where they take it, no integer program computes it: a bias beyond what an accumulator adds, an empty batch)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import npu_sim
from npu_sim.cli.main import main
from tests import hostile_edits as e
from tests.helpers_oracle import ort_session
from tests.hostile_corpus import demo_base, mixed_base


def _same_node_name(m):
    e.node(m, "relu2").name = "relu1"


def _untyped_output(m):
    m.graph.output.append(onnx.ValueInfoProto(name="relu1_out_DequantizeLinear_Output"))


def _zero_batch(m):
    e.input_dims(m, [0, 1, 8, 8])


def _channel_scale(name, value):
    def edit(m):
        s = numpy_helper.to_array(e.init(m, name)).copy()
        s[0] = value
        e.replace_init(m, name, s)
    return edit


CASES = {  # name: (edit, fragments of the message, who else refuses it)
    "node_names_alike": (_same_node_name, ("two nodes are named 'relu1'",), "onnxruntime"),
    "graph_output_untyped": (_untyped_output, ("graph output 'relu1_out_DequantizeLinear_Output' has no type",),
                             "checker"),
    # valid ONNX (an empty batch), read before as a free batch of 1: npu-sim computes no empty tensors
    # (tests/test_validate_schema.py::test_an_empty_tensor_is_refused_naming_its_node), so it says so up front
    "graph_input_zero_dim": (_zero_batch, ("graph input 'input'", "[0, 1, 8, 8]"), None),
    # onnxruntime computes both in float; the bias is beyond 2**61 accumulator units, which no integer program adds
    "gemm_weight_scale_1e-30": (_channel_scale("fc.weight_scale", 1e-30), ("node 'fc' (Gemm)", "channel 0",
                                                                           "accumulator units"), None),
    "conv_weight_scale_1e-42_one_channel": (_channel_scale("conv2.weight_scale", 1e-42),
                                            ("node 'conv2' (Conv)", "channel 0", "accumulator units"), None),
    # an input scale of 1e30: the accumulator's unit (input x weight scale) is so coarse the bias rounds to 0
    "bias_lost_in_accumulator": (lambda m: e.replace_init(m, "input_scale", np.array(1e30, np.float32)),
                                 ("node 'conv1' (Conv)", "rounds to 0"), None),
    "reshape_shape_2d": (lambda m: e.replace_init(m, "shape", np.array([[1, 7, 64]], np.int64)),
                         ("node 'reshape' (Reshape)", "input 1 'shape' has shape [1, 3]"), "onnxruntime run"),
}


def _others_refuse(model, who) -> bool:
    try:
        if who == "checker":
            onnx.checker.check_model(model, full_check=True)
        elif who == "onnxruntime run":
            ort_session(model).run(None, {"x": np.zeros((1, 3, 8, 8), np.float32)})
        else:
            ort_session(model)
    except Exception:
        return True
    return False


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused_alike_by_every_command(name, tmp_path, capsys):
    edit, fragments, who = CASES[name]
    model = mixed_base(tmp_path / "mixed") if name.startswith("reshape") else demo_base()
    edit(model)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    if who:
        assert _others_refuse(model, who), f"{who} takes it: not an invalid model"
    messages = set()
    for argv in (["run", str(path), "--out", str(tmp_path / "out")], ["lower", str(path)],
                 ["estimate", str(path)], *(["check", str(path), "--board", b] for b in ("default", "generic"))):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("npu-sim: error:") == 1 and "Traceback" not in err, err
        messages.add(err.split("npu-sim: error:", 1)[1].strip())
    assert len(messages) == 1, messages
    message = messages.pop()
    assert all(fragment in message for fragment in fragments), message


def test_unchanged_demo_still_runs(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(demo_base(), str(path))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    assert np.load(next((tmp_path / "out").glob("*.int.npy"))).size == 10


def test_matmul_with_a_3d_constant_weight_runs_as_onnxruntime(tmp_path):
    """x[1, 7, 64] @ W[1, 64, 10] (a constant of rank 3, broadcast): valid ONNX, which exited 3 (the runtime fed
    the constant as if it were an activation); board onnx now equals onnxruntime's integers."""
    model = mixed_base(tmp_path / "mixed")
    w = numpy_helper.to_array(e.init(model, "M_quantized"))
    e.replace_init(model, "M_quantized", w[None])
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = npu_sim.load(model, board="onnx").run({"x": x})["y"]
    np.testing.assert_array_equal(got, ort_session(model, int8_fusion=True).run(None, {"x": x})[0])
