"""Inline SVG charts of the accuracy report's HTML page: per-layer similarity curves, float-vs-integer
histograms, horizontal bar charts and the int16 advisor's accuracy-latency curve.

Plain strings, no scripts and no external requests, so the page stays self-contained. Axes carry round ticks
(``nice_ticks``: steps of 1, 2 or 5 times a power of ten; tick labels have the class ``tick``), long names are
cut in the middle (``cut_middle``) with the full name in a ``<title>`` tooltip.
"""
from __future__ import annotations

import html
import math
import re

from npu_sim.analysis.accuracy import LayerResult, coarse_histogram
from npu_sim.ir import DTYPES
from npu_sim.render.report_text import point_label
from npu_sim.render.text import cut_middle

_ACC, _ISO, _FLT, _INT = "#c0392b", "#2471a3", "#7f8c8d", "#e67e22"
_e = html.escape


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [lo, hi]: a step of 1, 2 or 5 times a power of ten, the
    first tick at or below ``lo`` and the last at or above ``hi``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        lo, hi = lo - (abs(lo) * 0.01 or 0.5), hi + (abs(hi) * 0.01 or 0.5)
    raw = (hi - lo) / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [_round_to(k * step, step) for k in range(first, last + 1)]


def _round_to(v: float, step: float) -> float:
    return round(v, max(0, -math.floor(math.log10(step)) + 1))


def fmt_tick(v: float, ticks: list[float]) -> str:
    """A tick value with as many decimals as the ticks' step needs (thousands separated)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    dec = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{v:,.{dec}f}"


def _scale(v, a, b, lo, hi):
    return lo if b == a else lo + (v - a) * (hi - lo) / (b - a)


def _polyline(xs, ys, color) -> str:
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>'


def _y_axis(ticks: list[float], Y, left: int, right_x: float, labels: list[str] | None = None,
            cls: str = "tick ytick") -> list[str]:
    out = []
    for k, v in enumerate(ticks):
        y = Y(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right_x:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
                   f'<text class="{cls}" x="{left - 4}" y="{y + 3.5:.1f}" font-size="10" text-anchor="end">'
                   f'{labels[k] if labels else fmt_tick(v, ticks)}</text>')
    return out


def _curve_value(m, metric: str) -> float:
    v = getattr(m, metric)
    if metric == "sqnr_db" and not math.isfinite(v):
        return 100.0 if v > 0 else -20.0
    return v


def svg_curve(layers: list[LayerResult], metric: str, title: str, collapse_index: int | None = None,
              width: int = 1100, height: int = 360) -> str:
    """Per-layer curve of ``metric`` ("cosine" or "sqnr_db") for accumulated and isolated error; the x axis is
    labelled with the layers' node names (every one that fits), each point's tooltip names the tensor."""
    left, right, top, bottom = 64, 12, 26, 140
    n = len(layers)
    acc = [_curve_value(l.accumulated, metric) for l in layers]
    iso = [_curve_value(l.isolated, metric) for l in layers]
    vals = acc + iso or [1.0]
    lo, hi = min(vals), max(vals)
    if metric == "cosine":
        hi = 1.0
        lo = min(lo, 0.9999)
    ticks = nice_ticks(lo, hi)
    lo, hi = ticks[0], ticks[-1]
    X = lambda i: _scale(i, 0, max(n - 1, 1), left + 6, width - right - 6)  # noqa: E731
    Y = lambda v: _scale(v, lo, hi, height - bottom, top)  # noqa: E731
    parts = [f'<svg class="plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-size="13">{_e(title)}</text>']
    parts += _y_axis(ticks, Y, left, width - right)
    step = max(1, math.ceil(n * 13 / (width - left - right)))       # a label every 13 px at most
    for i in range(0, n, step):
        x, y0 = X(i), height - bottom + 6
        lab = layers[i].node or layers[i].tensor
        parts.append(f'<line x1="{x:.1f}" y1="{height - bottom}" x2="{x:.1f}" y2="{y0 - 2}" stroke="#999"/>'
                     f'<text class="xlabel" x="{x + 3:.1f}" y="{y0 + 4}" font-size="10" text-anchor="end" '
                     f'transform="rotate(-55 {x + 3:.1f} {y0 + 4})">{_e(cut_middle(lab, 24))}'
                     f'<title>#{layers[i].index} {_e(lab)} → {_e(layers[i].tensor)}</title></text>')
    if collapse_index is not None and 0 <= collapse_index < n:
        x = X(collapse_index)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" stroke="#000" '
                     f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{top + 10}" font-size="10">collapse</text>')
    xs = [X(i) for i in range(n)]
    parts.append(_polyline(xs, [Y(v) for v in acc], _ACC))
    parts.append(_polyline(xs, [Y(v) for v in iso], _ISO))
    for view, color, vs in (("accumulated", _ACC, acc), ("isolated", _ISO, iso)):
        for x, v, l in zip(xs, vs, layers):
            parts.append(f'<circle cx="{x:.1f}" cy="{Y(v):.1f}" r="2.2" fill="{color}"><title>#{l.index} '
                         f'{_e(l.node)} → {_e(l.tensor)} ({_e(l.op)}): {view} '
                         f'{getattr(getattr(l, view), metric):.6g}</title></circle>')
    parts.append(f'<text x="{width - right - 230}" y="16" font-size="11" fill="{_ACC}">— accumulated</text>'
                 f'<text x="{width - right - 120}" y="16" font-size="11" fill="{_ISO}">— isolated</text>'
                 f'<text x="{width - right}" y="{height - 4}" font-size="11" text-anchor="end">'
                 f'layer (execution order)</text></svg>')
    return "".join(parts)


def _count_label(v: float) -> str:
    return f"{v / 1e6:g}M" if v >= 1e6 else (f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}")


def svg_histogram(lay: LayerResult, width: int = 540, height: int = 230) -> str:
    """Float reference vs integer values of one tensor, in LSB units (quantized values), on a log count axis; the
    quantized range of the tensor's type is marked (values of the float bars beyond it are clipped)."""
    h = coarse_histogram(lay, 60)
    edges, hf, hq = h["lsb_edges"], h["float_counts"], h["integer_counts"]
    left, right, top, bottom = 48, 12, 26, 46
    qmin, qmax = DTYPES[lay.dtype][1:] if lay.dtype in DTYPES else (None, None)
    parts = [f'<svg class="hist" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-size="12">{_e(cut_middle(lay.tensor, 48))} ({_e(lay.op)}, cos '
             f'{lay.accumulated.cosine:.5f})<title>{_e(lay.tensor)} ({_e(lay.node)})</title></text>']
    if edges:
        xlo, xhi = edges[0], edges[-1]
        if qmin is not None:                    # the whole quantized range is shown, and what lies beyond it
            xlo, xhi = min(xlo, qmin - 0.5), max(xhi, qmax + 0.5)
            pad = (xhi - xlo) * 0.02
            xlo, xhi = xlo - pad, xhi + pad
        X = lambda v: _scale(v, xlo, xhi, left, width - right)  # noqa: E731
        peak = max(max(hf), max(hq), 1)
        decades = max(1, math.ceil(math.log10(peak + 1)))
        Y = lambda c: _scale(math.log10(c + 1), 0, decades, height - bottom, top)  # noqa: E731
        yt = [10 ** k - 1 for k in range(decades + 1)]
        parts += _y_axis(yt, Y, left, width - right, [_count_label(v + 1) if v else "0" for v in yt],
                         "logtick")
        if qmin is not None:
            for q, side in ((qmin, -1), (qmax, 1)):
                if xlo < q + 0.5 * side < xhi:
                    x = X(q + 0.5 * side)
                    x_out = width - right if side > 0 else left
                    parts.append(f'<rect class="clipzone" x="{min(x, x_out):.1f}" y="{top}" width="{abs(x_out - x):.1f}" '
                                 f'height="{height - bottom - top}" fill="#fdecea"/>')
        for i in range(len(hf)):
            x0, x1 = X(edges[i]), X(edges[i + 1])
            bw = max((x1 - x0) / 2, 0.6)
            for j, (cnt, color) in enumerate(((hf[i], _FLT), (hq[i], _INT))):
                y = Y(cnt)
                parts.append(f'<rect x="{x0 + j * bw:.1f}" y="{y:.1f}" width="{bw:.1f}" '
                             f'height="{height - bottom - y:.1f}" fill="{color}"/>')
        xt = [v for v in nice_ticks(xlo, xhi, 6) if xlo <= v <= xhi]
        for v in xt:
            parts.append(f'<text class="tick xtick" x="{X(v):.1f}" y="{height - bottom + 12}" font-size="10" '
                         f'text-anchor="middle">{fmt_tick(v, xt)}</text>')
        if qmin is not None:
            for q, side in ((qmin, -1), (qmax, 1)):
                if xlo < q + 0.5 * side < xhi:
                    x = X(q + 0.5 * side)
                    parts.append(f'<line class="qrange" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" '
                                 f'stroke="#c0392b" stroke-dasharray="3 2"/><text x="{x - 3 * side:.1f}" '
                                 f'y="{top + 10}" font-size="10" fill="#c0392b" '
                                 f'text-anchor="{"end" if side > 0 else "start"}">{"qmax" if side > 0 else "qmin"} '
                                 f'{q}</text>')
    rng = f"; {lay.dtype} range {qmin}..{qmax}" if qmin is not None else ""
    parts.append(f'<text x="{left}" y="{height - 20}" font-size="10">quantized value (LSB){rng}; count (log)</text>'
                 f'<text x="{left}" y="{height - 6}" font-size="10"><tspan fill="{_FLT}">■ float reference</tspan>'
                 f'<tspan fill="{_INT}" dx="10">■ integer run</tspan><tspan fill="#c0392b" dx="10">'
                 f'┆ quantized range (shaded: clipped)</tspan></text></svg>')
    return "".join(parts)


def svg_bars(labels: list[str], values: list[float], title: str, unit: str, color: str = "#2471a3",
             width: int = 1100, bar_h: int = 14, notes: list[str] | None = None,
             titles: list[str] | None = None) -> str:
    """Horizontal bar chart (one bar per label; negative values to the left of the axis). Labels longer than the
    label column are cut in the middle; the tooltip has ``titles`` (default: the labels)."""
    left, right, top = 380, 150, 26
    n = len(values)
    height = top + n * (bar_h + 3) + 30
    ticks = nice_ticks(min([0.0] + values), max([0.0] + values), 6)
    lo, hi = ticks[0], ticks[-1]
    X = lambda v: _scale(v, lo, hi, left, width - right)  # noqa: E731
    x0 = X(0.0)
    parts = [f'<svg class="bars" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-size="13">{_e(title)}</text>']
    base = height - 22
    for v in ticks:
        parts.append(f'<line x1="{X(v):.1f}" y1="{top - 2}" x2="{X(v):.1f}" y2="{base}" stroke="#eee"/>'
                     f'<text class="tick xtick" x="{X(v):.1f}" y="{base + 12}" font-size="10" text-anchor="middle">'
                     f'{fmt_tick(v, ticks)}</text>')
    parts.append(f'<line x1="{x0:.1f}" y1="{top - 2}" x2="{x0:.1f}" y2="{base}" stroke="#999"/>'
                 f'<text x="{width - right + 26}" y="{base + 12}" font-size="10">{_e(unit)}</text>')
    for i, (lab, v) in enumerate(zip(labels, values)):
        full = (titles or labels)[i]
        y = top + i * (bar_h + 3)
        x1, x2 = sorted((X(v), x0))
        note = (notes or [""] * n)[i]
        parts.append(f'<text class="blabel" x="{left - 6}" y="{y + bar_h - 3}" font-size="11" text-anchor="end">'
                     f'{_e(cut_middle(lab, 60))}<title>{_e(full)}</title></text><rect x="{x1:.1f}" y="{y}" '
                     f'width="{max(x2 - x1, 0.5):.1f}" height="{bar_h}" fill="{color}"><title>{_e(full)}: {v:.6g} '
                     f'{_e(unit)}</title></rect><text x="{max(x2, x0) + 4:.1f}" y="{y + bar_h - 3}" font-size="10">'
                     f'{f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"} {_e(unit)} {_e(note)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _pareto_labels(curve: list[dict], X, Y, ys) -> list[str]:
    """Text next to the chosen and the Pareto points (k and the last promoted tensor or segment), the number of
    promoted tensors next to the others."""
    out = []
    for p, yv in zip(curve, ys):
        x, y = X(p["cycles"]), Y(yv)
        if p.get("chosen") or p["pareto"]:
            seg = re.match(r"segment [\d-]+ of \d+", point_label(p))
            what = "baseline" if not p["k"] else (seg.group(0) if seg else cut_middle(point_label(p), 28))
            text = f'{"chosen: " if p.get("chosen") else ""}{p["k"]} · {what}'
            weight = ' font-weight="bold"' if p.get("chosen") else ""
            out.append(f'<text class="plabel" x="{x + 8:.1f}" y="{y - 6:.1f}" font-size="10"{weight}>{_e(text)}'
                       f'<title>{_e(point_label(p))}</title></text>')
        else:
            out.append(f'<text class="plabel" x="{x + 6:.1f}" y="{y + 12:.1f}" font-size="9" fill="#777">'
                       f'{p["k"]}</text>')
    return out


def svg_pareto(curve: list[dict], budget: float | None, width: int = 1100, height: int = 380) -> str:
    """Accuracy-latency curve: measured points (cycles, SQNR) labelled, the chosen one ringed, the budget dashed."""
    left, right, top, bottom = 70, 240, 26, 44
    xs = [p["cycles"] for p in curve] + ([budget] if budget else [])
    ys = [p["sqnr_db"] if p["sqnr_db"] is not None else 100.0 for p in curve]
    xt = nice_ticks(min(xs), max(xs), 6)
    yt = nice_ticks(min(ys), max(ys), 5)
    X = lambda v: _scale(v, xt[0], xt[-1], left, width - right)  # noqa: E731
    Y = lambda v: _scale(v, yt[0], yt[-1], height - bottom, top)  # noqa: E731
    parts = [f'<svg class="pareto" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-size="13">accuracy-latency curve (every point measured; '
             f'labels: number of int16 tensors · last promoted)</text>']
    parts += _y_axis(yt, Y, left, width - right)
    for v in xt:
        parts.append(f'<line x1="{X(v):.1f}" y1="{top}" x2="{X(v):.1f}" y2="{height - bottom}" stroke="#f0f0f0"/>'
                     f'<text class="tick xtick" x="{X(v):.1f}" y="{height - bottom + 14}" font-size="10" '
                     f'text-anchor="middle">{fmt_tick(v, xt)}</text>')
    if budget:
        parts.append(f'<line x1="{X(budget):.1f}" y1="{top}" x2="{X(budget):.1f}" y2="{height - bottom}" '
                     f'stroke="#c0392b" stroke-dasharray="5 3"/><text x="{X(budget) + 3:.1f}" y="{top + 10}" '
                     f'font-size="10" fill="#c0392b">budget</text>')
    line = [(p, v) for p, v in zip(curve, ys) if p.get("kind", "greedy") == "greedy"]
    parts.append(_polyline([X(p["cycles"]) for p, _ in line], [Y(v) for _, v in line], "#7f8c8d"))
    for p, yv in zip(curve, ys):
        color = _ACC if p.get("chosen") else (_ISO if p["pareto"] else _FLT)
        parts.append(f'<circle class="point" cx="{X(p["cycles"]):.1f}" cy="{Y(yv):.1f}" '
                     f'r="{6 if p.get("chosen") else 4}" fill="{color}"><title>{_e(point_label(p))}: {p["k"]} '
                     f'tensor(s) int16, {p["cycles"]:,.0f} cycles, SQNR {yv:.2f} dB, '
                     f'cosine {p["cosine"]:.6f}</title></circle>')
    parts += _pareto_labels(curve, X, Y, ys)
    parts.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" font-size="11" text-anchor="middle">'
                 f'estimated cycles</text><text x="14" y="{(top + height) / 2:.0f}" font-size="11" '
                 f'transform="rotate(-90 14 {(top + height) / 2:.0f})" text-anchor="middle">output SQNR (dB)</text>'
                 f'<text x="{width - 10}" y="16" font-size="11" text-anchor="end"><tspan fill="{_ACC}">● chosen'
                 f'</tspan><tspan fill="{_ISO}" dx="8">● Pareto</tspan><tspan fill="{_FLT}" dx="8">● dominated</tspan>'
                 f'</text>'
                 f'</svg>')
    return "".join(parts)
