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
