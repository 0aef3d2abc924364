"""A board's ``[cost]`` section: the accelerator's latency model as data (evaluated by ``npu_sim.analysis.cost``).

The memories the model reads and writes (their bandwidths, latencies, sizes, which one holds the feature maps,
the constants and the spills, the bytes stored per output channel) are the board's ``[memory]`` facts
(``memory_config.py``): ``CostConfig.memory`` is the board's ``MemoryConfig``, never a copy of its own. Every key
is an ``entry`` below (the schema: ``npu_sim.boards.schema``, docs/BOARDS.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

from npu_sim.boards.fields import REQUIRED, entry
from npu_sim.boards.memory_config import MemoryConfig


@dataclass(frozen=True, kw_only=True)
class OutputCycles:
    """``[cost.output_cycles_per_element]``: the output pipeline's cycles per output element, by op class."""
    mac: float = entry(REQUIRED, "convolution / fully connected output (8-bit: 32-bit accumulator)", "float",
                       range=(0.0, None))
    mac_wide: float = entry(REQUIRED, "the same with a wide accumulator (16-bit activations)", "float",
                            range=(0.0, None))
    add: float = entry(REQUIRED, "Add/Sub with rescaling", "float", range=(0.0, None))
    mul: float = entry(REQUIRED, "Mul", "float", range=(0.0, None))
    maxpool: float = entry(REQUIRED, "max pooling", "float", range=(0.0, None))
    pool: float = entry(REQUIRED, "average pooling, mean", "float", range=(0.0, None))
    lut: float = entry(REQUIRED, "lookup-table activations (Sigmoid, Tanh, ...)", "float", range=(0.0, None))
    relu: float = entry(REQUIRED, "the ReLU family (fused or standalone clamp)", "float", range=(0.0, None))
    elementwise: float = entry(REQUIRED, "Concat copies, other unary ops", "float", range=(0.0, None))
    requantize: float = entry(REQUIRED, "rescaling only", "float", range=(0.0, None))
    resize: float = entry(REQUIRED, "Resize", "float", range=(0.0, None))
    normalization: float = entry(REQUIRED, "Softmax/LayerNorm, per input element", "float", range=(0.0, None))

    def __getitem__(self, op_class: str) -> float:
        return getattr(self, op_class)


@dataclass(frozen=True, kw_only=True)
class Lut:
    """``[cost.lut]``: lookup tables, loaded before the op runs."""
    bytes_8: int = entry(256, "bytes of an 8-bit input's table", range=(0, None))
    bytes_16: int = entry(2048, "bytes of a 16-bit input's table", range=(0, None))
    load_bytes_per_cycle: float = entry(1.0, "table load bandwidth, bytes per cycle", range=(0.0, None), above=True)


@dataclass(frozen=True, kw_only=True)
class Cpu:
    """``[cost.cpu]``: the host CPU that runs fallback ops (per NPU clock cycle)."""
    macs_per_cycle: float = entry(1.0, "int8 MACs per cycle", range=(0.0, None), above=True)
    elements_per_cycle: float = entry(1.0, "output elements per cycle", range=(0.0, None), above=True)
    transfer_latency_cycles: int = entry(0, "cycles per tensor crossing NPU<->CPU", range=(0, None))
    transfer_bytes_per_cycle: float = entry(8.0, "bytes per cycle of that copy", range=(0.0, None), above=True)


@dataclass(frozen=True, kw_only=True)
class CostConfig:
    """The board's ``[cost]`` section (None on a board without one: ``estimate`` refuses it)."""
    clock_hz: float = entry(REQUIRED, "NPU clock, Hz", "float", range=(1.0, None))
    ublock: tuple[int, int, int] = entry(REQUIRED, "MAC micro-block: outputs [H, W, C] per step", "hwc")
    ofm_block: tuple[int, int, int] = entry(REQUIRED, "nominal output block [H, W, C]", "hwc")
    ifm_depth_block: int = entry(REQUIRED, "8-bit input channels per pass over the kernel", "int", range=(1, None))
    int16_factor: int = entry(REQUIRED, "16-bit operands: this many times the passes", "int", range=(1, None))
    ublock_step_cycles: int = entry(REQUIRED, "cycles per micro-block and kernel element over one pass", "int",
                                    range=(1, None))
    weight_step_cycles: int = entry(REQUIRED, "fewest cycles per kernel step (the weight bandwidth)", "int",
                                    range=(0, None))
    depthwise_kernel_step: int = entry(REQUIRED, "depthwise: kernel elements per step", "int", range=(1, None))
    part_kernel_step: int = entry(0, "few input channels: kernel elements sharing a pass (0: no such traversal)",
                                  range=(0, None))
    brick_layout: bool = entry(False, "feature maps in 16-channel bricks (a block row is one burst)")
    pool_min_kernel: int = entry(4, "pooling: at least this many steps per micro-block", range=(1, None))
    pool_ublock_cycles: float = entry(4.0, "pooling: cycles per step", range=(0.0, None))
    write_burst_elements: int = entry(16, "an output write burst covers at most this much of a block's depth",
                                      range=(1, None))
    op_overhead_cycles: int = entry(0, "fixed cycles per op (command setup)", range=(0, None))
    movement_cycles_per_element: float = entry(0.0, "Reshape/Transpose/...: cycles per element (0: free)",
                                               range=(0.0, None))
    lut: Lut = field(default_factory=Lut)
    output_cycles_per_element: OutputCycles
    cpu: Cpu = field(default_factory=Cpu)
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # the board's [memory] section (the same object)
    source: str = ""

    @property
    def macs_per_cycle(self) -> int:
        """Peak: micro-block outputs x input channels per cycle (ifm_depth_block / ublock_step_cycles)."""
        h, w, c = self.ublock
        return h * w * c * self.ifm_depth_block // self.ublock_step_cycles
