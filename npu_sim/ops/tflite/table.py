"""The ``tflite`` arithmetic's EXP: TFLite's LUTPopulate tables, int8 (256 entries, ``kernels/tflite_lut8.py``)
and int16 (513 entries over the input's int16 range, interpolated, ``kernels/tflite_lut16.py``; LiteRT's prepare
requires zero points 0)."""
from __future__ import annotations

import math

import numpy as np

from kernels.tflite_lut16 import lut16_apply, populate_lut16
from kernels.tflite_lut8 import build_lut8, lut8_lookup

from npu_sim.ir import Node
from npu_sim.lowering.problem import Problem, Refusal
from npu_sim.ops import records
from npu_sim.ops.tflite.common import act_tensor, activation_range

# the float type of LiteRT 2.15's int16 EXP table: measured on every int16 input at 4 input scales (float64
# differs in 127 of 65536 outputs at one)
FTYPE16 = np.float32


def _exp16(v):
    return FTYPE16(math.exp(float(v))) if float(v) < 89.0 else FTYPE16(np.inf)  # past float32's range


def lower_exp(lowering, onode, args, out, act):
    x = act_tensor(args[0], "Exp input")
    if act is not None:
        raise Problem("TFLite's EXP has no fused activation")
    if x.q.dtype == "int8" and out.q.dtype == "int8":
        table = build_lut8("Exp", x.q.scale, int(x.q.zero_point), out.q.scale, int(out.q.zero_point),
                           *activation_range(out.q, None))
        return Node(lowering.node_name(onode), "Exp", [x.name], [out.name], _run_lut8, {},
                    {"table": "256 entries"}, tables=records.tables({"table": table}))
    if x.q.dtype == "int16" and out.q.dtype == "int16":
        if int(x.q.zero_point) != 0 or int(out.q.zero_point) != 0:
            raise Refusal("TFLite's int16 EXP needs zero points 0 (LiteRT refuses others at prepare time)")
        try:
            table = populate_lut16(_exp16, x.q.scale, 0, out.q.scale, 0, FTYPE16)
        except ValueError:
            raise Problem(f"input scale {float(x.q.scale):.6g}, output scale {float(out.q.scale):.6g}: exp at the "
                          f"top of the int16 input range overflows float32 in TFLite's int16 EXP table, which is "
                          f"undefined there (re-calibrate)") from None
        return Node(lowering.node_name(onode), "Exp", [x.name], [out.name], _run_lut16, {},
                    {"table": "513 entries, interpolated"}, tables=records.tables({"table": table}))
    raise Problem(f"TFLite computes EXP int8 -> int8 or int16 -> int16, not {x.q.dtype} -> {out.q.dtype}")


def _run_lut8(node, inputs, ctx):
    return [lut8_lookup(inputs[0], node.tables.main)]


def _run_lut16(node, inputs, ctx):
    return [lut16_apply(inputs[0], node.tables.main)]
