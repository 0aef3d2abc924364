"""A fix that deploys: the quantization settings a board's rules require (npu_sim.boards.rules.Rules.activation_setting,
npu_sim.analysis.advisor.board_fix), the check's fix texts derived from them, and `npu-sim report --requantize`
writing a model that passes `npu-sim check` on its board, or naming the rule that blocks it."""
from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import npu_sim
from npu_sim.analysis import advisor
from npu_sim.analysis.advisor.board_fix import board_settings
from npu_sim.boards import load_board
from npu_sim.boards.rules import Rules, taken_dtype
from npu_sim.cli.main import main as cli_main
from npu_sim.qdq.recalibrate import QuantSettings

ort = pytest.importorskip("onnxruntime")
from tests.qdq_models import quantize, small_cnn  # noqa: E402  (needs onnxruntime)

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "npu_sim" / "boards"
DEMO = ROOT / "models" / "demo"
FLOAT = DEMO / "digits_cnn.float.onnx"
DATA = DEMO / "digits_test.npz"
SHAPE = {"input": (1, 1, 8, 8)}
U55 = "ethos-u55-128"


def board(tmp_path, base: str, name: str, **rules) -> Path:
    """A copy of a preset renamed ``name``, with ``[rules]`` keys set (TOML values as text)."""
    text = (PRESETS / f"{base}.toml").read_text().replace(f'name = "{base}"', f'name = "{name}"')
    for key, value in rules.items():
        head, sep, rest = text.partition("\n[rules]\n")
        lines = [f"{key} = {value}" if line.split("=")[0].strip() == key else line for line in rest.split("\n")]
        text = head + sep + "\n".join(lines)
        assert f"\n{key} = {value}" in text, key
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def rules_of(result, rule_id):
    return [f for _, f in result.findings if f.rule == rule_id]


# -- the settings, derived from what the board allows ------------------------------------------------------------

def test_taken_dtype_changes_as_little_as_the_board_needs():
    assert taken_dtype("uint8", ("int8", "int16")) == "int8"          # same width, other signedness
    assert taken_dtype("int8", ("int8", "int16")) == "int8"           # taken as it is
    assert taken_dtype("int4", ("int8", "int16")) == "int8"           # the narrowest that is at least as wide
    assert taken_dtype("int16", ("int8",)) == "int8"                  # else the widest there is
    u55 = load_board(U55).rules
    assert u55.activation_setting("uint8") == ("int8", False)          # int8 may keep its zero points on the U55
    assert u55.activation_setting("int16") == ("int16", True)          # int16 may not
    assert load_board("default").rules.activation_setting("uint8") == ("int8", True)
    assert Rules().activation_setting("uint8") == ("uint8", False)     # no [rules]: nothing to change


def test_board_settings_change_only_what_the_board_refuses():
    u8 = QuantSettings("QUInt8", "QInt8", True, extra_options={"WeightSymmetric": True})
    u55, extra, changes = board_settings(u8, load_board(U55).rules)
    assert (u55.activation_type, u55.per_channel) == ("QInt8", True)
    assert "ActivationSymmetric" not in u55.extra_options and extra == {}   # asymmetric int8 is what the U55 takes
    assert len(changes) == 1 and "activation_type=QuantType.QInt8 (was QUInt8)" in changes[0]
    a16 = QuantSettings("QInt16", "QInt16", True)
    new, extra, changes = board_settings(a16, load_board("default").rules)
    assert (new.activation_type, new.weight_type) == ("QInt16", "QInt16")
    assert extra == {"ActivationSymmetric": True} and "int16 activations only with zero point 0" in changes[0]
    new, extra, changes = board_settings(a16, load_board(U55).rules)  # int8 weights only on the U55
    assert new.weight_type == "QInt8" and any("weight_type=QuantType.QInt8" in c for c in changes)
    same = QuantSettings("QInt8", "QInt8", True, extra_options={"ActivationSymmetric": True})
    assert board_settings(same, load_board("default").rules)[1:] == ({}, [])


def test_board_settings_repin_a_model_input_the_board_refuses():
    pinned = QuantSettings("QUInt8", "QInt8", True, extra_options={
        "TensorQuantOverrides": {"input": [{"scale": 1 / 255, "zero_point": 128, "dtype": "uint8"}]}})
    new, extra, changes = board_settings(pinned, load_board("default").rules)
    assert extra["TensorQuantOverrides"] == {"input": [{"scale": 0.0078125, "zero_point": 0, "dtype": "int8"}]}
    assert new.extra_options["TensorQuantOverrides"] == extra["TensorQuantOverrides"]
    assert any(c.startswith("input input: scale 0.0078125") for c in changes)
    new, extra, _ = board_settings(pinned, load_board(U55).rules)        # any input scale, int8 with zero points
    assert extra["TensorQuantOverrides"] == {"input": [{"quant_type": "QInt8"}]}
    wide = QuantSettings("QUInt16", "QInt8", True, extra_options={
        "TensorQuantOverrides": {"input": [{"scale": 1e-4, "zero_point": 32768, "dtype": "uint16"}]}})
    _, extra, _ = board_settings(wide, load_board("default").rules)      # the fixed stub scale is for 8 bits
    assert extra["TensorQuantOverrides"] == {"input": [{"quant_type": "QInt16", "symmetric": True}]}


def test_no_board_per_channel_when_the_board_takes_none(tmp_path):
    path = board(tmp_path, "default", "per-tensor", per_channel_weights="false")
    symmetric = QuantSettings(extra_options={"ActivationSymmetric": True})
    new, _, changes = board_settings(symmetric, load_board(str(path)).rules)
    assert not new.per_channel and changes == ["per_channel=False: the board takes one weight scale per layer"]


# -- the check's advice: what the board needs, not more ----------------------------------------------------------

@pytest.fixture(scope="module")
def uint8_model(tmp_path_factory):
    """The demo CNN quantized with onnxruntime's defaults (uint8 asymmetric activations, per-channel int8 weights)."""
    return quantize(onnx.load(str(FLOAT)), tmp_path_factory.mktemp("u8"), "demo_u8", activation_type="u8",
                    per_channel=True, calib_shapes=SHAPE)


def test_uint8_on_the_u55_is_told_int8_not_symmetric(uint8_model):
    r = npu_sim.check(uint8_model, board=U55, input_shapes=SHAPE)
    assert not rules_of(r, "zero_point.activation")                   # int8 there may keep its zero points
    fix = rules_of(r, "dtype.activation")[0].fix
    assert "activation_type=QuantType.QInt8" in fix and "ActivationSymmetric" not in fix
    assert "need not be symmetric" in fix
    d = npu_sim.check(uint8_model, board="default", input_shapes=SHAPE)   # our board: int8 symmetric
    assert '"ActivationSymmetric": True' in rules_of(d, "dtype.activation")[0].fix
    assert "QuantType.QInt8" in rules_of(d, "zero_point.activation")[0].fix


def test_int16_with_zero_points_on_the_u55_needs_only_those_symmetric(tmp_path):
    a16 = quantize(small_cnn(), tmp_path, "a16", activation_type="s16", per_channel=True)
    zp = rules_of(npu_sim.check(a16, board=U55), "zero_point.activation")
    assert zp and "QuantType.QInt16" in zp[0].fix and "only the int16 tensors" in zp[0].fix
    assert "TensorQuantOverrides" in zp[0].fix and "int8 activations with zero points" in zp[0].fix


# -- report --requantize: the written model passes the board's check ---------------------------------------------

def test_requantize_writes_a_model_that_passes_a_board_forcing_symmetric_activations(uint8_model, tmp_path,
                                                                                      capsys):
    sym = board(tmp_path, "default", "sym8", activation_dtypes='["int8", "uint8"]')
    before = npu_sim.check(uint8_model, board=str(sym), input_shapes=SHAPE)
    assert {f.rule for _, f in before.findings if f.severity == "error"} == {"zero_point.activation"}
    fixed, fix = tmp_path / "fixed.onnx", tmp_path / "fix.json"
    rc = cli_main(["report", str(uint8_model), "--float", str(FLOAT), "--data", str(DATA), "--limit", "24",
                   "--board", str(sym), "--samples", "2", "--no-sensitivity", "--requantize", str(DATA),
                   "--calib-limit", "60", "--fixed-model", str(fixed), "--overrides", str(fix), "--quiet",
                   "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert rc == 0
    after = npu_sim.check(fixed, board=str(sym), input_shapes=SHAPE)
    assert after.deployable and after.count("error") == 0             # what `npu-sim check` says of it
    assert "verdict: deployable on sym8; cosine " in out
    assert "the board sym8 requires" in out and "ActivationSymmetric=True" in out
    assert json.loads(fix.read_text())["ActivationSymmetric"] is True  # the fix file carries the board's need
    rq = json.loads((tmp_path / "r.json").read_text())["advisor"]["requantized"]
    assert rq["check"] == {"board": "sym8", "deployable": True, "errors": 0, "blocking": []}
    assert rq["settings"]["activation_type"] == "QInt8" and rq["after"]["cosine"] > 0.999
    # the page leads with it: the verdict as it is, what to do, the fix (valid JSON), what it measured
    page = (tmp_path / "r.html").read_text()
    verdict = page.split("<div class='verdict'>")[1].split("</div>")[0]
    assert page.index("<div class='verdict'>") < page.index("<h2>Outputs</h2>")
    assert "not deployable</b> on board sym8: 2 error(s) (zero_point.activation ×2)" in verdict
    assert "<b>Quantize as the board requires</b>: activation_type=QuantType.QInt8 (was QUInt8)" in verdict
    fix_text = html.unescape(verdict.split("<pre>")[1].split("</pre>")[0])
    assert json.loads(fix_text) == json.loads(fix.read_text())
    assert "deployable on sym8; cosine " in verdict and "class='ok'" in verdict


def test_requantize_names_the_rule_that_blocks_deployment(uint8_model, tmp_path):
    small = board(tmp_path, "default", "tiny-kernels", activation_dtypes='["int8"]')
    text = small.read_text().replace("[rules.ops.Conv]\nkernel_max = 16", "[rules.ops.Conv]\nkernel_max = 2")
    small.write_text(text)
    samples = [{"input": x[None]} for x in np.load(DATA)["x"][:40]]
    r = npu_sim.accuracy_report(uint8_model, data=samples[:8], float_model=FLOAT, board=str(small))
    opt = advisor.AdviceOptions(samples=2, sensitivity=False, calibration=samples, fixed_model=str(tmp_path / "f.onnx"))
    advisor.annotate(r, samples[:8], str(small), FLOAT, options=opt)
    v = r.advisor["requantized"]["check"]
    assert not v["deployable"] and [b["rule"] for b in v["blocking"]] == ["limit.kernel"]
    assert not v["blocking"][0]["quantization_setting"] and "kernel size of 3" in v["blocking"][0]["example"]
    from npu_sim.render.report_text import verdict_line
    line = verdict_line(r.advisor["requantized"])
    assert line.startswith("NOT deployable on tiny-kernels: blocked by limit.kernel x")
    assert "no quantization setting fixes it" in line


def test_requantize_for_the_u55_keeps_asymmetric_int8(uint8_model, tmp_path):
    """uint8 on the U55: the fix is int8 activations, still asymmetric (what the U55 takes), and that model deploys."""
    samples = [{"input": x[None]} for x in np.load(DATA)["x"][:60]]
    r = npu_sim.accuracy_report(uint8_model, data=samples[:8], float_model=FLOAT, board=U55)
    opt = advisor.AdviceOptions(samples=2, sensitivity=False, calibration=samples, fixed_model=str(tmp_path / "f.onnx"))
    advisor.annotate(r, samples[:8], U55, FLOAT, options=opt)
    rq = r.advisor["requantized"]
    assert rq["check"]["deployable"] and rq["settings"]["activation_type"] == "QInt8"
    assert "ActivationSymmetric" not in rq["extra_options"]
    assert npu_sim.check(tmp_path / "f.onnx", board=U55, input_shapes=SHAPE).deployable
    sim = npu_sim.load(tmp_path / "f.onnx", board=U55, input_shapes=SHAPE)
    acts = [t.q for t in sim.program.tensors.values() if t.q is not None and not t.is_const]
    assert all(q.dtype == "int8" for q in acts) and any(not q.symmetric for q in acts)


def test_an_ops_own_limit_is_fixed_per_tensor_in_a_second_pass(tmp_path):
    """int16 activations on a board whose Gemm takes int8 only: the board-wide settings are fine, the check's
    per-tensor fix (TensorQuantOverrides) is added after the first re-quantization, and the model deploys."""
    from onnxruntime.quantization import QuantType
    a16 = quantize(onnx.load(str(FLOAT)), tmp_path, "a16", activation_type=QuantType.QInt16, per_channel=True,
                   extra_options={"ActivationSymmetric": True}, calib_shapes=SHAPE)
    gemm8 = board(tmp_path, "default", "gemm8")
    gemm8.write_text(gemm8.read_text() + '[rules.ops.Gemm]\nactivation_dtypes = ["int8"]\n')
    found = rules_of(npu_sim.check(a16, board=str(gemm8), input_shapes=SHAPE), "dtype.activation")
    assert len(found) == 1 and "Quantize these tensors as int8" in found[0].fix
    assert "TensorQuantOverrides" in found[0].fix
    samples = [{"input": x[None]} for x in np.load(DATA)["x"][:60]]
    r = npu_sim.accuracy_report(a16, data=samples[:8], float_model=FLOAT, board=str(gemm8))
    opt = advisor.AdviceOptions(samples=2, sensitivity=False, calibration=samples, fixed_model=str(tmp_path / "f.onnx"))
    advisor.annotate(r, samples[:8], str(gemm8), FLOAT, options=opt)
    rq = r.advisor["requantized"]
    assert r.advisor["board_settings"]["changes"] == [] and rq["tensor_overrides"] == ["logits"]
    assert r.advisor["fix"]["TensorQuantOverrides"]["logits"] == [{"quant_type": "QInt8", "symmetric": True}]
    assert rq["check"]["deployable"]
    assert npu_sim.check(tmp_path / "f.onnx", board=str(gemm8), input_shapes=SHAPE).deployable


def test_a_costly_board_setting_says_where_advice_on_it_comes_from():
    from npu_sim.render.report_text import cost_note
    rq = {"model": "m.fixed.onnx", "before": {"cosine": 0.9984, "sqnr_db": 24.9},
          "after": {"cosine": 0.9891, "sqnr_db": 16.7}}
    changes = {"changes": ["ActivationSymmetric=True: ..."]}
    note = cost_note({"requantized": rq, "board_settings": changes})
    assert "cosine 0.99840 -> 0.98910" in note and "`npu-sim report m.fixed.onnx`" in note
    assert cost_note({"requantized": rq, "board_settings": {"changes": []}}) is None    # the fix alone: measured
    for after in ({"cosine": 0.9999, "sqnr_db": 40.0}, {"cosine": 0.9983, "sqnr_db": 24.3}):   # better, or < 1 dB
        assert cost_note({"requantized": dict(rq, after=after), "board_settings": changes}) is None
