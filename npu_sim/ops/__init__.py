"""The op vocabulary: every ONNX op npu-sim lowers, with its family metadata.

``OPS[op_type]`` gives the lowering function and the op's kind, which checks and cost read:
``mac`` (multiply-accumulate into a wide accumulator, then requantize), ``elementwise``, ``pool``, ``resize``,
``activation`` (clamp / piecewise linear), ``normalization``, ``lut`` (lookup table: nonlinear functions),
``movement`` (pure data movement, exact).
Adding an op = one entry here + its lowering/run in the family module + a kernel with a golden twin.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import convert, elementwise, layernorm, lut, mac, movement, pool, resize, softmax
from .common import activation_bounds  # noqa: F401  (used by the lowering walk)


@dataclass(frozen=True)
class OpInfo:
    kind: str
    lower: Callable
    needs_activation: bool = True  # first input must be a dequantized integer tensor
    immediate: bool = False        # lowered when met (keeps its input's quantization), not at its QuantizeLinear


OPS: dict[str, OpInfo] = {
    "Conv": OpInfo("mac", mac.lower_conv),
    "ConvTranspose": OpInfo("mac", mac.lower_conv_transpose),
    "Gemm": OpInfo("mac", mac.lower_gemm),
    "MatMul": OpInfo("mac", mac.lower_matmul),
    "Add": OpInfo("elementwise", elementwise.lower_add),
    "Sub": OpInfo("elementwise", elementwise.lower_add),
    "Mul": OpInfo("elementwise", elementwise.lower_mul),
    "Div": OpInfo("elementwise", elementwise.lower_div),
    "Concat": OpInfo("elementwise", elementwise.lower_concat),
    "Relu": OpInfo("activation", elementwise.lower_clamp),
    "Clip": OpInfo("activation", elementwise.lower_clamp),
    "LeakyRelu": OpInfo("activation", elementwise.lower_leaky_relu),
    "PRelu": OpInfo("activation", elementwise.lower_leaky_relu),
    "BatchNormalization": OpInfo("normalization", elementwise.lower_batchnorm),
    "MaxPool": OpInfo("pool", pool.lower_maxpool, immediate=True),
    "GlobalMaxPool": OpInfo("pool", pool.lower_maxpool, immediate=True),
    "AveragePool": OpInfo("pool", pool.lower_avgpool),
    "GlobalAveragePool": OpInfo("pool", pool.lower_mean),
    "ReduceMean": OpInfo("pool", pool.lower_mean),
    "Resize": OpInfo("resize", resize.lower_resize),
    "Softmax": OpInfo("normalization", softmax.lower_softmax),
    "LayerNormalization": OpInfo("normalization", layernorm.lower_layernorm),
    **{op: OpInfo("lut", lut.lower_lut) for op in lut.LUT_OPS},
    **{op: OpInfo("movement", movement.lower_movement, immediate=True) for op in movement.MOVEMENT_OPS},
}

# Ops the board computes with lookup tables (the nonlinear-ops feature); reported by name until then.
NONLINEAR = {
    "LogSoftmax", "Selu", "Mish", "InstanceNormalization",
}

