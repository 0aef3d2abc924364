"""The program's own conversions: Quantize (the model input's QuantizeLinear) and Requantize (a QuantizeLinear
applied to a dequantized integer tensor with different parameters, e.g. onnxruntime's A8/A16 convert chains).

Quantize runs as ONNX defines it on every board: ``saturate(round_half_even(x / scale) + zp)`` in float32 —
it is the host's input stub, before any integer reaches the board.
Requantize: fixed point ``y = R(q - zi, si/so) + zo``; on the ``onnx`` arithmetic ``QuantizeLinear(DequantizeLinear(q))``.
"""
from __future__ import annotations

import numpy as np

from ..ir import Node, Tensor
from .common import fixed_multipliers, output_params, requantize_acc


def lower_quantize(lowering, onode, src: Tensor, out: Tensor) -> Node:
    return Node(lowering.node_name(onode), "Quantize", [src.name], [out.name], _run_quantize, {"_q": out.q},
                {"scale": float(out.q.scale), "zero_point": int(out.q.zero_point)})


def _run_quantize(node, inputs, ctx):
    return [node.params["_q"].quantize(inputs[0])]


def lower_requantize(lowering, onode, src: Tensor, out: Tensor) -> Node:
    p = {"x_zp": int(src.q.zero_point), "bias": np.zeros(1, np.int64), "acc_bits": 64}
    if lowering.arith.fixedpoint:
        p["mult"], p["shift"] = fixed_multipliers(np.array([float(src.q.scale) / float(out.q.scale)]),
                                                  lowering.arith.multiplier_bits)
    else:
        p["_src"], p["_dst"] = src.q, out.q
    p.update(output_params(lowering, out, None))
    return Node(lowering.node_name(onode), "Requantize", [src.name], [out.name], _run_requantize, p)


def _run_requantize(node, inputs, ctx):
    p = node.params
    x = inputs[0]
    if "_src" in p:
        return [p["_dst"].quantize(p["_src"].dequantize(x))]
    acc = x.astype(np.int64) - p["x_zp"]
    return [requantize_acc(node, ctx, acc, 1, 1, acc.size).reshape(x.shape)]
