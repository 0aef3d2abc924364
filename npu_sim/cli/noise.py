"""Other libraries' log output kept out of the way: onnxruntime's quantizer logs warnings on the root logger
(pre-processing advice, an opset upgrade) while ``report --requantize`` runs it. They are collected and said in
one line at the end, each distinct message once with its count."""
from __future__ import annotations

import contextlib
import logging
import sys


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = " ".join(record.getMessage().split())
        self.messages[text] = self.messages.get(text, 0) + 1


def summary(messages: dict[str, int], limit: int = 100) -> str | None:
    """One line naming each distinct message (its first sentence, at most ``limit`` characters) and how often."""
    if not messages:
        return None
    counts: dict[str, int] = {}
    for m, n in messages.items():
        first = m.split(". ", 1)[0].rstrip(".")
        first = first if len(first) <= limit else first[:limit - 1] + "…"
        counts[first] = counts.get(first, 0) + n
    parts = [m + (f" (x{n})" if n > 1 else "") for m, n in counts.items()]
    return f"note: onnxruntime's quantizer logged {sum(messages.values())} warning(s): " + "; ".join(parts)


@contextlib.contextmanager
def quiet_logs(stream=None):
    """Route root-logger warnings (onnxruntime's quantizer) into a summary printed on leaving."""
    root = logging.getLogger()
    saved, level, collect = root.handlers[:], root.level, _Collect()
    root.handlers = [collect]
    root.setLevel(logging.WARNING)
    try:
        yield collect
    finally:
        root.handlers = saved
        root.setLevel(level)
        line = summary(collect.messages)
        if line:
            print(line, file=stream or sys.stderr)
