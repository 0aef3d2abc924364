"""A board's ``[memory]`` section: the one source of the board's memory facts. Its memories (``[memory.NAME]``:
size, bandwidth, latencies, burst), which of them holds the feature maps (always ``sram``), the constants
(``weight_memory``) and the feature maps that do not fit (``spill_memory``), and how the constants are stored
(``bias_bytes``, ``scale_bytes_per_channel``, their alignment and the layout of the weights: ``constant_alignment``,
``weight_*``; read by ``npu_sim.analysis.cost.constants``).

Read by the memory model (``npu_sim.analysis.cost.memory``: does it fit, reported by ``npu-sim estimate``,
enforced by ``npu-sim check``'s ``memory.*`` rules) and by the latency model (``npu_sim.analysis.cost``, through
``CostConfig.memory``): both see the same sizes, the same placement and the same per-channel bytes. Every key is
an ``entry`` below (the schema: ``npu_sim.boards.schema``, docs/BOARDS.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

from npu_sim.boards.fields import entry

SRAM = "sram"  # the memory that holds the feature maps (the tensor arena): [memory.sram]


@dataclass(frozen=True, kw_only=True)
class Memory:
    """``[memory.NAME]``: one memory of the board."""
    name: str = SRAM
    size_bytes: int = entry(0, "size, bytes (0: not limited)", range=(0, None))
    bytes_per_cycle: float = entry(0.0, "sustained bandwidth, bytes per NPU cycle (needed by [cost]; 0: not given)",
                                   range=(0.0, None))
    read_latency: int = entry(0, "read latency, cycles", range=(0, None))
    write_latency: int = entry(0, "write latency, cycles", range=(0, None))
    burst_bytes: int = entry(32, "longest burst, bytes (shorter bursts waste bandwidth)", range=(1, None))


def _unlimited_sram() -> dict:
    return {SRAM: Memory()}


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """The board's ``[memory]`` section (a board without one: one SRAM, nothing limited)."""
    weight_memory: str = entry(SRAM, "the memory the constants (weights, biases, scales, tables) are stored in and "
                               "read from: sram (they count against its size too) or another [memory.NAME]",
                               "memory")
    spill_memory: str = entry(SRAM, "where feature maps that do not fit the SRAM go (slower: a warning); sram: "
                              "nowhere (an error)", "memory")
    bias_bytes: int = entry(0, "bytes of bias stored per output channel of a MAC op, zeros where it has no bias "
                            "(0: the bias tensor at its own width, nothing without one)", range=(0, None))
    scale_bytes_per_channel: int = entry(0, "bytes of requantization parameters (multiplier, shift) stored per "
                                         "output channel of a MAC op", range=(0, None))
    constant_alignment: int = entry(1, "every constant tensor, and each stream of a MAC op's constants (its "
                                    "per-channel records, its weights), starts at a multiple of this many bytes",
                                    range=(1, None))
    weight_ublock: int = entry(1, "a MAC op's weights are stored in micro-blocks of this many output channels "
                               "(part-kernel-first: and input channels), each padded with zeros (1: dense)",
                               range=(1, None))
    weight_ifm_block: int = entry(1, "input channels per block of a depth-first weight stream, padded with zeros "
                                  "(16-bit inputs: half as many)", range=(1, None))
    weight_kernel_round: int = entry(1, "kernel elements of a depthwise or part-kernel-first (sub-)kernel padded "
                                     "to a multiple of this (part-kernel-first with 16-bit inputs: half)",
                                     range=(1, None))
    weight_subkernel: int = entry(0, "kernels wider or taller than this are stored as sub-kernels of at most this "
                                  "size (0: whole)", range=(0, None))
    memories: dict = field(default_factory=_unlimited_sram)  # name -> Memory: the [memory.NAME] tables

    @property
    def sram(self) -> Memory:
        return self.memories[SRAM]

    @property
    def sram_bytes(self) -> int:
        """The SRAM's size (0: not limited)."""
        return self.sram.size_bytes

    @property
    def constants_in_sram(self) -> bool:
        return self.weight_memory == SRAM

    @property
    def flash_bytes(self) -> int:
        """The size of the memory the constants are stored in, when it is not the SRAM (0: not limited)."""
        return 0 if self.constants_in_sram else self.memories[self.weight_memory].size_bytes

    @property
    def feature_map_spill(self) -> bool:
        """Feature maps that do not fit the SRAM can go to a slower memory."""
        return self.spill_memory != SRAM

    @property
    def sram_key(self) -> str:
        """The board key of the SRAM's size (for messages)."""
        return f"memory.{SRAM}.size_bytes"
