"""Board descriptions: TOML data, never code paths keyed on board names.

A board is chosen by preset name (a file in ``npu_sim/boards/``) or by the path of a user TOML file.
Sections: ``[arithmetic]`` (how integers are computed, here), ``[rules]`` (what the NPU accepts: checked by
``npu_sim.analysis.check``), ``[cost]`` (the latency model: ``npu_sim.analysis.cost``) and ``[memory]`` (the
memories, their sizes and bandwidths, where the constants live: read by both). One declarative schema
(``schema.py``, the ``entry`` fields of the records in ``board.py``, ``rules.py``, ``cost_config.py``,
``memory_config.py``) parses and validates every key and generates docs/BOARDS.md. ``placement.py``: which node
runs on the NPU and which on the CPU, by the board's rules.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from npu_sim.boards.board import Arithmetic, Board
from npu_sim.boards.schema import board_from_dict
from npu_sim.errors import BoardError

PRESET_DIR = Path(__file__).parent

__all__ = ["Arithmetic", "Board", "PRESET_DIR", "load_board", "presets"]


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


_PARSED: dict[tuple, Board] = {}  # (path as given, mtime_ns, size) -> the Board read from it (frozen records)


def load_board(spec: "str | Path | Board" = "default") -> Board:
    """Return the board named by a preset name, a TOML file path, or a Board (returned as is). A file is read
    and validated once per process while it stays unchanged (its records are frozen: the same Board is returned)."""
    if isinstance(spec, Board):
        return spec
    text = str(spec)
    path = Path(text)
    if not (text.endswith(".toml") or path.is_file()):
        path = PRESET_DIR / f"{text}.toml"
        if not path.is_file():
            raise BoardError(f"unknown board {text!r}: use a preset ({', '.join(presets())}) or a path to a .toml file")
    elif not path.is_file():
        raise BoardError(f"board file {text!r} does not exist")
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BoardError(f"board file {path}: not valid TOML ({exc})") from None
        _PARSED[key] = board_from_dict(data, path)
    return _PARSED[key]
