"""The one place that sets Numba options for every kernel.

``cache=True`` keeps compiled code on disk between runs (first use pays the compile once).
No ``fastmath``: integer code must not be reassociated, and the float requantization of the ``onnx``
arithmetic must round exactly as IEEE float32 does.

:func:`njit_noalloc` is for kernels that allocate nothing (their callers pass every output and scratch array):
compiled without Numba's reference counting, the array views their loops take per row or channel (``x[n, c]``,
``acc[a:b]``) are plain pointer arithmetic. With it, each view costs an atomic increment and decrement of its
array's reference count (~10 ns), which on this project's short rows (2-3 rows of 96 in PP-OCR cls) was a
third of an elementwise Mul. Numba refuses to compile an allocation in such a kernel, and the functions it calls
inherit the setting; these kernels return no arrays either (the caller keeps the ones it passed).

A kernel that passes a constant to another kernel passes it typed (``np.int64(0)``, not ``0``): a bare literal
makes Numba compile the callee once more for that literal value, which only costs first-use compile time.

The compiled code is kept in a folder named after a fingerprint of every kernel source (``kernels/__pycache__/
sources-<hash>``, or under ``NUMBA_CACHE_DIR``): Numba checks a cached function against its own file only, so a
kernel whose code inlines a function of another file (a tile of ``conv_int16`` used by ``conv_u8s8``) would keep
its old compiled code after that other file changed -- wrong integers after an update. A new set of sources gets a
new folder, and compiles once.
"""
import hashlib
import os
from pathlib import Path

import numba

JIT_OPTIONS = {"cache": True, "nogil": True, "fastmath": False}
SOURCES = Path(__file__).resolve().parent


def sources_fingerprint(folder: Path = SOURCES) -> str:
    """A short hash of the names and contents of the kernel sources in ``folder``."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _use_fingerprinted_cache() -> None:
    """Point Numba's cache (``NUMBA_CACHE_DIR``, else ``kernels/__pycache__``) at its ``sources-<hash>`` folder,
    before any kernel is compiled; set in the environment too, so worker processes use the same folder."""
    tail = f"sources-{sources_fingerprint()}"
    base = os.environ.get("NUMBA_CACHE_DIR") or str(SOURCES / "__pycache__")
    if Path(base).name != tail:
        os.environ["NUMBA_CACHE_DIR"] = str(Path(base) / tail)
        numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]


_use_fingerprinted_cache()


def _lock_cache_saves() -> None:
    """Serialize Numba's cache saves of one function across processes.

    Numba saves a compiled function by reading its cache index, adding the new signature with the first data-file
    number the index does not use, and writing the index and the data file back
    (``numba.core.caching.IndexDataCacheFile.save``). Two processes saving signatures of the same function at once
    (the workers of a dataset run or of the test suite, on a cold cache) can both take the same number: the index
    then names one signature and the data file holds the other's code, which a later run would load and call
    with the wrong argument types (Numba issue #10128). Here each save holds an exclusive lock on a file beside the
    index (``fcntl.flock``; a platform without ``fcntl`` keeps Numba's own save)."""
    try:
        import fcntl
        from numba.core import caching
    except ImportError:
        return
    cls = getattr(caching, "IndexDataCacheFile", None)
    save = getattr(cls, "save", None)
    if save is None or getattr(save, "locked_across_processes", False):
        return

    def locked_save(self, key, data):
        index = getattr(self, "_index_path", None)
        if index is None:  # a Numba whose cache files are laid out otherwise
            return save(self, key, data)
        with open(f"{index}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            return save(self, key, data)

    locked_save.locked_across_processes = True
    cls.save = locked_save


_lock_cache_saves()


class CompileBusy(RuntimeError):
    """Another process is compiling this kernel for these argument types, or has (raised only in a process that
    asked for it with :func:`skip_busy_compiles`)."""


_SKIP_BUSY = False  # raise CompileBusy for a signature another process holds
_SKIP_DONE = False  # ... or has started before (a kernel, not a function a compile in progress calls)
_DEPTH = [0]  # compiles in progress in this process (nested: a kernel, then the functions it calls)


def skip_busy_compiles(on: bool = True, done: bool = False) -> None:
    """From now on in this process (until called with ``on=False``), a kernel another process is compiling raises
    :class:`CompileBusy` instead of being waited for: the caller moves on to other work
    (``npu_sim/runtime/ahead.py``). A function called by a kernel this process is compiling is still waited for
    (small; giving up would throw away the kernel's compile so far). With ``done``, a kernel another process has
    compiled raises too, instead of loading from the cache (a process that compiles only for the cache, whose
    loads would be wasted)."""
    global _SKIP_BUSY, _SKIP_DONE
    _SKIP_BUSY, _SKIP_DONE = on, on and done


def ready_compiler() -> None:
    """Do Numba's one-time set-up of its compiler (its typing and target registries: about 0.3 s) now, not at the
    first compile: a process about to fork compilers (``npu_sim/runtime/ahead.py``) pays it once for all."""
    from numba.core.registry import cpu_target
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()


def compile_lock_path(index, args) -> str:
    """The lock file of one signature (Numba argument types ``args``) of the function whose cache index is
    ``index``."""
    return f"{index}.{hashlib.sha256(repr(tuple(args)).encode()).hexdigest()[:16]}.compiling"


def _lock_compiles() -> None:
    """Compile each cached kernel signature in one process at a time.

    Two processes on a cold cache (the run and the process compiling ahead, dataset workers, test workers) would
    otherwise both compile a kernel both reach, each paying its whole compile time. Here a process holds an
    exclusive lock on a file beside the function's cache index, one per argument types, from Numba's cache lookup
    to its save: a second process waits, then loads what the first saved (after :func:`skip_busy_compiles`, a
    kernel raises :class:`CompileBusy` instead; a function it calls is still waited for). A process holds these
    locks only down its own chain of nested compiles (a kernel, then the functions it calls), and the calls form
    no cycle, so two waiting processes cannot wait for each other. Numba's own compiler lock is taken first, so two threads of one
    process never hold each other's file locks. Functions without a disk cache (Numba's own) compile as before."""
    try:
        import fcntl
        from numba.core import sigutils
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.dispatcher import Dispatcher
    except ImportError:
        return
    compile_ = Dispatcher.compile
    if getattr(compile_, "locked_across_processes", False):
        return

    def locked_compile(self, sig):
        index = getattr(getattr(self._cache, "_cache_file", None), "_index_path", None)
        if index is None:
            return compile_(self, sig)
        with global_compiler_lock:
            args, _ = sigutils.normalize_signature(sig)
            if tuple(args) in self.overloads:
                return compile_(self, sig)
            path = compile_lock_path(index, args)
            if _SKIP_DONE and not _DEPTH[0] and os.path.exists(path):
                raise CompileBusy(f"{self.py_func.__qualname__}{tuple(args)} (compiled by another process)")
            try:
                lock = open(path, "a")
            except OSError:  # a cache folder this process cannot write: compiles unshared
                return compile_(self, sig)
            with lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | (fcntl.LOCK_NB if _SKIP_BUSY and not _DEPTH[0] else 0))
                except BlockingIOError:
                    raise CompileBusy(f"{self.py_func.__qualname__}{tuple(args)}") from None
                _DEPTH[0] += 1
                try:
                    return compile_(self, sig)  # the lock is released when the file is closed
                finally:
                    _DEPTH[0] -= 1

    locked_compile.locked_across_processes = True
    Dispatcher.compile = locked_compile


_lock_compiles()


def njit(fn):
    return numba.njit(**JIT_OPTIONS)(fn)


def njit_noalloc(fn):
    return numba.njit(**JIT_OPTIONS, _nrt=False)(fn)
