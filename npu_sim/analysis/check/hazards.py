"""Numeric hazards: things that break the integers whatever the board.

int32 biases clipped at INT32_MIN / INT32_MAX (onnxruntime issue #21000), biases that alone drive a channel past
its output range, worst-case (and, given a run, observed) accumulator overflow, per-channel weight scales
spanning orders of magnitude, dead weight channels.
"""
from __future__ import annotations

import numpy as np

from npu_sim.analysis.check.findings import INT32_MAX, INT32_MIN, rule
from npu_sim.analysis.check.measures import (bias_tensor, channel_list, precision, real_range, weight_abs_row_sums,
                                             weight_axis, weight_real_per_channel)
from npu_sim.opset import kind_of


@rule("bias.saturated", "error", "hazard")
def _bias_saturated(ctx, node):
    """The int32 bias of {op} is at INT32_MIN/INT32_MAX on channel(s) {channels}: the quantizer clipped it
    (bias scale = input scale x weight scale[c] = {bias_scale} is too small for the float bias), so those
    channels compute a wrong, often sign-flipped bias — onnxruntime issue #21000.

    Re-quantize with per-tensor weights (per_channel=False), or reduce_range=True, or int8 weights for this layer,
    or onnxruntime >= 1.20.1, which enlarges such weight scales so the bias fits (keep
    QDQDisableWeightAdjustForInt32Bias off)."""
    b = bias_tensor(ctx, node)
    if b is None:
        return None
    data = b.data.astype(np.int64)
    bad = np.flatnonzero((data == INT32_MIN) | (data == INT32_MAX))
    if bad.size == 0:
        return None
    scale = np.broadcast_to(b.q.scale, data.shape)[bad]
    return {"op": node.op, "channels": channel_list(bad), "count": int(bad.size),
            "bias_scale": f"{float(scale.min()):.3g}", "channel_list": [int(c) for c in bad]}


@rule("bias.range", "error", "hazard")
def _bias_range(ctx, node):
    """The bias of {op} is {bias:.4g} accumulator units (input scale x weight scale[c]) on channel(s) {channels},
    beyond the {bits}-bit accumulator it is added to: the board cannot hold it (a weight scale far smaller than
    the bias needs on those channels).

    Re-quantize this layer (per-tensor weights, or recalibrate the weights of those channels); an int32 bias that
    fits needs a weight scale of at least |bias| / (input scale x 2**31)."""
    rq, acc = node.requant, node.accumulator
    if rq is None or acc is None or acc.bits >= 64 or bias_tensor(ctx, node) is None:
        return None
    bias = np.asarray(rq.bias, np.int64).reshape(-1)
    bad = np.flatnonzero((bias < -2 ** (acc.bits - 1)) | (bias >= 2 ** (acc.bits - 1)))  # (INT32_MIN fits:
    #                                                                                       bias.saturated's case)
    if bad.size == 0:
        return None
    return {"op": node.op, "channels": channel_list(bad), "bias": float(np.abs(bias[bad]).max()), "bits": acc.bits,
            "channel_list": [int(c) for c in bad]}


@rule("bias.implausible", "warning", "hazard")
def _bias_implausible(ctx, node):
    """The bias of {op} alone is {factor:.3g}x the output's whole range on channel(s) {channels} (bias up to
    {bias:.4g}, output range ±{out_range:.4g}): those channels sit at the clamp whatever the input.

    Check the float model's bias and the calibration of this layer's output; if the bias comes from a clipped
    int32 (see bias.saturated), re-quantize with per-tensor weights or int8 weights."""
    b = bias_tensor(ctx, node)
    if b is None:
        return None
    real = np.abs(b.q.dequantize(b.data).astype(np.float64)).reshape(-1)
    out = ctx.t(node.outputs[0])
    lo, hi = real_range(out)
    out_range = max(abs(lo), abs(hi))
    ratio = real / out_range
    bad = np.flatnonzero(ratio > ctx.lint.bias_range_factor)
    if bad.size == 0:
        return None
    return {"op": node.op, "channels": channel_list(bad), "factor": float(ratio[bad].max()),
            "bias": float(real[bad].max()), "out_range": out_range}


def _worst_acc(ctx, node) -> int | None:
    """Largest |accumulator| any input can produce: max|x - zx| * max over outputs of sum|w - zw| + max|bias|."""
    if kind_of(node.op) != "mac":
        return None
    x = ctx.t(node.inputs[0])
    if x.q is None or not x.q.per_tensor:
        return None
    x_dev = x.q.reach
    w = ctx.weight(node)
    bias = node.requant.bias if node.requant is not None else np.zeros(1, np.int64)
    max_bias = int(np.abs(bias).max()) if bias.size else 0
    if w is None:  # two activations
        y = ctx.t(node.inputs[1])
        if y.q is None or not y.q.per_tensor:
            return None
        y_dev = y.q.reach
        return x_dev * y_dev * int(x.shape[-1]) + max_bias
    return x_dev * int(weight_abs_row_sums(node, w).max()) + max_bias


@rule("accumulator.worst_case", "warning", "hazard")
def _acc_worst(ctx, node):
    """{op}: the worst-case accumulator |acc| <= {bound} needs {needed} bits; the board accumulates in {bits}
    bits ({precision}), so extreme inputs can overflow it ({mode}).

    Usually harmless with real data (run `npu-sim check --run` to see observed overflow); otherwise reduce the
    layer's reduction length or weight range, or keep it at 8 bits."""
    bound = _worst_acc(ctx, node)
    bits = node.accumulator.bits if node.accumulator is not None else None
    if bound is None or bits is None or bits >= 64:
        return None
    if bound < 2 ** (bits - 1):
        return None
    return {"op": node.op, "bound": bound, "needed": bound.bit_length() + 1, "bits": bits,
            "precision": precision(ctx, node), "mode": ctx.arith.accumulator_overflow}


@rule("accumulator.observed", "error", "hazard")
def _acc_observed(ctx, node):
    """{op}: {count} accumulator value(s) overflowed the board's {bits}-bit accumulator in the run
    ({mode}): the outputs are wrong there.

    Reduce the layer's input range or weight range, or split the reduction; 8-bit operands with a 32-bit
    accumulator cannot overflow below about 130,000 products."""
    if not ctx.overflows or node.name not in ctx.overflows:
        return None
    return {"op": node.op, "count": int(ctx.overflows[node.name]),
            "bits": node.accumulator.bits if node.accumulator is not None else None,
            "mode": ctx.arith.accumulator_overflow}


@rule("weights.scale_spread", "warning", "hazard")
def _scale_spread(ctx, node):
    """The per-channel weight scales of {op} span {ratio:.3g}x (from {smin:.3g} on channel {cmin} to
    {smax:.3g} on channel {cmax}); tiny scales make the int32 bias scale tiny too (bias overflow, #21000) and
    the board's requantization shifts extreme.

    Check the float weights of the small channels (dead or nearly dead channels can be pruned); quantize this
    layer per tensor, or with reduce_range."""
    w = ctx.weight(node)
    if w is None or w.q.per_tensor or w.q.scale.size < 2:
        return None
    s = w.q.scale.astype(np.float64)
    ratio = float(s.max() / s.min())
    if ratio <= ctx.lint.weight_scale_ratio_max:
        return None
    return {"op": node.op, "ratio": ratio, "smin": float(s.min()), "smax": float(s.max()),
            "cmin": int(np.argmin(s)), "cmax": int(np.argmax(s))}


@rule("weights.dead_channel", "warning", "hazard")
def _dead_channels(ctx, node):
    """{op} has {count} all-zero or near-zero weight channel(s) ({channels}): max|w| below {ratio:.0e} of the
    layer's largest.

    Prune them from the float model (they waste MACs), or make sure their per-channel scales do not underflow."""
    w = ctx.weight(node)
    if w is None:
        return None
    m = weight_real_per_channel(w, weight_axis(node, w))
    top = float(m.max())
    bad = np.flatnonzero(m <= top * ctx.lint.dead_channel_ratio) if top > 0 else np.arange(m.size)
    if bad.size == 0:
        return None
    return {"op": node.op, "count": int(bad.size), "channels": channel_list(bad), "ratio": ctx.lint.dead_channel_ratio}
