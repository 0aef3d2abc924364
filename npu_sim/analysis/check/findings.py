"""The check's data model and rule registry: findings, per-node reports, the result, the rule table, and the
``Context`` every rule reads.

A rule is a function registered with ``@rule(id, severity, group)``; its docstring is the message the user reads
(first paragraph: what is wrong; after a blank line: the fix), formatted with the values the rule returns.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Callable

from npu_sim.analysis.cost.memory import memory_report
from npu_sim.boards.rules import Rules
from npu_sim.ir import Node, Program, Tensor
from npu_sim.opset import WEIGHT_INPUT, kind_of

SEVERITIES = ("error", "warning", "info")
SCHEMA_VERSION = 1
INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


@dataclass
class Finding:
    rule: str
    severity: str
    message: str
    fix: str
    values: dict = field(default_factory=dict)

    @property
    def quantization_setting(self) -> bool:
        """Whether its rule is about a quantization setting (``Rule.quantization_setting``)."""
        return any(r.quantization_setting for r in RULES if r.id == self.rule)


@dataclass
class NodeReport:
    node: str
    op: str
    placement: str           # "NPU" | "CPU"
    precision: str           # e.g. "a8w8", "a16", "-"
    findings: list[Finding] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # ONNX nodes folded into it
    simulated: bool = True   # False: npu-sim could not lower it (the finding says why)


@dataclass
class CheckResult:
    model: str
    board: str
    nodes: list[NodeReport]
    model_findings: list[Finding]

    @property
    def findings(self) -> list[tuple[str, Finding]]:
        out = [("<model>", f) for f in self.model_findings]
        return out + [(n.node, f) for n in self.nodes for f in n.findings]

    @property
    def moved(self) -> set[str]:
        """The nodes placed on the CPU although their op is an NPU op (the board's NPU compiler refuses them)."""
        return {n.node for n in self.nodes if n.placement == "CPU" and any(f.rule.startswith("limit.")
                                                                           for f in n.findings)}

    def count(self, severity: str) -> int:
        return sum(1 for _, f in self.findings if f.severity == severity)

    @property
    def deployable(self) -> bool:
        return self.count("error") == 0

    @property
    def not_simulated(self) -> list[str]:
        """Nodes npu-sim cannot simulate on this board (not lowered, refused, or outside the board's arithmetic):
        `npu-sim run` refuses the model while any is left."""
        return [n.node for n in self.nodes if not n.simulated]

    @property
    def simulated(self) -> bool:
        return not self.not_simulated

    def to_dict(self) -> dict:
        return {
            "schema": "npu-sim-check", "version": SCHEMA_VERSION, "model": self.model, "board": self.board,
            "deployable": self.deployable,
            "simulated": self.simulated,
            "summary": {"nodes": len(self.nodes), "npu": sum(n.placement == "NPU" for n in self.nodes),
                        "cpu": sum(n.placement == "CPU" for n in self.nodes),
                        **{s + "s": self.count(s) for s in SEVERITIES}},
            "model_findings": [asdict(f) for f in self.model_findings],
            "nodes": [asdict(n) for n in self.nodes],
        }


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    group: str              # "board" | "hazard" | "lint"
    func: Callable
    scope: str = "node"     # "node": func(ctx, node) ; "model": func(ctx)
    # the finding is a quantization setting the board does not take (a dtype, a zero point): fixed by quantizing
    # the model with the board's settings (what re-quantizing it applies), not a cause of lost accuracy
    quantization_setting: bool = False

    @property
    def text(self) -> tuple[str, str]:
        doc = (self.func.__doc__ or "").strip()
        msg, _, fix = doc.partition("\n\n")
        return " ".join(msg.split()), " ".join(fix.split())


# In registration order, which is the order of findings on a node and of docs/SUPPORTED_OPS.md: board rules,
# numeric hazards, lint (``engine`` imports the rule modules in that order).
RULES: list[Rule] = []


def rule(rule_id: str, severity: str, group: str, scope: str = "node", quantization_setting: bool = False):
    """Register a constraint function. It returns None (passes), a dict of measured values (one finding), or a
    list of such dicts. A dict may carry ``severity`` to override the rule's default."""
    def deco(func):
        RULES.append(Rule(rule_id, severity, group, func, scope, quantization_setting))
        return func
    return deco


class Context:
    """What a rule may read: the program, the board's rules, placement, and measured run data."""

    def __init__(self, program: Program, rules: Rules, overflows: dict | None):
        self.program = program
        self.rules = rules
        self.lint = rules.lint
        self.arith = program.board.arithmetic
        self.overflows = overflows  # node -> count, when a run was made
        self.limits = {n.name: rules.limits(n.op) for n in program.nodes}
        self.graph_inputs = set(program.inputs.values())

    @cached_property
    def memory(self) -> dict:
        """The program's memory report (``npu_sim.analysis.cost.memory.memory_report``), made once for the
        ``memory.*`` rules."""
        return memory_report(self.program)

    def t(self, name: str) -> Tensor:
        return self.program.tensors[name]

    def acts(self, node: Node) -> list[Tensor]:
        """Integer activation tensors of the node (non-constant inputs, outputs)."""
        ts = [self.t(n) for n in node.inputs if not self.t(n).is_const] + [self.t(n) for n in node.outputs]
        return [t for t in ts if t.q is not None]

    def owned(self, node: Node) -> list[Tensor]:
        """The activation tensors a finding about quantization belongs to: the node's outputs (data movement
        keeps its input's quantization: its producer answers for it) and integer model inputs it reads."""
        ts = [self.t(n) for n in node.inputs if n in self.graph_inputs]
        if kind_of(node.op) != "movement":
            ts += [self.t(n) for n in node.outputs]
        return [t for t in ts if t.q is not None]

    def weight(self, node: Node) -> Tensor | None:
        if kind_of(node.op) != "mac" or len(node.inputs) <= WEIGHT_INPUT:
            return None
        w = self.t(node.inputs[WEIGHT_INPUT])
        return w if w.is_const and w.q is not None and w.data.ndim >= 2 else None
