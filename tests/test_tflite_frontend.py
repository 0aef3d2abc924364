"""The .tflite itself through the front door (npu_sim.frontend.tflite): the integers LiteRT computes, on every tensor,
by TFLite's names and in TFLite's NHWC; the same integers, estimate and verdict as its tf2onnx twin; every command.

Oracles: the committed fixtures (tests/fixtures/tflite/, see tests/test_tflite_oracle.py for how they were made):
``NAME.npz`` holds LiteRT's reference-kernel integers of every tensor (``t:<TFLite name>``), ``NAME.onnx`` the tf2onnx
twin, ``optimized/NAME.optimized.npz`` a dump by LiteRT's optimized kernels (which differ by 1 LSB on near-ties).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.cli.main import main
from npu_sim.errors import UnsupportedModelError
from npu_sim.frontend.reader import open_model
from npu_sim.frontend.tflite.flatbuf import read_tflite
from npu_sim.frontend.tflite.ops import same_pads
from tests import tflite_writer
from tests.litert_host import litert_host_board

FIXTURES = Path(__file__).parent / "fixtures" / "tflite"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.npz"))
BOARD = "ethos-u55-128"


def _run(path, x):
    sim = npu_sim.load(path, board=BOARD)
    (name,) = sim.inputs
    res = sim.execute({name: x}, keep_all=True)
    values = dict(res.values)
    for out, t in sim.program.outputs.items():
        values[out] = res.values[t]
    return sim, values


@pytest.mark.parametrize("name", NAMES)
def test_every_tensor_equals_litert_by_name_in_nhwc(name):
    ref = np.load(FIXTURES / f"{name}.npz")
    read = read_tflite(FIXTURES / f"{name}.tflite")
    consts = {t.name for t in read.tensors if t.data is not None}  # weights, biases, shapes, axes
    _, values = _run(FIXTURES / f"{name}.tflite", ref["input"])
    compared = 0
    for key in ref.files:
        if not key.startswith("t:") or not key[2:] or key[2:] in consts:
            continue  # (an empty name: a scratch tensor LiteRT adds at prepare, not one of the file's)
        want = ref[key]
        got = values.get(key[2:])
        assert got is not None, f"{name}: {key[2:]}: no simulated tensor of that name"
        assert got.shape == want.shape and got.dtype == want.dtype, (key, got.shape, want.shape)
        assert np.array_equal(got, want), f"{name}: {key[2:]}: {int(np.sum(got != want))} elements differ"
        compared += 1
    assert compared >= 3


@pytest.mark.parametrize("name", ["conv_int8", "depthwise_a16w8", "fc_int8", "mean_int8", "resize_a16w8",
                                  "activations_int8", "add_mul_a16w8"])
def test_the_tflite_and_its_twin_compute_the_same_and_cost_the_same(name):
    ref = np.load(FIXTURES / f"{name}.npz")
    _, mine = _run(FIXTURES / f"{name}.tflite", ref["input"])
    twin_sim, twin = _run(FIXTURES / f"{name}.onnx", ref["input"])
    io = set(twin_sim.inputs) | set(twin_sim.program.outputs)
    same = 0
    for tname, got in mine.items():
        other = twin.get(tname)
        if other is None or "@" in tname:
            continue
        if other.ndim == 4 and tname not in io:  # NCHW inside the twin
            other = other.transpose(0, 2, 3, 1)
        assert np.array_equal(got, other.reshape(got.shape)), tname
        same += 1
    assert same >= 2
    a = npu_sim.estimate(str(FIXTURES / f"{name}.tflite"), board=BOARD)
    b = npu_sim.estimate(str(FIXTURES / f"{name}.onnx"), board=BOARD)
    assert a.summary["total_cycles"] == pytest.approx(b.summary["total_cycles"], rel=0.01)
    for key in ("peak_activation_bytes", "flash_used_bytes"):
        assert a.memory[key] == b.memory[key], key
    assert not any("@" in r.node for r in a.layers)  # the layout changes are not ops of the model


def test_check_names_the_same_refusals_as_on_the_twin():
    a = npu_sim.check(str(FIXTURES / "refusal_chain_a16w8.tflite"), board=BOARD)
    b = npu_sim.check(str(FIXTURES / "refusal_chain_a16w8.onnx"), board=BOARD)
    ids = lambda r: sorted(f.rule for n in r.nodes for f in n.findings)  # noqa: E731
    assert ids(a) == ids(b) and ids(a)
    assert a.deployable == b.deployable
    assert all("@" not in n.node for n in a.nodes)


@pytest.mark.parametrize("name", sorted(p.name.split(".")[0] for p in (FIXTURES / "optimized").glob("*.npz")))
def test_compare_a_litert_optimized_dump_by_name_without_a_layout(name, capsys):
    dump = FIXTURES / "optimized" / f"{name}.optimized.npz"
    code = main(["compare", str(FIXTURES / f"{name}.tflite"), str(dump), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # the optimized kernels differ somewhere: that is why the dump was kept
    first = out["first_divergent_node"]
    diffs = [t for t in out["tensors"] if t["status"] != "equal"]
    assert diffs and all(not t["producer"].endswith(("@nchw", "@nhwc")) for t in diffs)
    assert not out["not_in_model"]
    causes = {c for t in diffs for c in (t.get("causes") or {})}
    assert causes and causes != {"unexplained"}, (first, diffs[0])


def test_every_command_takes_a_tflite(tmp_path, capsys):
    model = str(FIXTURES / "pools_int8.tflite")
    assert main(["run", model, "--out", str(tmp_path / "out"), "--dump-all"]) == 0
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    names = {t.name: t.shape for t in read_tflite(model).tensors if t.data is None}
    assert set(index) == set(names)  # every activation, by its TFLite name, and nothing else
    assert all(tuple(e["shape"]) == names[k] for k, e in index.items())  # NHWC, as TFLite lays them out
    assert main(["check", model]) == 0
    assert "on board 'ethos-u55-128'" in capsys.readouterr().out
    assert main(["estimate", model]) == 0
    assert main(["lower", model]) == 0
    assert main(["inspect", model]) == 0
    assert main(["compare", model, str(tmp_path / "out")]) == 0
    assert "all equal" in capsys.readouterr().out


def test_same_padding_is_tflites():
    # in 7, kernel 3, stride 2: out 4, total (4-1)*2+3-7 = 2 -> 1 before, 1 after; even input 8: total 1 -> 0, 1
    assert same_pads([7, 8], [3, 3], [2, 2], [1, 1], "SAME") == [1, 0, 1, 1]
    assert same_pads([5, 5], [3, 3], [1, 1], [2, 2], "SAME") == [2, 2, 2, 2]
    assert same_pads([5, 5], [3, 3], [1, 1], [1, 1], "VALID") == [0, 0, 0, 0]


def test_an_operator_it_does_not_translate_is_named(tmp_path):
    spec = tflite_writer.read_spec(FIXTURES / "hardswish_int8.tflite")
    ops = spec["subgraphs"][0]["operators"]
    (index,) = [i for i, op in enumerate(ops) if spec["opcodes"][op["opcode"]]["builtin"] == 117]  # HARD_SWISH
    spec["opcodes"].append({"deprecated": 8, "builtin": 8, "custom": None, "version": 1})  # FLOOR: no options
    ops[index]["opcode"] = len(spec["opcodes"]) - 1
    path = tmp_path / "odd.tflite"
    path.write_bytes(tflite_writer.write(spec))
    with pytest.raises(UnsupportedModelError, match=rf"operator {index} \(FLOOR.*does not simulate TFLite's FLOOR"):
        open_model(path)
    assert main(["check", str(path)]) == 2


def test_an_image_feeds_a_tflite_nhwc_int8_input(tmp_path, capsys):
    pytest.importorskip("PIL")
    from PIL import Image
    pixels = np.random.default_rng(3).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "x.png")
    model = FIXTURES / "conv_int8.tflite"
    assert main(["run", str(model), "--input", str(tmp_path / "x.png"), "--out", str(tmp_path / "o")]) == 0
    assert "the image quantized to int8" in capsys.readouterr().err
    sim = npu_sim.load(model, board=BOARD)
    (name,) = sim.inputs
    q = sim.program.tensors[sim.program.inputs[name]].q
    resized = np.asarray(Image.fromarray(pixels).resize((8, 8)), np.float32)[None] / 255.0  # NHWC, as TFLite
    want = sim.run({name: q.quantize(resized)}, raw=True)
    (out,) = want
    assert np.array_equal(np.load(tmp_path / "o" / f"{out.replace(':', '_')}.int.npy"), want[out])


def test_report_on_a_tflite_against_its_own_float_semantics(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(5)
    for i in range(3):
        np.save(data / f"s{i}.npy", rng.integers(-128, 128, (1, 8, 8, 3)).astype(np.int8))
    model = str(FIXTURES / "conv_int8.tflite")
    assert main(["report", model, "--data", str(data), "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "board ethos-u55-128" in out and "cosine" in out
    assert main(["report", model, "--data", str(data), "--float", model]) == 2
    assert "is a .tflite" in capsys.readouterr().err


def test_inspect_a_tflite_shows_its_own_operators_and_edge_quantization(capsys):
    assert main(["inspect", str(FIXTURES / "pools_int8.tflite"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["producer"].startswith("TFLite schema version 3") and d["opset"] == 0
    assert d["ops"] == {"AVERAGE_POOL_2D": 1, "CONCATENATION": 1, "CONV_2D": 1, "MAX_POOL_2D": 1}
    (out,) = d["outputs"]
    assert out["quant"] is not None and out["quant"]["op"] == "QuantizeLinear"
    assert d["inputs"][0]["layout"] == "NHWC" and d["inputs"][0]["quant"]["dtype"] == "int8"


def test_a_softmax_output_vela_takes_and_litert_refuses_is_a_warning_on_the_vela_board(tmp_path, capsys):
    """An int8 SOFTMAX whose output is not at 1/256: LiteRT refuses it at prepare, Vela compiles it (into NPU
    operations ending in a rescale npu-sim does not simulate): deployable on ethos-u55-128 with a warning naming
    that, run simulates the rest (exit 1); on a board whose host runtime prepares every node, a refusal."""
    spec = tflite_writer.read_spec(FIXTURES / "softmax_int8.tflite")
    spec["subgraphs"][0]["tensors"][6]["quant"]["scale"] = np.float32([1 / 128])
    path = tmp_path / "softmax_128.tflite"
    path.write_bytes(tflite_writer.write(spec))
    result = npu_sim.check(str(path))
    assert result.deployable
    warned = [f for _, f in result.findings if "does not simulate that rescale" in f.message]
    assert len(warned) == 1 and warned[0].severity == "warning"
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 1
    assert not npu_sim.check(str(path), board=str(litert_host_board(tmp_path))).deployable
