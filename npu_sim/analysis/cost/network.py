"""The network estimate: every node of a program costed (NPU, CPU fallback or host input), and the totals.

Placement (NPU or CPU) is the board's (``npu_sim.boards.placement``); a CPU node also pays a transfer for every
tensor it exchanges with an NPU node. The network total is the sum of the layers.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field

from npu_sim.analysis.cost.layer import LayerCost, cpu_layer_cost, layer_cost, tensor_bits, tensor_bytes
from npu_sim.analysis.cost.memory import memory_report
from npu_sim.boards.placement import placement as board_placement
from npu_sim.errors import BoardError
from npu_sim.opset import kind_of


@dataclass
class Estimate:
    model: str
    board: str
    clock_hz: float
    macs_per_cycle: int
    layers: list[LayerCost]
    summary: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)  # does it fit: analysis/cost/memory.py's memory_report

    def to_dict(self) -> dict:
        return {"model": self.model, "board": self.board, "clock_hz": self.clock_hz,
                "macs_per_cycle": self.macs_per_cycle, "summary": self.summary,
                "layers": [asdict(r) for r in self.layers], **({"memory": self.memory} if self.memory else {})}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def memories(self) -> list[str]:
        names: list[str] = []
        for r in self.layers:
            for m in r.bytes:
                if m not in names:
                    names.append(m)
        return names

    def to_csv(self) -> str:
        mems = self.memories()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["node", "op", "op_class", "precision", "target", "macs", *[f"bytes_{m}" for m in mems],
                    "compute_cycles", "memory_cycles", "exposed_cycles", "cycles", "bound", "utilization_pct",
                    "share_pct", "spill"])
        for r in self.layers:
            w.writerow([r.node, r.op, r.op_class, r.precision, r.target, r.macs, *[r.bytes.get(m, 0) for m in mems],
                        f"{r.compute_cycles:.0f}", f"{r.memory_cycles:.0f}", f"{r.exposed_cycles:.0f}",
                        f"{r.cycles:.0f}", r.bound, f"{r.utilization:.2f}", f"{r.share:.2f}", int(r.spill)])
        return buf.getvalue()


def _crossings(program, placement: dict) -> dict[str, list[int]]:
    """CPU node -> bytes of each tensor it exchanges with an NPU node (or with the graph input/output)."""
    producer = {o: n for n in program.nodes for o in n.outputs}
    consumers: dict[str, list] = {}
    for n in program.nodes:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    out: dict[str, list[int]] = {}
    for n in program.nodes:
        if placement.get(n.name) != "CPU":
            continue
        b = []
        for i in n.inputs:
            t = program.tensors[i]
            p = producer.get(i)
            if not t.is_const and p is not None and placement.get(p.name) != "CPU":
                b.append(tensor_bytes(t))
        for o in n.outputs:
            if any(placement.get(c.name) != "CPU" for c in consumers.get(o, [])):
                b.append(tensor_bytes(program.tensors[o]))
        out[n.name] = b
    return out


def _is_host_input_quantize(program, node) -> bool:
    """The Quantize of a float graph input: the host hands the board integers (as Vela's int8 input)."""
    return kind_of(node.op) == "convert" and program.tensors[node.inputs[0]].q is None


def estimate_program(program, board=None, moved=frozenset()) -> Estimate:
    """The latency estimate of a program on a board (default: the program's): every node costed, and the totals;
    ``moved``: nodes the board's NPU compiler leaves on the CPU (``CheckResult.moved``), costed there."""
    board = board or program.board
    cfg = board.cost
    if cfg is None:
        raise BoardError(f"board {board.name!r} ({board.source or 'preset'}) has no [cost] section, so it has no "
                         f"latency model: use --board ethos-u55-128 or default, or add a [cost] section")
    placement = board_placement(program, moved)
    crossings = _crossings(program, placement)
    rows: list[LayerCost] = []
    for node in program.nodes:
        if node.layout:  # not an op of the model (a .tflite's NHWC <-> NCHW): free, and no row
            continue
        if _is_host_input_quantize(program, node):
            t = program.tensors[node.outputs[0]]
            rows.append(LayerCost(node.name, node.op, "input", f"a{tensor_bits(t)}", "host", 0, {}, 0.0, 0.0, 0.0, 0.0,
                                  "free", 0.0))
        elif placement.get(node.name) == "CPU":
            rows.append(cpu_layer_cost(cfg, program, node, crossings.get(node.name, [])))
        else:
            rows.append(layer_cost(cfg, program, node))
    total = sum(r.cycles for r in rows)
    for r in rows:
        r.share = 100.0 * r.cycles / total if total else 0.0
    npu = sum(r.cycles for r in rows if r.target == "NPU")
    cpu = sum(r.cycles for r in rows if r.target == "CPU")
    macs = sum(r.macs for r in rows)
    latency_s = total / cfg.clock_hz
    by_class: dict[str, float] = {}
    for r in rows:
        by_class[r.op_class] = by_class.get(r.op_class, 0.0) + r.cycles
    hot = sorted(rows, key=lambda r: -r.cycles)[:5]
    summary = {
        "total_cycles": total, "npu_cycles": npu, "cpu_cycles": cpu,
        "npu_share_pct": 100.0 * npu / total if total else 0.0, "cpu_share_pct": 100.0 * cpu / total if total else 0.0,
        "total_macs": macs, "latency_ms": latency_s * 1e3, "fps": 1.0 / latency_s if latency_s else math.inf,
        "utilization_pct": 100.0 * macs / (total * cfg.macs_per_cycle) if total else 0.0,
        "npu_nodes": sum(r.target == "NPU" for r in rows), "cpu_nodes": sum(r.target == "CPU" for r in rows),
        "spilled_nodes": [r.node for r in rows if r.spill],
        "bytes": {m: sum(r.bytes.get(m, 0) for r in rows) for m in {m for r in rows for m in r.bytes}},
        "cycles_by_class": dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
        "hotspots": [{"node": r.node, "op": r.op, "cycles": r.cycles, "share_pct": r.share} for r in hot],
        # ONNX nodes npu-sim could not lower at all (unknown ops, float islands): not in the total
        "uncosted_nodes": [{"node": n, "op": op, "reason": why} for n, op, why in program.problems],
        "lower_bound": bool(program.problems),  # the total leaves out the uncosted nodes
    }
    return Estimate(program.model_path, board.name, cfg.clock_hz, cfg.macs_per_cycle, rows, summary,
                    memory_report(program, board))
