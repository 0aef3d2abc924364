"""Board rules: what the NPU accepts, as data in the board's ``[rules]`` section (``npu_sim.boards.rules``).

Which ops run on the NPU (others fall back to the CPU), dtypes, zero points, per-channel weights,
kernel/stride/dilation/pad/channel limits, resize factors, the int16 convolution rule (``in_ch/groups * kh * kw``
within the board's ``int16_max_reduction``) and the legal requantization shift range.
"""
from __future__ import annotations

import json

import numpy as np

from npu_sim.analysis.check.findings import rule
from npu_sim.analysis.check.measures import (bias_tensor, channel_list, fmt_dtypes, geometry, max_output_lsb,
                                             precision, reduction, weight_abs_row_sums)
from npu_sim.boards.rules import QUANT_TYPES
from npu_sim.opset import facts_of, kind_of


@rule("npu.op", "warning", "board")
def _npu_op(ctx, node):
    """{op} is not an NPU op on this board: it runs on the CPU, with a transfer each way between NPU and CPU
    memory.

    Replace it with ops the NPU runs (see docs/SUPPORTED_OPS.md), or accept the CPU round trip; `npu-sim estimate`
    costs it."""
    if ctx.limits[node.name] is None and ctx.rules.constrained:
        return {"op": node.op, "severity": "warning" if ctx.rules.cpu_fallback else "error"}
    return None


@rule("dtype.activation", "error", "board", quantization_setting=True)
def _dtype_activation(ctx, node):
    """{op} has {dtype} activation tensor(s) ({tensors}); the NPU's {op} takes {allowed}.

    Quantize {what} as {taken} ({setting}){how}."""
    lim = ctx.limits[node.name]
    if lim is None or not ctx.rules.constrained:
        return None
    allowed = lim.activation_dtypes or ctx.rules.activation_dtypes
    tensors = ctx.owned(node)
    if lim.dynamic_dtypes is not None and kind_of(node.op) == "mac" and ctx.weight(node) is None:
        allowed = lim.dynamic_dtypes  # both operands are activations: the inputs are what the limit is about
        tensors = [ctx.t(n) for n in node.inputs if ctx.t(n).q is not None]
    bad = [(t, ctx.rules.activation_setting(t.q.dtype, allowed)) for t in tensors if t.q.dtype not in allowed]
    if not bad:
        return None
    taken, symmetric = bad[0][1]
    overrides = [_override(t, s) for t, s in bad]
    if all(t.q.dtype in ctx.rules.activation_dtypes for t, _ in bad):  # the op's own limit: only these tensors
        what = "these tensors"
        setting = "quantize_static extra_options TensorQuantOverrides " + json.dumps(
            {o["tensor"]: [{k: v for k, v in o.items() if k != "tensor"}] for o in overrides})
        how = ""
    else:
        what, setting = "the model's activations", f"quantize_static activation_type=QuantType.{QUANT_TYPES[taken]}"
        how = (', symmetric: extra_options={"ActivationSymmetric": True}' if symmetric else
               f"; the board takes {taken} activations with zero points, so they need not be symmetric")
    return {"op": node.op, "dtype": "/".join(sorted({t.q.dtype for t, _ in bad})),
            "tensors": ", ".join(t.float_name for t, _ in bad[:3]), "allowed": fmt_dtypes(allowed),
            "taken": taken, "what": what, "setting": setting, "how": how, "overrides": overrides}


def _override(t, setting: tuple[str, bool]) -> dict:
    """The finding's fix for tensor ``t`` as a quantize_static TensorQuantOverrides entry (``tensor``: its float
    name): quantized as ``setting`` (``Rules.activation_setting``) says the board takes it."""
    dtype, symmetric = setting
    return {"tensor": t.float_name, "quant_type": QUANT_TYPES[dtype], **({"symmetric": True} if symmetric else {})}


@rule("dtype.weight", "error", "board", quantization_setting=True)
def _dtype_weight(ctx, node):
    """{op} has {dtype} weights; the NPU's {op} takes {allowed}.

    Quantize the weights as {allowed} (quantize_static weight_type=QuantType.QInt8)."""
    lim = ctx.limits[node.name]
    w = ctx.weight(node)
    if lim is None or w is None or not ctx.rules.constrained:
        return None
    allowed = lim.weight_dtypes or ctx.rules.weight_dtypes
    if w.q.dtype not in allowed:
        return {"op": node.op, "dtype": w.q.dtype, "allowed": fmt_dtypes(allowed)}
    return None


@rule("zero_point.activation", "error", "board", quantization_setting=True)
def _zp_activation(ctx, node):
    """{tensor} has zero point {zp}; the NPU takes {dtype} activations only symmetric (zero point 0){also}.

    Quantize activations symmetrically: quantize_static(..., activation_type=QuantType.{qtype},
    extra_options={{"ActivationSymmetric": True}}){only}."""
    lim = ctx.limits[node.name]
    if lim is None or ctx.rules.activation_zero_points is True:
        return None
    allowed = lim.activation_dtypes or ctx.rules.activation_dtypes
    # symmetric already, or the dtype the board takes in its place may keep a zero point: nothing to say
    hits = [(t, s) for t in ctx.owned(node) if not t.q.symmetric
            for s in [ctx.rules.activation_setting(t.q.dtype, allowed)] if s[1]]
    if not hits:
        return None
    t, (taken, _) = hits[0]
    zp = t.q.zero_point.reshape(-1)
    free = [d for d in ctx.rules.activation_dtypes if ctx.rules.zero_points_allowed(d)]
    refused = t.q.dtype not in allowed
    return {"tensor": t.float_name, "zp": int(zp[np.argmax(zp != 0)]), "dtype": taken if refused else t.q.dtype,
            "also": (f", and no {t.q.dtype} at all (dtype.activation)" if refused else "" if taken == t.q.dtype
                     else f": as {taken}, which holds negative values at zero point 0"),
            "qtype": QUANT_TYPES[taken], "overrides": [_override(x, s) for x, s in hits],
            "only": (f"; the board takes {fmt_dtypes(free)} activations with zero points, so only the {taken} "
                     f"tensors need it: TensorQuantOverrides {{\"{t.float_name}\": [{{\"quant_type\": "
                     f"\"{QUANT_TYPES[taken]}\", \"symmetric\": true}}]}} per tensor") if free else ""}


@rule("zero_point.weight", "error", "board", quantization_setting=True)
def _zp_weight(ctx, node):
    """The weights of {op} have non-zero zero points; the NPU takes symmetric weights only.

    Quantize weights symmetrically (quantize_static extra_options={{"WeightSymmetric": True}}, the default for
    int8 weights)."""
    w = ctx.weight(node)
    if ctx.limits[node.name] is None or w is None or ctx.rules.weight_zero_points or w.q.symmetric:
        return None
    return {"op": node.op}


@rule("weights.per_channel", "error", "board")
def _per_channel(ctx, node):
    """{op} has per-channel weight scales; this NPU takes one weight scale per layer.

    Quantize with per_channel=False."""
    w = ctx.weight(node)
    if ctx.limits[node.name] is None or w is None or ctx.rules.per_channel_weights or w.q.per_tensor:
        return None
    return {"op": node.op}


def _limit_rule(rule_id, what, key, measure, noun, hint=""):
    """A board limit: ``{op} has {what} {value}`` (``what`` reads before the value), fixed by bringing the
    layer's ``noun`` down to the limit; ``hint`` says how, where there is a usual way."""
    def func(ctx, node):
        lim = ctx.limits[node.name]
        limit = getattr(lim, key) if lim is not None else None
        if limit is None:
            return None
        value = measure(ctx, node)
        if value is not None and value > limit:
            return {"op": node.op, "value": value, "limit": limit}
        return None
    func.__doc__ = (f"{{op}} has {what} {{value}}; the NPU allows at most {{limit}}.\n\n"
                    f"Change the layer so that its {noun} is at most {{limit}}{f' ({hint})' if hint else ''}.")
    rule(rule_id, "error", "board")(func)


def _max_of(key):
    def measure(ctx, node):
        v = geometry(node)[key]
        return None if v is None else int(max(v))
    return measure


def _channels_of(ctx, node):
    xs = [ctx.t(n) for n in node.inputs if not ctx.t(n).is_const] + [ctx.t(n) for n in node.outputs]
    cs = [t.shape[1] for t in xs if len(t.shape) >= 3]
    return max(cs) if cs else None


def _padded(node) -> bool:
    pads = geometry(node)["pads"]
    return pads is not None and any(int(v) for v in pads)


def _stride_unless_valid(ctx, node):
    """The stride, when the op pads or dilates (stride_max_valid covers the unpadded, undilated case)."""
    stride = _max_of("stride")(ctx, node)
    dil = _max_of("dilation")(ctx, node)
    return stride if _padded(node) or (dil or 1) > 1 else None


def _stride_valid(ctx, node):
    return None if _stride_unless_valid(ctx, node) is not None else _max_of("stride")(ctx, node)


def _depthwise_stride(ctx, node):
    w = ctx.weight(node)
    if not facts_of(node.op).convolution or w is None or w.shape[1] != 1 or node.attrs.get("group", 1) <= 1:
        return None
    return _max_of("stride")(ctx, node)


def _kernel_area(ctx, node):
    k = geometry(node)["kernel"]
    return None if k is None else int(np.prod(k))


def _kernel_padded(ctx, node):
    return _max_of("kernel")(ctx, node) if _padded(node) else None


def _weight_abs_sum(ctx, node):
    w = ctx.weight(node)
    if w is None:
        return None
    return int(weight_abs_row_sums(node, w).max())


def _bias_abs(ctx, node):
    b = bias_tensor(ctx, node)
    return int(np.abs(b.data.astype(np.int64)).max()) if b is not None and b.data.size else None


_SMALLER_KERNELS = "e.g. a stack of smaller kernels"
_limit_rule("limit.kernel", "a kernel size of", "kernel_max", _max_of("kernel"), "kernel size", _SMALLER_KERNELS)
_limit_rule("limit.kernel_area", "a kernel area (kh x kw) of", "kernel_area_max", _kernel_area, "kernel area",
            _SMALLER_KERNELS)
_limit_rule("limit.kernel_padded", "padding with a kernel size of", "kernel_max_padded", _kernel_padded,
            "kernel size", "or drop its padding")
_limit_rule("limit.stride_valid", "no padding or dilation and a stride of", "stride_max_valid", _stride_valid,
            "stride")
_limit_rule("limit.depthwise_stride", "a depthwise stride of", "depthwise_stride_max", _depthwise_stride,
            "stride", "e.g. stride 1 followed by a strided pooling or subsampling layer")
_limit_rule("limit.weight_sum", "a sum of absolute weights (one output channel) of", "weight_abs_sum_max",
            _weight_abs_sum, "sum of absolute weights per output channel",
            "e.g. split its input channels across layers and add their results")
_limit_rule("limit.bias", "a bias magnitude of", "bias_max", _bias_abs, "largest bias",
            "the bias is in units of input scale x weight scale: larger scales make it smaller")
_limit_rule("limit.stride", "a stride of", "stride_max", lambda ctx, node: (
    _stride_unless_valid(ctx, node) if ctx.limits[node.name].stride_max_valid is not None
    else _max_of("stride")(ctx, node)), "stride")
_limit_rule("limit.dilation", "a dilation of", "dilation_max", _max_of("dilation"), "dilation")
_limit_rule("limit.pad", "a padding of", "pad_max", _max_of("pads"), "padding", "e.g. an explicit Pad before it")
_limit_rule("limit.channels", "a channel count of", "channels_max", _channels_of, "channel count",
            "e.g. split it into layers over fewer channels and concatenate them")


@rule("limit.resize_scale", "error", "board")
def _resize_scale(ctx, node):
    """Resize scales {shape_in} to {shape_out} (factor {factor}); the NPU resizes only by {allowed}.

    Resize by a supported factor (in several steps if needed), or resize on the CPU."""
    lim = ctx.limits[node.name]
    if lim is None or lim.resize_scales is None or kind_of(node.op) != "resize":
        return None
    x, y = ctx.t(node.inputs[0]), ctx.t(node.outputs[0])
    hin, win, hout, wout = x.shape[-2], x.shape[-1], y.shape[-2], y.shape[-1]
    if (hin, win) == (hout, wout) or (hin == 1 and win == 1):
        return None
    factors = {hout / hin, wout / win}
    if all(f in lim.resize_scales for f in factors) and len(factors) == 1:
        return None
    return {"shape_in": f"{hin}x{win}", "shape_out": f"{hout}x{wout}",
            "factor": "/".join(f"{f:g}" for f in sorted(factors)), "allowed": ", ".join(f"{f}x" for f in lim.resize_scales)}


@rule("int16.reduction", "error", "board")
def _int16_reduction(ctx, node):
    """{op} runs at {precision} but one output sums in_ch/groups x kh x kw = {value} products; the NPU allows
    16-bit MACs only up to {limit}.

    Keep this layer at 8 bits (onnxruntime TensorQuantOverrides for its input/output tensors), or split it so each
    part sums at most {limit} products (fewer input channels per group, smaller kernel)."""
    lim = ctx.limits[node.name]
    if lim is None or lim.int16_max_reduction is None:
        return None
    prec = precision(ctx, node)
    if "16" not in prec:
        return None
    k = reduction(ctx, node)
    if k is not None and k > lim.int16_max_reduction:
        return {"op": node.op, "precision": prec, "value": k, "limit": lim.int16_max_reduction}
    return None


@rule("requant.range", "error", "board")
def _requant_range(ctx, node):
    """The requantization factor of {op} (input scale x weight scale / output scale) needs a right shift of
    {shift} on channel(s) {channels}, outside the board's range [{shift_min}, {shift_max}]{underflow}.

    The factor is far too small: the output scale is huge compared with input x weight scales (often a channel
    with tiny weights and a bias). Re-calibrate (check the output range), prune dead channels, or quantize the
    weights per tensor."""
    rq = node.requant  # the fixed-point multipliers and shifts the lowering made (npu_sim.ir.Requant)
    if rq is None or rq.rounding != "half_up" or ctx.limits[node.name] is None:
        return None
    mult, shift = rq.mult, rq.shift
    lo, hi = ctx.rules.shift_min, ctx.rules.shift_max
    bad = (mult == 0) | (shift < lo) | (shift > hi)
    if bad.any():
        effect = max_output_lsb(ctx, node)  # a channel that can never move its output by half an LSB is moot
        if effect is not None and effect.size == bad.size:
            bad &= effect >= 0.5
    bad = np.flatnonzero(bad)
    if bad.size == 0:
        return None
    flushed = bool(np.any(mult[bad] == 0))
    s = shift[bad][mult[bad] != 0]
    return {"op": node.op, "shift": (f"{int(s.min())}..{int(s.max())}" if s.size else f"> {hi}"),
            "channels": channel_list(bad), "shift_min": lo, "shift_max": hi,
            "underflow": " (the factor underflows to a zero multiplier)" if flushed else ""}
