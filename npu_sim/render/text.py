"""Small text helpers the terminal renderers share: names that never get cut silently."""
from __future__ import annotations

ELLIPSIS = "…"
NAME_CAP = 72  # a name column fits its names up to this width (TensorFlow exports' names run to ~65 characters)


def cut_middle(name: str, width: int) -> str:
    """``name`` if it fits in ``width`` characters, else cut in the middle with "…", a third kept from the start
    and the rest from the end (layer names differ at their ends: ``.../blocks_3/conv/Conv``, ``Conv.12``); the
    terminal tables and the HTML page (``render.svg``, ``render.graph_view``) cut names alike."""
    if len(name) <= width:
        return name
    head = (width - 1) // 3
    return name[:head] + ELLIPSIS + name[len(name) - (width - 1 - head):]


def column_width(names, floor: int, cap: int) -> int:
    """A column as wide as its longest name, at least ``floor`` and at most ``cap`` (longer ones: cut_middle)."""
    return max(floor, min(cap, max((len(n) for n in names), default=floor)))


def cut_end(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, ending in "…" when cut."""
    return text if len(text) <= limit else text[:limit - 1] + ELLIPSIS
