"""Latency estimate: the board's ``[cost]`` section and the per-op cost model behind ``npu-sim estimate``.

The model is an analytical one in the style of Arm's Vela (the estimator of the Ethos-U compiler): every op is
costed on its own from the integer program (shapes and dtypes), and the network total is the sum of the ops.
All formulas are below, beside the code that evaluates them; every number comes from the board file.

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
  - depthwise: ``max(weight_step_cycles, ublock_step_cycles*nU_hw*f16) * ceil(KH*KW/depthwise_kernel_step) * nU_c``;
  - pooling: ``max(pool_min_kernel, KH*KW) * nU * pool_ublock_cycles * f16``;
* **Output (AO) cycles per block:** ``ceil(cpe * block elements)``, ``cpe`` = the largest of the op class's
  and the fused activation's cycles per element (``[cost.output_cycles_per_element]``).
* **Compute:** the MAC and output stages overlap across blocks: ``max(mac*blocks, cpe*outputs) +
  min(mac, ao)`` (the slower stage streams, the faster one is paid for one block). Elementwise, LUT, resize, normalization ops:
  ``ceil(cpe * output elements)`` (normalizations: ``cpe * input elements``, they make several passes).
* **Memory:** bytes moved per memory: IFM re-reads (the IFM block, halo included, with the full input depth,
  once per output block; depthwise and pooling once per spatial block), weights once per spatial output
  block, ``scale_bytes_per_channel`` per output channel per spatial block, OFM writes scaled by the burst
  efficiency (a write burst holds ``min(ofm_block C, write_burst_elements)`` elements, times the block width
  with ``brick_layout`` (channels stored in 16-deep bricks), unless rows are contiguous), LUT loads. ``memory cycles = bytes / bytes_per_cycle`` per memory; the op's memory cycles are
  the largest over memories (they work in parallel).
* **Layer:** ``max(compute, memory) + exposed + op_overhead_cycles`` where ``exposed`` = the first IFM
  block's read and the last OFM block's write (latency + transfer; nothing overlaps them) + the LUT load
  (``lut_bytes / lut.load_bytes_per_cycle``) for lookup-table ops.
* **SRAM spill:** when IFM + OFM (+ weights, if they live in the same memory) exceed ``size_bytes`` of the
  feature-map memory, the feature maps are placed in ``spill_memory`` and their bytes are counted there;
  the row says ``spill``.
* **Movement ops** (Reshape, Transpose, Pad, ...) cost ``movement_cycles_per_element`` per output element and
  their reads and writes; with 0 (the Ethos-U preset) they are free: a view, or folded into the neighbouring
  op's addressing, as Vela does with reshapes and explicit pads.
* **CPU fallback** (``npu_sim.checks.placement`` says CPU): ``MACs / cpu.macs_per_cycle + elements /
  cpu.elements_per_cycle`` in NPU-clock cycles, plus a transfer for every tensor crossing the NPU/CPU boundary
  (``cpu.transfer_latency_cycles + bytes / cpu.transfer_bytes_per_cycle``), reported in their own columns.
* **Network:** the sum of the layers. Latency = cycles / ``clock_hz``.

Presets: ``ethos-u55-128`` (Vela's Ethos-U55-128, High_End_Embedded system config, Sram_Only memory mode) and
``default`` (our accelerator). See the comments in ``npu_sim/boards/*.toml`` for every key.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import BoardError

CLI_DESCRIPTION = """\
Estimate the latency of a QDQ model on the board's accelerator, layer by layer (board section [cost]).

Columns: node, op, prec (activation x weight bits), MACs, bytes read+written per memory, compute cycles
(MAC array / output pipeline with tiling), memory cycles (bytes / bandwidth, largest memory), cycles =
max(compute, memory) + exposed transfers + per-op overhead, bound (compute / memory name / cpu), util
(MACs / (cycles * MACs per cycle)), % of the network total. CPU-fallback nodes are costed separately,
with their NPU<->CPU transfers. The summary gives total cycles, latency at the board clock, FPS,
NPU/CPU share and the hotspots. The formulas are documented in npu_sim/cost.py.
"""

# ----------------------------------------------------------------------------------------------------------------
# the [cost] section
# ----------------------------------------------------------------------------------------------------------------
OUTPUT_CLASSES = ("mac", "mac_wide", "add", "mul", "maxpool", "pool", "lut", "relu", "elementwise",
                  "requantize", "resize", "normalization")


@dataclass(frozen=True)
class Memory:
    name: str
    bytes_per_cycle: float          # sustained bandwidth, bytes per NPU cycle
    read_latency: int = 0           # cycles
    write_latency: int = 0
    burst_bytes: int = 32           # longest burst; shorter bursts waste bandwidth
    size_bytes: int = 0             # 0 = no limit


@dataclass(frozen=True)
class Cpu:
    macs_per_cycle: float = 1.0         # per NPU clock cycle
    elements_per_cycle: float = 1.0
    transfer_latency_cycles: int = 0    # per tensor crossing NPU<->CPU
    transfer_bytes_per_cycle: float = 8.0


@dataclass(frozen=True)
class CostConfig:
    clock_hz: float
    ublock: tuple[int, int, int]
    ofm_block: tuple[int, int, int]
    ifm_depth_block: int
    int16_factor: int
    ublock_step_cycles: int
    weight_step_cycles: int
    depthwise_kernel_step: int
    part_kernel_step: int
    brick_layout: bool
    pool_min_kernel: int
    pool_ublock_cycles: float
    scale_bytes_per_channel: int
    write_burst_elements: int
    op_overhead_cycles: int
    movement_cycles_per_element: float
    feature_map_memory: str
    weight_memory: str
    spill_memory: str
    lut_bytes_8: int
    lut_bytes_16: int
    lut_load_bytes_per_cycle: float
    output_cycles_per_element: dict
    memories: dict
    cpu: Cpu
    source: str = ""

    @property
    def macs_per_cycle(self) -> int:
        """Peak: micro-block outputs x input channels per cycle (ifm_depth_block / ublock_step_cycles)."""
        h, w, c = self.ublock
        return h * w * c * self.ifm_depth_block // self.ublock_step_cycles


_SCALARS = {  # key: (type, minimum, required)
    "clock_hz": (float, 1.0, True),
    "ifm_depth_block": (int, 1, True),
    "int16_factor": (int, 1, True),
    "ublock_step_cycles": (int, 1, True),
    "weight_step_cycles": (int, 0, True),
    "depthwise_kernel_step": (int, 1, True),
    "part_kernel_step": (int, 0, False),
    "pool_min_kernel": (int, 1, False),
    "pool_ublock_cycles": (float, 0.0, False),
    "scale_bytes_per_channel": (int, 0, False),
    "write_burst_elements": (int, 1, False),
    "op_overhead_cycles": (int, 0, False),
    "movement_cycles_per_element": (float, 0.0, False),
}
_DEFAULTS = {"part_kernel_step": 0, "brick_layout": False, "pool_min_kernel": 4, "pool_ublock_cycles": 4.0, "scale_bytes_per_channel": 0,
             "write_burst_elements": 16, "op_overhead_cycles": 0, "movement_cycles_per_element": 0.0}
_TOP = set(_SCALARS) | {"brick_layout", "ublock", "ofm_block", "feature_map_memory", "weight_memory", "spill_memory", "lut",
                        "output_cycles_per_element", "memory", "cpu"}


def _num(value, typ, lo, where: str, path) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and typ is int and float(value) != int(value):
        ok = False
    if not ok or value < lo:
        kind = "an integer" if typ is int else "a number"
        raise BoardError(f"board file {path}: {where} = {value!r}; must be {kind} >= {lo}")
    return typ(value)


def _table(section, key, path) -> dict:
    value = section.get(key, {})
    if not isinstance(value, dict):
        raise BoardError(f"board file {path}: cost.{key} must be a table")
    return value


def _known(table: dict, known, prefix: str, path) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise BoardError(f"board file {path}: unknown key {prefix}{unknown[0]} (known: {', '.join(sorted(known))})")


def parse_cost(section: dict, path) -> CostConfig | None:
    """Validate the board's ``[cost]`` table; None when the board has none (``estimate`` then refuses)."""
    if not section:
        return None
    _known(section, _TOP, "cost.", path)
    missing = [k for k, (_, _, req) in _SCALARS.items() if req and k not in section]
    missing += [k for k in ("ublock", "ofm_block", "memory") if k not in section]
    if missing:
        raise BoardError(f"board file {path}: [cost] lacks cost.{missing[0]} (see npu_sim/boards/default.toml)")
    vals: dict[str, Any] = dict(_DEFAULTS)
    for key, (typ, lo, _) in _SCALARS.items():
        if key in section:
            vals[key] = _num(section[key], typ, lo, f"cost.{key}", path)
    if "brick_layout" in section:
        if not isinstance(section["brick_layout"], bool):
            raise BoardError(f"board file {path}: cost.brick_layout = {section['brick_layout']!r}; must be true or false")
        vals["brick_layout"] = section["brick_layout"]
    for key in ("ublock", "ofm_block"):
        v = section[key]
        if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                           and x >= 1 for x in v)):
            raise BoardError(f"board file {path}: cost.{key} = {v!r}; must be [H, W, C], positive integers")
        vals[key] = tuple(v)
    if vals["ifm_depth_block"] % vals["int16_factor"]:
        raise BoardError(f"board file {path}: cost.ifm_depth_block = {vals['ifm_depth_block']} must be a multiple "
                         f"of cost.int16_factor = {vals['int16_factor']}")
    mem_section = _table(section, "memory", path)
    if not mem_section:
        raise BoardError(f"board file {path}: cost.memory must name at least one memory, e.g. [cost.memory.sram]")
    memories = {}
    for name, m in mem_section.items():
        if not isinstance(m, dict):
            raise BoardError(f"board file {path}: cost.memory.{name} must be a table")
        _known(m, ("bytes_per_cycle", "read_latency", "write_latency", "burst_bytes", "size_bytes"),
               f"cost.memory.{name}.", path)
        if "bytes_per_cycle" not in m:
            raise BoardError(f"board file {path}: cost.memory.{name} lacks bytes_per_cycle")
        bpc = _num(m["bytes_per_cycle"], float, 0.0, f"cost.memory.{name}.bytes_per_cycle", path)
        if bpc <= 0:
            raise BoardError(f"board file {path}: cost.memory.{name}.bytes_per_cycle must be > 0")
        memories[name] = Memory(name, bpc, *(_num(m.get(k, d), int, lo, f"cost.memory.{name}.{k}", path)
                                             for k, d, lo in (("read_latency", 0, 0), ("write_latency", 0, 0),
                                                              ("burst_bytes", 32, 1), ("size_bytes", 0, 0))))
    for key in ("feature_map_memory", "weight_memory", "spill_memory"):
        name = section.get(key, next(iter(memories)))
        if name not in memories:
            raise BoardError(f"board file {path}: cost.{key} = {name!r}; not one of the memories "
                             f"({', '.join(memories)})")
        vals[key] = name
    lut = _table(section, "lut", path)
    _known(lut, ("bytes_8", "bytes_16", "load_bytes_per_cycle"), "cost.lut.", path)
    vals["lut_bytes_8"] = _num(lut.get("bytes_8", 256), int, 0, "cost.lut.bytes_8", path)
    vals["lut_bytes_16"] = _num(lut.get("bytes_16", 2048), int, 0, "cost.lut.bytes_16", path)
    vals["lut_load_bytes_per_cycle"] = _num(lut.get("load_bytes_per_cycle", 1.0), float, 0.0,
                                            "cost.lut.load_bytes_per_cycle", path)
    if vals["lut_load_bytes_per_cycle"] <= 0:
        raise BoardError(f"board file {path}: cost.lut.load_bytes_per_cycle must be > 0")
    ao = _table(section, "output_cycles_per_element", path)
    _known(ao, OUTPUT_CLASSES, "cost.output_cycles_per_element.", path)
    missing = [k for k in OUTPUT_CLASSES if k not in ao]
    if missing:
        raise BoardError(f"board file {path}: cost.output_cycles_per_element lacks {missing[0]} "
                         f"(needs {', '.join(OUTPUT_CLASSES)})")
    vals["output_cycles_per_element"] = {k: _num(v, float, 0.0, f"cost.output_cycles_per_element.{k}", path)
                                         for k, v in ao.items()}
    cpu = _table(section, "cpu", path)
    _known(cpu, ("macs_per_cycle", "elements_per_cycle", "transfer_latency_cycles", "transfer_bytes_per_cycle"),
           "cost.cpu.", path)
    cpu_vals = {}
    for k, typ in (("macs_per_cycle", float), ("elements_per_cycle", float), ("transfer_latency_cycles", int),
                   ("transfer_bytes_per_cycle", float)):
        if k in cpu:
            cpu_vals[k] = _num(cpu[k], typ, 0, f"cost.cpu.{k}", path)
            if typ is float and cpu_vals[k] <= 0:
                raise BoardError(f"board file {path}: cost.cpu.{k} must be > 0")
    return CostConfig(memories=memories, cpu=Cpu(**cpu_vals), source=str(path), **vals)


# ----------------------------------------------------------------------------------------------------------------
# per-op cost
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class LayerCost:
    node: str
    op: str
    op_class: str                  # conv, depthwise, fc, matmul, add, mul, pool, lut, movement, ...
    precision: str                 # e.g. "a8w8", "a16w8", "a8"
    target: str                    # "NPU" or "CPU"
    macs: int
    bytes: dict                    # memory name -> bytes read + written (NPU) ; "cpu_transfer" for CPU nodes
    compute_cycles: float
    memory_cycles: float
    exposed_cycles: float          # transfers nothing overlaps (first/last block, LUT load, CPU transfers)
    cycles: float
    bound: str                     # "compute", a memory name, "cpu", "free"
    utilization: float             # MACs / (cycles * peak MACs per cycle), percent
    share: float = 0.0             # percent of the network total
    spill: bool = False


def _bytes_of(t) -> int:
    n = math.prod(t.shape) if t.shape else 1
    bits = t.q.bits if t.q is not None else (t.data.dtype.itemsize * 8 if t.data is not None else 32)
    return (n * bits + 7) // 8


def _elems(t) -> int:
    return math.prod(t.shape) if t.shape else 1


def _bits(t) -> int:
    return t.q.bits if t.q is not None else 32


def _nhwc(shape) -> tuple[int, int, int]:
    """(H, W, C) of an N-C-spatial tensor (batch folded into H); rank 2 is (rows=1, W=M, C=features)."""
    s = list(shape)
    if len(s) >= 4:
        return s[0] * math.prod(s[2:-1]), s[-1], s[1]
    if len(s) == 3:
        return s[0], s[2], s[1]
    if len(s) == 2:
        return 1, s[0], s[1]
    return 1, 1, max(1, math.prod(s))


def _cdiv(a, b) -> int:
    return -(-int(a) // int(b))


def _blocks(cfg: CostConfig, oh: int, ow: int, oc: int):
    """Block geometry: (block h, w, c clipped to the output, micro-blocks per block (h, w, c), blocks)."""
    bh, bw, bc = min(cfg.ofm_block[0], oh), min(cfg.ofm_block[1], ow), min(cfg.ofm_block[2], oc)
    uh, uw, uc = cfg.ublock
    nu = (_cdiv(bh, uh), _cdiv(bw, uw), _cdiv(bc, uc))
    total_u = _cdiv(oh, uh) * _cdiv(ow, uw) * _cdiv(oc, uc)
    return (bh, bw, bc), nu, total_u / (nu[0] * nu[1] * nu[2])


def mac_block_cycles(cfg: CostConfig, kind: str, nu, kernel_elems: int, cin: int, wide: bool) -> int:
    """MAC-array cycles of one output block (see the module docstring)."""
    f16 = cfg.int16_factor if wide else 1
    nu_hw, nu_c = nu[0] * nu[1], nu[2]
    if kind == "depthwise":
        steps = _cdiv(kernel_elems, cfg.depthwise_kernel_step)
        return max(cfg.weight_step_cycles, cfg.ublock_step_cycles * nu_hw * f16) * steps * nu_c
    if kind == "pool":
        return int(max(cfg.pool_min_kernel, kernel_elems) * nu_hw * nu_c * cfg.pool_ublock_cycles * f16)
    step = max(cfg.weight_step_cycles, cfg.ublock_step_cycles * nu_hw)
    passes = _cdiv(cin, cfg.ifm_depth_block // f16)
    depth_first = step * kernel_elems * nu_c * passes
    if not cfg.part_kernel_step:
        return depth_first
    # part-kernel-first: several kernel elements share one pass, channels go dot_width at a time (small Cin)
    pk_steps = _cdiv(kernel_elems, max(cfg.part_kernel_step // f16, 1))
    dot = cfg.ifm_depth_block // cfg.ublock_step_cycles
    part_kernel = step * pk_steps * nu_c * _cdiv(cin, dot)
    return min(depth_first, part_kernel)


def _write_efficiency(cfg: CostConfig, mem: Memory, ow: int, oc: int, bc: int, bw: int, nbytes: int) -> float:
    if oc <= bc:                      # whole rows are contiguous
        per_burst = ow * oc * nbytes
    elif cfg.brick_layout:            # a block row of 16-channel bricks is contiguous
        per_burst = min(bc, cfg.write_burst_elements) * bw * nbytes
    else:                             # NHWC: one pixel's block depth at a time
        per_burst = min(bc, cfg.write_burst_elements) * nbytes
    return min(1.0, per_burst / mem.burst_bytes)


def _read_efficiency(cfg: CostConfig, mem: Memory, iw: int, ic: int, depth: int, nbytes: int) -> float:
    per_burst = (iw * ic if ic <= depth else depth) * nbytes
    return min(1.0, per_burst / mem.burst_bytes)


def _ao_cpe(cfg: CostConfig, cls: str, fused_act: str | None) -> float:
    t = cfg.output_cycles_per_element
    return max(t[cls], t[fused_act] if fused_act else 0.0)


def _class(program, node, consts) -> str:
    from .ops import OPS
    op = node.op
    if op == "Conv":
        w = consts[0]
        groups = int(node.params.get("groups", 1))
        cin = _nhwc(program.tensors[node.inputs[0]].shape)[2]
        return "depthwise" if groups > 1 and groups == cin and w.shape[1] == 1 else "conv"
    if op == "ConvTranspose":
        return "conv"
    if op in ("Gemm", "MatMul"):
        return "fc" if consts else "matmul"
    if op in ("Add", "Sub"):
        return "add"
    if op in ("Mul", "Div"):
        return "mul"
    if op in ("Quantize", "Requantize"):
        return "requantize"
    info = OPS.get(op)
    kind = info.kind if info else "elementwise"
    if kind == "activation":
        return "activation"
    return {"pool": "pool", "lut": "lut", "movement": "movement", "resize": "resize",
            "normalization": "normalization"}.get(kind, "elementwise")


def layer_cost(cfg: CostConfig, program, node) -> LayerCost:
    """Cost of one node running on the NPU, from the board's cost section and the node's tensors."""
    tensors = program.tensors
    acts = [tensors[i] for i in node.inputs if not tensors[i].is_const]
    consts = [tensors[i] for i in node.inputs if tensors[i].is_const]
    out = tensors[node.outputs[0]]
    cls = _class(program, node, consts)
    x = acts[0] if acts else out
    xbits = max((_bits(t) for t in acts), default=8)
    wbits = _bits(consts[0]) if consts and cls in ("conv", "depthwise", "fc") else None
    obits = _bits(out)
    wide = xbits > 8 or (wbits or 0) > 8
    precision = f"a{xbits}" + (f"w{wbits}" if wbits else "")
    fm = cfg.memories[cfg.feature_map_memory]
    out_elems = sum(_elems(tensors[o]) for o in node.outputs)
    fused = None
    if node.params.get("qmin") is not None and node.params.get("qmax") is not None and out.q is not None \
            and (node.params["qmin"] > out.q.qmin or node.params["qmax"] < out.q.qmax):
        fused = "relu"
    macs = 0
    compute = 0.0
    exposed = 0.0
    rd: dict[str, float] = {}   # memory role -> bytes
    in_bytes = sum(_bytes_of(t) for t in acts)
    out_bytes = sum(_bytes_of(tensors[o]) for o in node.outputs)
    w_bytes = sum(_bytes_of(t) for t in consts)
    ifm_block_bytes = ofm_block_bytes = 0.0
    oh, ow, oc = _nhwc(out.shape)
    if cls in ("conv", "depthwise", "fc", "matmul") or (cls == "pool" and node.op != "ReduceMean"):
        ih, iw, ic = _nhwc(x.shape)
        if cls in ("conv", "depthwise"):
            kh, kw = node.attrs.get("kernel", (1, 1))
            sh, sw = node.attrs.get("stride", (1, 1))
            dh, dw = node.attrs.get("dilation", (1, 1))
            groups = int(node.params.get("groups", 1))
        elif cls == "pool":
            if node.params.get("global") is not False and node.op in ("GlobalAveragePool", "GlobalMaxPool") \
                    or node.params.get("global"):
                kh, kw, sh, sw, dh, dw = ih, iw, 1, 1, 1, 1
            elif "kernel" in node.params:
                kh, kw = node.params["kernel"]
                sh, sw = node.params.get("stride", (1, 1))
                dh, dw = node.params.get("dilation", (1, 1))
            else:
                kh, kw, sh, sw, dh, dw = ih, iw, 1, 1, 1, 1
            groups = ic
        else:  # Gemm / MatMul: rows of A are output pixels, K = input depth
            kh = kw = sh = sw = dh = dw = 1
            groups = 1
            a_shape = x.shape
            k_dim = a_shape[-1] if not (node.op == "Gemm" and node.params.get("trans_a")) else a_shape[0]
            oh, ow, oc = 1, _elems(out) // out.shape[-1], out.shape[-1]
            ih, iw, ic = 1, ow, k_dim
        transposed = node.op == "ConvTranspose"
        kelems = kh * kw
        if transposed:  # each output sees ceil(k/s) taps per dimension
            kelems = _cdiv(kh, sh) * _cdiv(kw, sw)
            sh = sw = 1
        cin_g = ic // max(groups, 1)
        kind = cls if cls in ("depthwise", "pool") else "conv"
        dense_groups = groups if kind == "conv" and groups > 1 else 1
        oc_g = oc // dense_groups
        (bh, bw, bc), nu, nblocks = _blocks(cfg, oh, ow, oc_g)
        mac_blk = mac_block_cycles(cfg, kind, nu, kelems, cin_g, wide)
        ao_cls = "maxpool" if node.op in ("MaxPool", "GlobalMaxPool") else (
            "pool" if cls == "pool" else ("mac_wide" if wide else "mac"))
        cpe = _ao_cpe(cfg, ao_cls, fused)
        ao_blk = math.ceil(cpe * bh * bw * bc)
        ao_total = math.ceil(cpe * oh * ow * oc_g)
        compute = (max(mac_blk * nblocks, ao_total) + min(mac_blk, ao_blk)) * dense_groups
        if cls == "pool":
            macs = 0
        elif transposed:
            macs = _elems(x) * (oc // groups) * kh * kw
        elif cls in ("fc", "matmul"):
            macs = _elems(out) * ic
        else:
            macs = _elems(out) * cin_g * kh * kw
        # memory: IFM block with halo, full input depth (per group), once per output block
        spatial_blocks = _cdiv(oh, bh) * _cdiv(ow, bw)
        depth_blocks = 1 if kind in ("depthwise", "pool") else _cdiv(oc_g, bc) * dense_groups
        ibh = min(ih, (bh - 1) * sh + (kh - 1) * dh + 1) if not transposed else min(ih, bh)
        ibw = min(iw, (bw - 1) * sw + (kw - 1) * dw + 1) if not transposed else min(iw, bw)
        xbytes = xbits / 8
        depth_pass = cfg.ifm_depth_block // (cfg.int16_factor if wide else 1)
        ifm_read = ibh * ibw * (ic if kind != "conv" else cin_g) * xbytes * spatial_blocks * depth_blocks
        ifm_read /= _read_efficiency(cfg, fm, iw, ic, depth_pass, xbytes)
        if cls == "matmul":  # the second operand is streamed like weights
            rd["ifm"] = ifm_read + sum(_bytes_of(t) for t in acts[1:]) * spatial_blocks
        else:
            rd["ifm"] = ifm_read
        if cls in ("conv", "depthwise", "fc"):
            rd["weights"] = (w_bytes + cfg.scale_bytes_per_channel * oc) * spatial_blocks
        rd["ofm"] = out_bytes / _write_efficiency(cfg, fm, ow, oc, bc, bw, obits / 8)
        ifm_block_bytes = ibh * ibw * min(ic, depth_pass) * xbytes
        ofm_block_bytes = bh * bw * bc * obits / 8 / _write_efficiency(cfg, fm, ow, oc, bc, bw, obits / 8)
    elif cls == "movement":
        if cfg.movement_cycles_per_element > 0:
            compute = math.ceil(cfg.movement_cycles_per_element * out_elems)
            rd["ifm"], rd["ofm"] = in_bytes, out_bytes
    else:
        ao_cls = {"add": "add", "mul": "mul", "lut": "lut", "requantize": "requantize", "resize": "resize",
                  "normalization": "normalization", "activation": "relu", "pool": "pool"}.get(cls, "elementwise")
        elems = out_elems if cls not in ("normalization", "pool") else max(_elems(t) for t in acts)
        compute = math.ceil(_ao_cpe(cfg, ao_cls, fused) * elems)
        rd["ifm"] = in_bytes
        rd["ofm"] = out_bytes
        if consts:
            rd["weights"] = w_bytes
        if cls == "lut":
            lut = cfg.lut_bytes_16 if xbits > 8 else cfg.lut_bytes_8
            rd["lut"] = lut
            exposed += lut / cfg.lut_load_bytes_per_cycle
        ifm_block_bytes = min(in_bytes, math.prod(cfg.ofm_block) * xbits / 8)
        ofm_block_bytes = min(out_bytes, math.prod(cfg.ofm_block) * obits / 8)
    # placement in memories: feature maps in the feature-map memory unless the working set does not fit
    spill = False
    fm_name, w_name = cfg.feature_map_memory, cfg.weight_memory
    working = in_bytes + out_bytes + (w_bytes if w_name == fm_name else 0)
    if cls != "movement" and fm.size_bytes and working > fm.size_bytes:
        spill = True
        fm_name = cfg.spill_memory
    per_mem: dict[str, float] = {}
    for role, b in rd.items():
        name = w_name if role == "weights" else fm_name
        per_mem[name] = per_mem.get(name, 0.0) + b
    mem_cycles = max((b / cfg.memories[m].bytes_per_cycle for m, b in per_mem.items()), default=0.0)
    if compute or per_mem:
        src = cfg.memories[fm_name]
        exposed += (src.read_latency + math.floor(ifm_block_bytes / src.bytes_per_cycle)
                    + src.write_latency + math.floor(ofm_block_bytes / src.bytes_per_cycle))
        exposed += cfg.op_overhead_cycles
    cycles = max(compute, mem_cycles) + exposed
    if cycles == 0:
        bound = "free"
    elif compute >= mem_cycles:
        bound = "compute"
    else:
        bound = max(per_mem, key=lambda m: per_mem[m] / cfg.memories[m].bytes_per_cycle)
    util = 100.0 * macs / (cycles * cfg.macs_per_cycle) if cycles and macs else 0.0
    return LayerCost(node.name, node.op, cls, precision, "NPU", int(macs),
                     {m: int(round(b)) for m, b in per_mem.items()}, float(compute), float(mem_cycles),
                     float(exposed), float(cycles), bound, util, spill=spill)


def cpu_layer_cost(cfg: CostConfig, program, node, crossing_bytes: list[int]) -> LayerCost:
    """A CPU-fallback node: its work at the CPU's throughput, plus one transfer per tensor crossing NPU<->CPU."""
    npu = layer_cost(cfg, program, node)
    elems = sum(_elems(program.tensors[o]) for o in node.outputs)
    compute = npu.macs / cfg.cpu.macs_per_cycle + elems / cfg.cpu.elements_per_cycle
    transfer = sum(cfg.cpu.transfer_latency_cycles + b / cfg.cpu.transfer_bytes_per_cycle for b in crossing_bytes)
    cycles = compute + transfer
    return LayerCost(node.name, node.op, npu.op_class, npu.precision, "CPU", npu.macs,
                     {"cpu_transfer": int(sum(crossing_bytes))} if crossing_bytes else {}, float(compute), 0.0,
                     float(transfer), float(cycles), "cpu", 0.0)


# ----------------------------------------------------------------------------------------------------------------
# the network estimate
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class Estimate:
    model: str
    board: str
    clock_hz: float
    macs_per_cycle: int
    layers: list[LayerCost]
    summary: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"model": self.model, "board": self.board, "clock_hz": self.clock_hz,
                "macs_per_cycle": self.macs_per_cycle, "summary": self.summary,
                "layers": [asdict(r) for r in self.layers]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def memories(self) -> list[str]:
        names: list[str] = []
        for r in self.layers:
            for m in r.bytes:
                if m not in names:
                    names.append(m)
        return names

    def to_csv(self) -> str:
        mems = self.memories()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["node", "op", "op_class", "precision", "target", "macs", *[f"bytes_{m}" for m in mems],
                    "compute_cycles", "memory_cycles", "exposed_cycles", "cycles", "bound", "utilization_pct",
                    "share_pct", "spill"])
        for r in self.layers:
            w.writerow([r.node, r.op, r.op_class, r.precision, r.target, r.macs, *[r.bytes.get(m, 0) for m in mems],
                        f"{r.compute_cycles:.0f}", f"{r.memory_cycles:.0f}", f"{r.exposed_cycles:.0f}",
                        f"{r.cycles:.0f}", r.bound, f"{r.utilization:.2f}", f"{r.share:.2f}", int(r.spill)])
        return buf.getvalue()


def _crossings(program, placement: dict) -> dict[str, list[int]]:
    """CPU node -> bytes of each tensor it exchanges with an NPU node (or with the graph input/output)."""
    producer = {o: n for n in program.nodes for o in n.outputs}
    consumers: dict[str, list] = {}
    for n in program.nodes:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    out: dict[str, list[int]] = {}
    for n in program.nodes:
        if placement.get(n.name) != "CPU":
            continue
        b = []
        for i in n.inputs:
            t = program.tensors[i]
            p = producer.get(i)
            if not t.is_const and p is not None and placement.get(p.name) != "CPU":
                b.append(_bytes_of(t))
        for o in n.outputs:
            if any(placement.get(c.name) != "CPU" for c in consumers.get(o, [])):
                b.append(_bytes_of(program.tensors[o]))
        out[n.name] = b
    return out


def _is_host_input_quantize(program, node) -> bool:
    """The Quantize of a float graph input: the host hands the board integers (as Vela's int8 input)."""
    return node.op == "Quantize" and program.tensors[node.inputs[0]].q is None


def estimate_program(program, board=None) -> Estimate:
    from . import checks
    board = board or program.board
    cfg = board.cost
    if cfg is None:
        raise BoardError(f"board {board.name!r} ({board.source or 'preset'}) has no [cost] section, so it has no "
                         f"latency model: use --board ethos-u55-128 or default, or add a [cost] section")
    placement = checks.placement(program)
    crossings = _crossings(program, placement)
    rows: list[LayerCost] = []
    for node in program.nodes:
        if _is_host_input_quantize(program, node):
            t = program.tensors[node.outputs[0]]
            rows.append(LayerCost(node.name, node.op, "input", f"a{_bits(t)}", "host", 0, {}, 0.0, 0.0, 0.0, 0.0,
                                  "free", 0.0))
        elif placement.get(node.name) == "CPU":
            rows.append(cpu_layer_cost(cfg, program, node, crossings.get(node.name, [])))
        else:
            rows.append(layer_cost(cfg, program, node))
    total = sum(r.cycles for r in rows)
    for r in rows:
        r.share = 100.0 * r.cycles / total if total else 0.0
    npu = sum(r.cycles for r in rows if r.target == "NPU")
    cpu = sum(r.cycles for r in rows if r.target == "CPU")
    macs = sum(r.macs for r in rows)
    latency_s = total / cfg.clock_hz
    by_class: dict[str, float] = {}
    for r in rows:
        by_class[r.op_class] = by_class.get(r.op_class, 0.0) + r.cycles
    hot = sorted(rows, key=lambda r: -r.cycles)[:5]
    summary = {
        "total_cycles": total, "npu_cycles": npu, "cpu_cycles": cpu,
        "npu_share_pct": 100.0 * npu / total if total else 0.0, "cpu_share_pct": 100.0 * cpu / total if total else 0.0,
        "total_macs": macs, "latency_ms": latency_s * 1e3, "fps": 1.0 / latency_s if latency_s else math.inf,
        "utilization_pct": 100.0 * macs / (total * cfg.macs_per_cycle) if total else 0.0,
        "npu_nodes": sum(r.target == "NPU" for r in rows), "cpu_nodes": sum(r.target == "CPU" for r in rows),
        "spilled_nodes": [r.node for r in rows if r.spill],
        "bytes": {m: sum(r.bytes.get(m, 0) for r in rows) for m in {m for r in rows for m in r.bytes}},
        "cycles_by_class": dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
        "hotspots": [{"node": r.node, "op": r.op, "cycles": r.cycles, "share_pct": r.share} for r in hot],
        # ONNX nodes npu-sim could not lower at all (unknown ops, float islands): not in the total
        "uncosted_nodes": [{"node": n, "op": op, "reason": why} for n, op, why in program.problems],
    }
    return Estimate(program.model_path, board.name, cfg.clock_hz, cfg.macs_per_cycle, rows, summary)


def estimate(model, board=None, input_shapes=None) -> Estimate:
    """Latency estimate of a QDQ model (path, or a ``Simulator``) on a board (preset name, .toml path, Board).

    ``board`` defaults to the simulator's board (for a path: ``default``). Returns an ``Estimate``: per-layer
    ``layers`` rows and a ``summary``; ``.to_json()`` / ``.to_csv()`` serialize it."""
    from .board import load_board
    from .lowering import lower_for_analysis
    from .simulator import Simulator
    if isinstance(model, Simulator):
        program = model.program
        brd = load_board(board) if board is not None else program.board
        if brd != program.board:  # placement follows the board's rules: lower the model for that board
            shapes = {n: program.tensors[t].shape for n, t in program.inputs.items()}
            program = lower_for_analysis(program.model_path, brd, shapes)
    else:
        brd = load_board(board if board is not None else "default")
        if brd.cost is None:  # refuse before the (slower) load
            raise BoardError(f"board {brd.name!r} ({brd.source}) has no [cost] section, so it has no latency model: "
                             f"use --board ethos-u55-128 or default, or add a [cost] section")
        program = lower_for_analysis(str(model), brd, input_shapes or {})
    return estimate_program(program, brd)


# ----------------------------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------------------------
def add_cli_arguments(parser) -> None:
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print the estimate as JSON (layers + summary)")
    g.add_argument("--csv", action="store_true", help="print the per-layer rows as CSV")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="hotspots listed in the summary (default 5)")


def _fmt_int(v: float) -> str:
    v = float(v)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= 10 * div:
            return f"{v / div:.1f}{unit}" if abs(v) < 100 * div else f"{v / div:.0f}{unit}"
    return f"{v:.0f}"


def format_table(est: Estimate, top: int = 5) -> str:
    mems = est.memories()
    head = (f"{'node':32s} {'op':10s} {'prec':6s} {'MACs':>7s} " + " ".join(f"{('B ' + m)[:8]:>8s}" for m in mems)
            + f" {'compute':>8s} {'memory':>8s} {'cycles':>8s} {'bound':8s} {'util%':>5s} {'%tot':>5s}")
    lines = [f"# {est.model} on board '{est.board}' ({est.macs_per_cycle} MACs/cycle at "
             f"{est.clock_hz / 1e6:g} MHz)", head, "-" * len(head)]
    for r in est.layers:
        name = r.node if len(r.node) <= 32 else "…" + r.node[-31:]
        bound = r.bound + ("*" if r.spill else "")
        lines.append(f"{name:32s} {r.op[:10]:10s} {r.precision[:6]:6s} {_fmt_int(r.macs):>7s} "
                     + " ".join(f"{_fmt_int(r.bytes.get(m, 0)):>8s}" for m in mems)
                     + f" {_fmt_int(r.compute_cycles):>8s} {_fmt_int(r.memory_cycles):>8s} {_fmt_int(r.cycles):>8s}"
                     f" {bound[:8]:8s} {r.utilization:5.1f} {r.share:5.1f}")
    s = est.summary
    lines.append("-" * len(head))
    lines.append(f"total: {s['total_cycles']:,.0f} cycles = {s['latency_ms']:.3f} ms at {est.clock_hz / 1e6:g} MHz "
                 f"({s['fps']:.1f} FPS); {s['total_macs']:,} MACs, MAC utilization {s['utilization_pct']:.1f}%")
    lines.append(f"NPU {s['npu_share_pct']:.1f}% ({s['npu_nodes']} nodes), CPU fallback {s['cpu_share_pct']:.1f}% "
                 f"({s['cpu_nodes']} nodes)" + (f"; feature maps too large for on-chip memory (bound marked *): "
                                                f"{', '.join(s['spilled_nodes'][:3])}"
                                                f"{' ...' if len(s['spilled_nodes']) > 3 else ''}"
                                                if s["spilled_nodes"] else ""))
    lines.append("by class: " + ", ".join(f"{k} {100 * v / s['total_cycles']:.1f}%"
                                          for k, v in s["cycles_by_class"].items() if v) if s["total_cycles"] else
                 "by class: -")
    hot = sorted(est.layers, key=lambda r: -r.cycles)[:max(top, 0)]
    if hot:
        lines.append("hotspots:")
        lines += [f"  {r.share:5.1f}%  {r.cycles:>12,.0f} cycles  {r.node[:80]} ({r.op}, {r.bound})" for r in hot if r.cycles]
    missing = est.summary.get("uncosted_nodes") or []
    if missing:
        lines.append(f"not costed ({len(missing)} node(s) npu-sim cannot lower; see `npu-sim check`): "
                     + ", ".join(f"{m['node']} ({m['op']})" for m in missing[:8]) + (" ..." if len(missing) > 8 else ""))
    return "\n".join(lines)


def cli_main(args, shapes) -> int:
    est = estimate(args.model, board=args.board, input_shapes=shapes)
    if args.json:
        print(est.to_json())
    elif args.csv:
        print(est.to_csv(), end="")
    else:
        print(format_table(est, args.top))
    return 0


__all__ = ["CostConfig", "Memory", "Cpu", "LayerCost", "Estimate", "parse_cost", "layer_cost", "cpu_layer_cost",
           "mac_block_cycles", "estimate_program", "estimate", "format_table"]
