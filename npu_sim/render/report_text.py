"""`npu-sim report` on the terminal: the accuracy summary and the advice that follows it (check findings,
latency, sensitivity ranking, int16 advisor, fix and re-quantization).

The measurements come from ``npu_sim.analysis.accuracy.report``; this module only formats them. The small value
formatters (``fmt_value``, ``fmt_pct``, ``point_label``, ``layer_findings``) are shared with the HTML page
(``npu_sim.render.report_html``) and its charts (``npu_sim.render.svg``).
"""
from __future__ import annotations

import json
import math

from npu_sim.analysis.accuracy import AccuracyReport, LayerResult
from npu_sim.render.check import fit_sentence, report_rule_groups
from npu_sim.render.text import NAME_CAP, column_width, cut_end, cut_middle

FIX_CHARS = 300  # the fix summary shown on the terminal; the JSON is in --overrides / --json


def fmt_value(v, fmt="{:.5f}") -> str:
    """``v`` formatted with ``fmt``; ``-`` for None, ``inf``/``-inf`` for infinities."""
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return fmt.format(v)


def fmt_pct(v) -> str:
    """A share (0..1) as a percentage with two decimals; ``-`` for None."""
    return "-" if v is None else f"{100 * v:.2f}%"


def point_label(p: dict) -> str:
    """The label of an advisor curve point: its own label, else the last tensor promoted."""
    if p.get("label"):
        return p["label"]
    return p["tensors"][-1] if p["tensors"] else "-"


def promotion_candidates(S: dict) -> tuple[list[dict], list[dict]]:
    """The sensitivity rows that are real promotion candidates — a gain of at least 0.005 dB (one that shows), not
    the float reference's own output (which also removes every error before it: an upper bound) — in rank order,
    and the other rows."""
    cands, rest = [], []
    for row in S["layers"]:
        real = row["mode"] in ("int16", "float") and (row["gain_sqnr_db"] or 0.0) >= 0.005
        (cands if real else rest).append(row)
    return cands, rest


def layer_findings(r: AccuracyReport, node: str) -> list[dict]:
    """The check findings of one node (empty without checks)."""
    if not r.checks:
        return []
    return next((l["findings"] for l in r.checks["layers"] if l["node"] == node), [])


# ---------------------------------------------------------------------------------------------------------------
# Summary


def fit_note(r: AccuracyReport) -> list[str]:
    """One line when the model fails the board's check: the report's numbers are then those of a model the board
    cannot take as it is."""
    c = r.checks
    if not c or c["deployable"]:
        return []
    rules = [(rule, len(items)) for sev, rule, items in report_rule_groups(c) if sev == "error"]
    return [fit_sentence(c["board"], c["errors"], rules, r.model, c["board"])]


def _outputs(r: AccuracyReport) -> list[str]:
    lines = []
    for o in r.outputs:
        m = o.metrics
        line = (f"  {o.name} [{'x'.join(map(str, o.shape))}]  cosine {fmt_value(m.cosine)} (worst sample "
                f"{fmt_value(o.cosine_min_sample)})  SQNR {fmt_value(m.sqnr_db, '{:.1f}')} dB  MAE {m.mae:.4g}  "
                f"max|err| {m.max_abs:.4g}")
        if o.cosine_min_sample == 0.0 and m.cosine != 0.0:
            line += ("\n    (worst sample 0: on some sample one side's output is all zeros, where cosine is 0 by "
                     "definition; SQNR and MAE still measure it)")
        if o.top1_agreement is not None:
            line += f"\n    top-1 agreement {fmt_pct(o.top1_agreement)}"
            if o.top5_agreement is not None:
                line += f", top-5 agreement {fmt_pct(o.top5_agreement)}"
        if o.accuracy_float is not None:
            line += f"; label accuracy float {fmt_pct(o.accuracy_float)}, integer {fmt_pct(o.accuracy_int)}"
        lines.append(line)
    return lines


def _worst_tables(r: AccuracyReport, top: int) -> list[str]:
    acc, iso = r.worst("accumulated", top), r.worst("isolated", top)
    tw = column_width([l.tensor for l in acc + iso], 6, NAME_CAP)
    ow = column_width([l.op for l in acc + iso], 2, 24)
    head = (f"  {'#':>3} {'tensor':{tw}s} {'op':{ow}s} {'cosine':>8s} {'SQNR dB':>8s} {'mean LSB':>8s} "
            f"{'max LSB':>8s} {'clip %':>7s}")

    def row(l: LayerResult, m) -> str:
        return (f"  {l.index:>3} {cut_middle(l.tensor, tw):{tw}s} {cut_middle(l.op, ow):{ow}s} "
                f"{fmt_value(m.cosine, '{:8.5f}')} {fmt_value(m.sqnr_db, '{:8.1f}')} {m.mean_lsb:8.3f} {m.max_lsb:8.2f} {100 * l.stats.clip_rate:7.3f}")

    lines = ["", f"worst {top} tensors, accumulated error (full integer run vs float reference)", head]
    lines += [row(l, l.accumulated) for l in acc]
    lines += ["", f"worst {top} tensors, isolated error (the op alone, fed the float reference inputs)", head]
    lines += [row(l, l.isolated) for l in iso]
    return lines


def _collapse(r: AccuracyReport) -> list[str]:
    lines = []
    if r.collapse:
        c = r.collapse
        why = ("its own error (isolated cosine {:.5f})".format(c.isolated_cosine) if c.cause == "own error" else
               "inherited: its inputs were at cosine {:.5f} and it amplifies that".format(c.input_cosine))
        lines.append(f"collapse: {c.tensor} ({c.op} {c.node}, #{c.index}) is the first tensor below cosine "
                     f"{c.threshold}: accumulated {c.accumulated_cosine:.5f}; cause: {why}")
    else:
        lines.append(f"collapse: none (every tensor keeps accumulated cosine >= {r.collapse_cosine})")
    if r.largest_drop:
        d = r.largest_drop
        lines.append(f"largest drop: {d.tensor} ({d.op} {d.node}, #{d.index}): inputs {d.input_cosine:.5f} -> "
                     f"{d.accumulated_cosine:.5f} (isolated {d.isolated_cosine:.5f})")
    return lines


def format_summary(r: AccuracyReport, top: int = 5) -> str:
    """The terminal summary of an accuracy report: outputs, worst tensors, collapse, then ``format_advice``."""
    lines = [f"npu-sim report: {r.model} on board {r.board}, {r.samples} sample(s) ({r.data})",
             f"float reference: {r.reference} ({r.reference_source})"]
    lines += fit_note(r)
    lines += ["", "outputs (integer vs float reference)"]
    lines += _outputs(r)
    lines += _worst_tables(r, top)
    lines.append("")
    lines += _collapse(r)
    if r.unmatched:
        lines.append(f"not compared (no float reference tensor): {len(r.unmatched)}: "
                     + ", ".join(r.unmatched[:5]) + (" ..." if len(r.unmatched) > 5 else ""))
    for node, count in r.overflows.items():
        lines.append(f"warning: node {node!r}: {count} accumulator value(s) overflowed the board's accumulator")
    lines.append(f"({len(r.layers)} tensors compared in {r.seconds:.1f} s)")
    lines += format_advice(r, top)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Advice


def _checks(r: AccuracyReport) -> list[str]:
    c = r.checks
    lines = ["", f"check findings on board {c['board']}: {c['errors']} error(s), {c['warnings']} warning(s), "
                 f"{c['infos']} info -> {'deployable' if c['deployable'] else 'NOT DEPLOYABLE'}"]
    for sev, rule, items in report_rule_groups(c):
        shown = []
        for node, tensors, f in items[:4]:
            ch = f["values"].get("channels")
            shown.append(f"{node}" + (f" ({tensors[0]})" if tensors else "") + (f" ch {ch}" if ch else ""))
        lines.append(f"  {sev:7s} {rule} on {len(items)} node(s): " + "; ".join(shown)
                     + (" ..." if len(items) > 4 else ""))
    if r.collapse:
        hits = layer_findings(r, r.collapse.node)
        hits = [f for f in hits if f["severity"] in ("error", "warning") and not f["quantization_setting"]]
        if hits:
            lines.append(f"  at the collapse ({r.collapse.tensor}, {r.collapse.node}): "
                         + "; ".join(f"{f['rule']}: {f['message']}" for f in hits[:2]))
    return lines


def _latency(r: AccuracyReport) -> list[str]:
    L = r.latency
    hot = sorted(L["layers"], key=lambda x: -x["cycles"])[:3]
    return ["", f"latency (npu_sim.estimate, board {L['board']}): {L['total_cycles']:,.0f} cycles = "
                f"{L['latency_ms']:.3f} ms; hottest: "
                + ", ".join(f"{h['node']} {h['share_pct']:.1f}%" for h in hot)]


def _sensitivity(r: AccuracyReport, top: int) -> list[str]:
    S = r.sensitivity
    b = S["baseline"]
    cands, rest = promotion_candidates(S)
    rows = cands[:top]
    lw = column_width([row["layer"] for row in rows], 5, NAME_CAP)
    tw = column_width([row["tensor"] for row in rows], 6, NAME_CAP)
    lines = ["", f"sensitivity: output similarity with only that layer at higher precision ({S['samples']} "
                 f"sample(s); baseline cosine {b['cosine']:.5f}, SQNR {fmt_value(b['sqnr_db'], '{:.1f}')} dB)"
                 + (f"; {len(S['layers'])} layer(s) measured, {len(S['not_measured'])} left out by "
                    f"--candidates {S['candidates']} (lowest isolated SQNR first)" if S.get("not_measured") else ""),
             f"  {'rank':>4} {'layer':{lw}s} {'tensor':{tw}s} {'as':6s} {'cosine':>8s} {'gain dB':>8s} "
             f"{'+cycles':>9s}  findings"]
    for rank, row in enumerate(rows, 1):
        fl = ",".join(sorted({f["rule"] for f in layer_findings(r, row["layer"])
                              if f["severity"] == "error" and not f["quantization_setting"]}))
        cyc = "-" if row["delta_cycles"] is None else f"{row['delta_cycles']:+,.0f}"
        lines.append(f"  {rank:>4} {cut_middle(row['layer'], lw):{lw}s} {cut_middle(row['tensor'], tw):{tw}s} "
                     f"{row['mode']:6s} {row['cosine']:.5f} {fmt_value(row['gain_sqnr_db'], '{:+8.2f}')} {cyc:>9s}  "
                     f"{fl}")
    if not cands:
        lines.append("  (no layer gains from higher precision alone)")
    if rest:
        lines.append(f"  ({len(cands)} promotion candidate(s); {len(rest)} other layer(s) gain nothing or are the "
                     f"float reference's own output, an upper bound: JSON, HTML)")
    return lines


def _advisor_curve(A: dict) -> list[str]:
    bud = A["budget"]
    what = (f"{bud['max_slowdown']}x the estimated cycles" if bud.get("max_slowdown") else
            f"{bud['budget_ms']} ms")
    nseg = sum(1 for pnt in A["curve"] if pnt.get("kind") == "segment")
    lines = [f"int16 advisor: budget {what} = {bud['cycles']:,.0f} cycles; {len(A['order'])} candidate(s) "
             f"(int16 allowed, positive gain), greedy by gain per added cycle"
             + (f", and {nseg} contiguous segment(s) of all int16-allowed layers" if nseg else "")
             + "; every point measured",
             f"  {'k':>3} {'cycles':>12s} {'slowdown':>8s} {'cosine':>8s} {'SQNR dB':>8s}  "
             f"last promoted / segment"]
    hidden, headed = 0, False
    for pnt in A["curve"]:
        if pnt.get("kind") == "segment" and not pnt.get("chosen") and not pnt["pareto"]:
            hidden += 1
            continue
        if pnt.get("kind") == "segment" and not headed:  # k restarts: a segment's own count, not a prefix's
            lines.append("  contiguous segments (k: the segment's layers):")
            headed = True
        mark = "*" if pnt.get("chosen") else ("p" if pnt["pareto"] else " ")
        over = "" if pnt["within_budget"] else "  over budget"
        lines.append(f"  {pnt['k']:>3} {pnt['cycles']:>12,.0f} {pnt['slowdown']:8.3f} {pnt['cosine']:.5f} "
                     f"{fmt_value(pnt['sqnr_db'], '{:8.2f}')} {mark} {point_label(pnt)}"
                     f"{over}")
    lines.append("  (* chosen, p Pareto-optimal"
                 + (f"; {hidden} dominated segment point(s) not shown: JSON, HTML" if hidden else "") + ")")
    ch = [A.get("output_names", {}).get(t, t) for t in A["chosen"]]
    shown = ", ".join(ch[:12]) + (f", ... ({len(ch) - 12} more)" if len(ch) > 12 else "")
    seg = A.get("chosen_point") or {}
    lines.append(f"  chosen: {len(ch)} tensor(s) to int16"
                 + (f" ({seg['label']})" if seg.get("kind") == "segment" else "") + (": " + shown if ch else ""))
    return lines


def settings_call(settings: dict) -> str:
    """The quantize_static arguments of a re-quantization (``QuantSettings.to_dict`` form), extra_options apart."""
    return (f"activation_type=QuantType.{settings['activation_type']}, weight_type=QuantType."
            f"{settings['weight_type']}, per_channel={settings['per_channel']}"
            + (", reduce_range=True" if settings.get("reduce_range") else ""))


def verdict_line(rq: dict) -> str:
    """The re-quantized model's verdict: deployable on the board or the rules that block it, and its cosine."""
    v, a, b = rq["check"], rq["after"], rq["before"]
    acc = f"cosine {a['cosine']:.5f} (was {b['cosine']:.5f})"
    if v["deployable"]:
        return f"deployable on {v['board']}; {acc}"
    first = v["blocking"][0]
    rules = ", ".join(f"{x['rule']} x{x['count']}" for x in v["blocking"])
    why = ("no quantization setting fixes it" if not any(x["quantization_setting"] for x in v["blocking"]) else
           "a quantization setting the re-quantization did not reach")
    return (f"NOT deployable on {v['board']}: blocked by {rules} ({why}; e.g. {first['example'].rstrip('.')}); {acc}")


def _requantized(rq: dict) -> list[str]:
    if rq.get("error"):
        return [f"re-quantized: {rq['error']}"]
    b, a = rq["before"], rq["after"]
    return [f"re-quantized with the fix ({rq['calibration']}) -> {rq['model']}"
            + ("\n  (the fix is empty: the model re-quantized with its own settings, a check that "
               "re-quantization reproduces it)" if rq.get("fix_empty") else ""),
            f"  quantize_static({settings_call(rq['settings'])}, extra_options=the model's own plus the fix)"
            + (f"\n  (re-quantized twice: the board's op limits still refused {', '.join(rq['tensor_overrides'])}; "
               f"the fix now sets them per tensor)" if rq.get("tensor_overrides") else ""),
            f"  measured on {rq['samples']} sample(s): cosine {b['cosine']:.5f} -> {a['cosine']:.5f} "
            f"(worst sample {b['cosine_min_sample']:.5f} -> {a['cosine_min_sample']:.5f}), SQNR "
            f"{fmt_value(b['sqnr_db'], '{:.1f}')} -> {fmt_value(a['sqnr_db'], '{:.1f}')} dB; cycles "
            f"{fmt_value(rq['cycles_before'], '{:,.0f}')} -> {fmt_value(rq['cycles_after'], '{:,.0f}')}; "
            f"bias.saturated findings after: {rq['bias_saturated_after']}",
            f"  verdict: {verdict_line(rq)}"]


def cost_note(A: dict) -> str | None:
    """When the re-quantized model took the board's settings and lost accuracy (more than 1 dB of output SQNR,
    else cosine): the int16 advice was measured on the model as it was, so say where advice on what the board
    takes comes from."""
    rq, bs = A.get("requantized") or {}, A.get("board_settings") or {}
    if not rq or rq.get("error") or not bs.get("changes"):
        return None
    b, a = rq["before"].get("sqnr_db"), rq["after"].get("sqnr_db")
    lost = b - a > 1.0 if b is not None and a is not None else rq["after"]["cosine"] < rq["before"]["cosine"] - 1e-4
    if not lost:
        return None
    return (f"the board's settings cost accuracy here (cosine {rq['before']['cosine']:.5f} -> "
            f"{rq['after']['cosine']:.5f}); the int16 advice was measured on the model as it was: `npu-sim report "
            f"{rq['model']}` (same --float and board) measures and advises on what the board takes")


def _board_changes(A: dict) -> list[str]:
    bs = A.get("board_settings")
    if not bs or not bs["changes"]:
        return []
    return [f"the board {bs['board']} requires (re-quantize with these; the extra_options ones are in the fix): "
            + "; ".join(bs["changes"])]


def _channels(channels: list) -> str:
    return "[" + ", ".join(map(str, channels[:6])) + (f", … {len(channels) - 6} more]" if len(channels) > 6 else "]")


def _advisor(A: dict) -> list[str]:
    lines = [""]
    if A.get("skipped"):
        lines.append(f"int16 advisor: {A['skipped']}")
    elif A.get("curve"):
        lines += _advisor_curve(A)
    wc = A.get("weight_int16")
    if wc:
        lines.append(f"int16 weights: {len(wc)} layer(s) whose activations are already 16-bit and whose float "
                     f"sensitivity gains >= 1 dB (their 8-bit weights are the error): "
                     + ", ".join(f"{w['layer']} ({w['weight']}, {w['gain_sqnr_db']:+.2f} dB)" for w in wc)
                     + " -> weights at int16 in the fix (measured only re-quantized)")
    rem = A.get("bias_remedy")
    if rem:
        lines.append("bias remedy (not a precision problem: int16 cannot fix a clipped bias): "
                     + ", ".join(f"{l['node']} ({l['tensor']}) ch {_channels(l['channels'])}"
                               for l in rem["layers"]))
        lines.append(f"  fix: {rem['remedy']}")
    lines += _board_changes(A)
    if A.get("fix"):
        lines.append(f"  fix as quantize_static extra_options: {fix_summary(A['fix'])} (the JSON: --overrides FILE "
                     f"and --json)")
    rq = A.get("requantized")
    if rq:
        lines += _requantized(rq)
    note = cost_note(A)
    if note:
        lines.append(f"  note: {note}")
    return lines


def fix_summary(fix: dict) -> str:
    """The fix's extra_options in a line: each distinct tensor override once with how many tensors take it (they
    are named in the lines above), every other option as it is."""
    parts = []
    for key, value in fix.items():
        if key == "TensorQuantOverrides" and isinstance(value, dict):
            groups: dict[str, list[str]] = {}
            for tensor, override in value.items():
                groups.setdefault(json.dumps(override), []).append(tensor)
            parts += [f"TensorQuantOverrides {spec} for " + (repr(names[0]) if len(names) == 1
                                                               else f"{len(names)} tensors")
                      for spec, names in groups.items()]
        else:
            parts.append(f"{key}={json.dumps(value)}")
    return cut_end("; ".join(parts), FIX_CHARS)


def format_advice(r: AccuracyReport, top: int = 5) -> list[str]:
    """The advice lines of the summary: checks, latency, sensitivity and the int16 advisor (those measured)."""
    lines: list[str] = []
    if r.checks is not None:
        lines += _checks(r)
    if r.latency is not None:
        lines += _latency(r)
    if r.sensitivity is not None:
        lines += _sensitivity(r, top)
    if r.advisor is not None:
        lines += _advisor(r.advisor)
    return lines
