"""A dump comparison as text (the first mismatch, the first divergent node and the causes per node, a summary) or
JSON."""
from __future__ import annotations

import json

from npu_sim.analysis.compare import Comparison, TensorDiff


def node_line(t: TensorDiff) -> str:
    """``N of M elements differ; K explained by <cause>; I inherited; U unexplained`` for a differing tensor."""
    if t.status == "shape":
        return f"shapes differ: {t.shape_message}"
    parts = [f"{t.differing} of {t.total} elements differ (max |diff| {t.max_diff} LSB)"]
    for cause, k in t.causes.items():
        if cause != "unexplained":
            same = t.equally.get(cause)
            whole = t.reproduces.get(cause)
            parts.append(f"{k} explained by {cause}" + (f" (or equally {' / '.join(same)})" if same else "")
                         + (f", which reproduces {whole[0]:,} of {whole[1]:,}" if whole else ""))
    if t.inherited:
        parts.append(f"{t.inherited} inherited (an input already differs there)")
    closest = f" (closest: {t.closest[0]}, which reproduces {t.closest[1]:,} of {t.closest[2]:,})" \
        if t.unexplained and t.closest else ""
    parts.append(f"{t.unexplained} unexplained{closest}")
    if t.not_tried:
        parts.append(f"{t.not_tried} not tried")
    return "; ".join(parts)


def _examples(t: TensorDiff) -> list[str]:
    where = f" ({t.layout.upper()} index)" if t.layout == "nhwc" else ""
    out = []
    for ex in t.examples:
        if len(ex) == 4:
            out.append(f"    at {ex[0]}{where}: board {ex[1]}, re-run on the dump's inputs {ex[2]} -> {ex[3]}")
        else:
            out.append(f"    at {ex[0]}{where}: board {ex[1]}, simulation {ex[2]}")
    return out


def format_comparison(c: Comparison, dump, model, board, show_all: bool = False) -> str:
    lines = [f"compare: {len(c.tensors)} dumped tensor(s) of {dump} against {model} on board {board}"]
    if c.fed:
        lines.append(f"fed: {c.fed}")
    bad = [t for t in c.tensors if t.status != "equal"]
    if not bad:
        lines.append("all equal, bit for bit")
    else:
        f = bad[0]
        if f.status == "shape":
            lines.append(f"first mismatch: tensor {f.tensor!r} (produced by node {f.producer!r} [{f.op}]): "
                         f"{f.shape_message}")
        else:
            where = " (NHWC)" if f.layout == "nhwc" else ""
            lines.append(f"first mismatch: tensor {f.tensor!r} (produced by node {f.producer!r} [{f.op}], program "
                         f"tensor {f.ir_tensor}): {f.differing} of {f.total} elements differ, max |diff| "
                         f"{f.max_diff}, first at index {list(f.first_index)}{where}: dump {f.dump_value}, "
                         f"simulation {f.sim_value}")
        d = c.first_divergent_tensor
        if d is not None:
            lines.append(f"first divergent node: {d.producer!r} [{d.op}] (its output {d.tensor!r} differs while "
                         f"every input the dump holds matches): {node_line(d)}")
            if d.inputs_not_in_dump:
                lines.append(f"  its inputs not in the dump (the divergence may start upstream): "
                             f"{', '.join(d.inputs_not_in_dump)}")
            lines += _examples(d)
        rest = [t for t in bad if t is not d]
        shown = rest if show_all else rest[:8]
        if rest:
            lines.append(f"{len(rest)} other differing tensor(s), in execution order:")
        for t in shown:
            lines.append(f"  {t.tensor!r} (node {t.producer!r} [{t.op}]): {node_line(t)}")
            if show_all:
                lines += _examples(t)
        if len(shown) < len(rest):
            lines.append(f"  ... {len(rest) - len(shown)} more (--all lists them)")
    lines.append(f"summary: {len(c.tensors) - len(bad)} of {len(c.tensors)} dumped tensors match, {len(bad)} "
                 f"differ; {len(c.not_in_dump)} tensor(s) of the model not in the dump (not compared)")
    if c.not_in_model:
        lines.append(f"dump entries the model does not produce (ignored): {', '.join(c.not_in_model[:8])}"
                     + (" ..." if len(c.not_in_model) > 8 else ""))
    lines.extend(f"note: {n}" for n in c.notes)
    return "\n".join(lines)


def comparison_json(c: Comparison) -> str:
    return json.dumps(c.to_dict(), indent=1)
