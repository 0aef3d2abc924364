"""The ``tflite`` arithmetic's elementwise ops: Add/Sub (``kernels/tflite_add.py``), Mul
(``kernels/tflite_mul.py``), a Relu/Clip TFLite did not fuse (a rescale) and Concat.
"""
from __future__ import annotations

import numpy as np

from kernels.tflite_add import tfl_add
from kernels.tflite_mul import tfl_mul

from npu_sim.ir import Node, Operands
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import activation_bounds, attrs
from npu_sim.ops.tflite.common import (activation_names, act_tensor, apply_rescale, float32_of, input_value,
                                       out_params, quantize_multiplier, rescale_params, rescale_prepared,
                                       run_rescale)


def lower_add(lowering, onode, args, out, act):
    a = act_tensor(args[0], "Add/Sub input A")
    b = act_tensor(args[1], "Add/Sub input B")
    bits = max(a.q.bits, b.q.bits, out.q.bits)
    if bits > 16:
        raise Problem("TFLite Add/Sub exists for int8 and int16 only")
    ls = lowering.arith.add_left_shift(bits)
    twice_max = 2.0 * max(float32_of(a.q.scale), float32_of(b.q.scale))
    m1, s1 = quantize_multiplier(float32_of(a.q.scale) / twice_max)
    m2, s2 = quantize_multiplier(float32_of(b.q.scale) / twice_max)
    mo, so = quantize_multiplier(twice_max / float32_of(np.float32(2.0 ** ls) * np.float32(out.q.scale)))
    o = out_params(lowering, out, act)
    # the operands, the left shift and the clamp live in the records only (the run reads them there)
    p = {"tfl_mult": (m1, m2, mo), "tfl_shift": (s1, s2, so), "subtract": onode.op_type == "Sub",
         "out_zp": o["out_zp"], "_out_dtype": o["_out_dtype"]}
    return Node(lowering.node_name(onode), onode.op_type, activation_names([a, b]), [out.name], _run_add, p,
                operands=Operands(a, b, ls), clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=("zp", "tfl_mult", "tfl_shift", "left_shift", "subtract", "out_zp", "qmin", "qmax"))


def _run_add(node, inputs, ctx):
    p, o = node.params, node.operands
    x, i = input_value(o.a, inputs, 0)
    y, _ = input_value(o.b, inputs, i)
    (m1, m2, mo), (s1, s2, so) = p["tfl_mult"], p["tfl_shift"]
    return [tfl_add(x, y, *_zero_points(o), m1, s1, m2, s2, mo, so, o.left_shift, p["subtract"], p["out_zp"],
                    node.clamp[0], node.clamp[1], p["_out_dtype"])]


def _zero_points(o) -> tuple[int, int]:
    """The zero points of the ``operands`` record's two tensors."""
    return int(o.a.q.zero_point), int(o.b.q.zero_point)


def lower_mul(lowering, onode, args, out, act):
    a = act_tensor(args[0], "Mul input A")
    b = act_tensor(args[1], "Mul input B")
    real = np.float32(np.float32(a.q.scale) * np.float32(b.q.scale)) / np.float32(out.q.scale)  # float32 in TFLite
    m, s = quantize_multiplier(float(np.float32(real)))
    o = out_params(lowering, out, act)
    # the operands and the requantization live in the records only (the run reads them there)
    return Node(lowering.node_name(onode), "Mul", activation_names([a, b]), [out.name], _run_mul,
                {"_out_dtype": o["_out_dtype"]},
                requant=records.tflite_requant(m, s, o["out_zp"], o["qmin"], o["qmax"]), operands=Operands(a, b),
                clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=("zp", "tfl_mult", "tfl_shift", "out_zp", "qmin", "qmax"))


def _run_mul(node, inputs, ctx):
    p, rq = node.params, node.requant
    x, i = input_value(node.operands.a, inputs, 0)
    y, _ = input_value(node.operands.b, inputs, i)
    return [tfl_mul(x, y, *_zero_points(node.operands), int(rq.mult[0]), int(rq.shift[0]), rq.out_zp, rq.qmin,
                    rq.qmax, p["_out_dtype"])]


def lower_clamp(lowering, onode, args, out, act):
    """A Relu/Clip that TFLite did not fuse: RELU/RELU6 rescale their input (ReluX, float32 scale ratio)."""
    x = act_tensor(args[0], f"{onode.op_type} input")
    bounds = activation_bounds(lowering, onode)
    if act is not None:
        bounds = (max(bounds[0], act[0]), min(bounds[1], act[1]))
    p, recs = rescale_prepared(x.q, out, bounds, float32_ratio=True, ctx=lowering)
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], run_rescale, p, **recs)


def lower_concat(lowering, onode, args, out, act):
    """TFLite CONCATENATION copies integers (its quantizer gives every input the output's quantization); an
    input quantized differently is rescaled as TFLite's QUANTIZE would."""
    axis = int(attrs(onode).get("axis", 0)) % len(out.shape)
    parts = []
    for i, arg in enumerate(args):
        t = act_tensor(arg, f"Concat input {i}")
        same = t.q.same_as(out.q) and act is None
        parts.append((t, None if same else rescale_params(t.q, out, act, float32_ratio=False)))
    p = {"axis": axis, "_parts": parts, "_out_dtype": out.q.np_dtype}
    return Node(lowering.node_name(onode), "Concat", activation_names([t for t, _ in parts]), [out.name], _run_concat,
                p, {"axis": axis})


def _run_concat(node, inputs, ctx):
    p = node.params
    pieces, i = [], 0
    for t, rq in p["_parts"]:
        v, i = input_value(t, inputs, i)
        pieces.append((v if rq is None else apply_rescale(v, rq)).astype(p["_out_dtype"], copy=False))
    return [np.concatenate(pieces, axis=p["axis"])]
