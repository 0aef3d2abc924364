"""The advisor's measurements as engine tasks (``npu_sim.runtime.engines.run_tasks``): each worker builds its own
``Evaluator`` once (the baseline run of the measured samples; in this process, the caller's), a task is one
variant — a set of tensors promoted to int16, or one layer in float — and its score comes back; the same
numbers as measured here, in any order, put back in the order asked."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from npu_sim.analysis.accuracy import jobs
from npu_sim.analysis.advisor.evaluator import Evaluator
from npu_sim.errors import NpuSimError
from npu_sim.runtime.engines import EngineOptions, run_tasks


@dataclass
class EvalSpec:
    """What a worker needs to build the same ``Evaluator``; ``key`` names the job (``jobs.built_here``)."""
    model: str
    float_model: str | None
    board: Any
    samples: list
    input_shapes: dict
    key: str


def spec_of(ev: Evaluator) -> EvalSpec:
    return EvalSpec(ev.model, ev.float_model, jobs.board_spec(ev.board), ev.samples, dict(ev.shapes), jobs.new_key())


def setup(spec: EvalSpec) -> Evaluator:
    """A worker's evaluator: the one this process built for the job, else a new one."""
    return jobs.here(spec.key) or Evaluator(spec.model, spec.float_model, spec.board, spec.samples,
                                            spec.input_shapes)


def int16_variant(tensors, tag: str) -> tuple:
    """A payload: ``tensors`` promoted to int16 (``Evaluator.measure``)."""
    return ("int16", tuple(tensors), tag)


def float_variant(node_index: int, ir_tensor: str) -> tuple:
    """A payload: node ``node_index`` (writing ``ir_tensor``) in float (``Evaluator.float_layer``)."""
    return ("float", node_index, ir_tensor)


def measure(ev: Evaluator, payload: tuple) -> dict:
    """A task: ``{"score", "cycles" (int16) or "how" (float), "seconds"}``, or a ``jobs.BadInput``."""
    t0 = time.perf_counter()
    try:
        if payload[0] == "int16":
            score, cycles = ev.measure(payload[1], payload[2])
            out = {"score": score, "cycles": cycles}
        else:
            score, how = ev.float_layer(payload[1], payload[2])
            out = {"score": score, "how": how}
    except NpuSimError as exc:
        return jobs.BadInput.of(exc)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def measure_all(ev: Evaluator, payloads: list[tuple], labels: list[str], engine: EngineOptions | None,
                built: float, progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """``measure`` of every payload, in their order; int16 results are also cached in ``ev`` (``remember``).
    ``engine`` None: here. Locally without an explicit worker count the first one is measured here, timed, and the
    work that estimate gives decides how many workers pay for themselves (``jobs.plan``; ``built``: what building
    ``ev`` took)."""
    total = len(payloads)
    results: dict[int, Any] = {}
    options = engine or jobs.IN_PROCESS
    start, work = 0, None
    if options.kind == "local" and options.workers is None and total > 1:
        t = time.perf_counter()
        results[0] = measure(ev, payloads[0])
        work, start = (time.perf_counter() - t) * (total - 1), 1
        if progress:
            progress(1, total)
    opts = jobs.plan(options, total - start, work, built)
    spec = spec_of(ev)
    with jobs.built_here(spec.key, ev):
        for i, res in run_tasks(setup, spec, measure, payloads[start:], opts):
            results[start + i] = res
            if progress:
                progress(len(results), total)
    jobs.raise_failures("advisor: measurement(s) of", [(labels[i], results[i]) for i in range(total)
                                                       if not isinstance(results[i], dict)])
    for i, p in enumerate(payloads):
        if p[0] == "int16":
            ev.remember(p[1], (results[i]["score"], results[i]["cycles"]))
    return [results[i] for i in range(total)]
