"""Inline SVG charts of the accuracy report's HTML page: per-tensor similarity curves, float-vs-integer
histograms, horizontal bar charts and the int16 advisor's accuracy-latency curve.

Plain strings, no scripts and no external requests, so the page stays self-contained.
"""
from __future__ import annotations

import html
import math

from npu_sim.analysis.accuracy import LayerResult, coarse_histogram
from npu_sim.render.report_text import point_label

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
                     f'fill="{color}"><title>{html.escape(point_label(p))}: {p["k"]} tensor(s) int16, '
                     f'{p["cycles"]:,.0f} cycles, SQNR {yv:.2f} dB, '
                     f'cosine {p["cosine"]:.6f}</title></circle>')
    parts.append(f'<text x="{(left + width) / 2:.0f}" y="{height - 8}" font-size="11" text-anchor="middle">'
                 f'estimated cycles</text><text x="14" y="{(top + height) / 2:.0f}" font-size="11" '
                 f'transform="rotate(-90 14 {(top + height) / 2:.0f})" text-anchor="middle">output SQNR (dB)</text>'
                 f'<text x="{width - right - 250}" y="16" font-size="11" fill="{_ACC}">● chosen</text>'
                 f'<text x="{width - right - 180}" y="16" font-size="11" fill="{_ISO}">● Pareto</text>'
                 f'<text x="{width - right - 110}" y="16" font-size="11" fill="{_FLT}">● dominated</text></svg>')
    return "".join(parts)
