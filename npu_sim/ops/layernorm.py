"""LayerNormalization on the board: integer mean and variance, reciprocal square root by table, integer affine.

Sources: the ONNX ``LayerNormalization`` op (normalized axes ``[axis, rank)``, ``epsilon``; inputs X, Scale
(gamma), optional B (beta)), and the decomposed chain exporters write instead
(ReduceMean -> Sub -> Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div -> Mul gamma -> Add beta), which the lowering
pre-pass (``npu_sim.frontend.rewrites.fuse_layernorm_chains``) rewrites into one LayerNormalization node before the
walk.

onnxruntime's ``quantize_static`` writes: X an activation (per tensor), gamma a weight (int8, per tensor for a
1-D gamma; per axis is accepted here), beta an int32 bias with scale ``s_x * s_gamma``. In a decomposed chain
gamma and beta are usually 8-bit weights with a zero point, eps an 8-bit constant.

Board integer semantics (``kernels/layernorm.py``), per row of ``n`` values along the normalized axes (moved
last), ``c = q - zx``:

1. mean with ``P`` fraction bits, by a rounded division: ``mu = round(sum(c) * 2**P / n)`` (sum in int64);
   ``P`` is the largest value up to 14 for which the variance below fits int64 without a pre-shift
   (``n * (2**bits * 2**P)**2 < 2**62``: 14 for 8-bit rows up to 2**18 values, for 16-bit rows up to 2**6,
   8 up to 2**18);
2. deviations ``dev = c * 2**P - mu`` (at most ``bits + P + 1`` bits); variance sum
   ``V = sum(round(dev / 2**vs)**2)`` in int64, ``vs`` a pre-shift only for rows too long even with ``P = 0``;
   ``W = V + n * eps / (s_x * 2**(vs-P))**2`` (eps in V's units);
3. ``1/sqrt(W)`` by an even normalization shift (``W = w * 2**s``, ``w`` in [2**28, 2**30)), a table of
   ``1/sqrt(u)`` for the mantissa ``u = w / 2**28`` in [1, 4) with the resolution of the board's
   ``lut_entries_16`` table over [0, 4] (step ``4 / (lut_entries_16 - 1)``, 385 entries for 513), linear
   interpolation, one Newton step (Q.30 ``y1``, relative error ~4e-9 with the roundings), and the exponent shifted
   back (``2**(-s/2)``);
4. ``z = round(dev * y1 / 2**(44 + s/2 + vs - F))`` (``dev * y1`` < 2**61): ``(x - mean) / sqrt(n (var + eps))``
   with ``F = 30`` fraction bits (|z| <= 2**F, 32 bits signed; ``F`` is lowered when gamma/beta would push the
   accumulator past 2**47);
5. ``acc = z * (g - zg) + B`` with ``B = round(beta * 2**F / (sqrt(n) * s_g))`` (int64, per position), then
   ``y = mul_round_shift(acc, M, r) + zy`` with ``M * 2**-r = sqrt(n) * s_g / (2**F * s_y)`` (per position when
   gamma is quantized per axis), saturated to the output type and any fused Relu/Clip bounds.

The input scale cancels (it only sets the units of eps). A constant row (``W = 0``, no eps) gives ``y = beta``.

``onnx`` arithmetic: the ONNX definition; for a rewritten chain, the chain itself with its intermediate
QuantizeLinear/DequantizeLinear pairs (dequantize, float32 ops, quantize), exactly what the QDQ model means.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from kernels.layernorm import layernorm

from npu_sim.ir import Geometry, Node, Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import attrs, check_per_tensor, const_value, fixed_multipliers, output_params
from npu_sim.ops.onnx_arith import append_clip, lower_float_reference, run_float_reference
from npu_sim.ops.softmax import lut_bits_of, to_rows

MAX_MEAN_BITS = 14          # fraction bits of the mean, at most (the kernel's limit)
NORM_BITS = 30              # fraction bits of the normalized value z (at most; the kernel's limit)
MIN_NORM_BITS = 8
ACC_LIMIT = 2.0 ** 47       # |z * gamma + B| stays below this (mul_round_shift is exact below 2**48)
VAR_LIMIT = 1 << 62



def rsqrt_table(step_bits: int) -> np.ndarray:
    """``R[j] = round(2**30 / sqrt(1 + j / 2**J))`` for j in [0, 3 * 2**J] (u = 1 .. 4)."""
    k = 1 << step_bits
    return np.array([int(math.floor((1 << 30) / math.sqrt(1.0 + j / k) + 0.5)) for j in range(3 * k + 1)], np.int64)


def var_params(n: int, bits: int, mean_bits: int, x_scale: float, eps: float, max_shift: int = 40):
    """(vs, eps_n): the smallest variance pre-shift (at most ``max_shift``) keeping ``n * max_term**2 + eps_n``
    below 2**62 for any input of ``bits`` bits, with ``eps_n = round(n * eps / (x_scale * 2**(vs - P))**2)``;
    None if there is none."""
    dev_max = (((1 << bits) - 1) << mean_bits) + 1
    for vs in range(max_shift + 1):
        term = (dev_max + ((1 << vs) >> 1)) >> vs
        unit = float(x_scale) * 2.0 ** (vs - mean_bits)
        eps_n_f = n * float(eps) / (unit * unit)
        if eps_n_f >= VAR_LIMIT:
            continue
        eps_n = int(math.floor(eps_n_f + 0.5))
        if n * term * term + eps_n < VAR_LIMIT:
            return vs, eps_n
    return None


def stats_params(n: int, bits: int, x_scale: float, eps: float) -> tuple[int, int, int]:
    """(P, vs, eps_n): the most mean fraction bits ``P`` (at most 14) for which the variance sum fits without a
    pre-shift; else ``P = 0`` and the smallest pre-shift ``vs``. (The mean's rounding costs ``2**-(P+1)`` input
    LSB, i.e. ``2**-(P+1) / sigma`` in normalized units: P = 14 makes it negligible even for sigma of a few LSB.)"""
    for mean_bits in range(MAX_MEAN_BITS, -1, -1):
        fit = var_params(n, bits, mean_bits, x_scale, eps, max_shift=0)
        if fit is not None:
            return (mean_bits, *fit)
    fit = var_params(n, bits, 0, x_scale, eps)
    if fit is None:
        raise Problem("LayerNormalization: epsilon is too large relative to the input scale for a 64-bit variance")
    return (0, *fit)


def _per_row(value: np.ndarray, x_shape, axes, what: str) -> np.ndarray:
    """A constant broadcast against the input, as one vector along the normalized axes (it must not vary along
    the other axes)."""
    try:
        full = np.broadcast_to(np.asarray(value), x_shape)
    except ValueError:
        raise Problem(f"LayerNormalization {what} of shape {np.shape(value)} does not broadcast to the input "
                       f"{list(x_shape)}") from None
    rows, _ = to_rows(full, axes)
    if rows.shape[0] > 1 and not np.all(rows == rows[0]):
        raise Problem(f"LayerNormalization {what} varies along a non-normalized axis")
    return rows[0]


def _gamma(lowering, arg, x_shape, axes):
    """Integer gamma (minus its zero point) and its scale, per position of a row."""
    if arg is None:
        n = int(np.prod([x_shape[a] for a in axes]))
        return np.ones(n, np.int64), np.ones(n, np.float64)
    if isinstance(arg, Tensor) and arg.is_const:
        s, z = arg.q.broadcast(arg.data.ndim)
        g = arg.data.astype(np.int64) - np.asarray(z, np.int64)
        sg = np.broadcast_to(np.asarray(s, np.float64), arg.data.shape)
    elif isinstance(arg, np.ndarray):  # an unquantized float gamma: stored as int16, symmetric, per tensor
        v = arg.astype(np.float64)
        amax = float(np.max(np.abs(v))) if v.size else 0.0
        scale = amax / 32767 if amax > 0 else 1.0
        g = np.rint(v / scale).astype(np.int64)
        sg = np.full(v.shape, scale)
    else:
        raise Problem("LayerNormalization scale (gamma) must be a constant")
    return _per_row(g, x_shape, axes, "scale"), _per_row(sg, x_shape, axes, "scale").astype(np.float64)


def _layernorm_extent(lowering, onode, x: Tensor):
    """A LayerNormalization's checked ``(chain, axes, eps)``: ``chain`` the decomposed chain this node stands for
    (or None), ``axes`` the normalized axes; the Mean / InvStdDev outputs must be unused."""
    chain = lowering.layernorm_chains.get(onode.output[0])
    for extra in list(onode.output[1:]):
        if extra and (lowering.consumers(extra) or lowering.is_output(extra)):
            raise Problem("LayerNormalization outputs Mean / InvStdDev are not supported")
    rank = len(x.shape)
    if chain is not None:
        return chain, tuple(chain["axes"]), float(chain["eps"])
    a = attrs(onode)
    axis = int(a.get("axis", -1))
    if not -rank <= axis < rank:
        raise Problem(f"LayerNormalization axis {axis} is out of range for rank {rank}")
    return None, tuple(range(axis % rank, rank)), float(a.get("epsilon", 1e-5))


def lower_layernorm_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: the decomposed chain as written (``_lower_chain_reference``), or ONNX's
    definition of a LayerNormalization QDQ group."""
    chain, _, _ = _layernorm_extent(lowering, onode, args[0])
    if chain is not None:
        return _lower_chain_reference(lowering, onode, chain, args[0], out, act)
    return lower_float_reference(lowering, onode, args, [out], act)


def lower_layernorm(lowering, onode, args, out: Tensor, act) -> Node:
    x = args[0]
    chain, axes, eps = _layernorm_extent(lowering, onode, x)
    check_per_tensor(x, "LayerNormalization input")
    n = int(np.prod([x.shape[a] for a in axes]))
    gamma_arg = args[1] if len(args) > 1 else None
    beta_arg = args[2] if len(args) > 2 else None
    g, sg = _gamma(lowering, gamma_arg, x.shape, axes)
    beta = np.zeros(n) if beta_arg is None else _per_row(
        const_value(lowering, beta_arg, "LayerNormalization bias").astype(np.float64), x.shape, axes, "bias")
    root_n = math.sqrt(n)
    b_unit = beta / (root_n * sg)          # beta in units of sqrt(n) * s_g * 2**-F, before the 2**F
    load = 4.0 * float(np.max(np.abs(g))) + float(np.max(np.abs(b_unit)))
    norm_bits = min(NORM_BITS, int(math.floor(math.log2(ACC_LIMIT / max(load, 1.0)))))
    if norm_bits < MIN_NORM_BITS:
        raise Problem("LayerNormalization bias is too large relative to the scale's quantization step")
    bits = np.dtype(x.q.np_dtype).itemsize * 8  # storage width: the kernel's bounds follow it
    mean_bits, var_shift, eps_n = stats_params(n, bits, float(x.q.scale), eps)
    mult, shift = fixed_multipliers(root_n * sg * 2.0 ** -norm_bits / float(out.q.scale),
                                    lowering.arith.multiplier_bits)
    p = {"axes": axes, "n": n, "x_zp": int(x.q.zero_point), "mean_bits": mean_bits, "var_shift": var_shift,
         "eps_n": eps_n, "norm_bits": norm_bits, "_gamma": g,
         "_bias": np.rint(b_unit * 2.0 ** norm_bits).astype(np.int64),
         "_mult": mult.astype(np.int64), "_shift": shift.astype(np.int64)}
    o = output_params(lowering, out, act)
    p.update(o)
    extra = {"axes": axes, "epsilon": eps}
    if chain is not None:
        extra["fused"] = [nd.name for nd in chain["nodes"]]
    # the reciprocal square root table lives in the ``tables`` record only (the run reads it there)
    return Node(lowering.node_name(onode), "LayerNormalization", [x.name], [out.name], _run_layernorm, p, extra,
                geometry=Geometry(axes=tuple(int(a) for a in axes)),
                tables=records.tables({"rsqrt": rsqrt_table(lut_bits_of(lowering) - 2)}),
                clamp=records.clamp(o["qmin"], o["qmax"]))


def _run_layernorm(node, inputs, ctx):
    p = node.params
    rows, back = to_rows(inputs[0], p["axes"])
    y = np.empty(rows.shape, p["_out_dtype"])
    layernorm(rows, p["x_zp"], p["mean_bits"], p["var_shift"], p["eps_n"], node.tables.entries["rsqrt"], p["norm_bits"],
              p["_gamma"],
              p["_bias"], p["_mult"], p["_shift"], p["out_zp"], p["qmin"], p["qmax"], y)
    return [back(y)]


# ---- the onnx arithmetic of a rewritten chain: the chain itself -----------------------------------------------
def _lower_chain_reference(lowering, onode, chain, x: Tensor, out: Tensor, act) -> Node:
    nodes = list(chain["const_dq"]) + list(chain["nodes"])
    produced = {o for nd in nodes for o in nd.output}
    inits, seen = [], set()
    for nd in nodes:
        for name in nd.input:
            if name and name not in produced and lowering.const(name) is not None and name not in seen:
                seen.add(name)
                inits.append(numpy_helper.from_array(np.asarray(lowering.const(name)), name))
    src = chain["input"]
    graph_nodes = []
    # The rewritten op reads the transposed input: the run undoes it into a contiguous array, so that the chain's
    # reductions add in the order onnxruntime adds them in the chain's own layout (a transposed view would make
    # numpy sum pairwise along the then contiguous axis: 1-ulp different means, a rounding tie away from 1 LSB).
    inverse = None if chain["perm"] is None else tuple(int(v) for v in np.argsort(chain["perm"]))
    shape = list(x.shape) if inverse is None else [x.shape[i] for i in inverse]
    # onnx.reference implements QuantizeLinear/DequantizeLinear from opset 19 on: run the chain at opset >= 21
    # (native 16-bit Q/DQ too), with ReduceMean's axes moved from the attribute (opset < 18) to an input.
    for i, nd in enumerate(nodes):
        ins = list(nd.input)
        kept = [a for a in nd.attribute if not (nd.op_type == "ReduceMean" and a.name == "axes")]
        if len(kept) < len(nd.attribute):
            axes = next(a for a in nd.attribute if a.name == "axes")
            name = f"layernorm_chain_axes_{i}"
            inits.append(numpy_helper.from_array(np.array(list(axes.ints), np.int64), name))
            ins = ins[:1] + [name]
        copy = helper.make_node(nd.op_type, ins, list(nd.output), name=nd.name)
        copy.attribute.extend(kept)
        graph_nodes.append(copy)
    final = append_clip(onode.output[0], act, graph_nodes, inits)
    graph = helper.make_graph(graph_nodes, "layernorm_chain",
                              [helper.make_tensor_value_info(src, TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(final, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(lowering.opset, 21))])
    try:
        evaluator = ReferenceEvaluator(model)
    except Exception as exc:  # noqa: BLE001  (any reason the reference cannot run the chain)
        raise Problem(f"the LayerNorm chain cannot be evaluated by onnx.reference: {exc}") from None
    params = {"_eval": evaluator, "_feeds": [(src, x.name)], "_outs": [out.q], "_inverse_perm": inverse}
    return Node(lowering.node_name(onode), "LayerNormalization", [x.name], [out.name], _run_chain_reference, params,
                {"arithmetic": "onnx float reference (decomposed chain)", "fused": [nd.name for nd in chain["nodes"]]})


def _run_chain_reference(node, inputs, ctx):
    """``run_float_reference`` on the chain's own layout: the transposed input made contiguous first."""
    inverse = node.params["_inverse_perm"]
    if inverse is not None:
        inputs = [np.ascontiguousarray(np.transpose(inputs[0], inverse))]
    return run_float_reference(node, inputs, ctx)
