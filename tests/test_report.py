"""Accuracy report (npu_sim.analysis.accuracy, npu-sim report) and dump comparison (npu-sim compare)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import npu_sim
from npu_sim.analysis import accuracy as acc
from npu_sim.cli.main import main as cli_main
from npu_sim.render.report_text import format_advice
from tests.qdq_models import real_models

pytest.importorskip("onnxruntime")

DEMO = Path(__file__).resolve().parent.parent / "models" / "demo"
QDQ = DEMO / "digits_cnn.qdq.onnx"
FLOAT = DEMO / "digits_cnn.float.onnx"
DEMO_DATA = DEMO / "digits_test.npz"


# -- metrics on hand-made arrays ------------------------------------------------------------------------------

def test_metrics_known_values():
    m = acc.error_metrics([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], scale=0.5)
    assert m.cosine == pytest.approx(17 / math.sqrt(14 * 21))
    assert m.sqnr_db == pytest.approx(10 * math.log10(14))
    assert m.mae == pytest.approx(1 / 3)
    assert m.max_abs == 1.0
    assert m.mean_lsb == pytest.approx(2 / 3)
    assert m.max_lsb == 2.0
    assert not m.exact


def test_metrics_edge_cases():
    same = acc.error_metrics([1.0, -2.0], [1.0, -2.0])
    assert same.exact and same.cosine == 1.0 and same.sqnr_db == math.inf and same.mae == 0.0
    assert acc.error_metrics([1.0, 0.0], [0.0, 1.0]).cosine == 0.0          # orthogonal
    assert acc.error_metrics([1.0, 2.0], [-1.0, -2.0]).cosine == pytest.approx(-1.0)
    assert acc.error_metrics([0.0, 0.0], [0.0, 0.0]).cosine == 1.0          # both silent
    assert acc.error_metrics([0.0, 0.0], [0.0, 1.0]).cosine == 0.0
    # SQNR of a known noise level: signal power 1, noise power 0.01 -> 20 dB
    x = np.array([1.0, -1.0, 1.0, -1.0])
    assert acc.error_metrics(x, x + np.array([0.1, -0.1, -0.1, 0.1])).sqnr_db == pytest.approx(20.0)


# -- float reference ------------------------------------------------------------------------------------------

def test_derived_float_reference_matches_float_model():
    """Without --float, the QDQ model's float semantics give the float model's tensors up to weight
    quantization."""
    derived = acc.FloatReference(QDQ)
    given = acc.FloatReference(QDQ, FLOAT)
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in derived.model.graph.node)
    names = ["conv1_out", "relu1_out", "conv2_out", "add_out", "pool_out", "conv3_out", "gap_out", "flat_out",
             "logits"]
    derived.prepare(names)
    given.prepare(names)
    x = np.load(DEMO_DATA)["x"][:20]
    for i in range(len(x)):
        feeds = {"input": x[i:i + 1]}
        a, b = derived.run(feeds), given.run(feeds)
        for n in names:
            m = acc.error_metrics(b[n], a[n])
            assert m.cosine > 0.9995, (n, m)
            assert m.max_abs <= 0.02 * max(1.0, float(np.abs(b[n]).max())), (n, m)
    # the graph output keeps its name; the op's own output is exposed under quantize_static's renamed tensor
    assert derived.name_for("logits_QuantizeLinear_Input") == "logits_QuantizeLinear_Input"
    assert given.name_for("logits_QuantizeLinear_Input") == "logits"


# -- the demo report --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_report():
    return npu_sim.accuracy_report(QDQ, data=[DEMO_DATA], float_model=FLOAT, board="onnx", limit=120)


def test_demo_outputs(demo_report):
    r = demo_report
    assert r.samples == 120 and r.reference == "float model"
    (o,) = r.outputs
    assert o.name == "logits" and o.classes == 10
    assert o.metrics.cosine > 0.999 and o.top1_agreement >= 0.99 and o.top5_agreement == 1.0
    assert o.accuracy_float is not None and o.accuracy_int is not None
    assert not r.unmatched and r.collapse is None


def test_demo_layers_accumulated_and_isolated(demo_report):
    r = demo_report
    names = [l.tensor for l in r.layers]
    assert names == ["input", "conv1_out", "relu1_out", "conv2_out", "relu2_out", "add_out", "pool_out",
                     "conv3_out", "relu3_out", "gap_out", "flat_out", "logits"]
    for l in r.layers:
        # the op's own error, where the float value is inside the quantized range: a few LSB at most (input
        # quantization noise propagated through the op plus the output rounding)
        assert l.isolated.max_lsb_in_range <= 3.0, (l.tensor, l.isolated)
        assert l.isolated.mean_lsb <= 0.6, (l.tensor, l.isolated)
        assert l.accumulated.cosine > 0.999
        assert l.isolated_inputs == "float reference"
        s = l.stats
        assert s.min <= s.p1 <= s.p50 <= s.p99 <= s.p99_9 <= s.max
        assert 0.0 <= s.clip_rate < 0.1
    # the input's quantization is the same in both views; the first conv sees only that
    assert r.layers[0].isolated.cosine == r.layers[0].accumulated.cosine
    w = {l.tensor: l.weights for l in r.layers}
    assert w["conv1_out"].channels == 16 and w["conv3_out"].channels == 32 and w["logits"].channels == 10
    assert w["relu1_out"] is None
    assert all(lo <= hi for lo, hi in zip(w["conv2_out"].min, w["conv2_out"].max))


def test_percentiles_on_a_known_distribution():
    """The input tensor of the demo: pixel values k/8 - 1; percentiles from the histogram within one bin."""
    x = np.load(DEMO_DATA)["x"][:60]
    r = npu_sim.accuracy_report(QDQ, data=[dict(input=x[i:i + 1]) for i in range(len(x))], board="onnx")
    s = r.layers[0].stats
    flat = np.clip(x.reshape(-1), -1, 127 / 128)
    for got, p in ((s.p50, 50), (s.p99, 99), (s.p1, 1)):
        assert abs(got - float(np.percentile(flat, p))) <= 1 / 128 + 1e-6


def _broken_bias_model(tmp_path) -> Path:
    """The demo with conv2's int32 bias written as INT32_MIN, as onnxruntime 1.18 did in #21000."""
    m = onnx.load(str(QDQ))
    for i, init in enumerate(m.graph.initializer):
        if init.name == "conv2.bias_quantized":
            b = numpy_helper.to_array(init)
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.full_like(b, -2**31), init.name))
    path = tmp_path / "broken.qdq.onnx"
    onnx.save(m, str(path))
    return path


def test_collapse_names_the_broken_layer(tmp_path):
    broken = _broken_bias_model(tmp_path)
    r = npu_sim.accuracy_report(broken, data=[DEMO_DATA], float_model=FLOAT, board="onnx", limit=40)
    assert r.collapse is not None
    assert r.collapse.tensor == "conv2_out" and r.collapse.node == "conv2"
    assert r.collapse.cause == "own error"
    assert r.collapse.input_cosine > 0.999
    assert r.largest_drop.tensor == "conv2_out"
    assert r.outputs[0].metrics.cosine < 0.9


def test_quantization_settings_are_no_cause_in_the_advice():
    """A dtype or zero-point finding names a quantization setting the board does not take (re-quantizing the model
    applies the board's): at the collapse and in the sensitivity table the advice names the other findings only."""
    def finding(rule, setting):
        return {"rule": rule, "severity": "error", "message": rule + " message", "fix": "", "values": {},
                "quantization_setting": setting}
    checks = {"board": "b", "deployable": False, "errors": 2, "warnings": 0, "infos": 0, "model_findings": [],
              "layers": [{"node": "conv", "tensors": ["t"], "findings": [finding("dtype.activation", True),
                                                                       finding("bias.saturated", False)]}]}
    sens = {"samples": 1, "baseline": {"cosine": 0.9, "sqnr_db": 10.0}, "layers": [
        {"rank": 1, "layer": "conv", "tensor": "t", "mode": "int16", "cosine": 0.99, "gain_sqnr_db": 3.0,
         "delta_cycles": None}]}
    r = SimpleNamespace(checks=checks, collapse=SimpleNamespace(node="conv", tensor="t"), latency=None,
                        sensitivity=sens, advisor=None)
    lines = format_advice(r)
    at_collapse = next(line for line in lines if "at the collapse" in line)
    row = next(line for line in lines if line.strip().startswith("1 conv"))
    for line in (at_collapse, row):
        assert "bias.saturated" in line and "dtype.activation" not in line, line


# -- JSON and HTML ----------------------------------------------------------------------------------------------

def test_json_schema_fields(demo_report):
    d = demo_report.to_dict()
    text = json.dumps(d, allow_nan=False)           # strict JSON: no NaN/Infinity
    d = json.loads(text)
    assert d["schema_version"] == acc.SCHEMA_VERSION
    for key in ("model", "board", "reference", "data", "collapse_cosine", "outputs", "collapse", "largest_drop",
                "worst_accumulated", "worst_isolated", "layers", "histograms", "unmatched", "overflows",
                "latency", "checks", "sensitivity", "advisor"):
        assert key in d, key
    o = d["outputs"][0]
    for key in ("name", "shape", "cosine", "sqnr_db", "mae", "max_abs", "top1_agreement", "top5_agreement"):
        assert key in o
    lay = d["layers"][1]
    for key in ("index", "tensor", "ir_tensor", "node", "op", "dtype", "scale", "zero_point", "accumulated",
                "isolated", "stats", "weights", "input_cosine"):
        assert key in lay
    for key in ("cosine", "sqnr_db", "mae", "max_abs", "mean_lsb", "max_lsb", "max_lsb_in_range", "exact"):
        assert key in lay["accumulated"] and key in lay["isolated"]
    for key in ("min", "max", "p1", "p50", "p99", "p99_9", "clip_rate"):
        assert key in lay["stats"]
    h = d["histograms"][0]
    assert len(h["lsb_edges"]) == len(h["float_counts"]) + 1 == len(h["integer_counts"]) + 1
    doc = (Path(__file__).resolve().parent.parent / "docs" / "REPORT_SCHEMA.md").read_text()
    assert f"`{acc.SCHEMA_VERSION}`" in doc
    for key in list(d) + list(lay["stats"]) + list(lay["accumulated"]) + list(o):
        assert f"`{key}`" in doc, f"docs/REPORT_SCHEMA.md does not document {key!r}"


def test_html_self_contained(demo_report):
    from npu_sim.render.report_html import to_html
    page = to_html(demo_report)
    assert page.count("<svg") >= 2 + 4         # two similarity curves, four histograms
    assert "polyline" in page and "<rect" in page
    assert "http://" not in page and "https://" not in page and "<script src" not in page.lower()
    assert page.lower().count("<script") == 1 and "<link" not in page.lower()   # one inline script, no files
    assert "conv3_out" in page


# -- workers ----------------------------------------------------------------------------------------------------

def test_workers_give_identical_results():
    kw = dict(data=[DEMO_DATA], float_model=FLOAT, board="default", limit=32)
    one = npu_sim.accuracy_report(QDQ, workers=1, **kw).to_dict()
    two = npu_sim.accuracy_report(QDQ, workers=2, **kw).to_dict()
    one.pop("seconds"), two.pop("seconds")
    assert one == two


# -- data -------------------------------------------------------------------------------------------------------

def test_data_images_and_npz(tmp_path):
    from PIL import Image
    x = np.load(DEMO_DATA)["x"][:3]
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i, img in enumerate(x):
        Image.fromarray(((img[0] + 1) / 2 * 255).round().astype(np.uint8), "L").save(folder / f"{i}.png")
    r = npu_sim.accuracy_report(QDQ, data=[folder], mean="0.5", std="0.5", board="onnx")
    assert r.samples == 3
    np.savez(tmp_path / "d.npz", x=x, y=np.array([1, 2, 3]))
    r = npu_sim.accuracy_report(QDQ, data=[tmp_path / "d.npz"], board="onnx")
    assert r.samples == 3 and r.outputs[0].accuracy_float is not None


# -- command line -----------------------------------------------------------------------------------------------

def test_cli_report_demo(tmp_path, capsys):
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    rc = cli_main(["report", str(QDQ), "--float", str(FLOAT), "--data", str(DEMO_DATA), "--limit", "30",
                   "--workers", "1", "--json", str(out_json), "--html", str(out_html)])
    cap = capsys.readouterr()
    assert rc == 0
    assert "worst 5 tensors, accumulated error" in cap.out and "collapse: none" in cap.out
    assert "30/30" not in cap.err and "\r" not in cap.err   # no progress bar when stderr is not a terminal
    assert json.loads(out_json.read_text())["data"]["samples"] == 30
    assert "<svg" in out_html.read_text()


def _err(capsys) -> str:
    return capsys.readouterr().err


def test_cli_errors(tmp_path, capsys):
    broken = _broken_bias_model(tmp_path)
    assert cli_main(["report", str(broken)]) == 2
    assert "--data" in _err(capsys)
    assert cli_main(["report", str(QDQ)]) == 2  # the demo model too: npu_sim has no default data
    assert "--data is required" in _err(capsys)
    assert cli_main(["report", str(QDQ), "--data", str(tmp_path / "nope")]) == 2
    assert "does not exist" in _err(capsys)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    assert cli_main(["report", str(QDQ), "--float", str(bad), "--data", str(DEMO_DATA), "--limit", "2"]) == 2
    assert "bad.onnx" in _err(capsys)
    assert cli_main(["report", str(QDQ), "--float", str(QDQ), "--data", str(DEMO_DATA), "--limit", "2"]) == 2
    assert "QuantizeLinear" in _err(capsys)
    # a float model whose intermediate tensors carry other names
    m = onnx.load(str(FLOAT))
    inner = {o for n in m.graph.node for o in n.output} - {o.name for o in m.graph.output}
    for n in m.graph.node:
        for k, name in enumerate(n.input):
            if name in inner:
                n.input[k] = "renamed_" + name
        for k, name in enumerate(n.output):
            if name in inner:
                n.output[k] = "renamed_" + name
    renamed = tmp_path / "renamed.onnx"
    onnx.save(m, str(renamed))
    assert cli_main(["report", str(QDQ), "--float", str(renamed), "--data", str(DEMO_DATA), "--limit", "2"]) == 2
    assert "same tensor names" in _err(capsys)
    assert cli_main(["report", str(QDQ), "--workers", "0"]) == 2
    assert "--workers" in _err(capsys)
    garbage = tmp_path / "g.npy"
    garbage.write_bytes(b"nope")
    assert cli_main(["report", str(QDQ), "--data", str(garbage)]) == 2
    assert "g.npy" in _err(capsys)
    np.save(tmp_path / "wrong.npy", np.zeros((2, 3, 5, 5), np.float32))
    assert cli_main(["report", str(QDQ), "--data", str(tmp_path / "wrong.npy")]) == 2
    assert "does not fit input" in _err(capsys)


# -- compare ----------------------------------------------------------------------------------------------------

def test_compare_dump_equal_and_tampered(tmp_path, capsys):
    dump = tmp_path / "dump"
    assert cli_main(["run", str(QDQ), "--input", f"input={DEMO / 'digits_sample.npy'}", "--dump-all",
                     "--out", str(dump)]) == 0
    capsys.readouterr()
    assert cli_main(["compare", str(QDQ), str(dump)]) == 0
    assert "all equal" in capsys.readouterr().out
    # the same input given as a float file instead of the dumped integers
    assert cli_main(["compare", str(QDQ), str(dump), "--input", f"input={DEMO / 'digits_sample.npy'}"]) == 0
    capsys.readouterr()
    index = json.loads((dump / "index.json").read_text())
    f = dump / index["conv3_out"]["file"]
    a = np.load(f)
    a[0, 5, 1, 2] = a[0, 5, 1, 2] + 3 if a[0, 5, 1, 2] < 100 else a[0, 5, 1, 2] - 3
    np.save(f, a)
    assert cli_main(["compare", str(QDQ), str(dump)]) == 1
    out = capsys.readouterr().out
    assert "first mismatch: tensor 'conv3_out' (produced by node 'conv3' [Conv]" in out
    assert "1 of 512 elements differ, max |diff| 3, first at index [0, 5, 1, 2]" in out
    c = npu_sim.compare_dump(QDQ, dump)
    assert c.first_mismatch.tensor == "conv3_out" and c.first_mismatch.first_index == (0, 5, 1, 2)
    # a later tensor tampered too: the first in execution order is still named
    g = dump / index["gap_out"]["file"]
    b = np.load(g)
    b[0, 0, 0, 0] ^= 1
    np.save(g, b)
    assert npu_sim.compare_dump(QDQ, dump).first_mismatch.tensor == "conv3_out"


def test_compare_bad_input(tmp_path, capsys):
    assert cli_main(["compare", str(QDQ), str(tmp_path / "none")]) == 2
    assert "does not exist" in _err(capsys)
    (tmp_path / "d").mkdir()
    assert cli_main(["compare", str(QDQ), str(tmp_path / "d")]) == 2
    assert "index.json" in _err(capsys)
    (tmp_path / "d" / "index.json").write_text('{"input": {"file": "tensors/missing.npy"}}')
    assert cli_main(["compare", str(QDQ), str(tmp_path / "d")]) == 2
    assert "missing.npy" in _err(capsys)


# -- one small real model ---------------------------------------------------------------------------------------

def test_real_model_cls_derived_reference_and_report():
    """PP-OCR cls A8W8 (asymmetric int8 activations: onnxruntime's quantizer removed its Relu/Clip ops and left the
    clamp to the quantization): the derived float reference agrees with the float model on every tensor, and the
    report runs end to end on real photos."""
    build, (qdq, flt) = real_models("ppocr_cls_a8w8", "ppocr_cls_float")
    feeds = build.sample_inputs("ppocr_cls_a8w8", count=2, start=16)
    derived, given = acc.FloatReference(qdq), acc.FloatReference(qdq, flt)
    assert any(n.op_type == "Clip" and n.name.endswith("__removed_activation") for n in derived.model.graph.node)
    names = sorted((derived.available & given.available) - set(derived.qdq_inputs))
    assert len(names) > 100
    derived.prepare(names)
    given.prepare(names)
    for f in feeds:
        a, b = derived.run(f), given.run(f)
        worst = min((acc.error_metrics(b[n].reshape(-1), a[n].reshape(-1)).cosine, n) for n in names)
        assert worst[0] > 0.995, worst
    r = npu_sim.accuracy_report(qdq, data=feeds, float_model=flt, board="onnx")
    assert r.samples == 2 and len(r.layers) > 100
    assert r.outputs[0].classes == 2 and r.outputs[0].metrics.cosine > 0.98
    assert all(l.isolated_inputs == "float reference" for l in r.layers)


def test_missing_onnxruntime_is_a_clear_error(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # import onnxruntime -> ImportError
    with pytest.raises(npu_sim.FloatReferenceError, match=r"pip install 'npu-sim\[report\]'"):
        npu_sim.accuracy_report(QDQ, data=[DEMO_DATA], limit=2)
