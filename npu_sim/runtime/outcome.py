"""What a task of a dataset job gives back, whichever engine ran it (``engines.py``, ``engine_ray.py``).

A task's result, or a :class:`TaskFailed` in its place when it raised (the other tasks go on) or when its worker
died on every try. A worker whose ``setup(arg)`` raised answers every task with a :class:`SetupFailed`, and the
driver raises the set-up's own error, as the in-process engine does (a model that does not load is one clear
error, not a failure per sample).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable

RETRIES = 2  # times a task is resubmitted after its worker died


@dataclass
class TaskFailed:
    """A task that raised (``error``: its type and message) or whose worker died ``RETRIES + 1`` times."""
    error: str


@dataclass
class SetupFailed:
    """A worker's ``setup(arg)`` raised ``error``; the driver raises it."""
    error: BaseException


def guarded(task: Callable[[Any, Any], Any], state: Any, payload: Any) -> Any:
    """``task(state, payload)``, or a :class:`TaskFailed` naming what it raised."""
    if isinstance(state, SetupFailed):
        return state
    try:
        return task(state, payload)
    except Exception as exc:  # reported per task by the caller; the other tasks go on
        return TaskFailed(f"{type(exc).__name__}: {exc}")


def set_up(setup: Callable[[Any], Any], arg: Any) -> Any:
    """A worker's state: ``setup(arg)``, or a :class:`SetupFailed` that survives the trip back to the driver."""
    try:
        return setup(arg)
    except Exception as exc:
        return SetupFailed(portable(exc))


def portable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles and unpickles, else a RuntimeError with its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
