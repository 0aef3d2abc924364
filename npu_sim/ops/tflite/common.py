"""Shared helpers of the ``tflite`` arithmetic: TFLite's multipliers and activation range, the output
parameters of a node, operands, and the QUANTIZE-style rescale (``rescale_params``, ``apply_rescale``).
"""
from __future__ import annotations

import math

import numpy as np

from kernels.tflite_fixedpoint import tfl_quantize_multiplier
from kernels.tflite_rescale import tfl_rescale

from npu_sim.ir import QParams, Requant, Tensor
from npu_sim.lowering.problem import Problem, Refusal, Unsimulated
from npu_sim.ops import records


def quantize_multiplier(real: float, top: int = 30) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier of a factor its kernels can apply (a left shift of at most ``top`` bits: 30; 7 in
    the 16x8 requantization); a Problem naming the factor otherwise (scales out of any sensible range)."""
    if not (math.isfinite(real) and real >= 0):
        raise Problem(f"its scales give a requantization factor {real!r}, which is not a finite positive number")
    m, s = tfl_quantize_multiplier(real)
    if s > top:
        raise Problem(f"its scales give a requantization factor {real:.6g}, which needs a left shift of {s} bits: "
                      f"TFLite's kernels shift at most {top} (the scales of its inputs and output are out of any "
                      f"sensible range: re-calibrate)")
    return m, s


def multipliers(real, top: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Per-element TFLite (M, s) of an array of real factors (float64), each checked (``quantize_multiplier``)."""
    flat = np.asarray(real, np.float64).reshape(-1)
    pairs = [quantize_multiplier(float(v), top) for v in flat]
    return (np.array([p[0] for p in pairs], np.int64).reshape(np.shape(real)),
            np.array([p[1] for p in pairs], np.int64).reshape(np.shape(real)))


def float32_of(v) -> float:
    """``v`` rounded to float32 (TFLite computes its scale ratios in float32), as a Python float."""
    return float(np.float32(v))


def activation_range(q: QParams, act, node_name: str = "", ctx=None) -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized: ``zp + round_half_away(float32(bound) / scale)`` (float32),
    intersected with the dtype range. LiteRT refuses the model at prepare time
    (``no_integer_overflow_from_quantization``) when a rounded bound leaves the int32 range; a node the board's
    NPU compiler takes (``ctx.npu_compiled``: Vela) gets the bound clamped to the dtype range instead, as Vela
    writes it into the command stream, and a hazard warning (``ctx.hazard``)."""
    lo, hi = q.qmin, q.qmax
    if act is None:
        return lo, hi
    s, z = np.float32(q.scale), int(q.zero_point)
    out = []
    for bound in act:
        if not math.isfinite(bound):
            out.append(None)
            continue
        t = float(np.float32(np.float32(bound) / s))
        if not (math.isfinite(t) and -2.0 ** 31 - 0.5 < t < 2.0 ** 31 + 0.5):
            # TFLite compares the rounded float with float(INT32_MIN/MAX) = -+2**31
            fact = (f"the activation bound {bound:g} / output scale {float(q.scale):.6g} = {t:.6g} does not fit "
                    f"int32")
            if ctx is not None and ctx.npu_compiled and abs(t) >= 2.0 ** 63:
                raise Unsimulated(
                    f"{fact}, nor int64: Vela 5.2 compiles it, but the activation bound it writes into the command "
                    f"stream is not the clamp (measured in Vela's command streams: ACTIVATION_MAX 0 instead of 32767 "
                    f"where bound / scale passes 2**63); npu-sim does not simulate what the NPU computes there (the "
                    f"output range is almost empty: re-calibrate)")
            if ctx is not None and ctx.npu_compiled:
                ctx.hazard(f"{fact}: Vela clamps the bound to the {q.dtype} range (LiteRT's prepare would refuse "
                           f"it on the CPU); the output range is almost empty (scale {float(q.scale):.6g}), so "
                           f"its outputs are the zero point or saturate")
                out.append(lo if bound < 0 else hi)
                continue
            where = f"node {node_name!r}: " if node_name else ""
            raise Refusal(f"{where}LiteRT refuses this model at prepare time (no_integer_overflow_from_quantization): "
                          f"{fact}; the output scale is too small for the fused activation (re-calibrate: the "
                          f"output range is almost empty)")
        t = math.floor(abs(t) + 0.5) * (1 if t >= 0 else -1)
        out.append(z + int(t))
    if out[0] is not None:
        lo = max(lo, out[0])
    if out[1] is not None:
        hi = min(hi, out[1])
    return lo, hi


def out_params(lowering, out: Tensor, act, node_name: str = "") -> dict:
    """Output zero point, clamp bounds (``activation_range``) and dtype of a node's params."""
    lo, hi = activation_range(out.q, act, node_name, lowering)
    return {"out_zp": int(out.q.zero_point), "qmin": lo, "qmax": hi, "_out_dtype": out.q.np_dtype}


def act_tensor(arg, what: str) -> Tensor:
    """``arg`` as a per-tensor quantized tensor (else a Problem naming ``what``)."""
    if not isinstance(arg, Tensor) or not arg.q.per_tensor:
        raise Problem(f"{what} must be a per-tensor quantized tensor (DequantizeLinear)")
    return arg


def input_value(t: Tensor, inputs, i):
    """(value of operand ``t``, index of the next run-time input): a constant's data, else ``inputs[i]``."""
    if t.is_const:
        return t.data, i
    return inputs[i], i + 1


def activation_names(ts):
    """Names of the non-constant operands: a node's run-time inputs."""
    return [t.name for t in ts if not t.is_const]


# what the program listing shows of a rescale node, in this order: its ``requant`` record's values (``ir.LISTED``)
RESCALE_LISTED = ("x_zp", "tfl_mult", "tfl_shift", "out_zp", "qmin", "qmax")


def rescale_params(src: QParams, out: Tensor, act, float32_ratio: bool, ctx=None) -> dict:
    """TFLite's rescale from ``src`` to ``out`` (QUANTIZE; ``float32_ratio``: ReluX's float32 ratio; ``ctx``: the
    lowering context, for ``activation_range``) where it has no node of its own (a Concat input): the dict
    ``apply_rescale`` reads."""
    p, recs = rescale_prepared(src, out, act, float32_ratio, ctx)
    return _rescale_view(recs["requant"], p["_out_dtype"])


def rescale_prepared(src: QParams, out: Tensor, act, float32_ratio: bool, ctx=None) -> tuple[dict, dict]:
    """The params (the output dtype only) and the records of a node that rescales ``src`` to ``out``
    (``Node(..., params, **records)``): the multiplier, shift, zero points and clamp live in its records."""
    ratio = (float(np.float32(np.float32(src.scale) / np.float32(out.q.scale))) if float32_ratio
             else float32_of(src.scale) / float32_of(out.q.scale))
    m, s = quantize_multiplier(ratio)
    lo, hi = activation_range(out.q, act, ctx=ctx)
    return {"_out_dtype": out.q.np_dtype}, {
        "requant": records.tflite_requant(m, s, out.q.zero_point, lo, hi, in_zp=src.zero_point),
        "clamp": records.clamp(lo, hi), "listed": RESCALE_LISTED}


def _rescale_view(rq: Requant, out_dtype) -> dict:
    """The arguments ``kernels.tflite_rescale`` takes, from a ``requant`` record (Python ints, as prepared)."""
    return {"x_zp": rq.in_zp, "tfl_mult": int(rq.mult[0]), "tfl_shift": int(rq.shift[0]), "out_zp": rq.out_zp,
            "qmin": rq.qmin, "qmax": rq.qmax, "_out_dtype": out_dtype}


def apply_rescale(x, p):
    """``kernels.tflite_rescale`` with ``rescale_params`` (or a rescale node's ``record_view``)."""
    return tfl_rescale(x, p["x_zp"], p["tfl_mult"], p["tfl_shift"], p["out_zp"], p["qmin"], p["qmax"], p["_out_dtype"])


def record_view(node) -> dict:
    """A rescale node's ``apply_rescale`` arguments, made once from its ``requant`` record and kept in its memo."""
    view = node.memo.get("record_view")
    if view is None:
        view = node.memo["record_view"] = _rescale_view(node.requant, node.params["_out_dtype"])
    return view


def run_rescale(node, inputs, ctx):
    """Run a rescale node (``rescale_prepared``) from its records."""
    return [apply_rescale(inputs[0], record_view(node))]
