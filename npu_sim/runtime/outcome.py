"""What a task of a dataset job gives back, whichever engine ran it (``engines.py``, ``engine_ray.py``).

A task's result, or a :class:`TaskFailed` in its place when it raised (the other tasks go on) or when its worker
died on every try. A worker whose ``setup(arg)`` raised answers every task with a :class:`SetupFailed`, and the
driver raises the set-up's own error, as the in-process engine does (a model that does not load is one clear
error, not a failure per sample).

Both engines pull their payloads lazily through a :class:`Feed`: a payload is taken from the caller's iterable
only when a worker can take it, and dropped once answered, so the driver holds only the tasks in flight.
"""
from __future__ import annotations

import pickle
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable

RETRIES = 2  # times a task is resubmitted after its worker died
IN_FLIGHT = 2  # tasks given to one worker at a time (one running, one waiting, so a worker never idles between tasks)


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


class Feed:
    """The payloads of a job, pulled from its iterable one at a time as workers can take them: ``payloads`` holds
    those pulled and not yet answered (by index: their position in the iterable), ``waiting`` those of them not
    (or no longer) sent to a worker, in the order they are to be sent."""

    def __init__(self, payloads: Iterable):
        self.source = iter(payloads)
        self.payloads: dict[int, Any] = {}
        self.waiting: deque[int] = deque()
        self.pulled = 0
        self.exhausted = False

    def fill(self, count: int) -> int:
        """Pull until ``count`` payloads wait (or the iterable ends); how many wait."""
        while len(self.waiting) < count and not self.exhausted:
            try:
                payload = next(self.source)
            except StopIteration:
                self.exhausted = True
                break
            self.payloads[self.pulled] = payload
            self.waiting.append(self.pulled)
            self.pulled += 1
        return len(self.waiting)

    def next(self) -> int | None:
        """The index of the next payload to send (pulling one if none waits), or None when all were sent."""
        return self.waiting[0] if self.fill(1) else None

    def take(self) -> tuple[int, Any]:
        """The next payload to send (after :meth:`next` said there is one), out of ``waiting``."""
        i = self.waiting.popleft()
        return i, self.payloads[i]

    def again(self, indices: Iterable[int]) -> None:
        """Payloads sent but not answered (their worker died): waiting again, first, in this order."""
        self.waiting.extendleft(reversed(list(indices)))

    def answered(self, i: int) -> None:
        self.payloads.pop(i, None)
