"""Jobs for tests/test_engines.py and benchmarks/throughput.py, at module level so that spawned worker processes
(they get the parent's sys.path) and Ray actors (the engine puts this folder on their PYTHONPATH) import them by
name."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

import npu_sim
from npu_sim.errors import InputError

SETUPS = {"count": 0}  # set-ups run in this process


def setup_scale(arg: dict) -> dict:
    """The toy job's set-up: ``arg["scale"]``; raises when ``arg["fail"]`` (a model that does not load)."""
    if arg.get("fail"):
        raise InputError(f"model {arg['fail']!r} cannot be read")
    SETUPS["count"] += 1
    return {"scale": arg["scale"]}


def scaled_square(state: dict, payload):
    """``scale * x * x`` for ``payload = x``; ``("raise", x)`` raises; ``("die_once", marker, x)`` kills its
    process unless ``marker`` exists (it creates it first); ``("die", x)`` always kills its process. Returns the
    value, this process's id and how many set-ups ran in it."""
    if isinstance(payload, tuple):
        kind, *rest = payload
        if kind == "raise":
            raise ValueError(f"sample {rest[0]} is broken")
        if kind == "die":
            os._exit(3)
        if kind == "die_once":
            marker = Path(rest[0])
            if not marker.exists():
                marker.write_text("died once")
                os._exit(3)
        payload = rest[-1]
    return state["scale"] * payload * payload, os.getpid(), SETUPS["count"]


def load_model(arg: dict):
    """A real job's set-up: the model loaded and lowered once per worker."""
    return npu_sim.load(arg["model"], input_shapes=arg.get("input_shapes"))


def run_raw(sim, shard: dict) -> dict:
    """A real job's task: every sample of a shard (``{input name: [N, ...] array}``) run one at a time; the
    board's integers of every output, stacked."""
    names = list(shard)
    outs: dict[str, list] = {}
    for k in range(len(shard[names[0]])):
        result = sim.run({n: shard[n][k:k + 1] for n in names}, raw=True)
        for name, q in result.items():
            outs.setdefault(name, []).append(q)
    return {name: np.concatenate(qs) for name, qs in outs.items()}


def run_raw_timed(sim, shard: dict) -> dict:
    """:func:`run_raw`, when it started and ended (``time.time()``, comparable across processes of one machine),
    the CPU time it took and in which process: how busy the engine keeps its workers, and how much of a core
    each got."""
    start, cpu = time.time(), time.process_time()
    out = run_raw(sim, shard)
    return {"out": out, "start": start, "end": time.time(), "cpu": time.process_time() - cpu, "pid": os.getpid()}


def lock_or_value(state, payload):
    """A result that cannot be pickled (a lock) for ``"lock"``, else the payload."""
    return threading.Lock() if payload == "lock" else payload


def where(state, payload) -> dict:
    """The files this process imported npu_sim and this module from."""
    return {"npu_sim": npu_sim.__file__, "engine_tasks": __file__}


def empty(state, payload):
    """No work: a task's round trip through the engine (the benchmark's per-task overhead)."""
    return payload


def memory(state, shard) -> dict:
    """This worker's resident memory in MiB (``VmRSS`` now, ``VmHWM`` its peak), after running ``shard`` on the
    worker's simulator if one is given (the benchmark's memory per worker)."""
    if shard is not None:
        run_raw(state, shard)
    status = Path("/proc/self/status").read_text().splitlines()
    kib = {line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith(("VmRSS", "VmHWM"))}
    return {"rss_mib": kib["VmRSS"] / 1024, "peak_mib": kib["VmHWM"] / 1024}


def _refuse_to_load():
    raise ModuleNotFoundError("No module named 'ghost_tasks'")


class Unloadable:
    """A set-up argument that cannot be unpickled in a worker (as if its module were missing there)."""

    def __reduce__(self):
        return (_refuse_to_load, ())
