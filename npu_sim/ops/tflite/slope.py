"""The ``tflite`` arithmetic's LeakyRelu and PRelu (``kernels/tflite_slope.py``), Max and Min
(``kernels/tflite_maxmin.py``).

LEAKY_RELU and PRELU take two factors, as TFLite's Prepare computes them (float32 products and quotients, then
QuantizeMultiplier): the identity ``in_scale / out_scale`` for inputs at or above the zero point, and for the others
``in_scale * alpha / out_scale`` (LEAKY_RELU's float alpha) or ``in_scale * alpha_scale / out_scale`` times the
integer ``alpha - alpha_zp`` (PRELU's quantized alpha tensor; int8 only: LiteRT has no int16 PRELU). MAXIMUM and
MINIMUM compare integers: TFLite requires its inputs and output to share one quantization, others are refused.
ABS is the two-slope kernel with one factor, ``in_scale / out_scale``, and alpha -1 (equal scales: the factor 1,
which ``MultiplyByQuantizedMultiplier`` applies exactly, as TFLite's copy without rescale).
"""
from __future__ import annotations

import numpy as np

from kernels.tflite_maxmin import tfl_maxmin
from kernels.tflite_slope import tfl_slope

from npu_sim.ir import Node, Operands
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import attrs
from npu_sim.ops.tflite.common import act_tensor, activation_names, input_value, out_params, quantize_multiplier

_F32 = np.float32


def _slope_params(lowering, x, out, act, negative: float) -> tuple[dict, tuple]:
    """The kernel's params and the output clamp."""
    m1, s1 = quantize_multiplier(float(_F32(_F32(x.q.scale) / _F32(out.q.scale))))
    m2, s2 = quantize_multiplier(negative)
    p = {"in_zp": int(x.q.zero_point), "tfl_mult": (m1, m2), "tfl_shift": (s1, s2)}
    o = out_params(lowering, out, act)
    p.update(o)
    return p, records.clamp(o["qmin"], o["qmax"])


def lower_leaky_relu(lowering, onode, args, out, act):
    x = act_tensor(args[0], "LeakyRelu input")
    alpha = _F32(attrs(onode).get("alpha", 0.01))
    if not alpha >= 0:
        raise Problem(f"LeakyRelu alpha {float(alpha):g}: TFLite's integer LEAKY_RELU needs alpha >= 0")
    p, clamp = _slope_params(lowering, x, out, act, float(_F32(_F32(_F32(x.q.scale) * alpha) / _F32(out.q.scale))))
    p.update({"_alpha": np.ones(1, np.int64), "alpha_zp": 0, "alpha": float(alpha)})
    return Node(lowering.node_name(onode), "LeakyRelu", [x.name], [out.name], _run_slope, p, clamp=clamp)


def lower_prelu(lowering, onode, args, out, act):
    x = act_tensor(args[0], "PRelu input")
    a = act_tensor(args[1], "PRelu slope")
    if x.q.bits != 8 or a.q.bits != 8:
        raise Problem(f"TFLite's PRELU computes int8 only (input {x.q.dtype}, alpha {a.q.dtype}): LiteRT has no "
                      f"16-bit PRELU")
    p, clamp = _slope_params(lowering, x, out, act, float(_F32(_F32(_F32(x.q.scale) * _F32(a.q.scale))
                                                                / _F32(out.q.scale))))
    p["alpha_zp"] = int(a.q.zero_point)  # the operands live in the ``operands`` record only
    return Node(lowering.node_name(onode), "PRelu", activation_names([x, a]), [out.name], _run_slope, p,
                operands=Operands(x, a), clamp=clamp)


def lower_abs(lowering, onode, args, out, act):
    """TFLite's ABS: ``out_zp + |x - in_zp|``, rescaled by ``in_scale / out_scale`` (float32) where the scales
    differ: the two slopes' kernel with one factor and alpha -1."""
    x = act_tensor(args[0], "Abs input")
    if x.q.bits == 16 and (int(x.q.zero_point) != 0 or int(out.q.zero_point) != 0):
        raise Problem("TFLite's int16 ABS needs zero points 0 (LiteRT refuses others at prepare time)")
    p, clamp = _slope_params(lowering, x, out, act, float(_F32(_F32(x.q.scale) / _F32(out.q.scale))))
    p.update({"_alpha": np.full(1, -1, np.int64), "alpha_zp": 0})
    return Node(lowering.node_name(onode), "Abs", [x.name], [out.name], _run_slope, p, clamp=clamp)


def _run_slope(node, inputs, ctx):
    p = node.params
    if node.operands is not None:  # PRelu: the slope is an operand
        x, i = input_value(node.operands.a, inputs, 0)
        alpha, _ = input_value(node.operands.b, inputs, i)
    else:
        x, alpha = inputs[0], p["_alpha"]
    (m1, m2), (s1, s2) = p["tfl_mult"], p["tfl_shift"]
    return [tfl_slope(x, alpha, p["in_zp"], p["alpha_zp"], m1, s1, m2, s2, p["out_zp"], p["qmin"], p["qmax"],
                      p["_out_dtype"])]


def lower_maxmin(lowering, onode, args, out, act):
    op = onode.op_type
    if len(args) != 2:
        raise Problem(f"{op} of {len(args)} inputs: TFLite's MAXIMUM/MINIMUM take two")
    ts = [act_tensor(arg, f"{op} input {i}") for i, arg in enumerate(args)]
    for i, t in enumerate(ts):
        if not t.q.same_as(out.q):
            raise Problem(f"{op} input {i} is quantized (scale {float(t.q.scale):.6g}, zero point "
                          f"{int(t.q.zero_point)}) unlike its output (scale {float(out.q.scale):.6g}, zero point "
                          f"{int(out.q.zero_point)}): TFLite's MAXIMUM/MINIMUM compare the integers as they are")
    p = {"maximum": op == "Max"}  # the operands live in the ``operands`` record only
    o = out_params(lowering, out, act)
    p.update(o)
    return Node(lowering.node_name(onode), op, activation_names(ts), [out.name], _run_maxmin, p,
                operands=Operands(ts[0], ts[1]), clamp=records.clamp(o["qmin"], o["qmax"]))


def _run_maxmin(node, inputs, ctx):
    p = node.params
    a, i = input_value(node.operands.a, inputs, 0)
    b, _ = input_value(node.operands.b, inputs, i)
    return [tfl_maxmin(a, b, p["maximum"], p["qmin"], p["qmax"], p["_out_dtype"])]
