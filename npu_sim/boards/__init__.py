"""Board descriptions: TOML data, never code paths keyed on board names.

A board is chosen by preset name (a file in ``npu_sim/boards/``) or by the path of a user TOML file.
Sections: ``[arithmetic]`` (how integers are computed, here), ``[rules]`` (what the NPU accepts: parsed and
checked by ``npu_sim.analysis.check``), ``[cost]`` (the latency model: parsed by ``npu_sim.analysis.cost``) and
``[memory]`` (memory sizes and how constants are stored: ``memory_config.py``).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from npu_sim.boards.cost_config import CostConfig, parse_cost
from npu_sim.boards.memory_config import MemoryConfig, parse_memory
from npu_sim.boards.rules import Rules, parse_rules
from npu_sim.errors import BoardError

PRESET_DIR = Path(__file__).parent


@dataclass(frozen=True)
class Arithmetic:
    requantize: str = "fixedpoint"  # "fixedpoint" | "onnx" | "tflite" (TFLite's integer kernels, npu_sim/ops/tflite/)
    rounding: str = "half_up"
    multiplier_bits: int = 31
    accumulator_bits_8: int = 32
    accumulator_bits_16: int = 48
    accumulator_overflow: str = "wrap"  # "wrap" | "saturate"
    add_left_shift_8: int = 20
    add_left_shift_16: int = 15
    resize_fraction_bits: int = 10
    lut_entries_16: int = 513  # int16-input lookup tables: 2**k + 1 entries, linear interpolation between them

    def accumulator_bits(self, *operand_bits: int) -> int:
        return self.accumulator_bits_8 if max(operand_bits) <= 8 else self.accumulator_bits_16

    def add_left_shift(self, *operand_bits: int) -> int:
        return self.add_left_shift_8 if max(operand_bits) <= 8 else self.add_left_shift_16

    @property
    def own_recipe(self) -> bool:
        """Our board's fixed-point recipe (``requantize = "fixedpoint"``): not onnxruntime's float32 one
        (``onnx``), not TFLite's (``tflite``)."""
        return self.requantize == "fixedpoint"


_CHOICES = {
    "requantize": ("fixedpoint", "onnx", "tflite"),
    "rounding": ("half_up", "half_even"),
    "accumulator_overflow": ("wrap", "saturate"),
}
_RANGES = {
    "multiplier_bits": (8, 31),
    "accumulator_bits_8": (16, 64),
    "accumulator_bits_16": (24, 64),
    "add_left_shift_8": (0, 24),
    "add_left_shift_16": (0, 24),
    "resize_fraction_bits": (1, 15),
    "lut_entries_16": (17, 4097),
}


@dataclass(frozen=True)
class Board:
    name: str
    description: str = ""
    arithmetic: Arithmetic = field(default_factory=Arithmetic)
    rules: Rules | None = None  # the [rules] section, parsed (boards/rules.py)
    cost: CostConfig | None = None  # the [cost] section, parsed (boards/cost_config.py); None: no latency model
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # the [memory] section (boards/memory_config.py)
    source: str = ""    # file it was read from

    def __str__(self) -> str:
        return self.name


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_board(spec: "str | Path | Board" = "default") -> Board:
    """Return the board named by a preset name, a TOML file path, or a Board (returned as is)."""
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
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BoardError(f"board file {path}: not valid TOML ({exc})") from None
    return _board_from_dict(data, path)


_TOP_LEVEL = ("name", "description", "arithmetic", "rules", "cost", "memory")


def _board_from_dict(data: dict, path: Path) -> Board:
    unknown = sorted(set(data) - set(_TOP_LEVEL))
    if unknown:
        raise BoardError(f"board file {path}: unknown key(s) {unknown} (known: {', '.join(_TOP_LEVEL)})")
    arith = data.get("arithmetic", {})
    if not isinstance(arith, dict):
        raise BoardError(f"board file {path}: [arithmetic] must be a table")
    known = {f.name: f for f in fields(Arithmetic)}
    values = {}
    for key, value in arith.items():
        if key not in known:
            raise BoardError(f"board file {path}: unknown key arithmetic.{key} (known: {', '.join(known)})")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise BoardError(f"board file {path}: arithmetic.{key} = {value!r}; choose one of {_CHOICES[key]}")
        if key in _RANGES:
            lo, hi = _RANGES[key]
            if not isinstance(value, int) or not lo <= value <= hi:
                raise BoardError(f"board file {path}: arithmetic.{key} = {value!r}; must be an integer in [{lo}, {hi}]")
        values[key] = value
    arithmetic = Arithmetic(**values)
    e = arithmetic.lut_entries_16 - 1
    if e & (e - 1):
        raise BoardError(f"board file {path}: arithmetic.lut_entries_16 = {e + 1}; must be 2**k + 1 (e.g. 257, 513)")
    if arithmetic.requantize == "fixedpoint" and arithmetic.rounding != "half_up":
        raise BoardError(f"board file {path}: fixedpoint requantization rounds half_up (see kernels/fixedpoint.py)")
    for section in ("rules", "cost", "memory"):
        if not isinstance(data.get(section, {}), dict):
            raise BoardError(f"board file {path}: [{section}] must be a table")
    cost = parse_cost(data.get("cost", {}), path)
    return Board(name=str(data.get("name", path.stem)), description=str(data.get("description", "")),
                 arithmetic=arithmetic, rules=parse_rules(data.get("rules", {}), path), cost=cost,
                 memory=parse_memory(data.get("memory", {}), cost, path), source=str(path))
