"""The board record: its ``[arithmetic]`` section and the parsed sections together (``Board``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from npu_sim.boards.cost_config import CostConfig
from npu_sim.boards.fields import entry
from npu_sim.boards.memory_config import MemoryConfig
from npu_sim.boards.rules import Rules


@dataclass(frozen=True, kw_only=True)
class Arithmetic:
    """``[arithmetic]``: how the board computes its integers (here, bit for bit)."""
    requantize: str = entry("fixedpoint", "fixedpoint: integer multiplier + right shift (kernels/fixedpoint.py); "
                            "onnx: onnxruntime's float32 recipe; tflite: TFLite's integer kernels (ops/tflite/)",
                            choices=("fixedpoint", "onnx", "tflite"))
    rounding: str = entry("half_up", "rounding of the requantization (fixedpoint: half_up only)",
                          choices=("half_up", "half_even"))
    multiplier_bits: int = entry(31, "significant bits of the requantization multiplier", range=(8, 31))
    accumulator_bits_8: int = entry(32, "accumulator width when both operands are at most 8 bits", range=(16, 64))
    accumulator_bits_16: int = entry(48, "accumulator width when an operand is 16 bits", range=(24, 64))
    accumulator_overflow: str = entry("wrap", "past its width the accumulator wraps (two's complement) or "
                                      "saturates; either way it is reported", choices=("wrap", "saturate"))
    add_left_shift_8: int = entry(20, "Add/Sub of 8-bit inputs: left shift before rescaling", range=(0, 24))
    add_left_shift_16: int = entry(15, "Add/Sub of 16-bit inputs: left shift before rescaling", range=(0, 24))
    resize_fraction_bits: int = entry(10, "Resize (linear): fraction bits of the interpolation weights",
                                      range=(1, 15))
    lut_entries_16: int = entry(513, "int16-input lookup tables: 2**k + 1 entries, linear interpolation between "
                                "them", range=(17, 4097))

    def accumulator_bits(self, *operand_bits: int) -> int:
        return self.accumulator_bits_8 if max(operand_bits) <= 8 else self.accumulator_bits_16

    def add_left_shift(self, *operand_bits: int) -> int:
        return self.add_left_shift_8 if max(operand_bits) <= 8 else self.add_left_shift_16

    @property
    def own_recipe(self) -> bool:
        """Our board's fixed-point recipe (``requantize = "fixedpoint"``): not onnxruntime's float32 one
        (``onnx``), not TFLite's (``tflite``)."""
        return self.requantize == "fixedpoint"


@dataclass(frozen=True, kw_only=True)
class Board:
    """A board file, parsed: the top-level keys and one record per section."""
    name: str = entry("", "the board's name (default: the file's name)", "str")
    description: str = entry("", "one line for listings and reports", "str")
    arithmetic: Arithmetic = field(default_factory=Arithmetic)
    rules: Rules = field(default_factory=Rules)   # the [rules] section (boards/rules.py)
    cost: CostConfig | None = None  # the [cost] section (boards/cost_config.py); None: no latency model
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # the [memory] section (boards/memory_config.py)
    source: str = ""    # file it was read from

    def __str__(self) -> str:
        return self.name
