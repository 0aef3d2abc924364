"""Everything the advisor adds to a finished accuracy report (``annotate``): check findings and the latency
breakdown next to its layers, the sensitivity ranking, the int16 advice, the fix (written as JSON), and with
calibration data the re-quantized model, simulated and scored."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from npu_sim.analysis.advisor.advise import advise, bias_remedy, make_fix, weight_candidates
from npu_sim.analysis.advisor.board_fix import board_settings, finding_overrides, verdict
from npu_sim.analysis.advisor.evaluator import Evaluator, estimated_cycles
from npu_sim.analysis.advisor.sensitivity import layers_of, sensitivity, shortlist
from npu_sim.analysis.check import check_program
from npu_sim.analysis.cost import estimate_program
from npu_sim.analysis.metrics import json_number
from npu_sim.errors import BoardError
from npu_sim.qdq import recalibrate as requant
from npu_sim.qdq.float_model import output_aliases
from npu_sim.runtime.engines import EngineOptions


def checks_section(check_result, report) -> dict:
    by_node: dict[str, list] = {}
    for node, f in check_result.findings:
        by_node.setdefault(node, []).append({"rule": f.rule, "severity": f.severity, "message": f.message,
                                             "fix": f.fix, "values": f.values,
                                             "quantization_setting": f.quantization_setting})
    tensors: dict[str, list[str]] = {}
    for lay in report.layers:
        tensors.setdefault(lay.node, []).append(lay.tensor)
    layers = [{"node": node, "tensors": tensors.get(node, []), "findings": fl}
              for node, fl in by_node.items() if node != "<model>"]
    return {"board": check_result.board, "deployable": check_result.deployable,
            "errors": check_result.count("error"), "warnings": check_result.count("warning"),
            "infos": check_result.count("info"), "model_findings": by_node.get("<model>", []), "layers": layers}


def latency_section(est) -> dict:
    s = est.summary
    return {"board": est.board, "clock_hz": est.clock_hz, "total_cycles": s["total_cycles"],
            "latency_ms": s["latency_ms"], "fps": json_number(s["fps"]), "cycles_by_class": s["cycles_by_class"],
            "layers": [{"node": r.node, "op": r.op, "op_class": r.op_class, "precision": r.precision,
                        "target": r.target, "cycles": r.cycles, "share_pct": r.share, "bound": r.bound}
                       for r in est.layers]}


@dataclass
class AdviceOptions:
    samples: int = 8                 # samples the sensitivity/advisor measure on (the report's first ones)
    sensitivity: bool = True
    max_slowdown: float | None = 1.2
    budget_ms: float | None = None
    max_points: int = 10
    candidates: int | None = None    # measure the sensitivity of only this many layers (``shortlist``)
    overrides: str | None = None     # write the fix JSON here
    calibration: list | None = None  # feeds for --requantize
    calibration_source: str = ""
    fixed_model: str | None = None   # where the re-quantized model goes
    eval_samples: list | None = None  # samples to measure before/after the fix on (default: the report's)


def annotate(report, samples: list[dict], board, float_model=None, input_shapes=None,
             options: AdviceOptions | None = None, progress=None, engine: EngineOptions | None = None,
             advisor_progress=None, model=None) -> None:
    """Fill ``report.checks``, ``.latency``, ``.sensitivity`` and ``.advisor`` (see the module docstring).
    ``model``: the report's model already open (``open_model``; default: ``report.model`` is read).

    ``engine``: where the sensitivity's and the advisor's measurements run (``EngineOptions``; None: in this
    process); the numbers do not depend on it. ``progress(done, total)`` is called as the sensitivity's layers are
    measured, ``advisor_progress(done, total)`` as the advisor's curve points are."""
    opt = options or AdviceOptions()
    t0 = time.perf_counter()
    ev = Evaluator(report.model if model is None else model, float_model, board, samples[:max(1, opt.samples)],
                   input_shapes)
    built = time.perf_counter() - t0
    try:
        chk = check_program(ev.base.program)
        report.checks = checks_section(chk, report)
        try:
            est = estimate_program(ev.base.program, ev.base.board)
            report.latency = latency_section(est)
            base_cycles, clock = float(est.summary["total_cycles"]), est.clock_hz
        except BoardError as exc:
            report.latency = None
            base_cycles, clock = None, None
            report.latency_note = str(exc)
        settings = requant.quantization_settings(ev.proto)
        board_q, board_extra, changes = board_settings(settings, ev.base.board.rules)
        remedy = bias_remedy(chk, settings, ev.base)
        if opt.sensitivity:
            layers = layers_of(ev.base, ev.proto)
            measured, skipped = shortlist(layers, report, opt.candidates)
            sens = sensitivity(ev, measured, base_cycles, progress, engine, built)
            report.sensitivity = {"samples": len(ev.samples), "baseline": ev.base_score.to_dict(),
                                  "metric": "output cosine / SQNR vs the float reference (lowest over outputs)",
                                  "layers": sens, "candidates": opt.candidates,
                                  "not_measured": [lay.tensor for lay in skipped]}
            adv = advise(ev, layers, sens, base_cycles, opt.max_slowdown, opt.budget_ms, clock, opt.max_points,
                         engine=engine, built=built, progress=advisor_progress, names=output_aliases(ev.proto))
            adv["weight_int16"] = weight_candidates(ev.base, sens)
        else:
            adv = {"skipped": "sensitivity not measured (--no-sensitivity): no int16 advice", "chosen": [],
                   "curve": []}
        adv["bias_remedy"] = remedy
        adv["settings"] = settings.to_dict()
        adv["board_settings"] = {"board": chk.board, "changes": changes, "settings": board_q.to_dict()}
        aliases = output_aliases(ev.proto)
        adv["output_names"] = aliases  # (the names the chosen list is shown by)
        fix = requant.merge_extra_options(board_extra, make_fix(
            adv["chosen"], remedy, aliases, [w["weight"] for w in adv.get("weight_int16") or []]))
        if opt.calibration is not None:
            adv["requantized"], fix = _requantize_and_measure(ev, report, float_model, board_q, fix, opt,
                                                              base_cycles, aliases)
            adv["requantized"]["fix_empty"] = not fix and not changes
        adv["fix"] = fix
        if opt.overrides:
            Path(opt.overrides).write_text(json.dumps(fix, indent=1) + "\n")
            adv["overrides_file"] = opt.overrides
        report.advisor = adv
    finally:
        ev.close()


def _requantize_and_measure(ev, report, float_model, settings, fix, opt, base_cycles, aliases) -> tuple[dict, dict]:
    """The re-quantized model, measured and checked, and the fix it took: the given one, plus per-tensor
    overrides when the board still refused a quantization setting of the first re-quantization (once)."""
    if not float_model:
        return {"error": "re-quantization needs the float model (--float)"}, fix
    out = opt.fixed_model or Path(report.model).name.replace(".qdq.onnx", ".onnx").replace(".onnx", ".fixed.qdq.onnx")
    t0 = time.perf_counter()
    used = requant.requantize(ev.ref.model, str(float_model), out, opt.calibration, settings, fix)  # read once
    sim = ev.load(out, "fixed")
    chk = check_program(sim.program)
    more = finding_overrides(chk, aliases, fix)
    if more:  # what the settings did not reach (an op's own dtypes): the check's own fixes, tensor by tensor
        fix = requant.merge_extra_options(fix, more)
        used = requant.requantize(ev.ref.model, str(float_model), out, opt.calibration, settings, fix)
        sim = ev.load(out, "fixed")
        chk = check_program(sim.program)
    samples = opt.eval_samples or ev.samples
    if samples is ev.samples:
        refs = ev.refs
    else:
        refs = [{k: v for k, v in ev.ref.run(s).items() if k in ev.outputs} for s in samples]
    before = ev.score_sim(ev.base, samples, refs)
    after = ev.score_sim(sim, samples, refs)
    c = estimated_cycles(sim)
    return {"model": out, "calibration": opt.calibration_source, "calibration_samples": len(opt.calibration),
            "settings": {k: v for k, v in settings.to_dict().items() if k not in ("extra_options", "source")},
            "extra_options": used, "samples": len(samples),
            "before": before.to_dict(), "after": after.to_dict(),
            "cycles_before": base_cycles, "cycles_after": c,
            "bias_saturated_after": sum(1 for _, f in chk.findings if f.rule == "bias.saturated"),
            "check": verdict(chk), "tensor_overrides": sorted((more.get("TensorQuantOverrides") or {})),
            "seconds": round(time.perf_counter() - t0, 2)}, fix
