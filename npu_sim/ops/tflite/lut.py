"""The ``tflite`` arithmetic's table ops: int8 LOGISTIC/TANH (a 256-entry table, ``kernels/tflite_lut8.py``),
int16 LOGISTIC/TANH (``kernels/tflite_sigmoid16.py``) and int8 HARD_SWISH (``kernels/tflite_hardswish.py``).
"""
from __future__ import annotations

import numpy as np

from kernels.tflite_fixedpoint import tfl_quantize_multiplier
from kernels.tflite_hardswish import reduce_multiplier16, tfl_hardswish
from kernels.tflite_lut8 import build_lut8, lut8_lookup
from kernels.tflite_sigmoid16 import input_rescale, tfl_sigmoid16

from npu_sim.ir import Node
from npu_sim.lowering.problem import Problem, Refusal
from npu_sim.ops import records
from npu_sim.ops.tflite.common import act_tensor, activation_range


def lower_lut(lowering, onode, args, out, act):
    x = act_tensor(args[0], f"{onode.op_type} input")
    if x.q.dtype == "int16" and out.q.dtype == "int16":
        return _lower_sigmoid16(lowering, onode, x, out, act)
    if x.q.dtype != "int8" or out.q.dtype != "int8":
        raise Problem(f"TFLite computes {onode.op_type} int8 -> int8 or int16 -> int16, not {x.q.dtype} -> "
                       f"{out.q.dtype}")
    lo, hi = activation_range(out.q, act)
    table = build_lut8(onode.op_type, x.q.scale, int(x.q.zero_point), out.q.scale, int(out.q.zero_point), lo, hi)
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_lut, {},
                {"table": "256 entries"}, tables=records.tables({"table": table}))


def _run_lut(node, inputs, ctx):
    return [lut8_lookup(inputs[0], node.tables.main)]


def _lower_sigmoid16(lowering, onode, x, out, act):
    """TFLite's int16 LOGISTIC/TANH reference kernels (``kernels/tflite_sigmoid16.py``); LiteRT's prepare
    requires zero points 0 and the output scale 2**-15."""
    if int(x.q.zero_point) != 0 or int(out.q.zero_point) != 0 or np.float32(out.q.scale) != np.float32(2.0 ** -15):
        raise Refusal(f"TFLite's int16 {onode.op_type} needs zero points 0 and output scale 2**-15 (LiteRT refuses "
                       f"others at prepare time); got input zp {int(x.q.zero_point)}, output scale "
                       f"{float(out.q.scale):g} zp {int(out.q.zero_point)}")
    if act is not None:
        raise Problem(f"TFLite's int16 {onode.op_type} has no fused activation")
    mult, ls = input_rescale(onode.op_type, float(x.q.scale))
    if not 0 < mult <= 32767:
        raise Problem(f"input scale {float(x.q.scale):g} is too large for TFLite's int16 {onode.op_type}")
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_sigmoid16,
                {"fn": onode.op_type, "mult": mult, "ls": ls}, {"table": "256-entry sigmoid table, interpolated"})


def _run_sigmoid16(node, inputs, ctx):
    p = node.params
    return [tfl_sigmoid16(inputs[0], p["fn"], p["mult"], p["ls"])]


def hardswish_params(s_in, s_out):
    """TFLite HardSwishPrepare (float32): (M_out16, e_out, M_relu16, e_relu)."""
    f32 = np.float32
    hires = f32(f32(1.0 / 128.0) * f32(s_in))
    m_out, e_out = tfl_quantize_multiplier(float(f32(hires / f32(s_out))))
    m_relu, e_relu = tfl_quantize_multiplier(float(f32(hires / f32(f32(3.0) / f32(32768.0)))))
    return reduce_multiplier16(m_out), e_out, reduce_multiplier16(m_relu), e_relu


def lower_hardswish(lowering, onode, args, out, act):
    """TFLite's int8 HARD_SWISH (``kernels/tflite_hardswish.py``); TFLite has no int16 HARD_SWISH."""
    x = act_tensor(args[0], "HardSwish input")
    if x.q.dtype != "int8" or out.q.dtype != "int8" or act is not None:
        raise Problem("TFLite computes HardSwish int8 -> int8 only (no 16x8 HARD_SWISH, no fused activation)")
    m_out, e_out, m_relu, e_relu = hardswish_params(x.q.scale, out.q.scale)
    if e_out > 0:  # LiteRT: TF_LITE_ENSURE(output_multiplier_exponent <= 0)
        raise Refusal("LiteRT refuses this HardSwish at prepare time: output scale below input scale / 128")
    if e_out < -15 or not -15 <= e_relu <= 15:
        raise Problem("HardSwish scales outside the range TFLite's 16-bit arithmetic handles")
    p = {"in_zp": int(x.q.zero_point), "out_zp": int(out.q.zero_point), "m_out": m_out, "e_out": e_out,
         "m_relu": m_relu, "e_relu": e_relu}
    return Node(lowering.node_name(onode), "HardSwish", [x.name], [out.name], _run_hardswish, p)


def _run_hardswish(node, inputs, ctx):
    p = node.params
    return [tfl_hardswish(inputs[0], p["in_zp"], p["out_zp"], p["m_out"], p["e_out"], p["m_relu"], p["e_relu"])]
