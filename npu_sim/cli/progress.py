"""Progress bars on stderr for long work (dataset runs, the report): tqdm's, shown only on a terminal.

``progress(label, unit, quiet)`` returns a callback ``(done, total)`` that the job calls as work completes, and
``close()`` on it ends the bar. Off with ``--quiet`` and when stderr is not a terminal (logs and pipes get no
bar); without tqdm installed (``pip install 'npu-sim[progress]'``; the report extra has it too) there is no bar.
"""
from __future__ import annotations

import sys

try:  # an optional extra: the bar is a convenience, never needed for a result
    from tqdm import tqdm
except ImportError:  # pragma: no cover - exercised where tqdm is absent
    tqdm = None


class Progress:
    """``progress(done, total)`` moves the bar to ``done`` of ``total``; a no-op when the bar is off."""

    def __init__(self, label: str, unit: str = "samples", quiet: bool = False, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = (not quiet and tqdm is not None and hasattr(self.stream, "isatty") and self.stream.isatty())
        self.label, self.unit = label, unit
        self.bar = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = tqdm(total=total, desc=self.label, unit=" " + self.unit, file=self.stream, leave=True,
                            dynamic_ncols=True)
        elif self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def progress(label: str, unit: str = "samples", quiet: bool = False, stream=None) -> Progress:
    return Progress(label, unit, quiet, stream)
