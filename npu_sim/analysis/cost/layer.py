"""The per-op cost model: cycles, bytes and the bound of one node, on the NPU or as a CPU fallback.

The formulas are in the package docstring (``npu_sim.analysis.cost``); the code below evaluates them. A node is
costed in three steps: its operands (``_operands``: tensors, bit widths, fused activation, op class), its work
by op class (``_block_cost`` for the block-computed MAC and window ops, ``_movement_cost``, ``_stream_cost`` for
elementwise, LUT, resize and normalization ops), then its placement in memories and the total (``_placed``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from npu_sim.boards.cost_config import CostConfig
from npu_sim.boards.memory_config import SRAM, Memory
from npu_sim.ir import Geometry
from npu_sim.opset import facts_of


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


def tensor_bytes(t) -> int:
    """Bytes of a program tensor: elements x its bit width (quantized: the quantization's; int4 packs two)."""
    n = math.prod(t.shape) if t.shape else 1
    bits = t.q.bits if t.q is not None else (t.data.dtype.itemsize * 8 if t.data is not None else 32)
    return (n * bits + 7) // 8


def tensor_bits(t) -> int:
    """Bit width of a program tensor's integers (32 for an unquantized tensor)."""
    return t.q.bits if t.q is not None else 32


def _elems(t) -> int:
    return math.prod(t.shape) if t.shape else 1


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


def block_geometry(cfg: CostConfig, oh: int, ow: int, oc: int):
    """Block geometry: (block h, w, c clipped to the output, micro-blocks per block (h, w, c), blocks)."""
    bh, bw, bc = min(cfg.ofm_block[0], oh), min(cfg.ofm_block[1], ow), min(cfg.ofm_block[2], oc)
    uh, uw, uc = cfg.ublock
    nu = (_cdiv(bh, uh), _cdiv(bw, uw), _cdiv(bc, uc))
    total_u = _cdiv(oh, uh) * _cdiv(ow, uw) * _cdiv(oc, uc)
    return (bh, bw, bc), nu, total_u / (nu[0] * nu[1] * nu[2])


def mac_block_cycles(cfg: CostConfig, kind: str, nu, kernel_elems: int, cin: int, wide: bool) -> int:
    """MAC-array cycles of one output block (see the package docstring)."""
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


# Op kinds (``npu_sim.opset``) that are their own cost class; every other kind is costed as "elementwise".
_KIND_CLASSES = ("activation", "pool", "lut", "movement", "resize", "normalization")


def _geometry(node) -> Geometry:
    """The node's window record (``Geometry``; the defaults where it has none: a float-reference node)."""
    return node.geometry or Geometry()


def _class(program, node, consts) -> str:
    """The op class of a node: the MAC ops by their geometry, else the opset's cost class or kind."""
    facts = facts_of(node.op)
    if facts.convolution:
        w = consts[0]
        groups = _geometry(node).groups
        cin = _nhwc(program.tensors[node.inputs[0]].shape)[2]
        return "depthwise" if groups > 1 and groups == cin and w.shape[1] == 1 else "conv"
    if facts.kind == "mac":
        return "fc" if facts.matrix and consts else ("matmul" if facts.matrix else "conv")
    if facts.kind == "convert":
        return "requantize"
    if facts.cost_class:
        return facts.cost_class
    return facts.kind if facts.kind in _KIND_CLASSES else "elementwise"


# ----------------------------------------------------------------------------------------------------------------
# one NPU node: operands, work by op class, placement
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class _Operands:
    """The tensors of one node and what the cost model reads from them."""
    acts: list                     # activation (non-constant) inputs
    consts: list                   # constant inputs (weights, bias)
    out: object                    # the first output
    cls: str                       # op class (``_class``)
    xbits: int
    wbits: int | None              # the weight's bits (conv, depthwise, fc only)
    obits: int
    fused: str | None              # "relu" when the node's clamp is narrower than its output's range
    in_bytes: int
    out_bytes: int
    w_bytes: int
    out_elems: int

    @property
    def x(self):
        return self.acts[0] if self.acts else self.out

    @property
    def wide(self) -> bool:
        return self.xbits > 8 or (self.wbits or 0) > 8

    @property
    def precision(self) -> str:
        return f"a{self.xbits}" + (f"w{self.wbits}" if self.wbits else "")


@dataclass
class _Work:
    """What an op class costs before placement: compute cycles, MACs, traffic per memory role, first/last block."""
    compute: float = 0.0
    macs: int = 0
    exposed: float = 0.0
    traffic: dict = field(default_factory=dict)   # memory role (ifm, weights, ofm, lut) -> bytes
    ifm_block_bytes: float = 0.0
    ofm_block_bytes: float = 0.0


def _operands(program, node) -> _Operands:
    tensors = program.tensors
    acts = [tensors[i] for i in node.inputs if not tensors[i].is_const]
    consts = [tensors[i] for i in node.inputs if tensors[i].is_const]
    out = tensors[node.outputs[0]]
    cls = _class(program, node, consts)
    fused = None
    if node.clamp is not None and out.q is not None and (node.clamp[0] > out.q.qmin or node.clamp[1] < out.q.qmax):
        fused = "relu"
    return _Operands(
        acts=acts, consts=consts, out=out, cls=cls,
        xbits=max((tensor_bits(t) for t in acts), default=8),
        wbits=tensor_bits(consts[0]) if consts and cls in ("conv", "depthwise", "fc") else None,
        obits=tensor_bits(out), fused=fused,
        in_bytes=sum(tensor_bytes(t) for t in acts),
        out_bytes=sum(tensor_bytes(tensors[o]) for o in node.outputs),
        w_bytes=sum(tensor_bytes(t) for t in consts),
        out_elems=sum(_elems(tensors[o]) for o in node.outputs))


def _plane_mean(node, o) -> bool:
    """A ReduceMean over the two spatial axes of a 4-D tensor (NCHW's 2, 3 or NHWC's 1, 2): computed as a pool over
    the whole plane, as Vela lowers MEAN (a depthwise convolution or an average pool)."""
    g = node.geometry
    return bool(g is not None and g.axes in ((1, 2), (2, 3)) and o.acts and len(o.acts[0].shape) == 4)


def _window(node, cls: str, x, out):
    """(ih, iw, ic), (oh, ow, oc), (kh, kw, sh, sw, dh, dw), groups of a block-computed op."""
    oh, ow, oc = _nhwc(out.shape)
    ih, iw, ic = _nhwc(x.shape)
    g = _geometry(node)
    if cls in ("conv", "depthwise"):
        kh, kw = g.kernel or (1, 1)
        sh, sw = g.stride or (1, 1)
        dh, dw = g.dilation or (1, 1)
        groups = g.groups
    elif cls == "pool" and g.axes == (1, 2) and len(x.shape) == 4:  # a mean over an NHWC plane (a .tflite's MEAN)
        ih, iw, ic = x.shape[0] * x.shape[1], x.shape[2], x.shape[3]
        oh, ow, oc = 1, 1, ic
        kh, kw, sh, sw, dh, dw = ih, iw, 1, 1, 1, 1
        groups = ic
    elif cls == "pool":
        if facts_of(node.op).global_pool or g.kernel is None:  # the whole plane
            kh, kw, sh, sw, dh, dw = ih, iw, 1, 1, 1, 1
        else:
            kh, kw = g.kernel
            sh, sw = g.stride or (1, 1)
            dh, dw = g.dilation or (1, 1)
        groups = ic
    else:  # Gemm / MatMul: rows of A are output pixels, K = input depth
        kh = kw = sh = sw = dh = dw = 1
        groups = 1
        a_shape = x.shape
        k_dim = a_shape[0] if g.transpose_a else a_shape[-1]
        oh, ow, oc = 1, _elems(out) // out.shape[-1], out.shape[-1]
        ih, iw, ic = 1, ow, k_dim
    return (ih, iw, ic), (oh, ow, oc), (kh, kw, sh, sw, dh, dw), groups


def _stored_constant_bytes(cfg: CostConfig, o: _Operands, oc: int) -> int:
    """A MAC op's constants as the board stores them (``[memory]``), read with its weights: the weights, the bias
    at ``bias_bytes`` per output channel (0: the bias tensor at its own width) and ``scale_bytes_per_channel``
    (on the Ethos-U55: Vela's 10-byte record per channel)."""
    mem = cfg.memory
    stored = tensor_bytes(o.consts[0]) + mem.bias_bytes * oc if mem.bias_bytes and o.consts else o.w_bytes
    return stored + mem.scale_bytes_per_channel * oc


def _block_cost(cfg: CostConfig, node, o: _Operands) -> _Work:
    """Conv, depthwise, fully connected, MatMul and windowed pooling: computed block by block."""
    cls, x, fm = o.cls, o.x, cfg.memory.sram
    (ih, iw, ic), (oh, ow, oc), (kh, kw, sh, sw, dh, dw), groups = _window(node, cls, x, o.out)
    facts = facts_of(node.op)
    transposed = facts.transposed
    kelems = kh * kw
    if transposed:  # each output sees ceil(k/s) taps per dimension
        kelems = _cdiv(kh, sh) * _cdiv(kw, sw)
        sh = sw = 1
    cin_g = ic // max(groups, 1)
    plane = cls == "pool" and (facts.global_pool or _plane_mean(node, o))  # Vela: a depthwise conv over the plane
    kind = "depthwise" if plane else (cls if cls in ("depthwise", "pool") else "conv")
    dense_groups = groups if kind == "conv" and groups > 1 else 1
    oc_g = oc // dense_groups
    (bh, bw, bc), nu, nblocks = block_geometry(cfg, oh, ow, oc_g)
    mac_blk = mac_block_cycles(cfg, kind, nu, kelems, cin_g, o.wide)
    ao_cls = "maxpool" if facts.max_pool else (
        "pool" if cls == "pool" else ("mac_wide" if o.wide else "mac"))
    cpe = _ao_cpe(cfg, ao_cls, o.fused)
    ao_blk = math.ceil(cpe * bh * bw * bc)
    ao_total = math.ceil(cpe * oh * ow * oc_g)
    w = _Work(compute=(max(mac_blk * nblocks, ao_total) + min(mac_blk, ao_blk)) * dense_groups)
    if cls == "pool":
        w.macs = 0
    elif transposed:
        w.macs = _elems(x) * (oc // groups) * kh * kw
    elif cls in ("fc", "matmul"):
        w.macs = _elems(o.out) * ic
    else:
        w.macs = _elems(o.out) * cin_g * kh * kw
    # memory: IFM block with halo, full input depth (per group), once per output block
    spatial_blocks = _cdiv(oh, bh) * _cdiv(ow, bw)
    depth_blocks = 1 if kind in ("depthwise", "pool") else _cdiv(oc_g, bc) * dense_groups
    ibh = min(ih, (bh - 1) * sh + (kh - 1) * dh + 1) if not transposed else min(ih, bh)
    ibw = min(iw, (bw - 1) * sw + (kw - 1) * dw + 1) if not transposed else min(iw, bw)
    xbytes = o.xbits / 8
    depth_pass = cfg.ifm_depth_block // (cfg.int16_factor if o.wide else 1)
    ifm_read = ibh * ibw * (ic if kind != "conv" else cin_g) * xbytes * spatial_blocks * depth_blocks
    ifm_read /= _read_efficiency(cfg, fm, ibw, ic, depth_pass, xbytes)  # the block's rows: what one burst holds
    if cls == "matmul":  # the second operand is streamed like weights
        w.traffic["ifm"] = ifm_read + sum(tensor_bytes(t) for t in o.acts[1:]) * spatial_blocks
    else:
        w.traffic["ifm"] = ifm_read
    if cls in ("conv", "depthwise", "fc"):
        w.traffic["weights"] = _stored_constant_bytes(cfg, o, oc) * spatial_blocks
    w.traffic["ofm"] = o.out_bytes / _write_efficiency(cfg, fm, ow, oc, bc, bw, o.obits / 8)
    w.ifm_block_bytes = ibh * ibw * min(ic, depth_pass) * xbytes
    w.ofm_block_bytes = bh * bw * bc * o.obits / 8 / _write_efficiency(cfg, fm, ow, oc, bc, bw, o.obits / 8)
    return w


def _movement_cost(cfg: CostConfig, o: _Operands) -> _Work:
    """Reshape, Transpose, Pad, ...: ``movement_cycles_per_element`` per output element, or free."""
    w = _Work()
    if cfg.movement_cycles_per_element > 0:
        w.compute = math.ceil(cfg.movement_cycles_per_element * o.out_elems)
        w.traffic["ifm"], w.traffic["ofm"] = o.in_bytes, o.out_bytes
    return w


_STREAM_AO_CLASSES = {"add": "add", "mul": "mul", "lut": "lut", "requantize": "requantize", "resize": "resize",
                      "normalization": "normalization", "pool": "pool"}  # (a standalone activation: elementwise)


def _stream_cost(cfg: CostConfig, o: _Operands) -> _Work:
    """Elementwise, LUT, resize, normalization ops (and a ReduceMean over other axes than a plane): the output stage per element."""
    ao_cls = _STREAM_AO_CLASSES.get(o.cls, "elementwise")
    elems = o.out_elems if o.cls not in ("normalization", "pool") else max(_elems(t) for t in o.acts)
    wide = cfg.int16_factor if ao_cls == "lut" and o.xbits > 8 else 1  # a 16-bit table: half the rate (Vela)
    w = _Work(compute=math.ceil(_ao_cpe(cfg, ao_cls, o.fused) * elems * wide))
    w.traffic["ifm"] = o.in_bytes
    w.traffic["ofm"] = o.out_bytes
    if o.consts:
        w.traffic["weights"] = o.w_bytes
    if o.cls == "lut":
        lut = cfg.lut.bytes_16 if o.xbits > 8 else cfg.lut.bytes_8
        w.traffic["lut"] = lut
        w.exposed += lut / cfg.lut.load_bytes_per_cycle
    w.ifm_block_bytes = min(o.in_bytes, math.prod(cfg.ofm_block) * o.xbits / 8)
    w.ofm_block_bytes = min(o.out_bytes, math.prod(cfg.ofm_block) * o.obits / 8)
    return w


def _placed(cfg: CostConfig, node, o: _Operands, w: _Work) -> LayerCost:
    """Place the traffic in memories (spilling feature maps that do not fit), add the exposed transfers."""
    mem = cfg.memory
    spill = False
    fm_name, w_name = SRAM, mem.weight_memory
    working = o.in_bytes + o.out_bytes + (o.w_bytes if mem.constants_in_sram else 0)
    if o.cls != "movement" and mem.feature_map_spill and mem.sram_bytes and working > mem.sram_bytes:
        spill = True
        fm_name = mem.spill_memory
    per_mem: dict[str, float] = {}
    for role, b in w.traffic.items():
        name = w_name if role == "weights" else fm_name
        per_mem[name] = per_mem.get(name, 0.0) + b
    mem_cycles = max((b / mem.memories[m].bytes_per_cycle for m, b in per_mem.items()), default=0.0)
    compute, exposed = w.compute, w.exposed
    if compute or per_mem:
        src = mem.memories[fm_name]
        exposed += (src.read_latency + math.floor(w.ifm_block_bytes / src.bytes_per_cycle)
                    + src.write_latency + math.floor(w.ofm_block_bytes / src.bytes_per_cycle))
        exposed += cfg.op_overhead_cycles
    cycles = max(compute, mem_cycles) + exposed
    if cycles == 0:
        bound = "free"
    elif compute >= mem_cycles:
        bound = "compute"
    else:
        bound = max(per_mem, key=lambda m: per_mem[m] / mem.memories[m].bytes_per_cycle)
    util = 100.0 * w.macs / (cycles * cfg.macs_per_cycle) if cycles and w.macs else 0.0
    return LayerCost(node.name, node.op, o.cls, o.precision, "NPU", int(w.macs),
                     {m: int(round(b)) for m, b in per_mem.items()}, float(compute), float(mem_cycles),
                     float(exposed), float(cycles), bound, util, spill=spill)


def layer_cost(cfg: CostConfig, program, node) -> LayerCost:
    """Cost of one node running on the NPU, from the board's cost section and the node's tensors."""
    o = _operands(program, node)
    if o.cls in ("conv", "depthwise", "fc", "matmul") or (o.cls == "pool" and (facts_of(node.op).window
                                                                               or _plane_mean(node, o))):
        work = _block_cost(cfg, node, o)
    elif o.cls == "movement":
        work = _movement_cost(cfg, o)
    elif o.cls == "lut" and _fused_activation(program, node):  # the table slows the layer's output stage
        t = cfg.output_cycles_per_element
        work = _Work(compute=math.ceil(max(t["lut"] - t["mac"], 0.0) * o.out_elems))
    else:
        work = _stream_cost(cfg, o)
    return _placed(cfg, node, o, work)


def _fused_activation(program, node) -> bool:
    """A lookup-table activation that alone reads the output of a convolution or fully-connected layer: Vela runs
    the table in that layer's output stage (measured: MobileNetV3's 19 HARD_SWISH cost no cycles of their own),
    so it costs only what the table adds to that stage (``lut`` - ``mac`` per element; a change of layout between
    them is looked through)."""
    producer = {out: n for n in program.nodes for out in n.outputs}
    name = node.inputs[0] if node.inputs else ""
    src = producer.get(name)
    while src is not None and src.layout and src.inputs:
        name, src = src.inputs[0], producer.get(src.inputs[0])
    if src is None or facts_of(src.op).kind != "mac":
        return False

    def readers(t: str) -> int:
        return sum(readers(n.outputs[0]) if n.layout else 1 for n in program.nodes if t in n.inputs)
    return readers(name) == 1


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
