"""The HTML report in a real headless browser (Debian's chromium) at 1,400 px: it loads without errors, draws its
plots, fits the window (wide tables and the graph scroll in their own boxes), its graph boxes link to existing
rows, its tables sort and filter, and its axes carry round ticks. For the demo, for a synthetic QDQ model of 93
nodes with long names and check findings built here, and for PP-OCR cls A8W8 (skipped when it cannot be built).

Skipped when no chromium is installed (``apt-get install chromium``; .ci/run installs it). Set
``NPU_SIM_SHOTS=DIR`` to keep the screenshots."""
from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import npu_sim
from npu_sim.analysis import advisor
from npu_sim.render.report_text import promotion_candidates
from npu_sim.render.report_html import to_html
from npu_sim.render.text import cut_middle

pytest.importorskip("onnxruntime")

from tests.qdq_models import build_model, quantize, random_feeds, real_models, rng_for, weights  # noqa: E402

DEMO = Path(__file__).resolve().parent.parent / "models" / "demo"
WIDTH = 1400

CHROMIUM = next((p for p in (os.environ.get("NPU_SIM_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                             shutil.which("chromium-browser")) if p and Path(p).is_file()), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium found (apt-get install chromium); the "
                                                             "HTML report's browser test needs a headless browser")

# Appended to a copy of the page: after load, measure the page, then act on it as a reader would (sort a table by
# a click on its header, type into its filter box) and record what happened into a <pre> that --dump-dom shows.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e.target && e.target.src)), true);
window.addEventListener('load', () => {
  const W = window.innerWidth;
  const svgs = [...document.querySelectorAll('svg')].map(s => {
    const r = s.getBoundingClientRect(), vb = s.viewBox.baseVal;
    const shapes = [...s.querySelectorAll('polyline,rect,circle,line,path')].filter(el => {
      const b = el.getBBox(); return b.width > 0 || b.height > 0; }).length;
    const clipped = [...s.querySelectorAll('text')].filter(t => {
      if (t.hasAttribute('transform')) return false;      // the rotated axis titles and layer names
      const b = t.getBBox(); return b.x < -0.5 || b.x + b.width > vb.width + 0.5; }).map(t => t.textContent);
    const ticks = {};
    for (const cls of ['xtick', 'ytick', 'logtick'])
      ticks[cls] = [...s.querySelectorAll('text.' + cls)].map(t => t.textContent);
    return {cls: s.getAttribute('class'), w: r.width, h: r.height, shapes: shapes, clipped: clipped, ticks: ticks,
            xlabels: [...s.querySelectorAll('text.xlabel')].map(t => t.firstChild.textContent),
            plabels: s.querySelectorAll('text.plabel').length, qrange: s.querySelectorAll('line.qrange').length};
  });
  const boxes = [...document.querySelectorAll('.scroll,.graphbox')].map(b => b.getBoundingClientRect().right);
  const links = [...document.querySelectorAll('svg.graph a')].map(a => {
    const id = (a.getAttribute('href') || '').slice(1), t = document.getElementById(id);
    return {id: id, row: !!t && t.tagName === 'TR' && !!t.closest('#layers-table')}; });
  const table = document.getElementById('layers-table');
  const col = [...table.tHead.rows[0].cells].findIndex(th => th.textContent === 'acc SQNR');
  const column = () => [...table.tBodies[0].rows].map(r => r.cells[col].textContent);
  const before = column();
  table.tHead.rows[0].cells[col].click();
  const asc = column();
  table.tHead.rows[0].cells[col].click();
  const desc = column();
  const box = document.querySelector("input.filter[data-table='layers-table']");
  box.value = window.__query; box.dispatchEvent(new Event('input'));
  const shown = [...table.tBodies[0].rows].filter(r => r.style.display !== 'none').map(r => r.id);
  const sel = document.getElementById('graph-color'), rects = [...document.querySelectorAll('.gnode rect.box')];
  sel.value = 'iso'; sel.dispatchEvent(new Event('change'));
  const recolored = rects.every(b => b.getAttribute('fill') === b.getAttribute('data-iso'));
  const last = [...document.querySelectorAll('svg.graph a')].pop();
  last.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true}));
  const target = document.querySelector(':target');
  const checks = document.getElementById('checks-table');
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify({svgs: svgs, errors: window.__errors, title: document.title,
    h2: [...document.querySelectorAll('h2')].map(h => h.textContent), innerWidth: W,
    scrollWidth: document.documentElement.scrollWidth, boxes: boxes, links: links,
    edges: document.querySelectorAll('svg.graph path[marker-end]').length,
    sort: {before: before, asc: asc, desc: desc}, shown: shown,
    checkRows: checks ? checks.tBodies[0].rows.length : null, recolored: recolored,
    clicked: {href: last.getAttribute('href'), target: target ? target.id : null}});
  document.body.appendChild(pre);
});
</script>"""


def _chromium(args, tmp_path, timeout=120):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def synthetic_model(directory: Path):
    """A QDQ model of 93 nodes (4 stages of 4 residual blocks, a projection shortcut per stage) with long
    hierarchical node names, quantized with uint8 activations (check findings on the default board): (QDQ path,
    float path, samples)."""
    rng = rng_for("report_browser_synthetic")
    c = 8
    inits = {"W_stem": weights(rng, (c, 3, 3, 3), 0.3), "G": weights(rng, (c, 10), 0.5)}
    nodes = [helper.make_node("Conv", ["x", "W_stem"], ["stem"], name="stem/conv_3x3_input", pads=[1] * 4)]
    h = "stem"
    for s in range(1, 5):
        for b in range(1, 5):
            p = f"backbone/stage_{s}/block_{b}"
            for k, shape in (("a", (c, c, 1, 1)), ("b", (c, c, 3, 3))):
                inits[f"{p}/W{k}"] = weights(rng, shape, 0.35 if k == "a" else 0.12)
            nodes += [helper.make_node("Conv", [h, f"{p}/Wa"], [f"{p}/expand"], name=f"{p}/expand_pointwise_conv_1x1"),
                      helper.make_node("Relu", [f"{p}/expand"], [f"{p}/act"], name=f"{p}/expand_activation"),
                      helper.make_node("Conv", [f"{p}/act", f"{p}/Wb"], [f"{p}/mix"], pads=[1] * 4,
                                       name=f"{p}/spatial_mixing_conv_3x3"),
                      helper.make_node("Add", [f"{p}/mix", h], [f"{p}/sum"], name=f"{p}/residual_add"),
                      helper.make_node("Relu", [f"{p}/sum"], [f"{p}/out"], name=f"{p}/output_activation")]
            if b == 2:
                inits[f"{p}/Wp"] = weights(rng, (c, c, 1, 1), 0.3)
                nodes += [helper.make_node("Conv", [h, f"{p}/Wp"], [f"{p}/proj"], name=f"{p}/shortcut_projection_conv"),
                          helper.make_node("Add", [f"{p}/out", f"{p}/proj"], [f"{p}/merged"],
                                           name=f"{p}/shortcut_merge_add")]
                h = f"{p}/merged"
            else:
                h = f"{p}/out"
    nodes += [helper.make_node("GlobalAveragePool", [h], ["gap"], name="head/global_average_pool"),
              helper.make_node("Flatten", ["gap"], ["flat"], name="head/flatten"),
              helper.make_node("Gemm", ["flat", "G"], ["y"], name="head/classifier_fully_connected")]
    model = build_model(nodes, {"x": (1, 3, 8, 8)}, {"y": (1, 10)}, inits, name="synthetic_resnet")
    qpath = quantize(model, directory, "synthetic", smooth=True)
    samples = [random_feeds({"x": (1, 3, 8, 8)}, 100 + i, smooth=True) for i in range(4)]
    return qpath, directory / "synthetic.float.onnx", samples


def _is_round_axis(labels: list[str]) -> bool:
    """Linear tick labels: evenly spaced by 1, 2 or 5 times a power of ten, each a multiple of that step."""
    v = [float(t.replace(",", "")) for t in labels]
    if len(v) < 2:
        return True
    step = (v[-1] - v[0]) / (len(v) - 1)
    if step <= 0:
        return False
    mant = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return (any(abs(mant - m) < 1e-6 for m in (1, 2, 5))
            and all(abs((b - a) - step) < 1e-6 * max(1.0, abs(step)) for a, b in zip(v, v[1:]))
            and all(abs(x / step - round(x / step)) < 1e-6 for x in v))


def _is_log_axis(labels: list[str]) -> bool:
    mult = {"k": 1e3, "M": 1e6}
    v = [float(t[:-1]) * mult[t[-1]] if t[-1] in mult else float(t) for t in labels]
    return all(x == 0 or math.log10(x) == round(math.log10(x)) for x in v)


def _browse(r, tmp_path, query: str, name: str):
    """Load the report in chromium with the probe; (probe results, page text). Also a full-width screenshot."""
    page = to_html(r)
    assert "http://" not in page and "https://" not in page and "<script src" not in page   # self-contained
    probe_page = tmp_path / f"{name}.probe.html"
    probe_page.write_text(page.replace("</body>", f"<script>window.__query = {json.dumps(query)};</script>"
                                       + PROBE + "</body>"))
    res = _chromium([f"--window-size={WIDTH},1000", "--virtual-time-budget=10000", "--dump-dom",
                     probe_page.as_uri()], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', res.stdout, re.S)
    assert m, "the page did not finish loading: " + res.stdout[-500:]
    got = json.loads(html.unescape(m.group(1)))
    plain = tmp_path / f"{name}.html"
    plain.write_text(page)
    shots = Path(os.environ.get("NPU_SIM_SHOTS") or tmp_path)
    shot = shots / f"{name}.png"
    res = _chromium([f"--window-size={WIDTH},6000", f"--screenshot={shot}", plain.as_uri()], tmp_path)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    from PIL import Image
    a = np.asarray(Image.open(shot).convert("L"))
    assert a.shape[1] == WIDTH
    assert ((a < 200).mean(axis=1) > 0.02).sum() > 300, "the screenshot is nearly blank"
    return got, page


def _check_common(got: dict, r) -> dict:
    """What every report must satisfy in the browser; returns the SVGs by class."""
    assert got["errors"] == []
    assert got["title"].startswith("npu-sim report")
    assert got["innerWidth"] == WIDTH
    assert got["scrollWidth"] <= WIDTH, "the page is wider than the window"
    assert got["boxes"] and max(got["boxes"]) <= WIDTH, "a scroll box sticks out of the window"
    kinds: dict[str, list] = {}
    for s in got["svgs"]:
        kinds.setdefault(s["cls"], []).append(s)
        assert s["clipped"] == [], (s["cls"], s["clipped"][:5])          # no label cut at the SVG's edge
        for cls, labels in s["ticks"].items():
            if cls == "logtick":
                assert _is_log_axis(labels), labels
            elif cls == "ytick" or s["cls"] != "plot":
                assert _is_round_axis(labels), (s["cls"], cls, labels)
    # the per-layer plots name the layers on their x axis
    n = len(r.layers)
    for plot in kinds["plot"]:
        assert plot["shapes"] >= 2 * n
        assert len(plot["xlabels"]) >= min(n, 60)
        assert all(lab.replace("…", "") and any(l.node.startswith(lab.split("…")[0]) for l in r.layers)
                   for lab in plot["xlabels"])
    for h in kinds["hist"]:
        assert h["shapes"] > 4 and len(h["ticks"]["logtick"]) >= 2 and len(h["ticks"]["xtick"]) >= 2
    # the graph: one linked box per tensor, every link to an existing row of the per-layer table, every edge drawn
    assert len(kinds["graph"]) == 1
    assert len(got["links"]) == n and all(x["row"] for x in got["links"]), got["links"][:3]
    assert sorted(x["id"] for x in got["links"]) == sorted(f"t{l.index}" for l in r.layers)
    assert got["edges"] == sum(len(l.inputs) for l in r.layers) > 0
    assert got["recolored"]                                           # the switch to isolated error recolours
    assert got["clicked"]["target"] == got["clicked"]["href"][1:] == f"t{r.layers[-1].index}"   # a click: its row
    # sorting by a click on "acc SQNR" orders the rows (numerically; a second click reverses)
    num = [float(v) for v in got["sort"]["before"]]
    asc = [float(v) for v in got["sort"]["asc"]]
    assert asc == sorted(num) and asc != num
    assert [float(v) for v in got["sort"]["desc"]] == sorted(num, reverse=True)
    return kinds


@needs_chromium
def test_demo_report_in_chromium(tmp_path):
    samples = [{"input": x[None]} for x in np.load(DEMO / "digits_test.npz")["x"][:16]]
    r = npu_sim.accuracy_report(DEMO / "digits_cnn.qdq.onnx", data=samples, float_model=DEMO / "digits_cnn.float.onnx",
                                board="default")
    advisor.annotate(r, samples, "default", DEMO / "digits_cnn.float.onnx",
                     options=advisor.AdviceOptions(samples=8, max_points=4))
    got, page = _browse(r, tmp_path, "relu", "demo")
    assert got["h2"][0] == "Verdict and fix"                                          # first, then the evidence
    for section in ("Verdict and fix", "Outputs", "Latency breakdown", "Sensitivity ranking", "int16 advisor",
                    "Per-layer similarity", "Model graph", "All tensors"):
        assert any(h.startswith(section) for h in got["h2"]), (section, got["h2"])
    kinds = _check_common(got, r)
    assert [x for p in kinds["plot"] for x in p["xlabels"]] == 2 * [cut_middle(l.node, 24) for l in r.layers]
    assert len(kinds["hist"]) == 4 and all(h["qrange"] == 2 for h in kinds["hist"])   # the int8 range marked
    # latency, and the sensitivity of the promotion candidates only: ranked, the others collapsed
    cands, rest = promotion_candidates(r.sensitivity)
    assert cands and rest and all(x["gain_sqnr_db"] > 0 for x in cands)
    assert len(kinds["bars"]) == 2 and kinds["bars"][0]["shapes"] >= 9 and kinds["bars"][1]["shapes"] >= len(cands)
    ranked = page.split("id='sensitivity-table'")[1].split("<tbody>")[1].split("</table>")[0]
    assert ranked.count("<tr>") == len(cands) and "+0.000<" not in ranked
    others = page.split("id='sensitivity-rest'")[1].split("<tbody>")[1].split("</table>")[0]
    assert others.count("<tr>") == len(rest)
    assert kinds["pareto"][0]["shapes"] >= len(r.advisor["curve"])
    assert kinds["pareto"][0]["plabels"] == len(r.advisor["curve"])                   # every point labelled
    # the filter box keeps the rows whose layer, tensor or op says "relu"
    want = {f"t{l.index}" for l in r.layers if "relu" in f"{l.node} {l.tensor} {l.op}".lower()}
    assert set(got["shown"]) == want and 0 < len(want) < len(r.layers)


@pytest.fixture(scope="module")
def synthetic_report(tmp_path_factory):
    q, f, samples = synthetic_model(tmp_path_factory.mktemp("synthetic"))
    r = npu_sim.accuracy_report(q, data=samples, float_model=f, board="default", workers=1)
    advisor.annotate(r, samples, "default", f, options=advisor.AdviceOptions(samples=2, sensitivity=False))
    return r


def test_synthetic_model_shape(synthetic_report):
    """The builder gives what the browser test relies on: 50+ tensors, branches, long names, check findings."""
    r = synthetic_report
    assert len(r.layers) >= 50
    assert sum(len(l.inputs) > 1 for l in r.layers) >= 12            # residual and shortcut adds
    assert max(len(l.node) for l in r.layers) > 40
    assert r.checks["errors"] + r.checks["warnings"] > len({f["rule"] for l in r.checks["layers"]
                                                            for f in l["findings"]})


@needs_chromium
def test_synthetic_model_report_in_chromium(synthetic_report, tmp_path):
    r = synthetic_report
    target = r.layers[len(r.layers) // 2]
    got, page = _browse(r, tmp_path, target.node, "synthetic")
    kinds = _check_common(got, r)
    assert got["shown"] == [f"t{l.index}" for l in r.layers if target.node.lower() in l.node.lower()]
    # the check table: one row per rule, not per finding; the fix text once per rule
    every = [f for l in r.checks["layers"] for f in l["findings"]] + r.checks["model_findings"]
    rules = {(f["severity"], f["rule"]) for f in every}
    findings = len(every)
    assert got["checkRows"] == len(rules) < findings
    for f in every:
        assert page.count(html.escape(f["fix"])) <= len(rules)
    assert "more</td>" in page                                         # a rule on many nodes names the first few
    assert kinds["graph"][0]["shapes"] >= len(r.layers)


@needs_chromium
@pytest.mark.network
def test_real_model_report_in_chromium(tmp_path):
    build, (q, f) = real_models("ppocr_cls_a8w8", "ppocr_cls_float")
    samples = build.sample_inputs("ppocr_cls_a8w8", 2, start=16)
    r = npu_sim.accuracy_report(q, data=samples, float_model=f, board="default", workers=1)
    advisor.annotate(r, samples, "default", f, options=advisor.AdviceOptions(samples=2, sensitivity=False))
    got, _ = _browse(r, tmp_path, r.layers[-1].tensor, "ppocr_cls_a8w8")
    _check_common(got, r)
    assert got["shown"] and f"t{r.layers[-1].index}" in got["shown"]


# -- without a browser: the pieces the page is made of ------------------------------------------------------------

@pytest.mark.parametrize("lo,hi", [(0.99895, 1.0), (0.9997, 1.0), (-0.74774, 1.0), (31.8, 52.1), (7977, 10218),
                                   (0, 1416), (-0.1215, 1.2127), (3e-7, 4e-6), (5.0, 5.0)])
def test_nice_ticks_are_round_and_cover_the_range(lo, hi):
    from npu_sim.render.svg import fmt_tick, nice_ticks
    t = nice_ticks(lo, hi)
    assert t[0] <= lo and t[-1] >= hi and 3 <= len(t) <= 12
    labels = [fmt_tick(v, t) for v in t]
    assert _is_round_axis(labels), labels
    assert len(set(labels)) == len(labels)                     # enough decimals to tell the ticks apart
    if hi == 1.0 and lo > 0.99:
        assert labels[-1].startswith("1.000") and float(labels[-1]) == 1.0   # a cosine axis ends at 1, not 1.00118


def test_cut_middle():
    name = "backbone/stage_3/block_2/expand_pointwise_conv_1x1"
    assert cut_middle(name, 60) == name
    cut = cut_middle(name, 24)
    assert len(cut) == 24 and cut.count("…") == 1
    head, tail = cut.split("…")
    assert name.startswith(head) and name.endswith(tail) and len(tail) > len(head)


def test_graph_layout(synthetic_report):
    """Every box one layer below its deepest input, no two boxes overlapping, the same drawing every time."""
    from npu_sim.render.graph_view import BOX_H, BOX_W, layout, ranks, svg_graph
    layers = synthetic_report.layers
    rk = ranks(layers)
    for lay, r in zip(layers, rk):
        assert all(j < lay.index for j in lay.inputs)
        assert r == (1 + max(rk[j] for j in lay.inputs) if lay.inputs else 0)
    pos, width, height = layout(layers)
    boxes = sorted(pos.values())
    for i, (x, y) in enumerate(boxes):
        assert 0 <= x and x + BOX_W <= width and 0 <= y and y + BOX_H <= height
        for x2, y2 in boxes[i + 1:]:
            assert abs(x2 - x) >= BOX_W or abs(y2 - y) >= BOX_H
    assert svg_graph(synthetic_report) == svg_graph(synthetic_report)
    assert max(rk) <= len(layers) - 4 and max(list(rk).count(r) for r in set(rk)) >= 2   # branches side by side


def test_layer_inputs_are_the_graph_edges():
    """LayerResult.inputs: the reported tensors an op reads (the demo's residual Add reads conv1's Relu and
    conv2's Relu); not part of the JSON."""
    samples = [{"input": x[None]} for x in np.load(DEMO / "digits_test.npz")["x"][:2]]
    r = npu_sim.accuracy_report(DEMO / "digits_cnn.qdq.onnx", data=samples, board="default", workers=1)
    by = {l.tensor: l for l in r.layers}
    assert [r.layers[j].tensor for j in by["add_out"].inputs] == ["relu1_out", "relu2_out"]
    assert [r.layers[j].tensor for j in by["conv1_out"].inputs] == ["input"]
    assert by["input"].inputs == []
    assert "inputs" not in r.to_dict()["layers"][0]


def test_check_table_grouped_by_rule(synthetic_report):
    page = to_html(synthetic_report)
    table = re.search(r"<table id='checks-table'.*?</table>", page, re.S).group(0)
    rows = re.findall(r"<tr class='[a-z]*'><td class='l'>(\w+)</td><td class='l'><b>([\w.]+)</b></td><td>(\d+)</td>",
                      table)
    c = synthetic_report.checks
    every = [f for l in c["layers"] for f in l["findings"]] + c["model_findings"]
    assert sorted((s, rule) for s, rule, _ in rows) == sorted({(f["severity"], f["rule"]) for f in every})
    assert sum(int(n) for *_, n in rows) == len(every)
    assert [s for s, *_ in rows] == sorted((s for s, *_ in rows), key=["error", "warning", "info"].index)
