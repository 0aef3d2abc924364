"""Stopping a dataset run loses nothing and leaves nothing (issue 32, item 5).

A 2-worker `npu-sim run --data` in its own process group, stopped by SIGTERM (or SIGINT) once it has written a
shard: no process of the run is left (its workers, multiprocessing's resource tracker), it exits 143 (130) with one
line saying what was kept and how to go on, its manifest lists every shard file it wrote, and `--resume` writes
only the other shards and ends with the bytes of a run that was never stopped. The run is slowed (a pause in each
shard's run in the workers, and after each shard is written in the driver, through a wrapper script around the
CLI), so that the signal lands mid-shard.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.cli.main import main
from npu_sim.render.dataset_out import DatasetWriter
from npu_sim.runtime import stop

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "models" / "demo"
MODEL = DEMO / "digits_cnn.qdq.onnx"
SHARDS, SHARD_SIZE = 10, 4

SLOW_RUN = """
import sys, time
from npu_sim.analysis.dataset import task
from npu_sim.render.dataset_out import DatasetWriter
real_run, real_write = task.run_shard, DatasetWriter.shard

def slow_run(sim, feeds):  # in the workers too: a spawned worker imports this file first (as __mp_main__)
    time.sleep(1.0)
    return real_run(sim, feeds)

def slow_write(self, k, arrays):
    entry = real_write(self, k, arrays)
    time.sleep(0.3)  # the shard written, not yet in the manifest: a stop here must still record it
    return entry

task.run_shard, DatasetWriter.shard = slow_run, slow_write
if __name__ == "__main__":
    from npu_sim.cli.main import main
    sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    z = np.load(DEMO / "digits_test.npz")
    path = tmp_path_factory.mktemp("data") / "digits.npz"
    np.savez(path, x=z["x"][:SHARDS * SHARD_SIZE], y=z["y"][:SHARDS * SHARD_SIZE])
    return path


@pytest.fixture(scope="module")
def whole(tmp_path_factory, digits) -> dict[str, bytes]:
    """The files of a run that was never stopped."""
    out = tmp_path_factory.mktemp("whole") / "out"
    summary = npu_sim.run_dataset(MODEL, [digits], DatasetWriter(out), shard_size=SHARD_SIZE,
                                  engine=npu_sim.EngineOptions("local", 1))
    assert summary.ok and summary.shards == SHARDS
    return _files(out)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after "pid (comm)": state, ppid, pgrp, ... (start time at [19]); None for a
    process that is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else fields


def _processes() -> dict[int, list[str]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = fields
    return found


def _group(pgid: int) -> list[int]:
    """The live processes of the process group ``pgid``."""
    return [pid for pid, fields in _processes().items() if int(fields[2]) == pgid]


def _tree(root: int) -> dict[int, str]:
    """Every live descendant of ``root``: pid -> its start time (so that a pid used again is not taken for it)."""
    everyone = _processes()
    found, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, fields in everyone.items():
            if int(fields[1]) == parent and pid not in found:
                found[pid] = fields[19]
                todo.append(pid)
    return found


def _alive(processes: dict[int, str]) -> list[int]:
    return [pid for pid, start in processes.items() if (fields := _stat(pid)) is not None and fields[19] == start]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def _wait_for(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = condition()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def _stopped_run(tmp_path, digits, signum, *engine) -> tuple[int, list[str], Path]:
    """A slowed 2-worker run of ``digits`` in its own process group, sent ``signum`` once a shard is written;
    asserts that it had workers and that no process of it is left. Its exit code, stderr lines and OUT."""
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    script = tmp_path / "slow_run.py"
    script.write_text(SLOW_RUN)
    cmd = [sys.executable, str(script), "run", str(MODEL), "--data", str(digits), "--out", str(out),
           "--shard-size", str(SHARD_SIZE), "--workers", "2", *engine]
    with open(tmp_path / "stderr", "w+") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)  # its own process group: every process it starts is in it
        try:
            _wait_for(lambda: list(out.glob("shard-*.npz")) or proc.poll() is not None, 300, "a first shard")
            assert proc.poll() is None, "the run ended before it could be stopped"
            tree = _tree(proc.pid)
            assert len(tree) >= 3, {pid: _cmdline(pid) for pid in tree}  # two workers, the resource tracker...
            os.kill(proc.pid, signum)  # the driver only, as `kill PID` does
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        end = time.monotonic() + 30  # the resource tracker ends once every holder of its pipe is gone
        while (_alive(tree) or _group(proc.pid)) and time.monotonic() < end:
            time.sleep(0.1)
        left = _alive(tree) + _group(proc.pid)
        assert left == [], f"left running after the stop: {[_cmdline(pid) for pid in left]}"
        err.seek(0)
        return code, err.read().strip().splitlines(), out


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.full)])
def test_a_stopped_run_leaves_no_process_and_keeps_every_shard(tmp_path, digits, whole, signum):
    code, lines, out = _stopped_run(tmp_path, digits, signum)
    assert code == 128 + signum, lines
    written = sorted(p.name for p in out.glob("shard-*.npz"))
    assert 1 <= len(written) < SHARDS
    assert lines[-1] == (f"npu-sim: stopped by {signal.Signals(signum).name}: {len(written)} of {SHARDS} shard(s) "
                         f"kept in {out} (manifest.json); run the same command with --resume to write the other "
                         f"{SHARDS - len(written)}")
    man = json.loads((out / "manifest.json").read_text())
    assert sorted(s["file"] for s in man["shards"]) == written and not man["complete"]
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    kept = {name: (out / name).stat() for name in written}

    assert main(["run", str(MODEL), "--data", str(digits), "--out", str(out), "--shard-size", str(SHARD_SIZE),
                 "--workers", "1", "--resume"]) == 0
    for name, before in kept.items():  # not written again: the same file (a rewrite is a new file, renamed in)
        after = (out / name).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), name
    assert _files(out) == whole


@pytest.mark.full  # a Ray cluster of its own: make test-full
def test_a_stopped_ray_run_leaves_no_process(tmp_path, digits):
    """--engine ray on a local cluster the run starts: SIGTERM kills its actors and stops the cluster."""
    pytest.importorskip("ray")
    code, lines, out = _stopped_run(tmp_path, digits, signal.SIGTERM, "--engine", "ray")
    assert code == 143, lines
    man = json.loads((out / "manifest.json").read_text())
    assert sorted(s["file"] for s in man["shards"]) == sorted(p.name for p in out.glob("shard-*.npz"))


# the tests below signal this process: a stop handler is set in the main thread only
in_main_thread = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                    reason="signal handlers are set in the main thread only")


@in_main_thread
def test_a_stop_signal_waits_for_the_held_block_then_later_ones_are_ignored():
    before = signal.getsignal(signal.SIGINT)
    with stop.on_signals():
        with pytest.raises(stop.Stopped) as stopped:
            with stop.held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                reached = True  # the signal did not cut the block
        assert reached and stopped.value.exit_code == 143 and stopped.value.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # ignored while the stop is handled
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is before


@in_main_thread
def test_a_run_stopped_in_process_saves_its_manifest(tmp_path, digits, monkeypatch, capsys):
    """With the manifest rewritten rarely (a slow disk), the shards written since the last rewrite are listed
    once the run stops; the CLI exits 130 on SIGINT naming what it kept."""
    real = DatasetWriter.shard
    written = []

    def stops_after_three(self, k, arrays):
        entry = real(self, k, arrays)
        written.append(entry["file"])
        if len(written) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return entry

    monkeypatch.setattr(DatasetWriter, "shard", stops_after_three)
    monkeypatch.setattr(DatasetWriter, "due", lambda self: self.last is None)  # only the first shard's rewrite
    out = tmp_path / "out"
    assert main(["run", str(MODEL), "--data", str(digits), "--out", str(out), "--shard-size", str(SHARD_SIZE),
                 "--workers", "1"]) == 130
    man = json.loads((out / "manifest.json").read_text())
    assert sorted(s["file"] for s in man["shards"]) == sorted(written) == sorted(p.name for p in out.glob("*.npz"))
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        f"npu-sim: stopped by SIGINT: 3 of {SHARDS} shard(s) kept in {out}")


@in_main_thread
def test_a_resumed_run_stopped_before_its_first_shard_names_what_it_kept(tmp_path, digits, monkeypatch, capsys):
    out = tmp_path / "out"
    args = ["run", str(MODEL), "--data", str(digits), "--out", str(out), "--shard-size", str(SHARD_SIZE),
            "--workers", "1"]
    real_shard, real_start = DatasetWriter.shard, DatasetWriter.start

    def stops_after_two(self, k, arrays):
        entry = real_shard(self, k, arrays)
        if k == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return entry

    def stops_at_start(self, plan):
        state = real_start(self, plan)
        os.kill(os.getpid(), signal.SIGTERM)
        return state

    monkeypatch.setattr(DatasetWriter, "shard", stops_after_two)
    assert main(args) == 143
    monkeypatch.setattr(DatasetWriter, "shard", real_shard)
    monkeypatch.setattr(DatasetWriter, "start", stops_at_start)
    capsys.readouterr()
    assert main(args + ["--resume"]) == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"npu-sim: stopped by SIGTERM: 2 of {SHARDS} shard(s) kept in {out} (manifest.json); run the same command "
        f"with --resume to write the other {SHARDS - 2}")
