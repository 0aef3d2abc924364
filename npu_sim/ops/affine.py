"""Per-channel affine ops on the board: BatchNormalization and Add/Sub of an activation and a constant, each one
``kernels.affine`` pass ``(x - zx) W_c + B_c`` rounded once (``fixedpoint`` arithmetic).

* Add/Sub of an activation and a constant (per tensor or per channel): ``y = floor(((x-zx) W + B_c + 2^(F-1)) /
  2^F) + zy``, ``W = round(+-2^F sx/sy)``, the constant in output LSBs with 16 fraction bits
  ``B_c = round(+-2^16 c/sy) 2^(F-16)``, ``F`` as large as keeps the sum below 2^47 (``lower_add_constant``,
  tried first by ``elementwise.lower_add``).
* BatchNormalization (left after export): a per-channel affine ``a_c x + b_c`` evaluated in output units with
  16 fraction bits: ``y = (((q-zx) W_c + B_c) + 2^15) >> 16 + zy`` with ``W_c = round(2^16 sx a_c/sy)``,
  ``B_c = round(2^16 b_c/sy)``. The ``onnx`` arithmetic runs ONNX's inference formula in float32 instead.
All results saturate to the output type (and the fused Relu/Clip bounds).
"""
from __future__ import annotations

import numpy as np

from kernels.affine import bind as affine_bind

from npu_sim.ir import Affine, Node, Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import attrs, bound_closure, check_per_tensor, const_value, layout_memo, output_params

BN_FRACTION_BITS = 16
CONST_FRACTION_BITS = 16  # a constant added to an activation is stored in output LSBs with 16 fraction bits


def affine_closure(x3, shape, out_dtype, x_zp, w, b, f_bits, out_zp, qmin, qmax):
    """``f(x) -> out`` (shaped ``shape``): ``kernels.affine`` bound for inputs laid out as ``x3``."""
    run = affine_bind(x3, x_zp, w, b, f_bits, out_zp, qmin, qmax, np.empty(x3.shape, out_dtype))
    return bound_closure(run, x3.shape, x3.shape, shape, out_dtype)


def lower_batchnorm(lowering, onode, args, out: Tensor, act) -> Node:
    x = args[0]
    check_per_tensor(x, "BatchNormalization input")
    gamma, beta, mean, var = (const_value(lowering, a, f"BatchNormalization {n}").astype(np.float64).reshape(-1)
                              for a, n in zip(args[1:5], ("scale", "B", "mean", "var")))
    eps = float(attrs(onode).get("epsilon", 1e-5))
    a_c = gamma / np.sqrt(var + eps)
    b_c = beta - a_c * mean
    sx, sy = float(x.q.scale), float(out.q.scale)
    one = 1 << BN_FRACTION_BITS
    w = np.rint(a_c * sx / sy * one).astype(np.int64)
    if np.any(np.abs(w) >= 2**31):
        raise Problem("BatchNormalization scale is too large relative to the output scale (factor >= 2^15)")
    p, recs = _affine_prepared(lowering, x, w, np.rint(b_c / sy * one), BN_FRACTION_BITS,
                               "BatchNormalization offset", out, act)
    return Node(lowering.node_name(onode), "BatchNormalization", [x.name], [out.name], _run_affine, p, **recs)


def lower_batchnorm_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: ONNX's inference formula ``(x - mean) / sqrt(var + eps) * scale + B`` in float32
    on the dequantized input, then QuantizeLinear (what onnxruntime computes; onnx.reference's
    BatchNormalization-9 takes a set ``momentum`` for training mode and normalizes with batch statistics, as
    PaddlePaddle's opset-13 exports trigger, so it is not used here). The input is per tensor, as on the board."""
    check_per_tensor(args[0], "BatchNormalization input")
    if len(onode.output) > 1 and any(onode.output[1:]):
        raise Problem("BatchNormalization in training mode (running statistics outputs) is not supported")
    shape = (1, -1) + (1,) * (len(out.shape) - 2)
    gamma, beta, mean, var = (const_value(lowering, a, f"BatchNormalization {n}").astype(np.float32).reshape(shape)
                              for a, n in zip(args[1:5], ("scale", "B", "mean", "var")))
    eps = np.float32(attrs(onode).get("epsilon", 1e-5))
    lo, hi = act if act is not None else (-np.inf, np.inf)
    p = {"_f": (gamma, beta, mean, np.sqrt(var + eps).astype(np.float32), np.float32(lo), np.float32(hi)),
         "_xq": args[0].q, "_q": out.q}
    return Node(lowering.node_name(onode), "BatchNormalization", [args[0].name], [out.name], _run_batchnorm_float, p,
                {"arithmetic": "onnx float (inference formula)"})


def _run_batchnorm_float(node, inputs, ctx):
    gamma, beta, mean, std, lo, hi = node.params["_f"]
    x = node.params["_xq"].dequantize(inputs[0])
    y = ((x - mean) / std * gamma + beta).astype(np.float32)
    return [node.params["_q"].quantize(np.clip(y, lo, hi))]


def lower_add_constant(lowering, onode, args, out: Tensor, act) -> Node | None:
    """Add/Sub of an activation and a constant (per tensor, or per channel along axis 1): one affine with a single
    rounding, ``y = floor(((x - zx) W + B_c + 2^(F-1)) / 2^F) + zy`` with ``W = round(+-2^F sx/sy)`` and the
    constant in output LSBs with 16 fraction bits, ``B_c = round(+-2^16 c/sy) * 2^(F-16)`` (as BatchNormalization
    stores its offset). ``F`` is as large as keeps ``|acc| < 2^47``. A sum that is half-way between two output
    values in real arithmetic (``x + 3`` with a [0, 6] output: 127.5 LSB) stays half-way whatever float32 did to
    the scales, and rounds up. None when the operands do not have that form."""
    kinds = [isinstance(a, np.ndarray) or (isinstance(a, Tensor) and a.is_const) for a in args[:2]]
    if kinds.count(True) != 1 or not isinstance(args[kinds.index(False)], Tensor):
        return None
    xi = kinds.index(False)
    x, c_arg = args[xi], args[1 - xi]
    if not x.q.per_tensor:
        return None
    c = const_value(lowering, c_arg, f"{onode.op_type} constant").astype(np.float64)
    rank = len(out.shape)
    if tuple(x.shape) != tuple(out.shape) or c.ndim > rank:
        return None
    cshape = (1,) * (rank - c.ndim) + c.shape
    channels = out.shape[1] if rank >= 2 else 1
    if c.size == 1:
        per = np.full(channels, float(c.reshape(-1)[0]))
    elif rank >= 2 and cshape[1] == channels and all(d == 1 for i, d in enumerate(cshape) if i != 1):
        per = c.reshape(-1)
    else:
        return None
    sub = onode.op_type == "Sub"
    sign_x = -1.0 if sub and xi == 1 else 1.0
    sign_c = -1.0 if sub and xi == 0 else 1.0
    sx, sy = float(x.q.scale), float(out.q.scale)
    ratio = sx / sy
    x_dev = x.q.reach
    c_max = float(np.max(np.abs(per))) / sy
    # |acc| <= x_dev*|W| + |B| < 2^47 with W ~ ratio*2^F, B ~ c_max*2^F
    f_bits = min(62, int(np.floor(np.log2((2.0 ** 46) / (x_dev * ratio + c_max + 1.0)))))
    if f_bits < CONST_FRACTION_BITS:
        return None
    one = 2.0 ** f_bits
    w = np.full(channels, int(np.rint(sign_x * ratio * one)), np.int64)
    offset = np.rint(sign_c * per / sy * (1 << CONST_FRACTION_BITS)).astype(np.int64)  # Q.16 output units
    p, recs = _affine_prepared(lowering, x, w, offset.astype(np.float64) * 2.0 ** (f_bits - CONST_FRACTION_BITS),
                               f_bits, f"{onode.op_type} constant", out, act)
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_affine, p,
                {"constant": "per channel" if c.size > 1 else float(per[0]), "fraction_bits": f_bits}, **recs)


def _affine_prepared(lowering, x: Tensor, w: np.ndarray, b, f_bits: int, what: str, out: Tensor,
                     act) -> tuple[dict, dict]:
    """The params (the output dtype only) and the records (``Node(..., params, **records)``) of a
    ``kernels.affine`` node: ``(x - zx) w[c] + b[c]`` rounded once at ``f_bits`` fraction bits, to ``out``
    (clamped to ``act``). Its scale, offset, fraction bits, zero points and clamp live in the ``affine`` record only
    (the run reads them there)."""
    b = np.asarray(b, np.float64)
    dev = x.q.reach
    if not np.all(np.isfinite(b)) or dev * float(np.abs(w).max()) + float(np.abs(b).max()) >= 2.0 ** 61:
        raise Problem(f"{what} is too large relative to the output scale for the board's 64-bit affine unit")
    w, b, zx = np.ascontiguousarray(w, np.int64), np.ascontiguousarray(b.astype(np.int64)), int(x.q.zero_point)
    o = output_params(lowering, out, act)
    return {"_out_dtype": o["_out_dtype"]}, {
        "affine": Affine(records.per_channel(w, np.int64), records.per_channel(b, np.int64), int(f_bits), zx,
                         o["out_zp"], o["qmin"], o["qmax"]),
        "clamp": records.clamp(o["qmin"], o["qmax"]), "listed": AFFINE_LISTED}


# what the program listing shows of an affine node, in this order: its ``affine`` record's values (``ir.LISTED``)
AFFINE_LISTED = ("x_zp", "w", "b", "f_bits", "out_zp", "qmin", "qmax")


def _run_affine(node, inputs, ctx):
    a = node.affine
    x = inputs[0]
    def make():
        x3 = np.ascontiguousarray(x).reshape(x.shape[0] if x.ndim > 1 else 1, a.scale.size, -1)
        return affine_closure(x3, x.shape, node.params["_out_dtype"], a.in_zp, a.scale, a.offset, a.fraction_bits,
                              a.out_zp, a.qmin, a.qmax)
    return [layout_memo(node.memo, "fast", (x.shape, x.dtype), make)(x)]
