"""Bad input: one clear message naming what is wrong, the right exception class, exit code 2 from the CLI."""
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npu_sim
from npu_sim.cli.main import main
from npu_sim.errors import (BoardError, InputError, ModelLoadError, QuantizationError, UnsupportedModelError)


def tiny_qdq(path, scale=0.05, w_scale=(0.01, 0.02), zp_type=TensorProto.UINT8, zp=128, extra_nodes=(),
             input_dims=(1, 2, 4, 4), out_name="y_dq", external=None):
    """x -> Q -> DQ -> Conv(DQ(w), DQ(b)) -> Q -> DQ -> [extra nodes] -> output."""
    inits = [
        helper.make_tensor("s_x", TensorProto.FLOAT, [], [0.02]),
        helper.make_tensor("z_x", zp_type, [], [zp]),
        numpy_helper.from_array(np.arange(-18, 18, dtype=np.int8).reshape(2, 2, 3, 3), "w_q"),
        numpy_helper.from_array(np.array(w_scale, np.float32), "s_w"),
        numpy_helper.from_array(np.zeros(len(w_scale), np.int8), "z_w"),
        numpy_helper.from_array(np.array([5, -7], np.int32), "b_q"),
        numpy_helper.from_array((np.float32(0.02) * np.array(w_scale, np.float32)).astype(np.float32), "s_b"),
        helper.make_tensor("s_y", TensorProto.FLOAT, [], [scale]),
        helper.make_tensor("z_y", zp_type, [], [zp]),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["x_q"], name="q_x"),
        helper.make_node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x_dq"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["w_q", "s_w", "z_w"], ["w_dq"], name="dq_w", axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "s_b"], ["b_dq"], name="dq_b", axis=0),
        helper.make_node("Conv", ["x_dq", "w_dq", "b_dq"], ["y"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["y", "s_y", "z_y"], ["y_q"], name="q_y"),
        helper.make_node("DequantizeLinear", ["y_q", "s_y", "z_y"], ["y_dq"], name="dq_y"),
        *extra_nodes,
    ]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_dims))],
                              [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if external:
        external(model)
    onnx.save(model, str(path))
    return path


def cli(*args, capsys):
    code = main(list(map(str, args)))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_clean_error(code, err, *fragments):
    assert code == 2, err
    assert "Traceback" not in err
    assert err.startswith("npu-sim: error:")
    for f in fragments:
        assert f in err, err


def test_tiny_model_runs(tmp_path):
    sim = npu_sim.load(tiny_qdq(tmp_path / "m.onnx"))
    out = sim.run({"x": np.zeros((1, 2, 4, 4), np.float32)})
    assert out["y_dq"].shape == (1, 2, 4, 4)


def test_missing_file(tmp_path, capsys):
    with pytest.raises(ModelLoadError, match="not found"):
        npu_sim.load(tmp_path / "nope.onnx")
    code, _, err = cli("run", tmp_path / "nope.onnx", capsys=capsys)
    assert_clean_error(code, err, "nope.onnx", "not found")


def test_not_onnx(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not a protobuf \xff\xfe" * 10)
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        npu_sim.load(bad)
    code, _, err = cli("lower", bad, capsys=capsys)
    assert_clean_error(code, err, "bad.onnx", "not an ONNX model")


def test_float_model(tmp_path, capsys):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "f",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "float.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(UnsupportedModelError, match="float model"):
        npu_sim.load(path)
    code, _, err = cli("run", path, capsys=capsys)
    assert_clean_error(code, err, "float model", "quantize_static")


def test_unsupported_ops_listed_at_once(tmp_path, capsys):
    extra = [helper.make_node("Selu", ["y_dq"], ["s1"], name="selu_a"),
             helper.make_node("Einsum", ["s1"], ["s2"], name="einsum_b", equation="abcd->abcd"),
             helper.make_node("Selu", ["s2"], ["out"], name="selu_c")]
    path = tiny_qdq(tmp_path / "m.onnx", extra_nodes=extra, out_name="out")
    with pytest.raises(UnsupportedModelError) as info:
        npu_sim.load(path)
    names = [p[0] for p in info.value.problems]
    assert "selu_a" in names and "einsum_b" in names and "selu_c" in names
    msg = str(info.value)
    assert "lookup" in msg and "Einsum" in msg
    assert "2 Selu nodes ('selu_a', 'selu_c'): " in msg and msg.count("selu_a") == 1  # one line per reason
    code, _, err = cli("lower", path, capsys=capsys)
    assert_clean_error(code, err, "selu_a", "einsum_b", "selu_c")


@pytest.mark.parametrize("scale, fragment", [(float("nan"), "NaN"), (0.0, "positive"), (-0.5, "positive")])
def test_bad_scales(tmp_path, capsys, scale, fragment):
    path = tiny_qdq(tmp_path / "m.onnx", scale=scale)
    with pytest.raises(QuantizationError, match=fragment) as info:
        npu_sim.load(path)
    assert "s_y" in str(info.value) and "q_y" in str(info.value)
    code, _, err = cli("run", path, capsys=capsys)
    assert_clean_error(code, err, "s_y", fragment)


def test_zero_point_out_of_range(tmp_path):
    # a zero point stored in a wider type than the quantized data it describes
    def widen(model):
        for node in model.graph.node:
            if node.name == "dq_w":
                node.input[2] = "z_w_wide"
        model.graph.initializer.append(numpy_helper.from_array(np.array([300, 0], np.int16), "z_w_wide"))
    path = tiny_qdq(tmp_path / "m.onnx", external=widen)
    with pytest.raises(QuantizationError, match="zero point") as info:
        npu_sim.load(path)
    assert "w_q" in str(info.value)


def test_wrong_per_axis_length(tmp_path):
    path = tiny_qdq(tmp_path / "m.onnx", w_scale=(0.01, 0.02, 0.03))
    with pytest.raises(QuantizationError, match="per-axis scale has 3 values"):
        npu_sim.load(path)


def test_wrong_input_shape_and_dtype(tmp_path, capsys):
    sim = npu_sim.load(tiny_qdq(tmp_path / "m.onnx"))
    with pytest.raises(InputError, match="expected shape 1x2x4x4, got 1x2x4x5"):
        sim.run({"x": np.zeros((1, 2, 4, 5), np.float32)})
    with pytest.raises(InputError, match="expected float"):
        sim.run({"x": np.zeros((1, 2, 4, 4), np.int8)})
    with pytest.raises(InputError, match="unknown input"):
        sim.run({"x": np.zeros((1, 2, 4, 4), np.float32), "z": np.zeros(1)})
    with pytest.raises(InputError, match="NaN"):
        sim.run({"x": np.full((1, 2, 4, 4), np.nan, np.float32)})
    feed = tmp_path / "x.npy"
    np.save(feed, np.zeros((1, 2, 4, 5), np.float32))
    code, _, err = cli("run", tmp_path / "m.onnx", "--input", f"x={feed}", "--out", tmp_path / "o", capsys=capsys)
    assert_clean_error(code, err, "x", "1x2x4x4")
    np.save(feed, np.zeros((1, 2, 4, 4), np.int32))
    code, _, err = cli("run", tmp_path / "m.onnx", "--input", f"x={feed}", "--out", tmp_path / "o", capsys=capsys)
    assert_clean_error(code, err, "expected float", "int32")


def test_dynamic_shape_needs_input_shape(tmp_path, capsys):
    def dynamic(model):
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    path = tiny_qdq(tmp_path / "m.onnx", external=dynamic)
    with pytest.raises(InputError, match=r"input 'x' has a dynamic shape \[N, 2, 4, 4\].*--input-shape x=1x2x4x4 "):
        npu_sim.load(path)
    sim = npu_sim.load(path, input_shapes={"x": (3, 2, 4, 4)})
    assert sim.run({"x": np.zeros((3, 2, 4, 4), np.float32)})["y_dq"].shape == (3, 2, 4, 4)
    code, out, err = cli("lower", path, capsys=capsys)  # a free batch dimension is 1, with a note (issue 20)
    assert code == 0 and "free batch dimension; using batch 1 (x=1x2x4x4" in err and "1x2x4x4" in out
    code, out, _ = cli("lower", path, "--input-shape", "x=2x2x4x4", capsys=capsys)
    assert code == 0 and "2x2x4x4" in out
    code, _, err = cli("lower", path, "--input-shape", "x=2x2x4", capsys=capsys)
    assert_clean_error(code, err, "rank 4")
    with pytest.raises(InputError, match="'x': shape 0x2x4x4 .* at least 1"):
        npu_sim.load(path, input_shapes={"x": (0, 2, 4, 4)})
    code, _, err = cli("estimate", path, "--input-shape", "x=0x2x4x4", capsys=capsys)
    assert_clean_error(code, err, "0x2x4x4", "at least 1")
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros((0, 2, 4, 4), np.float32))
    code, _, err = cli("run", path, "--input", f"x={empty}", "--out", tmp_path / "o", capsys=capsys)
    assert_clean_error(code, err, "0x2x4x4", "at least 1")


def test_unwritable_output_folder(tmp_path, capsys):
    """--out on a file, or under a folder that cannot be created: the path and what to do, exit 2."""
    path = tiny_qdq(tmp_path / "m.onnx")
    afile = tmp_path / "afile"
    afile.write_text("")
    code, _, err = cli("run", path, "--out", afile, capsys=capsys)
    assert_clean_error(code, err, str(afile), "give a folder")
    code, _, err = cli("run", path, "--out", afile / "sub", capsys=capsys)
    assert_clean_error(code, err, str(afile / "sub"), "check the path")


@pytest.mark.parametrize("location", ["../../../../etc/passwd", "/etc/passwd", "sub/../../secret.bin"])
def test_hostile_external_data_path(tmp_path, capsys, location):
    def point_outside(model):
        for init in model.graph.initializer:
            if init.name == "w_q":
                init.ClearField("raw_data")
                init.data_location = TensorProto.EXTERNAL
                for k, v in (("location", location), ("offset", "0"), ("length", "18")):
                    entry = init.external_data.add()
                    entry.key, entry.value = k, v
    path = tiny_qdq(tmp_path / "m.onnx", external=point_outside)
    with pytest.raises(ModelLoadError, match="outside the model's folder") as info:
        npu_sim.load(path)
    assert "w_q" in str(info.value)
    code, _, err = cli("run", path, capsys=capsys)
    assert_clean_error(code, err, "w_q", "refusing")


def test_external_data_inside_folder_is_read(tmp_path):
    path = tmp_path / "m.onnx"
    tiny_qdq(path)
    model = onnx.load(str(path))
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    ref = npu_sim.load(tiny_qdq(tmp_path / "ref.onnx"))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 2, 4, 4)).astype(np.float32)
    assert (tmp_path / "weights.bin").is_file()
    assert np.array_equal(npu_sim.load(path).run({"x": x}, raw=True)["y_dq"], ref.run({"x": x}, raw=True)["y_dq"])


def test_unknown_board(tmp_path, capsys):
    path = tiny_qdq(tmp_path / "m.onnx")
    with pytest.raises(BoardError, match="unknown board 'nope'"):
        npu_sim.load(path, board="nope")
    bad = tmp_path / "b.toml"
    bad.write_text("[arithmetic]\nrequantize = 'magic'\n")
    with pytest.raises(BoardError, match="requantize"):
        npu_sim.load(path, board=bad)
    code, _, err = cli("run", path, "--board", "nope", capsys=capsys)
    assert_clean_error(code, err, "nope", "default")


def test_bad_input_argument_forms(tmp_path, capsys):
    path = tiny_qdq(tmp_path / "m.onnx")
    code, _, err = cli("run", path, "--input", "x", capsys=capsys)
    assert_clean_error(code, err, "NAME=FILE")
    code, _, err = cli("run", path, "--input", f"x={tmp_path / 'missing.npy'}", capsys=capsys)
    assert_clean_error(code, err, "missing.npy", "not found")
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not numpy")
    code, _, err = cli("run", path, "--input", f"x={junk}", capsys=capsys)
    assert_clean_error(code, err, "junk.npy")


def test_console_script_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "npu_sim.cli", "run", str(tmp_path / "none.onnx")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "not found" in proc.stderr
