"""Compiling ahead on a cold kernel cache (npu_sim/runtime/ahead.py): the order of the other process's nodes, that
it runs them (and is ended), and that a command with it gives the same integers as without it, from an empty
cache. (How much faster first use gets is measured in docs/PERFORMANCE.md, not here.)"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.runtime import ahead
from npu_sim.runtime.executor import RunResult, _Context

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "models" / "demo" / "digits_cnn.qdq.onnx"
SHAPES = {"input": (1, 1, 8, 8)}


def test_one_node_of_each_kind_the_last_to_appear_first():
    program = npu_sim.load(DEMO, input_shapes=SHAPES).program
    order = ahead.ahead_order(program)
    assert order and order[-1] is program.nodes[0]
    position = {id(n): i for i, n in enumerate(program.nodes)}
    firsts = [position[id(n)] for n in order]
    assert firsts == sorted(firsts, reverse=True)  # by first appearance, last first
    assert len(order) < len(program.nodes) and {n.op for n in order} == {n.op for n in program.nodes}


def test_not_armed_nothing_forks(monkeypatch):
    program = npu_sim.load(DEMO, input_shapes=SHAPES).program
    assert ahead.compile_ahead(program, _Context(program, RunResult({}))) is None
    monkeypatch.setenv("NPU_SIM_COMPILE_AHEAD", "0")
    ahead.arm()
    assert ahead.compile_ahead(program, _Context(program, RunResult({}))) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_the_other_process_runs_the_kinds_and_is_ended(monkeypatch, tmp_path):
    monkeypatch.setenv("NPU_SIM_COMPILE_AHEAD", "1")
    monkeypatch.setattr(ahead, "_cpus", lambda: 2)
    program = npu_sim.load(DEMO, input_shapes=SHAPES).program
    first = ahead.ahead_order(program)[0]
    marker = tmp_path / "ran"
    real = first.run

    def run(node, inputs, ctx):  # in the other process only: this process's run is not called here
        marker.write_text(" ".join(f"{np.dtype(a.dtype).name}{list(a.shape)}" for a in inputs))
        return real(node, inputs, ctx)
    monkeypatch.setattr(first, "run", run)
    ahead.arm()
    stop = ahead.compile_ahead(program, _Context(program, RunResult({})))
    assert stop is not None and ahead.compile_ahead(program, None) is None  # once per arming
    end = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < end:
        time.sleep(0.05)
    stop()
    want = [program.tensors[n] for n in first.inputs if not program.tensors[n].is_const]
    assert marker.read_text() == " ".join(f"{np.dtype(t.q.np_dtype).name}{list(t.shape)}" for t in want)


@pytest.mark.full  # compiles the demo's kernels into an empty cache: make test-full (as test_cli_firstuse's)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_cold_run_with_it_gives_the_same_integers(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NPU_SIM_COMPILE_AHEAD": "1"}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "npu_sim.cli", "run", str(DEMO), "--seed", "3", "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "compiling kernels for first use" in done.stderr
    sim = npu_sim.load(DEMO, input_shapes=SHAPES)
    want = sim.run(sim.random_inputs(3), raw=True)
    assert want
    for name, arr in want.items():
        np.testing.assert_array_equal(np.load(out / f"{name}.int.npy"), arr, err_msg=name)
