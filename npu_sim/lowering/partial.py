"""A partial program: everything of a model but the nodes the board will not run and what depends on them.
(Also the nodes the board runs but npu-sim cannot simulate: ``Program.unsimulated``.)

``lower_graph(..., partial=True)`` keeps a model whose only problems are the board's refusals (a node its own
toolchain refuses, ``Refusal``): the refused nodes are not in the program (their output tensors have no
producer), so this drops every node that reads such a tensor, transitively, and every model output it would
have computed, and lists them in ``Program.not_run``. What is left is an ordinary program (everything up to
the refused nodes and around them): it runs, traces and compares like any other, and its outputs are the
board's. The refused nodes themselves stay in ``Program.refusals``; a command that runs a partial program
names them and exits non-zero (``npu-sim run``/``lower``: exit 1)."""
from __future__ import annotations

from npu_sim.ir import Program


def prune_refused(program: Program, model_outputs) -> Program:
    """Drop the nodes downstream of the refused ones and the outputs they compute (of ``model_outputs``, the
    graph's output names); record both in ``not_run`` as (node or output name, reason). Returns ``program``
    (changed in place)."""
    refused = ", ".join(repr(name) for name, _, _ in program.refusals)
    have = set(program.inputs.values()) | {name for name, t in program.tensors.items() if t.is_const}
    kept = []
    for node in program.nodes:
        if all(not name or name in have for name in node.inputs):
            kept.append(node)
            have.update(node.outputs)
        else:
            program.not_run.append((node.name, f"{node.op}: not simulated (it depends on refused {refused})"))
    program.nodes = kept
    for name in model_outputs:
        if name in program.passthrough or (name in program.outputs and program.outputs[name] in have):
            continue
        program.outputs.pop(name, None)
        program.not_run.append((name, f"model output: not computed (it depends on refused {refused})"))
    return program


def not_run_lines(program: Program) -> list[str]:
    """What a partial program leaves out, for a command's error stream: the refused nodes with the board's
    reason, then the nodes and outputs downstream of them."""
    lines = [f"npu-sim: {what_left_out(program, name)} node {name!r} ({op}): {why}"
             for name, op, why in program.refusals]
    outputs = [name for name, why in program.not_run if why.startswith("model output")]
    nodes = [name for name, why in program.not_run if not why.startswith("model output")]
    if nodes:
        shown = ", ".join(map(repr, nodes[:4])) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
        lines.append(f"npu-sim: not simulated: {len(nodes)} node(s) downstream of it ({shown})")
    if outputs:
        lines.append(f"npu-sim: model output(s) not computed: {', '.join(map(repr, outputs))}")
    lines.append("npu-sim: everything else is simulated as the board computes it; the model does not run whole "
                 "on this board (exit 1)")
    return lines


def what_left_out(program: Program, name: str) -> str:
    """How a left-out node is named: the board does not run it, or npu-sim cannot simulate what it runs."""
    return ("npu-sim does not simulate what the board runs for" if name in program.unsimulated
            else "the board does not run")
