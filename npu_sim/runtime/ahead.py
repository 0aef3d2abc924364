"""Compiling ahead on a cold kernel cache: a second process compiles the kernels the run will need last.

On first use most of a run is Numba compiling the kernels (about 1 s each, a dozen for a CNN), one after the
other as the nodes reach them. :func:`compile_ahead` forks a process that runs one node of each kind (op, input
types, window geometry) on placeholder inputs (every element at its zero point), starting from the kinds that
first appear last in the program: it compiles the kernels this process will need last while this process compiles
the ones it needs first, and each finds in the shared cache what the other has saved (``kernels/_jit.py`` locks the
cache's saves across processes). The other process computes nothing that is kept: its outputs are dropped, and it
is ended when this process's run is done. Measured on 2 cores, empty cache (docs/PERFORMANCE.md): MobileNetV2
A8W8 11.5 s -> 7.9 s.

Armed once per process by the command line when the cache is cold (:func:`arm`); off with
``NPU_SIM_COMPILE_AHEAD=0``, and where there is no ``os.fork`` or only one CPU.
"""
from __future__ import annotations

import os
import signal
import warnings

import numpy as np

from npu_sim.ir import Node, Program

_ARMED = False


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


def ahead_order(program: Program) -> list[Node]:
    """One node of each kind (op, input types, geometry), the kinds that first appear last first."""
    firsts: dict[tuple, Node] = {}
    for node in program.nodes:
        kinds = tuple(program.tensors[n].q.dtype if program.tensors[n].q is not None else "float"
                      for n in node.inputs if n and not program.tensors[n].is_const)
        firsts.setdefault((node.op, kinds, repr(node.geometry)), node)
    return list(reversed(firsts.values()))


def _placeholder(program: Program, name: str) -> np.ndarray:
    t = program.tensors[name]
    if t.q is None:
        return np.zeros(t.shape, np.float32)
    return np.full(t.shape, int(np.asarray(t.q.zero_point).reshape(-1)[0]), t.q.np_dtype)


def compile_ahead(program: Program, context):
    """If armed (:func:`arm`; disarmed here): fork the process that compiles ahead (module docstring) and return
    the function that ends it; else None. ``context``: what a node's run function may ask of the executor."""
    global _ARMED
    if not _ARMED:
        return None
    _ARMED = False
    order = ahead_order(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork() with other threads alive
        pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            for node in order:
                inputs = [_placeholder(program, n) for n in node.inputs if n and not program.tensors[n].is_const]
                try:
                    node.run(node, inputs, context)
                except Exception:  # only compiling matters here; the real run reports its own errors
                    pass
        finally:
            os._exit(0)

    def stop() -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    return stop
