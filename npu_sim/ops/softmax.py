"""Softmax on the board: integer exponentials from lookup tables, an int64 sum, a normalized reciprocal.

ONNX semantics: opset >= 13 normalizes along the single axis ``axis`` (default -1); opset < 13 flattens the input
to 2-D at ``axis`` (default 1) and normalizes each row over all trailing axes. Both become "rows" of ``n`` values
(the normalized axes moved last), one kernel call over all rows.

Board integer algorithm (``kernels/softmax.py``), per row of quantized inputs ``q`` (scale ``s``; the zero point
cancels):

1. ``d = max(q) - q`` (integer, >= 0; 8 bits for 8-bit inputs, 16 bits for 16-bit inputs).
2. Exponential ``e ~= 2**30 * exp(-d * s)``, a Q.30 integer in [0, 2**30] (exactly 2**30 at the maximum):

   * 8-bit inputs: one table lookup ``e = E[d]`` in a 256-entry table built here from the input scale,
     ``E[d] = round(2**30 * exp(-d * s))`` (31-bit entries, at most 2**30).
   * 16-bit inputs: base-2 split with the board's interpolated table (``lut_entries_16 = 2**K + 1`` entries,
     ``T[i] = round(2**30 * 2**(-i / 2**K))``, 31-bit entries). ``pos = mul_round_shift(d, M, r)`` is
     ``d * s / ln 2`` with ``F = K + 15`` fraction bits (fewer for very large scales; ``pos`` < 2**46),
     ``k = pos >> F`` is the power of two, the next ``K`` bits index ``T``, the last ``F - K`` bits interpolate
     linearly, and ``e = round(T(frac) / 2**k)`` (0 once ``k >= 31``, i.e. ``d * s > 21.5``). Interpolating
     ``2**-f`` over one octave keeps the relative error below ``(ln 2 / 2**K)**2 / 8`` (2e-7 for K = 9).

3. ``S = sum(e)`` in int64: ``2**30 <= S <= n * 2**30`` (``n < 2**32``).
4. Reciprocal: ``h = bit_length(S) - 1`` (count leading zeros), mantissa ``x = S >> (h - 30)`` in Q1.30
   ([1, 2)); a ``2**K + 1``-entry table ``R[i] = round(2**30 / (1 + i / 2**K))`` (K from ``lut_entries_16``)
   indexed by the top ``K`` fraction bits, linear interpolation on the other ``30 - K`` bits, one Newton step
   ``y1 = y0 (2 - x y0)`` in Q.30 (relative error ~1e-9): ``y1 / 2**30 ~= 2**h / S``.
5. ``p = (e * y1 + 2**(h-2)) >> (h-1)``: the probability in Q.31 (``e * y1 < 2**60``).
6. Output ``y = clamp(mul_round_shift(p, M_out, r_out) + zp_out)`` with ``M_out * 2**-r_out = 2**-31 / s_out``
   (onnxruntime's quantizer fixes the output range to [0, 1]: scale 1/255 for 8 bits, 1/65535 for 16 bits, and
   the zero point at the bottom of the type), saturated to the output type and any fused Relu/Clip bounds.

Measured: within 0.5000001 output LSB of the float64 softmax of the same integers at 8 bits (1/255 outputs),
0.5001 at 16 bits (1/65535), over input scales 1e-6 .. 4; against onnxruntime at most 1 LSB.

``onnx`` arithmetic: the ONNX definition (dequantize, float32 Softmax, quantize), see ``onnx_arith``. onnxruntime
fuses 8-bit groups into com.microsoft QLinearSoftmax (a float exponential table, its own rounding), which is not
modelled: up to 1 LSB from it (the board ``default`` and the ONNX definition agree bit for bit on the 8-bit tests).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from kernels.fixedpoint import quantize_multiplier
from kernels.softmax import softmax_lut8, softmax_lut16

from kernels.ort_qlsoftmax import defined as ort_softmax_defined
from kernels.ort_qlsoftmax import qlinear_softmax

from npu_sim.ops.elementwise import ort_fuses_qdq_group
from npu_sim.ir import Geometry, Node, Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import attrs, check_per_tensor, output_params
from npu_sim.ops.onnx_arith import lower_float_reference

Q30 = 1 << 30
EXP_GUARD_BITS = 15  # interpolation bits below the table index of the 16-bit exponential



# ---- tables (built once at lowering, from the board description and the input scale) -----------------------
def _round(v: float) -> int:
    return int(math.floor(v + 0.5))


def exp_table_8(scale: float, size: int = 256) -> np.ndarray:
    """``E[d] = round(2**30 * exp(-d * scale))`` for d in [0, size)."""
    return np.array([_round(Q30 * math.exp(-d * float(scale))) for d in range(size)], np.int64)


def exp2_table(lut_bits: int) -> np.ndarray:
    """``T[i] = round(2**30 * 2**(-i / 2**K))`` for i in [0, 2**K]."""
    k = 1 << lut_bits
    return np.array([_round(Q30 * 2.0 ** (-i / k)) for i in range(k + 1)], np.int64)


def recip_table(lut_bits: int) -> np.ndarray:
    """``R[i] = round(2**30 / (1 + i / 2**K))`` for i in [0, 2**K]."""
    k = 1 << lut_bits
    return np.array([_round(Q30 / (1.0 + i / k)) for i in range(k + 1)], np.int64)


def lut_bits_of(lowering) -> int:
    """K of the board's ``lut_entries_16 = 2**K + 1``."""
    return (lowering.arith.lut_entries_16 - 1).bit_length() - 1


def exp_position(scale: float, lut_bits: int) -> tuple[int, int, int]:
    """(mult, shift, F): ``mult * 2**-shift ~= scale / ln 2 * 2**F`` with ``F = K + 15``, lowered while the factor
    would need 31 or more integer bits. Raises ValueError if even ``F = K`` does not fit."""
    base = float(scale) / math.log(2.0)
    frac = lut_bits + EXP_GUARD_BITS
    while frac > lut_bits and base * 2.0 ** frac >= 2.0 ** 30:
        frac -= 1
    if base * 2.0 ** frac >= 2.0 ** 30:
        raise ValueError(f"input scale {scale} is too large for the exponential table")
    m, r = quantize_multiplier(base * 2.0 ** frac)
    return m, r, frac


# ---- rows along normalized axes (shared with layernorm) ---------------------------------------------------
def to_rows(x: np.ndarray, axes: tuple[int, ...]):
    """``x`` as a C-contiguous (rows, n) array with ``axes`` moved last, and a function mapping such an array
    back to ``x``'s layout."""
    rank = x.ndim
    if tuple(axes) == tuple(range(rank - len(axes), rank)):  # trailing axes (the usual case): a reshape
        shape = x.shape
        n = 1
        for a in axes:
            n *= shape[a]
        return np.ascontiguousarray(x).reshape(-1, n), lambda y: y.reshape(shape)
    rest = [a for a in range(rank) if a not in axes]
    order = rest + list(axes)
    moved = x if order == list(range(rank)) else np.transpose(x, order)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    rows = np.ascontiguousarray(moved.reshape(-1, n))
    moved_shape = moved.shape
    inverse = np.argsort(order)

    def back(y: np.ndarray) -> np.ndarray:
        y = y.reshape(moved_shape)
        return y if order == list(range(rank)) else np.ascontiguousarray(np.transpose(y, inverse))

    return rows, back


def softmax_axes(lowering, onode, rank: int) -> tuple[int, ...]:
    a = attrs(onode)
    opset = lowering.opset
    axis = int(a.get("axis", -1 if opset >= 13 else 1))
    if not -rank <= axis < rank:
        raise Problem(f"Softmax axis {axis} is out of range for rank {rank}")
    axis %= rank
    return (axis,) if opset >= 13 else tuple(range(axis, rank))


# ---- lowering -------------------------------------------------------------------------------------------------
def lower_softmax_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: onnxruntime's QLinearSoftmax where it fuses the group (and defines the result),
    else ONNX's definition of the QDQ group."""
    x = args[0]
    axes = softmax_axes(lowering, onode, len(x.shape))
    if (len(axes) == 1 and act is None and ort_fuses_qdq_group(lowering, onode, args, out)
            and ort_softmax_defined(x.q.scale, x.shape[axes[0]], out.q.scale)):
        p = {"axis": axes[0], "_sx": np.float32(x.q.scale), "_sy": np.float32(out.q.scale),
             "out_zp": int(out.q.zero_point)}
        return Node(lowering.node_name(onode), "Softmax", [x.name], [out.name], _run_ort_qlsoftmax, p,
                    {"axes": axes, "arithmetic": "onnxruntime QLinearSoftmax"})
    return _lower_reference(lowering, onode, args, out, act, axes)


def lower_softmax(lowering, onode, args, out: Tensor, act) -> Node:
    x = args[0]
    axes = softmax_axes(lowering, onode, len(x.shape))
    check_per_tensor(x, "Softmax input")
    s_in, s_out = float(x.q.scale), float(out.q.scale)
    k = lut_bits_of(lowering)
    try:
        out_mult, out_shift = quantize_multiplier(2.0 ** -31 / s_out)
    except ValueError:
        raise Problem(f"Softmax output scale {s_out:g} is too small for the fixed-point output stage") from None
    p = {"axes": axes, "out_mult": out_mult, "out_shift": out_shift}
    recip = recip_table(k)
    if x.q.bits <= 8:
        p["variant"] = "lut8"
        exp = exp_table_8(s_in, x.q.qmax - x.q.qmin + 1)
    else:
        p["variant"] = "lut16"
        try:
            p["pos_mult"], p["pos_shift"], p["frac_bits"] = exp_position(s_in, k)
        except ValueError as exc:
            raise Problem(str(exc)) from None
        exp = exp2_table(k)
    o = output_params(lowering, out, act)
    p.update(o)
    return Node(lowering.node_name(onode), "Softmax", [x.name], [out.name], _run_softmax, p,
                {"axes": axes, "variant": p["variant"]}, geometry=Geometry(axes=tuple(int(a) for a in axes)),
                tables=records.tables({"recip": recip, "exp": exp}),  # the run reads its tables there
                clamp=records.clamp(o["qmin"], o["qmax"]))


def _run_ort_qlsoftmax(node, inputs, ctx):
    """onnxruntime's QLinearSoftmax: rows along the axis (moved last, as onnxruntime transposes)."""
    p = node.params
    x = np.moveaxis(inputs[0], p["axis"], -1)
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    out = np.empty(rows.shape, rows.dtype)
    qlinear_softmax(rows, p["_sx"], p["_sy"], p["out_zp"], out)
    return [np.ascontiguousarray(np.moveaxis(out.reshape(x.shape), -1, p["axis"]))]


def _lower_reference(lowering, onode, args, out: Tensor, act, axes) -> Node:
    """The ONNX definition. ``onnx_arith`` evaluates at opset >= 13, so an opset < 13 Softmax (rows flattened over
    the trailing axes) runs as an opset-13 Softmax over the last axis of the (rows, n) view."""
    if lowering.opset >= 13:
        return lower_float_reference(lowering, onode, args, [out], act)
    flat = helper.make_node("Softmax", list(onode.input), list(onode.output), name=onode.name, axis=-1)
    node = lower_float_reference(lowering, flat, args, [out], act)
    node.params["_axes"] = axes
    node.params["_inner"] = node.run
    node.run = _run_flattened_reference
    return node


def _run_flattened_reference(node, inputs, ctx):
    rows, back = to_rows(inputs[0], node.params["_axes"])
    return [back(node.params["_inner"](node, [rows], ctx)[0])]


def _run_softmax(node, inputs, ctx):
    p = node.params
    rows, back = to_rows(inputs[0], p["axes"])
    y = np.empty(rows.shape, p["_out_dtype"])
    out_stage = (p["out_mult"], p["out_shift"], p["out_zp"], p["qmin"], p["qmax"], y)
    exp, recip = node.tables.entries["exp"], node.tables.entries["recip"]
    if p["variant"] == "lut8":
        softmax_lut8(rows, exp, recip, *out_stage, cache=node.memo.setdefault("k_cache", {}))
    else:
        softmax_lut16(rows, p["pos_mult"], p["pos_shift"], p["frac_bits"], exp, recip, *out_stage,
                      cache=node.memo.setdefault("k_cache", {}))
    return [back(y)]
