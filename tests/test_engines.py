"""The engines of dataset jobs (npu_sim/runtime/engines.py, engine_ray.py): in-process (``--workers 1``), spawned
processes (``--workers 2``) and Ray (a local cluster of 2 CPUs started here) give the same ``(index, result)``
pairs, bit for bit; a task that raises is reported in its place and the others go on; a worker that dies is
replaced and its task retried; a set-up that raises is raised by ``run_tasks``; no Ray is a clear InputError.

The jobs are in tests/engine_tasks.py, at module level, so that worker processes and Ray actors import them."""
from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import engine_tasks
from npu_sim.errors import InputError
from npu_sim.runtime import engine_ray
from npu_sim.runtime.engines import IN_FLIGHT, EngineOptions, TaskFailed, run_tasks

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "models" / "demo"
HAS_RAY = importlib.util.find_spec("ray") is not None
NO_RAY = "ray is not installed (pip install 'npu-sim[ray]' or the test extra)"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    if not HAS_RAY:
        pytest.skip(NO_RAY)
    import ray
    started = not ray.is_initialized()
    if started:
        # Ray puts the driver's current directory first on its workers' sys.path: started from an empty folder,
        # the actors find this checkout only through the engine (not through the folder pytest runs in)
        here = os.getcwd()
        os.chdir(tmp_path_factory.mktemp("ray-driver-cwd"))
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        finally:
            os.chdir(here)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(params=["local1", "local2", pytest.param("ray", marks=pytest.mark.full)])  # Ray: make test-full
def engine(request) -> EngineOptions:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
        return EngineOptions("ray", workers=2)
    return EngineOptions("local", workers=int(request.param[-1]))


@pytest.fixture(params=["local2", pytest.param("ray", marks=pytest.mark.full)])
def engine_with_workers(request) -> EngineOptions:
    """The engines whose tasks run in other processes (a task killing its process does not kill the test)."""
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
        return EngineOptions("ray", workers=2)
    return EngineOptions("local", workers=2)


def _run(payloads, options, arg=None) -> dict:
    results = {}
    for i, result in run_tasks(engine_tasks.setup_scale, arg or {"scale": 3}, engine_tasks.scaled_square,
                               payloads, options):
        assert i not in results, f"task {i} answered twice"
        results[i] = result
    return results


def test_every_task_once_and_set_up_once_per_worker(engine, monkeypatch):
    monkeypatch.setitem(engine_tasks.SETUPS, "count", 0)  # the in-process engine sets up in this process
    results = _run(list(range(13)), engine)
    assert sorted(results) == list(range(13))
    assert {i: r[0] for i, r in results.items()} == {i: 3 * i * i for i in range(13)}
    assert {r[2] for r in results.values()} == {1}, "a worker ran its set-up more than once"
    pids = {r[1] for r in results.values()}
    assert len(pids) <= (engine.workers or 1)


def test_a_task_that_raises_is_reported_in_its_place(engine):
    results = _run([1, ("raise", 7), 2, 5], engine)
    assert isinstance(results[1], TaskFailed)
    assert results[1].error == "ValueError: sample 7 is broken"
    assert {i: results[i][0] for i in (0, 2, 3)} == {0: 3, 2: 12, 3: 75}


def test_a_setup_that_raises_is_raised(engine):
    with pytest.raises(InputError, match="'broken.onnx' cannot be read"):
        _run([1, 2, 3], engine, arg={"fail": "broken.onnx", "scale": 1})


def test_a_dead_worker_is_replaced_and_its_task_retried(engine_with_workers, tmp_path):
    marker = tmp_path / "died"
    results = _run([1, 2, ("die_once", str(marker), 4), 3], engine_with_workers)
    assert marker.exists(), "the task did not kill its worker"
    assert {i: r[0] for i, r in results.items()} == {0: 3, 1: 12, 2: 48, 3: 27}


def test_a_task_that_kills_every_worker_fails_alone(engine_with_workers):
    results = _run([1, ("die", 2), 3], engine_with_workers)
    assert isinstance(results[1], TaskFailed) and "died on every try" in results[1].error
    assert results[0][0] == 3 and results[2][0] == 27


def test_a_result_that_cannot_travel_fails_alone(engine_with_workers):
    results = dict(run_tasks(engine_tasks.setup_scale, {"scale": 1}, engine_tasks.lock_or_value, [1, "lock", 3],
                             engine_with_workers))
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], TaskFailed) and "lock" in results[1].error.lower()


def test_no_payloads_no_work(engine):
    assert _run([], engine) == {}
    assert _run(iter(()), engine) == {}


class _Pulled:
    """Payloads from a generator that records how many were pulled, and how many each result found pulled but
    not answered yet."""

    def __init__(self, payloads):
        self.payloads, self.pulled, self.ahead = list(payloads), 0, []

    def __iter__(self):
        for payload in self.payloads:
            self.pulled += 1
            yield payload

    def run(self, options) -> dict:
        results = {}
        for i, result in run_tasks(engine_tasks.setup_scale, {"scale": 3}, engine_tasks.scaled_square, iter(self),
                                   options):
            self.ahead.append(self.pulled - len(results))
            assert i not in results, f"task {i} answered twice"
            results[i] = result
        return results


def test_a_generator_of_payloads_is_pulled_as_workers_take_them(engine):
    feed = _Pulled(range(40))
    results = feed.run(engine)
    assert {i: r[0] for i, r in results.items()} == {i: 3 * i * i for i in range(40)}
    assert feed.pulled == 40
    workers = engine.workers or 1
    assert 1 <= feed.ahead[0] <= IN_FLIGHT * workers, "pulled more than the workers could take before a result"
    assert max(feed.ahead) <= IN_FLIGHT * workers, feed.ahead


def test_a_generator_with_a_task_that_kills_its_worker(engine_with_workers, tmp_path):
    marker = tmp_path / "died"
    feed = _Pulled([1, 2, ("die_once", str(marker), 4), 3, ("raise", 5)] + list(range(6, 16)))
    results = feed.run(engine_with_workers)
    assert marker.exists(), "the task did not kill its worker"
    assert isinstance(results[4], TaskFailed) and results[4].error == "ValueError: sample 5 is broken"
    values = {i: v for i, v in enumerate([1, 2, 4, 3, None] + list(range(6, 16))) if v is not None}
    assert {i: r[0] for i, r in results.items() if i != 4} == {i: 3 * v * v for i, v in values.items()}
    # the tasks queued on a dead worker are sent again: at most one worker's worth more than the workers hold
    assert max(feed.ahead) <= IN_FLIGHT * (engine_with_workers.workers + 1), feed.ahead


def test_without_ray_engine_ray_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(InputError, match=r"--engine ray needs Ray: pip install 'npu-sim\[ray\]'"):
        run_tasks(engine_tasks.setup_scale, {"scale": 1}, engine_tasks.scaled_square, [1], EngineOptions("ray"))


class _NoCluster:
    """A stand-in for the ray module: not initialized, and joining must not be attempted."""

    @staticmethod
    def is_initialized():
        return False

    @staticmethod
    def init(**kwargs):
        raise AssertionError(f"ray.init called with {kwargs}")


@pytest.mark.parametrize("address, words", [
    ("127.0.0.1:1", "no Ray cluster answers there"),
    ("nonsense", "write HOST:PORT"),
    ("ray://10.0.0.1:port", "write HOST:PORT"),
])
def test_a_bad_address_is_named(address, words):
    with pytest.raises(InputError, match=words) as err:
        engine_ray.connect(_NoCluster, address, None)
    assert f"--ray-address {address}" in str(err.value) or f"--ray-address {address!r}" in str(err.value)


def test_a_bad_ray_address_variable_is_named(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(InputError, match=r"RAY_ADDRESS 127\.0\.0\.1:1: no Ray cluster answers"):
        engine_ray.connect(_NoCluster, None, None)


def test_actors_refuse_other_code():
    worker = engine_ray.RayWorker(engine_tasks.setup_scale, {"scale": 2}, engine_tasks.scaled_square,
                                  ("0" * 64, "/elsewhere/npu_sim on driver-host"))
    answer = worker.run(3)
    assert isinstance(answer, engine_ray.SetupFailed)
    assert isinstance(answer.error, InputError) and "/elsewhere/npu_sim on driver-host" in str(answer.error)
    same = engine_ray.RayWorker(engine_tasks.setup_scale, {"scale": 2}, engine_tasks.scaled_square,
                                (engine_ray.code_fingerprint(), "here"))
    assert same.run(3)[0] == 18


def test_actors_import_the_drivers_code():
    paths = engine_ray.worker_env(engine_tasks.setup_scale)["env_vars"]["PYTHONPATH"].split(":")
    assert paths[0] == str(ROOT) and str(ROOT / "tests") in paths and paths[-1] == "${PYTHONPATH}"


def test_workers_import_the_drivers_npu_sim(engine):
    got = dict(run_tasks(engine_tasks.setup_scale, {"scale": 1}, engine_tasks.where, [0, 1], engine))
    assert got[0] == got[1] == engine_tasks.where(None, None)


def _digits_shards(count: int = 12, size: int = 4) -> list[dict]:
    x = np.load(DEMO / "digits_test.npz")["x"][:count]
    return [{"input": x[k:k + size]} for k in range(0, count, size)]


def test_a_real_model_gives_the_same_integers_on_every_engine(engine):
    arg = {"model": str(DEMO / "digits_cnn.qdq.onnx"), "input_shapes": {"input": (1, 1, 8, 8)}}
    shards = _digits_shards()
    got = dict(run_tasks(engine_tasks.load_model, arg, engine_tasks.run_raw, shards, engine))
    sim = engine_tasks.load_model(arg)
    for i, shard in enumerate(shards):
        want = engine_tasks.run_raw(sim, shard)
        assert set(got[i]) == set(want) == {"logits"}
        for name in want:
            assert got[i][name].dtype == want[name].dtype and np.array_equal(got[i][name], want[name]), (i, name)


def test_ray_workers_that_cannot_load_the_job_are_one_clear_error(ray_cluster):
    with pytest.raises(InputError, match="the Ray workers could not start: .*ghost_tasks"):
        _run([1, 2], EngineOptions("ray", workers=2), arg=engine_tasks.Unloadable())


_JOB_ON_ITS_OWN_CLUSTER = """
import ray, engine_tasks
from npu_sim.runtime.engines import EngineOptions, run_tasks
got = dict(run_tasks(engine_tasks.setup_scale, {"scale": 2}, engine_tasks.scaled_square, [1, 2, 3],
                     EngineOptions("ray", workers=1)))
assert {i: r[0] for i, r in got.items()} == {0: 2, 1: 8, 2: 18}, got
assert not ray.is_initialized(), "the job's own cluster was left running"
print("ok")
"""


def test_ray_without_a_cluster_starts_one_for_the_job_and_stops_it(tmp_path):
    if not HAS_RAY:
        pytest.skip(NO_RAY)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", _JOB_ON_ITS_OWN_CLUSTER], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert "Started a local Ray instance" not in out.stderr + out.stdout
