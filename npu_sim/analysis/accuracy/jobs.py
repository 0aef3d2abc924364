"""The report's independent pieces of work (its samples; the advisor's measurements) as tasks of an engine
(``npu_sim.runtime.engines.run_tasks``): how many workers a job gets (``plan``), a state this process already
built reused as the in-process worker's (``built_here``/``here``), and a task's bad-input error carried back to
be raised here (``BadInput``, ``raise_failures``)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_sim import errors
from npu_sim.boards import Board
from npu_sim.errors import NpuSimError
from npu_sim.runtime.engines import EngineOptions, TaskFailed, default_workers
from npu_sim.runtime.memo import JOBS

# A worker's own start before its set-up: a fresh interpreter, imports (1.8 s), loading the kernels' cache (0.5 s
# on MobileNetV2: its first load and run 0.76 s in a fresh process, 0.22 s again) -- measured on this project's
# 2-core machine; rounded up for a busier one.
START_SECONDS = 3.0
IN_PROCESS = EngineOptions("local", 1)


def new_key() -> str:
    return uuid.uuid4().hex


def built_here(key: str, state):
    """While the job ``key`` runs, ``here(key)`` is ``state``: a worker in this process (one worker) takes the
    state the caller already built instead of building its own; a worker process or a Ray actor builds one."""
    return JOBS.lent(key, state)


def here(key: str):
    return JOBS.get(key)


def board_spec(board):
    """A board as a worker rebuilds it: a board loaded from a file travels as the file's path."""
    if isinstance(board, Board) and board.source and Path(board.source).is_file():
        return board.source
    return board


def plan(options: EngineOptions, tasks: int, work: float | None = None, setup: float = 0.0,
         cap: int | None = None) -> EngineOptions:
    """The engine options a job of ``tasks`` independent tasks runs with. On Ray: the cluster, with at most
    ``options.workers`` actors (or its CPUs), ``tasks`` and ``cap``. Locally: explicit ``options.workers`` are
    kept, at most ``tasks`` and ``cap``; without (``None``), as many processes as pay for themselves: each one's
    share of ``work`` (estimated seconds; ``None``: unknown) at least twice its start (``START_SECONDS`` plus
    ``setup``, what building the state took here), at most ``cap``, ``tasks`` and one per core. One local worker
    is this process."""
    limit = max(1, min(tasks, cap if cap is not None else tasks))
    if options.kind == "ray":
        return EngineOptions("ray", min(options.workers, limit), options.ray_address) if options.workers else options
    if options.workers is not None:
        workers = min(options.workers, limit)
    else:
        workers = limit if work is None else min(limit, int(work / (2.0 * (START_SECONDS + setup))))
        workers = min(workers, default_workers())
    return IN_PROCESS if workers <= 1 else EngineOptions("local", workers)


@dataclass
class BadInput:
    """A task's ``NpuSimError`` (bad data, a float model that does not fit, ...), carried back by its class name
    and message so that it is raised here as the same error (exit 2)."""
    kind: str
    message: str

    @classmethod
    def of(cls, exc: NpuSimError) -> "BadInput":
        return cls(type(exc).__name__, str(exc))

    def error(self, where: str) -> NpuSimError:
        kind = getattr(errors, self.kind, NpuSimError)
        if not (isinstance(kind, type) and issubclass(kind, NpuSimError)):
            kind = NpuSimError
        return kind(f"{where}: {self.message}")


def spans(indices, most: int = 8) -> str:
    """Sorted indices as runs: "0-9, 12, 15-17", at most ``most`` runs then "and N more"."""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs[:most])
    return text + (f" and {len(runs) - most} more" if len(runs) > most else "")


def raise_failures(what: str, failures: list[tuple[str, Any]], note: str = "") -> None:
    """Raise for failed tasks, ``(label, failure)`` in task order, ``what`` saying of what (e.g. "report: sample(s)")
    and ``note`` after the labels:
    a ``BadInput`` as its own error naming every failed label (exit 2); a ``TaskFailed`` (an exception other than
    bad input, or a worker that died on every try) as a ``RuntimeError`` naming them: a bug."""
    if not failures:
        return
    bugs = [(w, f) for w, f in failures if isinstance(f, TaskFailed)]
    shown = bugs or failures
    more = f" and {len(shown) - 8} more" if len(shown) > 8 else ""
    named = f"{what} " + ", ".join(w for w, _ in shown[:8]) + more + note
    if bugs:
        raise RuntimeError(f"{named} failed: {bugs[0][1].error}")
    raise failures[0][1].error(named)
