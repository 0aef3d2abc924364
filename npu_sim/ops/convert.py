"""The program's own conversions: Quantize (the model input's QuantizeLinear) and Requantize (a QuantizeLinear
applied to a dequantized integer tensor with different parameters, e.g. onnxruntime's A8/A16 convert chains).

Quantize runs as ONNX defines it on every board: ``saturate(round_half_even(x / scale) + zp)`` in float32 —
it is the host's input stub, before any integer reaches the board.
Requantize: fixed point ``y = R(q - zi, si/so) + zo``; on the ``onnx`` arithmetic
``QuantizeLinear(DequantizeLinear(q))``.
"""
from __future__ import annotations

import numpy as np

from kernels.quantize_linear import OUT_DTYPES, quantize_linear

from npu_sim.ir import Node, Tensor
from npu_sim.ops.common import record_params, rescale_prepared
from npu_sim.ops.elementwise import scalar_rescale


def lower_quantize(lowering, onode, src: Tensor, out: Tensor) -> Node:
    return Node(lowering.node_name(onode), "Quantize", [src.name], [out.name], _run_quantize, {"_q": out.q},
                {"scale": float(out.q.scale), "zero_point": int(out.q.zero_point)})


def _run_quantize(node, inputs, ctx):
    q, x = node.params["_q"], inputs[0]
    if q.per_tensor and x.dtype == np.float32 and q.np_dtype in OUT_DTYPES:  # the same float32 steps, one pass
        out = np.empty(x.size, q.np_dtype)
        quantize_linear(np.ascontiguousarray(x).reshape(-1), np.float32(q.scale), int(q.zero_point), q.qmin, q.qmax,
                        out)
        return [out.reshape(x.shape)]
    return [q.quantize(x)]


def lower_requantize(lowering, onode, src: Tensor, out: Tensor) -> Node:
    p, recs = rescale_prepared(lowering, src.q, out)
    return Node(lowering.node_name(onode), "Requantize", [src.name], [out.name], _run_requantize, p, **recs)


def lower_requantize_onnx(lowering, onode, src: Tensor, out: Tensor) -> Node:
    """The ``onnx`` arithmetic: ``QuantizeLinear(DequantizeLinear(q))`` in float32."""
    return Node(lowering.node_name(onode), "Requantize", [src.name], [out.name], _run_requantize,
                {"_src": src.q, "_dst": out.q})


def _run_requantize(node, inputs, ctx):
    p = node.params
    if "_src" in p:
        return [p["_dst"].quantize(p["_src"].dequantize(inputs[0]))]
    return [scalar_rescale(node, ctx, inputs[0], record_params(node), node.memo)]
