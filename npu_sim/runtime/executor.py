"""Run an integer program: one small loop with hooks.

``execute`` walks the nodes in order, calls each node's prepared ``run`` with integer arrays, and calls every
hook after each node with ``(node, inputs, outputs, seconds)``. Tracing, per-node timing, accuracy and the
overflow report are all hooks or small readers of the same loop.
"""
from __future__ import annotations

import ctypes
import os
import sys
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from npu_sim.errors import InputError
from npu_sim.ir import Node, Program
from npu_sim.runtime.ahead import armed as ahead_armed, compile_ahead
from npu_sim.runtime.chains import fused_nodes


@dataclass
class RunResult:
    values: dict[str, np.ndarray]               # every tensor kept (all of them when keep_all)
    overflows: dict[str, int] = field(default_factory=dict)  # node -> accumulators past the board's width
    seconds: dict[str, float] = field(default_factory=dict)  # node -> wall time


class _Context:
    """What a node's run function may ask of the executor."""

    def __init__(self, program: Program, result: RunResult):
        self.program = program
        self.result = result

    def shape_of(self, name: str) -> tuple[int, ...]:
        return self.program.tensors[name].shape

    def tensor(self, name: str):
        return self.program.tensors[name]

    def overflow(self, node: Node, count: int) -> None:
        self.result.overflows[node.name] = self.result.overflows.get(node.name, 0) + count


def check_feeds(program: Program, feeds: dict) -> dict[str, np.ndarray]:
    expected = program.inputs
    unknown = sorted(set(feeds) - set(expected))
    if unknown:
        raise InputError(f"unknown input(s) {unknown}; the model's inputs are {sorted(expected)}")
    missing = sorted(set(expected) - set(feeds))
    if missing:
        raise InputError(f"missing input(s) {missing}; the model's inputs are {sorted(expected)}")
    out = {}
    for name, value in feeds.items():
        t = program.tensors[expected[name]]
        arr = np.asarray(value)
        if tuple(arr.shape) != tuple(t.shape):
            batch = (f" (a batch of N samples, {'x'.join(map(str, ('N',) + tuple(t.shape[1:])))}, is accepted too "
                     f"by `npu-sim run --input`, Simulator.run and trace)" if t.shape and t.shape[0] == 1 else "")
            raise InputError(f"input {name!r}: expected shape {'x'.join(map(str, t.shape))}, got "
                             f"{'x'.join(map(str, arr.shape)) or 'a scalar'}{batch}")
        if t.q is None:
            if arr.dtype.kind != "f":
                raise InputError(f"input {name!r}: expected float values (the model quantizes them itself), got "
                                 f"{arr.dtype}")
            arr = arr.astype(np.float32, copy=False)  # read only, like an integer feed
            if not np.all(np.isfinite(arr)):
                raise InputError(f"input {name!r} contains NaN or infinity")
        else:
            if arr.dtype != t.q.np_dtype:
                want = np.dtype(t.q.np_dtype).name + (f" (holding {t.q.dtype} values)" if t.q.bits == 4 else "")
                raise InputError(f"input {name!r}: expected {want} (the model input is already quantized), got "
                                 f"{arr.dtype}")
            if t.q.bits == 4 and (arr.min() < t.q.qmin or arr.max() > t.q.qmax):
                raise InputError(f"input {name!r}: values outside the {t.q.dtype} range")
        out[expected[name]] = np.ascontiguousarray(arr)
    return out


_MEMORY_TUNED = False


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed tensor memory for reuse instead of returning it to the OS (once per process).

    By default glibc serves blocks above a dynamic threshold (128 KiB to 32 MiB) by mmap and unmaps them on
    free, and trims the heap top, so each run's tensors and accumulators land on fresh pages that the kernel
    faults in one 4 KiB page at a time -- measured ~15% of a MobileNetV2 run. Raising the mmap threshold to its
    maximum (32 MiB) and the trim threshold keeps that memory mapped: the process then holds on to its peak
    heap size. Only changes allocation policy, never results. Off with ``NPU_SIM_KEEP_MEMORY=0``; no effect
    outside glibc (Linux)."""
    global _MEMORY_TUNED
    if _MEMORY_TUNED:
        return True
    _MEMORY_TUNED = True
    if os.environ.get("NPU_SIM_KEEP_MEMORY", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, 32 << 20) == 1
        return bool(libc.mallopt(m_trim_threshold, 1 << 30) == 1 and ok)
    except (OSError, AttributeError):
        return False


# program -> (its nodes and outputs when planned, {(keep_all, fuse): plan})
_PLANS: "weakref.WeakKeyDictionary[Program, tuple]" = weakref.WeakKeyDictionary()


def chains_enabled() -> bool:
    """Whether runs that keep no intermediate tensor run elementwise chains as tables (``npu_sim.runtime.chains``);
    off with ``NPU_SIM_CHAINS=0`` (the same integers, node by node: to time each node on its own)."""
    return os.environ.get("NPU_SIM_CHAINS", "1") != "0"


def _fuses(keep_all: bool, hooks) -> bool:
    """Whether a run computes the elementwise chains as tables: one that keeps no intermediate tensor, with no
    hooks, unless ``NPU_SIM_CHAINS=0``."""
    return not keep_all and not hooks and chains_enabled()


def _plan(program: Program, keep_all: bool, fuse: bool = False, ctx=None) -> list:
    """Per step, in order: ``(node, names of its activation inputs, names whose last use it is)`` -- what the
    loop needs, worked out once per program (kept here, not on the IR; rebuilt when its nodes or outputs change).
    With ``fuse`` the steps are the program's nodes with its elementwise chains as table lookups (probed with
    ``ctx``, the run's context)."""
    version = (tuple(map(id, program.nodes)), tuple(program.outputs.values()), tuple(program.passthrough.values()))
    if program not in _PLANS or _PLANS[program][0] != version:
        _PLANS[program] = (version, {})
    plans, key = _PLANS[program][1], (keep_all, fuse)
    if key in plans:
        return plans[key]
    tensors = program.tensors
    nodes = fused_nodes(program, ctx) if fuse else program.nodes
    last_use = {}
    if not keep_all:
        for i, node in enumerate(nodes):
            for name in node.inputs:
                last_use[name] = i
        for name in list(program.outputs.values()) + list(program.passthrough.values()):
            last_use[name] = len(nodes)
    plan = []
    for i, node in enumerate(nodes):
        free = tuple(dict.fromkeys(n for n in node.inputs if last_use.get(n) == i))
        plan.append((node, tuple(n for n in node.inputs if not tensors[n].is_const), free))
    plans[key] = plan
    return plan


def run_steps(program: Program, keep_all: bool = False, hooks=(), result: RunResult | None = None) -> list[Node]:
    """The steps a run executes: the program's nodes, with its elementwise chains as table lookups
    (``npu_sim.runtime.chains``) in a run with no hooks that keeps only the outputs, unless ``NPU_SIM_CHAINS=0``;
    the chains probed with a context on ``result`` (the run's; a throwaway one by default)."""
    ctx = _Context(program, RunResult({}) if result is None else result)
    return [step for step, _, _ in _plan(program, keep_all, _fuses(keep_all, hooks), ctx)]


def execute(program: Program, feeds: dict, hooks=(), keep_all: bool = False) -> RunResult:
    """Run ``program`` on ``feeds``. A run with no hooks that keeps only the outputs computes elementwise chains
    as table lookups (``npu_sim.runtime.chains``: the same integers); its ``seconds`` then hold one entry per
    lookup, under the name of the chain node whose output it is."""
    keep_freed_memory()
    values = check_feeds(program, feeds)
    result = RunResult(values)
    if not ahead_armed():  # every run but a first one on a cold kernel cache
        return _loop(program, values, result, hooks, keep_all)
    # the run's plan is made while the other process compiles: its steps then run on placeholders here
    stop_ahead = compile_ahead(program, _Context(program, RunResult({})),
                               lambda: run_steps(program, keep_all, hooks, result))
    try:
        return _loop(program, values, result, hooks, keep_all)
    finally:
        if stop_ahead is not None:
            stop_ahead()


def _loop(program: Program, values: dict, result: RunResult, hooks, keep_all: bool) -> RunResult:
    ctx = _Context(program, result)
    seconds = result.seconds
    clock = time.perf_counter
    for node, in_names, free in _plan(program, keep_all, _fuses(keep_all, hooks), ctx):
        inputs = [values[n] for n in in_names]
        t0 = clock()
        try:
            outputs = node.run(node, inputs, ctx)
        except Exception as exc:
            raise RuntimeError(f"node {node.name!r} ({node.op}) failed: {type(exc).__name__}: {exc}") from exc
        dt = clock() - t0
        seconds[node.name] = dt
        for name, arr in zip(node.outputs, outputs):
            values[name] = arr
        for hook in hooks:
            hook(node, inputs, outputs, dt)
        for name in free:
            values.pop(name, None)
    return result
