"""Placement: which node of a program runs on the NPU and which falls back to the CPU, by the board's
``[rules]`` (an op the rules list, and do not mark ``npu = false``, runs on the NPU; a board without rules runs
everything there). Read by ``npu-sim check`` (each node's report) and ``npu-sim estimate`` (CPU nodes are costed
at the CPU's throughput, plus their transfers)."""
from __future__ import annotations

from npu_sim.ir import Program


def placement(program: Program, moved=frozenset()) -> dict[str, str]:
    """Node name -> "NPU" or "CPU" (fallback) for every node of the program, by the board's rules; ``moved``: the
    nodes the board's NPU compiler leaves on the CPU although their op is an NPU op (``CheckResult.moved``: Vela,
    for a node outside its constraints)."""
    rules = program.board.rules
    where = {node.name: "NPU" if rules.limits(node.op) is not None and node.name not in moved else "CPU"
             for node in program.nodes}
    producer = {o: node.name for node in program.nodes for o in node.outputs}
    for node in program.nodes:  # a change of layout only (a .tflite's NHWC <-> NCHW) runs where its input is made
        if node.layout:
            src = producer.get(node.inputs[0]) if node.inputs else None
            where[node.name] = where.get(src, "NPU") if src else "NPU"
    return where
