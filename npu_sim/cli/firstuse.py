"""First use: the kernels compile (Numba, ``cache=True``) the first time they run, which on a real model takes
tens of seconds with nothing on the screen. Said once on stderr, with a count of the kernels compiled.

Cheap: the cache is "cold" when its folder holds no index (``.nbi``): then it is said at once. A compile that
starts while the cache looked warm (a kernel used for the first time, or one whose source changed since it was
cached) is said the same way, when it starts (Numba's ``numba:compile`` event). A changed kernel is not said up
front: its module may hold no kernel this command uses, and the message would then repeat on every run."""
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
from npu_sim.runtime import ahead

SOURCES = Path(kernels.__file__).parent


def cache_dir() -> Path:
    """Where Numba keeps the kernels' compiled code (under ``NUMBA_CACHE_DIR``, else ``kernels/__pycache__``, in
    the folder named after the kernels' sources: ``kernels._jit``)."""
    for fn in vars(requantize).values():
        if isinstance(fn, numba.core.dispatcher.Dispatcher):
            path = getattr(getattr(fn, "_cache", None), "_cache_path", None)
            if path:
                return Path(path)
    return SOURCES / "__pycache__"


def cache_is_cold(cache: Path) -> bool:
    """No compiled kernel in ``cache`` (no index file, or no folder yet)."""
    try:
        return next(cache.glob("*.nbi"), None) is None
    except OSError:
        return True


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
        ahead.arm()  # the first run compiles ahead in a second process (npu_sim.runtime.ahead)
    with event.install_listener("numba:compile", listener):
        try:
            yield listener
        finally:
            listener.close()
