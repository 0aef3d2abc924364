"""The board schema's building block: one ``entry`` per board-file key, declared on the record it fills.

A record (``Arithmetic``, ``Rules``, ``CostConfig``, ``MemoryConfig``, ...) is a frozen dataclass whose fields are
``entry(...)``: the default (or ``REQUIRED``), the allowed values (a kind, a range, choices) and the one-line doc.
``parse_table`` validates a TOML table against a record's entries, with messages that name the board file, the
key and what is allowed; ``npu_sim.boards.schema`` lists the sections and generates docs/BOARDS.md from the same
entries. A dataclass field declared with plain ``field()`` is not a board-file key (set by the loader).
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields

from npu_sim.errors import BoardError
from npu_sim.ir import BITS

REQUIRED = MISSING  # an entry without a default: the key must be in the file
DTYPES = tuple(BITS)


@dataclass(frozen=True)
class Spec:
    """What one key accepts. ``kind``: int, float, bool, str, choice, dtypes, zero_points, ints, hwc, memory."""
    kind: str
    doc: str
    lo: float | None = None
    hi: float | None = None
    above: bool = False          # lo is exclusive (a number > lo)
    choices: tuple = ()
    required: bool = False

    def allowed(self) -> str:
        """What is allowed, in words (the messages and docs/BOARDS.md)."""
        if self.kind in ("int", "float"):
            what = "an integer" if self.kind == "int" else "a number"
            if self.lo is not None and self.hi is not None:
                return f"{what} in [{_num(self.lo)}, {_num(self.hi)}]"
            if self.lo is not None:
                return f"{what} {'>' if self.above else '>='} {_num(self.lo)}"
            return what
        return {"bool": "true or false", "str": "a string",
                "choice": "one of " + ", ".join(repr(c) for c in self.choices),
                "dtypes": "a non-empty list of dtypes from " + ", ".join(DTYPES),
                "zero_points": "true, false, or a list of the dtypes that may have zero points",
                "ints": "a non-empty list of positive integers",
                "hwc": "[H, W, C], positive integers",
                "memory": "the name of a [memory.NAME] table"}[self.kind]


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def entry(default=REQUIRED, doc: str = "", kind: str | None = None, *, range: tuple | None = None,
          above: bool = False, choices: tuple = ()):
    """A board-file key: its default (``REQUIRED``: none), doc, kind (from the default's type when left out),
    inclusive ``range`` (lo, hi; hi None = no upper bound; ``above``: lo exclusive) and ``choices``."""
    if kind is None:
        kind = "choice" if choices else {bool: "bool", int: "int", float: "float", str: "str"}[type(default)]
    lo, hi = range if range else (None, None)
    spec = Spec(kind, doc, lo, hi, above, tuple(choices), default is REQUIRED)
    return field(default=default, metadata={"spec": spec})


def specs(record) -> dict:
    """The record's board-file keys: name -> Spec, in declaration order."""
    return {f.name: f.metadata["spec"] for f in fields(record) if "spec" in f.metadata}


def default_of(record, name: str):
    return next(f.default for f in fields(record) if f.name == name)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _valid(spec: Spec, v):
    """The parsed value, or None when ``v`` is not allowed."""
    k = spec.kind
    if k in ("int", "float"):
        ok = _is_num(v) and (k == "float" or float(v) == int(v))
        if not ok or (spec.lo is not None and (v <= spec.lo if spec.above else v < spec.lo)) \
                or (spec.hi is not None and v > spec.hi):
            return None
        return int(v) if k == "int" else float(v)
    if k == "bool":
        return v if isinstance(v, bool) else None
    if k in ("str", "memory"):
        return v if isinstance(v, str) and v else None
    if k == "choice":
        return v if v in spec.choices else None
    if k == "dtypes":
        return tuple(v) if isinstance(v, list) and v and all(d in DTYPES for d in v) else None
    if k == "zero_points":
        return v if isinstance(v, bool) else _valid(Spec("dtypes", ""), v)
    if k == "ints":
        return tuple(v) if isinstance(v, list) and v and all(_is_int(i) and i >= 1 for i in v) else None
    if k == "hwc":
        return tuple(v) if isinstance(v, list) and len(v) == 3 and all(_is_int(i) and i >= 1 for i in v) else None
    raise AssertionError(f"unknown entry kind {k}")


def bad(path, message: str) -> BoardError:
    return BoardError(f"board file {path}: {message}")


def parse_table(record, table, where: str, path, subtables: tuple = (), hints: dict | None = None) -> dict:
    """Validate the TOML table ``where`` (e.g. ``cost.lut``; "" for the top level) against ``record``'s entries:
    name -> value for the keys given (the record's defaults fill the rest). ``subtables``: the keys that are
    tables of their own (parsed by the caller); ``hints``: key -> where an unknown key belongs (another section's
    key, a key that moved)."""
    if not isinstance(table, dict):
        raise bad(path, f"[{where}] must be a table")
    known = specs(record)
    out = {}
    for key, v in table.items():
        name = f"{where}.{key}" if where else key
        if key in subtables:
            if not isinstance(v, dict):
                raise bad(path, f"[{name}] must be a table")
            continue
        spec = known.get(key)
        if spec is None:
            hint = f"; {hints[key]}" if hints and key in hints else ""
            raise bad(path, f"unknown key {name} (known: {', '.join(list(known) + list(subtables))}){hint}")
        value = _valid(spec, v)
        if value is None:
            raise bad(path, f"{name} = {v!r}; must be {spec.allowed()}")
        out[key] = value
    missing = [k for k, s in known.items() if s.required and k not in table]
    if missing:
        raise bad(path, f"{where} lacks {missing[0]} ({known[missing[0]].doc}; see docs/BOARDS.md)")
    return out
