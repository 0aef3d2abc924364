"""Which function lowers an op, per board arithmetic: the one table the walk reads.

``fixedpoint`` (our board's own recipe) maps each op to its family function in ``npu_sim.ops``; ``onnx``
(onnxruntime's own arithmetic, for cross-checking) is that table with the ops onnxruntime computes differently
remapped to their ``*_onnx`` twins (next to the family function: onnxruntime's fused QLinear* kernel where it
fuses the group, else ONNX's definition) or straight to ``onnx_arith.lower_reference_op`` (ONNX's definition);
``tflite`` (LiteRT's integer recipes) has its own table, and an op missing from it is refused with the node's
name (a tflite board never falls back to another arithmetic).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from npu_sim.lowering.problem import Problem
from npu_sim.opset import LUT_OPS, MOVEMENT_OPS, OPS, OpFacts
from npu_sim.ops import affine, convert, elementwise, layernorm, lut, mac, movement, pool, resize, softmax
from npu_sim.ops.onnx_arith import lower_reference_op
from npu_sim.ops.tflite import convert as tfl_convert
from npu_sim.ops.tflite import elementwise as tfl_elementwise
from npu_sim.ops.tflite import lut as tfl_lut
from npu_sim.ops.tflite import mac as tfl_mac
from npu_sim.ops.tflite import pool as tfl_pool
from npu_sim.ops.tflite import resize as tfl_resize
from npu_sim.ops.tflite import slope as tfl_slope
from npu_sim.ops.tflite import table as tfl_table
from npu_sim.ops.tflite import softmax as tfl_softmax


@dataclass(frozen=True)
class Entry:
    facts: OpFacts
    lower: Callable


_FAMILIES: dict[str, Callable] = {
    "Conv": mac.lower_conv,
    "ConvTranspose": mac.lower_conv_transpose,
    "Gemm": mac.lower_gemm,
    "MatMul": mac.lower_matmul,
    "Add": elementwise.lower_add,
    "Sub": elementwise.lower_add,
    "Mul": elementwise.lower_mul,
    "Div": elementwise.lower_div,
    "Concat": elementwise.lower_concat,
    "Max": tfl_slope.lower_maxmin,  # exact (a max of integers sharing one quantization) on every board
    "Min": tfl_slope.lower_maxmin,
    "Relu": elementwise.lower_clamp,
    "Clip": elementwise.lower_clamp,
    "LeakyRelu": elementwise.lower_leaky_relu,
    "PRelu": elementwise.lower_leaky_relu,
    "BatchNormalization": affine.lower_batchnorm,
    "MaxPool": pool.lower_maxpool,
    "GlobalMaxPool": pool.lower_maxpool,
    "AveragePool": pool.lower_avgpool,
    "GlobalAveragePool": pool.lower_mean,
    "ReduceMean": pool.lower_mean,
    "Resize": resize.lower_resize,
    "Softmax": softmax.lower_softmax,
    "LayerNormalization": layernorm.lower_layernorm,
    "Quantize": convert.lower_quantize,
    "Requantize": convert.lower_requantize,
    **{op: lut.lower_lut for op in LUT_OPS},
    **{op: movement.lower_movement for op in MOVEMENT_OPS},
}

# ``onnx``: MAC ops, MaxPool and movement keep the family functions (the MAC ones read the arithmetic at
# preparation, ``common.requant_scales``); everything else runs onnxruntime's arithmetic
_ONNX: dict[str, Callable] = {
    **_FAMILIES,
    "Add": elementwise.lower_add_onnx,
    "Sub": elementwise.lower_add_onnx,
    "Mul": elementwise.lower_mul_onnx,
    "Div": elementwise.lower_div_onnx,
    "Concat": lower_reference_op,
    "Relu": elementwise.lower_clamp_onnx,
    "Clip": elementwise.lower_clamp_onnx,
    "LeakyRelu": lower_reference_op,
    "PRelu": lower_reference_op,
    "BatchNormalization": affine.lower_batchnorm_onnx,
    "AveragePool": pool.lower_avgpool_onnx,
    "GlobalAveragePool": pool.lower_mean_onnx,
    "ReduceMean": pool.lower_mean_onnx,
    "Resize": resize.lower_resize_onnx,
    "Softmax": softmax.lower_softmax_onnx,
    "LayerNormalization": layernorm.lower_layernorm_onnx,
    "Requantize": convert.lower_requantize_onnx,
    **{op: lower_reference_op for op in LUT_OPS},
}

_TFLITE: dict[str, Callable] = {
    "Conv": tfl_mac.lower_conv,
    "Gemm": tfl_mac.lower_gemm,
    "MatMul": tfl_mac.lower_matmul,
    "Add": tfl_elementwise.lower_add,
    "Sub": tfl_elementwise.lower_add,
    "Mul": tfl_elementwise.lower_mul,
    "Concat": tfl_elementwise.lower_concat,
    "Relu": tfl_elementwise.lower_clamp,
    "Clip": tfl_elementwise.lower_clamp,
    "ConvTranspose": tfl_mac.lower_conv_transpose,
    "LeakyRelu": tfl_slope.lower_leaky_relu,
    "PRelu": tfl_slope.lower_prelu,
    "Max": tfl_slope.lower_maxmin,
    "Min": tfl_slope.lower_maxmin,
    "Abs": tfl_slope.lower_abs,
    "Exp": tfl_table.lower_exp,
    "AveragePool": tfl_pool.lower_avgpool,
    "GlobalAveragePool": tfl_pool.lower_mean,
    "ReduceMean": tfl_pool.lower_mean,
    "Resize": tfl_resize.lower_resize,
    "Sigmoid": tfl_lut.lower_lut,
    "Tanh": tfl_lut.lower_lut,
    "HardSwish": tfl_lut.lower_hardswish,
    "Softmax": tfl_softmax.lower_softmax,
    "Quantize": tfl_convert.lower_quantize,
    "Requantize": tfl_convert.lower_requantize,
    "MaxPool": pool.lower_maxpool,  # exact (a max of integers) on every board
    "GlobalMaxPool": pool.lower_maxpool,
    **{op: movement.lower_movement for op in MOVEMENT_OPS},
}

TABLES: dict[str, dict[str, Callable]] = {"fixedpoint": _FAMILIES, "onnx": _ONNX, "tflite": _TFLITE}


def lowering_of(arithmetic: str, op: str) -> Entry | None:
    """The facts and lowering function of ``op`` under a board arithmetic; ``None`` for an op npu-sim does not
    know; under ``tflite``, raises a Problem naming the op and the ops it supports instead."""
    table = TABLES[arithmetic]
    if op not in table:
        if arithmetic == "tflite":
            supported = ", ".join(sorted(o for o in table if o in OPS))
            raise Problem(f"op {op} is not supported by the tflite arithmetic (board requantize = \"tflite\"); "
                          f"supported: {supported}")
        return None
    return Entry(OPS.get(op, OpFacts("convert")), table[op])
