"""The int16 advisor (``advise``: the accuracy-latency curve and the chosen point within budget), the bias remedy
(``bias_remedy``), int16 weights where activations are already 16-bit (``weight_candidates``), and the fix as
quantize_static extra_options (``make_fix``)."""
from __future__ import annotations

import math

from npu_sim.analysis.advisor import tasks
from npu_sim.analysis.advisor.evaluator import Evaluator, sqnr_key
from npu_sim.analysis.advisor.sensitivity import Layer
from npu_sim.analysis.metrics import json_number
from npu_sim.boards.rules import Rules
from npu_sim.opset import kind_of
from npu_sim.qdq.recalibrate import QuantSettings
from npu_sim.runtime.engines import EngineOptions


def bias_remedy(check_result, settings: QuantSettings, sim) -> dict | None:
    """The re-quantization that keeps clipped int32 biases in range (see the module docstring)."""
    hits = [(node, f) for node, f in check_result.findings if f.rule == "bias.saturated"]
    if not hits:
        return None
    prog = sim.program
    nodes = {n.name: n for n in prog.nodes}
    layers, weights = [], []
    for node, f in hits:
        n = nodes.get(node)
        w = None
        if n is not None and len(n.inputs) > 1:
            wname = prog.tensors[n.inputs[1]].name
            w = wname[:-len("_quantized")] if wname.endswith("_quantized") else wname
            weights.append(w)
        layers.append({"node": node, "channels": f.values.get("channel_list", []), "weight": w,
                       "tensor": prog.tensors[n.outputs[0]].float_name if n is not None else None})
    if settings.extra_options.get("QDQDisableWeightAdjustForInt32Bias"):
        fix = {"QDQDisableWeightAdjustForInt32Bias": False}
        how = ("the model was quantized with QDQDisableWeightAdjustForInt32Bias=True (onnxruntime's weight-scale "
               "adjustment for int32 biases off, as 1.18 behaved): turn it back on (onnxruntime >= 1.20.1), which "
               "enlarges the tiny weight scales of those channels so their biases fit")
    else:
        fix = {"TensorQuantOverrides": {w: [{"quant_type": "QInt8", "symmetric": True}] for w in weights if w}}
        how = ("per-tensor int8 weights for the affected layers (their bias scale input scale x weight scale grows "
               "by orders of magnitude, so the int32 bias fits)")
    return {"layers": layers, "extra_options": fix, "remedy": how}


def _label(p: dict, names: dict) -> str:
    """A curve point as the user reads it (``names``: a graph output's own name for the tensor quantize_static
    renamed ``X_QuantizeLinear_Input``)."""
    first, last = (names.get(t, t) for t in (p["tensors"][0], p["tensors"][-1])) if p["tensors"] else ("-", "-")
    if p.get("kind") == "segment":
        a, b, n = p["range"][0], p["range"][1], p["of"]
        if b - a == 1:
            return f"segment {a + 1} of {n} int16-allowed layers ({first})"
        return f"segment {a + 1}-{b} of {n} int16-allowed layers ({first} .. {last})"
    return last


def advise(ev: Evaluator, layers: list[Layer], sens: list[dict], base_cycles: float | None,
           max_slowdown: float | None = 1.2, budget_ms: float | None = None, clock_hz: float | None = None,
           max_points: int = 10, segment_levels: int = 3, engine: EngineOptions | None = None, built: float = 0.0,
           progress=None, names: dict | None = None) -> dict:
    """The int16 advice (see ``npu_sim.analysis.advisor``): the greedy order of the int16 candidates, the measured
    accuracy-latency curve (greedy prefixes and contiguous segments), and the best point within the budget. The
    curve's points are measured as engine tasks (``tasks.measure_all``; ``engine`` None: here), ``progress(done,
    total)`` as they are."""
    res = {"budget": None, "baseline": {"cosine": ev.base_score.cosine, "sqnr_db": json_number(ev.base_score.sqnr_db),
                                        "cycles": base_cycles},
           "order": [], "curve": [], "chosen": [], "chosen_point": None,
           "method": "greedy by SQNR gain per added cycle, plus contiguous segments of the int16-allowed layers "
                     "(halves, quarters, ...); every point promoted, re-simulated and re-estimated"}
    if base_cycles is None:
        res["skipped"] = "the board has no latency model ([cost] section): no budget, no int16 advice"
        return res
    budget = base_cycles * (max_slowdown if max_slowdown else math.inf)
    if budget_ms is not None and clock_hz:
        budget = min(budget, budget_ms * 1e-3 * clock_hz) if max_slowdown is None else budget_ms * 1e-3 * clock_hz
    res["budget"] = {"cycles": budget, "max_slowdown": max_slowdown if budget_ms is None else None,
                     "budget_ms": budget_ms, "ms": budget / clock_hz * 1e3 if clock_hz else None}
    cands = [r for r in sens if r["mode"] == "int16" and (r["gain_sqnr_db"] or 0) > 0 and r["delta_cycles"] is not None]
    cands.sort(key=lambda r: -(r["gain_sqnr_db"] / r["delta_cycles"] if r["delta_cycles"] > 0 else math.inf))
    res["order"] = [{"tensor": r["tensor"], "layer": r["layer"], "gain_sqnr_db": r["gain_sqnr_db"],
                     "delta_cycles": r["delta_cycles"]} for r in cands]
    points = _curve(ev, layers, cands, base_cycles, budget, max_points, segment_levels, (engine, built, progress))
    _mark_pareto(points, names or {})
    ok = [p for p in points if p["within_budget"]]
    best = max(ok, key=lambda p: (_sqnr_of(p), -p["cycles"]))
    best["chosen"] = True
    res["curve"] = points
    res["chosen"] = best["tensors"]
    res["chosen_point"] = {k: best[k] for k in ("k", "cycles", "slowdown", "cosine", "sqnr_db", "kind", "label")}
    return res


def _curve(ev: Evaluator, layers: list[Layer], cands: list[dict], base_cycles: float, budget: float,
           max_points: int, segment_levels: int, run=(None, 0.0, None)) -> list[dict]:
    """The measured points: prefixes of the greedy order ``cands`` (at most ``max_points`` spread over it, always
    the largest prefix the summed cycle deltas predict within ``budget``), then contiguous segments of every
    int16-allowed layer (halves, quarters, ... down to ``segment_levels``); each set measured once, those not
    measured yet as engine tasks (``run``: the engine options, what building ``ev`` took, a progress callback)."""
    predicted, fit = base_cycles, 0
    for i, r in enumerate(cands):
        predicted += max(r["delta_cycles"], 0)
        if predicted <= budget:
            fit = i + 1
    n = len(cands)
    ks = {0, n, fit} | ({round(n * j / (max_points - 1)) for j in range(max_points)} if n > max_points else set(range(n + 1)))
    wanted, seen = [], set()

    def want(tensors, tag, **extra):
        if frozenset(tensors) not in seen:
            seen.add(frozenset(tensors))
            wanted.append((list(tensors), tag, extra))

    for k in sorted(ks):
        want([r["tensor"] for r in cands[:k]], f"curve_{k}", kind="greedy")
    # one layer at a time misses error spread over many layers (each alone gains little): contiguous segments of
    # every int16-allowed layer, in graph order, whatever their single gain
    allowed = [lay.tensor for lay in layers if lay.mode == "int16"]
    m = len(allowed)
    for level in range(segment_levels + 1 if m else 0):
        parts = 2 ** level
        if parts > m:
            break
        bounds = [round(m * j / parts) for j in range(parts + 1)]
        for j in range(parts):
            a, b = bounds[j], bounds[j + 1]
            want(allowed[a:b], f"seg_{level}_{j}", kind="segment", range=[a, b], of=m)
    todo = [(t, tag) for t, tag, _ in wanted if t and not ev.measured(t)]
    engine, built, progress = run
    tasks.measure_all(ev, [tasks.int16_variant(t, tag) for t, tag in todo], [tag for _, tag in todo], engine, built,
                      progress)
    points = []
    for tensors, tag, extra in wanted:
        sc, cyc = (ev.base_score, base_cycles) if not tensors else ev.measure(tensors, tag)
        points.append({"k": len(tensors), "tensors": list(tensors), "cycles": cyc,
                       "slowdown": cyc / base_cycles if base_cycles else None, "cosine": sc.cosine,
                       "sqnr_db": json_number(sc.sqnr_db), "within_budget": cyc <= budget * (1 + 1e-12), **extra})
    return points


def _sqnr_of(p: dict) -> float:
    return sqnr_key(p["sqnr_db"] if p["sqnr_db"] is not None else math.inf)


def _mark_pareto(points: list[dict], names: dict) -> None:
    """``pareto``: no other point has at most its cycles and at least its SQNR, and is better in one; ``label``."""
    for p in points:
        p["pareto"] = not any(q is not p and q["cycles"] <= p["cycles"] and _sqnr_of(q) >= _sqnr_of(p) and
                              (q["cycles"] < p["cycles"] or (q["sqnr_db"] or 0) > (p["sqnr_db"] or 0))
                              for q in points)
        p["label"] = _label(p, names)


def weight_candidates(sim, sens: list[dict], min_gain_db: float = 1.0, limit: int = 3) -> list[dict]:
    """MAC layers whose activations are already 16-bit (int16 activations cannot help them) and whose *float*
    sensitivity gains at least ``min_gain_db``: the op in float loses the error of its 8-bit weights, so the fix
    puts those weights at int16 (where the board's ``weight_dtypes`` allow it), at most ``limit``, best first.
    Not simulated before re-quantization (the QDQ model has no float weights): measured with ``--requantize``."""
    prog = sim.program
    nodes = {n.name: n for n in prog.nodes}
    rules = prog.board.rules or Rules()
    out = []
    for r in sens:
        if r["mode"] != "float" or (r["gain_sqnr_db"] or 0.0) < min_gain_db:
            continue
        n = nodes.get(r["layer"])
        if n is None or kind_of(n.op) != "mac" or len(n.inputs) < 2:
            continue
        x, w = prog.tensors[n.inputs[0]], prog.tensors[n.inputs[1]]
        if not w.is_const or w.q is None or w.q.bits != 8 or x.q is None or x.q.bits < 16:
            continue
        lim = rules.limits(n.op) if rules.constrained else None
        allowed = (lim.weight_dtypes if lim is not None and lim.weight_dtypes else rules.weight_dtypes)
        if "int16" not in allowed:
            continue
        wname = w.name[:-len("_quantized")] if w.name.endswith("_quantized") else w.name
        out.append({"layer": n.name, "tensor": r["tensor"], "weight": wname, "gain_sqnr_db": r["gain_sqnr_db"]})
        if len(out) >= limit:
            break
    return out


def make_fix(chosen: list[str], remedy: dict | None, aliases: dict | None = None,
             weights: list[str] | None = None) -> dict:
    """quantize_static extra_options (JSON form): the chosen tensors at int16, plus the bias remedy. ``aliases``:
    QDQ float name -> the float model's name (a graph output quantize_static renamed ``X_QuantizeLinear_Input``)."""
    fix: dict = {}
    aliases = aliases or {}
    tqo = {aliases.get(t, t): [{"quant_type": "QInt16", "symmetric": True}] for t in chosen}
    tqo.update({w: [{"quant_type": "QInt16", "symmetric": True}] for w in weights or []})
    if remedy:
        extra = remedy["extra_options"]
        fix.update({k: v for k, v in extra.items() if k != "TensorQuantOverrides"})
        tqo.update(extra.get("TensorQuantOverrides", {}))
    if tqo:
        fix["TensorQuantOverrides"] = tqo
    return fix
