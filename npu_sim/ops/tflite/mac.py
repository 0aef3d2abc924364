"""The ``tflite`` arithmetic's multiply-accumulate ops: Conv / depthwise Conv, ConvTranspose (TRANSPOSE_CONV:
the same per-channel requantization), Gemm, MatMul by constant weights. The accumulator is ``ops.mac``'s; the
requantization TFLite's: per output channel ``(M, s) = QuantizeMultiplier(sx*sw[c]/sy)`` (float64 of the float32
scales); 8-bit: int32 accumulator + int32 bias, ``MultiplyByQuantizedMultiplier`` (double rounding); 16x8: int64
accumulator + int64 bias and the int64 overload (16-bit reduced multiplier) (``kernels/tflite_requantize.py``).
"""
from __future__ import annotations

import numpy as np

from kernels.conv2d import conv2d_acc
from kernels.conv_transpose2d import conv_transpose2d_acc
from kernels.gemm import int_matmul
from kernels.tflite_requantize import tfl_requantize

from npu_sim.ir import Node, Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import mac, records
from npu_sim.ops.tflite.common import multipliers, out_params


def _tflite_node(lowering, onode, acc: mac.Accumulation, out, act, run):
    """The node of ``acc`` (``ops.mac``'s accumulation) with TFLite's requantization to ``out``."""
    x_q, w_q, n = acc.x_q, acc.w_q, acc.n_channels
    if x_q.bits > 16 or w_q.bits != 8:
        raise Problem(f"TFLite computes {x_q.dtype} x {w_q.dtype}: only int8 x int8 and int16 x int8 (16x8) exist")
    name = lowering.node_name(onode)
    bias = (np.zeros(n, np.int64) if acc.bias is None
            else np.broadcast_to(np.asarray(acc.bias, np.int64), (n,)).copy())
    acc_bits = lowering.arith.accumulator_bits(x_q.bits, w_q.bits)
    # TFLite's 16x8 ops have zero zero points; a non-zero one (onnxruntime A16W8 models) is subtracted exactly
    sw = np.broadcast_to(np.asarray(acc.w_scale, np.float32), (n,)).astype(np.float64)
    real = np.float64(np.float32(x_q.scale)) * sw / np.float64(np.float32(out.q.scale))
    o = out_params(lowering, out, act, name)
    wide = x_q.bits == 16
    mult, shift = multipliers(real, 7 if wide else 30)
    if wide and np.abs(bias).max(initial=0) >= 2 ** 47:
        raise Problem("its 16x8 bias leaves [-2**47, 2**47), the accumulator TFLite's 16x8 kernels keep (is the "
                      "bias quantized at input scale x weight scale?)")
    # the requantization and the weights live in the records only (the run reads them there)
    p = dict(acc.params, _out_dtype=o["_out_dtype"], tfl_wide=wide)
    return Node(name, acc.op, acc.inputs, [out.name], run, p, acc.shown,
                requant=records.tflite_requant(mult, shift, o["out_zp"], o["qmin"], o["qmax"], bias, acc.in_zp),
                weights=acc.weights, geometry=acc.geometry, accumulator=records.accumulator(acc_bits),
                clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=("bias", "acc_bits", "out_zp", "qmin", "qmax", "tfl_wide", "tfl_mult", "tfl_shift"))


def _requant(node, acc, outer, channels, inner, out=None):
    p, rq = node.params, node.requant
    acc3 = np.ascontiguousarray(acc.reshape(outer, channels, inner), dtype=np.int64)
    if out is None:
        out = np.empty(acc3.shape, p["_out_dtype"])
    return tfl_requantize(acc3, rq.bias, rq.mult, rq.shift, p["tfl_wide"], rq.out_zp, rq.qmin, rq.qmax, out=out)


def _run_conv(node, inputs, ctx):
    p = node.params
    x = np.ascontiguousarray(inputs[0])
    if p["_is1d"]:
        x = x[:, :, None, :]
    acc = conv2d_acc(x, p["x_zp"], node.weights.data, p["stride"], p["pads"], p["dilation"], p["groups"])
    n, c = acc.shape[:2]
    return [_requant(node, acc, n, c, acc.size // (n * c)).reshape(ctx.shape_of(node.outputs[0]))]


def _run_gemm(node, inputs, ctx):
    p = node.params
    a = inputs[0].T if p["trans_a"] else inputs[0]
    acc = int_matmul(np.ascontiguousarray(a.astype(np.int32) - p["x_zp"]), node.weights.data)
    return [_requant(node, acc, acc.shape[0], acc.shape[1], 1).reshape(acc.shape)]


def _run_matmul(node, inputs, ctx):
    p = node.params
    a = inputs[0].astype(np.int32) - p["a_zp"]
    acc = int_matmul(np.ascontiguousarray(a.reshape(-1, a.shape[-1])), node.weights.data)
    return [_requant(node, acc, acc.shape[0], acc.shape[1], 1).reshape(tuple(ctx.shape_of(node.outputs[0])))]


def lower_conv(lowering, onode, args, out, act):
    acc = mac.accumulate_conv(lowering, onode, args)
    acc.n_channels = acc.weights.data.shape[0]
    return _tflite_node(lowering, onode, acc, out, act, _run_conv)


def lower_gemm(lowering, onode, args, out, act):
    acc = mac.accumulate_gemm(lowering, onode, args)
    acc.n_channels = acc.weights.data.shape[1]
    return _tflite_node(lowering, onode, acc, out, act, _run_gemm)


def lower_matmul(lowering, onode, args, out, act):
    a_t, b_t = args[:2]
    if not (isinstance(b_t, Tensor) and b_t.is_const and not a_t.is_const and b_t.data.ndim == 2):
        raise Problem("the tflite arithmetic supports MatMul by constant 2-D weights only (TFLite FULLY_CONNECTED)")
    acc = mac.accumulate_matmul(lowering, onode, args)
    acc.n_channels = acc.weights.data.shape[1]  # per-tensor weights too: TFLite's multiplier per output column
    return _tflite_node(lowering, onode, acc, out, act, _run_matmul)


def _run_conv_transpose(node, inputs, ctx):
    p = node.params
    acc = conv_transpose2d_acc(np.ascontiguousarray(inputs[0]), p["x_zp"], node.weights.data, p["stride"], p["pads"],
                               p["dilation"], p["groups"], p["out_hw"])
    n, c = acc.shape[:2]
    return [_requant(node, acc, n, c, acc.size // (n * c)).reshape(acc.shape)]


def lower_conv_transpose(lowering, onode, args, out, act):
    acc = mac.accumulate_conv_transpose(lowering, onode, args, out.shape)
    return _tflite_node(lowering, onode, acc, out, act, _run_conv_transpose)
