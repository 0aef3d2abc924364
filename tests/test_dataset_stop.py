"""Stopping a dataset run loses nothing and leaves nothing (issue 32, item 5).

A 2-worker `npu-sim run --data` in its own process group, stopped by SIGTERM (or SIGINT) once it has written a
shard: no process of the run is left (its workers, multiprocessing's resource tracker), it exits 143 (130) with one
line saying what was kept and how to go on, its manifest lists every shard file it wrote, and `--resume` writes
only the other shards and ends with the bytes of a run that was never stopped. The run is slowed in its driver (a
pause after each shard is written, through a wrapper around the CLI), so that the signal lands mid-run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
from npu_sim.cli.main import main
from npu_sim.render.dataset_out import DatasetWriter
real = DatasetWriter.shard

def slow(self, k, arrays):
    entry = real(self, k, arrays)
    time.sleep(0.7)  # the shard written, not yet in the manifest: a stop here must still record it
    return entry

DatasetWriter.shard = slow
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


def _group(pgid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process of the process group ``pgid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append((int(entry.name), cmd))
    return found


def _wait_for(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = condition()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_run_leaves_no_process_and_keeps_every_shard(tmp_path, digits, whole, signum):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", SLOW_RUN, "run", str(MODEL), "--data", str(digits), "--out", str(out),
           "--shard-size", str(SHARD_SIZE), "--workers", "2"]
    with open(tmp_path / "stderr", "w+") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)  # its own process group: every process it starts is in it
        try:
            _wait_for(lambda: list(out.glob("shard-*.npz")) or proc.poll() is not None, 300, "a first shard")
            assert proc.poll() is None, "the run ended before it could be stopped"
            running = _group(proc.pid)
            assert len(running) >= 4, running  # the driver, its two workers and the resource tracker
            os.kill(proc.pid, signum)  # the driver only, as `kill PID` does
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        end = time.monotonic() + 30  # the resource tracker ends once every holder of its pipe is gone
        while _group(proc.pid) and time.monotonic() < end:
            time.sleep(0.1)
        assert _group(proc.pid) == [], f"left running after the stop (of {running})"
        err.seek(0)
        lines = err.read().strip().splitlines()
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


def test_a_stop_signal_waits_for_the_held_block_then_later_ones_are_ignored():
    with stop.on_signals():
        with pytest.raises(stop.Stopped) as stopped:
            with stop.held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                reached = True  # the signal did not cut the block
        assert reached and stopped.value.exit_code == 143 and stopped.value.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # ignored while the stop is handled
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


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
