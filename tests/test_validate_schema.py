"""The schema-driven front door (npu_sim/frontend/validate_schema.py) on round 3 of the hostile corpus
(tests/hostile_schema.py): every invalid case is refused by every command with exit 2 and a message naming the
culprit, every valid one runs; and each verdict is the one onnx's full check and onnxruntime give.
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest

import npu_sim

from npu_sim.cli.main import main
from npu_sim.errors import ModelLoadError, NpuSimError
from npu_sim.frontend.reader import open_model
from tests.hostile_corpus import build_case, demo_base, mixed_base
from tests.hostile_schema import CASES, acts_base
import onnxruntime as ort

BY_NAME = {c.name: c for c in CASES}
# invalid by the spec's text or npu-sim's rule although onnx's checker and onnxruntime take them (cited here):
SPEC_ONLY = {
    # HardSigmoid y = max(0, min(1, alpha * x + beta)): a non-finite alpha/beta gives NaN/inf for every input, which
    # no integer output can hold (npu-sim's rule: finite float attributes)
    "hardsigmoid_alpha_nan", "hardsigmoid_beta_inf",
    # onnx's full check refuses it, onnxruntime only warns ("Error merging shape info") and runs
    "output_shape_contradicts",
    # onnxruntime computes it in float; its bias is 1e30 in accumulator units, which no integer program holds
    "weight_scale_1e-30",
}
TIGHT = [c.name for c in CASES]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return {"demo": demo_base(), "mixed": mixed_base(tmp_path_factory.mktemp("mixed")),
            "acts": acts_base(tmp_path_factory.mktemp("acts"))}


def _cli(capsys, command, path, out):
    code = main([command, str(path)] + (["--out", str(out)] if command == "run" else []))
    captured = capsys.readouterr()
    return code, captured.err + captured.out


@pytest.mark.parametrize("name", TIGHT)
def test_case_verdict(name, bases, tmp_path, capsys):
    case = BY_NAME[name]
    path = build_case(case, tmp_path / "m", bases)
    seen = set()
    for command in ("run", "check", "estimate", "lower"):
        code, text = _cli(capsys, command, path, tmp_path / "out")
        assert code != 3 and "Traceback" not in text, (command, text)
        if case.valid:
            assert code in ((0, 1) if command == "check" else (0,)), (command, text)
            continue
        assert code == 2, (command, text)
        message = text.split("npu-sim: error:", 1)[1].strip()
        for fragment in case.fragments:
            assert fragment in message, (command, fragment, message)
        seen.add(message)
    assert len(seen) <= 1, seen  # one message, whichever command


def _ort_verdict(path) -> str | None:
    """None when onnx's full check and onnxruntime both accept and run the model, else the first refusal."""
    return _ort_verdict_of(onnx.load(str(path)))


def _ort_verdict_of(model) -> str | None:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # noqa: BLE001 - any refusal is the answer
        return f"checker: {exc}"
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],
                                  np.float32 if i.type == "tensor(float)" else np.uint8)
                 for i in session.get_inputs()}
        session.run(None, feeds)
    except Exception as exc:  # noqa: BLE001
        return f"onnxruntime: {exc}"
    return None


@pytest.mark.parametrize("name", TIGHT)
def test_verdict_agrees_with_onnx_and_onnxruntime(name, bases, tmp_path):
    case = BY_NAME[name]
    refusal = _ort_verdict(build_case(case, tmp_path / "m", bases))
    if case.valid:
        assert refusal is None, refusal
    elif name not in SPEC_ONLY:
        assert refusal is not None, "onnx and onnxruntime accept a model npu-sim calls invalid"


def test_every_round3_rule_has_a_case():
    assert sum(not c.valid for c in CASES) >= 18 and sum(c.valid for c in CASES) >= 5


def test_nan_clip_bound_is_a_warning_that_says_the_consequence(bases, tmp_path):
    path = build_case(BY_NAME["clip_min_nan"], tmp_path / "m", bases)
    opened = open_model(path)
    opened.graph()
    assert any("Clip min is nan" in w and "no min bound" in w for w in opened.warnings), opened.warnings


@pytest.mark.parametrize("name,warning", [("clip_min_nan", "no min bound"), ("clip_max_nan", "no max bound"),
                                          ("clip_min_above_max", "every output is max")])
def test_odd_clip_bounds_run_as_onnxruntime_computes_them(name, warning, bases, tmp_path):
    """The consequence each warning states is onnxruntime's result, and npu-sim's on the onnx board."""
    path = build_case(BY_NAME[name], tmp_path / "m", bases)
    opened = open_model(path)
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for board in ("default", "onnx"):
        np.testing.assert_array_equal(npu_sim.load(opened, board=board).run({"x": x})["y"], want, err_msg=board)
    assert any(warning in w for w in opened.warnings), opened.warnings


def test_tf2onnx_16x8_dialect_is_read_with_a_warning_and_refused_from_anyone_else():
    model = onnx.load(str(Path(__file__).parent / "fixtures" / "tflite" / "conv_a16w8.onnx"))
    opened = open_model(model)
    opened.graph()
    dialect = [w for w in opened.warnings if "tf2onnx" in w and "opset 21" in w]
    assert len(dialect) == 1 and " Q/DQ tensor(s) of types opset " in dialect[0], opened.warnings  # one for all
    assert int(dialect[0].split(": ")[1].split()[0]) > 1
    other = copy.deepcopy(model)
    other.producer_name = "someone"
    with pytest.raises(NpuSimError, match="DequantizeLinear-13 allows int32, int8, uint8"):
        open_model(other).graph()


@pytest.mark.parametrize("attr,value,fragment", [
    ("strides", [1, 1, 1], "kernel_shape"),             # one per spatial axis
    ("pads", [1, 1], "needs 4"),                         # two per spatial axis
    ("dilations", [0, 1], "at least 1"),
    ("group", [1], "takes an int"),                      # the schema's type
    ("auto_pad", "VALID", "auto_pad"),                   # with pads
])
def test_conv_attribute_rules(attr, value, fragment, tmp_path):
    model = demo_base()
    node = next(n for n in model.graph.node if n.name == "conv2")
    for a in list(node.attribute):
        if a.name == attr:
            node.attribute.remove(a)
    node.attribute.append(onnx.helper.make_attribute(attr, value))
    with pytest.raises(ModelLoadError) as info:
        open_model(model).graph()
    assert "conv2" in str(info.value) and fragment in str(info.value), str(info.value)


def test_a_nan_constant_is_data_not_a_bad_attribute():
    node = onnx.helper.make_node("Constant", [], ["c"], value_float=float("nan"))
    add = onnx.helper.make_node("Add", ["x", "c"], ["y"])
    model = _one_op(add, (1, 2), {})
    model.graph.node.insert(0, node)
    open_model(model).graph()


def test_required_attribute_and_flag(tmp_path):
    model = demo_base()
    fc = next(n for n in model.graph.node if n.name == "fc")
    fc.attribute.append(onnx.helper.make_attribute("transA", 2))
    with pytest.raises(ModelLoadError, match="transA = 2; it is a flag"):
        open_model(model)


def _one_op(node, x_shape, inits):
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("make,fragment", [
    (lambda h: _one_op(h.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_padding=[2, 0]),
                       (1, 2, 4, 4), {"w": np.ones((2, 2, 3, 3), np.float32)}), "output_padding"),
    (lambda h: _one_op(h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]), (1, 2, 4, 4),
                       {"s": np.array([0], np.int64), "e": np.array([4], np.int64), "a": np.array([2], np.int64),
                        "st": np.array([0], np.int64)}), "step of 0"),
    (lambda h: _one_op(h.make_node("LeakyRelu", ["x"], ["y"], alpha=float("inf")), (1, 2), {}), "alpha = inf"),
    (lambda h: _one_op(h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], count_include_pad=3),
                       (1, 2, 4, 4), {}), "count_include_pad = 3"),
])
def test_spec_rules_on_one_op_models(make, fragment):
    """Each refused by npu-sim's front door naming the attribute or input, and by onnxruntime; except two that only
    npu-sim's rules refuse: LeakyRelu's alpha (finite floats) and a flag of 3 (the spec calls count_include_pad a
    "whether"; onnxruntime reads it as 1, but keepdims or ceil_mode = 2 as 0: no one reading is right)."""
    model = make(onnx.helper)
    with pytest.raises(ModelLoadError, match=fragment):
        open_model(model).graph()
    if "alpha" not in fragment and "count_include_pad" not in fragment:
        with pytest.raises(Exception):
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            session.run(None, {"x": np.zeros(session.get_inputs()[0].shape, np.float32)})


def _mutants(value_type):
    """Attribute values of every wrong kind for an attribute of ``value_type`` (an onnx AttributeProto type)."""
    from onnx import AttributeProto as A
    common = [1, [1, 1], 0.5, "bogus", [0.5]]
    extra = {A.INT: [-1, 0, 2, 2 ** 40], A.INTS: [[-1, -1, -1, -1], [0, 0], [2 ** 40] * 4],
             A.FLOAT: [float("nan"), float("inf"), -1e30], A.FLOATS: [[float("nan")]],
             A.STRING: ["", "NOTSET"]}
    return common + extra.get(value_type, [])


def test_attribute_mutants_are_refused_or_read_never_crash(bases):
    """A seeded slice of what a schema-driven fuzzer does to attributes: every attribute the schema gives each op
    of the three bases (one node per op), set to each wrong kind of value; the front door refuses with an
    NpuSimError or reads the model, never anything else; what it reads, onnx's full check and onnxruntime accept,
    and run and check (default and onnx boards) refuse only with an NpuSimError."""
    from npu_sim.frontend.validate_schema import schema_of
    count = 0
    for base in bases.values():
        seen = set()
        for index, node in enumerate(base.graph.node):
            if node.op_type in seen:
                continue
            seen.add(node.op_type)
            for name, spec in schema_of(node.op_type, 17).attributes.items():
                for value in _mutants(spec.type.value):
                    model = copy.deepcopy(base)
                    target = model.graph.node[index]
                    for a in list(target.attribute):
                        if a.name == name:
                            target.attribute.remove(a)
                    target.attribute.append(onnx.helper.make_attribute(name, value))
                    count += 1
                    try:
                        opened = open_model(model)
                        opened.graph()
                    except NpuSimError:
                        continue
                    assert _ort_verdict_of(model) is None, (node.op_type, name, value, _ort_verdict_of(model))
                    for board in ("default", "onnx"):
                        outcome_of(lambda: npu_sim.load(opened, board=board))
                        outcome_of(lambda: npu_sim.check(opened, board=board))
    assert count >= 150


def outcome_of(call) -> None:
    try:
        call()
    except NpuSimError:
        pass


def test_an_empty_tensor_is_refused_naming_its_node():
    """Valid ONNX (onnxruntime computes empty tensors), but no integer program holds one: one clear refusal."""
    model = _one_op(onnx.helper.make_node("Slice", ["x", "s", "e"], ["y"], name="cut"), (1, 4),
                    {"s": np.array([2], np.int64), "e": np.array([2], np.int64)})
    with pytest.raises(ModelLoadError, match="'y' of node 'cut' would have shape \\[0x4\\], no elements"):
        open_model(model).graph()


def test_a_graph_input_that_is_also_an_output_is_read():
    """Valid ONNX (onnx's full check and onnxruntime take it): the front door used to refuse it ("Field 'shape' of
    'type' is required"). An integer input is returned as given; a float one npu-sim refuses in the lowering (its
    program holds integers), with a message naming the output."""
    model = onnx.load(str(Path(__file__).parent / "fixtures" / "tflite" / "conv_int8.onnx"))
    out = onnx.ValueInfoProto()
    out.CopyFrom(model.graph.input[0])
    model.graph.output.append(out)
    onnx.checker.check_model(model, full_check=True)
    sim = npu_sim.load(model)
    name = model.graph.input[0].name
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).integers(-128, 128, shape).astype(np.int8)
    np.testing.assert_array_equal(sim.run({name: x}, raw=True)[name], x)


def test_a_float_graph_input_that_is_also_an_output_runs_on_every_command(tmp_path, capsys):
    """The demo model (free batch) with its float input also a graph output: onnxruntime runs it. The output used to
    hide every shape (its copy of the input kept the free batch: "could not be inferred", exit 2) and then was
    refused as "not a quantized tensor"; now it is the input as fed, and the integer outputs are those of the
    model without it."""
    demo = Path(__file__).parent.parent / "models" / "demo" / "digits_cnn.qdq.onnx"
    model = onnx.load(str(demo))
    out = onnx.ValueInfoProto()
    out.CopyFrom(model.graph.input[0])
    model.graph.output.append(out)
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "io.onnx"
    onnx.save(model, str(path))
    name = model.graph.input[0].name
    x = np.random.default_rng(1).random((3, 1, 8, 8), np.float32)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {name: x})
    np.testing.assert_array_equal(ref[1], x)
    sim = npu_sim.load(path, input_shapes={name: (1, 1, 8, 8)})
    got = sim.run({name: x})
    np.testing.assert_array_equal(got[name], x)
    plain = npu_sim.load(demo, input_shapes={name: (1, 1, 8, 8)}).run({name: x}, raw=True)
    np.testing.assert_array_equal(sim.run({name: x}, raw=True)["logits"], plain["logits"])
    for argv in (["check", str(path)], ["estimate", str(path)], ["lower", str(path)],
                 ["run", str(path), "--out", str(tmp_path / "out")]):
        assert main(argv) == 0, argv
    assert "the model input 'input' itself" in capsys.readouterr().out
    assert np.load(tmp_path / "out" / f"{name}.npy").shape == (1, 1, 8, 8)
