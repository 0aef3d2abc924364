"""Shared preparation and run helpers of the op families.

Preparation turns float scale ratios into the board's integer form once:
fixed-point boards get ``(multiplier, shift)`` pairs from ``kernels.fixedpoint.quantize_multiplier``; the
``onnx`` arithmetic keeps onnxruntime's float32 ratio. ``requantize_acc`` applies either at run time.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kernels.fixedpoint import quantize_multiplier
from kernels.checks import cached_bind
from kernels.requantize import requantize, requantize_float, run_validated, saturation_bounds

from npu_sim.frontend.reader import attrs  # noqa: F401  (the families read attributes through here)
from npu_sim.ir import Node, QParams, Requant, Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records


def activation_bounds(lowering, onode) -> tuple[float, float]:
    """Float clamp interval of a Relu or Clip node."""
    if onode.op_type == "Relu":
        return (0.0, math.inf)
    a = attrs(onode)
    lo, hi = a.get("min", -math.inf), a.get("max", math.inf)
    names = list(onode.input) + ["", ""]
    for i, which in ((1, "min"), (2, "max")):
        if names[i]:
            value = lowering.const(names[i])
            if value is None:
                raise Problem(f"Clip {which} {names[i]!r} must be a constant")
            v = float(np.asarray(value, dtype=np.float64).reshape(-1)[0])
            if math.isnan(v):  # NaN compares false: onnxruntime applies no such bound (docs/TESTING.md)
                continue
            lo, hi = (v, hi) if which == "min" else (lo, v)
    return (float(min(lo, hi)), float(hi))  # min above max: every output is max, Min(max, Max(x, min))


def clamp_bounds(q: QParams, act) -> tuple[int, int]:
    """Integer output clamp: the dtype range intersected with the quantized activation interval.

    Quantizing the float bounds with the ONNX rule (round half to even) gives exactly the same result as
    clipping in float before QuantizeLinear, because rounding is monotone.
    """
    lo, hi = q.qmin, q.qmax
    if act is not None:
        s, z = float(q.scale), int(q.zero_point)
        if act[0] > -math.inf:
            lo = max(lo, min(hi, int(np.rint(np.float32(act[0]) / np.float32(s))) + z))
        if act[1] < math.inf:
            hi = min(hi, max(lo, int(np.rint(np.float32(act[1]) / np.float32(s))) + z))
    return lo, hi


def fixed_multipliers(real, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-element (multiplier, shift) arrays for an array of real factors (float64)."""
    real = np.asarray(real, dtype=np.float64)
    flat = real.reshape(-1)
    m = np.empty(flat.size, np.int64)
    r = np.empty(flat.size, np.int64)
    for i, v in enumerate(flat):
        m[i], r[i] = quantize_multiplier(float(v), bits)
    return m.reshape(real.shape), r.reshape(real.shape)


class Scales(NamedTuple):
    """A requantization prepared by ``requant_scales``: the bias in accumulator units, the board's accumulator
    width, which channels the run must check against it, and the board's multipliers (``mult, shift``) or
    onnxruntime's float32 ``ratio`` (the other None)."""
    bias: np.ndarray
    acc_bits: int
    acc_check: np.ndarray
    mult: np.ndarray | None
    shift: np.ndarray | None
    ratio: np.ndarray | None


def requant_scales(lowering, sx, sw, sy, n_channels: int, operand_bits, bias=None, alpha=1.0,
                   acc_bound: int | None = None) -> Scales:
    """The requantization of an accumulator in units of ``sx*sw[c]`` to output scale ``sy``.

    ``acc_bound`` (a proven bound on |acc| before the bias, e.g. max|x - zx| * max_c sum|w[c]|) lets the run
    skip the accumulator-width check when ``acc_bound + max|bias|`` cannot pass the board's width.

    fixedpoint: ``mult, shift`` from ``sx*sw[c]*alpha/sy`` (computed in float64 from the float32 scales).
    onnx: onnxruntime's float32 ratio ``float32(float32(sx*sw[c]) / sy)``.
    """
    arith = lowering.arith
    sw = np.broadcast_to(np.asarray(sw, np.float32), (n_channels,))
    bias = (np.zeros(n_channels, np.int64) if bias is None
            else np.broadcast_to(np.asarray(bias, np.int64), (n_channels,)).copy())
    acc_bits = arith.accumulator_bits(*operand_bits)
    # per channel: whether acc + bias can pass the board's width (then the run checks and counts it)
    check = np.array([acc_bound is None or acc_bound + abs(int(b)) >= 2 ** (acc_bits - 1) for b in bias], bool)
    if arith.own_recipe:
        real = np.float64(sx) * sw.astype(np.float64) * alpha / np.float64(sy)
        mult, shift = fixed_multipliers(real, arith.multiplier_bits)
        return Scales(bias, acc_bits, check, mult, shift, None)
    ratio = (np.float32(sx) * sw).astype(np.float32)
    if alpha != 1.0:
        ratio = (ratio * np.float32(alpha)).astype(np.float32)
    return Scales(bias, acc_bits, check, None, None, (ratio / np.float32(sy)).astype(np.float32))


def requant_record(lowering, scales: tuple, out: dict, bias, in_zp) -> Requant:
    """The ``Requant`` record of ``(mult, shift, ratio)`` (a ``Scales``' or a fixed-point pair's) with the output
    stage ``out`` (``output_params``)."""
    mult, shift, ratio = scales[-3:]
    if mult is not None:
        return records.fixed_requant(lowering.arith, mult, shift, out["out_zp"], out["qmin"], out["qmax"], bias, in_zp)
    return records.float_requant(lowering.arith, ratio, out["out_zp"], out["qmin"], out["qmax"], bias, in_zp)


def record_params(node: Node) -> dict:
    """The params ``requantize_acc``, ``rescale`` and ``scalar_rescale`` read, made once from the node's
    ``Requant`` and ``Accumulator`` records and kept in its memo: every node that requantizes keeps its
    multipliers, shifts, bias, zero points and clamp in its records only; its params give just what no record
    holds (the output dtype, and a MAC's channels to check, ``_acc_check``)."""
    view = node.memo.get("record_params")
    if view is None:
        view = requant_view(node.requant, node.accumulator, node.params["_out_dtype"], node.params.get("_acc_check"))
        node.memo["record_params"] = view
    return view


def requant_view(rq: Requant, acc, out_dtype, acc_check=None) -> dict:
    """The dict ``requantize_acc`` reads for the requantization ``rq`` with accumulator ``acc`` (the records'
    own arrays, not copies): ``record_params`` for a node, or a rescale that has no node of its own (a Concat
    input, a nearest Resize: ``rescale_params``)."""
    view = {"bias": rq.bias, "acc_bits": acc.bits, "out_zp": rq.out_zp, "qmin": rq.qmin, "qmax": rq.qmax,
            "_saturate": acc.saturate, "_out_dtype": out_dtype}
    if acc_check is not None:
        view["_acc_check"] = acc_check
    if rq.in_zp is not None:
        view["x_zp"] = rq.in_zp
    if rq.mult is not None:
        view["mult"], view["shift"] = rq.mult, rq.shift
    else:
        view["scale"] = rq.ratio
    return view


# what the requantize kernels read directly (narrow integers are quantized tensors whose zero point is in the bias)
ACC_DTYPES = tuple(np.dtype(d) for d in (np.int64, np.int32, np.int16, np.uint16, np.int8, np.uint8, np.float32,
                                         np.float64))


def requantize_acc(node: Node, ctx, acc: np.ndarray, outer: int, channels: int, inner: int,
                   params: dict | None = None, out: np.ndarray | None = None, channel_slice=slice(None),
                   offset: np.ndarray | None = None, memo: dict | None = None) -> np.ndarray:
    """Requantize an accumulator laid out as (outer, channels, inner) with prepared params (the node's records,
    ``record_params``, where none are passed).

    ``channel_slice`` selects the params' channels (a group of a convolution); ``offset`` (int64 per channel)
    is added to the bias; ``out`` (possibly a strided view) receives the result. The validated kernel set-ups
    are kept in ``memo``: the node's ``memo`` for its own params, else the one passed with ``params`` (none
    passed: nothing kept).
    """
    if params is None:
        p, m = record_params(node), node.memo
    else:
        p, m = params, ({} if memo is None else memo)
    acc3 = acc.reshape(outer, channels, inner)
    if acc3.dtype not in ACC_DTYPES or not acc3.flags.c_contiguous:
        acc3 = np.ascontiguousarray(acc3, dtype=np.int64)
    if out is None:
        out = np.empty(acc3.shape, dtype=p["_out_dtype"])
    if "mult" in p:
        prep = m.get("rq_prep", {}).get((channel_slice.start, channel_slice.stop, channel_slice.step))
        if (prep is not None and out.dtype == prep[0] and out.shape == acc3.shape
                and (offset is None or np.abs(offset).max(initial=0) < _OFFSET_LIMIT)):
            # validated on this slice's first call (below): run the kernel directly
            _, bias_c, mult_c, shift_c, bound_c, args = prep
            bias = bias_c if offset is None else bias_c + offset
            n = run_validated(acc3, bias, mult_c, shift_c, bound_c, *args, out)
        else:
            n = _requantize_validated(p, m, acc3, channel_slice, offset, out)
    elif p["acc_bits"] <= 32:
        bias = p["bias"][channel_slice] if offset is None else p["bias"][channel_slice] + offset
        n = requantize_float(acc3, bias, p["scale"][channel_slice], p["out_zp"], p["qmin"], p["qmax"], out)
    else:  # wide (16-bit) groups: onnxruntime computes these in float; model the exact sum, float32 ratio
        bias = p["bias"][channel_slice] if offset is None else p["bias"][channel_slice] + offset
        v = ((acc3.astype(np.int64) + bias.reshape(1, -1, 1)).astype(np.float64)
             * p["scale"][channel_slice].astype(np.float64).reshape(1, -1, 1))
        y = np.rint(np.clip(v, p["qmin"] - p["out_zp"], p["qmax"] - p["out_zp"])) + p["out_zp"]
        out[...] = y.astype(out.dtype)
        n = 0
    if n:
        ctx.overflow(node, int(n))
    return out


_OFFSET_LIMIT = 1 << 61  # prepared biases are below 2**61 too, so bias + offset stays inside the kernel's 2**62


def _requantize_validated(p: dict, m: dict, acc3, channel_slice, offset, out) -> int:
    """``kernels.requantize.requantize`` with every check; records what a later call on the same channel slice
    may pass to the kernel directly (contiguous per-channel arrays and the scalar arguments) in the memo ``m``."""
    check = p["_acc_check"][channel_slice] if "_acc_check" in p else np.ones(acc3.shape[1], bool)
    acc_bits = p["acc_bits"] if check.any() else 64  # 64: proven unable to overflow
    if "bound" not in m:  # saturation bounds depend on the multipliers only: compute them once
        m["bound"] = saturation_bounds(p["mult"], p["shift"], p["out_zp"], p["qmin"], p["qmax"])
    bias_c = p["bias"][channel_slice]
    bias = bias_c if offset is None else bias_c + offset
    n = requantize(acc3, bias, p["mult"][channel_slice], p["shift"][channel_slice], p["out_zp"], p["qmin"],
                   p["qmax"], acc_bits, p["_saturate"], out, bound=m["bound"][channel_slice])
    if bias_c.size == 0 or int(np.abs(bias_c).max()) < _OFFSET_LIMIT:
        limit = acc_bits < 64
        args = (int(p["out_zp"]), int(p["qmin"]), int(p["qmax"]), check & limit,
                -(1 << (acc_bits - 1)) if limit else 0, (1 << (acc_bits - 1)) - 1 if limit else 0, 64 - acc_bits,
                bool(p["_saturate"]))
        c = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
        m.setdefault("rq_prep", {})[(channel_slice.start, channel_slice.stop, channel_slice.step)] = (
            out.dtype, c(bias_c), c(p["mult"][channel_slice]), c(p["shift"][channel_slice]),
            c(m["bound"][channel_slice]), args)
    return n


def mac_bound(x_q: QParams, w_int: np.ndarray) -> int:
    """A proven bound on |sum((x - zx) * w)| over any output: max|x - zx| times the largest row sum of |w|."""
    x_dev = x_q.reach
    rows = np.abs(w_int.astype(np.int64)).reshape(w_int.shape[0], -1).sum(axis=1)
    return x_dev * int(rows.max()) if rows.size else 0


# what the program listing shows of a rescale node, in this order: its records' values (``ir.LISTED``)
RESCALE_LISTED = ("x_zp", "bias", "acc_bits", "mult", "shift", "out_zp", "qmin", "qmax")


def rescale_params(lowering, src: QParams, out: Tensor, act=None) -> dict:
    """A rescale of integers of quantization ``src`` to ``out``'s, ``R(q - zi, si/so) + zo`` clamped, that has no
    node of its own (a Concat input, a nearest Resize): the dict ``rescale`` reads (``requant_view``)."""
    p, recs = rescale_prepared(lowering, src, out, act)
    return requant_view(recs["requant"], recs["accumulator"], p["_out_dtype"])


def rescale_prepared(lowering, src: QParams, out: Tensor, act=None) -> tuple[dict, dict]:
    """The params (the output dtype only) and the records of a node that rescales ``src`` to ``out``
    (``Node(..., params, **records)``): the multiplier, shift, zero points and clamp live in its records."""
    mult, shift = fixed_multipliers(np.array([float(src.scale) / float(out.q.scale)]), lowering.arith.multiplier_bits)
    o = output_params(lowering, out, act)
    return {"_out_dtype": o["_out_dtype"]}, {
        "requant": requant_record(lowering, (mult, shift, None), o, np.zeros(1, np.int64), src.zero_point),
        "accumulator": records.accumulator(64, o["_saturate"]), "clamp": records.clamp(o["qmin"], o["qmax"]),
        "listed": RESCALE_LISTED}


def rescale(node: Node, ctx, q: np.ndarray, params: dict, memo: dict) -> np.ndarray:
    """Apply a rescale (``record_params`` of a rescale node, or ``rescale_params``) to an integer array (its zero
    point goes into the bias: no widened copy); ``memo``: the run-time memo kept for these params
    (``requantize_acc``)."""
    q = np.ascontiguousarray(q)
    return requantize_acc(node, ctx, q, 1, 1, q.size, params,
                          offset=np.array([-params["x_zp"]], np.int64), memo=memo).reshape(q.shape)


def layout_memo(memo: dict, slot: str, key, make):
    """``make()`` -- a node's run closure for inputs of one layout, or None where its fast path does not apply --
    kept in the run-time ``memo`` (the node's, ``Node.memo``) under ``slot`` while ``key`` (those inputs' shapes
    and dtypes) repeats: the kernels' ``cached_bind`` with a memo per node and path."""
    return cached_bind(memo.setdefault(slot, {}), key, make)


def bound_closure(run, in_shape, buf_shape, out_shape, dtype):
    """``f(x) -> y`` for a one-input node whose kernel was bound once (``run(x_view, out)``, validated for these
    shapes): ``x`` viewed as ``in_shape``, a fresh output of ``buf_shape`` and ``dtype``, returned as
    ``out_shape``. The run path of the nodes that prepare once and run many times."""
    def f(x):
        out = np.empty(buf_shape, dtype)
        run(np.ascontiguousarray(x).reshape(in_shape), out)
        return out.reshape(out_shape)
    return f


def output_params(lowering, out: Tensor, act) -> dict:
    qmin, qmax = clamp_bounds(out.q, act)
    return {"out_zp": int(out.q.zero_point), "qmin": qmin, "qmax": qmax,
            "_out_dtype": out.q.np_dtype, "_saturate": lowering.arith.accumulator_overflow == "saturate"}


def check_per_tensor(t: Tensor, what: str) -> None:
    if not t.q.per_tensor:
        raise Problem(f"{what} {t.float_name!r} is quantized per axis; npu-sim needs per-tensor quantization here")


def const_value(lowering, arg, what: str) -> np.ndarray:
    """Float value of a constant input: a raw initializer or a dequantized constant tensor."""
    if isinstance(arg, np.ndarray):
        return arg
    if isinstance(arg, Tensor) and arg.is_const:
        return arg.q.dequantize(arg.data)
    raise Problem(f"{what} must be a constant")


def int_const(lowering, arg, what: str) -> np.ndarray:
    """An int64 constant input (shapes, axes, pads, indices)."""
    if isinstance(arg, np.ndarray) and arg.dtype.kind in "iu":
        return arg.astype(np.int64)
    raise Problem(f"{what} must be a constant integer tensor (computed shapes are not supported)")


def operand(lowering, arg, what: str) -> Tensor:
    """A quantized operand; a raw float constant is quantized to int16 (symmetric) as the board would store it."""
    if isinstance(arg, Tensor):
        check_per_tensor(arg, what)
        return arg
    if isinstance(arg, np.ndarray):
        value = arg.astype(np.float32)
        amax = float(np.max(np.abs(value))) if value.size else 0.0
        q = QParams("int16", np.array(amax / 32767 if amax > 0 else 1.0, np.float32), np.array(0, np.int64))
        return Tensor(f"const:{what}", what, tuple(value.shape), q, q.quantize(value))
    raise Problem(f"{what} is missing")
