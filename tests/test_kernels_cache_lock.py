"""Numba's cache saves are serialized across processes (kernels/_jit.py ``_lock_cache_saves``): two processes that
save signatures of one function at once must not both take the same data file (Numba issue #10128: the index
would then point a signature at another signature's code). Checked on a cached function of a throwaway module, in
child processes with their own cache folder: a save waits while another process holds the function's lock, and
afterwards a fresh process loads both signatures from the cache, each giving its own result. Compiles are locked
the same way, per signature (``_lock_compiles``): a second process waits for a signature another is compiling,
then loads it; one that asked to skip busy compiles (``skip_busy_compiles``, the first run's two processes) gets
``CompileBusy`` at once for a kernel (also for one already compiled elsewhere, if it asked so), but still waits for
a function a kernel it is compiling calls."""
import fcntl
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from numba.core import caching

import kernels._jit  # noqa: F401  (installs the lock)

ROOT = Path(__file__).resolve().parent.parent

MODULE = textwrap.dedent("""
    from kernels._jit import njit

    @njit
    def add_one(x):
        return x + 1

    @njit
    def add_two(x):
        return add_one(x) + 1
""")

CALL = textwrap.dedent("""
    import sys
    from pathlib import Path
    import numpy as np
    import lockmod
    from kernels._jit import CompileBusy, skip_busy_compiles
    Path(sys.argv[1]).touch()  # imported: next, the call compiles and saves
    kind = sys.argv[2]
    fn = lockmod.add_one
    if kind.startswith("two-"):  # add_two calls add_one
        fn, kind = lockmod.add_two, kind[4:]
    if kind.startswith("skip-"):
        skip_busy_compiles(done=kind.startswith("skip-done-"))
        kind = kind.rsplit("-", 1)[1]
    try:
        print(fn(np.int64(41) if kind == "int" else np.float64(0.5)), sum(fn.stats.cache_hits.values()))
    except CompileBusy as exc:
        print("busy", type(exc).__name__)
""")


def _child(tmp_path, marker, kind):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "mod"), str(ROOT)])}
    return subprocess.Popen([sys.executable, "-c", CALL, str(tmp_path / marker), kind], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _output(tmp_path, marker, kind) -> list[str]:
    """A child's printed words, once it has exited cleanly."""
    child = _child(tmp_path, marker, kind)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    return out.split()


def _first_compile(tmp_path) -> tuple[Path, list[str]]:
    """The throwaway module written and ``add_one(int64)`` called by a child (which creates the cache folder and
    add_one's index): the index and what the child printed."""
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "lockmod.py").write_text(MODULE)
    out = _output(tmp_path, "m1", "int")
    (index,) = (tmp_path / "cache").rglob("*lockmod.add_one*.nbi")
    return index, out


def _wait_for(path: Path, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path.name} never appeared"
        time.sleep(0.05)


def test_the_save_of_numba_caches_is_locked():
    assert caching.IndexDataCacheFile.save.locked_across_processes


@pytest.mark.skipif(not hasattr(fcntl, "flock"), reason="no flock on this platform")
def test_a_save_waits_for_the_lock_and_both_signatures_load(tmp_path):
    index, out = _first_compile(tmp_path)
    assert out == ["42", "0"]  # compiled and saved
    with open(f"{index}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        second = _child(tmp_path, "m2", "float")
        _wait_for(tmp_path / "m2", 120)
        time.sleep(3)  # compiling add_one takes well under a second: only the lock keeps the call from returning
        assert second.poll() is None, second.communicate()
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert out.split() == ["1.5", "0"]
    for marker, kind, want in (("m3", "int", "42"), ("m4", "float", "1.5")):
        out = _output(tmp_path, marker, kind)
        assert out == [want, "1"], (kind, out)  # loaded from the cache, its own code


def test_compiles_are_locked():
    from numba.core.dispatcher import Dispatcher
    assert Dispatcher.compile.locked_across_processes


@pytest.mark.skipif(not hasattr(fcntl, "flock"), reason="no flock on this platform")
def test_a_busy_compile_is_waited_for_or_skipped(tmp_path):
    from numba import types

    index, _ = _first_compile(tmp_path)
    with open(kernels._jit.compile_lock_path(index, (types.float64,)), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a process compiling add_one(float64) would
        assert _output(tmp_path, "m2", "skip-float") == ["busy", "CompileBusy"]
        waiter = _child(tmp_path, "m3", "float")
        _wait_for(tmp_path / "m3", 120)
        time.sleep(3)
        assert waiter.poll() is None, waiter.communicate()
        # another signature: not held, loaded from the cache
        assert _output(tmp_path, "m4", "skip-int") == ["42", "1"]
    out, err = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, err
    assert out.split() == ["1.5", "0"]
    # compiled by another process: not loaded
    assert _output(tmp_path, "m5", "skip-done-float") == ["busy", "CompileBusy"]


@pytest.mark.skipif(not hasattr(fcntl, "flock"), reason="no flock on this platform")
def test_a_function_a_kernel_calls_is_waited_for_even_when_skipping(tmp_path):
    from numba import types

    index, _ = _first_compile(tmp_path)
    with open(kernels._jit.compile_lock_path(index, (types.float64,)), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process compiling add_one(float64)
        caller = _child(tmp_path, "m2", "two-skip-float")  # add_two(float64) starts, then needs add_one(float64)
        _wait_for(tmp_path / "m2", 120)
        time.sleep(3)
        assert caller.poll() is None, caller.communicate()  # waits: giving up would lose add_two's compile
    out, err = caller.communicate(timeout=120)
    assert caller.returncode == 0, err
    assert out.split() == ["2.5", "0"]
