"""`npu-sim report --html`: the accuracy report as one self-contained HTML page — the verdict and the fix first
(``npu_sim.render.report_verdict``), then the evidence; inline SVG charts
(``npu_sim.render.svg``), the model graph (``npu_sim.render.graph_view``) and a small inline script that sorts and
filters the tables (``npu_sim.render.html_script``); no network requests, no external files.

The measurements come from ``npu_sim.analysis.accuracy.report``; this module only formats them. Every row of the
per-layer table has the id ``t<index>`` (the graph's boxes and the other tables link to it); long names are cut
in the middle with the full name in a tooltip, wide tables scroll inside their own box, and long ones start
collapsed (``<details>``; a link to one of their rows opens them).
"""
from __future__ import annotations

import html
from pathlib import Path

from npu_sim.analysis.accuracy import SCHEMA_VERSION, AccuracyReport
from npu_sim.render.check import report_rule_groups
from npu_sim.render.graph_view import graph_section
from npu_sim.render.html_script import CSS, SCRIPT, table_filter
from npu_sim.render.report_text import fmt_pct, fmt_value, layer_findings, point_label, promotion_candidates
from npu_sim.render.report_verdict import verdict_section
from npu_sim.render.svg import svg_bars, svg_curve, svg_histogram, svg_pareto
from npu_sim.render.text import cut_middle

_e = html.escape
_NAME = 40          # characters of a name in a table cell before it is cut in the middle
_NODES_SHOWN = 6    # nodes named per check rule before "and N more"
_OPEN_ROWS = 8      # a table of more rows than this starts collapsed (<details>)


def _name(s: str, n: int = _NAME) -> str:
    """A name for a table cell: cut in the middle when longer than ``n``, the full name in a tooltip."""
    if len(s) <= n:
        return _e(s)
    return f"<span title='{_e(s)}'>{_e(cut_middle(s, n))}</span>"


def _layer_link(r: AccuracyReport, node: str) -> str:
    """The node's name linked to its (first) row in the per-layer table, when it has one."""
    idx = next((l.index for l in r.layers if l.node == node), None)
    return _name(node, 44) if idx is None else f"<a href='#t{idx}'>{_name(node, 44)}</a>"


def _table(table_id: str, head: list[tuple[str, str]], filter_what: str | None = None) -> list[str]:
    """The opening of a sortable table (in a scroll box), with its header cells (label, class)."""
    out = [table_filter(table_id, filter_what)] if filter_what else []
    out.append(f"<div class='scroll'><table id='{table_id}' class='sortable'><thead><tr>"
               + "".join(f"<th class='{c}'>{t}</th>" if c else f"<th>{t}</th>" for t, c in head)
               + "</tr></thead><tbody>")
    return out


_END = "</tbody></table></div>"

# ---------------------------------------------------------------------------------------------------------------
# Advice: checks, latency, sensitivity, int16 advisor


def _checks(r: AccuracyReport) -> list[str]:
    c = r.checks
    total = c["errors"] + c["warnings"] + c["infos"]
    out = [f"<h2 id='checks'>Check findings (board {_e(c['board'])})</h2><p>{c['errors']} error(s), "
           f"{c['warnings']} warning(s), {c['infos']} info: <b>{'deployable' if c['deployable'] else 'not deployable'}"
           f"</b>." + (" Grouped by rule; each node links to its row in the per-layer table, the model graph marks "
                       "them too.</p>" if total else " No findings.</p>")]
    groups = [(sev, rule, list(dict.fromkeys(n for n, _, _ in items)), [f for _, _, f in items])
              for sev, rule, items in report_rule_groups(c)]
    if not groups:
        return out
    out.append(f"<details{' open' if len(groups) <= _OPEN_ROWS else ''}><summary>{len(groups)} rule(s)</summary>")
    out += _table("checks-table", [("severity", "l"), ("rule", "l"), ("count", ""), ("nodes", "l"),
                                   ("example", "l"), ("fix", "l")], "rules, nodes, messages")
    for sev, rule, nodes, fs in groups:
        shown = ", ".join("(model)" if n == "(model)" else _layer_link(r, n) for n in nodes[:_NODES_SHOWN])
        more = f" and {len(nodes) - _NODES_SHOWN} more" if len(nodes) > _NODES_SHOWN else ""
        every = f" title='{_e(', '.join(nodes))}'" if more else ""
        fixes = list(dict.fromkeys(f["fix"] for f in fs if f.get("fix")))
        fix = _e(fixes[0]) + (f" <span class='note'>({len(fixes) - 1} other wording(s) in the JSON)</span>"
                              if len(fixes) > 1 else "")
        out.append(f"<tr class='{'bad' if sev == 'error' else ''}'><td class='l'>{_e(sev)}</td>"
                   f"<td class='l'><b>{_e(rule)}</b></td><td>{len(fs)}</td><td class='wrap'{every}>{shown}"
                   f"{more}</td><td class='wrap'>{_e(fs[0]['message'])}</td><td class='wrap'>{fix}</td></tr>")
    out.append(_END + "</details>")
    return out


def _latency(r: AccuracyReport) -> list[str]:
    L = r.latency
    rows = [x for x in L["layers"] if x["cycles"] > 0]
    out = [f"<h2 id='latency'>Latency breakdown</h2><p>npu_sim.estimate on board {_e(L['board'])}: "
           f"{L['total_cycles']:,.0f} cycles = {L['latency_ms']:.3f} ms.</p>"]
    top = sorted(rows, key=lambda x: -x["cycles"])[:40]
    top.sort(key=lambda x: rows.index(x))
    out.append(svg_bars([f"{cut_middle(x['node'], 42)} ({x['op']}, {x['precision']})" for x in top],
                        [x["cycles"] for x in top],
                        "cycles per layer" + (" (the 40 largest, in execution order)" if len(rows) > 40 else ""),
                        "cycles", "#16a085", notes=[f"{x['share_pct']:.1f}%" for x in top],
                        titles=[f"{x['node']} ({x['op']}, {x['precision']})" for x in top]))
    return out


def _sensitivity_rows(r: AccuracyReport, rows: list[dict], ranked: bool) -> list[str]:
    index = {l.tensor: l.index for l in r.layers}
    out = []
    for rank, x in enumerate(rows, 1):
        fl = ", ".join(sorted({f["rule"] for f in layer_findings(r, x["layer"]) if f["severity"] == "error"}))
        t = _name(x["tensor"], 32)
        if x["tensor"] in index:
            t = f"<a href='#t{index[x['tensor']]}'>{t}</a>"
        out.append(f"<tr><td>{rank if ranked else '-'}</td><td class='l'>{_name(x['layer'], 32)}</td>"
                   f"<td class='l'>{_e(x['op'])}</td><td class='l'>{t}</td><td class='l'>{_e(x['dtype'])}</td>"
                   f"<td class='l'>{_e(x['mode'])}</td><td>{x['cosine']:.6f}</td><td>{x['gain_cosine']:+.2e}</td>"
                   f"<td>{fmt_value(x['sqnr_db'], '{:.2f}')}</td><td>{fmt_value(x['gain_sqnr_db'], '{:+.3f}')}</td>"
                   f"<td>{'-' if x['delta_cycles'] is None else format(x['delta_cycles'], '+,.0f')}</td>"
                   f"<td class='wrap'>{_e(fl)}</td><td class='wrap'>{_e(x['reason'])}</td></tr>")
    return out


_SENSITIVITY_HEAD = [("rank", ""), ("layer", "l"), ("op", "l"), ("tensor", "l"), ("type", "l"), ("as", "l"),
                     ("cosine", ""), ("gain cosine", ""), ("SQNR dB", ""), ("gain dB", ""), ("+cycles", ""),
                     ("findings", "l"), ("why this mode", "l")]


def _sensitivity(r: AccuracyReport) -> list[str]:
    S = r.sensitivity
    b = S["baseline"]
    cands, rest = promotion_candidates(S)
    out = [f"<h2 id='sensitivity'>Sensitivity ranking</h2><p class='note'>Output SQNR gain when only that layer "
           f"runs at higher precision — int16 where the board allows it (rewritten in the QDQ model, reloaded and "
           f"simulated), else float — on {S['samples']} sample(s); baseline cosine {b['cosine']:.5f}, SQNR "
           f"{fmt_value(b['sqnr_db'], '{:.2f}')} dB. Ranked: the {len(cands)} promotion candidate(s), the layers "
           f"whose promotion gains.</p>"]
    if cands:
        shown = cands[:30]
        out.append(svg_bars([f"{cut_middle(x['layer'], 28)} → {cut_middle(x['tensor'], 28)}" for x in shown],
                            [x["gain_sqnr_db"] for x in shown],
                            "output SQNR gain per candidate layer (dB)" + (" (the 30 best)" if len(cands) > 30 else ""),
                            "dB", "#8e44ad", notes=[x["mode"] for x in shown],
                            titles=[f"{x['layer']} → {x['tensor']}" for x in shown]))
        out += _table("sensitivity-table", _SENSITIVITY_HEAD, "layers, ops, tensors")
        out += _sensitivity_rows(r, cands, True) + [_END]
    if rest:
        out.append(f"<details><summary>{len(rest)} other measured layer(s): no gain (below +0.005 dB), or the "
                   f"float reference's own output (it also removes the error before it: an upper bound, not a "
                   f"promotion)</summary>")
        out += _table("sensitivity-rest", _SENSITIVITY_HEAD) + _sensitivity_rows(r, rest, False) + [_END]
        out.append("</details>")
    return out


def _advisor_curve(A: dict) -> list[str]:
    bud = A["budget"]
    out = [f"<p>Budget: {bud['cycles']:,.0f} cycles"
           + (f" ({bud['max_slowdown']}× the estimate)" if bud.get("max_slowdown") else
              f" ({bud['budget_ms']} ms)") + f". {_e(A['method'])}.</p>"]
    out.append(svg_pareto(A["curve"], bud["cycles"]))
    out.append(f"<details><summary>the {len(A['curve'])} measured point(s)</summary>")
    out += _table("advisor-table", [("k", ""), ("cycles", ""), ("slowdown", ""), ("cosine", ""), ("SQNR dB", ""),
                                    ("Pareto", "l"), ("chosen", "l"), ("last promoted / segment", "l")])
    for p in A["curve"]:
        out.append(f"<tr><td>{p['k']}</td><td>{p['cycles']:,.0f}</td><td>{p['slowdown']:.3f}</td>"
                   f"<td>{p['cosine']:.6f}</td><td>{fmt_value(p['sqnr_db'], '{:.2f}')}</td>"
                   f"<td class='l'>{'yes' if p['pareto'] else ''}</td>"
                   f"<td class='l'>{'chosen' if p.get('chosen') else ''}</td>"
                   f"<td class='wrap'>{_e(point_label(p))}</td></tr>")
    out.append(_END + "</details>")
    out.append(f"<p>Chosen: {len(A['chosen'])} tensor(s) to int16: {_e(', '.join(A['chosen'])) or 'none'}.</p>")
    return out


def _advisor(A: dict) -> list[str]:
    out = ["<h2 id='advisor'>int16 advisor</h2>"]
    if A.get("skipped"):
        out.append(f"<p>{_e(A['skipped'])}</p>")
    if A.get("curve"):
        out += _advisor_curve(A)
    out.append("<p class='note'>The fix (with the bias remedy and the settings the board requires) and what its "
               "re-quantization measured: <a href='#verdict'>Verdict and fix</a>.</p>")
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
        out.append(f"<b><a href='#t{c.index}'>{_e(c.tensor)}</a></b> ({_e(c.op)} {_e(c.node)}, #{c.index}) is the first tensor whose "
                   f"accumulated cosine falls below {c.threshold}: {c.accumulated_cosine:.5f} (inputs "
                   f"{c.input_cosine:.5f}, isolated {c.isolated_cosine:.5f}); cause: <b>{_e(c.cause)}</b>.")
    else:
        out.append(f"None: every tensor keeps an accumulated cosine of at least {r.collapse_cosine}.")
    if r.largest_drop:
        d = r.largest_drop
        out.append(f" Largest drop: <a href='#t{d.index}'>{_e(d.tensor)}</a> ({_e(d.op)}), inputs {d.input_cosine:.5f} → "
                   f"{d.accumulated_cosine:.5f}.")
    if c:
        hits = [f for f in layer_findings(r, c.node) if f["severity"] in ("error", "warning")
                and not f["quantization_setting"]]
        if hits:
            out.append(" Check findings on this layer: " + "; ".join(f"<b>{_e(f['rule'])}</b>: {_e(f['message'])}"
                                                                     for f in hits[:3]))
    out.append("</p>")
    return out


def _all_tensors(r: AccuracyReport) -> list[str]:
    c = r.collapse
    out = ["<h2 id='layers'>All tensors</h2><p class='note'>One row per quantized tensor (id <code>t&lt;#&gt;</code>; "
           "# links back to the graph; a link to a row opens the table). Click a header to sort, type to filter.</p>",
           f"<details{' open' if len(r.layers) <= _OPEN_ROWS else ''}><summary>{len(r.layers)} tensor(s)</summary>"]
    out += _table("layers-table", [("#", ""), ("layer", "l"), ("tensor", "l"), ("op", "l"), ("type", "l"),
                                   ("scale", ""), ("acc cosine", ""), ("acc SQNR", ""), ("acc mean LSB", ""),
                                   ("acc max LSB", ""), ("iso cosine", ""), ("iso SQNR", ""), ("iso mean LSB", ""),
                                   ("iso max LSB (in range)", ""), ("float min", ""), ("p1", ""), ("p50", ""),
                                   ("p99", ""), ("p99.9", ""), ("float max", ""), ("clip %", ""),
                                   ("weight |max| per channel", ""), ("findings", "l")],
                  "layers, tensors, ops, findings")
    for l in r.layers:
        cls = "collapse" if c and l.index == c.index else ("bad" if l.accumulated.cosine < r.collapse_cosine else "")
        a, i, s = l.accumulated, l.isolated, l.stats
        scale = f"{l.scale:.4g}" if isinstance(l.scale, float) else f"{min(l.scale):.3g}..{max(l.scale):.3g}"
        w = "" if l.weights is None else f"{l.weights.absmax_smallest:.3g}..{l.weights.absmax_largest:.3g}"
        fl = ", ".join(sorted({f["rule"] for f in layer_findings(r, l.node) if f["severity"] in ("error", "warning")}))
        out.append(f"<tr id='t{l.index}' class='{cls}'><td><a href='#g{l.index}' title='show in the graph'>{l.index}"
                   f"</a></td><td class='l'>{_name(l.node, 48)}</td><td class='l'>{_name(l.tensor, 48)}</td>"
                   f"<td class='l'>{_e(l.op)}</td><td class='l'>{l.dtype}</td><td>{scale}</td><td>{fmt_value(a.cosine)}</td>"
                   f"<td>{fmt_value(a.sqnr_db, '{:.1f}')}</td><td>{a.mean_lsb:.3f}</td><td>{a.max_lsb:.2f}</td>"
                   f"<td>{fmt_value(i.cosine)}</td><td>{fmt_value(i.sqnr_db, '{:.1f}')}</td><td>{i.mean_lsb:.3f}</td>"
                   f"<td data-v='{i.max_lsb}'>{i.max_lsb:.2f} ({i.max_lsb_in_range:.2f})</td><td>{s.min:.4g}</td>"
                   f"<td>{s.p1:.4g}</td><td>{s.p50:.4g}</td><td>{s.p99:.4g}</td><td>{s.p99_9:.4g}</td>"
                   f"<td>{s.max:.4g}</td><td>{100 * s.clip_rate:.3f}</td><td>{w}</td><td class='l'>{_e(fl)}</td></tr>")
    out.append(_END + "</details>")
    return out


_SECTIONS = [("verdict", "verdict and fix"), ("checks", "checks"), ("latency", "latency"), ("sensitivity", "sensitivity"), ("advisor", "advisor"),
             ("similarity", "per-layer similarity"), ("graph", "model graph"), ("histograms", "histograms"),
             ("layers", "all tensors")]


def to_html(r: AccuracyReport, histograms: int = 4) -> str:
    """The whole report as one HTML page; ``histograms`` worst tensors get a float-vs-integer histogram."""
    c = r.collapse
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>npu-sim report: {_e(Path(r.model).name)}"
           f"</title><style>{CSS}</style></head><body>",
           f"<h1>Accuracy report: {_e(r.model)} on board {_e(r.board)}</h1>",
           f"<p class='note'>{r.samples} sample(s): {_e(r.data)}. Float reference: {_e(r.reference)} "
           f"({_e(r.reference_source)}).</p>"]
    present = {"checks": r.checks is not None, "latency": r.latency is not None,
               "sensitivity": r.sensitivity is not None, "advisor": r.advisor is not None}
    out.append("<p class='note'>Sections: " + " · ".join(f"<a href='#{k}'>{t}</a>" for k, t in _SECTIONS
                                                         if present.get(k, True)) + "</p>")
    out += verdict_section(r)
    out += _outputs(r)
    out += _collapse(r)
    out.extend(_advice(r))
    out.append("<h2 id='similarity'>Per-layer similarity</h2><p class='note'>Accumulated: the full integer run "
               "against the float reference. Isolated: the op alone, fed the float reference of its inputs quantized "
               "with their quantization — its own error. The x axis names each layer (node) in execution order; "
               "hover a point for its tensor and value.</p>")
    ci = c.index if c else None
    out.append(svg_curve(r.layers, "cosine", "cosine similarity per layer", ci))
    out.append(svg_curve(r.layers, "sqnr_db", "SQNR (dB) per layer", ci))
    out += graph_section(r)
    out.append("<h2 id='histograms'>Worst tensors: float vs integer values</h2><div class='hists'>")
    for lay in r.worst("accumulated", histograms):
        out.append(svg_histogram(lay))
    out.append("</div>")
    out += _all_tensors(r)
    if r.unmatched:
        out.append(f"<p class='note'>Not compared (no float reference tensor): {_e(', '.join(r.unmatched))}</p>")
    if r.overflows:
        out.append("<p class='note'>Accumulator overflows: "
                   + _e(", ".join(f"{k}: {v}" for k, v in r.overflows.items())) + "</p>")
    out.append(f"<p class='note'>npu-sim accuracy report, schema {SCHEMA_VERSION}, "
               f"{r.seconds:.1f} s.</p>{SCRIPT}</body></html>")
    return "\n".join(out)
