"""A board's ``[memory]`` section: how big its memories are and how it stores a model's constants (read by the
memory model in ``npu_sim.analysis.cost.memory``, reported by ``npu-sim estimate``, enforced by ``npu-sim check``'s
``memory.*`` rules).

Keys (all optional; a board without ``[memory]`` takes the sizes and placement from ``[cost]``, see
``memory_from_cost``):

* ``sram_bytes``: on-chip SRAM for the feature maps (the tensor arena), and for the constants too when
  ``weight_memory = "sram"``; 0 = not limited.
* ``flash_bytes``: the store the constants (weights, biases, scales, lookup tables) are kept in (flash, ROM);
  0 = not limited.
* ``weight_memory``: where the NPU reads the constants from while it runs: ``"sram"`` (copied into SRAM, as
  Vela's Sram_Only memory mode; they then count against ``sram_bytes`` too) or ``"flash"`` (read in place from
  flash, ROM or external memory, as Vela's Shared_Sram).
* ``feature_map_spill``: true when feature maps that do not fit ``sram_bytes`` can live in a slower memory
  (the board then runs slower, a warning) rather than not at all (an error).
* ``bias_bytes``: bytes per bias element as the board stores it; 0 = the bias tensor's own width (int32; int64
  for TFLite's 16x8 biases).
* ``scale_bytes_per_channel``: bytes the board stores per output channel of a multiply-accumulate op for its
  requantization (multiplier and shift); 0 = none stored.
"""
from __future__ import annotations

from dataclasses import dataclass

from npu_sim.boards.cost_config import CostConfig
from npu_sim.errors import BoardError

WEIGHT_MEMORIES = ("sram", "flash")


@dataclass(frozen=True)
class MemoryConfig:
    sram_bytes: int = 0                 # 0 = not limited
    flash_bytes: int = 0                # 0 = not limited
    weight_memory: str = "flash"        # "sram" | "flash": where the constants are read from at run time
    feature_map_spill: bool = False     # feature maps past sram_bytes can go to a slower memory
    bias_bytes: int = 0                 # 0 = the bias tensor's own width
    scale_bytes_per_channel: int = 0    # requantization multiplier + shift per MAC output channel
    sram_key: str = "memory.sram_bytes"  # the board key the SRAM size came from (for messages)


_INTS = ("sram_bytes", "flash_bytes", "bias_bytes", "scale_bytes_per_channel")
_KEYS = _INTS + ("weight_memory", "feature_map_spill")
_ZERO = {"sram_bytes": "not limited", "flash_bytes": "not limited", "bias_bytes": "the bias tensor's own width",
         "scale_bytes_per_channel": "none stored"}


def memory_from_cost(cost: CostConfig | None) -> MemoryConfig:
    """A board without ``[memory]``: the SRAM is ``[cost]``'s feature-map memory (its ``size_bytes``), the
    constants are in SRAM when ``[cost]`` reads weights from that memory, and feature maps may spill when its
    ``spill_memory`` is another memory. No ``[cost]`` either: nothing limited."""
    if cost is None:
        return MemoryConfig()
    fm = cost.feature_map_memory
    return MemoryConfig(sram_bytes=cost.memories[fm].size_bytes,
                        weight_memory="sram" if cost.weight_memory == fm else "flash",
                        feature_map_spill=cost.spill_memory != fm,
                        sram_key=f"cost.memory.{fm}.size_bytes")


def parse_memory(section: dict, cost: CostConfig | None, path) -> MemoryConfig:
    """Validate the board's ``[memory]`` table; keys it leaves out come from ``[cost]`` (``memory_from_cost``)."""
    if not isinstance(section, dict):
        raise BoardError(f"board file {path}: [memory] must be a table")
    unknown = sorted(set(section) - set(_KEYS))
    if unknown:
        raise BoardError(f"board file {path}: unknown key memory.{unknown[0]} (known: {', '.join(_KEYS)})")
    base = memory_from_cost(cost)
    vals = {"sram_bytes": base.sram_bytes, "flash_bytes": base.flash_bytes, "weight_memory": base.weight_memory,
            "feature_map_spill": base.feature_map_spill, "bias_bytes": base.bias_bytes,
            "scale_bytes_per_channel": base.scale_bytes_per_channel,
            "sram_key": "memory.sram_bytes" if "sram_bytes" in section else base.sram_key}
    for key in _INTS:
        if key in section:
            v = section[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise BoardError(f"board file {path}: memory.{key} = {v!r}; must be an integer >= 0 (bytes; "
                                 f"0 = {_ZERO[key]})")
            vals[key] = v
    if "weight_memory" in section:
        if section["weight_memory"] not in WEIGHT_MEMORIES:
            raise BoardError(f"board file {path}: memory.weight_memory = {section['weight_memory']!r}; choose one "
                             f"of {WEIGHT_MEMORIES}")
        vals["weight_memory"] = section["weight_memory"]
    if "feature_map_spill" in section:
        if not isinstance(section["feature_map_spill"], bool):
            raise BoardError(f"board file {path}: memory.feature_map_spill = {section['feature_map_spill']!r}; "
                             f"must be true or false")
        vals["feature_map_spill"] = section["feature_map_spill"]
    return MemoryConfig(**vals)
