"""`npu-sim report --html`: the accuracy report as a self-contained HTML page (inline SVG from
``npu_sim.render.svg``, no scripts, no external requests).

The measurements come from ``npu_sim.analysis.accuracy.report``; this module only formats them.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from npu_sim.analysis.accuracy import SCHEMA_VERSION, AccuracyReport
from npu_sim.render.report_text import fmt_pct, fmt_value, layer_findings, point_label
from npu_sim.render.svg import svg_bars, svg_curve, svg_histogram, svg_pareto

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f0f0f0}td.l,th.l{text-align:left}tr.bad td{background:#fde2e2}tr.collapse td{background:#f9c0c0}
.note{color:#555;font-size:13px}svg{background:#fff;border:1px solid #ddd;margin:4px}
.hists{display:flex;flex-wrap:wrap}.legend{font-size:12px}
"""
_e = html.escape

# ---------------------------------------------------------------------------------------------------------------
# Advice: checks, latency, sensitivity, int16 advisor


def _checks(r: AccuracyReport) -> list[str]:
    c = r.checks
    out = [f"<h2>Check findings (board {_e(c['board'])})</h2><p>{c['errors']} error(s), {c['warnings']} "
           f"warning(s), {c['infos']} info: <b>{'deployable' if c['deployable'] else 'not deployable'}"
           f"</b>." + (" Next to the layers they affect:" if c["layers"] or c["model_findings"] else "") + "</p>"]
    if c["layers"] or c["model_findings"]:
        out.append("<table class='findings'><tr><th class='l'>node</th><th class='l'>tensor(s)</th>"
                   "<th class='l'>severity</th><th class='l'>rule</th><th class='l'>message</th>"
                   "<th class='l'>fix</th></tr>")
        rows = [("(model)", [], f) for f in c["model_findings"]] + \
               [(l["node"], l["tensors"], f) for l in c["layers"] for f in l["findings"]]
        order = {"error": 0, "warning": 1, "info": 2}
        rows.sort(key=lambda t: (order.get(t[2]["severity"], 3),
                                 t[2]["rule"].startswith(("dtype.", "zero_point."))))
        for node, tensors, f in rows[:200]:
            cls = "bad" if f["severity"] == "error" else ""
            out.append(f"<tr class='{cls}'><td class='l'>{_e(node)}</td><td class='l'>{_e(', '.join(tensors))}</td>"
                       f"<td class='l'>{_e(f['severity'])}</td><td class='l'>{_e(f['rule'])}</td>"
                       f"<td class='l'>{_e(f['message'])}</td><td class='l'>{_e(f['fix'])}</td></tr>")
        out.append("</table>")
        if len(rows) > 200:
            out.append(f"<p class='note'>{len(rows) - 200} more in the JSON report.</p>")
    return out


def _latency(r: AccuracyReport) -> list[str]:
    L = r.latency
    rows = [x for x in L["layers"] if x["cycles"] > 0]
    out = [f"<h2>Latency breakdown</h2><p>npu_sim.estimate on board {_e(L['board'])}: "
           f"{L['total_cycles']:,.0f} cycles = {L['latency_ms']:.3f} ms.</p>"]
    top = sorted(rows, key=lambda x: -x["cycles"])[:40]
    top.sort(key=lambda x: rows.index(x))
    out.append(svg_bars([f"{x['node']} ({x['op']}, {x['precision']})" for x in top], [x["cycles"] for x in top],
                        "cycles per layer" + (" (the 40 largest, in execution order)" if len(rows) > 40 else ""),
                        "cycles", "#16a085", notes=[f"{x['share_pct']:.1f}%" for x in top]))
    return out


def _sensitivity(r: AccuracyReport) -> list[str]:
    S = r.sensitivity
    b = S["baseline"]
    rows = S["layers"][:30]
    out = [f"<h2>Sensitivity ranking</h2><p class='note'>Output SQNR gain when only that layer runs at higher "
           f"precision — int16 where the board allows it (rewritten in the QDQ model, reloaded and "
           f"simulated), else float — on {S['samples']} sample(s); baseline cosine {b['cosine']:.5f}, SQNR "
           f"{fmt_value(b['sqnr_db'], '{:.2f}')} dB.</p>"]
    out.append(svg_bars([f"{x['layer']} → {x['tensor']}" for x in rows], [x["gain_sqnr_db"] or 0.0 for x in rows],
                        "output SQNR gain per layer (dB)", "dB", "#8e44ad",
                        notes=[x["mode"] for x in rows]))
    out.append("<table><tr><th>rank</th><th class='l'>layer</th><th class='l'>op</th><th class='l'>tensor</th>"
               "<th class='l'>type</th><th class='l'>as</th><th>cosine</th><th>gain cosine</th><th>SQNR dB</th>"
               "<th>gain dB</th><th>+cycles</th><th class='l'>findings</th><th class='l'>why this mode</th></tr>")
    for x in S["layers"]:
        fl = ", ".join(sorted({f["rule"] for f in layer_findings(r, x["layer"]) if f["severity"] == "error"}))
        out.append(f"<tr><td>{x['rank']}</td><td class='l'>{_e(x['layer'])}</td><td class='l'>{_e(x['op'])}</td>"
                   f"<td class='l'>{_e(x['tensor'])}</td><td class='l'>{_e(x['dtype'])}</td>"
                   f"<td class='l'>{_e(x['mode'])}</td><td>{x['cosine']:.6f}</td><td>{x['gain_cosine']:+.2e}</td>"
                   f"<td>{fmt_value(x['sqnr_db'], '{:.2f}')}</td><td>{fmt_value(x['gain_sqnr_db'], '{:+.3f}')}</td>"
                   f"<td>{'-' if x['delta_cycles'] is None else format(x['delta_cycles'], '+,.0f')}</td>"
                   f"<td class='l'>{_e(fl)}</td><td class='l'>{_e(x['reason'])}</td></tr>")
    out.append("</table>")
    return out


def _advisor_curve(A: dict) -> list[str]:
    bud = A["budget"]
    out = [f"<p>Budget: {bud['cycles']:,.0f} cycles"
           + (f" ({bud['max_slowdown']}× the estimate)" if bud.get("max_slowdown") else
              f" ({bud['budget_ms']} ms)") + f". {_e(A['method'])}.</p>"]
    out.append(svg_pareto(A["curve"], bud["cycles"]))
    out.append("<table><tr><th>k</th><th>cycles</th><th>slowdown</th><th>cosine</th><th>SQNR dB</th>"
               "<th class='l'>Pareto</th><th class='l'>chosen</th><th class='l'>last promoted / segment</th>"
               "</tr>")
    for p in A["curve"]:
        out.append(f"<tr><td>{p['k']}</td><td>{p['cycles']:,.0f}</td><td>{p['slowdown']:.3f}</td>"
                   f"<td>{p['cosine']:.6f}</td><td>{fmt_value(p['sqnr_db'], '{:.2f}')}</td>"
                   f"<td class='l'>{'yes' if p['pareto'] else ''}</td>"
                   f"<td class='l'>{'chosen' if p.get('chosen') else ''}</td>"
                   f"<td class='l'>{_e(point_label(p))}</td></tr>")
    out.append("</table>")
    out.append(f"<p>Chosen: {len(A['chosen'])} tensor(s) to int16: {_e(', '.join(A['chosen'])) or 'none'}.</p>")
    return out


def _requantized(rq: dict) -> list[str]:
    if rq.get("error"):
        return [f"<p>{_e(rq['error'])}</p>"]
    b, a = rq["before"], rq["after"]
    return [f"<p><b>Re-quantized and simulated</b> ({_e(rq['model'])}, calibration {_e(rq['calibration'])}), "
            f"on {rq['samples']} sample(s): cosine {b['cosine']:.5f} → <b>{a['cosine']:.5f}</b> (worst "
            f"sample {b['cosine_min_sample']:.5f} → {a['cosine_min_sample']:.5f}), SQNR "
            f"{fmt_value(b['sqnr_db'], '{:.2f}')} → {fmt_value(a['sqnr_db'], '{:.2f}')} dB, cycles "
            f"{fmt_value(rq['cycles_before'], '{:,.0f}')} → {fmt_value(rq['cycles_after'], '{:,.0f}')}; "
            f"bias.saturated findings after: {rq['bias_saturated_after']}.</p>"]


def _advisor(A: dict) -> list[str]:
    out = ["<h2>int16 advisor and fix</h2>"]
    if A.get("skipped"):
        out.append(f"<p>{_e(A['skipped'])}</p>")
    if A.get("curve"):
        out += _advisor_curve(A)
    wc = A.get("weight_int16")
    if wc:
        out.append("<p><b>int16 weights</b> (activations already 16-bit; the op in float gains &ge; 1 dB, so its "
                   "8-bit weights are the error): " + _e("; ".join(f"{w['layer']} ({w['weight']}, "
                                                                    f"{w['gain_sqnr_db']:+.2f} dB)" for w in wc))
                   + ". In the fix; measured only re-quantized.</p>")
    rem = A.get("bias_remedy")
    if rem:
        out.append("<p><b>Bias remedy</b> (int32 biases clipped, onnxruntime #21000 — not a precision problem): "
                   + _e("; ".join(f"{l['node']} ({l['tensor']}) channels {l['channels'][:8]}"
                                 for l in rem["layers"]))
                   + f". Fix: {_e(rem['remedy'])}.</p>")
    if A.get("fix"):
        out.append("<p>The fix, as quantize_static <code>extra_options</code> "
                   "(<code>npu_sim.qdq.recalibrate.load_extra_options</code> reads it):</p><pre>"
                   + _e(json.dumps(A["fix"], indent=1)) + "</pre>")
    rq = A.get("requantized")
    if rq:
        out += _requantized(rq)
    return out


def _advice(r: AccuracyReport) -> list[str]:
    out: list[str] = []
    if r.checks is not None:
        out += _checks(r)
    if r.latency is not None:
        out += _latency(r)
    if r.sensitivity is not None:
        out += _sensitivity(r)
    if r.advisor is not None:
        out += _advisor(r.advisor)
    return out


# ---------------------------------------------------------------------------------------------------------------
# The page


def _outputs(r: AccuracyReport) -> list[str]:
    out = ["<h2>Outputs</h2><table><tr><th class='l'>output</th><th>shape</th>"
           "<th>cosine</th><th>worst sample cosine</th><th>SQNR dB</th><th>MAE</th><th>max |err|</th>"
           "<th>top-1 agree</th><th>top-5 agree</th><th>accuracy float</th><th>accuracy integer</th></tr>"]
    for o in r.outputs:
        m = o.metrics
        out.append(f"<tr><td class='l'>{_e(o.name)}</td><td>{'x'.join(map(str, o.shape))}</td>"
                   f"<td>{fmt_value(m.cosine)}</td><td>{fmt_value(o.cosine_min_sample)}</td>"
                   f"<td>{fmt_value(m.sqnr_db, '{:.2f}')}</td><td>{m.mae:.4g}</td>"
                   f"<td>{m.max_abs:.4g}</td><td>{fmt_pct(o.top1_agreement)}</td><td>{fmt_pct(o.top5_agreement)}</td>"
                   f"<td>{fmt_pct(o.accuracy_float)}</td><td>{fmt_pct(o.accuracy_int)}</td></tr>")
    out.append("</table>")
    return out


def _collapse(r: AccuracyReport) -> list[str]:
    c = r.collapse
    out = ["<h2>Collapse point</h2><p>"]
    if c:
        out.append(f"<b>{_e(c.tensor)}</b> ({_e(c.op)} {_e(c.node)}, #{c.index}) is the first tensor whose "
                   f"accumulated cosine falls below {c.threshold}: {c.accumulated_cosine:.5f} (inputs "
                   f"{c.input_cosine:.5f}, isolated {c.isolated_cosine:.5f}); cause: <b>{_e(c.cause)}</b>.")
    else:
        out.append(f"None: every tensor keeps an accumulated cosine of at least {r.collapse_cosine}.")
    if r.largest_drop:
        d = r.largest_drop
        out.append(f" Largest drop: {_e(d.tensor)} ({_e(d.op)}), inputs {d.input_cosine:.5f} → "
                   f"{d.accumulated_cosine:.5f}.")
    if c:
        hits = [f for f in layer_findings(r, c.node) if f["severity"] in ("error", "warning")
                and not f["rule"].startswith(("dtype.", "zero_point."))]
        if hits:
            out.append(" Check findings on this layer: " + "; ".join(f"<b>{_e(f['rule'])}</b>: {_e(f['message'])}"
                                                                     for f in hits[:3]))
    out.append("</p>")
    return out


def _all_tensors(r: AccuracyReport) -> list[str]:
    c = r.collapse
    out = ["</div><h2>All tensors</h2><table><tr><th>#</th><th class='l'>tensor</th><th class='l'>op</th>"
           "<th class='l'>type</th><th>scale</th><th>acc cosine</th><th>acc SQNR</th><th>acc mean LSB</th>"
           "<th>acc max LSB</th><th>iso cosine</th><th>iso SQNR</th><th>iso mean LSB</th><th>iso max LSB "
           "(in range)</th><th>float min</th><th>p1</th><th>p50</th><th>p99</th><th>p99.9</th><th>float max</th>"
           "<th>clip %</th><th>weight |max| per channel</th></tr>"]
    for l in r.layers:
        cls = "collapse" if c and l.index == c.index else ("bad" if l.accumulated.cosine < r.collapse_cosine else "")
        a, i, s = l.accumulated, l.isolated, l.stats
        scale = f"{l.scale:.4g}" if isinstance(l.scale, float) else f"{min(l.scale):.3g}..{max(l.scale):.3g}"
        w = "" if l.weights is None else f"{l.weights.absmax_smallest:.3g}..{l.weights.absmax_largest:.3g}"
        out.append(f"<tr class='{cls}'><td>{l.index}</td><td class='l'>{_e(l.tensor)}</td><td class='l'>{_e(l.op)}</td>"
                   f"<td class='l'>{l.dtype}</td><td>{scale}</td><td>{fmt_value(a.cosine)}</td>"
                   f"<td>{fmt_value(a.sqnr_db, '{:.1f}')}</td><td>{a.mean_lsb:.3f}</td><td>{a.max_lsb:.2f}</td>"
                   f"<td>{fmt_value(i.cosine)}</td><td>{fmt_value(i.sqnr_db, '{:.1f}')}</td><td>{i.mean_lsb:.3f}</td>"
                   f"<td>{i.max_lsb:.2f} ({i.max_lsb_in_range:.2f})</td><td>{s.min:.4g}</td><td>{s.p1:.4g}</td>"
                   f"<td>{s.p50:.4g}</td><td>{s.p99:.4g}</td><td>{s.p99_9:.4g}</td><td>{s.max:.4g}</td>"
                   f"<td>{100 * s.clip_rate:.3f}</td><td>{w}</td></tr>")
    out.append("</table>")
    return out


def to_html(r: AccuracyReport, histograms: int = 4) -> str:
    """The whole report as one HTML page; ``histograms`` worst tensors get a float-vs-integer histogram."""
    c = r.collapse
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>npu-sim report: {_e(Path(r.model).name)}"
           f"</title><style>{_CSS}</style></head><body>",
           f"<h1>Accuracy report: {_e(r.model)} on board {_e(r.board)}</h1>",
           f"<p class='note'>{r.samples} sample(s): {_e(r.data)}. Float reference: {_e(r.reference)} "
           f"({_e(r.reference_source)}).</p>"]
    out += _outputs(r)
    out += _collapse(r)
    out.extend(_advice(r))
    out.append("<h2>Per-layer similarity</h2><p class='note'>Accumulated: the full integer run against the "
               "float reference. Isolated: the op alone, fed the float reference of its inputs quantized with "
               "their quantization — its own error.</p>")
    ci = c.index if c else None
    out.append(svg_curve(r.layers, "cosine", "cosine similarity per tensor", ci))
    out.append(svg_curve(r.layers, "sqnr_db", "SQNR (dB) per tensor", ci))
    out.append("<h2>Worst tensors: float vs integer values</h2><div class='hists'>")
    for lay in r.worst("accumulated", histograms):
        out.append(svg_histogram(lay))
    out += _all_tensors(r)
    if r.unmatched:
        out.append(f"<p class='note'>Not compared (no float reference tensor): {_e(', '.join(r.unmatched))}</p>")
    if r.overflows:
        out.append("<p class='note'>Accumulator overflows: "
                   + _e(", ".join(f"{k}: {v}" for k, v in r.overflows.items())) + "</p>")
    out.append(f"<p class='note'>npu-sim accuracy report, schema {SCHEMA_VERSION}, "
               f"{r.seconds:.1f} s.</p></body></html>")
    return "\n".join(out)
