"""`npu-sim check`: every rule fires on a model built to break it and stays quiet on one just inside its limit;
real models; the onnxruntime #21000 bias overflow built with onnxruntime's own quantizer; CLI, JSON, docs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import npu_sim
from npu_sim.boards import PRESET_DIR
from npu_sim.analysis.check import RULES, supported_ops_markdown
from npu_sim.api import check
from npu_sim.cli.main import main

from qdq_models import build_model, quantize, weights
from tests.litert_host import litert_host_board

ROOT = Path(__file__).parent.parent
DEMO = ROOT / "models" / "demo" / "digits_cnn.qdq.onnx"
S8 = {"ActivationSymmetric": True}  # what our board wants: symmetric int8/int16 activations


def rules_of(result, node_op=None) -> dict[str, list]:
    """rule id -> findings (optionally only on nodes of one op type)."""
    out: dict[str, list] = {}
    for rep in result.nodes:
        if node_op is None or rep.op == node_op:
            for f in rep.findings:
                out.setdefault(f.rule, []).append(f)
    for f in result.model_findings:
        out.setdefault(f.rule, []).append(f)
    return out


def conv_model(cin=4, cout=8, k=3, stride=1, dilation=1, pad=1, hw=12, group=1, w=None, b=None, seed=0):
    rng = np.random.default_rng(seed)
    w = weights(rng, (cout, cin // group, k, k), 0.3) if w is None else w
    b = weights(rng, (cout,), 0.1) if b is None else b
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[stride, stride],
                            dilations=[dilation, dilation], pads=[pad] * 4, group=group)
    return build_model([node], {"x": (1, cin, hw, hw)}, {"y": None}, {"w": w, "b": b})


def unary_model(op, n=1, shape=(1, 4, 6, 6), **attrs):
    """``n`` ``op`` nodes in a row. 4-D models start with a 1x1 Conv: onnxruntime quantizes ops such as Relu or
    the pools only after an op it quantizes."""
    nodes, prev, inits = [], "x", {}
    if len(shape) == 4:
        nodes.append(helper.make_node("Conv", ["x", "w0"], ["c"], kernel_shape=[1, 1]))
        inits["w0"] = np.eye(shape[1], dtype=np.float32).reshape(shape[1], shape[1], 1, 1)
        prev = "c"
    for i in range(n):
        nodes.append(helper.make_node(op, [prev], [f"y{i}"], **attrs))
        prev = f"y{i}"
    return build_model(nodes, {"x": shape}, {prev: None}, inits)


def q(tmp_path, model, name, act="s8", wt="s8", sym=True, **kw):
    extra = dict(kw.pop("extra_options", {}))
    if sym:
        extra.update(S8)
    return quantize(model, tmp_path, name, activation_type=act, weight_type=wt, extra_options=extra, **kw)


def board_file(tmp_path, base="default", name="custom", **changes) -> Path:
    """A copy of a preset with keys changed: ``section__key=value`` (e.g. ``arithmetic__accumulator_bits_8="16"``)."""
    text = (PRESET_DIR / f"{base}.toml").read_text().replace(f'name = "{base}"', f'name = "{name}"')
    for key, value in changes.items():
        section, k = key.split("__")
        text = _replace_in_section(text, f"[{section}]", k, value)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def _replace_in_section(text, header, key, value):
    head, rest = text.split("\n" + header + "\n", 1)
    head += "\n"
    rest = "\n" + rest
    body, sep, tail = rest.partition("\n[")
    lines = body.split("\n")
    if any(line.startswith(f"{key} =") for line in lines):
        lines = [f"{key} = {value}" if line.startswith(f"{key} =") else line for line in lines]
    else:
        lines.insert(1, f"{key} = {value}")
    return head + header + "\n".join(lines) + sep + tail


# ------------------------------------------------------------------------------------------------------------
# real models and the demo
# ------------------------------------------------------------------------------------------------------------
def test_demo_is_clean_on_default():
    r = check(DEMO, input_shapes={"input": (1, 1, 8, 8)})
    assert r.deployable and r.count("warning") == 0, [f.message for _, f in r.findings]
    assert all(n.placement == "NPU" for n in r.nodes)
    assert [n.precision for n in r.nodes if n.op == "Conv"] == ["a8w8"] * 3


def test_real_onnxruntime_model_passes_clean_on_generic():
    sys.path.insert(0, str(ROOT))
    from models.build import get
    path = get("mobilenetv2_a8w8u")  # quantize_static defaults: uint8 activations, int8 per-channel weights
    r = check(path, board="generic")
    assert r.deployable and r.count("error") == 0 and r.count("warning") == 0
    # the same model on our own board: uint8 asymmetric activations are not allowed
    d = rules_of(check(path, board="default"))
    assert {"dtype.activation", "zero_point.activation"} <= set(d)


def test_onnx_board_has_no_hardware_rules():
    sys.path.insert(0, str(ROOT))
    from models.build import get
    r = check(get("mobilenetv2_a8w8u"), board="onnx")
    assert r.deployable and not any(f.rule.startswith(("dtype", "zero_point", "limit", "npu.op"))
                                    for _, f in r.findings)


# ------------------------------------------------------------------------------------------------------------
# board rules
# ------------------------------------------------------------------------------------------------------------
def test_dtype_and_zero_point_rules(tmp_path):
    m = conv_model()
    u8 = check(q(tmp_path, m, "u8", act="u8", sym=False))
    found = rules_of(u8, "Conv")
    assert "dtype.activation" in found and "zero_point.activation" in found
    assert "uint8" in found["dtype.activation"][0].message and "int8, int16" in found["dtype.activation"][0].message
    asym = rules_of(check(q(tmp_path, m, "s8a", act="s8", sym=False)), "Conv")
    assert "zero_point.activation" in asym and "dtype.activation" not in asym
    # both are quantization settings (re-quantizing the model applies the board's), the other findings are not
    assert all(f.quantization_setting == f.rule.startswith(("dtype.", "zero_point.")) for _, f in u8.findings)
    assert {r.id for r in RULES if r.quantization_setting} == {"dtype.activation", "dtype.weight",
                                                                "zero_point.activation", "zero_point.weight"}
    clean = rules_of(check(q(tmp_path, m, "s8")))
    assert not {"dtype.activation", "zero_point.activation", "dtype.weight", "zero_point.weight"} & set(clean)
    # weights: int16 weights are fine on default, an error on generic (int8 weights only)
    a16w16 = q(tmp_path, m, "a16w16", act="s16", wt="s16")
    assert "dtype.weight" not in rules_of(check(a16w16))
    assert "dtype.weight" in rules_of(check(a16w16, board="generic"))
    # asymmetric int8 weights
    positive = conv_model(w=np.abs(weights(np.random.default_rng(1), (8, 4, 3, 3), 0.3)) + 0.05)
    wasym = q(tmp_path, positive, "wasym", extra_options={"WeightSymmetric": False})
    assert "zero_point.weight" in rules_of(check(wasym), "Conv")
    assert "zero_point.weight" not in clean


def test_per_channel_weights_rule(tmp_path):
    m = conv_model()
    board = board_file(tmp_path, rules__per_channel_weights="false")
    assert "weights.per_channel" in rules_of(check(q(tmp_path, m, "pc", per_channel=True), board=board))
    assert "weights.per_channel" not in rules_of(check(q(tmp_path, m, "pt", per_channel=False), board=board))


@pytest.mark.parametrize("rule_id, inside, outside", [
    ("limit.kernel", dict(k=15, pad=7, hw=16), dict(k=17, pad=8, hw=18)),
    ("limit.stride", dict(stride=4), dict(stride=5)),
    ("limit.dilation", dict(dilation=4, pad=4), dict(dilation=5, pad=5)),
    ("limit.pad", dict(pad=8), dict(pad=9)),
    ("limit.channels", dict(cin=1, cout=4096, k=1, pad=0, hw=2), dict(cin=1, cout=4097, k=1, pad=0, hw=2)),
])
def test_geometry_limits(tmp_path, rule_id, inside, outside):
    ok = check(q(tmp_path, conv_model(**inside), "in"))
    bad = check(q(tmp_path, conv_model(**outside), "out"))
    assert rule_id not in rules_of(ok)
    found = rules_of(bad)[rule_id]
    assert found[0].severity == "error" and not bad.deployable
    assert str(found[0].values["limit"]) in found[0].message


@pytest.mark.parametrize("cin, k, group, allowed", [
    (16, 3, 1, True),      # 144 <= 256
    (28, 3, 1, True),      # 252
    (29, 3, 1, False),     # 261 > 256
    (256, 1, 1, True),     # exactly 256
    (257, 1, 1, False),
    (64, 3, 64, True),     # depthwise 3x3: 9 per output
])
def test_int16_conv_rule(tmp_path, cin, k, group, allowed):
    m = conv_model(cin=cin, cout=cin if group > 1 else 4, k=k, pad=k // 2, hw=4, group=group)
    r16 = check(q(tmp_path, m, "a16", act="s16", wt="s8"))
    found = rules_of(r16, "Conv").get("int16.reduction", [])
    assert (not found) == allowed
    if found:
        assert f"= {cin // group * k * k}" in found[0].message and "256" in found[0].message
    # the same layer at 8 bits is always fine
    assert "int16.reduction" not in rules_of(check(q(tmp_path, m, "a8")))


def test_npu_op_table_and_cpu_fallback(tmp_path):
    path = q(tmp_path, unary_model("Sigmoid"), "sig")
    assert check(path).nodes[-1].placement == "NPU"
    fallback = _board_with(tmp_path, "[rules.ops.Sigmoid]\nnpu = false\n")
    r = check(path, board=fallback)
    sig = next(n for n in r.nodes if n.op == "Sigmoid")
    assert sig.placement == "CPU" and sig.findings[0].rule == "npu.op" and sig.findings[0].severity == "warning"
    assert r.deployable
    strict = _board_with(tmp_path, "[rules.ops.Sigmoid]\nnpu = false\n", cpu_fallback="false")
    r = check(path, board=strict)
    assert not r.deployable and rules_of(r)["npu.op"][0].severity == "error"
    assert npu_sim.analysis.check.placement(npu_sim.load(path, board=fallback).program)[sig.node] == "CPU"


def _board_with(tmp_path, extra: str, **rules) -> Path:
    text = (PRESET_DIR / "default.toml").read_text().replace('name = "default"', 'name = "custom"')
    for key, value in rules.items():
        text = _replace_in_section(text, "[rules]", key, value)
    path = tmp_path / f"board{abs(hash((extra, tuple(rules.items()))))}.toml"
    path.write_text(text + "\n" + extra)
    return path


def test_requantization_shift_range(tmp_path):
    path = q(tmp_path, conv_model(), "c")
    assert "requant.range" not in rules_of(check(path))
    narrow = _board_with(tmp_path, "", shift_max="30")
    found = rules_of(check(path, board=narrow))["requant.range"]
    assert found[0].severity == "error" and "[0, 30]" in found[0].message


def test_dead_channel_with_flushed_multiplier_is_not_a_requant_error(tmp_path):
    rng = np.random.default_rng(3)
    w = weights(rng, (8, 4, 3, 3), 0.3)
    w[5] = 0.0
    b = weights(rng, (8,), 0.1)
    b[5] = 0.0
    path = q(tmp_path, conv_model(w=w, b=b), "dead", per_channel=True)
    found = rules_of(check(path))
    assert "requant.range" not in found
    dead = found["weights.dead_channel"][0]
    assert "(5)" in dead.message and dead.severity == "warning"
    assert "weights.dead_channel" not in rules_of(check(q(tmp_path, conv_model(), "alive", per_channel=True)))


# ------------------------------------------------------------------------------------------------------------
# numeric hazards
# ------------------------------------------------------------------------------------------------------------
def _issue21000_float_model():
    """A conv whose channels 2 and 6 have tiny weights but ordinary biases: per-channel int16 weight scales make
    the bias scale input_scale x weight_scale[c] so small that the int32 bias overflows."""
    rng = np.random.default_rng(21000)
    w = weights(rng, (8, 4, 3, 3), 0.3)
    w[2] *= 1e-6
    w[6] *= 3e-6
    b = weights(rng, (8,), 0.5)
    b[2], b[6] = 0.8, -0.6
    return conv_model(w=w, b=b)


def test_issue_21000_bias_overflow_built_by_onnxruntime(tmp_path):
    m = _issue21000_float_model()
    broken = q(tmp_path, m, "a16w16_noadjust", act="s16", wt="s16", per_channel=True,
               extra_options={"QDQDisableWeightAdjustForInt32Bias": True})
    bias = next(numpy_helper.to_array(i) for i in onnx.load(str(broken)).graph.initializer
                if i.data_type == onnx.TensorProto.INT32 and list(i.dims) == [8])
    assert {int(bias[2]), int(bias[6])} == {2 ** 31 - 1, -(2 ** 31)}  # onnxruntime clipped them
    r = check(broken)
    found = rules_of(r)["bias.saturated"]
    assert len(found) == 1 and found[0].severity == "error" and not r.deployable
    assert found[0].values["channel_list"] == [2, 6]
    conv = next(n for n in r.nodes if any(f.rule == "bias.saturated" for f in n.findings))
    assert conv.op == "Conv" and "2, 6" in found[0].message and "#21000" in found[0].message
    for remedy in ("per_channel=False", "reduce_range", "1.20.1", "int8 weights"):
        assert remedy in found[0].fix
    assert "weights.scale_spread" in rules_of(r)
    # onnxruntime's own fix (enlarged weight scales, the default since 1.20.1) leaves nothing to report
    fixed = q(tmp_path, m, "a16w16", act="s16", wt="s16", per_channel=True)
    assert "bias.saturated" not in rules_of(check(fixed))


def test_issue_21000_as_onnxruntime_118_wrote_it(tmp_path):
    """1.18 cast an overflowing float bias to int32 without clipping: INT32_MIN ('invalid value in cast')."""
    def int32_min_bias(model):
        for init in model.graph.initializer:
            if init.data_type == onnx.TensorProto.INT32 and list(init.dims) == [8]:
                arr = numpy_helper.to_array(init).copy()
                arr[[2, 6]] = -(2 ** 31)
                init.CopyFrom(numpy_helper.from_array(arr, init.name))
        return model
    path = q(tmp_path, _issue21000_float_model(), "a16w16_118", act="s16", wt="s16", per_channel=True,
             extra_options={"QDQDisableWeightAdjustForInt32Bias": True}, postprocess=int32_min_bias)
    found = rules_of(check(path))["bias.saturated"][0]
    assert found.values["channel_list"] == [2, 6] and "INT32_MIN" in found.message


def test_implausible_bias(tmp_path):
    def huge_bias(model):
        for init in model.graph.initializer:
            if init.data_type == onnx.TensorProto.INT32 and list(init.dims) == [8]:
                arr = numpy_helper.to_array(init).copy()
                arr[3] = 2 ** 29
                init.CopyFrom(numpy_helper.from_array(arr, init.name))
        return model
    path = q(tmp_path, conv_model(), "hugebias", postprocess=huge_bias)
    found = rules_of(check(path))["bias.implausible"][0]
    assert "(3)" in found.message or "channel(s) 3" in found.message
    assert "bias.implausible" not in rules_of(check(q(tmp_path, conv_model(), "normal")))


def test_accumulator_worst_case_and_observed(tmp_path):
    path = q(tmp_path, conv_model(cin=16), "acc")
    assert "accumulator.worst_case" not in rules_of(check(path))
    narrow = board_file(tmp_path, name="acc16", arithmetic__accumulator_bits_8="16")
    r = check(path, board=narrow)
    assert rules_of(r)["accumulator.worst_case"][0].severity == "warning" and r.deployable
    run = check(path, board=narrow, feeds="random")
    observed = rules_of(run)["accumulator.observed"][0]
    assert observed.severity == "error" and observed.values["count"] > 0 and not run.deployable
    assert "accumulator.observed" not in rules_of(check(path, feeds="random"))


def test_weight_scale_spread(tmp_path):
    def model(factor):
        rng = np.random.default_rng(5)
        w = weights(rng, (8, 4, 3, 3), 0.3)
        w[1] *= factor
        return conv_model(w=w)
    wide = rules_of(check(q(tmp_path, model(1e-4), "spread", per_channel=True)))["weights.scale_spread"][0]
    assert wide.values["cmin"] == 1 and wide.values["ratio"] > 1000
    assert "weights.scale_spread" not in rules_of(check(q(tmp_path, model(1e-2), "narrow", per_channel=True)))


# ------------------------------------------------------------------------------------------------------------
# lint
# ------------------------------------------------------------------------------------------------------------
def test_lut_lint(tmp_path):
    one = rules_of(check(q(tmp_path, unary_model("Sigmoid"), "sig1")))
    assert one["lint.lut"][0].severity == "info" and "256 entries" in one["lint.lut"][0].message
    assert "lint.lut_heavy" not in one
    at_limit = rules_of(check(q(tmp_path, unary_model("Tanh", n=8), "tanh8")))
    assert "lint.lut_heavy" not in at_limit
    heavy = rules_of(check(q(tmp_path, unary_model("Tanh", n=9), "tanh9")))
    assert heavy["lint.lut_heavy"][0].values["count"] == 9
    s16 = rules_of(check(q(tmp_path, unary_model("Sigmoid"), "sig16", act="s16")))
    assert "513 entries, interpolated" in s16["lint.lut"][0].message


def test_softmax_is_a_lut_chain(tmp_path):
    path = q(tmp_path, unary_model("Softmax", shape=(1, 10), axis=-1), "softmax")
    assert rules_of(check(path))["lint.lut_chain"][0].severity == "warning"
    assert "lint.lut_chain" not in rules_of(check(q(tmp_path, unary_model("Relu"), "relu")))


def test_large_kernels(tmp_path):
    assert rules_of(check(q(tmp_path, conv_model(k=5, pad=2), "k5")))["lint.large_kernel"][0].values["kernel"] == "5x5"
    assert "lint.large_kernel" not in rules_of(check(q(tmp_path, conv_model(k=3), "k3")))
    pool = unary_model("AveragePool", shape=(1, 4, 9, 9), kernel_shape=[7, 7], pads=[3, 3, 3, 3])
    assert "lint.large_kernel" in rules_of(check(q(tmp_path, pool, "pool7")))


def test_concat_of_wide_ranges(tmp_path):
    def model():
        return build_model([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
                           {"a": (1, 2, 4, 4), "b": (1, 2, 4, 4)}, {"y": None})
    wide = check(q(tmp_path, model(), "wide", spread={"a": 1.0, "b": 100.0}))
    found = rules_of(wide)["lint.concat_range"][0]
    assert found.values["ratio"] > 8 and found.values["narrow"] == "a" and found.values["wide"] == "b"
    assert "lint.concat_range" not in rules_of(check(q(tmp_path, model(), "close", spread={"a": 1.0, "b": 4.0})))


def test_input_quantization_lint(tmp_path):
    m = unary_model("Relu")
    # raw [0, 255]-like data into an asymmetric input
    raw = rules_of(check(q(tmp_path, m, "raw", act="u8", sym=False, spread=20.0, offset={"x": 128.0}),
                         board="onnx"))["lint.input"][0]
    assert "one-sided" in raw.message and "[-1, 1]" in raw.fix
    wide = rules_of(check(q(tmp_path, m, "wide", spread=4.0)))["lint.input"][0]
    assert "1/128" in wide.message
    assert "lint.input" not in rules_of(check(DEMO, input_shapes={"input": (1, 1, 8, 8)}))


def test_activation_and_weight_ranges(tmp_path):
    rng = np.random.default_rng(9)
    m = conv_model(w=weights(rng, (8, 4, 3, 3), 0.3) * 100)  # |w| up to ~100, outputs in the thousands
    found = rules_of(check(q(tmp_path, m, "big", spread=10.0)))
    assert found["lint.weight_range"][0].values["value"] > 16
    assert found["lint.activation_range"][0].values["value"] > 1000
    assert "allowed here" in found["lint.activation_range"][0].fix  # 4*3*3 = 36 <= 256: int16 is legal
    small = rules_of(check(q(tmp_path, conv_model(), "small")))
    assert "lint.weight_range" not in small and "lint.activation_range" not in small


def test_unlowerable_nodes_are_reported_not_raised(tmp_path):
    m = build_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mish", ["r"], ["y"])],
                    {"x": (1, 4, 4, 4)}, {"y": None}, opset=18)
    path = q(tmp_path, m, "mish")
    with pytest.raises(npu_sim.UnsupportedModelError):
        npu_sim.load(path)
    r = check(path)
    mish = next(n for n in r.nodes if n.op == "Mish")
    assert mish.placement == "CPU" and not mish.simulated and mish.findings[0].rule == "npu.lowering"
    assert r.deployable  # the board falls back to the CPU
    strict = _board_with(tmp_path, "", cpu_fallback="false")
    assert not check(path, board=strict).deployable


# ------------------------------------------------------------------------------------------------------------
# rule table, docs, CLI
# ------------------------------------------------------------------------------------------------------------
def test_every_rule_has_a_message_and_a_fix_and_unique_id():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for r in RULES:
        msg, fix = r.text
        assert msg and fix, r.id
        assert r.severity in ("error", "warning", "info")


def test_supported_ops_doc_is_current():
    assert (ROOT / "docs" / "SUPPORTED_OPS.md").read_text() == supported_ops_markdown(), \
        "docs/SUPPORTED_OPS.md is stale: run python docs/supported_ops.py"


def test_cli_text_json_and_exit_codes(tmp_path, capsys):
    assert main(["check", str(DEMO), "--input-shape", "input=1x1x8x8"]) == 0
    out = capsys.readouterr().out
    assert "conv1" in out and "DEPLOYABLE" in out and "NPU" in out
    u8 = q(tmp_path, conv_model(), "u8", act="u8", sym=False)
    assert main(["check", str(u8), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "npu-sim-check" and doc["version"] == 1 and doc["deployable"] is False
    assert doc["summary"]["errors"] > 0 and doc["summary"]["nodes"] == len(doc["nodes"])
    node = next(n for n in doc["nodes"] if n["op"] == "Conv")
    assert {"node", "op", "placement", "precision", "findings", "simulated"} <= set(node)
    f = node["findings"][0]
    assert {"rule", "severity", "message", "fix", "values"} <= set(f)
    assert main(["check", str(tmp_path / "missing.onnx")]) == 2
    assert "missing.onnx" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[rules]\nactivation_dtypes = ["int7"]\n')
    assert main(["check", str(DEMO), "--board", str(bad), "--input-shape", "input=1x1x8x8"]) == 2
    err = capsys.readouterr().err
    assert "rules.activation_dtypes" in err and "Traceback" not in err
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 8, 8), np.float32))
    assert main(["check", str(DEMO), "--input", f"input={tmp_path / 'x.npy'}"]) == 0


def test_text_report_writes_each_fix_out_once(tmp_path, capsys):
    """A rule that hits many nodes (asymmetric activations: every node) gives its fix in full at the first node
    and refers back to it after (--verbose: the full listing); each node still names its own tensor and zero point."""
    path = q(tmp_path, unary_model("Sigmoid", n=3), "asym", sym=False)
    assert main(["check", str(path), "--verbose"]) == 1
    out = capsys.readouterr().out
    result = check(str(path))
    hits = [n.node for n in result.nodes if any(f.rule == "zero_point.activation" for f in n.findings)]
    fix = rules_of(result)["zero_point.activation"][0].fix
    assert len(hits) >= 3 and out.count(fix) == 1
    assert out.count(f"fix: as for {hits[0]} above") == len(hits) - 1
    assert out.count("zero_point.activation: ") == len(hits)


def test_api_accepts_a_simulator():
    sim = npu_sim.load(DEMO, feed_shapes={"input": (1, 1, 8, 8)})
    r = npu_sim.check(sim)
    assert r.board == "default" and r.deployable
    assert npu_sim.check(sim, board="generic").board == "generic"


def test_console_script_help():
    exe = Path(sys.executable).parent / "npu-sim"
    if not exe.exists():
        pytest.skip("console script not installed in this environment")
    out = subprocess.run([str(exe), "check", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "Exit code: 0 deployable, 1 not deployable" in out.stdout


# ------------------------------------------------------------------------------------------------------------
# the Ethos-U55 preset: Vela's documented constraints
# ------------------------------------------------------------------------------------------------------------
U55 = "ethos-u55-128"


def test_u55_zero_points_per_dtype(tmp_path):
    m = conv_model()
    assert "zero_point.activation" not in rules_of(check(q(tmp_path, m, "s8a", act="s8", sym=False), board=U55))
    a16 = rules_of(check(q(tmp_path, m, "s16a", act="s16", sym=False), board=U55))
    assert "int16 activations only symmetric" in a16["zero_point.activation"][0].message
    assert "zero_point.activation" not in rules_of(check(q(tmp_path, m, "s16", act="s16"), board=U55))
    assert "dtype.weight" in rules_of(check(q(tmp_path, m, "w16", act="s16", wt="s16"), board=U55))


@pytest.mark.parametrize("rule_id, inside, outside", [
    # stride > 3 only unpadded and undilated
    ("limit.stride", dict(stride=3, pad=1), dict(stride=4, pad=1)),
    ("limit.depthwise_stride", dict(cin=8, cout=8, group=8, stride=3, pad=0), dict(cin=8, cout=8, group=8, stride=4, pad=0)),
])
def test_u55_conv_strides(tmp_path, rule_id, inside, outside):
    assert rule_id not in rules_of(check(q(tmp_path, conv_model(hw=16, **inside), "in"), board=U55))
    assert rules_of(check(q(tmp_path, conv_model(hw=16, **outside), "out"), board=U55))[rule_id][0].severity == "error"
    # an unpadded stride-4 convolution is fine on the U55
    assert "limit.stride" not in rules_of(check(q(tmp_path, conv_model(hw=16, stride=4, pad=0), "valid"), board=U55))


def test_u55_weight_sum_and_bias_limits(tmp_path):
    m = conv_model(cin=64, k=3)  # 64*9 = 576 weights per output channel, |w_q| <= 127: 73,152 < 8,323,072
    path = q(tmp_path, m, "ok")
    assert not {"limit.weight_sum", "limit.bias"} & set(rules_of(check(path, board=U55)))
    text = (PRESET_DIR / f"{U55}.toml").read_text().replace("weight_abs_sum_max = 8323072\nbias_max",
                                                            "weight_abs_sum_max = 10000\nbias_max", 1)
    board = tmp_path / "u55_tight.toml"
    board.write_text(text.replace(f'name = "{U55}"', 'name = "tight"'))
    found = rules_of(check(path, board=board))["limit.weight_sum"][0]
    assert found.values["limit"] == 10000 and found.values["value"] > 10000


def test_u55_pools_and_resize(tmp_path):
    padded = unary_model("AveragePool", shape=(1, 4, 12, 12), kernel_shape=[9, 9], pads=[4, 4, 4, 4])
    assert "limit.kernel_padded" in rules_of(check(q(tmp_path, padded, "p9"), board=U55))
    valid = unary_model("AveragePool", shape=(1, 4, 12, 12), kernel_shape=[9, 9])
    assert "limit.kernel_padded" not in rules_of(check(q(tmp_path, valid, "v9"), board=U55))

    def resize(factor):
        scales = np.array([1, 1, factor, factor], np.float32)
        return build_model([helper.make_node("Conv", ["x", "w0"], ["c"], kernel_shape=[1, 1]),
                            helper.make_node("Resize", ["c", "", "s"], ["y"], mode="nearest")],
                           {"x": (1, 4, 4, 4)}, {"y": None},
                           {"w0": np.eye(4, dtype=np.float32).reshape(4, 4, 1, 1), "s": scales})
    assert "limit.resize_scale" not in rules_of(check(q(tmp_path, resize(2.0), "r2"), board=U55))
    found = rules_of(check(q(tmp_path, resize(3.0), "r3"), board=U55))["limit.resize_scale"][0]
    assert "4x4 to 12x12" in found.message and "2x, 4x, 8x" in found.message


def test_u55_batch_matmul_needs_int8(tmp_path):
    m = build_model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": (1, 4, 8), "b": (1, 8, 4)}, {"y": None})
    assert "dtype.activation" not in rules_of(check(q(tmp_path, m, "mm8"), board=U55))
    found = rules_of(check(q(tmp_path, m, "mm16", act="s16"), board=U55))["dtype.activation"][0]
    assert "int16" in found.message and "takes int8" in found.message
    # a MatMul with constant weights is a FULLY_CONNECTED: 16x8 is fine
    fc = build_model([helper.make_node("MatMul", ["a", "w"], ["y"])], {"a": (1, 8)}, {"y": None},
                     {"w": weights(np.random.default_rng(2), (8, 4))})
    assert "dtype.activation" not in rules_of(check(q(tmp_path, fc, "fc16", act="s16"), board=U55))


def test_u55_runs_off_npu_ops_on_the_cpu():
    sys.path.insert(0, str(ROOT))
    from models.build import get
    r = check(get("ppocr_det_a8w8"), board=U55)
    cpu = {n.op for n in r.nodes if n.placement == "CPU"}
    assert cpu == {"Div", "HardSigmoid", "BatchNormalization"} and r.deployable


TFL = ROOT / "tests" / "fixtures" / "tflite"


def test_u55_takes_what_litert_refuses_as_a_hazard(tmp_path):
    """LiteRT refuses refusal_depthwise_a16w8.tflite at prepare time (no_integer_overflow_from_quantization, its
    message is stored beside it): where LiteRT prepares every node the check names that depthwise convolution as
    not deployable; on ethos-u55-128 Vela compiles it (clamping the bound): a hazard warning, deployable."""
    assert "no_integer_overflow_from_quantization" in (TFL / "refusal_depthwise_a16w8.refusal.txt").read_text()
    r = check(TFL / "refusal_depthwise_a16w8.onnx", board=str(litert_host_board(tmp_path)))
    refused = [(n.node, f) for n in r.nodes for f in n.findings if f.rule == "board.refusal"]
    assert len(refused) == 1 and not r.deployable
    node, finding = refused[0]
    assert node == "StatefulPartitionedCall:0_prequant" and finding.severity == "error"
    assert "no_integer_overflow_from_quantization" in finding.message
    r = check(TFL / "refusal_depthwise_a16w8.onnx", board=U55)
    warned = [(n.node, f) for n in r.nodes for f in n.findings if f.rule == "quant.degenerate"]
    assert [node for node, _ in warned] == ["StatefulPartitionedCall:0_prequant"] and r.deployable
    assert warned[0][1].severity == "warning" and "does not fit int32" in warned[0][1].message
    # the same network with a sane output scale has no such warning
    sane = check(TFL / "depthwise_a16w8.onnx", board=U55)
    assert sane.deployable and not any(f.rule == "quant.degenerate" for n in sane.nodes for f in n.findings)


def test_ops_the_board_arithmetic_lacks_are_checked_and_estimated_on_their_structure(tmp_path):
    path = q(tmp_path, unary_model("Elu"), "elu", sym=False)  # an NPU op on the U55 (ELU)...
    with pytest.raises(npu_sim.UnsupportedModelError):  # ...that the tflite arithmetic does not compute yet
        npu_sim.load(path, board=U55)
    r = check(path, board=U55)
    gap = rules_of(r)["npu.arithmetic"][0]
    assert gap.severity == "info" and "Elu" in gap.message and r.deployable
    est = npu_sim.estimate(path, board=U55)
    assert est.summary["total_cycles"] > 0 and any(row.op == "Elu" for row in est.layers)
    with pytest.raises(npu_sim.NpuSimError):
        check(path, board=U55, feeds="random")


def test_u55_lut_message_names_the_tflite_table():
    found = rules_of(check(TFL / "activations_a16w8.onnx", board=U55))["lint.lut"]
    assert {f.message.split("(")[1].split(")")[0] for f in found} == {"256-entry sigmoid table, interpolated"}
