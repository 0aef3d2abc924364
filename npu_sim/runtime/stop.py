"""Stopping a long job on SIGINT or SIGTERM: the signal becomes a :class:`Stopped` exception in the main thread.

``on_signals()`` (the CLI, around a dataset run) turns SIGINT and SIGTERM into ``Stopped``, raised where the main
thread is, so every ``finally`` on the way out runs: the engines stop their workers, the dataset run saves its
manifest. ``held()`` marks a block that a stop must not cut in two (a shard written and recorded in the manifest):
a signal that arrives inside it is raised when the block ends. Once a stop is raised, further signals are ignored
until ``on_signals`` ends, so the clean-up is not cut short either. ``Stopped`` is a ``BaseException``: the
``except Exception`` that keep one failed task from stopping the others let it through.
"""
from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """The process was asked to stop by ``signum``; ``exit_code`` is the shell's convention for it (128 + signum:
    130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    """The stop handler's state: inside how many ``held`` blocks, the signal waiting for them to end, and whether
    a stop was raised already."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.held = 0
        self.pending: int | None = None
        self.raised = False

    def handle(self, signum, frame) -> None:
        if self.raised or self.pending is not None:
            return
        if self.held:
            self.pending = signum
            return
        self.raised = True
        raise Stopped(signum)


_STATE = _State()


@contextlib.contextmanager
def on_signals():
    """While the block runs, SIGINT and SIGTERM raise :class:`Stopped` in the main thread (elsewhere: nothing
    changes). The previous handlers come back at the end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    _STATE.reset()
    for s in SIGNALS:
        signal.signal(s, _STATE.handle)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _STATE.reset()


@contextlib.contextmanager
def held():
    """A stop signal that arrives while the block runs is raised when it ends (blocks nest)."""
    _STATE.held += 1
    try:
        yield
    finally:
        _STATE.held -= 1
        if not _STATE.held and _STATE.pending is not None:
            signum, _STATE.pending = _STATE.pending, None
            _STATE.raised = True
            raise Stopped(signum)
