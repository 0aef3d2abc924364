"""The front door's last step: what ONNX shape inference lets through but the spec (or npu-sim) forbids.

Run on the read graph (static shapes, constants as arrays), before any lowering:

* the Q/DQ type rules: scale and zero point constants, scale float32 (the type of the float data), zero point of
  the quantized type, a QuantizeLinear -> DequantizeLinear pair of one tensor agreeing in type; the parameter
  shapes (a scale scalar or one per entry of the axis, the zero point of the scale's shape);
* attribute ranges: strides, dilations and kernels >= 1, pads >= 0 (and inside a pooling window), group dividing
  the channels, the kernel fitting its padded input, a Conv bias 1-D of the output channels, a MAC bias inside
  2**61 accumulator units (and not rounding to 0 there), axes in range, constant Gather indices in range, Resize
  with one of scales > 0 and sizes >= 1, a Reshape keeping the element count, Slice steps not 0, Gemm operands
  that agree, constant shapes, axes, pads, scales and sizes 1-D;
* sizes: every tensor's element count, and the whole program's bytes, before anything is allocated.

Every refusal names the file, node and attribute or tensor (``ModelLoadError``; ``QuantizationError`` for Q/DQ).
"""
from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import TensorProto

from npu_sim.errors import ModelLoadError, QuantizationError

QDQ = ("QuantizeLinear", "DequantizeLinear")
QUANTIZED = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT4,
             TensorProto.UINT4}
DEQUANTIZABLE = QUANTIZED | {TensorProto.INT32, TensorProto.INT64}  # int32 biases (int64: tf2onnx 16x8 biases)
MODEL_INPUT_TYPES = QUANTIZED | {TensorProto.FLOAT}
MAX_ELEMENTS = 2 ** 31 - 1   # elements of one tensor (the kernels index with int32 strides on some paths)
SPATIAL = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool")
AXIS_OPS = {"Concat": 0, "Softmax": 0, "LogSoftmax": 0, "Hardmax": 0, "Gather": 0, "GatherElements": 0,
            "Split": 0, "Flatten": 1, "ArgMax": 0, "ArgMin": 0, "LayerNormalization": 0}  # op -> axes past the last
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
# op -> its inputs the spec says are 1-D lists (shapes, axes, pads, scales, sizes, Slice's starts ... steps)
VECTOR_INPUTS = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Resize": (1, 2, 3),
                 "Pad": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "Reduce": (1,)}


def type_name(etype) -> str:
    return TensorProto.DataType.Name(etype).lower() if etype in TensorProto.DataType.values() else str(etype)


def label_of(path, node, index: int) -> str:
    return f"{path}: node {node.name!r} ({node.op_type})" if node.name else f"{path}: node #{index} ({node.op_type})"


def check_graph(g, sizes: bool = True) -> None:
    """All the checks above on ``g`` (an ``npu_sim.frontend.reader.Graph``); ``sizes``: the size checks too."""
    check_model_inputs(g)
    dq = {n.output[0]: n for n in g.nodes if n.op_type == "DequantizeLinear" and n.output and len(n.input) > 1}
    for i, node in enumerate(g.nodes):
        label = label_of(g.path, node, i)
        a = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        if node.op_type in QDQ and node.domain in ("", "ai.onnx", "com.microsoft"):
            check_qdq_shapes(g, node, a, label)
        if node.op_type == "QuantizeLinear" and node.domain in ("", "ai.onnx", "com.microsoft"):
            check_scales(g, node, label)  # activation scales (a bias scale s_x*s_w may be subnormal)
        elif node.domain not in ("", "ai.onnx"):
            continue
        elif node.op_type in SPATIAL:
            check_spatial(g, node, a, label)
        if node.op_type in AXIS_OPS:
            check_axis(g, node, a, label)
        check_op(g, node, a, label, dq)
    if sizes:
        check_sizes(g)


def check_model_inputs(g) -> None:
    for name in g.inputs:
        etype = g.elem_types.get(name)
        if etype is not None and etype not in MODEL_INPUT_TYPES:
            raise ModelLoadError(f"{g.path}: model input {name!r} is {type_name(etype)}; npu-sim feeds float32 "
                                 f"inputs (quantized by the model's QuantizeLinear) or already quantized integer "
                                 f"ones (int8, uint8, int16, uint16, int4, uint4): re-export with a float32 input")


# ---- Q/DQ ----------------------------------------------------------------------------------------------------------
def check_qdq_types(model: onnx.ModelProto, path) -> None:
    """The ONNX spec's Q/DQ type rules, on the stored graph (before shape inference, whose messages are vaguer):
    scale and zero point constant, scale float32, zero point of a quantized type, and a DequantizeLinear's zero
    point of the type of what it dequantizes (a stored integer tensor, or a QuantizeLinear's output)."""
    graph = model.graph
    const_types = {t.name: t.data_type for t in graph.initializer}
    produced_by_q = {i.name: (i.type.tensor_type.elem_type, f"{path}: model input {i.name!r}")
                     for i in graph.input if i.name not in const_types and i.type.HasField("tensor_type")}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            const_types[node.output[0]] = value.data_type if value is not None else TensorProto.FLOAT
    for i, node in enumerate(graph.node):
        if node.op_type not in QDQ or node.domain not in ("", "ai.onnx", "com.microsoft"):
            continue
        label = f"{path}: node {node.name!r} ({node.op_type})" if node.name else f"{path}: node #{i} ({node.op_type})"
        qtype = _check_qdq(node, label, const_types, produced_by_q)
        if node.op_type == "QuantizeLinear" and node.output:
            produced_by_q[node.output[0]] = (qtype, label)


def _check_qdq(node, label: str, const_types: dict, produced_by_q: dict):
    names = list(node.input) + ["", ""]
    data, scale, zp = names[0], names[1], names[2]
    if not scale:
        raise QuantizationError(f"{label}: has no scale input; QuantizeLinear and DequantizeLinear need "
                                f"(x, scale[, zero_point])")
    for role, name in (("scale", scale), ("zero point", zp)):
        if name and name not in const_types:
            raise QuantizationError(f"{label}: its {role} {name!r} is not a constant (it is a graph input or "
                                    f"computed by a node); npu-sim needs constant scales and zero points, as "
                                    f"quantize_static writes them: make it an initializer")
    ztype = const_types.get(zp) if zp else None
    if node.op_type == "QuantizeLinear":
        if zp and ztype not in QUANTIZED:
            raise QuantizationError(f"{label}: zero point {zp!r} is {type_name(ztype)}, but the zero point's type "
                                    f"is the quantized type, one of int8, uint8, int16, uint16, int4, uint4")
        _check_scale_type(label, scale, const_types)
        return ztype
    dtype, source = None, ""
    if data in const_types:
        dtype, source = const_types[data], f"the stored tensor {data!r}"
    elif data in produced_by_q:
        dtype, source = produced_by_q[data][0], f"{data!r} ({produced_by_q[data][1].split(': ', 1)[1]}),"
    if dtype is not None and dtype not in DEQUANTIZABLE:
        raise QuantizationError(f"{label}: dequantizes {source} of type {type_name(dtype)}, which is not a "
                                f"quantized integer type (int8, uint8, int16, uint16, int4, uint4, int32)")
    if zp and ztype not in DEQUANTIZABLE:
        raise QuantizationError(f"{label}: zero point {zp!r} is {type_name(ztype)}, which is not a quantized "
                                f"integer type (int8, uint8, int16, uint16, int4, uint4, int32)")
    if zp and dtype is not None and ztype != dtype:
        raise QuantizationError(f"{label}: zero point {zp!r} is {type_name(ztype)} but {source} which it "
                                f"dequantizes is {type_name(dtype)}; they must have the same type (the "
                                f"QuantizeLinear and DequantizeLinear of one tensor must agree)")
    _check_scale_type(label, scale, const_types)
    return None


def _check_scale_type(label: str, scale: str, const_types: dict) -> None:
    if const_types[scale] != TensorProto.FLOAT:
        raise QuantizationError(f"{label}: scale {scale!r} is {type_name(const_types[scale])}; npu-sim quantizes "
                                f"float32 data, and a scale has the type of the data it (de)quantizes: store it "
                                f"as float32")


def check_qdq_shapes(g, node, a: dict, label: str) -> None:
    """The Q/DQ parameters: a scale finite and positive, a scalar (per tensor; a 1-element 1-D too) or 1-D with one
    value per entry of the data's ``axis`` (per axis); the zero point of the scale's shape (blocked: not here)."""
    names = list(node.input) + ["", ""]
    scale = g.consts.get(names[1])
    if scale is None or a.get("block_size", 0):
        return
    zp = g.consts.get(names[2]) if names[2] else None
    if zp is not None and zp.shape != scale.shape and not (zp.size == 1 == scale.size):
        raise QuantizationError(f"{label}: zero point {names[2]!r} has shape {list(zp.shape)} but scale "
                                f"{names[1]!r} has shape {list(scale.shape)}; they must have the same shape")
    values = np.asarray(scale, np.float64).reshape(-1)
    if not np.all(np.isfinite(values)):
        raise QuantizationError(f"{label}: scale {names[1]!r} contains NaN or infinity; re-run calibration")
    if np.any(values <= 0):  # y = x / scale: onnxruntime's fused kernels refuse it too
        raise QuantizationError(f"{label}: scale {names[1]!r} must be positive, found {float(values.min())!r}; "
                                f"re-run calibration (a constant tensor may need a non-zero range)")
    if scale.size == 1 and scale.ndim <= 1:
        return
    if scale.ndim != 1:
        raise QuantizationError(f"{label}: scale {names[1]!r} has shape {list(scale.shape)}; a scale is a scalar "
                                f"(per tensor) or 1-D (per axis)")
    x = g.shapes.get(names[0])
    if x is None:
        return
    axis = int(a.get("axis", 1))
    if not -len(x) <= axis < len(x):
        raise QuantizationError(f"{label}: attribute axis = {axis} is out of range for {names[0]!r} of rank "
                                f"{len(x)} (allowed {-len(x)} to {len(x) - 1})")
    if scale.size != x[axis]:
        raise QuantizationError(f"{label}: per-axis scale has {scale.size} values but axis {axis} of "
                                f"{names[0]!r} (shape {list(x)}) has {x[axis]}; give one scale per entry")


def check_scales(g, node, label: str) -> None:
    """Activation scales no calibration produces (subnormal floats) are refused here, before any multiplier."""
    names = list(node.input) + ["", ""]
    if names[1] not in g.consts:
        return
    values = np.asarray(g.consts[names[1]], np.float32).reshape(-1)
    tiny = values[np.isfinite(values) & (values > 0) & (values < np.finfo(np.float32).tiny)]
    if tiny.size:
        raise QuantizationError(f"{label}: scale {names[1]!r} is {float(tiny[0])!r}, a subnormal float32 that no "
                                f"calibration produces; re-run calibration")


# ---- attribute ranges ----------------------------------------------------------------------------------------------
def check_spatial(g, node, a: dict, label: str) -> None:
    x = g.shapes.get(node.input[0]) if node.input else None
    if x is None or len(x) < 3:
        return
    n = len(x) - 2
    conv = node.op_type in ("Conv", "ConvTranspose")
    w = g.shapes.get(node.input[1]) if conv and len(node.input) > 1 else None
    kernel = list(a.get("kernel_shape", w[2:] if w is not None else []))
    if a.get("auto_pad", b"NOTSET") not in [p.encode() for p in AUTO_PADS] + list(AUTO_PADS):
        raise ModelLoadError(f"{label}: auto_pad {a['auto_pad']!r} is not one of {', '.join(AUTO_PADS)}")
    for key, size, least in (("strides", n, 1), ("dilations", n, 1), ("pads", 2 * n, 0), ("kernel_shape", n, 1)):
        values = list(a.get(key, []))
        if not values:
            continue
        if len(values) != size:
            raise ModelLoadError(f"{label}: attribute {key} has {len(values)} values {values}; the input has {n} "
                                 f"spatial axes, so it needs {size}")
        if min(values) < least:
            raise ModelLoadError(f"{label}: attribute {key} = {values}: every value must be at least {least}")
    if conv:
        _check_conv_weight(g, node, a, x, w, kernel, label)
    pads = list(a.get("pads", [0] * 2 * n))
    if node.op_type in ("MaxPool", "AveragePool", "LpPool"):
        for i, k in enumerate(kernel):
            if max(pads[i], pads[i + n]) >= k:
                raise ModelLoadError(f"{label}: pads {pads} reach a whole kernel ({kernel}) on spatial axis {i}: "
                                     f"some pooling window would lie entirely in the padding; pads must be "
                                     f"smaller than the kernel")
    if node.op_type == "ConvTranspose" or len(kernel) != n or a.get("auto_pad", b"NOTSET") not in (b"NOTSET",
                                                                                               "NOTSET", b"VALID"):
        return
    dil = list(a.get("dilations", [1] * n))
    for i, k in enumerate(kernel):
        span = dil[i] * (k - 1) + 1
        if x[2 + i] + pads[i] + pads[i + n] < span:
            raise ModelLoadError(f"{label}: the kernel {kernel} (dilations {dil}) spans {span} on spatial axis {i}, "
                                 f"more than the padded input ({x[2 + i]} + pads {pads[i]}+{pads[i + n]}): the "
                                 f"output would be empty; fix the kernel, pads or input shape")


def _check_conv_weight(g, node, a: dict, x, w, kernel, label: str) -> None:
    group = int(a.get("group", 1))
    if group < 1:
        raise ModelLoadError(f"{label}: attribute group = {group}; it must be at least 1")
    if w is None:
        return
    if len(w) != len(x):
        raise ModelLoadError(f"{label}: weight {node.input[1]!r} has shape {list(w)}, rank {len(w)}, but the input "
                             f"has rank {len(x)}; a weight is [out channels, in channels / group, *kernel]")
    c_in = x[1]
    per_group = w[1] if node.op_type == "Conv" else w[0]
    out_axis = w[0] if node.op_type == "Conv" else None
    if c_in % group or (out_axis is not None and out_axis % group):
        raise ModelLoadError(f"{label}: group = {group} does not divide the {c_in} input channels"
                             + (f" and the {out_axis} output channels" if out_axis is not None else "")
                             + "; fix the group attribute")
    want = c_in // group if node.op_type == "Conv" else c_in
    if per_group != want:
        raise ModelLoadError(f"{label}: weight {node.input[1]!r} has shape {list(w)}: "
                             f"{'input channels per group' if node.op_type == 'Conv' else 'input channels'} "
                             f"{per_group}, but the input {node.input[0]!r} (shape {list(x)}) with group {group} "
                             f"needs {want}")
    b = g.shapes.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    m = w[0] if node.op_type == "Conv" else w[1] * group
    if b is not None and tuple(b) != (m,):
        # the spec: "B: Optional 1D bias ... has size of M" (onnxruntime refuses any other shape when it runs)
        raise ModelLoadError(f"{label}: bias {node.input[2]!r} has shape {list(b)}; it must be 1-D with one value "
                             f"per output channel: [{m}]")
    if "kernel_shape" in a and list(a["kernel_shape"]) != list(w[2:]):
        raise ModelLoadError(f"{label}: attribute kernel_shape {list(a['kernel_shape'])} differs from the weight's "
                             f"kernel {list(w[2:])}")


def check_axis(g, node, a: dict, label: str) -> None:
    x = g.shapes.get(node.input[0]) if node.input else None
    if x is None or "axis" not in a:
        return
    lo, hi = -len(x), len(x) - 1 + AXIS_OPS[node.op_type]  # Flatten's axis may be the rank itself
    axis = int(a["axis"])
    if not lo <= axis <= hi:
        raise ModelLoadError(f"{label}: attribute axis = {axis} is out of range for its input {node.input[0]!r} "
                             f"of rank {len(x)} (allowed {lo} to {hi})")


def check_op(g, node, a: dict, label: str, dq: dict) -> None:
    """The per-op checks; ``dq``: each DequantizeLinear by its output."""
    op = node.op_type
    for k in VECTOR_INPUTS.get(op, VECTOR_INPUTS["Reduce"] if op.startswith("Reduce") else ()):
        name = node.input[k] if len(node.input) > k else ""
        if name in g.consts and np.ndim(g.consts[name]) != 1:
            raise ModelLoadError(f"{label}: input {k} {name!r} has shape {list(np.shape(g.consts[name]))}; "
                                 f"{op} reads it as a 1-D list (the spec: a 1-D tensor), as onnxruntime does")
    if op in ("Gather", "GatherElements") and len(node.input) > 1 and node.input[1] in g.consts:
        _check_indices(g, node, a, label)
    elif op == "Resize":
        _check_resize(g, node, label)
    elif op == "Gemm":
        _check_gemm(g, node, a, label)
        if len(node.input) > 2 and node.input[2]:
            _check_bias_range(g, node, a, label, dq)
    elif op.startswith("Reduce") or op in ("Squeeze", "Unsqueeze"):
        _check_axes(g, node, a, label)
    elif op in ("Conv", "ConvTranspose") and len(node.input) > 2 and node.input[2]:
        _check_bias_range(g, node, a, label, dq)
    elif op == "Slice" and len(node.input) > 4 and node.input[4] in g.consts and not g.consts[node.input[4]].all():
        raise ModelLoadError(f"{label}: steps {node.input[4]!r} = {g.consts[node.input[4]].tolist()}: a step of 0 "
                             f"never advances (the spec: steps cannot be 0)")
    elif op == "Reshape" and node.input[0] in g.shapes and node.output[0] in g.shapes:
        src, dst = g.shapes[node.input[0]], g.shapes[node.output[0]]
        if math.prod(src) != math.prod(dst):  # onnxruntime refuses it when it runs
            raise ModelLoadError(f"{label}: reshapes {node.input[0]!r} of shape {list(src)} ({math.prod(src)} "
                                 f"elements) to {list(dst)} ({math.prod(dst)} elements); a Reshape keeps the "
                                 f"element count: fix its shape input")
    elif op == "Transpose" and "perm" in a and node.input[0] in g.shapes:
        perm = list(a["perm"])
        if sorted(perm) != list(range(len(g.shapes[node.input[0]]))):
            raise ModelLoadError(f"{label}: attribute perm {perm} is not a permutation of the input's "
                                 f"{len(g.shapes[node.input[0]])} axes")


def _check_indices(g, node, a: dict, label: str) -> None:
    x = g.shapes.get(node.input[0])
    if x is None:
        return
    axis = int(a.get("axis", 0))
    n = x[axis]
    idx = np.asarray(g.consts[node.input[1]]).reshape(-1)
    bad = idx[(idx < -n) | (idx >= n)]
    if bad.size:
        raise ModelLoadError(f"{label}: index {int(bad[0])} in {node.input[1]!r} is out of range for axis {axis} "
                             f"of {node.input[0]!r}, which has {n} entries (allowed {-n} to {n - 1})")


def _check_resize(g, node, label: str) -> None:
    x = g.shapes.get(node.input[0])
    names = list(node.input) + ["", "", ""]
    given = [role for role, name in (("scales", names[2]), ("sizes", names[3]))
             if name and not (name in g.consts and g.consts[name].size == 0)]
    if g.opset >= 11 and len(given) != 1:  # the spec: "One of 'scales' and 'sizes' MUST be specified and it is an
        # error if both are specified"
        raise ModelLoadError(f"{label}: gives {' and '.join(given) or 'neither scales nor sizes'}; a Resize takes "
                             f"exactly one of them (the other input empty)")
    for role, name, least in (("scales", names[2], 0.0), ("sizes", names[3], 1)):
        if not name or name not in g.consts or g.consts[name].size == 0:
            continue
        values = np.asarray(g.consts[name], np.float64).reshape(-1)
        if x is not None and not any(at.name == "axes" for at in node.attribute) and values.size != len(x):
            raise ModelLoadError(f"{label}: {role} {name!r} has {values.size} values but the input has rank "
                                 f"{len(x)}; give one per axis")
        if not np.all(np.isfinite(values)) or np.any(values < least) or (role == "scales" and np.any(values <= 0)):
            rule = "positive" if role == "scales" else "at least 1"
            raise ModelLoadError(f"{label}: {role} {name!r} = {values.tolist()}: every value must be finite and "
                                 f"{rule} (the output would be empty)")


BIAS_LIMIT = 2.0 ** 61  # the kernels add a bias in accumulator units below 2**61 (npu_sim/ops/common.py)


def _check_bias_range(g, node, a: dict, label: str, dq: dict) -> None:
    """A MAC op's dequantized bias in accumulator units (input scale x weight scale per channel, x alpha) inside
    what an accumulator adds: a weight scale no calibration writes (1e-30) makes it 1e30, which no integer holds;
    and not lost: a nonzero bias below half a unit (an input scale of 1e30) rounds to 0 in every integer program."""
    parts = [dq.get(name) for name in node.input[:3]]
    if any(p is None or p.input[1] not in g.consts for p in parts) or parts[2].input[0] not in g.consts:
        return
    sx, sw, sb = (np.asarray(g.consts[p.input[1]], np.float64).reshape(-1) for p in parts)
    bias = parts[2]
    zp = np.asarray(g.consts[bias.input[2]], np.float64).reshape(-1) if len(bias.input) > 2 and \
        bias.input[2] in g.consts else np.zeros(1)
    data = np.asarray(g.consts[bias.input[0]], np.float64).reshape(-1)
    if sx.size != 1 or not data.size or any(v.size not in (1, data.size) for v in (sw, sb, zp)):
        return  # the Q/DQ checks of the lowering name a scale or zero point of the wrong length
    real = (data - zp) * sb * float(a.get("beta", 1.0))  # Gemm: beta x C
    with np.errstate(all="ignore"):
        scaled = real / (sx[0] * sw * float(a.get("alpha", 1.0)))
    bad = np.flatnonzero(~(np.abs(scaled) < BIAS_LIMIT))  # NaN fails too
    if bad.size:
        c = int(bad[0])
        raise QuantizationError(f"{label}: bias {node.input[2]!r} of output channel {c} is {float(scaled[c]):.3g} "
                                f"in accumulator units (input scale {sx[0]:.3g} x weight scale "
                                f"{float(sw[c % sw.size]):.3g}), beyond the 2**61 an accumulator adds; the weight "
                                f"scale is one no calibration writes: re-run calibration")
    lost = np.flatnonzero((real != 0) & (np.abs(scaled) < 0.5))
    if lost.size:  # calibration writes the bias at input scale x weight scale: 1 unit per step
        c = int(lost[0])
        raise QuantizationError(f"{label}: bias {node.input[2]!r} of output channel {c} is {float(real[c]):.3g}, "
                                f"{float(scaled[c]):.3g} accumulator units (input scale {sx[0]:.3g} x weight scale "
                                f"{float(sw[c % sw.size]):.3g}): it rounds to 0, so an integer program drops it; "
                                f"its own scale {float(sb[c % sb.size]):.3g} is far from input scale x weight scale, "
                                f"which calibration writes: re-run calibration")


def _check_gemm(g, node, a: dict, label: str) -> None:
    sa, sb = g.shapes.get(node.input[0]), g.shapes.get(node.input[1])
    if sa is None or sb is None or len(sa) != 2 or len(sb) != 2:
        return
    m, k = (sa[1], sa[0]) if a.get("transA", 0) else sa
    k2, n = (sb[1], sb[0]) if a.get("transB", 0) else sb
    if k != k2:
        raise ModelLoadError(f"{label}: A {list(sa)} (transA={a.get('transA', 0)}) and B {list(sb)} "
                             f"(transB={a.get('transB', 0)}) disagree on the inner dimension ({k} vs {k2})")
    sc = g.shapes.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if sc is not None:
        padded = (1,) * (2 - len(sc)) + tuple(sc)
        if len(sc) > 2 or padded[0] not in (1, m) or padded[1] not in (1, n):
            raise ModelLoadError(f"{label}: bias C {node.input[2]!r} has shape {list(sc)}, which does not "
                                 f"broadcast to the output [{m}, {n}]")


def _check_axes(g, node, a: dict, label: str) -> None:
    x = g.shapes.get(node.input[0]) if node.input else None
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1] in g.consts:
        axes = np.asarray(g.consts[node.input[1]]).reshape(-1).tolist()
    if x is None or axes is None:
        return
    rank = len(x) + (len(axes) if node.op_type == "Unsqueeze" else 0)
    for axis in axes:
        if not -rank <= int(axis) < rank:
            raise ModelLoadError(f"{label}: axes {list(axes)}: {axis} is out of range for rank {rank}")


# ---- sizes ---------------------------------------------------------------------------------------------------------
def memory_bytes() -> int:
    """Physical memory of this machine (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_sizes(g) -> None:
    total = 0
    producer = {o: n for n in g.nodes for o in n.output}
    for name, shape in g.shapes.items():
        count = math.prod(shape)
        if count == 0 and name in producer and name not in g.consts:
            node = producer[name]
            raise ModelLoadError(f"{g.path}: tensor {name!r} of node {node.name or node.op_type!r} would have shape "
                                 f"[{'x'.join(map(str, shape))}], no elements (an input too small for the model, or a "
                                 f"zero-sized dimension from a Reshape, Slice or Resize); npu-sim computes no empty "
                                 f"tensors")
        if count > MAX_ELEMENTS:
            raise ModelLoadError(f"{g.path}: tensor {name!r} would have {count} elements (shape "
                                 f"{'x'.join(map(str, shape))}); npu-sim handles at most {MAX_ELEMENTS} elements "
                                 f"per tensor: give smaller input shapes (--input-shape)")
        total += count * 4
    ram = memory_bytes()
    if ram and total > ram:
        raise ModelLoadError(f"{g.path}: the model's tensors need about {total} bytes ({total / 2**30:.1f} GiB), "
                             f"more than this machine's {ram} bytes of memory; give smaller input shapes")
