"""`npu-sim inspect MODEL` (issue 31): inputs, outputs, their quantization, the quantization summary and the ops,
as text and as JSON, checked against the values in the model files themselves; and the messages of the same issue:
an NHWC array fed to an NCHW model (and the reverse) named as such, a subcommand's own usage on an option it does
not take."""
import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from npu_sim.api import inspect
from npu_sim.cli.main import main
from tests.qdq_models import build_model, quantize, real_models, rng_for, small_cnn, weights


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def inits_of(path) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def edge_node(path, op, tensor):
    """The QuantizeLinear reading ``tensor`` (op Q) or the DequantizeLinear writing it (op DQ)."""
    nodes = onnx.load(str(path)).graph.node
    if op == "QuantizeLinear":
        return next(n for n in nodes if n.op_type == op and n.input[0] == tensor)
    return next(n for n in nodes if n.op_type == op and n.output[0] == tensor)


def nhwc_cnn() -> onnx.ModelProto:
    """x[1,8,8,3] (NHWC) -> Transpose -> Conv -> Relu -> y[1,4,8,8]."""
    rng = rng_for("nhwc_cnn")
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="to_nchw", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return build_model(nodes, {"x": (1, 8, 8, 3)}, {"y": (1, 4, 8, 8)}, {"W": weights(rng, (4, 3, 3, 3), 0.3)})


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("inspect")
    return {"u8": quantize(small_cnn(), d, "u8"),
            "s8_dyn": quantize(small_cnn(batch="N"), d, "s8_dyn", activation_type="s8", per_channel=True,
                               calib_shapes={"x": (1, 3, 8, 8)}),
            "nhwc": quantize(nhwc_cnn(), d, "nhwc"),
            "s16": quantize(small_cnn(), d, "s16", activation_type="s16", weight_type="s8")}


def assert_quant_is_the_files(q: dict, path, node) -> None:
    inits = inits_of(path)
    scale, zp = inits[node.input[1]], inits[node.input[2]]
    assert (q["node"], q["op"], q["dtype"]) == (node.name, node.op_type, zp.dtype.name)
    assert q["scale"] == [float(scale)] and q["zero_point"] == [int(zp)]
    info = np.iinfo(zp.dtype)
    assert q["range"] == pytest.approx([(info.min - int(zp)) * float(scale), (info.max - int(zp)) * float(scale)])


def test_uint8_model_as_json(models, capsys):
    path = models["u8"]
    code, out, err = run_cli(capsys, "inspect", path, "--json")
    assert code == 0 and not err
    data = json.loads(out)
    assert (data["schema"], data["version"]) == ("npu-sim-inspect", 1)
    assert data["opset"] == 17 and data["producer"].startswith("onnx.quantize")
    (x,) = data["inputs"]
    assert (x["name"], x["dtype"], x["shape"], x["layout"]) == ("x", "float32", [1, 3, 8, 8], "NCHW")
    assert_quant_is_the_files(x["quant"], path, edge_node(path, "QuantizeLinear", "x"))
    (y,) = data["outputs"]
    assert (y["name"], y["dtype"], y["shape"]) == ("y", "float32", [1, 4])
    assert_quant_is_the_files(y["quant"], path, edge_node(path, "DequantizeLinear", "y"))
    q = data["quantization"]
    assert list(q["activations"]) == ["uint8"] and q["activations"]["uint8"]["asymmetric"] > 0
    assert q["weights"]["int8"]["per_tensor"] == 3 and q["weights"]["int8"]["per_channel"] == 0
    assert q["biases"] == {"int32": 3} and q["sixteen_bit_tensors"] == []
    model = onnx.load(str(path))
    ops = [n.op_type for n in model.graph.node]
    assert data["ops"] == {op: ops.count(op) for op in set(ops)}
    assert q["qdq_pairs"] == ops.count("QuantizeLinear")


def test_int8_dynamic_batch_per_channel_as_text(models, capsys):
    path = models["s8_dyn"]
    code, out, _ = run_cli(capsys, "inspect", path)
    assert code == 0
    zp = inits_of(path)[edge_node(path, "QuantizeLinear", "x").input[2]]
    assert "  x: float32 [N, 3, 8, 8] NCHW" in out
    assert f"int8: scale {float(inits_of(path)['x_scale']):.6g}, zero point {int(zp)}" in out
    assert "activations: int8 x" in out and "per-channel" in out and "16-bit tensors: 0" in out
    data = inspect(path).to_dict()
    assert data["inputs"][0]["shape"] == ["N", 3, 8, 8] and data["outputs"][0]["shape"] == ["N", 4]
    weights_ = data["quantization"]["weights"]["int8"]
    assert weights_["per_channel"] == 3 and weights_["symmetric"] == 3
    conv_w = next(n for n in onnx.load(str(path)).graph.node if n.op_type == "DequantizeLinear"
                  and n.output[0].startswith("W1"))
    assert len(inits_of(path)[conv_w.input[1]]) == 6  # the per-channel scale of conv1: 6 output channels


def test_nhwc_input_is_named_nhwc(models):
    data = inspect(models["nhwc"]).to_dict()
    assert data["inputs"][0]["shape"] == [1, 8, 8, 3] and data["inputs"][0]["layout"] == "NHWC"
    assert data["ops"]["Transpose"] == 1


def test_sixteen_bit_model(models, capsys):
    path = models["s16"]
    data = inspect(path).to_dict()
    q = data["quantization"]
    assert list(q["activations"]) == ["int16"] and "x" in q["sixteen_bit_tensors"]
    assert len(q["sixteen_bit_tensors"]) == q["activations"]["int16"]["tensors"]
    assert_quant_is_the_files(data["inputs"][0]["quant"], path, edge_node(path, "QuantizeLinear", "x"))
    code, out, _ = run_cli(capsys, "inspect", path)
    assert code == 0 and f"16-bit tensors: {len(q['sixteen_bit_tensors'])} (x" in out


def test_integer_input_and_output_show_their_own_qdq(models, tmp_path, capsys):
    """A model fed integers (its input's QuantizeLinear cut off) and one with no quantization at an edge."""
    model = onnx.load(str(models["u8"]))
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    for n in model.graph.node:
        n.input[:] = ["x" if i == q.output[0] else i for i in n.input]
    model.graph.node.remove(q)
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.UINT8
    path = tmp_path / "int_input.onnx"
    onnx.save(model, str(path))
    (x,) = inspect(path).to_dict()["inputs"]
    assert x["dtype"] == "uint8" and x["layout"] == "NCHW" and x["quant"]["op"] == "DequantizeLinear"
    assert_quant_is_the_files(x["quant"], path, next(n for n in model.graph.node if n.input[0] == "x"))
    float_path = models["u8"].with_name("u8.float.onnx")
    code, out, _ = run_cli(capsys, "inspect", float_path)
    assert code == 0 and "not quantized: no QuantizeLinear or DequantizeLinear reads it" in out
    assert "not quantized: no DequantizeLinear or QuantizeLinear writes it" in out and "Q/DQ pairs: 0" in out


def test_a_float_weight_with_its_own_quantizelinear_counts_as_a_weight(models, tmp_path):
    model = onnx.load(str(models["u8"]))
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0].startswith("W1"))
    inits = {t.name: t for t in model.graph.initializer}
    scale, zp = numpy_helper.to_array(inits[dq.input[1]]), numpy_helper.to_array(inits[dq.input[2]])
    w = (numpy_helper.to_array(inits[dq.input[0]]).astype(np.float32) - zp) * scale
    model.graph.initializer.append(numpy_helper.from_array(w, "W1_float"))
    model.graph.node.insert(0, helper.make_node("QuantizeLinear", ["W1_float", dq.input[1], dq.input[2]], ["W1_q"],
                                                name="W1_quantize"))
    dq.input[0] = "W1_q"
    path = tmp_path / "float_weight.onnx"
    onnx.save(model, str(path))
    before, after = (inspect(p).to_dict()["quantization"] for p in (models["u8"], path))
    assert after["weights"] == before["weights"] and after["activations"] == before["activations"]
    assert after["qdq_pairs"] == before["qdq_pairs"] + 1


def test_real_model():
    _, (path,) = real_models("ppocr_cls_a8w8")
    data = inspect(path).to_dict()
    (x,) = data["inputs"]
    assert (x["name"], x["shape"], x["layout"]) == ("x", [1, 3, 48, 192], "NCHW")
    assert_quant_is_the_files(x["quant"], path, edge_node(path, "QuantizeLinear", "x"))
    model = onnx.load(str(path))
    (out,) = model.graph.output
    assert data["outputs"][0]["name"] == out.name
    assert_quant_is_the_files(data["outputs"][0]["quant"], path, edge_node(path, "DequantizeLinear", out.name))
    assert data["opset"] == 13 and data["ops"]["Conv"] == sum(n.op_type == "Conv" for n in model.graph.node)
    assert list(data["quantization"]["weights"]) == ["int8"]


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    code, out, err = run_cli(capsys, "inspect", tmp_path / "missing.onnx")
    assert code == 2 and not out and "not found" in err and len(err.splitlines()) == 1
    bad = tmp_path / "notes.onnx"
    bad.write_text("not a model")
    code, out, err = run_cli(capsys, "inspect", bad)
    assert code == 2 and "not an ONNX model" in err and "Traceback" not in err


def test_help_names_the_json_and_no_board(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["inspect", "--help"])
    text = capsys.readouterr().out
    assert exc.value.code == 0 and "--json" in text and "--board" not in text and "docs/INSPECT.md" in text


@pytest.mark.parametrize("model, shape, hint", [
    ("u8", (1, 8, 8, 3), "layout NHWC (channels last); the model takes NCHW: save np.transpose(a, (0, 3, 1, 2)) "
                         "(1x3x8x8)"),
    ("s8_dyn", (2, 8, 8, 3), "the model takes NCHW: save np.transpose(a, (0, 3, 1, 2)) (2x3x8x8)"),
    ("nhwc", (1, 3, 8, 8), "layout NCHW (channels first); the model takes NHWC: save np.transpose(a, (0, 2, 3, 1)) "
                           "(1x8x8x3)"),
])
def test_run_names_a_transposed_array(models, tmp_path, capsys, model, shape, hint):
    feed = tmp_path / "a.npy"
    np.save(feed, np.zeros(shape, np.float32))
    code, out, err = run_cli(capsys, "run", models[model], "--input", f"x={feed}", "--out", tmp_path / "out")
    errors = [line for line in err.splitlines() if not line.startswith("compiling kernels for first use")]
    assert code == 2 and hint in err and len(errors) == 1, err  # one message (after a first-use compile note)


def test_run_takes_the_right_layout_without_a_hint(models, tmp_path, capsys):
    feed = tmp_path / "a.npy"
    np.save(feed, np.zeros((1, 3, 8, 9), np.float32))  # wrong, but not transposed: the shape message, no hint
    code, _, err = run_cli(capsys, "run", models["u8"], "--input", f"x={feed}", "--out", tmp_path / "out")
    assert code == 2 and "np.transpose" not in err and "expected shape 1x3x8x8, got 1x3x8x9" in err
    assert "accepted too by `npu-sim run --input`" in err  # the CLI's flag, not only the Python API
    np.save(feed, np.zeros((1, 3, 8, 8), np.float32))
    code, _, err = run_cli(capsys, "run", models["u8"], "--input", f"x={feed}", "--out", tmp_path / "out")
    assert code == 0 and "np.transpose" not in err


@pytest.mark.parametrize("argv, usage, hint", [
    (["run", "--dump", "m.onnx"], "usage: npu-sim run ", "--dump (did you mean --dump-all?)"),
    (["check", "m.onnx", "--jsn"], "usage: npu-sim check ", "--jsn (did you mean --json?)"),
    (["inspect", "m.onnx", "--board", "default"], "usage: npu-sim inspect ", "--board default"),
    (["boards", "--all"], "usage: npu-sim boards", "--all"),
])
def test_a_bad_option_prints_the_commands_usage(capsys, argv, usage, hint):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(usage) and f"unrecognized arguments: {hint}" in err, err
