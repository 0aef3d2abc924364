"""The first section of the HTML report (``npu_sim.render.report_html``): the verdict and the fix, before the
evidence — whether the board takes the model as it is, what to change (the quantization settings the board
requires, the bias remedy, the int16 promotion the advisor measured, what no quantization setting fixes), how (the
quantize_static call and its extra_options), and what the re-quantized model measured (deployable or blocked, its
cosine). Every number comes from the report; this module only formats them.
"""
from __future__ import annotations

import html
import json

from npu_sim.analysis.accuracy import AccuracyReport
from npu_sim.render.check import report_rule_groups
from npu_sim.render.report_text import cost_note, fmt_value, settings_call, verdict_line
from npu_sim.render.text import cut_middle

_e = html.escape
_NAMES = 8          # tensors named in a promotion before "and N more"
_FIX_SHOWN = 1200   # characters of the fix JSON shown open; a longer one is collapsed


def _worst_output(r: AccuracyReport):
    return min(r.outputs, key=lambda o: o.metrics.cosine) if r.outputs else None


def _as_is(r: AccuracyReport) -> str:
    c = r.checks
    if c is None:
        fit = f"board {_e(r.board)} (not checked)"
    elif c["deployable"]:
        fit = f"<b class='ok'>deployable</b> on board {_e(c['board'])}"
    else:
        rules = ", ".join(f"{_e(rule)} ×{len(items)}" for sev, rule, items in report_rule_groups(c) if sev == "error")
        fit = f"<b class='no'>not deployable</b> on board {_e(c['board'])}: {c['errors']} error(s) ({rules})"
    o = _worst_output(r)
    acc = "" if o is None else (f"; output {_e(o.name)}: cosine <b>{fmt_value(o.metrics.cosine)}</b>, SQNR "
                                f"{fmt_value(o.metrics.sqnr_db, '{:.1f}')} dB against the float reference")
    col = r.collapse
    where = "" if col is None else (f"; accuracy collapses at <a href='#t{col.index}'>{_e(col.tensor)}</a> "
                                    f"({_e(col.op)} {_e(col.node)}, {_e(col.cause)})")
    return f"<p><b>As it is</b>: {fit}{acc}{where}.</p>"


def _promotion(A: dict, samples: int) -> str | None:
    ch, p, base = A.get("chosen") or [], A.get("chosen_point"), A.get("baseline") or {}
    if not ch or not p:
        return None
    names = ", ".join(_e(t) for t in ch[:_NAMES]) + (f" and {len(ch) - _NAMES} more" if len(ch) > _NAMES else "")
    return (f"<b>Promote {len(ch)} tensor(s) to int16</b> ({names}): measured on {samples} sample(s), cosine "
            f"{fmt_value(base.get('cosine'))} → <b>{fmt_value(p['cosine'])}</b>, SQNR "
            f"{fmt_value(base.get('sqnr_db'), '{:.2f}')} → {fmt_value(p['sqnr_db'], '{:.2f}')} dB, "
            f"{p['slowdown']:.3f}× the cycles (within the budget; <a href='#advisor'>the curve</a>).")


def _blocking(r: AccuracyReport) -> list[str]:
    """Check errors no re-quantization fixes (not a quantization setting, not the bias the remedy fixes)."""
    if not r.checks:
        return []
    out = []
    for sev, rule, items in report_rule_groups(r.checks):
        f = items[0][2]
        if sev == "error" and not f["quantization_setting"] and rule != "bias.saturated":
            out.append(f"<b>Change the model</b> ({_e(rule)} ×{len(items)}, no quantization setting fixes it): "
                       f"{_e(f['message'])} {_e(f['fix'])}")
    return out


def _todo(r: AccuracyReport) -> list[str]:
    A = r.advisor or {}
    out = []
    changes = (A.get("board_settings") or {}).get("changes") or []
    if changes:
        out.append("<b>Quantize as the board requires</b>: " + "; ".join(_e(c) for c in changes) + ".")
    rem = A.get("bias_remedy")
    if rem:
        nodes = ", ".join(f"{_e(l['node'])} (channels {_e(str(l['channels'][:8]))})" for l in rem["layers"])
        out.append(f"<b>Keep the int32 biases in range</b> (clipped on {nodes}; onnxruntime #21000, not a precision "
                   f"problem): {_e(rem['remedy'])}.")
    promo = _promotion(A, (r.sensitivity or {}).get("samples", 0))
    if promo:
        out.append(promo)
    for w in A.get("weight_int16") or []:
        out.append(f"<b>int16 weights</b> for {_e(w['layer'])} ({_e(w['weight'])}): its activations are already "
                   f"16-bit and the op in float gains {w['gain_sqnr_db']:+.2f} dB (measured only re-quantized).")
    return out + _blocking(r)


def _fix_json(fix: dict) -> str:
    """The fix as JSON, one line per key and per TensorQuantOverrides tensor."""
    if not fix:
        return "{}"
    items = []
    for key, value in fix.items():
        if key == "TensorQuantOverrides":
            inner = ",\n".join(f"  {json.dumps(n)}: {json.dumps(e)}" for n, e in value.items())
            items.append(f' "TensorQuantOverrides": {{\n{inner}\n }}')
        else:
            items.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(items) + "\n}"


def _how(A: dict) -> list[str]:
    fix, bs = A.get("fix"), A.get("board_settings")
    if not fix and not (bs and bs["changes"]):
        return []
    call = settings_call(bs["settings"]) if bs else "the model's own settings"
    text = _fix_json(fix or {})
    out = [f"<p><b>How</b>: <code>quantize_static(float_model, out, calibration_reader, quant_format=QuantFormat.QDQ, "
           f"{_e(call)}, extra_options=FIX)</code>, FIX the quantize_static <code>extra_options</code> below "
           f"(<code>--overrides FIX.json</code> writes it, <code>npu_sim.qdq.recalibrate.load_extra_options</code> "
           f"reads it; with the model's own extra_options under it):</p>"]
    pre = f"<pre>{_e(text)}</pre>"
    if len(text) > _FIX_SHOWN:
        return out + [f"<details><summary>FIX ({len(text):,} characters)</summary>{pre}</details>"]
    return out + [pre]


def _measured(A: dict) -> list[str]:
    rq = A.get("requantized")
    if not rq:
        if A.get("fix") or (A.get("board_settings") or {}).get("changes"):
            return ["<p class='note'>Not measured yet: <code>--requantize CALIB</code> with <code>--float "
                    "FLOAT.onnx</code> re-quantizes the float model with this fix, checks it on the board and "
                    "simulates it.</p>"]
        return []
    if rq.get("error"):
        return [f"<p><b>Measured</b>: {_e(rq['error'])}</p>"]
    b, a = rq["before"], rq["after"]
    cls = "ok" if rq["check"]["deployable"] else "no"
    note = cost_note(A)
    return [f"<p><b>Measured</b> (re-quantized by onnxruntime on {_e(rq['calibration'])}, written to "
            f"<code>{_e(cut_middle(rq['model'], 80))}</code>, checked on the board and simulated on {rq['samples']} "
            f"sample(s)): <b class='{cls}'>{_e(verdict_line(rq))}</b>. Worst sample cosine "
            f"{b['cosine_min_sample']:.5f} → {a['cosine_min_sample']:.5f}, SQNR "
            f"{fmt_value(b['sqnr_db'], '{:.2f}')} → {fmt_value(a['sqnr_db'], '{:.2f}')} dB, cycles "
            f"{fmt_value(rq['cycles_before'], '{:,.0f}')} → {fmt_value(rq['cycles_after'], '{:,.0f}')}, "
            f"bias.saturated findings after: {rq['bias_saturated_after']}.</p>"] + (
        [f"<p class='note'>Note: {_e(note)}.</p>"] if note else [])


def verdict_section(r: AccuracyReport) -> list[str]:
    """The verdict and the fix (see the module docstring), as the page's first section."""
    out = ["<div class='verdict'><h2 id='verdict'>Verdict and fix</h2>", _as_is(r)]
    todo = _todo(r)
    if todo:
        out += ["<p><b>What to do</b>, cheapest first:</p><ol>"] + [f"<li>{t}</li>" for t in todo] + ["</ol>"]
    elif r.advisor is not None:
        out.append("<p><b>What to do</b>: nothing the measurements call for — the board takes the model's "
                   "quantization and no int16 promotion within the budget gains.</p>")
    if r.advisor is not None:
        out += _how(r.advisor) + _measured(r.advisor)
    out.append("</div>")
    return out
