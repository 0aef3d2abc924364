"""`npu-sim report` on the engines (npu_sim.runtime.engines): the samples, the sensitivity's and the advisor's
measurements as tasks give the same numbers in this process, in 2 worker processes and on a local Ray cluster;
how many workers a job gets; failed samples named; progress bars only on a terminal, off with --quiet."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.analysis import advisor
from npu_sim.analysis.accuracy import engine as acc_engine
from npu_sim.analysis.accuracy import jobs
from npu_sim.cli.main import main as cli_main
from npu_sim.runtime.engines import EngineOptions

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "models" / "demo"
QDQ = DEMO / "digits_cnn.qdq.onnx"
FLOAT = DEMO / "digits_cnn.float.onnx"
DATA = DEMO / "digits_test.npz"
# 24 samples: 3 workers' worth (one per 8 samples), so --workers 2 starts 2; 4 for the sensitivity and advisor
ARGS = [str(QDQ), "--float", str(FLOAT), "--data", str(DATA), "--limit", "24", "--samples", "4", "--points", "4"]


def _timeless(doc):
    """The report's JSON without its timings (``seconds``, at the top, per sensitivity row, ...)."""
    if isinstance(doc, dict):
        return {k: _timeless(v) for k, v in doc.items() if k != "seconds"}
    if isinstance(doc, list):
        return [_timeless(v) for v in doc]
    return doc


def _report_json(tmp_path, name: str, extra: list[str]) -> dict:
    out = tmp_path / f"{name}.json"
    assert cli_main(["report", *ARGS, "--json", str(out), "--quiet", *extra]) == 0
    return _timeless(json.loads(out.read_text()))


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    return _report_json(tmp_path_factory.mktemp("w1"), "w1", ["--workers", "1"])


@pytest.mark.full  # spawned workers: make test-full
def test_two_worker_processes_give_the_same_report(in_process, tmp_path):
    doc = in_process
    assert doc["data"]["samples"] == 24
    assert len(doc["sensitivity"]["layers"]) == 9 and len(doc["advisor"]["curve"]) > 4
    assert _report_json(tmp_path, "w2", ["--workers", "2"]) == doc


@pytest.mark.full  # a Ray cluster of its own: make test-full
def test_ray_cluster_gives_the_same_report(in_process, tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        assert _report_json(tmp_path, "ray", ["--engine", "ray", "--workers", "2"]) == in_process
        assert _report_json(tmp_path, "ray_auto", ["--engine", "ray"]) == in_process
    finally:
        ray.shutdown()


@pytest.mark.full  # spawned workers: make test-full
def test_api_engine_and_advisor_in_workers():
    """``accuracy_report(engine=...)`` and ``annotate(engine=...)``: the same numbers as in this process, the
    sensitivity's and the advisor's measurements in 2 worker processes (``workers=`` still works)."""
    kw = dict(data=[DATA], float_model=FLOAT, board="default", limit=16)
    one = npu_sim.accuracy_report(QDQ, workers=1, **kw)
    two = npu_sim.accuracy_report(QDQ, engine=EngineOptions("local", 2), **kw)
    samples = [{"input": x[None]} for x in np.load(DATA)["x"][:3]]
    opt = advisor.AdviceOptions(samples=3, max_points=3)
    seen = {"sens": [], "adv": []}
    advisor.annotate(one, samples, "default", FLOAT, options=opt)
    advisor.annotate(two, samples, "default", FLOAT, options=opt, engine=EngineOptions("local", 2),
                     progress=lambda d, t: seen["sens"].append((d, t)),
                     advisor_progress=lambda d, t: seen["adv"].append((d, t)))
    assert _timeless(one.to_dict()) == _timeless(two.to_dict())
    assert sorted(seen["sens"])[-1] == (9, 9) and seen["adv"] and seen["adv"][-1][0] == seen["adv"][-1][1]


def test_workers_only_where_the_work_pays():
    """``jobs.plan``: an explicit count is kept (at most the tasks and the cap); without one, a local worker must
    get at least twice its start in work; one local worker is this process."""
    local2 = EngineOptions("local", 2)
    assert jobs.plan(local2, tasks=100, cap=1) == jobs.IN_PROCESS           # 8 samples: one worker
    assert jobs.plan(local2, tasks=100, cap=5) == local2
    assert jobs.plan(EngineOptions("local", 8), tasks=3) == EngineOptions("local", 3)
    assert jobs.plan(EngineOptions("ray", 1), tasks=9) == EngineOptions("ray", 1)   # asked for: one actor
    start = 2 * jobs.START_SECONDS
    assert jobs.plan(EngineOptions(), tasks=100, work=start, setup=0.0) == jobs.IN_PROCESS
    cores = os.cpu_count() or 1
    assert jobs.plan(EngineOptions(), tasks=100, work=1000 * start, setup=0.0) == (
        EngineOptions("local", min(100, cores)) if cores > 1 else jobs.IN_PROCESS)
    assert jobs.plan(EngineOptions(), tasks=100, work=4 * start, setup=0.0) in (EngineOptions("local", 2),
                                                                             jobs.IN_PROCESS)
    # Ray: the engine asked for, at most one actor per task (the cluster's CPUs without a count)
    assert jobs.plan(EngineOptions("ray"), tasks=100, work=start) == EngineOptions("ray")
    assert jobs.plan(EngineOptions("ray", 4), tasks=100, cap=2) == EngineOptions("ray", 2)


def test_failed_samples_are_named(tmp_path, capsys, monkeypatch):
    """Bad data (the float reference overflows on two samples): exit 2 naming both, from worker processes too;
    any other failure of a task is a bug: raised, naming the samples."""
    x = np.load(DATA)["x"][:20].copy()
    x[5], x[13] = 3e38, -3e38
    np.savez(tmp_path / "bad.npz", x=x)
    for workers in ("1", "2"):
        rc = cli_main(["report", str(QDQ), "--float", str(FLOAT), "--data", str(tmp_path / "bad.npz"),
                       "--no-sensitivity", "--workers", workers])
        err = capsys.readouterr().err
        assert rc == 2 and "sample(s) 5, 13 (0-based, in data order)" in err and "NaN or infinity" in err, err

    def broken(self, *a):
        raise ValueError("a bug")

    monkeypatch.setattr(acc_engine.Engine, "sample", broken)
    with pytest.raises(RuntimeError, match=r"sample\(s\) 0-9 \(0-based, in data order\) failed: ValueError: a bug"):
        npu_sim.accuracy_report(QDQ, data=[DATA], limit=10, workers=1)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_bars_on_a_terminal_and_quiet(quiet, monkeypatch, capsys):
    pytest.importorskip("tqdm")
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    rc = cli_main(["report", *ARGS[:5], "--limit", "12", "--samples", "2", "--points", "2", "--workers", "1"]
                  + (["--quiet"] if quiet else []))
    assert rc == 0, term.getvalue()
    text = term.getvalue()
    labels = ("report:", "sensitivity:", "int16 advisor:")
    if quiet:
        assert "\r" not in text and not any(lab in text for lab in labels), text
    else:
        assert "\r" in text and all(lab in text for lab in labels), text
        assert "12/12" in text and "9/9" in text


def test_no_progress_when_stderr_is_not_a_terminal(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "npu_sim.cli", "report", *ARGS[:5], "--limit", "12", "--samples",
                           "2", "--points", "2", "--workers", "1"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "worst 5 tensors" in proc.stdout
    for mark in ("\r", "█", "12/12", "9/9", "samples/s", "it/s"):
        assert mark not in proc.stderr, (mark, proc.stderr)
