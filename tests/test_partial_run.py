"""Never refuse the whole model for one node (issue 29): ``run`` and ``lower`` of a model with a node the board
refuses simulate everything up to it and around it, name the node, the nodes and outputs downstream of it, and
exit 1 (never 0 with numbers that are not the board's). The refused node: an int8 Softmax whose input scale is
2**-30 (beta * scale * 2**26 = 2**-4: LiteRT's reference kernel aborts, Vela 5.2's exp table cannot be built)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import npu_sim
from npu_sim.analysis.dataset.run import NotComputed, RefusedNode
from npu_sim.cli.main import main
from npu_sim.errors import UnsupportedModelError
from tests.qdq_models import build_model, quantize, weights

U55 = "ethos-u55-128"


def two_branches(refused_branch: bool = True) -> onnx.ModelProto:
    """x -> MatMul -> m -> Softmax -> y (refused) -> Mul -> z (downstream); x -> MatMul -> v (around it).
    ``refused_branch=False``: the model without the Softmax branch."""
    rng = np.random.default_rng(7)
    inits = {"w": weights(rng, (16, 10), 0.3), "w2": weights(rng, (16, 6), 0.3)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
             helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1),
             helper.make_node("Mul", ["y", "y"], ["z"], name="after"),
             helper.make_node("MatMul", ["x", "w2"], ["v"], name="around")]
    outputs = {"z": None, "v": None}
    if not refused_branch:
        nodes, outputs = [nodes[3]], {"v": None}
        del inits["w"]
    return build_model(nodes, {"x": (1, 16)}, outputs, inits, name="branches")


def softmax_scales(input_scale: float | None):
    """A quantize postprocess: the Softmax's output at TFLite's 1/256 and zero point -128 and (unless None) its
    input (the MatMul's output m) at ``input_scale``."""
    values = {"y_scale": np.float32(1 / 256), "y_zero_point": np.int8(-128)}
    if input_scale is not None:
        values["m_scale"] = np.float32(input_scale)

    def edit(model):
        for t in model.graph.initializer:
            if t.name in values:
                t.CopyFrom(numpy_helper.from_array(np.array(values[t.name]), t.name))
        return model
    return edit


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("partial")
    return quantize(two_branches(), d, "branches", activation_type="s8", postprocess=softmax_scales(2.0 ** -30))


def test_load_refuses_unless_partial(model_path):
    with pytest.raises(UnsupportedModelError):
        npu_sim.load(model_path, board=U55)
    sim = npu_sim.load(model_path, board=U55, partial=True)
    assert [name for name, _, _ in sim.program.refusals] == ["softmax"]
    assert set(sim.program.outputs) == {"v"}
    assert {"z"} <= {name for name, _ in sim.program.not_run}
    assert not any(n.op == "Softmax" for n in sim.program.nodes)


def test_the_rest_is_the_boards(model_path, tmp_path):
    """The branch around the refused node computes what the model without the refused branch computes."""
    sim = npu_sim.load(model_path, board=U55, partial=True)
    feeds = sim.random_inputs(seed=3)
    got = sim.run(feeds, raw=True)
    assert set(got) == {"v"}
    alone = npu_sim.load(quantize(two_branches(False), tmp_path, "alone", activation_type="s8"), board=U55)
    assert alone.program.tensors[alone.program.outputs["v"]].q.same_as(sim.program.tensors[sim.program.outputs["v"]].q)
    want = alone.run(feeds, raw=True)["v"]
    assert np.ptp(want) > 0 and np.array_equal(got["v"], want)
    assert not any("softmax" in name.lower() for name in sim.trace(feeds))


def test_run_names_the_refused_node_and_exits_1(model_path, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(model_path), "--board", U55, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "the board does not run node 'softmax' (Softmax)" in err and "2**26" in err
    assert "not simulated: 1 node(s) downstream of it ('after')" in err
    assert "model output(s) not computed: 'z'" in err and "exit 1" in err
    assert (out / "v.int.npy").exists() and not (out / "z.int.npy").exists()
    assert main(["run", str(model_path), "--board", U55, "--out", str(tmp_path / "dump"), "--dump-all"]) == 1
    capsys.readouterr()


def test_lower_prints_the_rest_and_exits_1(model_path, capsys):
    assert main(["lower", str(model_path), "--board", U55]) == 1
    captured = capsys.readouterr()
    assert "fc" in captured.out and "Softmax" not in captured.out
    assert "the board does not run node 'softmax'" in captured.err


def test_a_model_without_refusals_exits_0(tmp_path, capsys):
    path = quantize(two_branches(), tmp_path, "plain", activation_type="s8", postprocess=softmax_scales(None))
    assert main(["run", str(path), "--board", U55, "--out", str(tmp_path / "out")]) == 0
    assert main(["lower", str(path), "--board", U55]) == 0
    capsys.readouterr()


def test_compare_compares_around_the_refused_node(model_path, tmp_path, capsys):
    """A dump with the refused Softmax's output too (as a board that ran something there would write it):
    compare compares the tensors before and around it, names the refused node and the tensor it does not
    compare, and exits 1 though everything compared is equal."""
    dump = tmp_path / "dump"
    assert main(["run", str(model_path), "--board", U55, "--out", str(dump), "--dump-all"]) == 1
    index = json.loads((dump / "index.json").read_text())
    np.save(dump / "tensors" / "y.npy", np.full((1, 10), -103, np.int8))
    index["y"] = {"file": "tensors/y.npy", "tensor": "y_QuantizeLinear_Output", "dtype": "int8", "shape": [1, 10],
                  "scale": 1 / 256, "zero_point": -128, "producer": "softmax"}
    (dump / "index.json").write_text(json.dumps(index))
    c = npu_sim.compare_dump(model_path, dump, board=U55)
    assert c.equal and c.exit_code == 1 and len(c.tensors) == 2
    assert any("the board does not run node 'softmax'" in line for line in c.refused)
    assert any(line.startswith("y: not compared") for line in c.refused)
    assert main(["compare", str(model_path), str(dump), "--board", U55]) == 1
    out = capsys.readouterr().out
    assert "the board does not run node 'softmax'" in out and "y: not compared" in out


# ---- a dataset run (run --data) of a partial program: the outputs computed, in shards; exit 1 ----
def samples(tmp_path, n: int = 5):
    """A .npz of ``n`` samples of the model's input (1, 16), float32, and the samples as single-run feeds."""
    x = np.random.default_rng(11).standard_normal((n, 16)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x)
    return tmp_path / "data.npz", [{"x": x[i:i + 1]} for i in range(n)]


def test_dataset_run_writes_what_is_computed_and_exits_1(model_path, tmp_path, capsys):
    data, feeds = samples(tmp_path)
    out = tmp_path / "out"
    args = ["run", "--data", str(data), "--out", str(out), str(model_path), "--board", U55, "--shard-size", "2"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "the board does not run node 'softmax' (Softmax)" in err and "2**26" in err
    assert "model output(s) not computed: 'z'" in err and "exit 1" in err
    sim = npu_sim.load(model_path, board=U55, partial=True)
    shards = [np.load(out / f"shard-0000{k}.npz") for k in range(3)]
    assert all(set(s.files) == {"v.int", "v"} for s in shards)
    got = np.concatenate([s["v.int"] for s in shards])
    want = np.stack([sim.run(f, raw=True)["v"] for f in feeds])
    assert want.max() > want.min() and np.array_equal(got, want)
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["outputs"]) == {"v"} and manifest["complete"] and not manifest["failed"]
    assert [e["output"] for e in manifest["not_computed"]] == ["z"] and "softmax" in manifest["not_computed"][0]["reason"]
    assert [(r["node"], r["op"]) for r in manifest["refused"]] == [("softmax", "Softmax")]
    assert "2**26" in manifest["refused"][0]["reason"]
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(args + ["--resume"]) == 1  # the finished run: every shard kept, the same files
    captured = capsys.readouterr()
    assert "3 shard(s) kept from the previous run" in captured.out and "'softmax'" in captured.err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_dataset_run_api_names_the_refusals(model_path, tmp_path):
    data, _ = samples(tmp_path, 3)
    summary = npu_sim.run_dataset(model_path, [data], npu_sim.DatasetWriter(tmp_path / "out"), board=U55)
    assert summary.samples == 3 and not summary.failed and not summary.ok
    assert [type(r) for r in summary.refused] == [RefusedNode] and summary.refused[0].node == "softmax"
    assert summary.refused[0].op == "Softmax" and "2**26" in summary.refused[0].reason
    assert [type(o) for o in summary.not_computed] == [NotComputed] and summary.not_computed[0].output == "z"
    assert any("model output(s) not computed: 'z'" in line for line in summary.not_run_lines)


def test_dataset_run_float_metrics_of_the_outputs_computed(model_path, tmp_path, capsys):
    data, _ = samples(tmp_path, 3)
    out = tmp_path / "out"
    float_model = model_path.parent / "branches.float.onnx"  # what quantize() quantized
    assert main(["run", "--data", str(data), "--out", str(out), "--float", str(float_model), str(model_path),
                 "--board", U55]) == 1
    captured = capsys.readouterr()
    assert "output v: mean cosine" in captured.out and "exit 1" in captured.err
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header == ["index", "file", "item", "v.cosine", "v.sqnr_db", "v.top1_agree"]
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert len(rows) == 3 and all(float(r.split(",")[3]) > 0.99 for r in rows)


def test_dataset_run_of_no_computable_output_exits_2(tmp_path, capsys):
    """Every output depends on the refused Softmax: nothing to write; the message names the node, the board's
    reason and the single run that dumps every tensor up to it."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
             helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1),
             helper.make_node("Mul", ["y", "y"], ["z"], name="after")]
    model = build_model(nodes, {"x": (1, 16)}, {"z": None}, {"w": weights(rng, (16, 10), 0.3)}, name="only")
    path = quantize(model, tmp_path, "only", activation_type="s8", postprocess=softmax_scales(2.0 ** -30))
    data, _ = samples(tmp_path, 2)
    out = tmp_path / "out"
    assert main(["run", "--data", str(data), "--out", str(out), str(path), "--board", U55]) == 2
    err = capsys.readouterr().err
    assert "no model output can be computed" in err and "node 'softmax' (Softmax)" in err and "2**26" in err
    assert "--dump-all" in err and "Traceback" not in err and not out.exists()
