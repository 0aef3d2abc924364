"""Variations of an Add/Sub of two activations, for ``explain``: what other arithmetics give on the same inputs.

With ``da = a - za``, ``db = b - zb`` (Python integers), ``s`` = +1 (Add) or -1 (Sub), ``L`` the board's Add left
shift, ``t = 2 max(sa, sb)``, and each value then offset by ``zy`` and clamped to the node's bounds:

* the three-stage fixed-point Add (``R(R(da << L, sa/t) + s R(db << L, sb/t), t/(2^L sy))``, the ``default``
  board's and TFLite's) with each rounding rule at every stage (the node's own multiplier/shift pairs, from its
  ``Operands`` record: made at the board's ``multiplier_bits``), and with TFLite's double rounding at every stage;
* the exact sum ``(da sa + s db sb) / sy`` rounded once, half to even and half up;
* LiteRT's optimized 16-bit Add: TFLite's Add with each input stage rounded once, ``(d << L) * M_t / 2**(31 - s)``
  ties toward +inf (one high multiply of the input shifted left by ``L + s``, no rounding shift), the output stage
  as TFLite's (measured: every element of every 16x8 ADD of LiteRT's optimized-kernel dumps of the zoo's networks);
* TFLite's Add with the input stages' rounding shift truncated toward -inf, ties to even or toward +inf;
* ONNX's definition in float32 (dequantize, add, quantize: round half to even);
* onnxruntime's QLinearAdd (float32 fused multiply-adds, ``kernels/ort_qladd.py``), for 8-bit Adds.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from kernels.fixedpoint import quantize_multiplier
from kernels.ort_qladd import ort_qladd
from kernels.tflite_fixedpoint import tfl_quantize_multiplier

from npu_sim.analysis.compare.rounding import ROUNDINGS, double_rounding, floor_shift, half_even, half_up, two_stage
from npu_sim.ir import Node, Program


# measured: reproduces every element of every 16x8 ADD of LiteRT's optimized-kernel dumps of the zoo's networks
LITERT_ADD16 = "LiteRT optimized 16-bit Add"


def _operands(node: Node, inputs: list, out_shape, tried: np.ndarray):
    """(a, b) at the output elements ``tried`` (int64, broadcast), and their tensors; None for other nodes."""
    if node.op not in ("Add", "Sub") or node.operands is None:
        return None
    ta, tb = node.operands.a, node.operands.b
    vals, i = [], 0
    for t in (ta, tb):
        if t.is_const:
            vals.append(t.data)
        else:
            if i >= len(inputs):
                return None
            vals.append(inputs[i])
            i += 1
    a, b = (np.broadcast_to(v, out_shape).reshape(-1)[tried].astype(np.int64) for v in vals)
    return a, b, ta, tb


def add_candidates(prog: Program, node: Node, inputs: list, tried: np.ndarray) -> list:
    """(name, the values each variation gives at ``tried``) for an Add/Sub of two quantized operands; [] for other
    nodes."""
    out = prog.tensors[node.outputs[0]]
    got = _operands(node, inputs, tuple(out.shape), tried)
    if got is None or not (got[2].q.per_tensor and got[3].q.per_tensor and out.q.per_tensor):
        return []
    a, b, ta, tb = got
    sign = -1 if node.op == "Sub" else 1
    (sa, za), (sb, zb), (sy, zy) = ((float(np.float32(t.q.scale)), int(t.q.zero_point)) for t in (ta, tb, out))
    lo, hi = node.clamp or (out.q.qmin, out.q.qmax)
    da, db = [int(v) - za for v in a], [int(v) - zb for v in b]
    ops, arith = node.operands, prog.board.arithmetic
    shift = ops.left_shift if ops.left_shift is not None else arith.add_left_shift(ta.q.bits, tb.q.bits)
    t = 2.0 * max(sa, sb)
    reals = (sa / t, sb / t, t / (2.0 ** shift * sy))
    # the node's own stages (made at the board's multiplier_bits), else the pairs of the factors at those bits
    pairs = list(ops.stages) if ops.stages else [quantize_multiplier(r, arith.multiplier_bits) for r in reals]
    cands = []
    for name, f in ROUNDINGS:
        def stage(x, k, f=f):
            return f(x * pairs[k][0], pairs[k][1])
        cands.append((f"{name} (three-stage Add)",
                      [stage(stage(x << shift, 0) + sign * stage(y << shift, 1), 2) for x, y in zip(da, db)]))
    tfl = [tfl_quantize_multiplier(r) for r in reals]

    def tstage(x, k):
        return double_rounding(x, tfl[k][0], tfl[k][1])
    cands.append(("double rounding (TFLite Add)",
                  [tstage(tstage(x << shift, 0) + sign * tstage(y << shift, 1), 2) for x, y in zip(da, db)]))
    def once(x, k):  # an input stage rounded once (ties toward +inf), the output stage as TFLite's
        m, s = tfl[k]
        return half_up((x << max(s, 0)) * m, 31 + max(-s, 0)) if k < 2 else tstage(x, k)
    cands.append((f"{LITERT_ADD16} (the input stages rounded once, ties toward +inf)",
                  [once(once(x << shift, 0) + sign * once(y << shift, 1), 2) for x, y in zip(da, db)]))
    for name, f in (("double rounding (TFLite Add), the input stages' second stage truncated toward -inf", floor_shift),
                    ("double rounding (TFLite Add), the input stages' second stage ties to even", half_even),
                    ("double rounding (TFLite Add), the input stages' second stage ties toward +inf", half_up)):
        def istage(x, k, f=f):  # the input stages' rounding shift other than TFLite's reference (ties away)
            return two_stage(x, tfl[k][0], tfl[k][1], half_up, f) if k < 2 else tstage(x, k)
        cands.append((name, [istage(istage(x << shift, 0) + sign * istage(y << shift, 1), 2) for x, y in zip(da, db)]))
    fa, fb, fy = Fraction(sa), Fraction(sb), Fraction(sy)
    exact = [(x * fa + sign * y * fb) / fy for x, y in zip(da, db)]
    cands.append(("one rounding of the exact sum, half to even", [round(v) for v in exact]))
    cands.append(("one rounding of the exact sum, half up", [int(np.floor(v + Fraction(1, 2))) for v in exact]))
    f32 = np.float32
    deq = (f32(np.array(da, np.float32) * f32(sa)) + f32(sign) * f32(np.array(db, np.float32) * f32(sb)))
    cands.append(("float32 ONNX definition (dequantize, add, quantize)",
                  [int(v) for v in np.rint(np.asarray(deq, np.float32) / f32(sy))]))
    cands = [(name, np.clip(np.array(y, np.int64) + zy, lo, hi)) for name, y in cands]
    if sign == 1 and ta.q.bits == tb.q.bits == out.q.bits == 8 and a.size:
        dt = ta.q.np_dtype
        if tb.q.np_dtype == dt and out.q.np_dtype == dt:
            y = np.empty(a.size, dt)
            ort_qladd(a.astype(dt), sa, za, b.astype(dt), sb, zb, sy, zy, y)
            cands.append(("onnxruntime QLinearAdd (float32)", np.clip(y.astype(np.int64), lo, hi)))
    return cands
