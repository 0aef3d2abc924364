"""The deployability check as text: findings by node and a summary (JSON: ``CheckResult.to_dict``)."""
from __future__ import annotations

from npu_sim.analysis.check import SEVERITIES, CheckResult, Finding


def format_result(result: CheckResult, quiet: bool = False) -> str:
    """The text report: one line per node, its findings under it. A fix is written out where it first appears;
    the same fix again (a rule that hits many nodes) refers back to it."""
    lines = [f"npu-sim check: {result.model} on board '{result.board}'"]
    first_fix: dict[str, str] = {}  # fix text -> where it was written out
    width = min(40, max([len(n.node) for n in result.nodes] + [4]))
    opw = min(18, max([len(n.op) for n in result.nodes] + [2]))
    lines.append(f"{'node':{width}}  {'op':{opw}}  place  precision  findings")
    for f in result.model_findings:
        lines += _finding_lines(f, first_fix, "the model")
    for n in result.nodes:
        if quiet and not n.findings:
            continue
        counts = [f"{sum(f.severity == s for f in n.findings)} {s}" for s in SEVERITIES
                  if any(f.severity == s for f in n.findings)]
        name = n.node if len(n.node) <= width else "…" + n.node[-(width - 1):]
        lines.append(f"{name:{width}}  {n.op:{opw}}  {n.placement:5}  {n.precision:9}  {', '.join(counts) or 'ok'}")
        for f in n.findings:
            lines += _finding_lines(f, first_fix, n.node)
    npu = sum(n.placement == "NPU" for n in result.nodes)
    verdict = "DEPLOYABLE" if result.deployable else "NOT DEPLOYABLE"
    lines.append(f"summary: {len(result.nodes)} nodes ({npu} NPU, {len(result.nodes) - npu} CPU); "
                 f"{result.count('error')} error(s), {result.count('warning')} warning(s), "
                 f"{result.count('info')} info -> {verdict} on board '{result.board}'")
    by_rule: dict[str, int] = {}
    for _, f in result.findings:
        if f.severity != "info":
            by_rule[f"{f.severity} {f.rule}"] = by_rule.get(f"{f.severity} {f.rule}", 0) + 1
    if by_rule:
        lines.append("         " + "; ".join(f"{k} x{v}" for k, v in sorted(by_rule.items())))
    return "\n".join(lines)


def _finding_lines(f: Finding, first_fix: dict[str, str], where: str) -> list[str]:
    fix = f.fix if first_fix.setdefault(f.fix, where) == where else f"as for {first_fix[f.fix]} above"
    return [f"    {f.severity:7} {f.rule}: {f.message}", f"            fix: {fix}"]
