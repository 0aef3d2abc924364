"""Compiling ahead on a cold kernel cache (npu_sim/runtime/ahead.py): the placeholders, that the two processes
run the nodes from both ends (and the other is ended), and that a command with it gives the same integers as
without it, from an empty cache. (How much faster first use gets is measured in docs/PERFORMANCE.md, not here.)"""
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


def test_placeholders_reach_like_real_inputs():
    program = npu_sim.load(DEMO, input_shapes=SHAPES).program
    name = next(n for node in program.nodes for n in node.inputs
                if not program.tensors[n].is_const and program.tensors[n].q is not None)
    x = ahead._placeholder(program, name)
    t = program.tensors[name]
    assert x.dtype == t.q.np_dtype and x.shape == tuple(t.shape)
    assert x.size == 64 and x.min() == -128 and x.max() == 127  # the range's ends

    class Q16:
        np_dtype, zero_point = np.int16, np.int16(32000)

    class T:
        q, shape = Q16(), (2, 5000)
    x16 = ahead._placeholder(type("P", (), {"tensors": {"t": T()}})(), "t")
    assert x16.dtype == np.int16 and x16.shape == (2, 5000)
    flat = x16.reshape(-1)  # a ramp over the whole type, whatever the zero point: a real input's reach
    assert flat[0] == -32768 and flat[-1] == 32767 and np.all(np.diff(flat.astype(np.int64)) > 0)


def test_not_armed_nothing_forks(monkeypatch):
    program = npu_sim.load(DEMO, input_shapes=SHAPES).program
    assert ahead.compile_ahead(program, _Context(program, RunResult({}))) is None
    monkeypatch.setenv("NPU_SIM_COMPILE_AHEAD", "0")
    ahead.arm()
    assert ahead.compile_ahead(program, _Context(program, RunResult({}))) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_both_processes_run_the_nodes_from_both_ends_convolutions_first_there(monkeypatch, tmp_path):
    monkeypatch.setenv("NPU_SIM_COMPILE_AHEAD", "1")
    monkeypatch.setattr(ahead, "_cpus", lambda: 2)
    program = npu_sim.load(DEMO, input_shapes=SHAPES).program
    here = os.getpid()
    calls = []
    for i, node in enumerate(program.nodes):
        def run(node, inputs, ctx, real=node.run, i=i):
            if os.getpid() == here:
                calls.append(i)
            else:  # the other process: its first node and what it was given
                with open(tmp_path / "other", "a") as f:
                    f.write(f"{i} " + " ".join(f"{np.dtype(a.dtype).name}{list(a.shape)}" for a in inputs) + "\n")
            return real(node, inputs, ctx)
        monkeypatch.setattr(node, "run", run)
    ahead.arm()
    stop = ahead.compile_ahead(program, _Context(program, RunResult({})))
    assert stop is not None and ahead.compile_ahead(program, None) is None  # once per arming
    assert calls == list(range(len(program.nodes)))  # this process: first to last, before the run
    marker = tmp_path / "other"
    end = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < end:
        time.sleep(0.05)
    stop()
    first = marker.read_text().splitlines()[0]
    i, last = [(i, n) for i, n in enumerate(program.nodes) if n.op in ahead.BIG][-1]  # the last convolution
    want = [program.tensors[n] for n in last.inputs if not program.tensors[n].is_const]
    assert first == f"{i} " + " ".join(f"{np.dtype(t.q.np_dtype).name}{list(t.shape)}" for t in want)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_this_process_prepares_the_run_first_then_runs_its_steps(monkeypatch):
    """With the run's plan: it is made first (the chain probes run while the other process compiles), then the
    steps it returns -- the nodes the run will run, a chain's table lookups among them -- run on placeholders."""
    monkeypatch.setenv("NPU_SIM_COMPILE_AHEAD", "1")
    monkeypatch.setattr(ahead, "_cpus", lambda: 2)
    program = npu_sim.load(DEMO, input_shapes=SHAPES).program
    here, events = os.getpid(), []
    for i, node in enumerate(program.nodes):
        def run(node, inputs, ctx, real=node.run, i=i):
            if os.getpid() == here:
                events.append(i)
            return real(node, inputs, ctx)
        monkeypatch.setattr(node, "run", run)
    steps = program.nodes[1::2]  # what a plan returns: some of the nodes, in its own order

    def plan():
        events.append("plan")
        return steps
    ahead.arm()
    stop = ahead.compile_ahead(program, _Context(program, RunResult({})), plan)
    stop()
    assert events == ["plan"] + list(range(1, len(program.nodes), 2))


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
