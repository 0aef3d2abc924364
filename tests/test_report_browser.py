"""The HTML report in a real headless browser (Debian's chromium): it loads without errors and draws its plots.

Skipped when no chromium is installed (``apt-get install chromium``; .ci/run installs it)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import npu_sim
from npu_sim.analysis import advisor
from npu_sim.render.report_html import to_html

pytest.importorskip("onnxruntime")

DEMO = Path(__file__).resolve().parent.parent / "models" / "demo"

CHROMIUM = next((p for p in (os.environ.get("NPU_SIM_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                             shutil.which("chromium-browser")) if p and Path(p).is_file()), None)

# Appended to a copy of the page (the report itself has no scripts): after load, measure every SVG and the shapes
# drawn in it, and record any script or resource error, into a <pre> that --dump-dom shows.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e.target && e.target.src)), true);
window.addEventListener('load', () => {
  const svgs = [...document.querySelectorAll('svg')].map(s => {
    const r = s.getBoundingClientRect();
    const shapes = [...s.querySelectorAll('polyline,rect,circle,line')].filter(el => {
      const b = el.getBBox(); return b.width > 0 || b.height > 0; }).length;
    return {cls: s.getAttribute('class'), w: r.width, h: r.height, shapes: shapes};
  });
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify({svgs: svgs, errors: window.__errors, title: document.title,
                                    h2: [...document.querySelectorAll('h2')].map(h => h.textContent)});
  document.body.appendChild(pre);
});
</script>"""


def _chromium(args, tmp_path, timeout=120):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium found (apt-get install chromium); the HTML report's "
                                             "browser test needs a headless browser")
def test_html_report_renders_in_chromium(tmp_path):
    samples = [{"input": x[None]} for x in __import__("numpy").load(DEMO / "digits_test.npz")["x"][:16]]
    r = npu_sim.accuracy_report(DEMO / "digits_cnn.qdq.onnx", data=samples, float_model=DEMO / "digits_cnn.float.onnx",
                                board="default")
    advisor.annotate(r, samples, "default", DEMO / "digits_cnn.float.onnx",
                     options=advisor.AdviceOptions(samples=8, max_points=4))
    page = to_html(r)
    assert "<script" not in page and "http://" not in page and "https://" not in page   # self-contained
    probe_page = tmp_path / "probe.html"
    probe_page.write_text(page.replace("</body>", PROBE + "</body>"))
    res = _chromium(["--virtual-time-budget=5000", "--dump-dom", probe_page.as_uri()], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', res.stdout, re.S)
    assert m, "the page did not finish loading: " + res.stdout[-500:]
    import html as _html
    got = json.loads(_html.unescape(m.group(1)))
    assert got["errors"] == []
    assert got["title"].startswith("npu-sim report")
    for section in ("Outputs", "Latency breakdown", "Sensitivity ranking", "int16 advisor and fix",
                    "Per-layer similarity"):
        assert any(h.startswith(section) for h in got["h2"]), (section, got["h2"])
    kinds = {}
    for s in got["svgs"]:
        assert s["w"] > 100 and s["h"] > 50, s
        kinds.setdefault(s["cls"], []).append(s["shapes"])
    assert min(kinds["plot"]) >= 2 * len(r.layers)          # similarity curves: a point per tensor and the lines
    assert len(kinds["hist"]) == 4 and min(kinds["hist"]) > 4
    assert len(kinds["bars"]) == 2 and min(kinds["bars"]) >= 9   # latency and sensitivity bars
    assert kinds["pareto"] and kinds["pareto"][0] >= len(r.advisor["curve"])
    # and the pixels: a screenshot of the unmodified page is not blank where the first plot is drawn
    shot = tmp_path / "shot.png"
    plain = tmp_path / "report.html"
    plain.write_text(page)
    res = _chromium(["--window-size=1280,4000", f"--screenshot={shot}", plain.as_uri()], tmp_path)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    from PIL import Image
    img = Image.open(shot).convert("L")
    import numpy as np
    a = np.asarray(img)
    dark = (a < 200).mean(axis=1)                            # share of non-white pixels per row
    assert (dark > 0.02).sum() > 300, "the screenshot is nearly blank"
