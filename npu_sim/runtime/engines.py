"""Where the tasks of a dataset job run: in this process, in worker processes on this machine, or on a Ray cluster.

A job is ``setup(arg) -> state`` (run once per worker: load and lower the model) and ``task(state, payload) ->
result`` (one shard of samples). Both are module-level functions, so a worker process or a Ray actor imports them by
name; ``arg`` and every payload and result are pickled. :func:`run_tasks` yields ``(index, result)`` as tasks
finish, in any order; callers that need sample order put results back by index. A task that raises yields a
:class:`TaskFailed` in place of its result; a worker that dies has its tasks retried on a fresh worker; a
``setup`` that raises is raised by :func:`run_tasks` itself, whichever engine ran it. The Ray engine is in
``engine_ray.py`` (Ray is an optional extra, imported when a job asks for it).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from npu_sim.errors import InputError
from npu_sim.runtime import engine_ray
from npu_sim.runtime.outcome import RETRIES, SetupFailed, TaskFailed, guarded, set_up

__all__ = ["ENGINES", "RETRIES", "EngineOptions", "TaskFailed", "default_workers", "run_tasks"]

ENGINES = ("local", "ray")


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


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def run_tasks(setup: Callable[[Any], Any], arg: Any, task: Callable[[Any, Any], Any], payloads: list,
              options: EngineOptions = EngineOptions()) -> Iterator[tuple[int, Any]]:
    """``(index, task(state, payloads[index]))`` for every payload, as they finish (see the module docstring)."""
    if options.kind == "ray":
        ray = engine_ray.import_ray()  # before anything runs: no Ray is a clear error (exit 2), not a traceback
        if not payloads:
            return iter(())
        return engine_ray.run_on_ray(ray, setup, arg, task, payloads, options.workers, options.ray_address)
    if not payloads:
        return iter(())
    workers = min(options.workers or default_workers(), len(payloads))
    if workers == 1:
        return _in_process(setup, arg, task, payloads)
    return _processes(setup, arg, task, payloads, workers)


def _in_process(setup, arg, task, payloads) -> Iterator[tuple[int, Any]]:
    state = setup(arg)
    for i, payload in enumerate(payloads):
        yield i, guarded(task, state, payload)


_STATE: dict[str, Any] = {}  # a worker process's state, built once by its initializer


def _worker_init(setup, arg) -> None:
    _STATE["state"] = set_up(setup, arg)


def _worker_task(task, payload, index: int, started: str):
    Path(started, str(index)).touch()  # so that, if this process dies, the driver knows what it was running
    return guarded(task, _STATE["state"], payload)


def _processes(setup, arg, task, payloads, workers) -> Iterator[tuple[int, Any]]:
    """Spawned processes, each set up once. A pool broken by a dead worker is replaced; the tasks that were
    running in it are charged a try, and a task charged once runs alone in a pool of its own from then on (so a
    task that kills its worker cannot take others down with it); at most ``RETRIES`` retries each."""
    pending = dict(enumerate(payloads))
    tries = {i: 0 for i in pending}
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="npu-sim-tasks-") as started:
        while pending:
            suspects = [i for i in pending if tries[i] > 0]
            batch = suspects[:1] or list(pending)
            with ProcessPoolExecutor(min(workers, len(batch)), mp_context=ctx, initializer=_worker_init,
                                     initargs=(setup, arg)) as pool:
                futures = {pool.submit(_worker_task, task, pending[i], i, started): i for i in batch}
                try:
                    broken = yield from _pool_results(futures, pending)
                finally:  # an abandoned job or a set-up error does not wait for the tasks still queued
                    for fut in futures:
                        fut.cancel()
            if broken:
                for i in [i for i in pending if Path(started, str(i)).exists()]:
                    tries[i] += 1
                    Path(started, str(i)).unlink()
            for i in [i for i in pending if tries[i] > RETRIES]:
                pending.pop(i)
                yield i, TaskFailed("its worker process died on every try")


def _pool_results(futures: dict, pending: dict):
    """The results of one pool until it breaks (``pending`` loses what was answered); returns whether it broke."""
    broken = False
    while futures and not broken:
        done, _ = wait(futures, return_when=FIRST_COMPLETED)
        for fut in done:
            i = futures.pop(fut)
            try:
                result = fut.result()
            except BrokenProcessPool:
                broken = True
                continue
            except Exception as exc:  # the payload or the result could not travel (pickling): this task only
                result = TaskFailed(f"{type(exc).__name__}: {exc}")
            if isinstance(result, SetupFailed):
                raise result.error
            pending.pop(i)
            yield i, result
    return broken
