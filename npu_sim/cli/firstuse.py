"""First use: the kernels compile (Numba, ``cache=True``) the first time they run, which on a real model takes
tens of seconds with nothing on the screen. Said once on stderr, with a count of the kernels compiled.

Cheap: the cache is "cold" when its folder holds no index (``.nbi``) or a kernel module is newer than its newest
index (a stale cache: Numba recompiles). A compile that starts while the cache looked warm (a kernel used for the
first time) is said the same way, when it starts (Numba's ``numba:compile`` event)."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import numba
from numba.core import event

import kernels
from kernels import requantize

SOURCES = Path(kernels.__file__).parent


def cache_dir() -> Path:
    """Where Numba keeps the kernels' compiled code (``NUMBA_CACHE_DIR``, else ``kernels/__pycache__``)."""
    for fn in vars(requantize).values():
        if isinstance(fn, numba.core.dispatcher.Dispatcher):
            path = getattr(getattr(fn, "_cache", None), "_cache_path", None)
            if path:
                return Path(path)
    return SOURCES / "__pycache__"


def cache_is_cold(cache: Path, sources: Path = SOURCES) -> bool:
    """No compiled kernel in ``cache``, or a kernel source newer than its index (Numba would recompile it)."""
    newest: dict[str, float] = {}
    try:
        for f in cache.glob("*.nbi"):
            module = f.name.split(".", 1)[0]
            newest[module] = max(newest.get(module, 0.0), f.stat().st_mtime)
    except OSError:
        return True
    if not newest:
        return True
    for module, stamp in newest.items():
        src = sources / f"{module}.py"
        if src.is_file() and src.stat().st_mtime > stamp:
            return True
    return False


class FirstUse(event.Listener):
    """Says "compiling kernels for first use (cached in DIR) …" once, then counts the kernels compiled (on a
    terminal in place; else one closing line). Events of other processes (forked workers) are left alone."""

    def __init__(self, cache: Path, stream=None):
        self.cache, self.stream = cache, stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.pid, self.said, self.count, self.start = os.getpid(), False, 0, time.monotonic()

    def say(self) -> None:
        if not self.said:
            self.said = True
            self.start = time.monotonic()
            self.stream.write(f"compiling kernels for first use (cached in {self.cache}) …"
                              + ("" if self.tty else "\n"))
            self.stream.flush()

    def on_start(self, ev) -> None:
        if os.getpid() != self.pid:
            return
        self.say()
        self.count += 1
        if self.tty:
            self.stream.write(f"\rcompiling kernels for first use (cached in {self.cache}) … {self.count}")
            self.stream.flush()

    def on_end(self, ev) -> None:
        pass

    def close(self) -> None:
        if self.said and self.count and os.getpid() == self.pid:
            self.stream.write(("\n" if self.tty else "") + f"compiled {self.count} kernel(s) in "
                              f"{time.monotonic() - self.start:.0f} s; later runs reuse them\n")
            self.stream.flush()


@contextlib.contextmanager
def watch(runs: bool = True, stream=None):
    """Around a command: say so when the kernels compile; at once when the command ``runs`` the model and the
    cache is cold (report's worker processes compile out of this process's sight)."""
    cache = cache_dir()
    listener = FirstUse(cache, stream)
    if runs and cache_is_cold(cache):
        listener.say()
    with event.install_listener("numba:compile", listener):
        try:
            yield listener
        finally:
            listener.close()
