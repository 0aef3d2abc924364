"""Reading a QDQ ONNX graph: the QuantizeLinear/DequantizeLinear predicates, its constants, a node's quantization.

The one set of these helpers, for the float-model derivation (``npu_sim.qdq.float_model``) and the rewriting of
a model's quantization (``npu_sim.qdq.recalibrate``).
"""
from __future__ import annotations

import numpy as np

from npu_sim.errors import FloatReferenceError

QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"
# QuantizeLinear/DequantizeLinear count in the standard domain and in com.microsoft (16-bit before opset 21).
QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")


def is_op(node, op: str) -> bool:
    """``node`` is an ``op`` of the standard or the com.microsoft domain."""
    return node.op_type == op and node.domain in QDQ_DOMAINS


def onnx_opset(model) -> int:
    """The model's standard-domain opset version (0 when it imports none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def initializer_values(graph) -> dict[str, np.ndarray]:
    """The graph's initializers as numpy arrays, by name."""
    from onnx import numpy_helper
    return {i.name: numpy_helper.to_array(i) for i in graph.initializer}


def const_values(graph) -> dict[str, np.ndarray]:
    """The graph's constants: its initializers and the outputs of its Constant nodes (``value``), by name."""
    from onnx import numpy_helper
    vals = initializer_values(graph)
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value":
                    vals[n.output[0]] = numpy_helper.to_array(a.t)
    return vals


def qdq_params(node, consts):
    """(scale float32, zero point or None, axis) of a QuantizeLinear/DequantizeLinear with constant parameters;
    blocked quantization (``block_size``) is refused."""
    scale = consts[node.input[1]].astype(np.float32)
    zp = consts[node.input[2]] if len(node.input) > 2 and node.input[2] else None
    axis, block = 1, 0
    for a in node.attribute:
        if a.name == "axis":
            axis = a.i
        elif a.name == "block_size":
            block = a.i
    if block:
        raise FloatReferenceError(f"node {node.name!r}: blocked quantization (block_size) is not supported by the "
                                  f"derived float reference; pass --float FLOAT.onnx")
    return scale, zp, axis


def _bshape(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    if v.ndim == 0 or v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return v.reshape(shape)


def dequantize_const(node, x: np.ndarray, consts) -> np.ndarray:
    """What DequantizeLinear ``node`` makes of the constant ``x``: (x - zero point) * scale, float32."""
    scale, zp, axis = qdq_params(node, consts)
    z = np.zeros((), np.int64) if zp is None else zp.astype(np.int64)
    return ((x.astype(np.int64) - _bshape(z, x.ndim, axis)).astype(np.float32)
            * _bshape(scale, x.ndim, axis)).astype(np.float32)


def quantize_const(node, x: np.ndarray, consts) -> np.ndarray:
    """What QuantizeLinear ``node`` makes of the constant ``x``: round(x / scale) + zero point, saturated."""
    scale, zp, axis = qdq_params(node, consts)
    dt = np.dtype(zp.dtype) if zp is not None else np.dtype(np.uint8)
    info = np.iinfo(dt)
    z = np.zeros((), np.int64) if zp is None else zp.astype(np.int64)
    v = np.rint(x.astype(np.float32) / _bshape(scale, x.ndim, axis)) + _bshape(z, x.ndim, axis)
    return np.clip(v, info.min, info.max).astype(dt)
