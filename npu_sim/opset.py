"""The op vocabulary as data: every ONNX op npu-sim lowers and the facts about it that every layer reads.

``OPS[op_type]`` gives an op's facts (``OpFacts``; ``facts_of`` for any program op, the program's own conversions
included), which check, cost, accuracy and the advisor read instead of the op's name: its ``kind`` -- ``mac``
(multiply-accumulate into a wide accumulator, then requantize), ``elementwise``, ``pool``, ``resize``,
``activation`` (clamp / piecewise linear), ``normalization``, ``lut`` (lookup table: nonlinear functions),
``movement`` (pure data movement, exact), ``convert`` (``Quantize``, ``Requantize``) -- and what it does with its
input (a window, transposed, a global or a max pool, a pad, a join, a chain of tables). How an op is lowered, per
arithmetic, is in ``npu_sim.lowering.registry``; this module holds facts only, so that every layer may read it.

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


# The steps of the ops computed as a chain of lookup tables and integer steps (each step rounds).
SOFTMAX_STEPS = ("max", "exp table", "sum", "reciprocal table", "multiply")
LAYERNORM_STEPS = ("mean", "variance", "1/sqrt table", "affine")


@dataclass(frozen=True)
class OpFacts:
    kind: str
    needs_activation: bool = True  # first input must be a dequantized integer tensor
    immediate: bool = False        # lowered when met (keeps its input's quantization), not at its QuantizeLinear
    cost_class: str | None = None  # the latency model's output-pipeline class, when not the kind's own
    window: bool = False           # each output reads a window of its input (convolutions, pools; a global
    #                                pool's window is the whole plane): computed block by block
    transposed: bool = False       # a transposed convolution (each output sees ceil(k/s) taps per dimension)
    global_pool: bool = False      # pools the whole spatial plane
    max_pool: bool = False         # takes the maximum of its window (order-preserving: exact)
    folds_pad: bool = False        # a Pad feeding only such ops is folded into their padding (as Vela does)
    pad: bool = False              # only pads its input (foldable into a consumer that ``folds_pad``)
    joins: bool = False            # joins its inputs into one output under one shared quantization (Concat)
    lut_chain: tuple[str, ...] = ()  # computed as this chain of lookup tables and integer steps
    in_place: bool = False         # element-wise: Vela may write its output over an input of the same shape

    @property
    def matrix(self) -> bool:
        """A multiply-accumulate op without a window: a matrix product (Gemm, MatMul)."""
        return self.kind == "mac" and not self.window

    @property
    def convolution(self) -> bool:
        """A (not transposed) convolution."""
        return self.kind == "mac" and self.window and not self.transposed


OPS: dict[str, OpFacts] = {
    "Conv": OpFacts("mac", window=True, folds_pad=True),
    "ConvTranspose": OpFacts("mac", window=True, transposed=True),
    "Gemm": OpFacts("mac"),
    "MatMul": OpFacts("mac"),
    "Add": OpFacts("elementwise", cost_class="add", in_place=True),
    "Sub": OpFacts("elementwise", cost_class="add", in_place=True),
    "Mul": OpFacts("elementwise", cost_class="mul", in_place=True),
    "Div": OpFacts("elementwise", cost_class="mul"),
    "Concat": OpFacts("elementwise", joins=True),
    "Abs": OpFacts("elementwise"),
    "Max": OpFacts("elementwise", in_place=True),
    "Min": OpFacts("elementwise", in_place=True),
    "Relu": OpFacts("activation"),
    "Clip": OpFacts("activation"),
    "LeakyRelu": OpFacts("activation"),
    "PRelu": OpFacts("activation"),
    "BatchNormalization": OpFacts("normalization"),
    "MaxPool": OpFacts("pool", immediate=True, window=True, max_pool=True, folds_pad=True),
    "GlobalMaxPool": OpFacts("pool", immediate=True, window=True, max_pool=True, global_pool=True),
    "AveragePool": OpFacts("pool", window=True, folds_pad=True),
    "GlobalAveragePool": OpFacts("pool", window=True, global_pool=True),
    "ReduceMean": OpFacts("pool"),
    "Resize": OpFacts("resize"),
    "Softmax": OpFacts("normalization", lut_chain=SOFTMAX_STEPS),
    "LayerNormalization": OpFacts("normalization", lut_chain=LAYERNORM_STEPS),
    **{op: OpFacts("lut") for op in LUT_OPS},
    **{op: OpFacts("movement", immediate=True, pad=op == "Pad") for op in MOVEMENT_OPS},
}
_CONVERT, _UNKNOWN = OpFacts("convert"), OpFacts("unknown")


def facts_of(op: str) -> OpFacts:
    """The facts of a program op: its ``OPS`` entry, else those of kind ``convert`` for the program's own
    conversions (``CONVERT_OPS``), else those of kind ``unknown``."""
    return OPS.get(op) or (_CONVERT if op in CONVERT_OPS else _UNKNOWN)


def kind_of(op: str) -> str:
    """The kind of a program op: an ``OPS`` kind, ``convert`` for the program's own conversions, else ``unknown``."""
    return facts_of(op).kind


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
