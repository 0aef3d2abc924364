"""Where the tasks of a dataset job run: in this process, in worker processes on this machine, or on a Ray cluster.

A job is ``setup(arg) -> state`` (run once per worker: load and lower the model) and ``task(state, payload) ->
result`` (one shard of samples). Both are module-level functions, so a worker process or a Ray actor imports them by
name; ``arg`` and every payload and result are pickled. The payloads are any iterable (a list, or a generator that
builds each shard when it is pulled): every engine pulls a payload only when a worker can take it, at most
``IN_FLIGHT`` per worker ahead of the results, so the driver holds only the tasks in flight (a generator's payloads
are built in the driver's thread, between results). :func:`run_tasks` yields ``(index, result)`` as tasks
finish, in any order (``index``: the payload's position in the iterable); callers that need sample order put
results back by index. A task that raises yields a :class:`TaskFailed` in place of its result; a worker that dies
has its tasks retried on a fresh worker; a ``setup`` that raises is raised by :func:`run_tasks` itself, whichever
engine ran it. A job that stops early (an exception, a ``Stopped`` by a signal, the caller closing the iterator)
ends its worker processes at once (``_stop_pool``), without waiting for their tasks. The Ray engine is in
``engine_ray.py`` (Ray is an optional extra, imported when a job asks for it).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from npu_sim.errors import InputError
from npu_sim.runtime import engine_ray
from npu_sim.runtime.memo import WORKER
from npu_sim.runtime.outcome import IN_FLIGHT, RETRIES, Feed, SetupFailed, TaskFailed, guarded, set_up

__all__ = ["ENGINES", "IN_FLIGHT", "RETRIES", "EngineOptions", "TaskFailed", "default_workers", "run_tasks"]

ENGINES = ("local", "ray")
PARENT_POLL_S = 1.0  # how often a worker process looks whether its driver is still there
STOP_WAIT_S = 5.0  # how long a stopped worker process is given to end before it is killed


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


def run_tasks(setup: Callable[[Any], Any], arg: Any, task: Callable[[Any, Any], Any], payloads: Iterable,
              options: EngineOptions = EngineOptions()) -> Iterator[tuple[int, Any]]:
    """``(index, task(state, payload))`` for every payload of ``payloads`` (a list, or any iterable: it is pulled
    as workers can take its payloads, at most ``IN_FLIGHT`` per worker ahead of the results; ``index`` is the
    payload's position in it), as they finish (see the module docstring)."""
    if options.kind == "ray":
        ray = engine_ray.import_ray()  # before anything runs: no Ray is a clear error (exit 2), not a traceback
        return engine_ray.run_on_ray(ray, setup, arg, task, Feed(payloads), options.workers, options.ray_address)
    return _local(setup, arg, task, Feed(payloads), options.workers or default_workers())


def _local(setup, arg, task, feed: Feed, workers: int) -> Iterator[tuple[int, Any]]:
    """No more workers than there are payloads (pulled up to ``workers`` to know); one runs in this process."""
    workers = min(workers, feed.fill(workers))
    if workers == 1:
        yield from _in_process(setup, arg, task, feed)
    elif workers > 1:
        yield from _processes(setup, arg, task, feed, workers)


def _in_process(setup, arg, task, feed: Feed) -> Iterator[tuple[int, Any]]:
    state = setup(arg)
    while feed.next() is not None:
        i, payload = feed.take()
        feed.answered(i)
        yield i, guarded(task, state, payload)


def _worker_init(setup, arg) -> None:
    """A worker process's state, built once (``memo.WORKER``). A Ctrl-C at the terminal reaches the whole process
    group: the driver stops its workers itself (no traceback from each), and a worker ends once its driver is gone
    (a driver killed by SIGKILL cannot stop them)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("NPU_SIM_THREADS", "1")  # the workers share the CPUs already: one thread a batch each
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    WORKER.put("engine", set_up(setup, arg))


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _worker_task(task, payload, index: int, started: str):
    Path(started, str(index)).touch()  # so that, if this process dies, the driver knows what it was running
    return guarded(task, WORKER.get("engine"), payload)


def _processes(setup, arg, task, feed: Feed, workers: int) -> Iterator[tuple[int, Any]]:
    """Spawned processes, each set up once, each given at most ``IN_FLIGHT`` tasks at a time. A pool broken by a
    dead worker is replaced; the tasks that were running in it are charged a try, and a task charged once runs
    alone in a pool of its own from then on (so a task that kills its worker cannot take others down with it); at
    most ``RETRIES`` retries each. Tasks sent but not started when the pool broke are sent again, uncharged."""
    tries: dict[int, int] = {}
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="npu-sim-tasks-") as started:
        while (first := feed.next()) is not None:
            alone = tries.get(first, 0) > 0
            size = 1 if alone else min(workers, feed.fill(workers))
            futures: dict = {}
            before = set(mp.active_children())
            with ProcessPoolExecutor(size, mp_context=ctx, initializer=_worker_init, initargs=(setup, arg)) as pool:
                try:
                    yield from _pool_results(pool, futures, feed, task, started, None if alone else IN_FLIGHT * size)
                except BaseException:  # stopped (a signal, an abandoned job, a set-up error): no task is waited for
                    _stop_pool(pool, [p for p in mp.active_children() if p not in before])
                    raise
                finally:
                    for fut in futures:
                        fut.cancel()
            lost = sorted(futures.values())  # sent, not answered: the pool broke
            for i in lost:
                if Path(started, str(i)).exists():
                    tries[i] = tries.get(i, 0) + 1
                    Path(started, str(i)).unlink()
            feed.again(sorted((i for i in lost if tries.get(i, 0) <= RETRIES), key=lambda i: (not tries.get(i), i)))
            for i in [i for i in lost if tries.get(i, 0) > RETRIES]:
                feed.answered(i)
                yield i, TaskFailed("its worker process died on every try")


def _stop_pool(pool: ProcessPoolExecutor, workers: list) -> None:
    """The pool's queued tasks dropped and its worker processes (``workers``) ended: SIGTERM, then SIGKILL for one
    that is still there after ``STOP_WAIT_S``."""
    pool.shutdown(wait=False, cancel_futures=True)
    for p in workers:
        p.terminate()
    for p in workers:
        p.join(STOP_WAIT_S)
        if p.is_alive():
            p.kill()
            p.join()


def _pool_results(pool, futures: dict, feed: Feed, task, started: str, limit: int | None):
    """The results of one pool until it breaks or the feed runs dry, topping it up to ``limit`` tasks as results
    come back (None: the one task at the head of the feed, alone); ``futures`` keeps the tasks sent and not
    answered."""
    broken, sent = False, 0
    while True:
        while not broken and (limit is None and not sent or limit is not None and len(futures) < limit) \
                and feed.next() is not None:
            i, payload = feed.take()
            sent += 1
            try:
                futures[pool.submit(_worker_task, task, payload, i, started)] = i
            except BrokenProcessPool:  # broke since the last answer: this one goes back, not started
                feed.again([i])
                broken = True
        if broken or not futures:
            return
        done, _ = wait(futures, return_when=FIRST_COMPLETED)
        for fut in done:
            try:
                result = fut.result()
            except BrokenProcessPool:
                broken = True
                continue
            except Exception as exc:  # the payload or the result could not travel (pickling): this task only
                result = TaskFailed(f"{type(exc).__name__}: {exc}")
            if isinstance(result, SetupFailed):
                raise result.error
            i = futures.pop(fut)
            feed.answered(i)
            yield i, result
