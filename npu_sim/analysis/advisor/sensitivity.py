"""The advisor's layers (``layers_of``) and the sensitivity ranking: each layer alone at higher precision
(``sensitivity``; int16 where the board allows it, else float), optionally on a shortlist (``shortlist``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npu_sim.analysis.advisor import tasks
from npu_sim.analysis.advisor.evaluator import Evaluator, sqnr_key
from npu_sim.analysis.check import int16_allowed
from npu_sim.analysis.metrics import json_number
from npu_sim.opset import OPS
from npu_sim.qdq import recalibrate as requant
from npu_sim.runtime.engines import EngineOptions


@dataclass
class Layer:
    node: str
    op: str
    node_index: int
    ir_tensor: str
    tensor: str                      # ONNX float name of the layer's output
    group: list[str]                 # tensors sharing its quantization
    dtype: str
    mode: str                        # "int16" | "float"
    reason: str                      # why this mode


def layers_of(sim, proto) -> list[Layer]:
    prog = sim.program
    groups = {t: gr for gr in requant.quant_groups(proto) for t in gr.tensors}
    by_float: dict[str, list[str]] = {}
    for name, t in prog.tensors.items():
        if t.q is not None and not t.is_const:
            by_float.setdefault(t.float_name, []).append(name)
    producers = {o: n for n in prog.nodes for o in n.outputs}
    consumers: dict[str, list] = {}
    for n in prog.nodes:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    out, seen = [], set()
    for ni, node in enumerate(prog.nodes):
        info = OPS.get(node.op)
        if info is None or info.kind == "movement":  # data movement is exact: no layer
            continue
        for o in node.outputs:
            t = prog.tensors[o]
            gr = groups.get(t.float_name)
            if t.q is None or gr is None or gr.graph_input or id(gr) in seen:
                continue
            seen.add(id(gr))
            if t.q.bits >= 16:
                mode, why = "float", f"already {t.q.dtype}"
            elif not gr.per_tensor:
                mode, why = "float", "quantized per axis"
            else:
                s, z = float(np.asarray(t.q.scale).reshape(-1)[0]), int(np.asarray(t.q.zero_point).reshape(-1)[0])
                _, clamp = requant.int16_params(s, z, gr.dtype)
                nodes = {}
                for ft in gr.tensors:
                    for irn in by_float.get(ft, []):
                        for n in ([producers[irn]] if irn in producers else []) + consumers.get(irn, []):
                            nodes[n.name] = n
                bad = [n.name for n in nodes.values() if not int16_allowed(prog, n)]
                if clamp:
                    mode, why = "float", "its range starts at exactly 0 (a removed Relu's clamp a symmetric int16 " \
                                         "would lose)"
                elif bad:
                    mode, why = "float", f"the board does not allow int16 for {', '.join(bad[:3])}"
                else:
                    mode, why = "int16", "allowed: " + ", ".join(sorted(nodes)[:4]) + (" ..." if len(nodes) > 4 else "")
            out.append(Layer(node.name, node.op, ni, o, t.float_name, list(gr.tensors), t.q.dtype, mode, why))
    return out


def shortlist(layers: list[Layer], report, k: int | None) -> tuple[list[Layer], list[Layer]]:
    """The layers whose sensitivity is measured (``--candidates K``) and the rest. All of them without ``k``;
    else the ``k`` with the lowest isolated SQNR in the report (the op's own error: its arithmetic and the rounding
    and clipping of its output), clipping rate breaking ties. A cheap proxy, not the measurement: on PP-OCRv4 rec
    A8W8 the 40 layers it ranks first held 3 of the 10 measured best (README), so it is for models too large to
    measure every layer; the advisor's segments cover every int16-allowed layer either way."""
    if k is None or k >= len(layers):
        return list(layers), []
    by_tensor = {}
    for lr in getattr(report, "layers", []) or []:
        by_tensor[lr.tensor] = lr
        by_tensor.setdefault(lr.ir_tensor, lr)

    def proxy(lay: Layer):
        rows = [by_tensor[t] for t in [lay.tensor, lay.ir_tensor] + lay.group if t in by_tensor]
        if not rows:
            return (math.inf, 0.0)
        sq = min(sqnr_key(r.isolated.sqnr_db) for r in rows)
        return (sq, -max(r.stats.clip_rate for r in rows))

    order = sorted(range(len(layers)), key=lambda i: proxy(layers[i]))
    keep = set(order[:max(0, k)])
    return [l for i, l in enumerate(layers) if i in keep], [l for i, l in enumerate(layers) if i not in keep]


def sensitivity(ev: Evaluator, layers: list[Layer], base_cycles: float | None, progress=None,
                engine: EngineOptions | None = None, built: float = 0.0) -> list[dict]:
    """Each layer alone at higher precision (see ``npu_sim.analysis.advisor``), ranked. The measurements are
    engine tasks (``tasks.measure_all``: ``engine`` None measures here; ``built``: what building ``ev`` took);
    ``progress(done, total)`` as layers are measured."""
    payloads = [tasks.int16_variant([lay.tensor], f"int16_{k}") if lay.mode == "int16"
                else tasks.float_variant(lay.node_index, lay.ir_tensor) for k, lay in enumerate(layers)]
    measured = tasks.measure_all(ev, payloads, [lay.tensor for lay in layers], engine, built, progress)
    rows = []
    b = ev.base_score
    for lay, m in zip(layers, measured):
        sc, delta = m["score"], None
        if lay.mode == "int16":
            how, c = "int16", m["cycles"]
            delta = None if c is None or base_cycles is None else c - base_cycles
        else:
            how = m["how"]
        rows.append({"layer": lay.node, "op": lay.op, "tensor": lay.tensor, "tensors": lay.group, "dtype": lay.dtype,
                     "mode": how, "reason": lay.reason, "cosine": sc.cosine, "sqnr_db": json_number(sc.sqnr_db),
                     "gain_cosine": sc.cosine - b.cosine,
                     "gain_sqnr_db": json_number(sqnr_key(sc.sqnr_db) - sqnr_key(b.sqnr_db)),
                     "delta_cycles": delta, "seconds": m["seconds"]})
    # a layer measured with the float reference as its output also loses every earlier layer's error: an upper
    # bound, ranked after the layers measured alone
    rows.sort(key=lambda r: (r["mode"] == "float (reference output)", -(r["gain_sqnr_db"] or 0.0), -r["gain_cosine"]))
    for i, r in enumerate(rows):
        r["rank"] = i + 1
    return rows
