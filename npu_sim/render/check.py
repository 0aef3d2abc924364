"""The deployability check as text (JSON: ``CheckResult.to_dict``).

Default: a summary grouped by rule, the most consequential first (errors, then warnings, then infos; within a
severity numeric hazards, which change results, before board rules and lint), each with its count, the first
nodes, one example message and the fix once; then a table of the nodes with errors. ``verbose``: every node with
every finding under it."""
from __future__ import annotations

from npu_sim.analysis.check import RULES, SEVERITIES, CheckResult, Finding
from npu_sim.render.text import NAME_CAP, column_width, cut_middle

GROUP_ORDER = {"hazard": 0, "board": 1, "lint": 2}
MODEL = "(model)"
TABLE_ROWS = 15      # nodes with errors listed by default; --verbose lists all
NODES_NAMED = 3      # nodes named per rule group
_GROUP_OF = {r.id: r.group for r in RULES}


def _keep(f: Finding, severity: str) -> bool:
    return SEVERITIES.index(f.severity) <= SEVERITIES.index(severity)


def format_result(result: CheckResult, quiet: bool = False, verbose: bool = False, severity: str = "info",
                  observed: str | None = None) -> str:
    """The text report. ``severity``: show findings at this severity or worse. ``observed``: what the run of
    ``check --run`` fed (it then says what it observed)."""
    lines = [f"npu-sim check: {result.model} on board '{result.board}'"]
    if verbose:
        lines += _listing(result, quiet, severity)
    else:
        lines += _grouped(result, quiet, severity, observed is not None)
    if observed is not None:
        lines += _observed(result, observed)
    lines += ([] if verbose else [""]) + _summary(result)
    if not verbose and any(_keep(f, severity) for _, f in result.findings):
        lines.append("(--verbose: every node with its findings in full; --json: the same as data)")
    return "\n".join(lines)


def _summary(result: CheckResult) -> list[str]:
    npu = sum(n.placement == "NPU" for n in result.nodes)
    verdict = "DEPLOYABLE" if result.deployable else "NOT DEPLOYABLE"
    return [f"summary: {len(result.nodes)} nodes ({npu} NPU, {len(result.nodes) - npu} CPU); "
            f"{result.count('error')} error(s), {result.count('warning')} warning(s), "
            f"{result.count('info')} info -> {verdict} on board '{result.board}'"]


def rule_order(severity: str, rule: str, count: int) -> tuple:
    """Sort key of a rule's group of findings, in the order of consequence: severity, then numeric hazards before
    board rules before lint, then the most hits first."""
    return (SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES),
            GROUP_ORDER.get(_GROUP_OF.get(rule, ""), 3), -count, rule)


def rule_groups(result: CheckResult, severity: str = "info") -> list[tuple[str, str, list[tuple[str, Finding]]]]:
    """(severity, rule, [(node, finding)]) in :func:`rule_order`."""
    groups: dict[tuple[str, str], list] = {}
    for node, f in result.findings:
        if _keep(f, severity):
            groups.setdefault((f.severity, f.rule), []).append((MODEL if node == "<model>" else node, f))
    order = sorted(groups, key=lambda k: rule_order(k[0], k[1], len(groups[k])))
    return [(sev, rule, groups[(sev, rule)]) for sev, rule in order]


def report_rule_groups(checks: dict) -> list[tuple[str, str, list[tuple[str, list[str], dict]]]]:
    """The same groups from a report's ``checks`` section (JSON): (severity, rule, [(node, tensors, finding)]),
    model-wide findings under node ``(model)``, in :func:`rule_order`."""
    groups: dict[tuple[str, str], list] = {}
    items = [(MODEL, [], f) for f in checks["model_findings"]]
    items += [(lay["node"], lay["tensors"], f) for lay in checks["layers"] for f in lay["findings"]]
    for node, tensors, f in items:
        groups.setdefault((f["severity"], f["rule"]), []).append((node, tensors, f))
    order = sorted(groups, key=lambda k: rule_order(k[0], k[1], len(groups[k])))
    return [(sev, rule, groups[(sev, rule)]) for sev, rule in order]


def fit_sentence(board: str, errors: int, rules: list[tuple[str, int]], model: str, board_arg: str) -> str:
    """The note run, estimate and report print when the model fails the board's check."""
    shown = ", ".join(f"{rule} x{n}" for rule, n in rules[:3]) + (", ..." if len(rules) > 3 else "")
    flag = "" if board_arg == "default" else f" --board {board_arg}"
    return (f"note: this model fails board '{board}' with {errors} check error(s) ({shown}); "
            f"`npu-sim check {model}{flag}` for why")


def _grouped(result: CheckResult, quiet: bool, severity: str, ran: bool) -> list[str]:
    groups = rule_groups(result, severity)
    lines = ["", "findings by rule (most consequential first):"] if groups else [
        "", "no findings" + ("" if severity == "info" else f" at severity {severity} or worse")]
    for sev, rule, hits in groups:
        nodes = [n for n, _ in hits]
        named = ", ".join(nodes[:NODES_NAMED]) + (f", and {len(nodes) - NODES_NAMED} more"
                                                  if len(nodes) > NODES_NAMED else "")
        lines.append(f"  {sev:7} {rule} x{len(hits)}: {named}")
        if quiet:
            continue
        first_node, first = hits[0]
        lines.append(f"          e.g. {first_node}: {first.message}")
        lines.append(f"          fix: {_fix(first, ran)}")
    if not quiet:
        lines += _error_table(result)
    return lines


def _fix(f: Finding, ran: bool) -> str:
    if ran and f.rule == "accumulator.worst_case":  # the run was made: its result is printed below
        return f.fix.replace("(run `npu-sim check --run` to see observed overflow)",
                             "(the run below says what it observed)")
    return f.fix


def _error_table(result: CheckResult) -> list[str]:
    """The nodes with errors (without errors: every node, where it runs), at most TABLE_ROWS of them."""
    bad = [n for n in result.nodes if any(f.severity == "error" for f in n.findings)]
    rows, title = (bad, f"nodes with errors ({len(bad)}):") if bad else (result.nodes, f"nodes ({len(result.nodes)}):")
    if not rows:
        return []
    width = column_width([n.node for n in rows], 4, NAME_CAP)
    opw = column_width([n.op for n in rows], 2, 24)
    lines = ["", title, f"  {'node':{width}}  {'op':{opw}}  place  precision  {'errors' if bad else 'findings'}"]
    for n in rows[:TABLE_ROWS]:
        what = sorted({f.rule for f in n.findings if f.severity == "error" or not bad}) or ["ok"]
        lines.append(f"  {cut_middle(n.node, width):{width}}  {cut_middle(n.op, opw):{opw}}  {n.placement:5}  "
                     f"{n.precision:9}  {', '.join(what)}")
    if len(rows) > TABLE_ROWS:
        lines.append(f"  ... and {len(rows) - TABLE_ROWS} more node(s){' with errors' if bad else ''} "
                     f"(--verbose lists every one)")
    return lines


def _observed(result: CheckResult, fed: str) -> list[str]:
    hits = [(n.node, f) for n in result.nodes for f in n.findings if f.rule == "accumulator.observed"]
    lines = ["", f"run ({fed}):"]
    if not hits:
        return lines + ["  no accumulator overflow observed on any node"]
    return lines + [f"  {node}: {f.values.get('count')} accumulator value(s) overflowed" for node, f in hits]


def _listing(result: CheckResult, quiet: bool, severity: str) -> list[str]:
    """Every node with its findings under it (``--verbose``). A fix is written out where it first appears; the
    same fix again (a rule that hits many nodes) refers back to it."""
    first_fix: dict[str, str] = {}  # fix text -> where it was written out
    width = column_width([n.node for n in result.nodes], 4, NAME_CAP)
    opw = column_width([n.op for n in result.nodes], 2, 24)
    lines = [f"{'node':{width}}  {'op':{opw}}  place  precision  findings"]
    for f in result.model_findings:
        if _keep(f, severity):
            lines += _finding_lines(f, first_fix, "the model")
    for n in result.nodes:
        shown = [f for f in n.findings if _keep(f, severity)]
        if (quiet or severity != "info") and not shown:
            continue
        counts = [f"{sum(f.severity == s for f in shown)} {s}" for s in SEVERITIES
                  if any(f.severity == s for f in shown)]
        lines.append(f"{cut_middle(n.node, width):{width}}  {cut_middle(n.op, opw):{opw}}  {n.placement:5}  "
                     f"{n.precision:9}  {', '.join(counts) or 'ok'}")
        for f in shown:
            lines += _finding_lines(f, first_fix, n.node)
    by_rule = [f"{sev} {rule} x{len(hits)}" for sev, rule, hits in rule_groups(result, severity) if sev != "info"]
    if by_rule:
        lines.append("by rule: " + "; ".join(by_rule))
    return lines


def _finding_lines(f: Finding, first_fix: dict[str, str], where: str) -> list[str]:
    fix = f.fix if first_fix.setdefault(f.fix, where) == where else f"as for {first_fix[f.fix]} above"
    return [f"    {f.severity:7} {f.rule}: {f.message}", f"            fix: {fix}"]


def fit_line(result: CheckResult, model: str, board_arg: str) -> str | None:
    """One line for run/estimate when the model fails the board's check (None when it fits)."""
    n = result.count("error")
    if not n:
        return None
    rules = [(rule, len(hits)) for _, rule, hits in rule_groups(result, "error")]
    return fit_sentence(result.board, n, rules, model, board_arg)
