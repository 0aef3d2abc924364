"""Elementwise ops on the board: Add/Sub, Mul, Div by a constant, Concat, Relu/Clip, LeakyRelu/PRelu
(BatchNormalization and Add/Sub of a constant are per-channel affines: ``ops/affine.py``).

Board integer semantics (``fixedpoint`` arithmetic; the ``onnx`` arithmetic runs the QDQ definition instead,
see ``onnx_arith``):

* Add/Sub of an activation and a constant (per tensor or per channel): one affine with a single rounding,
  ``y = floor(((x-zx) W + B_c + 2^(F-1)) / 2^F) + zy``, ``W = round(+-2^F sx/sy)``, the constant in output LSBs
  with 16 fraction bits ``B_c = round(+-2^16 c/sy) 2^(F-16)``, ``F`` as large as keeps the sum below 2^47
  (``ops/affine.py``).
* Add/Sub of two activations: both inputs are shifted left by ``L`` (board ``add_left_shift_*``), rescaled to the
  common scale ``2*max(sa, sb)``, added, then rescaled to the output:
  ``y = R(R((a-za)<<L, sa/t) +- R((b-zb)<<L, sb/t), t/(2^L sy)) + zy`` with ``t = 2 max(sa, sb)``,
  ``R`` = ``mul_round_shift`` with the factor's multiplier/shift.
* Mul: ``y = R((a-za)(b-zb), sa sb/sy) + zy``.
* Div by a constant c: ``y = R(a-za, sa/(c sy)) + zy`` per element of c. Div by an activation: a reciprocal
  lookup table on the divisor, then an integer Mul (``ops/lut.py``).
* Concat: each input whose quantization differs from the output's is requantized ``R(q-zi, si/so) + zo``.
* Relu/Clip: ``R(q-zx, sx/sy) + zy`` clamped to the quantized bounds.
* LeakyRelu/PRelu: ``R(q-zx, sx/sy)`` for q >= zx, ``R(q-zx, alpha sx/sy)`` below (alpha per channel for PRelu).
* BatchNormalization (left after export): a per-channel affine in output units with 16 fraction bits
  (``ops/affine.py``).
All results saturate to the output type (and the fused Relu/Clip bounds).

``onnx`` arithmetic: where onnxruntime fuses the QDQ group into a com.microsoft kernel (8-bit Add -> QLinearAdd,
8-bit Mul -> QLinearMul; never Sub), npu-sim runs that kernel's exact x86-64 arithmetic instead of the ONNX
definition, so the board stays bit exact with onnxruntime (which rounds ties differently from ONNX):

* QLinearAdd (MLAS AVX2): ``ra = f32(sa/sy)``, ``rb = f32(sb/sy)``, ``fixed = f32(zy - fma(ra, za, f32(rb*zb)))``,
  ``y = sat(cvtps2dq(fma(a, ra, fma(b, rb, fixed))))`` on the raw integers (float32, fused multiply-adds, round
  half to even *after* adding the output zero point). onnxruntime passes the operand that is broadcast along the
  innermost dimension as MLAS's ``b``: for an ``Add(A, B)`` with A broadcast there, the roles swap
  (``kernels/ort_qladd.py``).
* QLinearMul (MLAS SSE2): ``y = sat(cvtps2dq(f32(f32((a-za)(b-zb) * f32(f32(sa*sb)/sy)) + zy)))``
  (``kernels/ort_qlmul.py``).

onnxruntime fuses exactly when (its QDQ ``BinarySelector``, see ``ort_fuses_qdq_group``): both inputs are
DequantizeLinear outputs, the op's only consumer is one QuantizeLinear (or one Relu/Clip made redundant by it:
Relu with ``zy == qmin``; Clip whose bounds cover the quantized range within FLT_EPSILON, or whose quantized
bounds cover the type), no output of the group is a graph output, and A, B and Y share one 8-bit type; npu-sim
also requires per-tensor quantization (onnxruntime's kernels refuse anything else). Every other group keeps the
ONNX definition (``onnx_arith``), as onnxruntime then runs it unfused in float. The fused kernels model the
session option ``session.qdqisint8allowed=1``; without it, onnxruntime on x86 first turns int8 Q->DQ pairs into
uint8 (+128), which can move a QLinearAdd result by one on rare near-ties.
"""
from __future__ import annotations

import numpy as np

from kernels.add import bind as add_bind
from kernels.affine import IN_DTYPES as AFFINE_DTYPES
from kernels.leaky_relu import leaky_relu
from kernels.mul import bind as mul_bind
from kernels.ort_qladd import ort_qladd
from kernels.ort_qlmul import ort_qlmul

from npu_sim.errors import QuantizationError
from npu_sim.ir import Node, Operands, QParams, Tensor
from npu_sim.ops import records
from npu_sim.ops.affine import affine_closure, lower_add_constant
from npu_sim.ops.common import (RESCALE_LISTED, activation_bounds, attrs, check_per_tensor, const_value,
                                fixed_multipliers, layout_memo, operand, output_params, record_params, requantize_acc,
                                rescale, rescale_params, rescale_prepared)
from npu_sim.ops.lut import lower_div_by_activation
from npu_sim.ops.onnx_arith import lower_float_reference


def _mr(lowering, real: float):
    m, r = fixed_multipliers(np.array(real), lowering.arith.multiplier_bits)
    return int(m), int(r)


def _ins(args):
    return [a.name for a in args if isinstance(a, Tensor) and not a.is_const]


def broadcast_3d(out_shape, *shapes):
    """Collapse numpy broadcasting of operands against ``out_shape`` into at most 3 axes (outer, mid, inner).

    Consecutive axes where every operand is either full or broadcast in the same way merge into one axis.
    Returns ``(out3, [operand3, ...])`` with each operand3 made of out3's sizes or 1, or None when more than
    three such runs are needed (the caller then materializes the broadcast).
    """
    nd = len(out_shape)
    padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
    runs: list[list] = []  # [size, pattern]
    for d, size in enumerate(out_shape):
        if size == 1:
            continue
        pattern = tuple(s[d] == size for s in padded)
        if runs and runs[-1][1] == pattern:
            runs[-1][0] *= size
        else:
            runs.append([size, pattern])
    if len(runs) > 3:
        return None
    runs = [[1, tuple(True for _ in shapes)]] * (3 - len(runs)) + runs
    out3 = tuple(r[0] for r in runs)
    return out3, [tuple(r[0] if r[1][i] else 1 for r in runs) for i in range(len(shapes))]


def _flat(arr, shape):
    return np.ascontiguousarray(np.broadcast_to(arr, shape)).reshape(-1)


def lower_add_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: onnxruntime's QLinearAdd where it fuses the group (never Sub), else ONNX's
    definition of the QDQ group."""
    if onode.op_type == "Add" and ort_fuses_qdq_group(lowering, onode, args, out):
        return _lower_ort_binary(lowering, onode, args, out, "QLinearAdd")
    return lower_float_reference(lowering, onode, args, [out], act)


def lower_add(lowering, onode, args, out: Tensor, act) -> Node:
    node = lower_add_constant(lowering, onode, args, out, act)
    if node is not None:
        return node
    a = operand(lowering, args[0], f"{onode.op_type} input A")
    b = operand(lowering, args[1], f"{onode.op_type} input B")
    sa, sb, sy = float(a.q.scale), float(b.q.scale), float(out.q.scale)
    left = lowering.arith.add_left_shift(a.q.bits, b.q.bits)
    t = 2.0 * max(sa, sb)
    stages = (_mr(lowering, sa / t), _mr(lowering, sb / t), _mr(lowering, t / (2.0 ** left * sy)))
    o = output_params(lowering, out, act)
    # the operands (their zero points), the left shift, the three stages and the clamp live in the records only
    p = {"sign_b": -1 if onode.op_type == "Sub" else 1, "out_zp": o["out_zp"], "_out_dtype": o["_out_dtype"]}
    return Node(lowering.node_name(onode), onode.op_type, _ins([a, b]), [out.name], _run_add, p,
                operands=Operands(a, b, left, stages),
                clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=("a_zp", "b_zp", "left_shift", "sign_b", "a_mult", "a_shift", "b_mult", "b_shift", "out_mult",
                        "out_shift", "out_zp", "qmin", "qmax"))


def _value(t: Tensor, inputs, i):
    return (t.data, i) if t.is_const else (inputs[i], i + 1)


def _run_binary(node, inputs, ctx, bind):
    """Run a two-operand node (either operand may be a constant) through its closure for these operand shapes
    and dtypes: ``_binary_closure`` builds it on the first such call (``bind(node, a3, b3, out)`` sets the kernel
    up), later calls go straight to it."""
    a, i = _value(node.operands.a, inputs, 0)
    b, _ = _value(node.operands.b, inputs, i)
    fast = layout_memo(node.memo, "fast", (a.shape, a.dtype, b.shape, b.dtype),
                       lambda: _binary_closure(node, a, b, ctx.shape_of(node.outputs[0]), bind))
    return [fast(a, b)]


def _binary_closure(node, a, b, shape, bind):
    """``f(a, b) -> out`` (shaped ``shape``) for operands shaped and typed like ``a`` and ``b``: the broadcast
    collapsed to (outer, mid, inner) views (``broadcast_3d``), or materialized where it does not collapse."""
    dt = node.params["_out_dtype"]
    plan = broadcast_3d(shape, a.shape, b.shape)
    if plan is None:  # unusual broadcasting: materialize it
        n = int(np.prod(shape))
        run = bind(node, _flat(a, shape), _flat(b, shape), np.empty(n, dt))

        def flat(a, b):
            out = np.empty(n, dt)
            run(_flat(a, shape), _flat(b, shape), out)
            return out.reshape(shape)
        return flat
    out3, (a3s, b3s) = plan
    run = bind(node, np.ascontiguousarray(a).reshape(a3s), np.ascontiguousarray(b).reshape(b3s), np.empty(out3, dt))

    def collapsed(a, b):
        out = np.empty(out3, dt)
        run(np.ascontiguousarray(a).reshape(a3s), np.ascontiguousarray(b).reshape(b3s), out)
        return out.reshape(shape)
    return collapsed


def _run_add(node, inputs, ctx):
    return _run_binary(node, inputs, ctx, _bind_add)


def _bind_add(node, a3, b3, out):
    p, o = node.params, node.operands
    (a_mult, a_shift), (b_mult, b_shift), (out_mult, out_shift) = o.stages
    return add_bind(a3, int(o.a.q.zero_point), a_mult, a_shift, b3, int(o.b.q.zero_point), b_mult, b_shift,
                    o.left_shift, p["sign_b"], out_mult, out_shift, p["out_zp"], node.clamp[0], node.clamp[1], out)


def lower_mul_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: onnxruntime's QLinearMul where it fuses the group, else ONNX's definition."""
    if ort_fuses_qdq_group(lowering, onode, args, out):
        return _lower_ort_binary(lowering, onode, args, out, "QLinearMul")
    return lower_float_reference(lowering, onode, args, [out], act)


def lower_mul(lowering, onode, args, out: Tensor, act) -> Node:
    a = operand(lowering, args[0], "Mul input A")
    b = operand(lowering, args[1], "Mul input B")
    mult, shift = _mr(lowering, float(a.q.scale) * float(b.q.scale) / float(out.q.scale))
    o = output_params(lowering, out, act)
    # the operands and the requantization live in the records only (the run reads them there)
    return Node(lowering.node_name(onode), "Mul", _ins([a, b]), [out.name], _run_mul, {"_out_dtype": o["_out_dtype"]},
                requant=records.fixed_requant(lowering.arith, mult, shift, o["out_zp"], o["qmin"], o["qmax"],
                                              in_zp=a.q.zero_point),
                operands=Operands(a, b), clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=("a_zp", "b_zp", "mult", "shift", "out_zp", "qmin", "qmax"))


def _run_mul(node, inputs, ctx):
    return _run_binary(node, inputs, ctx, _bind_mul)


def _bind_mul(node, a3, b3, out):
    o, rq = node.operands, node.requant
    return mul_bind(a3, int(o.a.q.zero_point), b3, int(o.b.q.zero_point), int(rq.mult[0]), int(rq.shift[0]),
                    rq.out_zp, rq.qmin, rq.qmax, out)


# ---- onnxruntime's fused QDQ groups (the ``onnx`` arithmetic) ---------------------------------------------
ORT_FUSED_DTYPES = ("int8", "uint8")
_INT32_MIN = -(1 << 31)
_FLT_MAX = float(np.finfo(np.float32).max)


def _ort_quantized_bound(v: float, q: QParams) -> int:
    """``(int32)rint(v / scale) + zp`` in float32 as onnxruntime's IsClipMadeRedundantByQ computes it; a value
    that does not fit int32 (e.g. +-FLT_MAX, onnxruntime's stand-in for an absent bound) converts to -2**31."""
    with np.errstate(over="ignore"):
        f = np.float32(np.float32(v) / np.float32(q.scale))
    r = float(np.rint(f))
    return (int(r) if -2.0 ** 31 <= r < 2.0 ** 31 else _INT32_MIN) + int(q.zero_point)


def ort_fuses_qdq_group(lowering, onode, args, out: Tensor) -> bool:
    """Whether onnxruntime (CPU, x86-64) fuses this QDQ group into its com.microsoft QLinear* kernel.

    The conditions of its QDQ selectors for Add/Mul (BinarySelector) and GlobalAveragePool (UnarySelector): every
    input of the op is the output of a DequantizeLinear; the op's output is not a graph output and feeds exactly
    one QuantizeLinear, or exactly one Relu/Clip (not a graph output) that feeds exactly one QuantizeLinear and is
    made redundant by it; inputs and output have one 8-bit type. npu-sim also requires per-tensor quantization.
    A Relu is redundant when ``zy == qmin``; a Clip when onnxruntime's ClipQuantFusion rule drops it (its bounds
    cover ``scale*(qmin-zy)``, ``scale*(qmax-zy)`` within FLT_EPSILON) or its quantized bounds cover the type.
    """
    names = list(onode.input)
    if not names or any(not n for n in names) or len(args) != len(names):
        return False
    for name, arg in zip(names, args):
        producer = lowering.producer(name)
        if producer is None or producer.op_type != "DequantizeLinear":
            return False
        if not isinstance(arg, Tensor) or arg.q is None or not arg.q.per_tensor or arg.q.dtype != out.q.dtype:
            return False
    if out.q.dtype not in ORT_FUSED_DTYPES or not out.q.per_tensor:
        return False
    y = onode.output[0]
    consumers = lowering.consumers(y)
    if lowering.is_output(y) or len(consumers) != 1:
        return False
    nxt = consumers[0]
    if nxt.op_type in ("Relu", "Clip"):
        after = lowering.consumers(nxt.output[0])
        if lowering.is_output(nxt.output[0]) or len(after) != 1 or after[0].op_type != "QuantizeLinear":
            return False
        if nxt.op_type == "Relu":
            return int(out.q.zero_point) == out.q.qmin
        lo, hi = activation_bounds(lowering, nxt)
        lo, hi = max(lo, -_FLT_MAX), min(hi, _FLT_MAX)  # onnxruntime's defaults for absent bounds
        q = out.q
        # ClipQuantFusion (a rewrite rule that runs first) drops a Clip that covers the Q range within FLT_EPSILON
        s = np.float32(q.scale)
        lower = np.float32(s * np.float32(q.qmin - int(q.zero_point)))
        upper = np.float32(s * np.float32(q.qmax - int(q.zero_point)))
        eps = np.finfo(np.float32).eps
        if np.float32(np.float32(lo) - lower) <= eps and np.float32(upper - np.float32(hi)) <= eps:
            return True
        # else the selector's own test (IsClipMadeRedundantByQ) on the quantized bounds
        return _ort_quantized_bound(lo, q) <= q.qmin and _ort_quantized_bound(hi, q) >= q.qmax
    return nxt.op_type == "QuantizeLinear"


def ort_input0_is_broadcast(shape_a, shape_b) -> bool:
    """Whether onnxruntime's broadcaster treats input 0 as the scalar side (``IsInput0Scalar``).

    Its Broadcaster walks the trailing dimensions the two shapes share and starts its innermost span at the
    first one where either size exceeds 1 (or at the outermost shared one); input 0 is the scalar side when its
    size there is 1 (a rank-0 input counts as size 1 against the other's innermost dimension; with both sizes 1,
    input 0 wins). QLinearAdd then hands MLAS input 1 as ``InputA`` and input 0 as the scalar ``InputB``.
    """
    a, b = list(shape_a), list(shape_b)
    if not a or not b:
        return not a or (b == [] and a[-1] <= 1)
    for i in range(1, min(len(a), len(b)) + 1):
        if max(a[-i], b[-i]) > 1 or i == min(len(a), len(b)):
            return a[-i] <= 1
    return True


def _lower_ort_binary(lowering, onode, args, out: Tensor, kernel: str) -> Node:
    a, b = args[0], args[1]
    swap = kernel == "QLinearAdd" and ort_input0_is_broadcast(a.shape, b.shape)
    p = {"kernel": kernel, "mlas_a": "B" if swap else "A", "_swap": swap, "_out_dtype": out.q.np_dtype,
         "_q": [(float(t.q.scale), int(t.q.zero_point)) for t in (a, b, out)]}
    return Node(lowering.node_name(onode), onode.op_type, _ins([a, b]), [out.name], _run_ort_binary, p,
                {"arithmetic": f"onnxruntime {kernel} (MLAS x86-64)"}, operands=Operands(a, b))


def _run_ort_binary(node, inputs, ctx):
    p = node.params
    a, i = _value(node.operands.a, inputs, 0)
    b, _ = _value(node.operands.b, inputs, i)
    shape = ctx.shape_of(node.outputs[0])
    out = np.empty(int(np.prod(shape)), p["_out_dtype"])
    (sa, za), (sb, zb), (sy, zy) = p["_q"]
    a, b = _flat(a, shape), _flat(b, shape)
    if p["kernel"] == "QLinearMul":
        ort_qlmul(a, sa, za, b, sb, zb, sy, zy, out)
    elif p["_swap"]:
        ort_qladd(b, sb, zb, a, sa, za, sy, zy, out)
    else:
        ort_qladd(a, sa, za, b, sb, zb, sy, zy, out)
    return [out.reshape(shape)]


def _constant_divisor(lowering, onode, args) -> np.ndarray | None:
    """A Div's constant divisor (float64), ``None`` when the divisor is an activation; one containing zero is
    refused (on every arithmetic)."""
    b = args[1]
    if not (isinstance(b, np.ndarray) or (isinstance(b, Tensor) and b.is_const)):
        return None
    c = const_value(lowering, b, "Div divisor").astype(np.float64)
    if np.any(c == 0):
        raise QuantizationError(f"Div node {onode.name!r}: the constant divisor {onode.input[1]!r} contains zero")
    return c


def lower_div_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: ONNX's definition of the QDQ group (after the shared divisor check)."""
    _constant_divisor(lowering, onode, args)
    return lower_float_reference(lowering, onode, args, [out], act)


def lower_div(lowering, onode, args, out: Tensor, act) -> Node:
    a = args[0]
    c = _constant_divisor(lowering, onode, args)
    if c is None:
        return lower_div_by_activation(lowering, onode, args, out, act)  # reciprocal table + integer Mul
    check_per_tensor(a, "Div input")
    real = float(a.q.scale) / (c * float(out.q.scale))
    real_full = np.broadcast_to(real, out.shape) if real.size > 1 else real.reshape(1)
    mult, shift = fixed_multipliers(real_full.reshape(-1), lowering.arith.multiplier_bits)
    o = output_params(lowering, out, act)
    # the requantization lives in the records only (the run reads them, ``common.record_params``)
    return Node(lowering.node_name(onode), "Div", [a.name], [out.name], _run_div, {"_out_dtype": o["_out_dtype"]},
                {"divisor": c.size},
                requant=records.fixed_requant(lowering.arith, mult, shift, o["out_zp"], o["qmin"], o["qmax"],
                                              np.zeros(real_full.size, np.int64), a.q.zero_point),
                accumulator=records.accumulator(64, o["_saturate"]), clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=RESCALE_LISTED)


def _run_div(node, inputs, ctx):
    p = record_params(node)
    shape = ctx.shape_of(node.outputs[0])
    c = p["mult"].size
    x = inputs[0]
    if c == 1:  # the quantized input is the accumulator, its zero point goes into the bias
        return [scalar_rescale(node, ctx, x if x.shape == shape else np.broadcast_to(x, shape), p, node.memo)]
    acc = np.broadcast_to(x.astype(np.int64) - p["x_zp"], shape)
    return [requantize_acc(node, ctx, acc, acc.size // c, c, 1).reshape(shape)]


def scalar_rescale(node, ctx, x, p: dict, memo: dict) -> np.ndarray:
    """``clamp(R(x - x_zp, mult, shift) + out_zp)`` with one multiplier (``p``: a rescale node's or a Div by a
    scalar's ``record_params``, or ``rescale_params``): for 8/16-bit ``x`` and ``shift >= 1`` it is
    ``((x - x_zp) * mult + 2^(shift-1)) >> shift``, the affine kernel with one channel (the same integers as the
    requantization, |x - x_zp| < 2^31), bound once per input shape and dtype (kept in ``memo``: the node's
    ``memo`` for its own params, else one kept in it for ``p``); else ``common.rescale``."""
    def make():
        if p["shift"][0] >= 1 and x.dtype in AFFINE_DTYPES and abs(p["x_zp"]) <= 1 << 16:
            return affine_closure(np.ascontiguousarray(x).reshape(1, 1, -1), x.shape, p["_out_dtype"], p["x_zp"],
                                  p["mult"], p["bias"], int(p["shift"][0]), p["out_zp"], p["qmin"], p["qmax"])
        return None
    fast = layout_memo(memo, "fast_rescale", (x.shape, x.dtype), make)
    return rescale(node, ctx, x, p, memo) if fast is None else fast(x)


def lower_concat(lowering, onode, args, out: Tensor, act) -> Node:
    axis = int(attrs(onode).get("axis", 0))
    if axis < 0:
        axis += len(out.shape)
    parts = []
    for i, arg in enumerate(args):
        t = operand(lowering, arg, f"Concat input {i}")
        same = t.q.same_as(out.q) and act is None
        parts.append((t, None if same else rescale_params(lowering, t.q, out, act)))
    p = {"axis": axis, "_parts": parts, "requantized": sum(1 for _, r in parts if r is not None)}
    o = output_params(lowering, out, act)
    p.update(o)
    return Node(lowering.node_name(onode), "Concat", _ins([t for t, _ in parts]), [out.name], _run_concat, p,
                {"axis": axis}, clamp=records.clamp(o["qmin"], o["qmax"]))


def _run_concat(node, inputs, ctx):
    p = node.params
    pieces, i = [], 0
    for j, (t, rq) in enumerate(p["_parts"]):
        v, i = _value(t, inputs, i)
        if rq is not None:
            v = scalar_rescale(node, ctx, v, rq, node.memo.setdefault(j, {}))  # a memo per rescaled input
        pieces.append(v.astype(p["_out_dtype"], copy=False))
    return [np.concatenate(pieces, axis=p["axis"])]


def _clamp_bounds(lowering, onode, act):
    """A Relu/Clip's own bounds merged with those of a Relu/Clip folded after it (``act``)."""
    own = activation_bounds(lowering, onode)
    return own if act is None else (max(own[0], act[0]), min(own[1], act[1]))


def lower_clamp_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: ONNX's definition of the QDQ group, clipped to the merged bounds (a NaN bound, which
    clips nothing in onnxruntime but spreads in onnx.reference's Clip, given as the float32 limit)."""
    args = [np.float32(-3.4e38 if k == 1 else 3.4e38) if k and isinstance(a, np.ndarray) and np.isnan(a).any()
            else a for k, a in enumerate(args)]
    return lower_float_reference(lowering, onode, args, [out], _clamp_bounds(lowering, onode, act))


def lower_clamp(lowering, onode, args, out: Tensor, act) -> Node:
    act = _clamp_bounds(lowering, onode, act)
    x = args[0]
    check_per_tensor(x, f"{onode.op_type} input")
    p, recs = rescale_prepared(lowering, x.q, out, act)
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_rescale, p, **recs)


def _run_rescale(node, inputs, ctx):
    return [scalar_rescale(node, ctx, inputs[0], record_params(node), node.memo)]


def lower_leaky_relu(lowering, onode, args, out: Tensor, act) -> Node:
    x = args[0]
    check_per_tensor(x, f"{onode.op_type} input")
    sx, sy = float(x.q.scale), float(out.q.scale)
    if onode.op_type == "LeakyRelu":
        slope = np.array([float(attrs(onode).get("alpha", 0.01))])
    else:
        slope = const_value(lowering, args[1], "PRelu slope").astype(np.float64)
        slope = slope.reshape(-1) if slope.size == 1 else np.broadcast_to(slope, out.shape).reshape(-1)
    bits = lowering.arith.multiplier_bits
    p = {"x_zp": int(x.q.zero_point)}
    p["pos_mult"], p["pos_shift"] = (int(v) for v in fixed_multipliers(np.array(sx / sy), bits))
    p["neg_mult"], p["neg_shift"] = fixed_multipliers(slope * sx / sy, bits)
    o = output_params(lowering, out, act)
    p.update(o)
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_leaky, p,
                clamp=records.clamp(o["qmin"], o["qmax"]))


def _run_leaky(node, inputs, ctx):
    p = node.params
    x = inputs[0]
    c = p["neg_mult"].size
    x3 = np.ascontiguousarray(x.reshape(1, c, -1) if c > 1 else x.reshape(1, 1, -1))
    out = np.empty(x3.shape, p["_out_dtype"])
    leaky_relu(x3, p["x_zp"], p["pos_mult"], p["pos_shift"], p["neg_mult"], p["neg_shift"], p["out_zp"], p["qmin"],
               p["qmax"], out)
    return [out.reshape(x.shape)]
