"""The graph view of the HTML report: the model's reported tensors as boxes in topological layers with their
edges, coloured by error, marked with their check findings, each a link to its row in the per-layer table.

A plain layered layout, deterministic: a box's layer (rank) is one below the deepest of its inputs; within a
layer the boxes are ordered by the mean position of their inputs and pushed apart to a fixed pitch. Edges over
one layer are drawn straight down, longer ones (skip connections) run in a lane right of the boxes they pass.
The edges come from ``LayerResult.inputs`` (the reported tensors an op reads, looking through unreported ones).
Boxes are compact (the op, and the node name cut in the middle); the full names are in each box's ``<title>``.
"""
from __future__ import annotations

import html
import math

from npu_sim.analysis.accuracy import AccuracyReport, LayerResult
from npu_sim.render.text import cut_middle

BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 204, 28, 22, 20, 16
# SQNR (dB) bins of the colour scale: (lower bound, fill, legend text), best first.
COLOURS = [(40.0, "#a1d99b", "≥ 40 dB"), (30.0, "#d9f0a3", "30–40"), (20.0, "#ffffb2", "20–30"),
           (10.0, "#fecc5c", "10–20"), (0.0, "#fd8d3c", "0–10"), (-math.inf, "#e31a1c", "< 0 dB")]
_SEVERITY = {"error": ("#c0392b", 0), "warning": ("#e67e22", 1), "info": ("#2471a3", 2)}
_e = html.escape


def colour(sqnr_db: float) -> str:
    """The fill of a box whose error is ``sqnr_db`` (NaN: grey)."""
    if sqnr_db is None or math.isnan(sqnr_db):
        return "#dddddd"
    return next(c for lo, c, _ in COLOURS if sqnr_db >= lo)


def ranks(layers: list[LayerResult]) -> list[int]:
    """Each reported tensor's topological layer: 0 without reported inputs, else one below its deepest input."""
    out: list[int] = []
    for lay in layers:
        ins = [out[j] for j in lay.inputs if 0 <= j < len(out)]   # inputs come first in execution order
        out.append(1 + max(ins) if ins else 0)
    return out


def layout(layers: list[LayerResult]) -> tuple[dict[int, tuple[float, float]], float, float]:
    """Box positions (left, top) by list position, and the drawing's width and height."""
    rk = ranks(layers)
    by_rank: dict[int, list[int]] = {}
    for i, r in enumerate(rk):
        by_rank.setdefault(r, []).append(i)
    pitch = BOX_W + GAP_X
    x: dict[int, float] = {}
    for r in sorted(by_rank):
        want = []
        for slot, i in enumerate(by_rank[r]):
            ins = [x[j] for j in layers[i].inputs if j in x]
            want.append((sum(ins) / len(ins) if ins else slot * pitch, i))
        want.sort()
        placed: list[float] = []
        for w, _ in want:
            placed.append(w if not placed else max(w, placed[-1] + pitch))
        shift = sum(w for w, _ in want) / len(want) - sum(placed) / len(placed)
        for (_, i), p in zip(want, placed):
            x[i] = p + shift
    x0 = min(x.values(), default=0.0)
    pos = {i: (MARGIN + x[i] - x0, MARGIN + rk[i] * (BOX_H + GAP_Y)) for i in range(len(layers))}
    width = max((p[0] for p in pos.values()), default=0.0) + BOX_W + MARGIN + 40    # room for the edge lanes
    height = MARGIN * 2 + (max(rk, default=0) + 1) * (BOX_H + GAP_Y)
    return pos, width, height


def _edge(sx: float, sy: float, tx: float, ty: float, lane: float | None) -> str:
    """An edge from a box's bottom to another's top: an S-curve between adjacent layers; over more layers, out to
    ``lane`` (right of every box it passes) in the gap below the source, down, and back in the gap above the target."""
    if lane is None:
        m = (sy + ty) / 2
        d = f"M{sx:.1f},{sy:.1f} C{sx:.1f},{m:.1f} {tx:.1f},{m:.1f} {tx:.1f},{ty:.1f}"
    else:
        g = GAP_Y
        d = (f"M{sx:.1f},{sy:.1f} C{sx:.1f},{sy + g:.1f} {lane:.1f},{sy:.1f} {lane:.1f},{sy + g:.1f} "
             f"L{lane:.1f},{ty - g:.1f} C{lane:.1f},{ty:.1f} {tx:.1f},{ty - g:.1f} {tx:.1f},{ty:.1f}")
    return f'<path d="{d}" fill="none" stroke="#8a8a8a" stroke-width="1" marker-end="url(#garrow)"/>'


def _edges(layers: list[LayerResult], pos: dict, rk: list[int]) -> list[str]:
    right: dict[int, float] = {}
    for i, (x, _) in pos.items():
        right[rk[i]] = max(right.get(rk[i], 0.0), x + BOX_W)
    out = []
    for i, lay in enumerate(layers):
        tx, ty = pos[i]
        for k, j in enumerate(lay.inputs):
            if j not in pos or j == i:
                continue
            sx, sy = pos[j]
            lane = None
            if rk[i] - rk[j] > 1:
                lane = max(right.get(r, 0.0) for r in range(rk[j] + 1, rk[i])) + 10 + 5 * ((i + k) % 4)
            out.append(_edge(sx + BOX_W / 2, sy + BOX_H, tx + BOX_W / 2, ty, lane))
    return out


def node_findings(r: AccuracyReport) -> dict[str, list[dict]]:
    """Check findings by node name (empty without checks)."""
    if not r.checks:
        return {}
    return {lay["node"]: lay["findings"] for lay in r.checks["layers"]}


def _badge(x: float, y: float, findings: list[dict]) -> str:
    if not findings:
        return ""
    worst = min(findings, key=lambda f: _SEVERITY.get(f["severity"], ("", 3))[1])
    fill = _SEVERITY.get(worst["severity"], ("#777", 3))[0]
    cx, cy = x + BOX_W - 2, y + 2
    return (f'<circle class="finding" cx="{cx:.1f}" cy="{cy:.1f}" r="7.5" fill="{fill}" stroke="#fff"/>'
            f'<text x="{cx:.1f}" y="{cy + 3.5:.1f}" font-size="9.5" fill="#fff" text-anchor="middle" '
            f'font-weight="bold">{len(findings)}</text>')


def _tooltip(lay: LayerResult, findings: list[dict], collapse: bool) -> str:
    a, i = lay.accumulated, lay.isolated
    lines = [f"#{lay.index} {lay.node} ({lay.op}) → {lay.tensor} [{lay.dtype}]",
             f"accumulated: cosine {a.cosine:.6f}, SQNR {a.sqnr_db:.2f} dB",
             f"isolated: cosine {i.cosine:.6f}, SQNR {i.sqnr_db:.2f} dB"]
    if collapse:
        lines.append("collapse point")
    lines += [f"{f['severity']}: {f['rule']}" for f in findings[:8]]
    if len(findings) > 8:
        lines.append(f"and {len(findings) - 8} more finding(s)")
    return _e("\n".join(lines))


def _node(lay: LayerResult, x: float, y: float, findings: list[dict], collapse: bool) -> str:
    acc, iso = colour(lay.accumulated.sqnr_db), colour(lay.isolated.sqnr_db)
    stroke = ' style="stroke:#000;stroke-width:3"' if collapse else ""
    return (f'<a href="#t{lay.index}"><g class="gnode" id="g{lay.index}" data-layer="{lay.index}">'
            f'<title>{_tooltip(lay, findings, collapse)}</title>'
            f'<rect class="box" x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="4" fill="{acc}" '
            f'data-acc="{acc}" data-iso="{iso}"{stroke}/>'
            f'<text x="{x + 5:.1f}" y="{y + 11:.1f}" font-size="9" font-weight="bold" fill="#333">'
            f'{_e(cut_middle(lay.op, 30))}</text>'
            f'<text x="{x + 5:.1f}" y="{y + 23:.1f}" font-size="10" fill="#111">{_e(cut_middle(lay.node, 34))}'
            f'</text>{_badge(x, y, findings)}</g></a>')


def svg_graph(r: AccuracyReport) -> str:
    """The graph of the report's tensors as one inline SVG (see the module docstring)."""
    layers = r.layers
    pos, width, height = layout(layers)
    rk = ranks(layers)
    fnd = node_findings(r)
    ci = r.collapse.index if r.collapse else None
    parts = [f'<svg class="graph" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
             f'role="img" aria-label="model graph"><defs><marker id="garrow" viewBox="0 0 8 8" refX="8" refY="4" '
             f'markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#8a8a8a"/></marker>'
             f'</defs>']
    parts += _edges(layers, pos, rk)
    for i, lay in enumerate(layers):
        parts.append(_node(lay, *pos[i], fnd.get(lay.node, []), lay.index == ci))
    parts.append("</svg>")
    return "".join(parts)


def graph_section(r: AccuracyReport) -> list[str]:
    """The report's graph section: heading, legend with the colouring switch, and the scrollable drawing."""
    swatches = "".join(f"<span style='background:{c};border:1px solid #999;padding:0 6px;margin-left:6px'>"
                       f"{_e(t)}</span>" for _, c, t in COLOURS)
    badges = "".join(f"<span style='color:{c};margin-left:8px'>● {s}</span>" for s, (c, _) in _SEVERITY.items())
    return ["<h2 id='graph'>Model graph</h2>",
            f"<p class='note'>{len(r.layers)} quantized tensors in topological layers (execution order within a "
            "layer's inputs); an edge is a tensor read by the next op (through unreported ones). Click a box for "
            "its row in the per-layer table; hover for the full names and numbers. The black-framed box is the "
            "collapse point; a round badge counts the node's check findings.</p>",
            "<p class='legend'>Colour: <select id='graph-color' aria-label='graph colouring'>"
            "<option value='acc'>accumulated SQNR (full integer run)</option>"
            "<option value='iso'>isolated SQNR (the op alone)</option></select>" + swatches
            + " &nbsp;Findings:" + badges + "</p>",
            "<div class='graphbox'>" + svg_graph(r) + "</div>"]
