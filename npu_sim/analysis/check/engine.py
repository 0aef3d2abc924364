"""Running the rules: ``check_program`` over a lowered program, and a question other analyses ask of the
board's rules (``int16_allowed``; which node runs where is ``npu_sim.boards.placement``).

The rule modules are imported here, in this order, so that they register: the order of ``RULES`` (board rules,
numeric hazards, lint) is the order of the findings on a node and of docs/SUPPORTED_OPS.md.
"""
from __future__ import annotations

from npu_sim.analysis.check import board_rules, hazards, lint, memory_rules  # noqa: F401  (registers, in order)
from npu_sim.analysis.check.findings import RULES, CheckResult, Context, Finding, NodeReport, Rule
from npu_sim.analysis.check.measures import precision, reduction
from npu_sim.boards.placement import placement
from npu_sim.ir import Node, Program


def _finding(r: Rule, values: dict) -> Finding:
    values = dict(values)
    severity = values.pop("severity", r.severity)
    msg, fix = r.text
    shown = {k: v for k, v in values.items()}
    try:
        message = msg.format(**shown)
        fix_text = fix.format(**shown)
    except (KeyError, IndexError, ValueError) as exc:  # a rule bug, never the user's
        raise AssertionError(f"rule {r.id}: message does not format with {sorted(shown)}: {exc}") from None
    plain = {k: v for k, v in values.items() if isinstance(v, (int, float, str, list, bool))}
    return Finding(r.id, severity, message, fix_text, plain)


def _results(out) -> list[dict]:
    if out is None:
        return []
    return out if isinstance(out, list) else [out]


def check_program(program: Program, overflows: dict | None = None) -> CheckResult:
    """Run every rule of the board's table over a (possibly tolerantly) lowered program."""
    rules = program.board.rules
    ctx = Context(program, rules, overflows)
    where = placement(program)
    reports, checked = [], [node for node in program.nodes if not node.layout]  # (layout: not an op of the model)
    for node in checked:
        rep = NodeReport(node.name, node.op, where[node.name], precision(ctx, node), sources=list(node.sources))
        for r in RULES:
            if r.scope != "node":
                continue
            for values in _results(r.func(ctx, node)):
                rep.findings.append(_finding(r, values))
        if rules.npu_compiler == "vela" and any(f.severity == "error" and f.rule.startswith("limit.")
                                                for f in rep.findings):
            rep.placement = "CPU"  # Vela leaves an op its constraints refuse on the CPU (still an error: not all NPU)
        reports.append(rep)
    # nodes npu-sim could not lower: they would run on the CPU (in float), and cannot be simulated
    for name, op, why in program.problems:
        rep = NodeReport(name, op, "CPU", "float", simulated=False)
        severity = "warning" if rules.cpu_fallback else "error"
        rep.findings.append(Finding(
            "npu.lowering", severity,
            f"{op} cannot run as an integer op: {why}. It would run on the CPU in float, and npu-sim cannot simulate "
            f"it (`npu-sim run` refuses the model).",
            "Quantize it (QDQ around the op, op_types_to_quantize including it) or replace it with supported ops; "
            "docs/SUPPORTED_OPS.md lists them.", {"op": op}))
        reports.append(rep)
    by_source = {src: rep for rep, node in zip(reports, checked) for src in [node.name] + list(node.sources)}
    # nodes the board's own toolchain refuses (e.g. LiteRT's prepare checks under the tflite arithmetic)
    for name, op, why in program.refusals:
        rep = by_source.get(name)
        if rep is None:
            rep = NodeReport(name, op, "NPU", "-", simulated=False)
            reports.append(rep)
        rep.simulated = False
        if name in program.unsimulated:  # the board compiles and runs it, npu-sim cannot say what it computes
            rep.findings.append(Finding("quant.degenerate", "warning", f"node {name!r}: {why}.",
                                        "Re-calibrate this layer (its range is almost empty).", {"op": op}))
            continue
        rep.findings.append(Finding("board.refusal", "error", f"the board's toolchain refuses this node: {why}.",
                                    "Fix the quantization of this layer (see the message), or run it on another "
                                    "board.", {"op": op}))
    # degenerate quantizations the board's NPU compiler takes (where the host runtime would refuse them)
    for name, op, why in program.compiler_notes:
        rep = by_source.get(name)
        if rep is not None:
            rep.findings.append(Finding("quant.degenerate", "warning", f"node {name!r}: {why}.",
                                        "Re-calibrate this layer (its range is almost empty) or check the float "
                                        "model there.", {"op": op}))
    # nodes the board's arithmetic cannot compute yet: checked on their structure, not simulated
    for name, op, why in program.arith_gaps:
        rep = by_source.get(name)
        finding = Finding(
            "npu.arithmetic", "info",
            f"npu-sim cannot yet compute {op} in this board's {program.board.arithmetic.requantize} arithmetic "
            f"({why}); the rules and the estimate use its structure, but `npu-sim run` refuses the model on this "
            f"board.", "Simulate on another board (e.g. --board default) until this op is covered.", {"op": op})
        if rep is None:
            rep = NodeReport(name, op, "NPU", "-", simulated=False)
            reports.append(rep)
        rep.simulated = False
        rep.findings.append(finding)
    model_findings = []
    for r in RULES:
        if r.scope == "model":
            model_findings += [_finding(r, v) for v in _results(r.func(ctx))]
    return CheckResult(program.model_path, program.board.name, reports, model_findings)


def int16_allowed(program: Program, node: Node) -> bool:
    """Whether ``node`` may run with 16-bit activations on the program's board: the op runs on the NPU, takes
    int16 activations there, and one output's dot product (in_ch/groups x kh x kw, see
    ``npu_sim.opset.reduction_length``) stays within the board's ``int16_max_reduction``. A node on the CPU (or on
    a board without rules) always may."""
    rules = program.board.rules
    if not rules.constrained:
        return True
    lim = rules.limits(node.op)
    if lim is None:
        return True
    allowed = lim.activation_dtypes or rules.activation_dtypes
    if "int16" not in allowed:
        return False
    if lim.int16_max_reduction is None:
        return True
    k = reduction(Context(program, rules, None), node)
    return k is None or k <= lim.int16_max_reduction

