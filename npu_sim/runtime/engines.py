"""Where the tasks of a dataset job run: in this process, in worker processes on this machine, or on a Ray cluster.

A job is ``setup(arg) -> state`` (run once per worker: load and lower the model) and ``task(state, payload) ->
result`` (one shard of samples). Both are module-level functions, so a worker process or a Ray actor imports them by
name; ``arg`` and every payload and result are pickled. :func:`run_tasks` yields ``(index, result)`` as tasks
finish, in any order; callers that need sample order put results back by index. A task that raises yields a
:class:`TaskFailed` in place of its result; a worker that dies has its tasks retried on a fresh worker.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from npu_sim.errors import InputError

ENGINES = ("local", "ray")
RETRIES = 2  # times a task is resubmitted after its worker died


@dataclass(frozen=True)
class EngineOptions:
    """``kind``: "local" (processes on this machine) or "ray"; ``workers``: processes or actors (None: one per
    core of this machine, or per CPU of the Ray cluster); ``ray_address``: the cluster to join (None:
    ``RAY_ADDRESS`` if set, else a local cluster started for the job)."""
    kind: str = "local"
    workers: int | None = None
    ray_address: str | None = None

    def __post_init__(self):
        if self.kind not in ENGINES:
            raise InputError(f"--engine {self.kind}: choose one of {', '.join(ENGINES)}")
        if self.workers is not None and self.workers < 1:
            raise InputError("--workers must be at least 1")


@dataclass
class TaskFailed:
    """A task that raised (``error``: its type and message) or whose worker died ``RETRIES + 1`` times."""
    error: str


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def run_tasks(setup: Callable[[Any], Any], arg: Any, task: Callable[[Any, Any], Any], payloads: list,
              options: EngineOptions = EngineOptions()) -> Iterator[tuple[int, Any]]:
    """``(index, task(state, payloads[index]))`` for every payload, as they finish (see the module docstring)."""
    if not payloads:
        return iter(())
    if options.kind == "ray":
        raise InputError("--engine ray is not available yet")
    workers = min(options.workers or default_workers(), len(payloads))
    if workers == 1:
        return _in_process(setup, arg, task, payloads)
    return _processes(setup, arg, task, payloads, workers)


def _in_process(setup, arg, task, payloads) -> Iterator[tuple[int, Any]]:
    state = setup(arg)
    for i, payload in enumerate(payloads):
        yield i, _guarded(task, state, payload)


def _guarded(task, state, payload):
    try:
        return task(state, payload)
    except Exception as exc:  # reported per task by the caller; the other tasks go on
        return TaskFailed(f"{type(exc).__name__}: {exc}")


_STATE: dict[str, Any] = {}  # a worker process's state, built once by its initializer


def _worker_init(setup, arg) -> None:
    _STATE["state"] = setup(arg)


def _worker_task(task, payload):
    return _guarded(task, _STATE["state"], payload)


def _processes(setup, arg, task, payloads, workers) -> Iterator[tuple[int, Any]]:
    """Spawned processes, each set up once; a pool broken by a dead worker is replaced and its unfinished tasks
    resubmitted (at most ``RETRIES`` times each)."""
    pending = dict(enumerate(payloads))
    tries = {i: 0 for i in pending}
    ctx = mp.get_context("spawn")
    while pending:
        with ProcessPoolExecutor(min(workers, len(pending)), mp_context=ctx, initializer=_worker_init,
                                 initargs=(setup, arg)) as pool:
            futures = {pool.submit(_worker_task, task, p): i for i, p in pending.items()}
            broken = False
            while futures and not broken:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = futures.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        tries[i] += 1
                        continue
                    pending.pop(i)
                    yield i, result
            for fut, i in futures.items():
                fut.cancel()
        for i in [i for i in pending if tries[i] > RETRIES]:
            pending.pop(i)
            yield i, TaskFailed("its worker process died on every try")
