"""Compiling ahead on a cold kernel cache: two processes share the compiling of the run's kernels.

On first use most of a run is Numba compiling the kernels (about 1 s each, 15-30 for a real CNN), one after the
other as the nodes reach them. :func:`compile_ahead` readies Numba's compiler (``kernels._jit.ready_compiler``),
then forks a process, and both run every node on placeholder inputs (:func:`_placeholder`), in the same order:
the ops whose kernels take longest to compile first (:func:`compile_order`). Each process compiles the kernels the
other has not started and skips the one the other is compiling (``kernels._jit``: one process at a time compiles
a signature; ``skip_busy_compiles`` makes a busy kernel raise), so the two work through one queue, longest jobs
first, and what is left at the end are short compiles; the other process does not load what this one compiled
either (it would only be thrown away). Then this process's run starts: it waits for at most the other's last
kernel, and loads from the shared cache what the other saved. The other process computes nothing that is kept:
its outputs are dropped, and it is ended when this process's run is done. Measured on 2 cores, empty cache
(docs/PERFORMANCE.md).

Armed once per process by the command line when the cache is cold (:func:`arm`); off with
``NPU_SIM_COMPILE_AHEAD=0``, and where there is no ``os.fork`` or only one CPU.
"""
from __future__ import annotations

import os
import signal
import warnings

import numpy as np

from kernels._jit import ready_compiler, skip_busy_compiles
from npu_sim.ir import Program

_ARMED = False
# ops by how long their kernels take to compile, longest first (measured on PP-OCRv4 and YOLOX: convolutions 1-3 s,
# elementwise products and sums 1-1.5 s, softmax, normalization and pooling about 1 s, the rest mostly below
# 0.5 s): both processes take the nodes in this order, so that what is left at the end are short compiles (the
# run waits for the other's last one)
FIRST = (("Conv", "ConvTranspose"), ("Mul", "Add", "Sub", "Div"),
         ("Softmax", "LayerNormalization", "AveragePool", "GlobalAveragePool", "MaxPool", "MatMul", "Gemm"))


def arm() -> None:
    """Let the next run of a program compile ahead (once per process)."""
    global _ARMED
    _ARMED = os.environ.get("NPU_SIM_COMPILE_AHEAD", "1") != "0" and hasattr(os, "fork") and _cpus() > 1


def armed() -> bool:
    """Whether the next run compiles ahead (:func:`arm`)."""
    return _ARMED


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def compile_order(program: Program) -> list:
    """The nodes as both processes take them (:data:`FIRST`): the convolutions, the elementwise products and sums,
    the softmax, normalization, pooling and matrix products, then the rest, each in program order."""
    rank = {op: i for i, ops in enumerate(FIRST) for op in ops}
    return sorted(program.nodes, key=lambda node: rank.get(node.op, len(FIRST)))  # stable: program order within


def _placeholder(program: Program, name: str) -> np.ndarray:
    """A ramp over the 8-bit range, or over 8,192 codes about the zero point of a 16-bit tensor (every code where
    the tensor has as many elements): kernels that pick their path by the values' reach (a ConvTranspose of inputs
    all at the zero point is zeros) take the one a real input takes."""
    t = program.tensors[name]
    if t.q is None:
        return np.zeros(t.shape, np.float32)
    info = np.iinfo(t.q.np_dtype)
    lo, hi = int(info.min), int(info.max)
    if info.bits > 8:
        zp = int(np.asarray(t.q.zero_point).reshape(-1)[0])
        lo, hi = max(lo, zp - 4096), min(hi, zp + 4095)
    size = int(np.prod(t.shape, dtype=np.int64))
    return np.linspace(lo, hi, size).round().astype(t.q.np_dtype).reshape(t.shape)


def _compile(program: Program, nodes, context) -> None:
    """Run each node on placeholder inputs, for the kernels it compiles (skipping those another process is
    compiling: ``kernels._jit.skip_busy_compiles``)."""
    for node in nodes:
        inputs = [_placeholder(program, n) for n in node.inputs if n and not program.tensors[n].is_const]
        try:
            node.run(node, inputs, context)
        except Exception:  # only compiling matters here; the real run reports its own errors
            pass


def compile_ahead(program: Program, context):
    """If armed (:func:`arm`; disarmed here): fork the other process, compile here beside it (module docstring),
    and return the function that ends the other process; else None.
    ``context``: what a node's run function may ask of the executor (a throwaway one: the placeholder runs'
    counts are not the run's)."""
    global _ARMED
    if not _ARMED:
        return None
    _ARMED = False
    ready_compiler()
    order = compile_order(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork() with other threads alive
        pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            skip_busy_compiles(done=True)  # what the run compiled, it loads itself: not loaded here
            _compile(program, order, context)
        finally:
            os._exit(0)

    def stop() -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    skip_busy_compiles()
    try:
        _compile(program, order, context)
    except BaseException:  # a stop (SIGINT/SIGTERM) during it: the other process goes too
        stop()
        raise
    finally:
        skip_busy_compiles(False)
    return stop
