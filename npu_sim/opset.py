"""The op vocabulary as data: every ONNX op npu-sim lowers and the facts about it that every layer reads.

``OPS[op_type]`` gives an op's ``kind``, which check, cost and the advisor read:
``mac`` (multiply-accumulate into a wide accumulator, then requantize), ``elementwise``, ``pool``, ``resize``,
``activation`` (clamp / piecewise linear), ``normalization``, ``lut`` (lookup table: nonlinear functions),
``movement`` (pure data movement, exact). How an op is lowered, per arithmetic, is in
``npu_sim.lowering.registry``; this module holds facts only, so that every layer may read it.

Adding an op = one entry here + its lowering function in an ``npu_sim.ops`` family, registered in
``npu_sim.lowering.registry`` + a kernel with a golden twin. A lookup-table activation is one entry in
``npu_sim.activations`` (its function and measured domains) and nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npu_sim.activations import LUT_ACTIVATIONS

MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
LUT_OPS = tuple(LUT_ACTIVATIONS)  # one entry each in npu_sim.activations: the function and its measured domains
# Movement ops that only re-label their input's elements (same data, same order): a view, no copy
VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
MOVEMENT_OPS = VIEW_OPS + ("Transpose", "Slice", "Split", "Pad", "Gather")
# Ops the board would compute with lookup tables of their own (the nonlinear-ops feature); reported by name.
NONLINEAR = frozenset({"LogSoftmax", "Selu", "Mish", "InstanceNormalization"})
# The program's own conversions (the model input's QuantizeLinear, a QuantizeLinear between quantizations).
CONVERT_OPS = ("Quantize", "Requantize")


@dataclass(frozen=True)
class OpFacts:
    kind: str
    needs_activation: bool = True  # first input must be a dequantized integer tensor
    immediate: bool = False        # lowered when met (keeps its input's quantization), not at its QuantizeLinear
    cost_class: str | None = None  # the latency model's output-pipeline class, when not the kind's own


OPS: dict[str, OpFacts] = {
    **{op: OpFacts("mac") for op in MAC_OPS},
    "Add": OpFacts("elementwise", cost_class="add"),
    "Sub": OpFacts("elementwise", cost_class="add"),
    "Mul": OpFacts("elementwise", cost_class="mul"),
    "Div": OpFacts("elementwise", cost_class="mul"),
    "Concat": OpFacts("elementwise"),
    "Relu": OpFacts("activation"),
    "Clip": OpFacts("activation"),
    "LeakyRelu": OpFacts("activation"),
    "PRelu": OpFacts("activation"),
    "BatchNormalization": OpFacts("normalization"),
    "MaxPool": OpFacts("pool", immediate=True),
    "GlobalMaxPool": OpFacts("pool", immediate=True),
    "AveragePool": OpFacts("pool"),
    "GlobalAveragePool": OpFacts("pool"),
    "ReduceMean": OpFacts("pool"),
    "Resize": OpFacts("resize"),
    "Softmax": OpFacts("normalization"),
    "LayerNormalization": OpFacts("normalization"),
    **{op: OpFacts("lut") for op in LUT_OPS},
    **{op: OpFacts("movement", immediate=True) for op in MOVEMENT_OPS},
}


def kind_of(op: str) -> str:
    """The kind of a program op: an ``OPS`` kind, ``convert`` for the program's own conversions, else ``unknown``."""
    facts = OPS.get(op)
    return facts.kind if facts else ("convert" if op in CONVERT_OPS else "unknown")


# ---- multiply-accumulate ops: where the weight is and how long one output's dot product is --------------------
WEIGHT_INPUT = 1  # every MAC op's weight (B of Gemm/MatMul) is its second input; the bias, if any, its third


def weight_channel_axis(op: str, ndim: int, trans_b: bool = False) -> int:
    """The output-channel axis of a MAC op's weight of rank ``ndim`` (per-tensor weights: the natural one)."""
    if op == "ConvTranspose":
        return 1
    if op == "MatMul" or (op == "Gemm" and not trans_b):
        return ndim - 1
    return 0


def reduction_length(op: str, w_shape: tuple | None, a_shape: tuple, groups: int = 1,
                     trans_b: bool = False) -> int | None:
    """in_ch/groups * kh * kw of a MAC op: the length of one output's dot product (``w_shape`` None: a MatMul of
    two activations, whose length is the last axis of ``a_shape``; None for other ops without a weight)."""
    if w_shape is None:
        return int(a_shape[-1]) if op == "MatMul" else None
    if op == "Conv":
        return int(np.prod(w_shape[1:]))
    if op == "ConvTranspose":
        return int(w_shape[0] // max(1, groups) * np.prod(w_shape[2:]))
    if op == "Gemm":
        return int(w_shape[1] if trans_b else w_shape[0])
    return int(w_shape[0])
