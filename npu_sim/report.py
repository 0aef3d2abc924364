"""`npu-sim report`: the accuracy report on the command line — terminal summary, JSON (docs/REPORT_SCHEMA.md)
and a self-contained HTML page (inline SVG, no scripts, no external requests).

The measurements come from ``npu_sim.accuracy.report``; this module only formats them.
"""
from __future__ import annotations

import html
import json
import math
import sys
from pathlib import Path

from .accuracy import (SCHEMA_VERSION, AccuracyReport, LayerResult, coarse_histogram, default_workers, load_data,
                       report)
from .errors import InputError

CLI_DESCRIPTION = """\
Accuracy report: run a dataset through the board's integer program and through a float reference, and show
where accuracy is lost — per output (cosine, SQNR, MAE, top-1/top-5 agreement) and per quantized tensor
(accumulated error of the full integer run, isolated error of each op fed the float reference, in LSBs),
activation statistics and clipping, and the first layer where similarity collapses.

Float reference: --float FLOAT.onnx (the model quantize_static started from), else the QDQ model's own float
semantics (weights dequantized, activations not quantized). Both run on onnxruntime.
Data (--data): folders or files: images (.png/.jpg/.bmp, resized, scaled to [0,1], (x-mean)/std), .npy, .npz
(arrays named like the inputs, or x [+ y labels]); a leading batch dimension is split into samples.
Without --data only the bundled demo model has default data (its 360 held-out digits).
"""


def add_cli_arguments(p) -> None:
    p.add_argument("--float", dest="float_model", metavar="FLOAT.onnx",
                   help="float ONNX model the QDQ model was quantized from (default: the QDQ model's float semantics)")
    p.add_argument("--data", nargs="+", action="extend", default=[], metavar="DIR|FILE",
                   help="folders or files of images, .npy or .npz (default: the demo's digits, demo model only)")
    p.add_argument("--mean", default="0", help="image normalization mean, per channel, comma separated")
    p.add_argument("--std", default="1", help="image normalization std, per channel, comma separated")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="use only the first N samples")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="worker processes (default: all cores); results do not depend on it")
    p.add_argument("--collapse-cosine", type=float, default=0.99, metavar="C",
                   help="accumulated cosine below which a tensor counts as collapsed (default 0.99)")
    p.add_argument("--top", type=int, default=5, metavar="N", help="worst layers to list (default 5)")
    a = p.add_argument_group("sensitivity, int16 advisor and fix")
    a.add_argument("--no-sensitivity", action="store_true",
                   help="skip the per-layer sensitivity ranking and the int16 advisor (checks, latency and the "
                        "bias remedy still run)")
    a.add_argument("--samples", type=int, default=8, metavar="N",
                   help="samples the sensitivity ranking and the advisor measure on (the first N; default 8)")
    a.add_argument("--candidates", type=int, default=None, metavar="K",
                   help="measure the sensitivity of only the K layers with the lowest isolated SQNR (a cheap proxy; "
                        "default: every layer). The advisor's segments still cover every int16-allowed layer")
    a.add_argument("--max-slowdown", type=float, default=None, metavar="X",
                   help="latency budget of the int16 advisor: at most X times the estimated cycles (default 1.2)")
    a.add_argument("--budget-ms", type=float, default=None, metavar="MS",
                   help="latency budget of the int16 advisor in milliseconds (npu_sim.estimate of the board)")
    a.add_argument("--points", type=int, default=10, metavar="N",
                   help="most accuracy-latency curve points to measure (default 10)")
    a.add_argument("--overrides", metavar="OUT.json",
                   help="write the fix: quantize_static extra_options (TensorQuantOverrides ...) as JSON")
    a.add_argument("--requantize", nargs="+", metavar="CALIB", default=None,
                   help="re-quantize the float model (--float) with the fix on this calibration data (folders or "
                        "files as for --data) and report the new model's simulated accuracy")
    a.add_argument("--calib-limit", type=int, default=None, metavar="N", help="use only N calibration samples")
    a.add_argument("--fixed-model", metavar="OUT.onnx",
                   help="where --requantize writes the new QDQ model (default: MODEL.fixed.qdq.onnx in the "
                        "current folder)")
    p.add_argument("--html", metavar="OUT.html", help="write the HTML report")
    p.add_argument("--json", metavar="OUT.json", help="write the JSON report (schema: docs/REPORT_SCHEMA.md)")


class _Progress:
    def __init__(self, stream=None, label: str = "report", unit: str = "samples"):
        self.label, self.unit = label, unit
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last = -1

    def __call__(self, done: int, total: int) -> None:
        pct = int(100 * done / max(total, 1))
        if self.tty:
            bar = "#" * (pct // 4) + "." * (25 - pct // 4)
            self.stream.write(f"\r{self.label}: [{bar}] {done}/{total} {self.unit}")
            if done >= total:
                self.stream.write("\n")
            self.stream.flush()
        elif pct // 10 != self.last // 10 or done >= total:
            self.stream.write(f"{self.label}: {done}/{total} {self.unit} ({pct}%)\n")
            self.stream.flush()
        self.last = pct


def cli_main(args, shapes) -> int:
    if args.workers is not None and args.workers < 1:
        raise InputError("--workers must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise InputError("--limit must be at least 1")
    if not 0.0 < args.collapse_cosine <= 1.0:
        raise InputError("--collapse-cosine must lie in (0, 1]")
    for opt, path in (("--html", args.html), ("--json", args.json)):
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"{opt} {path!r}: folder {str(Path(path).parent)!r} does not exist")
    if args.candidates is not None and args.candidates < 0:
        raise InputError("--candidates must be at least 0")
    if args.samples < 1:
        raise InputError("--samples must be at least 1")
    if args.max_slowdown is not None and args.max_slowdown < 1.0:
        raise InputError("--max-slowdown must be at least 1.0 (1.2 = 20% slower than now)")
    if args.budget_ms is not None and args.budget_ms <= 0:
        raise InputError("--budget-ms must be positive")
    if args.requantize and not args.float_model:
        raise InputError("--requantize re-quantizes the float model: give it with --float FLOAT.onnx")
    for opt, path in (("--overrides", args.overrides), ("--fixed-model", args.fixed_model)):
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"{opt} {path!r}: folder {str(Path(path).parent)!r} does not exist")
    dset = load_data(args.model, args.data or None, shapes or None, args.mean, args.std, args.limit)
    calib = None
    if args.requantize:
        calib = load_data(args.model, args.requantize, shapes or None, args.mean, args.std, args.calib_limit)
    r = report(args.model, data=dset, float_model=args.float_model, board=args.board,
               input_shapes=shapes or None, workers=args.workers or default_workers(), mean=args.mean,
               std=args.std, limit=args.limit, collapse_cosine=args.collapse_cosine, progress=_Progress())
    from .advisor import AdviceOptions, annotate
    opts = AdviceOptions(samples=args.samples, sensitivity=not args.no_sensitivity,
                         max_slowdown=args.max_slowdown if args.max_slowdown is not None or args.budget_ms is None
                         else None, budget_ms=args.budget_ms, max_points=max(2, args.points),
                         candidates=args.candidates,
                         overrides=args.overrides, calibration=calib.samples if calib else None,
                         calibration_source=calib.description if calib else "", fixed_model=args.fixed_model,
                         eval_samples=dset.samples if calib else None)
    if opts.max_slowdown is None and opts.budget_ms is None:
        opts.max_slowdown = 1.2
    annotate(r, dset.samples, args.board, args.float_model, shapes or None, opts,
             progress=_Progress(label="sensitivity", unit="layers"))
    print(format_summary(r, args.top))
    if args.overrides:
        print(f"fix (quantize_static extra_options) -> {args.overrides}")
    if args.json:
        Path(args.json).write_text(json.dumps(r.to_dict(), indent=1))
        print(f"JSON report -> {args.json}")
    if args.html:
        Path(args.html).write_text(to_html(r))
        print(f"HTML report -> {args.html}")
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Terminal


def _f(v, fmt="{:.5f}") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return fmt.format(v)


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def format_summary(r: AccuracyReport, top: int = 5) -> str:
    lines = [f"npu-sim report: {r.model} on board {r.board}, {r.samples} sample(s) ({r.data})",
             f"float reference: {r.reference} ({r.reference_source})", "", "outputs (integer vs float reference)"]
    for o in r.outputs:
        m = o.metrics
        line = (f"  {o.name} [{'x'.join(map(str, o.shape))}]  cosine {_f(m.cosine)} (worst sample "
                f"{_f(o.cosine_min_sample)})  SQNR {_f(m.sqnr_db, '{:.1f}')} dB  MAE {m.mae:.4g}  "
                f"max|err| {m.max_abs:.4g}")
        if o.top1_agreement is not None:
            line += f"\n    top-1 agreement {_pct(o.top1_agreement)}"
            if o.top5_agreement is not None:
                line += f", top-5 agreement {_pct(o.top5_agreement)}"
        if o.accuracy_float is not None:
            line += f"; label accuracy float {_pct(o.accuracy_float)}, integer {_pct(o.accuracy_int)}"
        lines.append(line)
    head = f"  {'#':>3} {'tensor':32s} {'op':18s} {'cosine':>8s} {'SQNR dB':>8s} {'mean LSB':>8s} {'max LSB':>8s} {'clip %':>7s}"

    def row(l: LayerResult, m) -> str:
        return (f"  {l.index:>3} {l.tensor[:32]:32s} {l.op[:18]:18s} {_f(m.cosine)} {_f(m.sqnr_db, '{:8.1f}')} "
                f"{m.mean_lsb:8.3f} {m.max_lsb:8.2f} {100 * l.stats.clip_rate:7.3f}")

    lines += ["", f"worst {top} tensors, accumulated error (full integer run vs float reference)", head]
    lines += [row(l, l.accumulated) for l in r.worst("accumulated", top)]
    lines += ["", f"worst {top} tensors, isolated error (the op alone, fed the float reference inputs)", head]
    lines += [row(l, l.isolated) for l in r.worst("isolated", top)]
    lines.append("")
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
    if r.unmatched:
        lines.append(f"not compared (no float reference tensor): {len(r.unmatched)}: "
                     + ", ".join(r.unmatched[:5]) + (" ..." if len(r.unmatched) > 5 else ""))
    for node, count in r.overflows.items():
        lines.append(f"warning: node {node!r}: {count} accumulator value(s) overflowed the board's accumulator")
    lines.append(f"({len(r.layers)} tensors compared in {r.seconds:.1f} s)")
    lines += format_advice(r, top)
    return "\n".join(lines)


def _point_label(p: dict) -> str:
    if p.get("label"):
        return p["label"]
    return p["tensors"][-1] if p["tensors"] else "-"


def _rule_groups(checks: dict) -> list[tuple[str, str, list[tuple[str, list[str], dict]]]]:
    """(severity, rule, [(node, tensors, finding)]) for the check findings, errors first."""
    groups: dict[tuple[str, str], list] = {}
    for lay in checks["layers"]:
        for f in lay["findings"]:
            groups.setdefault((f["severity"], f["rule"]), []).append((lay["node"], lay["tensors"], f))
    order = {"error": 0, "warning": 1, "info": 2}
    return [(sev, rule, items) for (sev, rule), items in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 3),
                                                                                                   kv[0][1]))]


def layer_findings(r: AccuracyReport, node: str) -> list[dict]:
    if not r.checks:
        return []
    return next((l["findings"] for l in r.checks["layers"] if l["node"] == node), [])


def format_advice(r: AccuracyReport, top: int = 5) -> list[str]:
    lines: list[str] = []
    if r.checks is not None:
        c = r.checks
        lines += ["", f"check findings on board {c['board']}: {c['errors']} error(s), {c['warnings']} warning(s), "
                      f"{c['infos']} info -> {'deployable' if c['deployable'] else 'NOT DEPLOYABLE'}"]
        for f in c["model_findings"]:
            lines.append(f"  {f['severity']:7s} {f['rule']} (model)")
        for sev, rule, items in _rule_groups(c):
            shown = []
            for node, tensors, f in items[:4]:
                ch = f["values"].get("channels")
                shown.append(f"{node}" + (f" ({tensors[0]})" if tensors else "") + (f" ch {ch}" if ch else ""))
            lines.append(f"  {sev:7s} {rule} on {len(items)} node(s): " + "; ".join(shown)
                         + (" ..." if len(items) > 4 else ""))
        if r.collapse:
            hits = layer_findings(r, r.collapse.node)
            hits = [f for f in hits if f["severity"] in ("error", "warning") and not f["rule"].startswith(("dtype.",
                                                                                                       "zero_point."))]
            if hits:
                lines.append(f"  at the collapse ({r.collapse.tensor}, {r.collapse.node}): "
                             + "; ".join(f"{f['rule']}: {f['message']}" for f in hits[:2]))
    if r.latency is not None:
        L = r.latency
        hot = sorted(L["layers"], key=lambda x: -x["cycles"])[:3]
        lines += ["", f"latency (npu_sim.estimate, board {L['board']}): {L['total_cycles']:,.0f} cycles = "
                      f"{L['latency_ms']:.3f} ms; hottest: "
                      + ", ".join(f"{h['node']} {h['share_pct']:.1f}%" for h in hot)]
    if r.sensitivity is not None:
        S = r.sensitivity
        b = S["baseline"]
        lines += ["", f"sensitivity: output similarity with only that layer at higher precision ({S['samples']} "
                      f"sample(s); baseline cosine {b['cosine']:.5f}, SQNR {_f(b['sqnr_db'], '{:.1f}')} dB)"
                      + (f"; {len(S['layers'])} layer(s) measured, {len(S['not_measured'])} left out by "
                         f"--candidates {S['candidates']} (lowest isolated SQNR first)" if S.get("not_measured") else ""),
                  f"  {'rank':>4} {'layer':24s} {'tensor':28s} {'as':6s} {'cosine':>8s} {'gain dB':>8s} "
                  f"{'+cycles':>9s}  findings"]
        for row in S["layers"][:top]:
            fl = ",".join(sorted({f["rule"] for f in layer_findings(r, row["layer"])
                                  if f["severity"] == "error" and not f["rule"].startswith(("dtype.", "zero_point."))}))
            mode = "int16" if row["mode"] == "int16" else ("float" if row["mode"] == "float" else "float*")
            cyc = "-" if row["delta_cycles"] is None else f"{row['delta_cycles']:+,.0f}"
            lines.append(f"  {row['rank']:>4} {row['layer'][:24]:24s} {row['tensor'][:28]:28s} {mode:6s} "
                         f"{row['cosine']:.5f} {_f(row['gain_sqnr_db'], '{:+8.2f}')} {cyc:>9s}  {fl}")
        if any(row["mode"] != "int16" and row["mode"] != "float" for row in S["layers"]):
            lines.append("  (float*: its inputs have no float-reference tensor, so the float reference replaced its "
                         "output: an upper bound, ranked last)")
    A = r.advisor
    if A is not None:
        lines.append("")
        if A.get("skipped"):
            lines.append(f"int16 advisor: {A['skipped']}")
        elif A.get("curve"):
            bud = A["budget"]
            what = (f"{bud['max_slowdown']}x the estimated cycles" if bud.get("max_slowdown") else
                    f"{bud['budget_ms']} ms")
            nseg = sum(1 for pnt in A["curve"] if pnt.get("kind") == "segment")
            lines.append(f"int16 advisor: budget {what} = {bud['cycles']:,.0f} cycles; {len(A['order'])} candidate(s) "
                         f"(int16 allowed, positive gain), greedy by gain per added cycle"
                         + (f", and {nseg} contiguous segment(s) of all int16-allowed layers" if nseg else "")
                         + "; every point measured")
            lines.append(f"  {'k':>3} {'cycles':>12s} {'slowdown':>8s} {'cosine':>8s} {'SQNR dB':>8s}  last promoted / segment")
            hidden = 0
            for pnt in A["curve"]:
                if pnt.get("kind") == "segment" and not pnt.get("chosen") and not pnt["pareto"]:
                    hidden += 1
                    continue
                mark = "*" if pnt.get("chosen") else ("p" if pnt["pareto"] else " ")
                over = "" if pnt["within_budget"] else "  over budget"
                lines.append(f"  {pnt['k']:>3} {pnt['cycles']:>12,.0f} {pnt['slowdown']:8.3f} {pnt['cosine']:.5f} "
                             f"{_f(pnt['sqnr_db'], '{:8.2f}')} {mark} {_point_label(pnt)}"
                             f"{over}")
            lines.append("  (* chosen, p Pareto-optimal" + (f"; {hidden} dominated segment point(s) not shown: JSON, HTML"
                                                                 if hidden else "") + ")")
            ch = A["chosen"]
            shown = ", ".join(ch[:12]) + (f", ... ({len(ch) - 12} more)" if len(ch) > 12 else "")
            seg = A.get("chosen_point") or {}
            lines.append(f"  chosen: {len(ch)} tensor(s) to int16" + (f" ({seg['label']})" if seg.get("kind") ==
                                                                       "segment" else "") + (": " + shown if ch else ""))
        wc = A.get("weight_int16")
        if wc:
            lines.append(f"int16 weights: {len(wc)} layer(s) whose activations are already 16-bit and whose float "
                         f"sensitivity gains >= 1 dB (their 8-bit weights are the error): "
                         + ", ".join(f"{w['layer']} ({w['weight']}, {w['gain_sqnr_db']:+.2f} dB)" for w in wc)
                         + " -> weights at int16 in the fix (measured only re-quantized)")
        rem = A.get("bias_remedy")
        if rem:
            lines.append("bias remedy (not a precision problem: int16 cannot fix a clipped bias): "
                         + ", ".join(f"{l['node']} ({l['tensor']}) ch {l['channels'][:6]}" for l in rem["layers"]))
            lines.append(f"  fix: {rem['remedy']}")
        if A.get("fix"):
            lines.append(f"  fix as quantize_static extra_options: {json.dumps(A['fix'])[:300]}")
        rq = A.get("requantized")
        if rq:
            if rq.get("error"):
                lines.append(f"re-quantized: {rq['error']}")
            else:
                b, a = rq["before"], rq["after"]
                lines.append(f"re-quantized with the fix ({rq['calibration']}) -> {rq['model']}"
                             + ("\n  (the fix is empty: the model re-quantized with its own settings, a check that "
                                "re-quantization reproduces it)" if rq.get("fix_empty") else ""))
                lines.append(f"  measured on {rq['samples']} sample(s): cosine {b['cosine']:.5f} -> {a['cosine']:.5f} "
                             f"(worst sample {b['cosine_min_sample']:.5f} -> {a['cosine_min_sample']:.5f}), SQNR "
                             f"{_f(b['sqnr_db'], '{:.1f}')} -> {_f(a['sqnr_db'], '{:.1f}')} dB; cycles "
                             f"{_f(rq['cycles_before'], '{:,.0f}')} -> {_f(rq['cycles_after'], '{:,.0f}')}; "
                             f"bias.saturated findings after: {rq['bias_saturated_after']}")
    return lines


# ---------------------------------------------------------------------------------------------------------------
# HTML

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f0f0f0}td.l,th.l{text-align:left}tr.bad td{background:#fde2e2}tr.collapse td{background:#f9c0c0}
.note{color:#555;font-size:13px}svg{background:#fff;border:1px solid #ddd;margin:4px}
.hists{display:flex;flex-wrap:wrap}.legend{font-size:12px}
"""
_ACC, _ISO, _FLT, _INT = "#c0392b", "#2471a3", "#7f8c8d", "#e67e22"


def _scale(v, a, b, lo, hi):
    return lo if b == a else lo + (v - a) * (hi - lo) / (b - a)


def _polyline(xs, ys, color) -> str:
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>'


def svg_curve(layers: list[LayerResult], metric: str, title: str, collapse_index: int | None = None,
              width: int = 1100, height: int = 260) -> str:
    """Per-layer curve of ``metric`` ("cosine" or "sqnr_db") for accumulated and isolated error."""
    left, right, top, bottom = 60, 10, 24, 40
    n = len(layers)

    def val(m):
        v = getattr(m, metric)
        if metric == "sqnr_db" and not math.isfinite(v):
            return 100.0 if v > 0 else -20.0
        return v

    acc = [val(l.accumulated) for l in layers]
    iso = [val(l.isolated) for l in layers]
    vals = acc + iso
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    if metric == "cosine":
        hi = 1.0
        lo = min(lo, 0.999)
    pad = (hi - lo) * 0.05 or 0.01
    lo, hi = lo - pad, hi + pad
    xs = [_scale(i, 0, max(n - 1, 1), left, width - right) for i in range(n)]
    ya = [_scale(v, lo, hi, height - bottom, top) for v in acc]
    yi = [_scale(v, lo, hi, height - bottom, top) for v in iso]
    parts = [f'<svg class="plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-size="13">{html.escape(title)}</text>']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        y = _scale(v, lo, hi, height - bottom, top)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
                     f'{v:.5f}</text>' if metric == "cosine" else
                     f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{v:.1f}</text>')
    step = max(1, n // 25)
    for i in range(0, n, step):
        parts.append(f'<text x="{xs[i]:.1f}" y="{height - bottom + 14}" font-size="10" text-anchor="middle">{i}</text>')
    if collapse_index is not None and 0 <= collapse_index < n:
        x = xs[collapse_index]
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" stroke="#000" '
                     f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{top + 10}" font-size="10">collapse</text>')
    parts.append(_polyline(xs, ya, _ACC))
    parts.append(_polyline(xs, yi, _ISO))
    for x, y, l in zip(xs, ya, layers):
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{_ACC}"><title>{html.escape(l.tensor)}: '
                     f'accumulated {getattr(l.accumulated, metric):.6g}</title></circle>')
    for x, y, l in zip(xs, yi, layers):
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{_ISO}"><title>{html.escape(l.tensor)}: '
                     f'isolated {getattr(l.isolated, metric):.6g}</title></circle>')
    parts.append(f'<text x="{width - right - 230}" y="16" font-size="11" fill="{_ACC}">— accumulated</text>'
                 f'<text x="{width - right - 120}" y="16" font-size="11" fill="{_ISO}">— isolated</text>'
                 f'<text x="{(left + width) / 2:.0f}" y="{height - 8}" font-size="11" text-anchor="middle">'
                 f'tensor # (execution order)</text></svg>')
    return "".join(parts)


def svg_histogram(lay: LayerResult, width: int = 520, height: int = 200) -> str:
    """Float reference vs integer values of one tensor, in LSB units, log-scaled counts."""
    h = coarse_histogram(lay, 60)
    edges, hf, hq = h["lsb_edges"], h["float_counts"], h["integer_counts"]
    left, right, top, bottom = 40, 10, 24, 34
    parts = [f'<svg class="hist" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-size="12">{html.escape(lay.tensor[:60])} ({lay.op}, cos '
             f'{lay.accumulated.cosine:.5f})</text>']
    if edges:
        peak = math.log10(max(max(hf), max(hq), 1) + 1)
        nb = len(hf)
        bw = (width - left - right) / nb
        for i in range(nb):
            x = left + i * bw
            for j, (cnt, color) in enumerate(((hf[i], _FLT), (hq[i], _INT))):
                hgt = (height - top - bottom) * math.log10(cnt + 1) / peak if peak else 0
                parts.append(f'<rect x="{x + j * bw / 2:.1f}" y="{height - bottom - hgt:.1f}" width="{bw / 2:.1f}" '
                             f'height="{hgt:.1f}" fill="{color}"/>')
        for k in range(5):
            i = round(k * nb / 4)
            x = left + i * bw
            parts.append(f'<text x="{x:.1f}" y="{height - bottom + 12}" font-size="10" text-anchor="middle">'
                         f'{edges[min(i, nb)]:.0f}</text>')
    parts.append(f'<text x="{left}" y="{height - 6}" font-size="10">quantized units (LSB); bars: '
                 f'</text><text x="{left + 175}" y="{height - 6}" font-size="10" fill="{_FLT}">float</text>'
                 f'<text x="{left + 210}" y="{height - 6}" font-size="10" fill="{_INT}">integer</text>'
                 f'<text x="{left + 255}" y="{height - 6}" font-size="10">(log counts)</text></svg>')
    return "".join(parts)


def svg_bars(labels: list[str], values: list[float], title: str, unit: str, color: str = "#2471a3",
             width: int = 1100, bar_h: int = 14, notes: list[str] | None = None) -> str:
    """Horizontal bar chart (one bar per label; negative values to the left of the axis)."""
    left, right, top = 260, 120, 26
    n = len(values)
    height = top + n * (bar_h + 3) + 24
    lo, hi = min([0.0] + values), max([0.0] + values)
    span = (hi - lo) or 1.0
    x0 = left + (0 - lo) / span * (width - left - right)
    parts = [f'<svg class="bars" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-size="13">{html.escape(title)}</text>',
             f'<line x1="{x0:.1f}" y1="{top - 2}" x2="{x0:.1f}" y2="{height - 20}" stroke="#999"/>']
    for i, (lab, v) in enumerate(zip(labels, values)):
        y = top + i * (bar_h + 3)
        x1 = left + (min(v, 0) - lo) / span * (width - left - right)
        w = abs(v) / span * (width - left - right)
        note = (notes or [""] * n)[i]
        parts.append(f'<text x="{left - 6}" y="{y + bar_h - 3}" font-size="11" text-anchor="end">'
                     f'{html.escape(lab[:40])}</text><rect x="{x1:.1f}" y="{y}" width="{max(w, 0.5):.1f}" '
                     f'height="{bar_h}" fill="{color}"><title>{html.escape(lab)}: {v:.6g} {unit}</title></rect>'
                     f'<text x="{max(x1 + w, x0) + 4:.1f}" y="{y + bar_h - 3}" font-size="10">{v:.4g} {unit} '
                     f'{html.escape(note)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_pareto(curve: list[dict], budget: float | None, width: int = 700, height: int = 320) -> str:
    """Accuracy-latency curve: measured points (cycles, SQNR), the chosen one ringed, the budget dashed."""
    left, right, top, bottom = 70, 20, 26, 44
    xs = [p["cycles"] for p in curve] + ([budget] if budget else [])
    ys = [p["sqnr_db"] if p["sqnr_db"] is not None else 100.0 for p in curve]
    xlo, xhi = min(xs), max(xs)
    ylo, yhi = min(ys), max(ys)
    xpad, ypad = (xhi - xlo) * 0.05 or max(1.0, xhi * 0.01), (yhi - ylo) * 0.1 or 0.5
    xlo, xhi, ylo, yhi = xlo - xpad, xhi + xpad, ylo - ypad, yhi + ypad
    X = lambda v: _scale(v, xlo, xhi, left, width - right)  # noqa: E731
    Y = lambda v: _scale(v, ylo, yhi, height - bottom, top)  # noqa: E731
    parts = [f'<svg class="pareto" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-size="13">accuracy-latency curve (every point measured)</text>']
    for k in range(5):
        yv = ylo + (yhi - ylo) * k / 4
        xv = xlo + (xhi - xlo) * k / 4
        parts.append(f'<line x1="{left}" y1="{Y(yv):.1f}" x2="{width - right}" y2="{Y(yv):.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{Y(yv) + 4:.1f}" font-size="10" text-anchor="end">{yv:.2f}</text>'
                     f'<text x="{X(xv):.1f}" y="{height - bottom + 14}" font-size="10" text-anchor="middle">'
                     f'{xv:,.0f}</text>')
    if budget:
        parts.append(f'<line x1="{X(budget):.1f}" y1="{top}" x2="{X(budget):.1f}" y2="{height - bottom}" '
                     f'stroke="#c0392b" stroke-dasharray="5 3"/><text x="{X(budget) + 3:.1f}" y="{top + 10}" '
                     f'font-size="10" fill="#c0392b">budget</text>')
    line = [(p, v) for p, v in zip(curve, ys) if p.get("kind", "greedy") == "greedy"]
    parts.append(_polyline([X(p["cycles"]) for p, _ in line], [Y(v) for _, v in line], "#7f8c8d"))
    for p, yv in zip(curve, ys):
        color = _ACC if p.get("chosen") else (_ISO if p["pareto"] else _FLT)
        parts.append(f'<circle cx="{X(p["cycles"]):.1f}" cy="{Y(yv):.1f}" r="{6 if p.get("chosen") else 4}" '
                     f'fill="{color}"><title>{html.escape(_point_label(p))}: {p["k"]} tensor(s) int16, {p["cycles"]:,.0f} cycles, SQNR {yv:.2f} dB, '
                     f'cosine {p["cosine"]:.6f}</title></circle>')
    parts.append(f'<text x="{(left + width) / 2:.0f}" y="{height - 8}" font-size="11" text-anchor="middle">'
                 f'estimated cycles</text><text x="14" y="{(top + height) / 2:.0f}" font-size="11" '
                 f'transform="rotate(-90 14 {(top + height) / 2:.0f})" text-anchor="middle">output SQNR (dB)</text>'
                 f'<text x="{width - right - 250}" y="16" font-size="11" fill="{_ACC}">● chosen</text>'
                 f'<text x="{width - right - 180}" y="16" font-size="11" fill="{_ISO}">● Pareto</text>'
                 f'<text x="{width - right - 110}" y="16" font-size="11" fill="{_FLT}">● dominated</text></svg>')
    return "".join(parts)


def _html_advice(r: AccuracyReport) -> list[str]:
    e = html.escape
    out: list[str] = []
    if r.checks is not None:
        c = r.checks
        out.append(f"<h2>Check findings (board {e(c['board'])})</h2><p>{c['errors']} error(s), {c['warnings']} "
                   f"warning(s), {c['infos']} info: <b>{'deployable' if c['deployable'] else 'not deployable'}"
                   f"</b>. Next to the layers they affect:</p>")
        if c["layers"] or c["model_findings"]:
            out.append("<table class='findings'><tr><th class='l'>node</th><th class='l'>tensor(s)</th>"
                       "<th class='l'>severity</th><th class='l'>rule</th><th class='l'>message</th>"
                       "<th class='l'>fix</th></tr>")
            rows = [("(model)", [], f) for f in c["model_findings"]] + \
                   [(l["node"], l["tensors"], f) for l in c["layers"] for f in l["findings"]]
            order = {"error": 0, "warning": 1, "info": 2}
            rows.sort(key=lambda t: (order.get(t[2]["severity"], 3), t[2]["rule"].startswith(("dtype.", "zero_point."))))
            for node, tensors, f in rows[:200]:
                cls = "bad" if f["severity"] == "error" else ""
                out.append(f"<tr class='{cls}'><td class='l'>{e(node)}</td><td class='l'>{e(', '.join(tensors))}</td>"
                           f"<td class='l'>{e(f['severity'])}</td><td class='l'>{e(f['rule'])}</td>"
                           f"<td class='l'>{e(f['message'])}</td><td class='l'>{e(f['fix'])}</td></tr>")
            out.append("</table>")
            if len(rows) > 200:
                out.append(f"<p class='note'>{len(rows) - 200} more in the JSON report.</p>")
    if r.latency is not None:
        L = r.latency
        rows = [x for x in L["layers"] if x["cycles"] > 0]
        out.append(f"<h2>Latency breakdown</h2><p>npu_sim.estimate on board {e(L['board'])}: "
                   f"{L['total_cycles']:,.0f} cycles = {L['latency_ms']:.3f} ms.</p>")
        top = sorted(rows, key=lambda x: -x["cycles"])[:40]
        top.sort(key=lambda x: rows.index(x))
        out.append(svg_bars([f"{x['node']} ({x['op']}, {x['precision']})" for x in top], [x["cycles"] for x in top],
                            "cycles per layer" + (" (the 40 largest, in execution order)" if len(rows) > 40 else ""),
                            "cycles", "#16a085", notes=[f"{x['share_pct']:.1f}%" for x in top]))
    if r.sensitivity is not None:
        S = r.sensitivity
        b = S["baseline"]
        rows = S["layers"][:30]
        out.append(f"<h2>Sensitivity ranking</h2><p class='note'>Output SQNR gain when only that layer runs at higher "
                   f"precision — int16 where the board allows it (rewritten in the QDQ model, reloaded and "
                   f"simulated), else float — on {S['samples']} sample(s); baseline cosine {b['cosine']:.5f}, SQNR "
                   f"{_f(b['sqnr_db'], '{:.2f}')} dB.</p>")
        out.append(svg_bars([f"{x['layer']} → {x['tensor']}" for x in rows], [x["gain_sqnr_db"] or 0.0 for x in rows],
                            "output SQNR gain per layer (dB)", "dB", "#8e44ad",
                            notes=[x["mode"] for x in rows]))
        out.append("<table><tr><th>rank</th><th class='l'>layer</th><th class='l'>op</th><th class='l'>tensor</th>"
                   "<th class='l'>type</th><th class='l'>as</th><th>cosine</th><th>gain cosine</th><th>SQNR dB</th>"
                   "<th>gain dB</th><th>+cycles</th><th class='l'>findings</th><th class='l'>why this mode</th></tr>")
        for x in S["layers"]:
            fl = ", ".join(sorted({f["rule"] for f in layer_findings(r, x["layer"]) if f["severity"] == "error"}))
            out.append(f"<tr><td>{x['rank']}</td><td class='l'>{e(x['layer'])}</td><td class='l'>{e(x['op'])}</td>"
                       f"<td class='l'>{e(x['tensor'])}</td><td class='l'>{e(x['dtype'])}</td>"
                       f"<td class='l'>{e(x['mode'])}</td><td>{x['cosine']:.6f}</td><td>{x['gain_cosine']:+.2e}</td>"
                       f"<td>{_f(x['sqnr_db'], '{:.2f}')}</td><td>{_f(x['gain_sqnr_db'], '{:+.3f}')}</td>"
                       f"<td>{'-' if x['delta_cycles'] is None else format(x['delta_cycles'], '+,.0f')}</td>"
                       f"<td class='l'>{e(fl)}</td><td class='l'>{e(x['reason'])}</td></tr>")
        out.append("</table>")
    A = r.advisor
    if A is not None:
        out.append("<h2>int16 advisor and fix</h2>")
        if A.get("skipped"):
            out.append(f"<p>{e(A['skipped'])}</p>")
        if A.get("curve"):
            bud = A["budget"]
            out.append(f"<p>Budget: {bud['cycles']:,.0f} cycles"
                       + (f" ({bud['max_slowdown']}× the estimate)" if bud.get("max_slowdown") else
                          f" ({bud['budget_ms']} ms)") + f". {e(A['method'])}.</p>")
            out.append(svg_pareto(A["curve"], bud["cycles"]))
            out.append("<table><tr><th>k</th><th>cycles</th><th>slowdown</th><th>cosine</th><th>SQNR dB</th>"
                       "<th class='l'>Pareto</th><th class='l'>chosen</th><th class='l'>last promoted / segment</th></tr>")
            for p in A["curve"]:
                out.append(f"<tr><td>{p['k']}</td><td>{p['cycles']:,.0f}</td><td>{p['slowdown']:.3f}</td>"
                           f"<td>{p['cosine']:.6f}</td><td>{_f(p['sqnr_db'], '{:.2f}')}</td>"
                           f"<td class='l'>{'yes' if p['pareto'] else ''}</td>"
                           f"<td class='l'>{'chosen' if p.get('chosen') else ''}</td>"
                           f"<td class='l'>{e(_point_label(p))}</td></tr>")
            out.append("</table>")
            out.append(f"<p>Chosen: {len(A['chosen'])} tensor(s) to int16: {e(', '.join(A['chosen'])) or 'none'}.</p>")
        wc = A.get("weight_int16")
        if wc:
            out.append("<p><b>int16 weights</b> (activations already 16-bit; the op in float gains &ge; 1 dB, so its "
                       "8-bit weights are the error): " + e("; ".join(f"{w['layer']} ({w['weight']}, "
                                                                        f"{w['gain_sqnr_db']:+.2f} dB)" for w in wc))
                       + ". In the fix; measured only re-quantized.</p>")
        rem = A.get("bias_remedy")
        if rem:
            out.append("<p><b>Bias remedy</b> (int32 biases clipped, onnxruntime #21000 — not a precision problem): "
                       + e("; ".join(f"{l['node']} ({l['tensor']}) channels {l['channels'][:8]}" for l in rem["layers"]))
                       + f". Fix: {e(rem['remedy'])}.</p>")
        if A.get("fix"):
            out.append("<p>The fix, as quantize_static <code>extra_options</code> "
                       "(<code>npu_sim.requant.load_extra_options</code> reads it):</p><pre>"
                       + e(json.dumps(A["fix"], indent=1)) + "</pre>")
        rq = A.get("requantized")
        if rq and not rq.get("error"):
            b, a = rq["before"], rq["after"]
            out.append(f"<p><b>Re-quantized and simulated</b> ({e(rq['model'])}, calibration {e(rq['calibration'])}), "
                       f"on {rq['samples']} sample(s): cosine {b['cosine']:.5f} → <b>{a['cosine']:.5f}</b> (worst "
                       f"sample {b['cosine_min_sample']:.5f} → {a['cosine_min_sample']:.5f}), SQNR "
                       f"{_f(b['sqnr_db'], '{:.2f}')} → {_f(a['sqnr_db'], '{:.2f}')} dB, cycles "
                       f"{_f(rq['cycles_before'], '{:,.0f}')} → {_f(rq['cycles_after'], '{:,.0f}')}; bias.saturated "
                       f"findings after: {rq['bias_saturated_after']}.</p>")
        elif rq:
            out.append(f"<p>{e(rq['error'])}</p>")
    return out


def to_html(r: AccuracyReport, histograms: int = 4) -> str:
    e = html.escape
    c = r.collapse
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>npu-sim report: {e(Path(r.model).name)}"
           f"</title><style>{_CSS}</style></head><body>",
           f"<h1>Accuracy report: {e(r.model)} on board {e(r.board)}</h1>",
           f"<p class='note'>{r.samples} sample(s): {e(r.data)}. Float reference: {e(r.reference)} "
           f"({e(r.reference_source)}).</p>", "<h2>Outputs</h2><table><tr><th class='l'>output</th><th>shape</th>"
           "<th>cosine</th><th>worst sample cosine</th><th>SQNR dB</th><th>MAE</th><th>max |err|</th>"
           "<th>top-1 agree</th><th>top-5 agree</th><th>accuracy float</th><th>accuracy integer</th></tr>"]
    for o in r.outputs:
        m = o.metrics
        out.append(f"<tr><td class='l'>{e(o.name)}</td><td>{'x'.join(map(str, o.shape))}</td><td>{_f(m.cosine)}</td>"
                   f"<td>{_f(o.cosine_min_sample)}</td><td>{_f(m.sqnr_db, '{:.2f}')}</td><td>{m.mae:.4g}</td>"
                   f"<td>{m.max_abs:.4g}</td><td>{_pct(o.top1_agreement)}</td><td>{_pct(o.top5_agreement)}</td>"
                   f"<td>{_pct(o.accuracy_float)}</td><td>{_pct(o.accuracy_int)}</td></tr>")
    out.append("</table>")
    out.append("<h2>Collapse point</h2><p>")
    if c:
        out.append(f"<b>{e(c.tensor)}</b> ({e(c.op)} {e(c.node)}, #{c.index}) is the first tensor whose "
                   f"accumulated cosine falls below {c.threshold}: {c.accumulated_cosine:.5f} (inputs "
                   f"{c.input_cosine:.5f}, isolated {c.isolated_cosine:.5f}); cause: <b>{e(c.cause)}</b>.")
    else:
        out.append(f"None: every tensor keeps an accumulated cosine of at least {r.collapse_cosine}.")
    if r.largest_drop:
        d = r.largest_drop
        out.append(f" Largest drop: {e(d.tensor)} ({e(d.op)}), inputs {d.input_cosine:.5f} → "
                   f"{d.accumulated_cosine:.5f}.")
    if c:
        hits = [f for f in layer_findings(r, c.node) if f["severity"] in ("error", "warning")
                and not f["rule"].startswith(("dtype.", "zero_point."))]
        if hits:
            out.append(" Check findings on this layer: " + "; ".join(f"<b>{e(f['rule'])}</b>: {e(f['message'])}"
                                                                     for f in hits[:3]))
    out.append("</p>")
    out.extend(_html_advice(r))
    out.append("<h2>Per-layer similarity</h2><p class='note'>Accumulated: the full integer run against the "
               "float reference. Isolated: the op alone, fed the float reference of its inputs quantized with "
               "their quantization — its own error.</p>")
    ci = c.index if c else None
    out.append(svg_curve(r.layers, "cosine", "cosine similarity per tensor", ci))
    out.append(svg_curve(r.layers, "sqnr_db", "SQNR (dB) per tensor", ci))
    out.append("<h2>Worst tensors: float vs integer values</h2><div class='hists'>")
    for lay in r.worst("accumulated", histograms):
        out.append(svg_histogram(lay))
    out.append("</div><h2>All tensors</h2><table><tr><th>#</th><th class='l'>tensor</th><th class='l'>op</th>"
               "<th class='l'>type</th><th>scale</th><th>acc cosine</th><th>acc SQNR</th><th>acc mean LSB</th>"
               "<th>acc max LSB</th><th>iso cosine</th><th>iso SQNR</th><th>iso mean LSB</th><th>iso max LSB "
               "(in range)</th><th>float min</th><th>p1</th><th>p50</th><th>p99</th><th>p99.9</th><th>float max</th>"
               "<th>clip %</th><th>weight |max| per channel</th></tr>")
    for l in r.layers:
        cls = "collapse" if c and l.index == c.index else ("bad" if l.accumulated.cosine < r.collapse_cosine else "")
        a, i, s = l.accumulated, l.isolated, l.stats
        scale = f"{l.scale:.4g}" if isinstance(l.scale, float) else f"{min(l.scale):.3g}..{max(l.scale):.3g}"
        w = "" if l.weights is None else f"{l.weights.absmax_smallest:.3g}..{l.weights.absmax_largest:.3g}"
        out.append(f"<tr class='{cls}'><td>{l.index}</td><td class='l'>{e(l.tensor)}</td><td class='l'>{e(l.op)}</td>"
                   f"<td class='l'>{l.dtype}</td><td>{scale}</td><td>{_f(a.cosine)}</td>"
                   f"<td>{_f(a.sqnr_db, '{:.1f}')}</td><td>{a.mean_lsb:.3f}</td><td>{a.max_lsb:.2f}</td>"
                   f"<td>{_f(i.cosine)}</td><td>{_f(i.sqnr_db, '{:.1f}')}</td><td>{i.mean_lsb:.3f}</td>"
                   f"<td>{i.max_lsb:.2f} ({i.max_lsb_in_range:.2f})</td><td>{s.min:.4g}</td><td>{s.p1:.4g}</td>"
                   f"<td>{s.p50:.4g}</td><td>{s.p99:.4g}</td><td>{s.p99_9:.4g}</td><td>{s.max:.4g}</td>"
                   f"<td>{100 * s.clip_rate:.3f}</td><td>{w}</td></tr>")
    out.append("</table>")
    if r.unmatched:
        out.append(f"<p class='note'>Not compared (no float reference tensor): {e(', '.join(r.unmatched))}</p>")
    if r.overflows:
        out.append("<p class='note'>Accumulator overflows: " + e(", ".join(f"{k}: {v}" for k, v in r.overflows.items()))
                   + "</p>")
    out.append(f"<p class='note'>npu-sim accuracy report, schema {SCHEMA_VERSION}, "
               f"{r.seconds:.1f} s.</p></body></html>")
    return "\n".join(out)
