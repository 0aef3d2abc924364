"""The ``tflite`` arithmetic's multiply-accumulate ops: Conv / depthwise Conv, Gemm, MatMul by constant
weights. The accumulator is ``ops.mac``'s; the requantization TFLite's: per output channel
``(M, s) = QuantizeMultiplier(sx*sw[c]/sy)`` (float64 of the float32 scales); 8-bit: int32 accumulator + int32
bias, ``MultiplyByQuantizedMultiplier`` (double rounding); 16x8: int64 accumulator + int64 bias and the int64
overload (16-bit reduced multiplier) (``kernels/tflite_requantize.py``).
"""
from __future__ import annotations

import numpy as np

from kernels.conv2d import conv2d_acc
from kernels.gemm import int_matmul
from kernels.tflite_requantize import tfl_requantize

from npu_sim.ir import Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import mac
from npu_sim.ops.tflite.common import multipliers, out_params


def _mac_tflite(lowering, node, x_q, w_q, out, n_channels):
    """Turn a node lowered by ``ops.mac`` into TFLite's requantization (same accumulator, TFLite's rescale)."""
    p = node.params
    if x_q.bits > 16 or w_q.bits != 8:
        raise Problem(f"TFLite computes {x_q.dtype} x {w_q.dtype}: only int8 x int8 and int16 x int8 (16x8) exist")
    wide = x_q.bits == 16
    # TFLite's 16x8 ops have zero zero points; a non-zero one (onnxruntime A16W8 models) is subtracted exactly
    sw = np.broadcast_to(np.asarray(w_q.scale, np.float32), (n_channels,)).astype(np.float64)
    real = np.float64(np.float32(x_q.scale)) * sw / np.float64(np.float32(out.q.scale))
    p["tfl_mult"], p["tfl_shift"] = multipliers(real)
    p["tfl_wide"] = wide
    p.update(out_params(lowering, out, node_act(node), node.name))
    for key in ("scale", "mult", "shift"):  # ops.mac's own requantization, prepared at its lowering
        p.pop(key, None)
    node.run = _RUN[node.op]
    return node


def node_act(node):
    return node.params.get("_tfl_act")


def _requant(node, acc, outer, channels, inner, out=None):
    p = node.params
    acc3 = np.ascontiguousarray(acc.reshape(outer, channels, inner), dtype=np.int64)
    if out is None:
        out = np.empty(acc3.shape, p["_out_dtype"])
    return tfl_requantize(acc3, p["bias"], p["tfl_mult"], p["tfl_shift"], p["tfl_wide"], p["out_zp"], p["qmin"],
                          p["qmax"], out=out)


def _run_conv(node, inputs, ctx):
    p = node.params
    x = np.ascontiguousarray(inputs[0])
    if p["_is1d"]:
        x = x[:, :, None, :]
    acc = conv2d_acc(x, p["x_zp"], p["_w"], p["stride"], p["pads"], p["dilation"], p["groups"])
    n, c = acc.shape[:2]
    return [_requant(node, acc, n, c, acc.size // (n * c)).reshape(ctx.shape_of(node.outputs[0]))]


def _run_gemm(node, inputs, ctx):
    p = node.params
    a = inputs[0].T if p["trans_a"] else inputs[0]
    acc = int_matmul(np.ascontiguousarray(a.astype(np.int32) - p["x_zp"]), p["_w"])
    return [_requant(node, acc, acc.shape[0], acc.shape[1], 1).reshape(acc.shape)]


def _run_matmul(node, inputs, ctx):
    p = node.params
    a = inputs[0].astype(np.int32) - p["a_zp"]
    acc = int_matmul(np.ascontiguousarray(a.reshape(-1, a.shape[-1])), p["_w"])
    return [_requant(node, acc, acc.shape[0], acc.shape[1], 1).reshape(tuple(ctx.shape_of(node.outputs[0])))]


_RUN = {"Conv": _run_conv, "Gemm": _run_gemm, "MatMul": _run_matmul}


def lower_conv(lowering, onode, args, out, act):
    node = mac.lower_conv(lowering, onode, args, out, act)
    node.params["_tfl_act"] = act
    return _mac_tflite(lowering, node, args[0].q, args[1].q, out, node.params["_w"].shape[0])


def lower_gemm(lowering, onode, args, out, act):
    node = mac.lower_gemm(lowering, onode, args, out, act)
    node.params["_tfl_act"] = act
    return _mac_tflite(lowering, node, args[0].q, args[1].q, out, node.params["_w"].shape[1])


def lower_matmul(lowering, onode, args, out, act):
    a_t, b_t = args[:2]
    if not (isinstance(b_t, Tensor) and b_t.is_const and not a_t.is_const and b_t.data.ndim == 2):
        raise Problem("the tflite arithmetic supports MatMul by constant 2-D weights only (TFLite FULLY_CONNECTED)")
    node = mac.lower_matmul(lowering, onode, args, out, act)
    node.params["_tfl_act"] = act
    n = node.params["_w"].shape[1]
    if not node.params["_per_col"]:
        node.params["bias"] = np.zeros(n, np.int64)
    node.params["a_zp"] = int(a_t.q.zero_point)
    return _mac_tflite(lowering, node, a_t.q, b_t.q, out, n)
