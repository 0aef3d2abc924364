"""check and run on a LiteRT-made 16x8 network with several refused nodes in a row (issue 17, item 6).

``tests/fixtures/tflite/refusal_chain_a16w8`` (``models/tflite_fixtures.py``): a 1x1 convolution, then three
consecutive convolution+ReLU6 layers with tiny weights, so each has an almost empty output range, a tiny output
scale, and a ReLU6 bound 6/scale that leaves int32. LiteRT's prepare stops at the first failing op; its full list
(``refused:`` lines of ``NAME.refusal.txt``) was recorded by preparing every op of the .tflite alone with the
model's own tensors. On a board whose every node LiteRT prepares (``tests.litert_host``) ``check`` must report every
one of them as a board.refusal error, and ``run`` refuse them. On ethos-u55-128 Vela compiles them (LiteRT's prepare
never sees an NPU node): each is a quant.degenerate hazard warning, the model deploys and runs, with the ReLU6 bound
clamped to int16 as Vela writes it into the command stream where bound / scale stays below 2**63; past it Vela
writes a wrong bound, and npu-sim does not simulate those layers (issue 29)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx import helper

import npu_sim
from npu_sim.cli.main import main as cli_main
from tests import qdq_models as qm
from tests.litert_host import litert_host_board

TFLITE = Path(__file__).resolve().parent / "fixtures" / "tflite"
NAME = "refusal_chain_a16w8"
MODEL = TFLITE / f"{NAME}.onnx"
U55 = "ethos-u55-128"


def litert_refusals() -> list[tuple[int, str, str]]:
    """(op index, TFLite operator, output tensor name) of every op LiteRT refuses, as recorded."""
    rows = [line.split("\t") for line in (TFLITE / f"{NAME}.refusal.txt").read_text().splitlines()
            if line.startswith("refused:\t")]
    assert all("no_integer_overflow_from_quantization" in r[4] for r in rows)
    return [(int(r[1]), r[2], r[3]) for r in rows]


def onnx_nodes_of(tflite_tensors: list[str]) -> dict[str, tuple[str, str]]:
    """TFLite output tensor -> (the ONNX node computing it, the QuantizeLinear that quantizes it): tf2onnx keeps
    the TFLite name as the QuantizeLinear's output (a graph output's through the Transpose it adds), and writes the
    fused ReLU6 as a Clip between the Conv and it."""
    graph = onnx.load(str(MODEL)).graph
    producer = {o: n for n in graph.node for o in n.output}
    out = {}
    for t in tflite_tensors:
        q = producer[t]
        while q.op_type == "Transpose":
            q = producer[q.input[0]]
        assert q.op_type == "QuantizeLinear"
        conv = producer[q.input[0]]
        while conv.op_type in ("Clip", "Relu"):
            conv = producer[conv.input[0]]
        assert conv.op_type == "Conv"
        out[t] = (conv.name, q.name)
    return out


def test_litert_refuses_several_consecutive_convolutions():
    refused = litert_refusals()
    assert [op for _, op, _ in refused] == ["CONV_2D"] * 3
    assert [i for i, _, _ in refused] == [1, 2, 3]  # consecutive: op 0 (a sane 1x1 convolution) prepares
    first = (TFLITE / f"{NAME}.refusal.txt").read_text().splitlines()[0]
    assert "Node number 1 (CONV_2D) failed to prepare" in first  # the whole model stops at the first one


def test_check_reports_every_litert_refusal(tmp_path, capsys):
    expected = onnx_nodes_of([t for _, _, t in litert_refusals()])
    host = str(litert_host_board(tmp_path))
    result = npu_sim.check(MODEL, board=host)
    refused = {n.node for n in result.nodes for f in n.findings
               if f.rule == "board.refusal" and f.severity == "error"}
    assert refused == {node for node, _ in expected.values()}
    assert not result.deployable
    assert cli_main(["check", str(MODEL), "--board", host]) == 1
    out = capsys.readouterr().out
    assert f"board.refusal x{len(expected)}:" in out
    for node, _ in expected.values():
        assert node in out


def test_run_refuses_the_same_nodes(tmp_path, capsys):
    expected = onnx_nodes_of([t for _, _, t in litert_refusals()])
    host = str(litert_host_board(tmp_path))
    with pytest.raises(npu_sim.UnsupportedModelError) as info:
        npu_sim.load(MODEL, board=host)
    problems = info.value.problems
    assert len(problems) == len(expected)
    assert all("no_integer_overflow" in why for _, _, why in problems)
    # run simulates what the board runs (the first convolution), names every refused node, and exits 1
    np.save(tmp_path / "x.npy", np.zeros((1, 6, 6, 3), np.int16))
    assert cli_main(["run", str(MODEL), "--board", host, "--input", str(tmp_path / "x.npy"),
                     "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    for node, _ in expected.values():  # named by the refused op, not by the QuantizeLinear that ends its group
        assert f"the board does not run node {node!r} (Conv)" in err
    assert "model output(s) not computed" in err and not list((tmp_path / "out").glob("*.int.npy"))
    partial = npu_sim.load(MODEL, board=host, partial=True).program
    assert [n.op for n in partial.nodes if n.op == "Conv"] == ["Conv"] and not partial.outputs


def test_vela_takes_what_litert_refuses_as_hazards(tmp_path, capsys):
    """ethos-u55-128: the three convolutions LiteRT refuses are NPU nodes Vela compiles; check warns on each
    (node, scale, what Vela does, the consequence) and deploys. The first (6 / scale = 9e12) is simulated with
    Vela's clamped bound; at 3.7e20 and 1.1e28 (past 2**63) Vela writes ACTIVATION_MAX 0 (measured with `vela
    --verbose-register-command-stream` on the .tflite): not simulated, so check exits 1 and run names them."""
    expected = onnx_nodes_of([t for _, _, t in litert_refusals()])
    result = npu_sim.check(MODEL, board=U55)
    hazards = {n.node: f for n in result.nodes for f in n.findings if f.rule == "quant.degenerate"}
    assert set(hazards) == {node for node, _ in expected.values()}
    assert not any(f.rule == "board.refusal" for n in result.nodes for f in n.findings)
    assert result.deployable and all(n.placement == "NPU" for n in result.nodes)
    clamped_nodes = [node for node, f in hazards.items() if "Vela clamps the bound to the int16 range" in f.message]
    wrapped = [node for node, f in hazards.items() if "2**63" in f.message and "does not simulate" in f.message]
    assert len(clamped_nodes) == 1 and len(wrapped) == 2
    for node, finding in hazards.items():
        assert finding.severity == "warning" and node in finding.message and "output scale" in finding.message
    assert "saturate" in hazards[clamped_nodes[0]].message
    assert not result.simulated and cli_main(["check", str(MODEL), "--board", U55]) == 1
    assert f"quant.degenerate x{len(expected)}:" in capsys.readouterr().out
    sim = npu_sim.load(MODEL, board=U55, partial=True)
    assert sim.program.unsimulated == set(wrapped)
    clamped = [n for n in sim.program.nodes if n.name in hazards]
    # ReLU6's 0 stays (it fits: the zero point), its 6 / scale is clamped to the int16 maximum
    assert [n.name for n in clamped] == clamped_nodes
    assert all((n.requant.qmin, n.requant.qmax) == (n.requant.out_zp, 32767) for n in clamped)
    x = np.random.default_rng(0).integers(-3000, 3000, (1, 6, 6, 3)).astype(np.int16)  # the model takes int16
    np.save(tmp_path / "x.npy", x)
    assert cli_main(["run", str(MODEL), "--board", U55, "--input", str(tmp_path / "x.npy"),
                     "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert all(f"npu-sim does not simulate what the board runs for node {node!r}" in err for node in wrapped)


@pytest.mark.parametrize("op, attrs, runs", [
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, True),
    ("Resize", {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, True),
    ("Resize", {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, False)])
def test_uint8_pool_and_resize_on_litert_arithmetic(tmp_path, capsys, op, attrs, runs):
    """uint8 activations on the LiteRT arithmetic: AveragePool and nearest Resize compute as LiteRT's uint8 kernels
    (the same integers as int8: a rounded mean, a gather) and run; bilinear Resize (LiteRT's uint8 kernel computes
    another way) is refused at load, naming the node -- never a failure inside the run (exit 3)."""
    inputs = ["c"] if op == "AveragePool" else ["c", "", "scales"]
    inits = {"W": qm.weights(qm.rng_for(op), (2, 3, 3, 3), 0.3)}
    if op == "Resize":
        inits["scales"] = np.array([1, 1, 2, 2], np.float32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node(op, inputs, ["y"], name="the_op", **attrs)]
    out = (1, 2, 2, 2) if op == "AveragePool" else (1, 2, 8, 8)
    model = qm.build_model(nodes, {"x": (1, 3, 4, 4)}, {"y": out}, inits, name=f"u8_{op}")
    path = qm.quantize(model, tmp_path, f"u8_{op}_{attrs['mode'] if 'mode' in attrs else 'avg'}", activation_type="u8")
    code = cli_main(["run", str(path), "--board", U55, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == (0 if runs else 2), err
    if not runs:
        assert "the_op" in err and "uint8" in err
