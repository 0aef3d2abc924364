"""The one per-process memo of worker states: what a job's ``setup`` built in this process, kept by key.

A worker process keeps its job's state here (``engines``: built once by the pool's initializer); a job run in this
process lends the state its caller already built (``lent``), so the in-process worker takes it instead of building
its own (the report's engine, the advisor's evaluator); a dataset run keeps its last worker (``kept``), so the
driver's own set-up serves as its in-process worker. At most ``size`` states are held; the oldest goes first.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

LAST = 1  # a worker process or a dataset run holds one job's state at a time


class Memo:
    """States by key, compared by equality (a job's spec may hold a ``Board``, which does not hash)."""

    def __init__(self, size: int | None = None):
        """``size``: the most states held (None: no limit)."""
        self.size = size
        self.states: list[tuple[Any, Any]] = []  # (key, state), oldest first

    def get(self, key, default=None):
        return next((state for k, state in self.states if k == key), default)

    def put(self, key, state) -> Any:
        self.drop(key)
        self.states.append((key, state))
        if self.size is not None:
            del self.states[:-self.size]
        return state

    def drop(self, key) -> None:
        self.states = [(k, s) for k, s in self.states if k != key]

    def kept(self, key, build: Callable[[], Any]) -> Any:
        """The state kept for ``key``, else ``build()`` kept."""
        found = self.get(key, _NONE)
        return self.put(key, build()) if found is _NONE else found

    @contextlib.contextmanager
    def lent(self, key, state):
        """While the block runs, ``get(key)`` is ``state``."""
        self.put(key, state)
        try:
            yield state
        finally:
            self.drop(key)

    def clear(self) -> None:
        self.states.clear()


_NONE = object()
#: states a job lends for as long as it runs, by the job's key (the report's engine, the advisor's evaluator)
JOBS = Memo()
#: this process's worker of a job, built once (a worker process's state; a dataset run's last worker)
WORKER = Memo(LAST)
