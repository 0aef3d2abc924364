"""The report's independent pieces of work (its samples; the advisor's measurements) as tasks of an engine
(``npu_sim.runtime.engines.run_tasks``): how many workers a job gets (``plan``), a state this process already
built reused as the in-process worker's (``built_here``/``here``), and a task's bad-input error carried back to
be raised here (``BadInput``, ``raise_failures``)."""
from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_sim import errors
from npu_sim.boards import Board
from npu_sim.errors import NpuSimError
from npu_sim.runtime.engines import EngineOptions, TaskFailed, default_workers

START_SECONDS = 5.0  # a worker's own start before its set-up: a fresh interpreter, imports, the kernels' cache
IN_PROCESS = EngineOptions("local", 1)

_HERE: dict[str, Any] = {}  # states built in this process for a job, by the job's key


def new_key() -> str:
    return uuid.uuid4().hex


@contextlib.contextmanager
def built_here(key: str, state):
    """While the job ``key`` runs, ``here(key)`` is ``state``: a worker in this process (one worker) takes the
    state the caller already built instead of building its own; a worker process or a Ray actor builds one."""
    _HERE[key] = state
    try:
        yield
    finally:
        _HERE.pop(key, None)


def here(key: str):
    return _HERE.get(key)


def board_spec(board):
    """A board as a worker rebuilds it: a board loaded from a file travels as the file's path."""
    if isinstance(board, Board) and board.source and Path(board.source).is_file():
        return board.source
    return board


def plan(options: EngineOptions, tasks: int, work: float | None = None, setup: float = 0.0,
         cap: int | None = None) -> EngineOptions:
    """The engine options a job of ``tasks`` independent tasks runs with. Explicit ``options.workers`` are kept,
    at most ``tasks`` and ``cap``. Without (``None``), as many workers as pay for themselves: each one's share of
    ``work`` (estimated seconds; ``None``: unknown) at least twice its start (``START_SECONDS`` plus ``setup``,
    what building the state took here), at most ``cap``, ``tasks`` and, locally, one per core; on Ray the
    cluster's CPUs (the engine starts at most one actor per task). One worker without an explicit count: this
    process, whatever the engine."""
    limit = max(1, min(tasks, cap if cap is not None else tasks))
    if options.workers is not None:
        workers = min(options.workers, limit)
        if options.kind == "local" and workers == 1:
            return IN_PROCESS
        return EngineOptions(options.kind, workers, options.ray_address)
    workers = limit if work is None else min(limit, int(work / (2.0 * (START_SECONDS + setup))))
    if options.kind == "local":
        workers = min(workers, default_workers())
    if workers <= 1:
        return IN_PROCESS
    return options if options.kind == "ray" else EngineOptions("local", workers)


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


def raise_failures(what: str, failures: list[tuple[str, Any]], note: str = "") -> None:
    """Raise for failed tasks, ``(label, failure)`` in task order, ``what`` saying of what (e.g. "report: sample(s)")
    and ``note`` after the labels:
    a ``BadInput`` as its own error naming every failed label (exit 2); a ``TaskFailed`` (an exception other than
    bad input, or a worker that died on every try) as a ``RuntimeError`` naming them: a bug."""
    if not failures:
        return
    bugs = [(w, f) for w, f in failures if isinstance(f, TaskFailed)]
    shown = bugs or failures
    named = f"{what} " + ", ".join(w for w, _ in shown[:8]) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "") + note
    if bugs:
        raise RuntimeError(f"{named} failed: {bugs[0][1].error}")
    raise failures[0][1].error(named)
