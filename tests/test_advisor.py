"""Sensitivity ranking, int16 advisor and the written-back fix (npu_sim.analysis.advisor, npu_sim.qdq.recalibrate, npu-sim report)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import npu_sim
from npu_sim.qdq import recalibrate as requant
from npu_sim.analysis import advisor
from npu_sim.analysis.check import int16_allowed
from npu_sim.cli.main import main as cli_main
from tests import ort_cpu
from tests.qdq_models import real_models

ort = pytest.importorskip("onnxruntime")

DEMO = Path(__file__).resolve().parent.parent / "models" / "demo"
QDQ = DEMO / "digits_cnn.qdq.onnx"
FLOAT = DEMO / "digits_cnn.float.onnx"
DATA = DEMO / "digits_test.npz"
SHAPE = {"input": (1, 1, 8, 8)}


def _samples(start, count):
    x = np.load(DATA)["x"]
    return [{"input": x[i:i + 1]} for i in range(start, start + count)]


def _inits(m):
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


def test_promote_int16_rewrites_qdq_and_rederives_the_bias(tmp_path):
    m = onnx.load(str(QDQ))
    p = requant.promote_int16(m, ["relu1_out"])
    onnx.checker.check_model(p)
    path = tmp_path / "p.onnx"
    onnx.save(p, str(path))
    ini = _inits(p)
    q = next(n for n in p.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "relu1_out")
    assert q.domain == "com.microsoft"                      # opset 17: 16-bit Q/DQ in the contrib domain
    s16, z16 = ini[q.input[1]], ini[q.input[2]]
    s8 = _inits(m)["relu1_out_scale"]
    assert z16.dtype == np.int16 and int(z16) == 0
    assert float(s16) == pytest.approx(float(s8) * 128 / 32767, rel=1e-6)   # symmetric int8: |rmin| = 128 LSB
    # conv2 reads relu1_out: its int32 bias scale is (new input scale) x (weight scale)
    conv2 = next(n for n in p.graph.node if n.name == "conv2")
    bdq = next(n for n in p.graph.node if n.output[0] == conv2.input[2])
    wscale = ini["conv2.weight_scale"].astype(np.float64)
    np.testing.assert_allclose(ini[bdq.input[1]], float(s16) * wscale, rtol=1e-6)
    old_real = _inits(m)["conv2.bias_quantized"] * _inits(m)["conv2.bias_quantized_scale"].astype(np.float64)
    new_real = ini["conv2.bias_quantized"] * ini[bdq.input[1]].astype(np.float64)
    np.testing.assert_allclose(new_real, old_real, atol=float(np.max(ini[bdq.input[1]])))
    # onnxruntime runs the rewritten model, npu-sim simulates it; both agree with the original closely
    feeds = _samples(0, 4)
    if ort_cpu.fallback_reason(path) is None:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    else:  # its fused u8 x s8 Conv / Gemm kernels saturate on this CPU (tests/ort_cpu.py): the pure QDQ definition
        sess = ort_cpu.session(path, optimize=False)
    sim = npu_sim.load(path, input_shapes=SHAPE)
    assert sim.program.tensors[next(t for t, v in sim.program.tensors.items()
                                    if v.float_name == "relu1_out" and not v.is_const)].q.dtype == "int16"
    for f in feeds:
        a = sim.run(f)["logits"]
        b = sess.run(None, f)[0]
        assert np.abs(a - b).max() < 0.05
    # a group: add_out and the MaxPool output sharing its scale go to int16 together
    g = requant.promote_int16(m, ["add_out"])
    qs = [n for n in g.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in ("add_out", "pool_out")]
    assert len(qs) == 2 and all(_inits(g)[n.input[2]].dtype == np.int16 for n in qs)
    with pytest.raises(npu_sim.NpuSimError, match="not_a_tensor"):
        requant.promote_int16(m, ["not_a_tensor"])


def test_int16_allowed_follows_the_board_limit(tmp_path):
    text = (Path(npu_sim.__file__).parent / "boards" / "default.toml").read_text()
    assert "int16_max_reduction = 256" in text
    board = tmp_path / "tight.toml"
    board.write_text(text.replace("int16_max_reduction = 256", "int16_max_reduction = 100"))
    for b, expect in (("default", {"conv1": True, "conv2": True, "conv3": True, "fc": True}),
                      (str(board), {"conv1": True, "conv2": False, "conv3": False, "fc": True})):
        sim = npu_sim.load(QDQ, board=b, input_shapes=SHAPE)
        got = {n.name: int16_allowed(sim.program, n) for n in sim.program.nodes if n.name in expect}
        assert got == expect, b                           # conv2/conv3 sum 16 x 3 x 3 = 144 products
        layers = {l.tensor: l for l in advisor.layers_of(sim, onnx.load(str(QDQ)))}
        if b != "default":
            assert layers["relu1_out"].mode == "float" and "conv2" in layers["relu1_out"].reason
            assert layers["gap_out"].mode == "int16"


@pytest.fixture(scope="module")
def demo_advice(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adv")
    r = npu_sim.accuracy_report(QDQ, data=_samples(0, 24), float_model=FLOAT, board="default")
    opt = advisor.AdviceOptions(samples=24, overrides=str(tmp / "fix.json"), calibration=_samples(100, 100),
                                fixed_model=str(tmp / "fixed.onnx"))
    advisor.annotate(r, _samples(0, 24), "default", FLOAT, options=opt)
    return r, tmp


def test_demo_sensitivity_and_advisor(demo_advice):
    r, tmp = demo_advice
    S, A = r.sensitivity, r.advisor
    names = [x["tensor"] for x in S["layers"]]
    assert set(names) == {"conv1_out", "relu1_out", "conv2_out", "relu2_out", "add_out", "conv3_out", "relu3_out",
                          "gap_out", "logits_QuantizeLinear_Input"}    # movement ops share their input's group
    assert all(x["mode"] == "int16" and x["delta_cycles"] is not None for x in S["layers"])
    gains = [x["gain_sqnr_db"] for x in S["layers"]]
    assert gains == sorted(gains, reverse=True) and gains[0] > 0.3
    # the curve: measured, starts at the baseline, the chosen point within the budget and the best there
    curve = A["curve"]
    assert curve[0]["k"] == 0 and curve[0]["cycles"] == r.latency["total_cycles"]
    chosen = [p for p in curve if p.get("chosen")]
    assert len(chosen) == 1 and chosen[0]["within_budget"]
    assert chosen[0]["cycles"] <= 1.2 * curve[0]["cycles"]
    assert chosen[0]["sqnr_db"] == max(p["sqnr_db"] for p in curve if p["within_budget"])
    assert chosen[0]["sqnr_db"] > curve[0]["sqnr_db"] + 1.0
    assert A["chosen"] == chosen[0]["tensors"] and A["bias_remedy"] is None
    # the fix file: quantize_static extra_options, names as in the float model
    fix = json.loads((tmp / "fix.json").read_text())
    assert set(fix["TensorQuantOverrides"]) == {t.replace("logits_QuantizeLinear_Input", "logits") for t in A["chosen"]}
    opts = requant.load_extra_options(tmp / "fix.json")
    from onnxruntime.quantization import QuantType
    assert all(v[0]["quant_type"] == QuantType.QInt16 for v in opts["TensorQuantOverrides"].values())
    # re-quantized by onnxruntime with the fix, simulated: better than before, and the tensors are int16
    rq = A["requantized"]
    assert rq["after"]["sqnr_db"] > rq["before"]["sqnr_db"] + 0.5
    assert rq["cycles_after"] > rq["cycles_before"]
    sim = npu_sim.load(tmp / "fixed.onnx", input_shapes=SHAPE)
    dt = {t.float_name: t.q.dtype for t in sim.program.tensors.values() if t.q is not None and not t.is_const}
    assert all(dt[t] == "int16" for t in A["chosen"] if t in dt)
    assert dt["conv1_out"] == "int8" or "conv1_out" in A["chosen"]
    # checks and latency attached
    assert r.checks["deployable"] and r.checks["errors"] == 0
    assert len(r.latency["layers"]) == 12 and r.latency["latency_ms"] > 0


def test_budget_ms_and_json(demo_advice, tmp_path):
    r, _ = demo_advice
    doc = r.to_dict()
    for key in ("latency", "checks", "sensitivity", "advisor"):
        assert doc[key] is not None
    json.dumps(doc, allow_nan=False)
    # a budget of exactly the baseline admits only points that add no cycles
    ev = advisor.Evaluator(QDQ, FLOAT, "default", _samples(0, 8), SHAPE)
    try:
        layers = advisor.layers_of(ev.base, ev.proto)
        sens = [x for x in r.sensitivity["layers"]]
        base = r.latency["total_cycles"]
        adv = advisor.advise(ev, layers, sens, base, max_slowdown=None, budget_ms=base / r.latency["clock_hz"] * 1e3,
                             clock_hz=r.latency["clock_hz"])
        chosen = next(p for p in adv["curve"] if p.get("chosen"))
        assert chosen["cycles"] <= base
    finally:
        ev.close()


def test_cli_fix_and_errors(tmp_path, capsys):
    out = tmp_path / "fix.json"
    rc = cli_main(["report", str(QDQ), "--float", str(FLOAT), "--data", str(DATA), "--limit", "16", "--workers", "1",
                   "--samples", "4", "--max-slowdown", "1.05", "--overrides", str(out),
                   "--json", str(tmp_path / "r.json")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "sensitivity: output similarity" in cap.out and "int16 advisor: budget 1.05x" in cap.out
    assert "latency (npu_sim.estimate, board default)" in cap.out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["advisor"]["budget"]["max_slowdown"] == 1.05
    assert all(p["cycles"] <= 1.05 * doc["latency"]["total_cycles"] for p in doc["advisor"]["curve"] if p.get("chosen"))
    assert json.loads(out.read_text()) == doc["advisor"]["fix"]
    for args, msg in ((["--requantize", str(DATA)], "--float"), (["--max-slowdown", "0.5"], "--max-slowdown"),
                      (["--samples", "0"], "--samples"), (["--overrides", str(tmp_path / "no" / "f.json")],
                                                          "does not exist")):
        assert cli_main(["report", str(QDQ), "--limit", "4"] + args) == 2
        assert msg in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(npu_sim.NpuSimError, match="bad.json"):
        requant.load_extra_options(bad)
    bad.write_text('{"TensorQuantOverrides": {"x": [{"quant_type": "QInt99"}]}}')
    with pytest.raises(npu_sim.NpuSimError, match="QInt99"):
        requant.load_extra_options(bad)


# -- the seed case: onnxruntime #21000 -----------------------------------------------------------------------------

def test_seed_case_bias_overflow_named_and_fixed(tmp_path):
    """PP-OCR cls A16W16 per channel quantized without onnxruntime's int32-bias weight fix: the report names the
    collapsing layer and its clipped bias; the advisor's fix, re-quantized by onnxruntime and simulated, restores
    cosine >= 0.999 against the float model on held-out views (view 18 was at 0.34)."""
    build, (qdq, flt) = real_models("ppocr_cls_a16w16_noadjust", "ppocr_cls_float")
    held = build.sample_inputs("ppocr_cls_float", count=4, start=16)
    calib = build.sample_inputs("ppocr_cls_float", count=16)
    r = npu_sim.accuracy_report(qdq, data=held, float_model=flt, board="default")
    assert r.outputs[0].metrics.cosine < 0.9 and r.outputs[0].cosine_min_sample < 0.5
    opt = advisor.AdviceOptions(samples=4, sensitivity=False, overrides=str(tmp_path / "fix.json"),
                                calibration=calib, fixed_model=str(tmp_path / "fixed.onnx"))
    advisor.annotate(r, held, "default", flt, options=opt)
    # the collapse: the first conv, its own error, and the check finding on that very layer names the bias
    assert r.collapse is not None and r.collapse.node == "Conv@0" and r.collapse.cause == "own error"
    from npu_sim.render.report_text import format_summary, layer_findings
    hits = [f for f in layer_findings(r, r.collapse.node) if f["rule"] == "bias.saturated"]
    assert hits and hits[0]["values"]["channel_list"] == [0, 1, 2]
    text = format_summary(r)
    assert "at the collapse (batch_norm_0.tmp_2, Conv@0): bias.saturated" in text
    rem = r.advisor["bias_remedy"]
    assert {l["node"] for l in rem["layers"]} == {"Conv@0", "Conv@7", "Conv@17"}
    # the bias remedy plus what the board needs of its int16 activations (zero point 0): one fix that deploys
    assert json.loads((tmp_path / "fix.json").read_text()) == {"QDQDisableWeightAdjustForInt32Bias": False,
                                                                "ActivationSymmetric": True}
    assert r.advisor["board_settings"]["changes"] == [
        "ActivationSymmetric=True: the board takes int16 activations only with zero point 0"]
    rq = r.advisor["requantized"]
    assert rq["before"]["cosine"] < 0.9
    assert rq["after"]["cosine"] >= 0.999 and rq["after"]["cosine_min_sample"] >= 0.999
    assert rq["bias_saturated_after"] == 0
    assert rq["check"]["deployable"] and rq["check"]["errors"] == 0    # was: 145 zero_point.activation errors
    assert npu_sim.check(tmp_path / "fixed.onnx", board="default").deployable
    assert "verdict: deployable on default; cosine 0.999" in format_summary(r)


def test_schema_doc_covers_the_new_sections(demo_advice):
    r, _ = demo_advice
    d = r.to_dict()
    doc = (Path(__file__).resolve().parent.parent / "docs" / "REPORT_SCHEMA.md").read_text()
    keys = set(d["latency"]) | set(d["latency"]["layers"][0]) | set(d["checks"]) | set(d["sensitivity"]) \
        | set(d["sensitivity"]["layers"][0]) | set(d["advisor"]) | set(d["advisor"]["curve"][0]) \
        | set(d["advisor"]["requantized"])
    missing = [k for k in keys if f"`{k}`" not in doc]
    assert not missing, f"docs/REPORT_SCHEMA.md does not document {missing}"


def test_variant_scoring_runs_only_what_differs_and_gives_the_same_integers():
    """``Evaluator.score_variant`` (the nodes a promotion leaves alone take the baseline run's values) equals a
    full simulation of the promoted model, bit for bit, for every single promotion and for all at once."""
    ev = advisor.Evaluator(QDQ, FLOAT, "default", _samples(0, 6), SHAPE)
    try:
        base = ev.base.program
        assert advisor.same_nodes(base, base) == set(range(len(base.nodes)))
        allowed = [l.tensor for l in advisor.layers_of(ev.base, ev.proto) if l.mode == "int16"]
        for ts in [[t] for t in allowed] + [allowed]:
            sim = ev.load(requant.promote_int16(ev.proto, ts), "v")
            clean = advisor.same_nodes(base, sim.program)
            # nothing that writes an int16 tensor counts as unchanged; the input stub before it does
            i16 = [i for i, n in enumerate(sim.program.nodes)
                   if any(sim.program.tensors[o].q.dtype == "int16" for o in n.outputs)]
            assert i16 and not clean & set(i16) and 0 in clean
            assert ev.score_variant(sim) == ev.score_sim(sim), ts
        # cached per set of tensors: the advisor's first curve point is the sensitivity's measurement
        a = ev.measure([allowed[2]], "x")
        assert ev.measure([allowed[2]], "y") is a and len(ev._variants) == 1
    finally:
        ev.close()


# -- a real model beyond the seed case ---------------------------------------------------------------------------

@pytest.mark.full  # a real model through report, advisor and re-quantization: make test-full
def test_ppocr_cls_a8w8_report_advisor_and_measured_fix(tmp_path):
    """PP-OCR cls A8W8 on two held-out text views: the report names where accuracy goes, the advisor promotes only
    layers the board allows at int16, within the latency budget, and the model re-quantized by onnxruntime with
    that fix is simulated: its measured cosine against the float model is higher than before."""
    build, (qdq, flt) = real_models("ppocr_cls_a8w8", "ppocr_cls_float")
    held = build.sample_inputs("ppocr_cls_float", count=2, start=16)
    calib = build.sample_inputs("ppocr_cls_float", count=16)
    r = npu_sim.accuracy_report(qdq, data=held, float_model=flt, board="default")
    base = r.outputs[0].metrics.cosine
    assert base < 0.9995
    worst = r.worst("accumulated", 1)[0]
    assert r.largest_drop is not None and worst.accumulated.cosine < 0.995
    opt = advisor.AdviceOptions(samples=2, candidates=6, overrides=str(tmp_path / "fix.json"), calibration=calib,
                                fixed_model=str(tmp_path / "fixed.onnx"))
    advisor.annotate(r, held, "default", flt, options=opt)
    S, A = r.sensitivity, r.advisor
    assert len(S["layers"]) == 6 and len(S["not_measured"]) > 100      # --candidates: 6 measured
    assert any(p.get("kind") == "segment" for p in A["curve"])          # segments cover every allowed layer
    chosen = A["chosen"]
    assert chosen and A["chosen_point"]["cycles"] <= A["budget"]["cycles"]
    sim = npu_sim.load(qdq)
    modes = {l.tensor: l.mode for l in advisor.layers_of(sim, onnx.load(str(qdq)))}
    assert all(modes[t] == "int16" for t in chosen)                     # checks.int16_allowed, the board's rule
    assert set(json.loads((tmp_path / "fix.json").read_text())["TensorQuantOverrides"]) == set(chosen)
    rq = A["requantized"]
    assert rq["before"]["cosine"] == pytest.approx(base, abs=1e-9)      # the same samples, the same integers
    assert rq["after"]["cosine"] > rq["before"]["cosine"] + 1e-4        # measured, not promised
    fixed = npu_sim.load(tmp_path / "fixed.onnx")
    dt = {t.float_name: t.q.dtype for t in fixed.program.tensors.values() if t.q is not None and not t.is_const}
    assert all(dt[t] == "int16" for t in chosen)


def test_int16_weights_for_layers_whose_activations_are_already_16bit(tmp_path):
    """A layer already at 16-bit activations that gains in float loses it to its 8-bit weights: the fix puts
    those weights at int16, only where the board's weight_dtypes allow it."""
    m = requant.promote_int16(onnx.load(str(QDQ)), ["relu1_out"])       # conv2 reads an int16 tensor
    path = tmp_path / "a16.onnx"
    onnx.save(m, str(path))
    rows = [{"mode": "float", "gain_sqnr_db": 2.5, "layer": "conv2", "tensor": "conv2_out"},
            {"mode": "float", "gain_sqnr_db": 3.0, "layer": "conv3", "tensor": "conv3_out"},   # int8 input
            {"mode": "float", "gain_sqnr_db": 0.5, "layer": "conv1", "tensor": "conv1_out"}]   # below 1 dB
    sim = npu_sim.load(path, input_shapes=SHAPE)
    wc = advisor.weight_candidates(sim, rows)
    assert [(w["layer"], w["weight"]) for w in wc] == [("conv2", "conv2.weight")]
    fix = advisor.make_fix([], None, weights=[w["weight"] for w in wc])
    assert fix == {"TensorQuantOverrides": {"conv2.weight": [{"quant_type": "QInt16", "symmetric": True}]}}
    text = (Path(npu_sim.__file__).parent / "boards" / "default.toml").read_text()
    assert 'weight_dtypes = ["int8", "int16"]' in text
    board = tmp_path / "w8.toml"
    board.write_text(text.replace('weight_dtypes = ["int8", "int16"]', 'weight_dtypes = ["int8"]'))
    assert advisor.weight_candidates(npu_sim.load(path, board=str(board), input_shapes=SHAPE), rows) == []
