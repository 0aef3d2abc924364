"""The ``tflite`` arithmetic's SOFTMAX (``kernels/tflite_softmax.py``).
"""
from __future__ import annotations

import numpy as np

from kernels.tflite_softmax import (softmax8_params, softmax16_params, softmax16_tables, tfl_softmax8,
                                    tfl_softmax16)

from npu_sim.ir import Node
from npu_sim.lowering.problem import Problem, Refusal, Unsimulated
from npu_sim.ops import records
from npu_sim.ops.common import attrs
from npu_sim.ops.tflite.common import act_tensor


def _output_refusal(lowering, out, dtype: str, needs: str) -> Refusal:
    """A SOFTMAX output quantized unlike TFLite's fixed one: LiteRT refuses it at prepare; Vela 5.2 compiles it
    (its NPU decomposition rescales to any output quantization), which npu-sim does not simulate."""
    got = f"scale {float(out.q.scale):.6g}, zero point {int(out.q.zero_point)}"
    if lowering.npu_compiled:
        return Unsimulated(f"its {dtype} output has {got}; TFLite's SOFTMAX needs {needs} (LiteRT refuses others "
                           f"at prepare time), Vela 5.2 compiles it into NPU operations ending in a rescale: npu-sim "
                           f"does not simulate that rescale (quantize the Softmax output at {needs.split(' and')[0]})")
    return Refusal(f"TFLite's {dtype} SOFTMAX needs output scale {needs} (LiteRT refuses others at prepare time; its "
                   f"output has {got})")


def lower_softmax(lowering, onode, args, out, act):
    """TFLite SOFTMAX (beta 1) over the last axis: int8 -> int8 (gemmlowp fixed point) or int16 -> int16 (exp and
    reciprocal tables), ``kernels/tflite_softmax.py``. LiteRT's prepare fixes the output quantization."""
    x = act_tensor(args[0], "Softmax input")
    rank = len(x.shape)
    if int(attrs(onode).get("axis", -1)) % rank != rank - 1:
        raise Problem("TFLite's SOFTMAX normalizes the last axis only")
    if act is not None:
        raise Problem("TFLite's SOFTMAX has no fused activation")
    f32 = np.float32
    if x.q.dtype == "int8" and out.q.dtype == "int8":
        if int(out.q.zero_point) != -128 or f32(out.q.scale) != f32(1 / 256):
            raise _output_refusal(lowering, out, "int8", "1/256 and zero point -128")
        real = float(f32(x.q.scale)) * 2.0 ** 26
        smallest = 1.0
        if not real > 1.0 and lowering.npu_compiled and real >= 0.5:
            # Vela decomposes the softmax into NPU ops; its exp table takes the factor down to 0.5 (left shift 0)
            smallest = 0.5 - 2.0 ** -60
            lowering.hazard(f"Softmax input scale {float(x.q.scale):.6g} is almost empty (beta * scale * 2**26 = "
                            f"{real:.6g}, not above 1: LiteRT's reference kernel aborts on it): Vela's decomposition "
                            f"takes it (left shift 0); simulated as TFLite's int8 algorithm with that scaling, "
                            f"not verified against an Ethos-U run")
        elif not real > 1.0:
            raise Refusal(f"input scale {float(x.q.scale):.6g} too small for TFLite's int8 SOFTMAX (beta * scale * "
                          f"2**26 = {real:.6g} must exceed 1; LiteRT's reference kernel aborts on it"
                          + ("; nor does Vela 5.2 compile it: its exp table needs at least 0.5, below it "
                             "needs a negative shift and raises)" if lowering.npu_compiled else ")"))
        m, ls, diff_min = softmax8_params(float(x.q.scale), smallest=smallest)
        p = {"wide": False, "m": m, "ls": ls, "diff_min": diff_min}
        tables = None  # computed in fixed point, no tables
    elif x.q.dtype == "int16" and out.q.dtype == "int16":
        if int(x.q.zero_point) != 0 or int(out.q.zero_point) != 0 or abs(float(out.q.scale) * 32768 - 1) > 1e-3:
            raise _output_refusal(lowering, out, "int16", "1/32768 and zero points 0")
        m, sh = softmax16_params(float(x.q.scale))
        exp_lut, recip_lut = softmax16_tables()
        p = {"wide": True, "m": m, "s": sh}
        tables = records.tables({"exp": exp_lut, "recip": recip_lut})  # the run reads its tables there
    else:
        raise Problem(f"TFLite computes SOFTMAX int8 -> int8 or int16 -> int16 here, not {x.q.dtype} -> "
                       f"{out.q.dtype}")
    return Node(lowering.node_name(onode), "Softmax", [x.name], [out.name], _run_softmax, p, {"axis": rank - 1},
                tables=tables)


def _run_softmax(node, inputs, ctx):
    p = node.params
    x = inputs[0]
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    if p["wide"]:
        y = tfl_softmax16(rows, p["m"], p["s"], node.tables.entries["exp"], node.tables.entries["recip"])
    else:
        y = tfl_softmax8(rows, p["m"], p["ls"], p["diff_min"])
    return [y.reshape(x.shape)]
