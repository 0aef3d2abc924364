"""Latency estimate: the board's ``[cost]`` section (and its ``[memory]`` memories, ``CostConfig.memory``) and the
per-op cost model behind ``npu-sim estimate``.

The model is an analytical one in the style of Arm's Vela (the estimator of the Ethos-U compiler): every op is
costed on its own from the integer program (shapes and dtypes), and the network total is the sum of the ops.
All formulas are below; the code that evaluates them is in ``layer.py`` (one op: ``layer_cost``,
``cpu_layer_cost``) and ``network.py`` (the program: ``estimate_program``, ``Estimate``). Every number comes from
the board file.

Per NPU op (cycles of the NPU clock):

* **Work.** MACs are exact integer counts from the IR: ``N*OH*OW*Cout*(Cin/groups)*KH*KW`` for Conv,
  ``M*N*K`` for Gemm/MatMul, ``N*H*W*Cin*(Cout/groups)*KH*KW`` for ConvTranspose. Bytes per tensor are
  elements x the bytes of its dtype (int4 packs two per byte).
* **Blocks.** The output is computed in blocks of ``ofm_block`` = [H, W, C] (clipped to the output), each made
  of micro-blocks ``ublock`` = [H, W, C]. ``nU`` = micro-blocks per block (ceil in each dimension), ``blocks`` =
  micro-blocks of the whole output / ``nU`` (fractional: a partly used block costs its share).
* **MAC cycles per block** (tiling quantization; ``f16`` = ``int16_factor`` when either operand is 16-bit):
  - convolution, fully connected: ``max(weight_step_cycles, ublock_step_cycles*nU_hw) * KH*KW * nU_c *
    ceil(Cin_g / (ifm_depth_block / f16))`` (each pass over ``ifm_depth_block`` int8 input channels takes
    ``ublock_step_cycles`` per micro-block and kernel element; int16 halves the channels per pass, so the
    factor is exact when Cin fills whole int8 passes); or, when cheaper (few input channels, e.g. an RGB
    input layer), part-kernel-first: ``ceil(KH*KW / (part_kernel_step/f16))`` steps per ``dot`` =
    ``ifm_depth_block/ublock_step_cycles`` input channels: ``step * pk_steps * nU_c * ceil(Cin_g/dot)``;
  - depthwise: ``max(weight_step_cycles, ublock_step_cycles*nU_hw*f16) * ceil(KH*KW/depthwise_kernel_step) *
    nU_c``;
  - pooling: ``max(pool_min_kernel, KH*KW) * nU * pool_ublock_cycles * f16``;
* **Output (AO) cycles per block:** ``ceil(cpe * block elements)``, ``cpe`` = the largest of the op class's
  and the fused activation's cycles per element (``[cost.output_cycles_per_element]``).
* **Compute:** the MAC and output stages overlap across blocks: ``max(mac*blocks, cpe*outputs) +
  min(mac, ao)`` (the slower stage streams, the faster one is paid for one block). Elementwise, LUT, resize,
  normalization ops: ``ceil(cpe * output elements)`` (normalizations: ``cpe * input elements``, they make
  several passes).
* **Memory:** bytes moved per memory (feature maps in ``[memory.sram]``, constants in ``memory.weight_memory``):
  IFM re-reads (the IFM block, halo included, with the full input depth, once per output block; depthwise and
  pooling once per spatial block), the constants once per spatial output block as ``[memory]`` stores them
  (weights, the bias at ``bias_bytes`` per output channel or its own width, ``scale_bytes_per_channel`` per
  output channel), OFM writes scaled by the burst
  efficiency (a write burst holds ``min(ofm_block C, write_burst_elements)`` elements, times the block width
  with ``brick_layout`` (channels stored in 16-deep bricks), unless rows are contiguous), LUT loads.
  ``memory cycles = bytes / bytes_per_cycle`` per memory; the op's memory cycles are the largest over memories
  (they work in parallel).
* **Layer:** ``max(compute, memory) + exposed + op_overhead_cycles`` where ``exposed`` = the first IFM
  block's read and the last OFM block's write (latency + transfer; nothing overlaps them) + the LUT load
  (``lut_bytes / lut.load_bytes_per_cycle``) for lookup-table ops.
* **SRAM spill:** when IFM + OFM (+ weights, if they live in the SRAM) exceed ``[memory.sram] size_bytes``
  and the board has a ``spill_memory``, the feature maps are placed there and their bytes are counted there;
  the row says ``spill``. (Without one, ``npu-sim check``'s ``memory.sram`` rule says the model does not fit.)
* **Movement ops** (Reshape, Transpose, Pad, ...) cost ``movement_cycles_per_element`` per output element and
  their reads and writes; with 0 (the Ethos-U preset) they are free: a view, or folded into the neighbouring
  op's addressing, as Vela does with reshapes and explicit pads.
* **CPU fallback** (``npu_sim.boards.placement`` says CPU, by the board's rules): ``MACs / cpu.macs_per_cycle + elements /
  cpu.elements_per_cycle`` in NPU-clock cycles, plus a transfer for every tensor crossing the NPU/CPU boundary
  (``cpu.transfer_latency_cycles + bytes / cpu.transfer_bytes_per_cycle``), reported in their own columns.
* **Network:** the sum of the layers. Latency = cycles / ``clock_hz``.

Presets: ``ethos-u55-128`` (Vela's Ethos-U55-128, High_End_Embedded system config, Sram_Only memory mode) and
``default`` (our accelerator). Every key: the comments in ``npu_sim/boards/*.toml``, docs/BOARDS.md.
"""
from __future__ import annotations

from npu_sim.analysis.cost.layer import (LayerCost, block_geometry, cpu_layer_cost, layer_cost, mac_block_cycles,
                                         tensor_bits, tensor_bytes)
from npu_sim.analysis.cost.network import Estimate, estimate_program

__all__ = ["LayerCost", "Estimate", "layer_cost", "cpu_layer_cost", "mac_block_cycles", "estimate_program",
           "block_geometry", "tensor_bits", "tensor_bytes"]
