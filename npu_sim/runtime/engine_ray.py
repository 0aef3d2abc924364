"""The Ray engine of ``run_tasks``: one actor per worker, each set up once, tasks sent to the idle actors.

Ray is an optional extra (``pip install 'npu-sim[ray]'``), imported only when a job asks for it. The cluster is
the one at ``--ray-address``, else ``RAY_ADDRESS``, else a local one started for the job and shut down after it; a
Ray already initialized in this process (a test, a notebook) is used as it is and left running.

Each actor runs ``setup(arg)`` once (``arg`` is put in the object store once, so it travels once per node) and then
the tasks it is given, at most ``IN_FLIGHT`` at a time (one running, one waiting, so an actor never idles between
tasks); a payload is pulled from the job's iterable only when an actor has room for it, so the driver holds the
tasks in flight only. Results come back as they finish. An actor that dies is replaced and its unanswered tasks
resubmitted, at most ``RETRIES`` times each, a retried task alone on its actor (so that the task that kills its
actor is the one charged); actors that cannot even load the job's code are one InputError naming what failed. Actors
import the driver's own npu_sim: their ``PYTHONPATH`` starts with the folders the driver imported npu_sim, kernels
and the job's functions from, and each actor compares a fingerprint of its npu_sim and kernels sources (and board
presets) with the driver's before it sets up; a cluster running other code is refused with an error naming both
(results would not be bit-identical). See docs/SCALING.md.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from npu_sim.errors import InputError
from npu_sim.runtime.outcome import IN_FLIGHT, RETRIES, Feed, SetupFailed, TaskFailed, guarded, set_up

CONNECT_TIMEOUT_S = 5.0
NPU_SIM_DIR = Path(__file__).resolve().parents[1]
_FINGERPRINT: dict[str, str] = {}


def import_ray():
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise InputError("--engine ray needs Ray: pip install 'npu-sim[ray]'") from None


def code_dirs() -> list[Path]:
    """The package folders whose sources decide the results: npu_sim's and kernels'."""
    spec = importlib.util.find_spec("kernels")  # finds the package without importing it (no numba here)
    kernels = Path(spec.origin).resolve().parent if spec and spec.origin else None
    return [NPU_SIM_DIR] + ([kernels] if kernels else [])


def code_fingerprint() -> str:
    """A hash of npu_sim's and kernels' ``*.py`` files and the board presets (``*.toml``), by relative path."""
    if "id" not in _FINGERPRINT:
        h = hashlib.sha256()
        for folder in code_dirs():
            files = sorted(p for p in folder.rglob("*") if p.suffix in (".py", ".toml") and
                           "__pycache__" not in p.parts)
            for p in files:
                h.update(f"{folder.name}/{p.relative_to(folder).as_posix()}\0".encode())
                h.update(p.read_bytes())
        _FINGERPRINT["id"] = h.hexdigest()
    return _FINGERPRINT["id"]


class RayWorker:
    """One actor: the job's state, built once; ``run(payload)`` is one task."""

    def __init__(self, setup, arg, task, driver_code: tuple[str, str]):
        self.task = task
        fingerprint, where = driver_code
        if code_fingerprint() != fingerprint:
            self.state = SetupFailed(InputError(
                f"--engine ray: the Ray workers run npu_sim from {NPU_SIM_DIR} on {socket.gethostname()}, whose "
                f"code differs from the driver's ({where}); results would not be bit-identical. Install the same "
                f"npu-sim on every node, and do not run the command from inside another npu-sim checkout (Ray puts "
                f"the driver's current folder first on its workers' path; see docs/SCALING.md)"))
        else:
            os.environ.setdefault("NPU_SIM_THREADS", "1")  # one actor per CPU: one thread a batch each
            self.state = set_up(setup, arg)

    def run(self, payload):
        return guarded(self.task, self.state, payload)

    def ping(self):
        """An empty round trip (the benchmark measures Ray's per-task overhead with it)."""
        return None


def module_root(fn) -> Path | None:
    """The folder a function's module is imported from (None for ``__main__`` or a module without a file)."""
    name = getattr(fn, "__module__", None)
    mod = sys.modules.get(name) if name else None
    path = getattr(mod, "__file__", None)
    if name in (None, "__main__") or not path:
        return None
    depth = name.count(".") + (1 if Path(path).name == "__init__.py" else 0)
    return Path(path).resolve().parents[depth]


def worker_env(*functions) -> dict:
    """The actors' runtime_env: the driver's code folders first on ``PYTHONPATH``; the Numba cache folder."""
    roots = [d.parent for d in code_dirs()] + [module_root(f) for f in functions]
    paths = list(dict.fromkeys(str(r) for r in roots if r is not None))
    env = {"PYTHONPATH": os.pathsep.join(paths + ["${PYTHONPATH}"])}
    if os.environ.get("NUMBA_CACHE_DIR"):
        env["NUMBA_CACHE_DIR"] = os.environ["NUMBA_CACHE_DIR"]
    return {"env_vars": env}


def check_reachable(address: str, source: str) -> None:
    """A quick TCP connection to ``HOST:PORT`` (Ray itself waits minutes on a wrong address)."""
    if address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(f"{source} {address!r}: write HOST:PORT, the head node's address (e.g. 10.0.0.1:6379, "
                         f"as `ray start --head` prints it), or ray://HOST:10001")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise InputError(f"{source} {address}: no Ray cluster answers there ({exc}); start one with "
                         f"`ray start --head` or fix the address") from None


def connect(ray, address: str | None, workers: int | None) -> bool:
    """Join or start the cluster; True when this job initialized Ray here (and so shuts it down at the end: a
    local cluster stops, a cluster joined at an address only loses this driver)."""
    if ray.is_initialized():
        return False
    source = "--ray-address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR, "configure_logging": True}
    if address is None:
        with _keeping_sigterm():
            ray.init(address="local", num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, **quiet)
        return True
    check_reachable(address, source)
    try:
        with _keeping_sigterm():
            ray.init(address=address, **quiet)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
        raise InputError(f"{source} {address}: cannot join that Ray cluster ({exc})") from None
    return True


@contextlib.contextmanager
def _keeping_sigterm():
    """``ray.init`` sets its own SIGTERM handler (exit at once); a handler the caller set (the CLI's stop,
    ``npu_sim.runtime.stop``: actors killed and the cluster shut down on the way out) is put back after it."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(previous):
            signal.signal(signal.SIGTERM, previous)


class Actors:
    """The job's actors by slot; a dead one is replaced once (``gen`` tells a stale answer from a fresh one)."""

    def __init__(self, ray, count: int, args: tuple, runtime_env: dict):
        self.ray, self.args = ray, args
        self.cls = ray.remote(num_cpus=1, max_restarts=0)(RayWorker).options(runtime_env=runtime_env)
        self.handles = [self.cls.remote(*args) for _ in range(count)]
        self.gen = [0] * count
        self.load = [0] * count

    def idle(self, alone: bool) -> int | None:
        """The least loaded actor that can take a task (an actor with nothing queued, for a task to run alone)."""
        slot = min(range(len(self.load)), key=self.load.__getitem__)
        return slot if self.load[slot] < (1 if alone else IN_FLIGHT) else None

    def replace(self, slot: int, gen: int) -> None:
        if gen != self.gen[slot]:
            return  # an answer of the actor already replaced
        self.kill(self.handles[slot])
        self.handles[slot] = self.cls.remote(*self.args)
        self.gen[slot] += 1
        self.load[slot] = 0

    def kill(self, handle) -> None:
        try:
            self.ray.kill(handle, no_restart=True)
        except Exception:  # already gone
            pass

    def stop(self) -> None:
        for handle in self.handles:
            self.kill(handle)


def run_on_ray(ray, setup, arg, task, feed: Feed, workers: int | None,
               address: str | None) -> Iterator[tuple[int, Any]]:
    """``(index, result)`` as tasks finish on the cluster (see the module docstring); no payload, no cluster."""
    if feed.next() is None:
        return
    started = connect(ray, address, workers)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        count = max(1, min(workers or cpus, cpus))
        count = min(count, feed.fill(count))  # no more actors than there are payloads
        driver_code = (code_fingerprint(), f"{NPU_SIM_DIR} on {socket.gethostname()}")
        actors = Actors(ray, count, (setup, ray.put(arg), task, driver_code), worker_env(setup, task))
        try:
            yield from _dispatch(ray, actors, feed)
        finally:
            actors.stop()
    finally:
        if started:
            ray.shutdown()


def _send(actors: Actors, feed: Feed, tries: dict, in_flight: dict) -> None:
    """Payloads to the actors that have room, pulled from the feed only when one has (a task to retry needs an
    actor with nothing queued: it runs alone)."""
    while min(actors.load) < IN_FLIGHT and (i := feed.next()) is not None:
        slot = actors.idle(alone=tries.get(i, 0) > 0)
        if slot is None:
            return
        i, payload = feed.take()
        weight = IN_FLIGHT if tries.get(i) else 1
        in_flight[actors.handles[slot].run.remote(payload)] = (slot, actors.gen[slot], i, weight)
        actors.load[slot] += weight


def _dispatch(ray, actors: Actors, feed: Feed) -> Iterator[tuple[int, Any]]:
    """Tasks to idle actors; a task whose actor died runs alone on an actor from then on (so that a task that
    kills its actor is charged its tries, not the task queued behind it)."""
    died = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.LocalRayletDiedError)
    tries: dict[int, int] = {}
    in_flight: dict = {}
    while True:
        _send(actors, feed, tries, in_flight)
        if not in_flight:
            return
        (ref,), _ = ray.wait(list(in_flight), num_returns=1)
        slot, gen, i, weight = in_flight.pop(ref)
        if gen == actors.gen[slot]:
            actors.load[slot] -= weight
        try:
            result = ray.get(ref)
        except died as exc:
            if getattr(exc, "actor_init_failed", False):  # RayWorker.__init__ never raises: the code did not load
                raise InputError(f"--engine ray: the Ray workers could not start: {_first_line(exc)}; they must "
                                 f"import npu_sim and the job's functions as this driver does (see "
                                 f"docs/SCALING.md)") from None
            actors.replace(slot, gen)
            tries[i] = tries.get(i, 0) + 1
            if tries[i] > RETRIES:
                feed.answered(i)
                yield i, TaskFailed("its worker died on every try")
            else:
                feed.again([i])
            continue
        except ray.exceptions.RayTaskError as exc:  # not the task's own error (guarded catches that): its transport
            feed.answered(i)
            yield i, TaskFailed(f"{type(exc.cause).__name__}: {exc.cause}")
            continue
        if isinstance(result, SetupFailed):
            raise result.error
        feed.answered(i)
        yield i, result


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error:" in ln and not ln.startswith("The actor died")]
    return (errors or lines or [type(exc).__name__])[-1]
