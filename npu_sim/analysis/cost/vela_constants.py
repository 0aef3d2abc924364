"""The constants Arm's Vela 5.2 makes when it rewrites an op for the Ethos-U (a board with ``[rules] npu_compiler =
"vela"``), in place of the op's own: what its read-only area ("Total On-chip Flash used") holds for them.

Each fact is Vela's (its C++ core, ``ethosu/regor``: ``compiler/tflite_graph_optimiser.cpp``, ``softmax.cpp``,
``graphir_optimiser.cpp``; the weight stream in ``architecture/ethosu55/ethos_u55_weight_encoder.cpp`` and its
``mlw_codec``), measured against ``vela --verbose-allocation`` on the TFLite zoo (docs/ETHOS_U55.md):

* **MEAN** over a plane (a .tflite's MEAN, an ONNX GlobalAveragePool or ReduceMean over H and W): a depthwise
  convolution whose weights are all ones, kernel H x W (a kernel taller than 64 rows of at most 4,096 elements is
  made one row; more than 4,096 elements: several convolutions of at most 64 rows, summed), then a multiply by
  an int32 scalar. Each distinct kernel stores a record per channel and its ones, in the depthwise weight layout;
  a stream of one value is encoded with a two-entry palette, one bit per element (zeros of the layout included).
  Equal encodings are stored once (Vela shares them by their hash): by kernel and channels.
* **SOFTMAX**: 8-bit input: an exp table of 256 int32 entries and 7 int32 scalars (right_shift12,
  headroom_offset, one_const, neg_32_over_17, const_48_over_17, F2_one, four); 16-bit input: two interpolating
  tables of 512 int32 entries (exp, 1/(1+x)) and 6 scalars (mul2_scale, add3_const, const_31, one_const,
  shift_const, sub11_const). Both: a zero int32 tensor of the output's shape (a broadcast Vela turns into an Add).
* an **8-bit lookup-table activation** (Sigmoid, Tanh, HardSwish, ...): a table of 256 one-byte entries.
* a **PAD** Vela does not fold into the convolution it feeds (it folds one whose only readers are convolutions
  with a kernel larger than the padding): a fill constant the size of its largest padded face, in whole words.

Every constant tensor is padded to the board's ``constant_alignment``, and each stream of a MEAN's weight tensor.
"""
from __future__ import annotations

import math

from npu_sim.analysis.cost.weight_layout import depthwise_elements, round_up
from npu_sim.opset import SOFTMAX_STEPS, facts_of, kind_of

MEAN_MAX_HEIGHT = 64            # Vela's MAX_MEAN_HEIGHT: kernel rows per depthwise convolution
MEAN_MAX_KERNEL = 64 * 64       # Vela's MAX_MEAN_KERNEL_SIZE: kernel elements per depthwise convolution
INT32 = 4
SOFTMAX_8 = {"luts": 256 * INT32, "scalars": 7}
SOFTMAX_16 = {"luts": 2 * 512 * INT32, "scalars": 6}
LUT_8 = 256


def _bits(program, name: str) -> int:
    q = program.tensors[name].q
    return q.bits if q is not None else 32


def _plane(program, node) -> tuple[int, int, int] | None:
    """(H, W, C) of a mean over the plane of a 4-D tensor (NHWC axes 1, 2 or NCHW axes 2, 3), else None."""
    facts = facts_of(node.op)
    mean = facts.kind == "pool" and not facts.max_pool and (facts.global_pool or not facts.window)
    if not mean or node.geometry is None or not node.inputs:
        return None
    shape = program.tensors[node.inputs[0]].shape
    if len(shape) != 4:
        return None
    if node.geometry.axes == (1, 2):
        return shape[1], shape[2], shape[3]
    if node.geometry.axes == (2, 3) or facts.global_pool:
        return shape[2], shape[3], shape[1]
    return None


def mean_kernels(h: int, w: int) -> list[tuple[int, int]]:
    """The distinct kernels of Vela's depthwise convolutions for a mean over an h x w plane."""
    if h > MEAN_MAX_HEIGHT and h * w <= MEAN_MAX_KERNEL:
        h, w = 1, h * w
    rows = max(1, min(MEAN_MAX_KERNEL // w, h, MEAN_MAX_HEIGHT))
    return [(rows, w)] + ([(h % rows, w)] if h % rows else [])


def _mean(plane, mem, stored: set) -> dict:
    h, w, c = plane
    out = {"biases": 0, "scales": 0, "other": INT32, "padding": round_up(INT32, mem.constant_alignment) - INT32}
    for kh, kw in mean_kernels(h, w):
        if ("mean", kh, kw, c) in stored:
            continue
        stored.add(("mean", kh, kw, c))
        records = (mem.bias_bytes + mem.scale_bytes_per_channel) * c
        ones = -(-depthwise_elements(c, kh, kw, mem) // 8)
        out["biases"] += mem.bias_bytes * c
        out["scales"] += mem.scale_bytes_per_channel * c
        out["other"] += ones
        out["padding"] += (round_up(records, mem.constant_alignment) - records
                           + round_up(ones, mem.constant_alignment) - ones)
    return out


def _softmax(program, node, mem) -> dict:
    made = SOFTMAX_16 if _bits(program, node.inputs[0]) > 8 else SOFTMAX_8
    zeros = math.prod(program.tensors[node.outputs[0]].shape) * INT32
    align = mem.constant_alignment
    padding = (round_up(made["luts"], align) - made["luts"] + made["scalars"] * (round_up(INT32, align) - INT32)
               + round_up(zeros, align) - zeros)
    return {"luts": made["luts"], "other": made["scalars"] * INT32 + zeros, "padding": padding}


def _readers(program) -> dict[str, list]:
    """Tensor -> the nodes that read it, looking through the frontend's changes of layout."""
    readers: dict[str, list] = {}
    through = {n.inputs[0]: n.outputs[0] for n in program.nodes if n.layout and n.inputs and n.outputs}
    for node in program.nodes:
        if node.layout:
            continue
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    for src, dst in through.items():
        readers.setdefault(src, []).extend(readers.get(dst, []))
    return readers


def _pad(program, node, mem, readers: dict) -> dict:
    width = node.params.get("width") or ()
    out = program.tensors[node.outputs[0]].shape
    pads = [max(b, a) for b, a in width]
    kernel_ok = []
    for r in readers.get(node.outputs[0], []):
        k = r.geometry.kernel if r.geometry is not None and r.geometry.kernel else (1, 1)
        kernel_ok.append(facts_of(r.op).convolution and max(pads, default=0) < min(k))
    if kernel_ok and all(kernel_ok):
        return {}
    faces = [math.prod(out) // out[i] * p for i, p in enumerate(pads) if p and out[i]]
    fill = round_up(max(faces, default=0) * _bits(program, node.outputs[0]) // 8, INT32)
    return {"other": fill, "padding": round_up(fill, mem.constant_alignment) - fill}


def vela_node_constants(program, node, mem, state: dict) -> dict | None:
    """The constants Vela stores for ``node`` in place of its own (category -> bytes, as ``constant_bytes``
    counts them), or None where Vela keeps the op's own. ``state``: one dict per program, filled here (what is
    stored already: Vela stores equal encodings once; the readers of each tensor)."""
    plane = _plane(program, node)
    if plane is not None:
        return _mean(plane, mem, state.setdefault("stored", set()))
    if facts_of(node.op).lut_chain == SOFTMAX_STEPS:
        return _softmax(program, node, mem)
    if kind_of(node.op) == "lut" and node.inputs and _bits(program, node.inputs[0]) == 8:
        return {"luts": LUT_8, "padding": round_up(LUT_8, mem.constant_alignment) - LUT_8}
    if facts_of(node.op).pad and not node.layout:
        if "readers" not in state:
            state["readers"] = _readers(program)
        return _pad(program, node, mem, state["readers"])
    return None
