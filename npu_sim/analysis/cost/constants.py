"""The constants as the board stores them (flash/ROM): the bytes ``memory_report`` counts as flash.

From the board's ``[memory]`` section (docs/BOARDS.md), each constant tensor once:

* a **MAC op** (convolution, fully connected, MatMul with constant weights) stores two streams: its per-channel
  records (``bias_bytes`` + ``scale_bytes_per_channel`` per output channel; ``bias_bytes = 0``: the bias tensor at
  its own width) and its weights in the board's **weight layout** (``weight_layout_elements``): output channels in
  micro-blocks of ``weight_ublock``; input channels in blocks of ``weight_ifm_block`` (depth-first) or in
  micro-blocks (part-kernel-first, chosen as Vela chooses it: by the better use of the padded blocks); kernels in
  sub-kernels of at most ``weight_subkernel`` squared, whose elements a depthwise or part-kernel-first stream pads
  to a multiple of ``weight_kernel_round``. The zeros the layout adds are ``padding``; with every key at its
  default (1, 0) the layout is dense. The weights are counted at their width, uncompressed.
* **other** constants: quantized constant inputs of the other ops and the constant operand of an element-wise op
  (an Add's or Mul's per-channel vector or scalar), at their width;
* **lookup tables** the lowering built (each node's ``Tables`` record: entries x the narrowest integer width);
* each tensor and stream padded to ``constant_alignment`` bytes (``padding``).

On a board whose NPU compiler is Vela (``[rules] npu_compiler = "vela"``) the ops Vela rewrites into other ops
store the constants Vela makes for them instead (``npu_sim.analysis.cost.vela_constants``).
"""
from __future__ import annotations

import re

import numpy as np

from npu_sim.analysis.cost.layer import tensor_bytes
from npu_sim.analysis.cost.vela_constants import vela_node_constants
from npu_sim.analysis.cost.weight_layout import out_channels, round_up, weight_layout_elements
from npu_sim.ir import Program, Tables
from npu_sim.opset import WEIGHT_INPUT, kind_of

CATEGORIES = ("weights", "biases", "scales", "other", "luts", "padding")
_SUFFIX = re.compile(r"#\d+$")  # the .tflite frontend's name of one more copy of a tensor


def _table_bytes(arr: np.ndarray) -> int:
    """Entries x the narrowest integer width (1, 2, 4 or 8 bytes) that holds every entry."""
    if arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        return int(arr.nbytes)
    lo, hi = int(arr.min()), int(arr.max())
    for width in (1, 2, 4):
        bits = 8 * width
        if -(2 ** (bits - 1)) <= lo and hi < 2 ** bits and (lo >= 0 or hi < 2 ** (bits - 1)):
            return arr.size * width
    return arr.size * 8


def lut_bytes(tables: Tables | None) -> int:
    """Bytes of a node's lookup tables (its ``Tables`` record, as the lowering built them)."""
    return sum(_table_bytes(t) for t in tables.entries.values()) if tables is not None else 0


def _mac_constants(program: Program, node, mem, out: dict, seen: set) -> None:
    """A MAC op's records and weights (each stream aligned), the weights once per tensor."""
    align, channels = mem.constant_alignment, out_channels(program, node)
    records = mem.scale_bytes_per_channel * channels
    out["scales"] += mem.scale_bytes_per_channel * channels
    if mem.bias_bytes:
        out["biases"] += mem.bias_bytes * channels
        records += mem.bias_bytes * channels
    for name in node.inputs[WEIGHT_INPUT + 1:WEIGHT_INPUT + 2]:
        t = program.tensors[name]
        if t.is_const and not mem.bias_bytes and name not in seen:
            seen.add(name)
            out["biases"] += int(t.data.dtype.itemsize) * t.data.size
            records += int(t.data.dtype.itemsize) * t.data.size
    out["padding"] += round_up(records, align) - records
    name = node.inputs[WEIGHT_INPUT]
    if name in seen:
        return
    seen.add(name)
    t = program.tensors[name]
    dense = tensor_bytes(t)
    stored = (weight_layout_elements(program, node, mem) * t.q.bits + 7) // 8 if t.q is not None else dense
    out["weights"] += dense
    out["padding"] += round_up(max(stored, dense), align) - dense  # the layout's zeros, then the alignment


def _has_weights(program: Program, node) -> bool:
    """A MAC op with constant weights (its records and weight stream: ``_mac_constants``)."""
    return kind_of(node.op) == "mac" and any(program.tensors[i].is_const
                                             for i in node.inputs[WEIGHT_INPUT:WEIGHT_INPUT + 1])


def _other_constants(program: Program, node, mem, out: dict, seen: set) -> None:
    """The other constant inputs of an op and an element-wise op's constant operands, each aligned, once."""
    skip = (WEIGHT_INPUT, WEIGHT_INPUT + 1) if _has_weights(program, node) else ()
    tensors = [program.tensors[n] for i, n in enumerate(node.inputs) if i not in skip]
    if node.operands is not None:
        tensors += [t for t in (node.operands.a, node.operands.b) if t is not None and t.data is not None]
    for t in tensors:
        # one source tensor is stored once: the .tflite frontend's copies of it (NAME#k, one per reader) too
        key = (_SUFFIX.sub("", t.name), t.data.tobytes() if t.data is not None else None)
        if not t.is_const or t.q is None or t.name in seen or key in seen:
            continue
        seen.update((t.name, key))
        n = tensor_bytes(t)
        out["other"] += n
        out["padding"] += round_up(n, mem.constant_alignment) - n


def constant_bytes(program: Program, board=None) -> dict:
    """Bytes of the program's constants as the board stores them: weights, biases, scales, other, LUTs and the
    padding of the board's weight layout and alignment (``CATEGORIES``)."""
    board = board or program.board
    mem = board.memory
    vela = board.rules.npu_compiler == "vela"
    seen: set = set()  # tensor names, and (source name, contents) of the other constants
    state: dict = {}
    out = dict.fromkeys(CATEGORIES, 0)
    for node in program.nodes:
        made = vela_node_constants(program, node, mem, state) if vela else None
        if made is not None:
            for key, n in made.items():
                out[key] += n
            continue
        if _has_weights(program, node):
            _mac_constants(program, node, mem, out, seen)
        _other_constants(program, node, mem, out, seen)
        for table in (node.tables.entries.values() if node.tables is not None else ()):
            n = _table_bytes(table)
            out["luts"] += n
            out["padding"] += round_up(n, mem.constant_alignment) - n
    return out
