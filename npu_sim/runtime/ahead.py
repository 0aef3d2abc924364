"""Compiling ahead on a cold kernel cache: two processes compile the run's kernels, from both ends of the program.

On first use most of a run is Numba compiling the kernels (about 1 s each, 15-30 for a real CNN), one after the
other as the nodes reach them. :func:`compile_ahead` readies Numba's compiler (``kernels._jit.ready_compiler``),
then forks a process that runs every node on placeholder inputs (:func:`_placeholder`): the convolutions first,
whose kernels take longest to compile (:data:`BIG`), last first, then the other nodes, last first. Meanwhile this
process prepares the run's plan (the executor's chain probes, which run their nodes' kernels), then runs the nodes
first to last on the same placeholders; then the real run starts. Each process compiles a
kernel the other has not started and skips one the other is compiling (``kernels._jit``: one process at a time
compiles a signature; ``skip_busy_compiles`` makes a busy kernel raise), so neither sits idle until the end; the
other process does not load what this one compiled either (it would only be thrown away). The real run then waits
for at most the other's last kernel, and loads from the shared cache what the other saved. The other process
computes nothing that is kept: its outputs are dropped, and it is ended when this process's run is done. Measured
on 2 cores, empty cache (docs/PERFORMANCE.md).

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
BIG = ("Conv", "ConvTranspose")  # ops whose kernels take longest to compile (1-3 s): the other process's first, so
# that what is left at the end are shorter compiles (the run waits for the other's last one)


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


def _placeholder(program: Program, name: str) -> np.ndarray:
    """A ramp over the codes of the tensor's type, from its least to its greatest: kernels that pick their path by
    the values' reach take the one a real input reaching the calibrated range takes (a ConvTranspose of inputs
    all at the zero point is zeros; a 16-bit matmul's exact float32 product is float64 for a wide reach)."""
    t = program.tensors[name]
    if t.q is None:
        return np.zeros(t.shape, np.float32)
    info = np.iinfo(t.q.np_dtype)
    size = int(np.prod(t.shape, dtype=np.int64))
    return np.linspace(int(info.min), int(info.max), size).round().astype(t.q.np_dtype).reshape(t.shape)


def _compile(program: Program, nodes, context) -> None:
    """Run each node on placeholder inputs, for the kernels it compiles (skipping those another process is
    compiling: ``kernels._jit.skip_busy_compiles``)."""
    for node in nodes:
        inputs = [_placeholder(program, n) for n in node.inputs if n and not program.tensors[n].is_const]
        try:
            node.run(node, inputs, context)
        except Exception:  # only compiling matters here; the real run reports its own errors
            pass


def compile_ahead(program: Program, context, plan=None):
    """If armed (:func:`arm`; disarmed here): fork the process that compiles from the end of ``program``, compile
    from its start here (module docstring), and return the function that ends the other process; else None.
    ``context``: what a node's run function may ask of the executor (a throwaway one: the placeholder runs'
    counts are not the run's). ``plan``: the run's own preparation, called here first, while the other process
    compiles, returning the nodes the run will run (the executor's run plan, whose chain probes run their nodes'
    kernels: 0.1-0.7 s that would follow the compiling otherwise; a kernel the other process holds is waited for
    there, as in the run); this process then runs those nodes on placeholders, the chains' table lookups among
    them."""
    global _ARMED
    if not _ARMED:
        return None
    _ARMED = False
    ready_compiler()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork() with other threads alive
        pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            skip_busy_compiles(done=True)  # what the run compiled, it loads itself: not loaded here
            last_first = program.nodes[::-1]
            _compile(program, [n for n in last_first if n.op in BIG] + [n for n in last_first if n.op not in BIG],
                     context)
        finally:
            os._exit(0)

    def stop() -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    try:
        steps = program.nodes if plan is None else plan()
        skip_busy_compiles()
        _compile(program, steps, context)
    except BaseException:  # a stop (SIGINT/SIGTERM) during it: the other process goes too
        stop()
        raise
    finally:
        skip_busy_compiles(False)
    return stop
