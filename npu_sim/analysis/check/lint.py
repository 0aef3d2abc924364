"""Quantization-friendliness lint (our design document's checklist).

Lookup-table ops and LUT chains (Softmax, LayerNorm), large kernels, Concat of inputs with very different
ranges, a model input that is not symmetric or not normalized for the fixed 1/128 stub, activations and weights
with very large ranges. Thresholds: the board's ``[rules.lint]`` (``npu_sim.boards.rules.Lint``).
"""
from __future__ import annotations

import math

import numpy as np

from npu_sim.analysis.check.findings import rule
from npu_sim.analysis.check.measures import geometry, real_range, reduction, weight_axis, weight_real_per_channel
from npu_sim.opset import facts_of, kind_of

LUT_CHAIN_TABLES = 3  # a chain of lookup tables and integer steps (Softmax, LayerNorm) counts as this many tables


@rule("lint.lut", "info", "lint")
def _lut(ctx, node):
    """{op} runs as a lookup table ({entries}): an accuracy risk when quantized, worst at 16 bits (interpolated).

    Fine when used sparingly; `npu-sim report` measures its error. docs/LUT_ERRORS.md lists each table's
    error."""
    kind = kind_of(node.op)
    if kind != "lut" and not (kind == "elementwise" and node.tables is not None):  # (Div by an activation)
        return None
    bits = ctx.t(node.inputs[0]).q.bits
    entries = node.attrs.get("table") or (  # an arithmetic with its own tables says which (tflite)
        "256 entries" if bits <= 8 else f"{ctx.arith.lut_entries_16} entries, interpolated")
    return {"op": node.op, "entries": entries}


@rule("lint.lut_chain", "warning", "lint")
def _lut_chain(ctx, node):
    """{op} runs on the NPU as a chain of lookup tables and integer steps ({steps}): each step rounds, so it is
    one of the least accurate ops after quantization.

    Keep it at 16 bits if the accuracy report shows a loss here; or move it to the end of the model (CPU)."""
    steps = facts_of(node.op).lut_chain
    return {"op": node.op, "steps": ", ".join(steps)} if steps else None


@rule("lint.lut_heavy", "warning", "lint", scope="model")
def _lut_heavy(ctx):
    """The model uses lookup tables heavily: {count} LUT-based ops (Softmax and LayerNorm count 3 each), more than
    {limit}; their rounding errors add up.

    Replace activations like Sigmoid/Tanh/HardSwish by ReLU/ReLU6 where the float model allows, or run the
    LUT-heavy part at 16 bits."""
    count = 0
    for n in ctx.program.nodes:
        if kind_of(n.op) == "lut":
            count += 1
        elif facts_of(n.op).lut_chain:
            count += LUT_CHAIN_TABLES
    if count > ctx.lint.lut_heavy_count:
        return {"count": count, "limit": ctx.lint.lut_heavy_count}
    return None


@rule("lint.large_kernel", "warning", "lint")
def _large_kernel(ctx, node):
    """{op} has a {kernel} kernel (larger than {limit}x{limit}): large kernels gather poorly calibrated
    statistics and quantize badly.

    {advice}"""
    facts = facts_of(node.op)
    if not facts.window or facts.max_pool or facts.global_pool:  # a window summed: convolutions, average pools
        return None
    k = geometry(node)["kernel"]
    if k is None or max(k) <= ctx.lint.kernel_max:
        return None
    depthwise = facts.convolution and node.attrs.get("group", 1) > 1
    advice = ("A depthwise kernel of a pretrained network (EfficientNet, MobileNetV3) is rarely worth retraining: "
              "look at this layer's isolated error in `npu-sim report`, and give it int16 if it stands out."
              if depthwise else "Use conventional kernels (3x3, 2x2): stack several 3x3 convolutions instead of "
              "one large one, or pool in steps.")
    return {"op": node.op, "kernel": "x".join(str(v) for v in k), "limit": ctx.lint.kernel_max, "advice": advice}


@rule("lint.concat_range", "warning", "lint")
def _concat_range(ctx, node):
    """Concat joins inputs whose ranges differ {ratio:.3g}x ({narrow} ±{rmin:.3g} vs {wide} ±{rmax:.3g}): one
    shared output scale wastes most of the 8 bits on the narrow input.

    Normalize the branches before the Concat (BatchNorm/ReLU6), or run this Concat at 16 bits."""
    if not facts_of(node.op).joins:
        return None
    ins = [ctx.t(n) for n in node.inputs]
    ranges = [(max(abs(v) for v in real_range(t)), t.float_name) for t in ins if t.q is not None]
    if len(ranges) < 2:
        return None
    (rmin, narrow), (rmax, wide) = min(ranges), max(ranges)
    if rmin <= 0 or rmax / rmin <= ctx.lint.concat_range_ratio:
        return None
    return {"ratio": rmax / rmin, "narrow": narrow, "wide": wide, "rmin": rmin, "rmax": rmax}


@rule("lint.input", "warning", "lint", scope="model")
def _input_quant(ctx):
    """Model input {name} is quantized as {desc}: {problem}.

    {fix}"""
    found = []
    stub = ctx.rules.input_scale
    for name, tname in ctx.program.inputs.items():
        t = ctx.t(tname)
        q = t.q
        if q is None:  # float input behind the model's own QuantizeLinear
            n = next((n for n in ctx.program.nodes if kind_of(n.op) == "convert" and n.inputs[0] == tname), None)
            if n is None:
                continue
            q = ctx.t(n.outputs[0]).q
        lo = float((q.qmin - int(q.zero_point)) * float(q.scale))
        hi = float((q.qmax - int(q.zero_point)) * float(q.scale))
        desc = f"{q.dtype} scale {float(q.scale):.6g} zero point {int(q.zero_point)} (range [{lo:.4g}, {hi:.4g}])"
        if lo >= -0.01 * hi:
            found.append({"name": name, "desc": desc, "problem": "its range is one-sided (raw data such as "
                          "[0, 255] pixels), not symmetric about zero as the board's input stub needs",
                          "fix": "Normalize the input symmetrically, e.g. (x - 127.5) / 127.5 into [-1, 1], "
                          "before the model (or as its first layer)."})
        elif stub and q.bits == 8 and not math.isclose(float(q.scale), stub, rel_tol=1e-6):
            found.append({"name": name, "desc": desc, "problem": f"the board's input stub uses the fixed scale "
                          f"{stub:.6g} (1/128: inputs in [-1, 1))",
                          "fix": ("Normalize the input to [-1, 1] (divide by its largest magnitude) so the fixed "
                                  "1/128 scale fits, or use a 16-bit input stub.") if hi > 1.01 else
                          "The input uses less than the stub's [-1, 1) range: scale it up to [-1, 1] to use all 8 "
                          "bits, or use a 16-bit input stub."})
    return found or None


@rule("lint.activation_range", "warning", "lint")
def _activation_range(ctx, node):
    """{tensor} (output of {op}) has a calibrated range of ±{value:.4g}, above {limit:.4g}: feature-map outliers
    make its scale coarse ({scale:.3g} per step at {dtype}).

    Follow the op with BatchNorm/ReLU in the float model, or run this layer at 16 bits{int16}."""
    if kind_of(node.op) in ("movement", "convert"):
        return None
    out = ctx.t(node.outputs[0])
    if out.q is None or not out.q.per_tensor:
        return None
    value = max(abs(v) for v in real_range(out))
    if value <= ctx.lint.activation_range_max:
        return None
    first = ctx.t(node.inputs[0])
    if first.q is not None and first.q.same_as(out.q):  # inherited unchanged (nearest Resize...): reported upstream
        return None
    return {"tensor": out.float_name, "op": node.op, "value": value, "limit": ctx.lint.activation_range_max,
            "scale": float(out.q.scale), "dtype": out.q.dtype, "int16": _int16_note(ctx, node)}


@rule("lint.weight_range", "warning", "lint")
def _weight_range(ctx, node):
    """The weights of {op} reach |w| = {value:.4g} (above {limit:.4g}) on channel {channel}: a large weight range
    makes the weight scale coarse.

    Train with (more) weight decay, or run this layer with 16-bit weights{int16}."""
    w = ctx.weight(node)
    if w is None:
        return None
    m = weight_real_per_channel(w, weight_axis(node, w))
    if float(m.max()) <= ctx.lint.weight_range_max:
        return None
    return {"op": node.op, "value": float(m.max()), "limit": ctx.lint.weight_range_max,
            "channel": int(np.argmax(m)), "int16": _int16_note(ctx, node)}


def _int16_note(ctx, node) -> str:
    lim = ctx.limits.get(node.name)
    if lim is None or lim.int16_max_reduction is None or not ctx.rules.constrained:
        return ""
    k = reduction(ctx, node)
    if k is None:
        return ""
    if k <= lim.int16_max_reduction:
        return f" (allowed here: in_ch/groups x kh x kw = {k} <= {lim.int16_max_reduction})"
    return f" (not allowed on this board for this layer: in_ch/groups x kh x kw = {k} > {lim.int16_max_reduction})"
