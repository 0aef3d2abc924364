"""npu-sim compare MODEL DUMP: dumps as boards write them, the first divergent node and the causes of its
differences; run --dump-all --format c|bin (golden vectors)."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npu_sim
from npu_sim.analysis.compare import sanitize
from npu_sim.analysis.compare.explain import Requant, variations
from npu_sim.analysis.compare.rounding import ROUNDINGS, double_rounding, half_away, half_even, half_up
from npu_sim.analysis.compare.match import layout_of
from npu_sim.cli.main import main as cli_main

DEMO = Path(__file__).resolve().parent.parent / "models" / "demo"
QDQ = DEMO / "digits_cnn.qdq.onnx"
SAMPLE = DEMO / "digits_sample.npy"


def tie_model(path: Path, c: int = 4, hw: int = 6) -> Path:
    """x -> Conv -> Conv (int8, per-tensor), every requantization factor 0.5*0.5/1 = 1/4: a quarter of the
    accumulators land on a rounding tie, where onnxruntime (half to even) and the default board (half up) part."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             (("sx", 0.5, np.float32), ("sw", 0.5, np.float32), ("sb", 0.25, np.float32), ("sy", 1.0, np.float32),
              ("z8", 0, np.int8), ("z32", 0, np.int32))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "z8"], ["xq"], name="x_q"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "z8"], ["xd"], name="x_dq")]
    prev = "xd"
    for i in (1, 2):
        inits += [numpy_helper.from_array(rng.integers(-3, 4, (c, c, 3, 3)).astype(np.int8), f"w{i}"),
                  numpy_helper.from_array(rng.integers(-5, 6, (c,)).astype(np.int32), f"b{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", "sw", "z8"], [f"w{i}d"], name=f"w{i}_dq"),
                  helper.make_node("DequantizeLinear", [f"b{i}", "sb", "z32"], [f"b{i}d"], name=f"b{i}_dq"),
                  helper.make_node("Conv", [prev, f"w{i}d", f"b{i}d"], [f"conv{i}"], name=f"conv{i}",
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", [f"conv{i}", "sy", "z8"], [f"block{i}/out;q"],
                                   name=f"conv{i}_q"),
                  helper.make_node("DequantizeLinear", [f"block{i}/out;q", "sy", "z8"], [f"conv{i}_d"],
                                   name=f"conv{i}_dq")]
        prev = f"conv{i}_d"
    graph = helper.make_graph(nodes, "ties", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, c, hw, hw])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    np.save(path.with_suffix(".x.npy"), np.random.default_rng(1).uniform(-20, 20, (1, c, hw, hw)).astype(np.float32))
    return path


def _run_dump(model: Path, out: Path, x: Path, board: str = "default", *extra) -> Path:
    assert cli_main(["run", str(model), "--board", board, "--input", f"{_input_name(model)}={x}", "--dump-all",
                     "--out", str(out), *extra]) == 0
    return out


def _input_name(model: Path) -> str:
    return "input" if model == QDQ else "x"


def _index(dump: Path) -> dict:
    return json.loads((dump / "index.json").read_text())


@pytest.fixture(scope="module")
def demo_dump(tmp_path_factory):
    return _run_dump(QDQ, tmp_path_factory.mktemp("demo") / "dump", SAMPLE)


# -- acceptance: an onnx-board dump on the default board --------------------------------------------------------

def test_onnx_board_dump_names_first_divergent_node_and_rounding(tmp_path, capsys):
    model = tie_model(tmp_path / "ties.onnx")
    dump = _run_dump(model, tmp_path / "dump", model.with_suffix(".x.npy"), "onnx")
    capsys.readouterr()
    assert cli_main(["compare", str(model), str(dump)]) == 1
    out = capsys.readouterr().out
    assert "first divergent node: 'conv1' [Conv]" in out
    c = npu_sim.compare_dump(model, dump)
    assert c.first_divergent == "conv1"
    first, second = c.tensors
    assert first.differing > 0 and first.causes == {"rounding half to even": first.differing}
    assert first.inherited == 0 and not first.inputs_differ
    assert f"{first.differing} of {first.total} elements differ" in out and "0 unexplained" in out
    # conv2: its input differs, so some of its differences are inherited; its own ties are half to even too
    assert second.inputs_differ == ["conv1"] and second.inherited > 0
    assert second.differing == second.inherited + second.causes["rounding half to even"]
    assert all(ex[3] == "rounding half to even" for ex in first.examples)
    # onnxruntime's float32 formula rounds half to even too: the report says it reproduces them equally
    assert "float32 requantization (onnxruntime)" in first.equally["rounding half to even"]
    assert "(or equally " in out
    assert cli_main(["compare", str(model), str(dump), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_divergent_node"] == "conv1" and doc["tensors"][0]["causes"] == first.causes
    assert doc["tensors"][0]["reproduces"] == {"rounding half to even": [144, 144]}
    assert doc["tensors"][0]["closest"] is None


def test_tflite_board_dump_explained_by_double_rounding(tmp_path):
    """LiteRT's arithmetic (board ethos-u55-128) rounds twice: 97.25 -> 97.5 -> 98 where the default board gives 97;
    the single-rounding variations reproduce the ties only, double rounding every differing element."""
    model = tie_model(tmp_path / "ties.onnx")
    dump = _run_dump(model, tmp_path / "dump", model.with_suffix(".x.npy"), "ethos-u55-128")
    c = npu_sim.compare_dump(model, dump)
    first = c.first_divergent_tensor
    assert c.first_divergent == "conv1" and first.differing > 0
    assert first.causes == {"double rounding (TFLite)": first.differing}


def test_same_board_dump_is_equal(tmp_path, capsys):
    model = tie_model(tmp_path / "ties.onnx")
    dump = _run_dump(model, tmp_path / "dump", model.with_suffix(".x.npy"), "onnx")
    capsys.readouterr()
    assert cli_main(["compare", str(model), str(dump), "--board", "onnx"]) == 0
    assert "all equal" in capsys.readouterr().out


# -- partial, tampered, renamed, NHWC, float ------------------------------------------------------------------

def test_one_element_changed_names_tensor_index_and_values(demo_dump, tmp_path, capsys):
    dump = tmp_path / "d"
    shutil.copytree(demo_dump, dump)
    f = dump / _index(dump)["relu2_out"]["file"]
    a = np.load(f)
    old = int(a[0, 3, 2, 1])
    a[0, 3, 2, 1] = old + 1 if old < 127 else old - 1
    np.save(f, a)
    assert cli_main(["compare", str(QDQ), str(dump)]) == 1
    out = capsys.readouterr().out
    assert (f"first mismatch: tensor 'relu2_out'" in out and "first at index [0, 3, 2, 1]: dump "
            f"{int(a[0, 3, 2, 1])}, simulation {old}" in out)
    c = npu_sim.compare_dump(QDQ, dump)
    assert c.first_divergent == c.first_mismatch.producer
    assert c.first_divergent_tensor.causes == {"unexplained": 1}


def test_every_third_tensor_only(demo_dump, tmp_path, capsys):
    index = _index(demo_dump)
    keep = {k: v for i, (k, v) in enumerate(index.items()) if i % 3 == 0 or k == "input"}
    dump = tmp_path / "partial"
    shutil.copytree(demo_dump, dump)
    (dump / "index.json").write_text(json.dumps(keep))
    assert cli_main(["compare", str(QDQ), str(dump)]) == 0
    out = capsys.readouterr().out
    c = npu_sim.compare_dump(QDQ, dump)
    assert len(c.tensors) == len(keep) - 1 and len(c.not_in_dump) == len(index) - len(keep)
    sim = npu_sim.load(QDQ, input_shapes={"input": (1, 1, 8, 8)})  # a loaded Simulator works too
    assert npu_sim.compare_dump(sim, dump).equal
    assert (f"summary: {len(keep) - 1} of {len(keep) - 1} dumped tensors match, 0 differ; "
            f"{len(index) - len(keep)} tensor(s) of the model not in the dump" in out)


def test_nhwc_npz_named_by_quantizelinear_outputs(demo_dump, tmp_path, capsys):
    sim = npu_sim.load(QDQ, input_shapes={"input": (1, 1, 8, 8)})
    by_float = {t.float_name: t.name for t in sim.program.tensors.values() if t.q is not None}
    arrays = {}
    for name, e in _index(demo_dump).items():
        a = np.load(demo_dump / e["file"])
        arrays[by_float[name]] = np.transpose(a, (0, 2, 3, 1)) if a.ndim == 4 else a
    assert any(k != v for k, v in by_float.items() if k in _index(demo_dump))  # the names really change
    np.savez(tmp_path / "board.npz", **arrays)
    assert cli_main(["compare", str(QDQ), str(tmp_path / "board.npz")]) == 0
    assert "all equal" in capsys.readouterr().out
    # the same as a folder of .npy files named by the sanitized names
    folder = tmp_path / "npys"
    folder.mkdir()
    for k, a in arrays.items():
        np.save(folder / f"{sanitize(k)}.npy", a)
    c = npu_sim.compare_dump(QDQ, folder)
    assert c.equal and {t.layout for t in c.tensors if t.tensor.startswith(("conv", "relu"))} == {"nhwc"}


def test_dequantized_float_dump_in_lsb(demo_dump, tmp_path):
    sim = npu_sim.load(QDQ, input_shapes={"input": (1, 1, 8, 8)})
    q = {t.float_name: t.q for t in sim.program.tensors.values() if t.q is not None}
    arrays = {k: q[k].dequantize(np.load(demo_dump / e["file"])) for k, e in _index(demo_dump).items()}
    np.savez(tmp_path / "f.npz", **arrays)
    c = npu_sim.compare_dump(QDQ, tmp_path / "f.npz")
    assert c.equal and all(t.dequantized for t in c.tensors)
    arrays["conv2_out"][0, 1, 1, 1] += 2 * float(q["conv2_out"].scale)  # two LSB off
    np.savez(tmp_path / "f.npz", **arrays)
    t = npu_sim.compare_dump(QDQ, tmp_path / "f.npz").first_mismatch
    assert t.tensor == "conv2_out" and t.max_diff == 2 and t.first_index == (0, 1, 1, 1)


def test_raw_binary_with_csv_manifest(demo_dump, tmp_path, capsys):
    folder = tmp_path / "raw"
    folder.mkdir()
    rows = ["name,file,shape,dtype,layout"]
    for i, (name, e) in enumerate(_index(demo_dump).items()):
        a = np.load(demo_dump / e["file"])
        a.astype("<" + a.dtype.str[1:]).tofile(folder / f"t{i}.raw")
        rows.append(f'"{name}",t{i}.raw,{"x".join(map(str, a.shape))},{a.dtype.name},nchw')
    (folder / "manifest.csv").write_text("\n".join(rows) + "\n")
    assert cli_main(["compare", str(QDQ), str(folder)]) == 0
    (folder / "t3.raw").write_bytes(b"\0")
    assert cli_main(["compare", str(QDQ), str(folder)]) == 2
    assert "holds 1 bytes" in capsys.readouterr().err


def test_entries_outside_the_dump_are_refused(demo_dump, tmp_path, capsys):
    dump = tmp_path / "d"
    shutil.copytree(demo_dump, dump)
    shutil.copy(demo_dump / "tensors" / "conv1_out.npy", tmp_path / "elsewhere.npy")
    index = _index(dump)
    index["conv1_out"]["file"] = "../elsewhere.npy"
    (dump / "index.json").write_text(json.dumps(index))
    assert cli_main(["compare", str(QDQ), str(dump)]) == 2
    assert "outside the dump folder" in capsys.readouterr().err
    index["conv1_out"]["file"] = "tensors/link.npy"
    (dump / "index.json").write_text(json.dumps(index))
    os.symlink(tmp_path / "elsewhere.npy", dump / "tensors" / "link.npy")
    assert cli_main(["compare", str(QDQ), str(dump)]) == 2
    assert "outside the dump folder" in capsys.readouterr().err


def test_npy_folder_symlink_out_refused(demo_dump, tmp_path, capsys):
    folder = tmp_path / "npys"
    folder.mkdir()
    np.save(tmp_path / "outside.npy", np.load(demo_dump / "tensors" / "conv1_out.npy"))
    shutil.copy(demo_dump / "tensors" / "input.npy", folder / "input.npy")
    os.symlink(tmp_path / "outside.npy", folder / "conv1_out.npy")
    assert cli_main(["compare", str(QDQ), str(folder)]) == 2
    assert "outside the dump folder" in capsys.readouterr().err


def test_old_argument_order_refused(demo_dump, capsys):
    assert cli_main(["compare", str(demo_dump), str(QDQ)]) == 2
    err = capsys.readouterr().err
    assert "model first" in err and f"npu-sim compare {QDQ} {demo_dump}" in err


def test_input_as_board_fed_it_nhwc_float(demo_dump, tmp_path, capsys):
    x = np.load(SAMPLE)
    np.save(tmp_path / "x_nhwc.npy", np.transpose(x, (0, 2, 3, 1)))
    keep = {k: v for k, v in _index(demo_dump).items() if k != "input"}
    dump = tmp_path / "noinput"
    shutil.copytree(demo_dump, dump)
    (dump / "index.json").write_text(json.dumps(keep))
    assert cli_main(["compare", str(QDQ), str(dump)]) == 2
    assert "pass --input input=" in capsys.readouterr().err
    assert cli_main(["compare", str(QDQ), str(dump), "--input", f"input={tmp_path / 'x_nhwc.npy'}"]) == 0
    assert "input from --input (float, NHWC, transposed to the model's 1x1x8x8)" in capsys.readouterr().out


def test_ambiguous_layout_needs_the_option(tmp_path, capsys):
    model = tie_model(tmp_path / "cube.onnx", c=6, hw=6)  # every tensor 1x6x6x6: NCHW and NHWC alike
    dump = _run_dump(model, tmp_path / "dump", model.with_suffix(".x.npy"))
    arrays = {k: np.transpose(np.load(dump / e["file"]), (0, 2, 3, 1)) for k, e in _index(dump).items()}
    np.savez(tmp_path / "nhwc.npz", **arrays)
    capsys.readouterr()
    assert cli_main(["compare", str(model), str(tmp_path / "nhwc.npz")]) == 2
    assert "--layout" in capsys.readouterr().err
    assert cli_main(["compare", str(model), str(tmp_path / "nhwc.npz"), "--layout", "nhwc"]) == 0
    assert cli_main(["compare", str(model), str(tmp_path / "nhwc.npz"), "--layout", "nchw"]) == 1


def test_layout_of():
    assert layout_of((1, 8, 8, 16), (1, 16, 8, 8), None) == "nhwc"
    assert layout_of((1, 16, 8, 8), (1, 16, 8, 8), None) == "nchw"
    assert layout_of((1, 4, 4, 4), (1, 4, 4, 4), None) is None
    assert layout_of((1, 4, 4, 4), (1, 4, 4, 4), "nhwc") == "nhwc"
    assert layout_of((1, 1, 1, 1), (1, 1, 1, 1), None) == "nchw"
    assert layout_of((1, 9, 8, 8), (1, 16, 8, 8), None) is None


def _unary_qdq(path, op: str, name: str, q_in, q_out) -> Path:
    """A one-op QDQ model ``x -> Q/DQ -> op -> Q/DQ`` on int8 [1, 64], ``q_in``/``q_out`` = (scale, zero point); the
    op's node is ``name``, its float output ``y`` (the input's dequantized tensor ``xd``)."""
    (si, zi), (so, zo) = q_in, q_out
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             (("si", si, np.float32), ("so", so, np.float32), ("zi", zi, np.int8), ("zo", zo, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "si", "zi"], ["xq"], name="x_q"),
             helper.make_node("DequantizeLinear", ["xq", "si", "zi"], ["xd"], name="x_dq"),
             helper.make_node(op, ["xd"], ["y"], name=name),
             helper.make_node("QuantizeLinear", ["y", "so", "zo"], ["yq"], name="y_q"),
             helper.make_node("DequantizeLinear", ["yq", "so", "zo"], ["yd"], name="y_dq")]
    graph = helper.make_graph(nodes, op.lower(), [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("yd", TensorProto.FLOAT, [1, 64])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_rescale_node_rounding(tmp_path):
    """A Relu lowered to a one-multiplier rescale (0.5 -> 1.0: every odd code a tie): onnx vs default."""
    model = _unary_qdq(tmp_path / "rq.onnx", "Relu", "relu", (0.5, 0), (1.0, 0))
    np.save(tmp_path / "x.npy", np.linspace(-20, 20, 64, dtype=np.float32).reshape(1, 64))
    dump = _run_dump(model, tmp_path / "dump", tmp_path / "x.npy", "onnx")
    t = npu_sim.compare_dump(model, dump).first_divergent_tensor
    assert t.producer == "relu" and t.differing > 0 and t.causes == {"rounding half to even": t.differing}


def test_add_of_two_activations(tmp_path):
    """Add(a, b) with scales 0.5 and 0.25 into 1.0: many exact sums end in .5 or .25; the onnx board (ONNX's
    definition in float32, rounding half to even) against the default board's three-stage fixed-point Add."""
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             (("sa", 0.5, np.float32), ("sb", 0.25, np.float32), ("sy", 1.0, np.float32), ("z", 0, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "z"], ["aq"], name="a_q"),
             helper.make_node("DequantizeLinear", ["aq", "sa", "z"], ["ad"], name="a_dq"),
             helper.make_node("QuantizeLinear", ["b", "sb", "z"], ["bq"], name="b_q"),
             helper.make_node("DequantizeLinear", ["bq", "sb", "z"], ["bd"], name="b_dq"),
             helper.make_node("Add", ["ad", "bd"], ["y"], name="add"),
             helper.make_node("QuantizeLinear", ["y", "sy", "z"], ["yq"], name="y_q"),
             helper.make_node("DequantizeLinear", ["yq", "sy", "z"], ["yd"], name="y_dq")]
    graph = helper.make_graph(nodes, "add", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 256])
                                             for n in ("a", "b")],
                              [helper.make_tensor_value_info("yd", TensorProto.FLOAT, [1, 256])], inits)
    model = tmp_path / "add.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    rng = np.random.default_rng(5)
    for n in ("a", "b"):
        np.save(tmp_path / f"{n}.npy", rng.uniform(-25, 25, (1, 256)).astype(np.float32))
    assert cli_main(["run", str(model), "--board", "onnx", "--input", f"a={tmp_path / 'a.npy'}", "--input",
                     f"b={tmp_path / 'b.npy'}", "--dump-all", "--out", str(tmp_path / "dump")]) == 0
    t = npu_sim.compare_dump(model, tmp_path / "dump").first_divergent_tensor
    assert t.producer == "add" and t.differing > 0 and t.unexplained == 0
    assert t.causes == {"rounding half to even (three-stage Add)": t.differing}
    assert "one rounding of the exact sum, half to even" in t.equally["rounding half to even (three-stage Add)"]


def test_lut_entry_off_by_one_index(tmp_path):
    """A Sigmoid table (int8 input): a board whose every value is the neighbouring input code's entry is named so,
    reproducing the whole tensor; the same values at a few elements only are not that cause (applied to the whole
    tensor it would change elements the board did not change): unexplained, with that variation as the closest."""
    model = _unary_qdq(tmp_path / "lut.onnx", "Sigmoid", "sig", (0.05, 0), (1 / 256, -128))
    np.save(tmp_path / "x.npy", np.linspace(-3, 3, 64, dtype=np.float32).reshape(1, 64))
    dump = _run_dump(model, tmp_path / "dump", tmp_path / "x.npy", "generic")
    sim = npu_sim.load(model, board="generic")
    node = next(n for n in sim.program.nodes if n.op == "Sigmoid")
    table = node.tables.main.astype(np.int64)
    x = np.load(dump / _index(dump)["xd" if "xd" in _index(dump) else "x"]["file"]).astype(np.int64)
    f = dump / _index(dump)["y"]["file"]
    y = np.load(f)
    np.save(f, table[np.minimum(x + 129, 255)].astype(y.dtype))
    t = npu_sim.compare_dump(model, dump, board="generic").first_divergent_tensor
    name = "LUT entry of the next input code"
    assert t.producer == node.name and t.causes == {name: t.differing} and t.differing > 10
    assert t.reproduces[name] == [64, 64]
    changed = [i for i in range(10, 50, 4) if table[x[0, i] + 129] != y[0, i]]
    for i in changed:
        y[0, i] = table[x[0, i] + 128 + 1]
    np.save(f, y)
    t = npu_sim.compare_dump(model, dump, board="generic").first_divergent_tensor
    assert changed and t.causes == {"unexplained": len(changed)} and t.closest[0] == name


# -- the variations, exactly --------------------------------------------------------------------------------------

def test_rounding_rules_on_ties_and_signs():
    # n / 2**r with n = +-6, r = 2: +-1.5
    assert [f(6, 2) for _, f in ROUNDINGS] == [2, 2, 2, 1, 1]
    assert [f(-6, 2) for _, f in ROUNDINGS] == [-1, -2, -2, -2, -1]
    assert half_up(-10, 2) == -2 and half_even(-10, 2) == -2 and half_away(-10, 2) == -3  # -2.5
    assert half_even(5, 0) == 5


def test_double_rounding_matches_tflite_kernel():
    from kernels.tflite_fixedpoint import mbqm32, tfl_quantize_multiplier
    rng = np.random.default_rng(3)
    for _ in range(2000):
        m, s = tfl_quantize_multiplier(float(rng.uniform(1e-5, 2.0)))
        x = int(rng.integers(-(1 << 20), 1 << 20))
        assert double_rounding(x, m, s) == int(mbqm32(x, m, s)), (x, m, s)


def test_variations_accumulator_and_per_channel():
    acc = np.array([300, -5], np.int64)
    rq = Requant(acc, np.array([0, 1]), np.array([1 << 30, 1 << 29]), np.array([30, 30]),
                 (np.array([1 << 30, 1 << 30]), np.array([1, 0])), np.array([1.0, 0.5], np.float32), 0, -1000, 1000,
                 8, False, "single")
    got = {name: f(np.array([300, -5]), np.array([0, 1])) for name, f in variations(rq)}
    assert got["saturation at the 8-bit accumulator"][0] == 127 and got["rounding half up"][0] == 300
    assert list(got["one multiplier for every channel (channel 0's)"]) == [300, -5]
    assert got["rounding half up"][1] == -2 and got["rounding half away from zero"][1] == -3  # -2.5


def test_output_wrap_of_unsigned_and_signed_outputs():
    """The output wrapped at its width instead of saturated, then the node's clamp: uint8 300 -> 44, -5 -> 251."""
    acc = np.array([300, -5, 100], np.int64)
    for lo, hi, want in ((0, 255, [44, 251, 100]), (-128, 127, [44, -5, 100])):
        rq = Requant(acc, np.zeros(3, np.int64), np.array([1]), np.array([0]), (np.array([1 << 30]), np.array([1])),
                     np.array([1.0], np.float32), 0, lo, hi, 64, False, "single", 8, lo, hi)
        got = dict(variations(rq))["output wrapped at 8 bits instead of saturated"](acc, np.zeros(3, np.int64))
        assert list(got) == want


def test_rules_exact_beyond_int64():
    """A 48-bit accumulator times a 31-bit multiplier overflows int64: the rules then run on Python integers."""
    acc = np.array([(1 << 47) - 1, -(1 << 47)], np.int64)
    rq = Requant(acc, np.array([0, 0]), np.array([(1 << 31) - 1]), np.array([40]), (np.array([(1 << 31) - 1]),
                 np.array([-9])), np.array([2.0 ** -9], np.float32), 0, -(1 << 40), 1 << 40, 64, False, "single")
    got = dict(variations(rq))["rounding half up"](acc, np.array([0, 0]))
    assert [int(v) for v in got] == [half_up(int(a) * ((1 << 31) - 1), 40) for a in acc]
    wide = dataclasses.replace(rq, mult=np.array([3]), shift=np.array([63]))  # 2**63 itself overflows int64
    got = dict(variations(wide))["rounding half to even"](acc << 15, np.array([0, 0]))
    assert [int(v) for v in got] == [half_even(int(a << 15) * 3, 63) for a in acc]


# -- golden vectors -------------------------------------------------------------------------------------------

def test_golden_c_headers_compile_and_hold_the_data(tmp_path):
    out = _run_dump(QDQ, tmp_path / "g", SAMPLE, "default", "--format", "c", "--layout", "nhwc")
    headers = sorted((out / "c").glob("*.h"))
    assert len(headers) == len(_index(out)) + 1  # one per tensor (the float output's integer tensor too) + golden.h
    text = (out / "c" / "conv1_out.h").read_text()
    assert '#define CONV1_OUT_LAYOUT "NHWC"' in text and "static const int8_t conv1_out_data[1024]" in text
    assert "conv1_out_dims[4] = {1, 8, 8, 16}" in text and "#define CONV1_OUT_ZERO_POINT 0" in text
    body = text.split("conv1_out_data[1024] = {")[1].split("};")[0]
    values = [int(v) for v in body.replace("\n", " ").split(",") if v.strip()]
    assert values == np.transpose(np.load(out / "tensors" / "conv1_out.npy"), (0, 2, 3, 1)).reshape(-1).tolist()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "all.c").write_text('#include "golden.h"\nint main(void) { return conv1_out_data[0] + '
                                    'NPU_SIM_GOLDEN_COUNT; }\n')
    for src in [*headers, tmp_path / "all.c"]:
        r = subprocess.run([cc, "-fsyntax-only", "-std=c99", "-Wall", "-Werror", "-I", str(out / "c"), str(src)],
                           capture_output=True, text=True)
        assert r.returncode == 0, (src, r.stderr)


def test_golden_format_needs_dump_all(tmp_path, capsys):
    assert cli_main(["run", str(QDQ), "--input", f"input={SAMPLE}", "--format", "c", "--out", str(tmp_path)]) == 2
    assert "add --dump-all" in capsys.readouterr().err


def test_golden_bin_is_a_dump_compare_reads(tmp_path, capsys):
    out = _run_dump(QDQ, tmp_path / "g", SAMPLE, "default", "--format", "bin", "--layout", "nhwc")
    manifest = json.loads((out / "bin" / "manifest.json").read_text())
    conv = next(e for e in manifest["tensors"] if e["name"] == "conv1_out")
    assert conv["shape"] == [1, 8, 8, 16] and conv["layout"] == "nhwc" and conv["dtype"] == "int8"
    raw = np.fromfile(out / "bin" / conv["file"], np.int8).reshape(conv["shape"])
    assert np.array_equal(raw, np.transpose(np.load(out / "tensors" / "conv1_out.npy"), (0, 2, 3, 1)))
    capsys.readouterr()
    assert cli_main(["compare", str(QDQ), str(out / "bin")]) == 0


# -- LiteRT dumps (tests/fixtures/tflite: LiteRT's reference kernels, NHWC, TFLite tensor names) ---------------

TFLITE = Path(__file__).resolve().parent / "fixtures" / "tflite"


def _litert_dump(name: str) -> dict[str, np.ndarray]:
    """The fixture's LiteRT tensors by TFLite name (activations and the constants LiteRT also keeps)."""
    ref = np.load(TFLITE / f"{name}.npz")
    return {k[2:]: ref[k] for k in ref.files if k.startswith("t:") and k[2:]}


@pytest.mark.parametrize("name", ["conv_int8", "activations_a16w8", "concat_int8", "fc_a16w8"])
def test_litert_dump_matches_on_ethos(name, tmp_path, capsys):
    arrays = _litert_dump(name)
    model = TFLITE / f"{name}.onnx"
    consts = {i.name for i in onnx.load(str(model)).graph.initializer}
    np.savez(tmp_path / "litert.npz", **arrays)
    folder = tmp_path / "npy"  # the same as .npy files named by the sanitized TFLite names
    folder.mkdir()
    for k, a in arrays.items():
        np.save(folder / f"{sanitize(k)}.npy", a)
    for dump in (tmp_path / "litert.npz", folder):
        assert cli_main(["compare", str(model), str(dump), "--board", "ethos-u55-128", "--layout", "nhwc"]) == 0
        assert "all equal" in capsys.readouterr().out
    c = npu_sim.compare_dump(model, tmp_path / "litert.npz", board="ethos-u55-128", layout="nhwc")
    # every activation LiteRT dumped is compared; what is left are the weights, biases and shape constants
    assert set(c.not_in_model) <= {k for k in arrays if k in consts or k.endswith(("/Const", "ReadVariableOp"))
                                   or arrays[k].dtype == np.int32 or k.endswith(("/Conv2D", "/MatMul"))}
    assert len(c.tensors) >= 2


def test_litert_dump_one_element_and_every_third(tmp_path, capsys):
    arrays = _litert_dump("activations_int8")
    model = TFLITE / "activations_int8.onnx"
    c = npu_sim.compare_dump(model, _savez(tmp_path / "all.npz", arrays), board="ethos-u55-128", layout="nhwc")
    names = [t.dump_name for t in c.tensors]
    victim = names[2]
    changed = dict(arrays)
    changed[victim] = arrays[victim].copy()
    old = int(changed[victim][0, 1, 2, 3])
    changed[victim][0, 1, 2, 3] = old + 1 if old < 127 else old - 1
    capsys.readouterr()
    argv = ["compare", str(model), str(_savez(tmp_path / "one.npz", changed)), "--board", "ethos-u55-128",
            "--layout", "nhwc"]
    assert cli_main(argv) == 1
    out = capsys.readouterr().out
    t = c.tensors[2]
    assert (f"first mismatch: tensor {t.tensor!r}" in out and "first at index [0, 1, 2, 3] (NHWC): dump "
            f"{int(changed[victim][0, 1, 2, 3])}, simulation {old}" in out)
    inp = "serving_default_input:0"
    third = {k: a for k, a in arrays.items() if k == inp or (k in names and names.index(k) % 3 == 0)}
    argv[2] = str(_savez(tmp_path / "third.npz", third))
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    kept = len(third) - 1
    assert f"summary: {kept} of {kept} dumped tensors match, 0 differ;" in out and kept < len(names)


def test_layout_of_ambiguous_tensors_from_the_rest_of_the_dump(tmp_path):
    """pools_int8: its 1x8x8x8 convolution output fits both layouts; the dump's other tensors are NHWC."""
    c = npu_sim.compare_dump(TFLITE / "pools_int8.onnx", _savez(tmp_path / "p.npz", _litert_dump("pools_int8")),
                             board="ethos-u55-128")
    conv = next(t for t in c.tensors if t.op == "Conv")
    assert c.equal and conv.layout == "nhwc" and conv.total == 512


def _savez(path: Path, arrays: dict) -> Path:
    np.savez(path, **arrays)
    return path


# -- dumps as boards write them: unit dimensions, a free batch ----------------------------------------------------

def test_unit_dimensions_match_by_element_order(demo_dump, tmp_path, capsys):
    """TFLite's MEAN (keep_dims false) writes [1, C] where the ONNX GlobalAveragePool writes [1, C, 1, 1]: the same
    integers in the same order compare equal; an index is printed in the dump's own shape; other shapes are not
    matched."""
    dump = tmp_path / "d"
    shutil.copytree(demo_dump, dump)
    f = dump / _index(dump)["gap_out"]["file"]
    gap = np.load(f)
    assert gap.shape == (1, 32, 1, 1)
    np.save(f, gap.reshape(1, 32))
    assert cli_main(["compare", str(QDQ), str(dump)]) == 0
    bad = gap.reshape(1, 32).copy()
    bad[0, 7] = bad[0, 7] + 1 if bad[0, 7] < 127 else bad[0, 7] - 1
    np.save(f, bad)
    capsys.readouterr()
    assert cli_main(["compare", str(QDQ), str(dump)]) == 1
    assert "first at index [0, 7]: dump" in capsys.readouterr().out
    np.save(f, gap.reshape(2, 16))
    t = next(t for t in npu_sim.compare_dump(QDQ, dump).tensors if t.tensor == "gap_out")
    assert t.status == "shape" and "[2, 16]" in t.shape_message


def test_own_dump_of_a_free_batch_integer_input_needs_no_input(tmp_path, capsys):
    """A tf2onnx model whose (already quantized) input has a free batch dimension: its own run --dump-all holds the
    input under the input's float name (the run's "tensor" says which program tensor it is); compare finds it."""
    m = onnx.load(Path(__file__).resolve().parent / "fixtures" / "tflite" / "conv_int8.onnx")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model = tmp_path / "conv_free_batch.onnx"
    onnx.save(m, model)
    np.save(tmp_path / "x.npy", np.random.default_rng(2).integers(-128, 128, (1, 8, 8, 3)).astype(np.int8))
    assert cli_main(["run", str(model), "--board", "ethos-u55-128", "--input",
                     f"serving_default_input:0={tmp_path / 'x.npy'}", "--dump-all", "--out", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    assert cli_main(["compare", str(model), str(tmp_path / "d"), "--board", "ethos-u55-128"]) == 0
    assert "all equal" in capsys.readouterr().out


def test_tensor_overwritten_in_place_by_its_consumer_is_not_compared(demo_dump, tmp_path):
    """LiteRT's optimized ADD writes its output over its input even with preserve_all_tensors: a dumped tensor
    that differs from the simulation and holds exactly its consumer's dumped output is dropped, with a note."""
    dump = tmp_path / "d"
    shutil.copytree(demo_dump, dump)
    index = _index(dump)
    conv, relu = (np.load(dump / index[k]["file"]) for k in ("conv3_out", "relu3_out"))
    assert not np.array_equal(conv, relu)
    np.save(dump / index["conv3_out"]["file"], relu)
    c = npu_sim.compare_dump(QDQ, dump)
    assert c.equal and "conv3_out" in c.not_in_dump
    assert any(n.startswith("conv3_out: holds the values of 'relu3_out'") for n in c.notes)
