"""Each TFLite builtin operator as its ONNX QDQ group (``TRANSLATORS``: operator name -> function(builder, op)).

Convolutions, pools and resizes run NCHW in ONNX (their integers transposed around them, ``Builder.nchw_of``);
element-wise ops, MEAN, CONCATENATION, SOFTMAX and the activations run on the NHWC tensors as they are; RESHAPE,
SQUEEZE, TRANSPOSE, PAD and STRIDED_SLICE move the integers as TFLite does. Padding ``SAME`` is TFLite's: the
total ``max((out - 1) * stride + (k - 1) * dilation + 1 - in, 0)``, its smaller half before.
"""
from __future__ import annotations

import numpy as np

from npu_sim.errors import UnsupportedModelError
from npu_sim.frontend.tflite.builder import TO_NCHW, Builder
from npu_sim.frontend.tflite.flatbuf import TflOperator


def _io(op: TflOperator, n: int) -> list[int]:
    return (list(op.inputs) + [-1] * n)[:n]


def _refuse(b: Builder, op: TflOperator, why: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"{b.m.path}: {b.m.label(op)}: {why}")


def same_pads(size, kernel, strides, dilations, padding: str) -> list[int]:
    """ONNX ``pads`` (begins, then ends) of TFLite's ``SAME``/``VALID`` padding."""
    if padding == "VALID":
        return [0] * (2 * len(size))
    begin, end = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end


def _const_ints(b: Builder, op: TflOperator, i: int, what: str) -> np.ndarray:
    v = b.value(i)
    if v is None:
        raise _refuse(b, op, f"its {what} must be a constant tensor")
    return np.asarray(v).astype(np.int64).reshape(-1)


def _spatial(b: Builder, op: TflOperator, x: int, kernel) -> dict:
    """ONNX strides, dilations and pads of a windowed op, checked against the output shape the file declares."""
    o = op.options
    strides = [int(o.get("stride_h", 1)), int(o.get("stride_w", 1))]
    dil = [int(o.get("dilation_h_factor", 1)), int(o.get("dilation_w_factor", 1))]
    hw = list(b.tensor(x).shape[1:3])
    padding = str(o.get("padding", "VALID"))
    want = [-(-n // s) if padding == "SAME" else -(-(n - (k - 1) * d) // s)
            for n, k, s, d in zip(hw, kernel, strides, dil)]
    got = list(b.tensor(op.outputs[0]).shape[1:3])
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    if any(w > max(n, 1) and w > 4096 for w, n in zip(span, hw)):  # taps far in the padding only
        raise _refuse(b, op, f"its dilated window spans {span[0]}x{span[1]} pixels over a {hw[0]}x{hw[1]} input: "
                             f"npu-sim refuses windows over 4096 pixels wider than their input")
    if want != got or min(want) < 1:
        raise _refuse(b, op, f"its output is {got[0]}x{got[1]} in the file, but a {kernel[0]}x{kernel[1]} window "
                             f"with strides {strides}, dilations {dil} and {padding} padding over "
                             f"{hw[0]}x{hw[1]} gives {want[0]}x{want[1]} (re-export the model with the TFLite "
                             f"converter)")
    return {"strides": strides, "dilations": dil, "pads": same_pads(hw, kernel, strides, dil, padding)}


def conv(b: Builder, op: TflOperator, depthwise: bool = False) -> None:
    x, w, bias = _io(op, 3)
    wt = b.tensor(w)
    if wt.data is None or len(wt.shape) != 4 or len(b.tensor(x).shape) != 4:
        raise _refuse(b, op, "needs an NHWC input and constant 4-D weights")
    channels = b.tensor(x).shape[3]
    if depthwise:
        data = wt.data.transpose(3, 0, 1, 2)   # [1, KH, KW, C*M] -> [C*M, 1, KH, KW]
        group = channels
    else:
        data = wt.data.transpose(TO_NCHW)       # OHWI -> OIHW
        if data.shape[1] == 0 or channels % data.shape[1]:
            raise _refuse(b, op, f"input channels {channels} are not a multiple of the filter's {data.shape[1]}")
        group = channels // data.shape[1]
    kernel = list(data.shape[2:])
    inputs = [b.float_of(x, nchw=True), b.weights(w, np.ascontiguousarray(data), 0)]
    if bias >= 0:
        inputs.append(b.bias(bias, data.shape[0], x, w))
    y = op.outputs[0]
    f = f"{b.names[y]}/conv"
    b.node("Conv", inputs, [f], name=b.names[y], kernel_shape=kernel, group=group, **_spatial(b, op, x, kernel))
    b.quantize(f, y, nchw=True, act=op.options.get("fused_activation_function", "NONE"))


def fully_connected(b: Builder, op: TflOperator) -> None:
    x, w, bias = _io(op, 3)
    wt = b.tensor(w)
    if wt.data is None or len(wt.shape) != 2:
        raise _refuse(b, op, "needs constant 2-D weights [outputs, inputs]")
    if op.options.get("weights_format", "DEFAULT") not in ("DEFAULT", 0):
        raise _refuse(b, op, "shuffled weights (weights_format) are not supported")
    n_out, k = wt.shape
    xs = b.tensor(x).shape
    src = x
    if len(xs) != 2:
        flat = b.fresh(f"{b.names[x]}/2d")
        b.node("Reshape", [b.names[x], b.const(np.array([-1, k], np.int64), "shape")], [flat], name=flat)
        xf = _dq_named(b, flat, x)
    else:
        xf = b.float_of(src)
    inputs = [xf, b.weights(w, np.ascontiguousarray(wt.data.T), 1)]
    if bias >= 0:
        inputs.append(b.bias(bias, n_out, x, w))
    y = op.outputs[0]
    f = f"{b.names[y]}/gemm"
    b.node("Gemm", inputs, [f], name=b.names[y])
    act = op.options.get("fused_activation_function", "NONE")
    if len(b.tensor(y).shape) == 2:
        b.quantize(f, y, act=act)
        return
    flat_y = b.fresh(f"{b.names[y]}/2d")
    _quantize_named(b, b.activation(f, act, b.names[y]), y, flat_y)
    b.node("Reshape", [flat_y, b.const(np.array(b.tensor(y).shape, np.int64), "shape")], [b.names[y]],
           name=f"{b.names[y]}/reshape")


def _dq_named(b: Builder, name: str, like: int) -> str:
    """The DequantizeLinear of integer tensor ``name`` quantized as TFLite tensor ``like``."""
    s, z, _ = b.scale_zp(b.tensor(like), name)
    out = f"{name}/dq"
    b.node("DequantizeLinear", [name, s, z], [out], name=out)
    return out


def _quantize_named(b: Builder, f: str, like: int, name: str) -> None:
    s, z, _ = b.scale_zp(b.tensor(like), name)
    b.node("QuantizeLinear", [f, s, z], [name], name=f"{name}/q")


def binary(onnx_op: str):
    def fn(b: Builder, op: TflOperator) -> None:
        x, z = _io(op, 2)
        y = op.outputs[0]
        f = f"{b.names[y]}/{onnx_op.lower()}"
        b.node(onnx_op, [b.float_of(x), b.float_of(z)], [f], name=b.names[y])
        b.quantize(f, y, act=op.options.get("fused_activation_function", "NONE"))
    return fn


def unary(onnx_op: str, **attrs):
    def fn(b: Builder, op: TflOperator) -> None:
        y = op.outputs[0]
        f = f"{b.names[y]}/{onnx_op.lower()}"
        extra = {k: (v(op) if callable(v) else v) for k, v in attrs.items()}
        b.node(onnx_op, [b.float_of(op.inputs[0])], [f], name=b.names[y], **extra)
        b.quantize(f, y)
    return fn


def relu(low: float, high: float | None):
    def fn(b: Builder, op: TflOperator) -> None:
        y = op.outputs[0]
        f = b.activation(b.float_of(op.inputs[0]), {(0.0, None): "RELU", (0.0, 6.0): "RELU6",
                                                     (-1.0, 1.0): "RELU_N1_TO_1"}[(low, high)], b.names[y])
        b.quantize(f, y)
    return fn


def softmax(b: Builder, op: TflOperator) -> None:
    beta = float(op.options.get("beta", 1.0))
    if beta != 1.0:
        raise _refuse(b, op, f"beta {beta:g}: npu-sim simulates TFLite's SOFTMAX with beta 1 only")
    unary("Softmax", axis=-1)(b, op)


def leaky_relu(b: Builder, op: TflOperator) -> None:
    unary("LeakyRelu", alpha=float(op.options.get("alpha", 0.2)))(b, op)


def pool(onnx_op: str):
    def fn(b: Builder, op: TflOperator) -> None:
        x, y = op.inputs[0], op.outputs[0]
        o = op.options
        kernel = [int(o.get("filter_height", 1)), int(o.get("filter_width", 1))]
        geo = _spatial(b, op, x, kernel)
        geo.pop("dilations")
        f = f"{b.names[y]}/pool"
        b.node(onnx_op, [b.float_of(x, nchw=True)], [f], name=b.names[y], kernel_shape=kernel, **geo)
        b.quantize(f, y, nchw=True, act=o.get("fused_activation_function", "NONE"))
    return fn


def mean(b: Builder, op: TflOperator) -> None:
    x, axes = _io(op, 2)
    y = op.outputs[0]
    rank = len(b.tensor(x).shape)
    ax = sorted({int(a) % rank for a in _const_ints(b, op, axes, "axes")}) if rank else []
    f = f"{b.names[y]}/mean"
    b.node("ReduceMean", [b.float_of(x), b.const(np.array(ax, np.int64), "axes")], [f], name=b.names[y],
           keepdims=int(bool(op.options.get("keep_dims", False))))
    b.quantize(f, y)


def concatenation(b: Builder, op: TflOperator) -> None:
    y = op.outputs[0]
    rank = len(b.tensor(y).shape)
    axis = int(op.options.get("axis", 0))
    if not -rank <= axis < rank:
        raise _refuse(b, op, f"axis {axis} is outside its output's {rank} dimensions")
    axis %= max(rank, 1)
    f = f"{b.names[y]}/concat"
    b.node("Concat", [b.float_of(i) for i in op.inputs], [f], name=b.names[y], axis=axis)
    b.quantize(f, y, act=op.options.get("fused_activation_function", "NONE"))


def reshape(b: Builder, op: TflOperator) -> None:
    x, y = op.inputs[0], op.outputs[0]
    b.move("Reshape", x, y, b.const(np.array(b.tensor(y).shape, np.int64), "shape"))


def transpose(b: Builder, op: TflOperator) -> None:
    x, perm = _io(op, 2)
    b.move("Transpose", x, op.outputs[0], perm=[int(p) for p in _const_ints(b, op, perm, "permutation")])


def pad(b: Builder, op: TflOperator) -> None:
    x, paddings, value = _io(op, 3)
    widths = _const_ints(b, op, paddings, "paddings").reshape(-1, 2)
    pads = b.const(np.concatenate([widths[:, 0], widths[:, 1]]).astype(np.int64), "pads")
    if value < 0:
        b.move("Pad", x, op.outputs[0], pads)
        return
    t = b.tensor(value)
    if t.data is None or t.quant is None:
        raise _refuse(b, op, "its constant value must be a constant quantized scalar")
    real = np.float32((int(t.data.reshape(-1)[0]) - int(t.quant.zero_point[0])) * float(t.quant.scale[0]))
    b.move("Pad", x, op.outputs[0], pads, b.const(real, "pad_value"))


def _slice_bounds(b: Builder, op: TflOperator) -> tuple[list[slice], list[int]]:
    """STRIDED_SLICE's slice per axis (TFLite's begin/end/shrink masks applied) and the axes it drops."""
    _, begin, end, strides = _io(op, 4)
    o = op.options
    if int(o.get("ellipsis_mask", 0)) or int(o.get("new_axis_mask", 0)) or o.get("offset", False):
        raise _refuse(b, op, "ellipsis_mask, new_axis_mask and offset are not supported")
    starts, ends = _const_ints(b, op, begin, "begin"), _const_ints(b, op, end, "end")
    steps = _const_ints(b, op, strides, "strides")
    bm, em, sm = int(o.get("begin_mask", 0)), int(o.get("end_mask", 0)), int(o.get("shrink_axis_mask", 0))
    cuts, shrink = [], []
    for d in range(len(starts)):
        step = int(steps[d])
        if step == 0:
            raise _refuse(b, op, f"stride 0 on axis {d}")
        start = None if bm >> d & 1 else int(starts[d])
        stop = None if em >> d & 1 else int(ends[d])
        if sm >> d & 1:
            start, step = int(starts[d]), 1
            stop = start + 1 if start != -1 else None
            shrink.append(d)
        cuts.append(slice(start, stop, step))
    return cuts, shrink


def strided_slice(b: Builder, op: TflOperator) -> None:
    x, y = op.inputs[0], op.outputs[0]
    cuts, shrink = _slice_bounds(b, op)
    shape = b.tensor(x).shape
    lo, hi, steps = [], [], []
    for d, cut in enumerate(cuts):
        start, stop, step = cut.indices(shape[d])
        lo.append(start)
        hi.append(stop if stop >= 0 else np.iinfo(np.int64).min)
        steps.append(step)
    on_input = x in b.m.inputs  # the walk knows a graph input through its DequantizeLinear: move its floats
    src = b.float_of(x) if on_input else b.names[x]
    last = b.moved(y) if on_input else b.names[y]
    out = b.fresh(f"{b.names[y]}/slice") if shrink else last
    b.node("Slice", [src, b.const(np.array(lo, np.int64), "starts"), b.const(np.array(hi, np.int64), "ends"),
                     b.const(np.arange(len(lo), dtype=np.int64), "axes"),
                     b.const(np.array(steps, np.int64), "steps")], [out], name=out)
    if shrink:
        b.node("Reshape", [out, b.const(np.array(b.tensor(y).shape, np.int64), "shape")], [last], name=last)
    if on_input:
        b.moved_done(y)


# ---- shape arithmetic on constants (Keras' Reshape with a batch: SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE) ----
def _fold_slice(b, op, v, *_):
    cuts, shrink = _slice_bounds(b, op)
    out = v[tuple(cuts)]
    return out.reshape([n for d, n in enumerate(out.shape) if d not in shrink])


def _fold_concat(b, op, *vs):
    return np.concatenate(vs, axis=int(op.options.get("axis", 0)) % max(vs[0].ndim, 1))


def fold(b: Builder, op: TflOperator) -> bool:
    """Compute ``op`` now when it is shape arithmetic on constants (SHAPE needs only its input's static shape);
    True when it was."""
    fn = FOLDS.get(op.op)
    if fn is None or len(op.outputs) != 1:
        return False
    values = [b.value(i) for i in op.inputs if i >= 0]
    if op.op != "SHAPE" and (not values or any(v is None for v in values)):
        return False
    try:
        b.folded[op.outputs[0]] = np.asarray(fn(b, op, *values))
    except (ValueError, IndexError, TypeError) as exc:
        raise _refuse(b, op, f"cannot compute it from its constant inputs ({exc})") from None
    return True


FOLDS = {
    "SHAPE": lambda b, op, _: np.array(b.tensor(op.inputs[0]).shape, np.int32),
    "STRIDED_SLICE": _fold_slice,
    "PACK": lambda b, op, *vs: np.stack(vs, axis=int(op.options.get("axis", 0))),
    "CONCATENATION": _fold_concat,
    "RESHAPE": lambda b, op, v, *_: v.reshape(b.tensor(op.outputs[0]).shape),
    "SQUEEZE": lambda b, op, v, *_: v.reshape(b.tensor(op.outputs[0]).shape),
    "EXPAND_DIMS": lambda b, op, v, *_: v.reshape(b.tensor(op.outputs[0]).shape),
    "GATHER": lambda b, op, v, idx: np.take(v, idx, axis=int(op.options.get("axis", 0))),
}


def resize(nearest: bool):
    def fn(b: Builder, op: TflOperator) -> None:
        x, size = _io(op, 2)
        y = op.outputs[0]
        o = op.options
        align, half = bool(o.get("align_corners", False)), bool(o.get("half_pixel_centers", False))
        n, _, _, c = b.tensor(x).shape
        oh, ow = (int(v) for v in _const_ints(b, op, size, "size"))
        if nearest:
            cmode, extra = (("align_corners", {"nearest_mode": "round_prefer_ceil"}) if align else
                            ("half_pixel", {"nearest_mode": "round_prefer_ceil"}) if half else
                            ("asymmetric", {"nearest_mode": "floor"}))
        else:
            cmode, extra = ("align_corners" if align else "half_pixel" if half else "asymmetric"), {}
        f = f"{b.names[y]}/resize"
        b.node("Resize", [b.float_of(x, nchw=True), "", "", b.const(np.array([n, c, oh, ow], np.int64), "sizes")],
               [f], name=b.names[y], mode="nearest" if nearest else "linear",
               coordinate_transformation_mode=cmode, **extra)
        b.quantize(f, y, nchw=True)
    return fn


def quantize(b: Builder, op: TflOperator) -> None:
    x, y = op.inputs[0], op.outputs[0]
    b.quantize(b.float_of(x), y)


def dequantize(b: Builder, op: TflOperator) -> None:
    x, y = op.inputs[0], op.outputs[0]
    t = b.activation_q(x)
    if t is None:
        raise _refuse(b, op, "its input is not an int8/int16 quantized tensor")
    s, z, _ = b.scale_zp(t, b.names[x])
    b.node("DequantizeLinear", [b.names[x], s, z], [b.names[y]], name=b.names[y])


# how many inputs each operator needs (present: not -1); more are optional (a bias, PADV2's value)
ARITY = {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2, "ADD": 2, "SUB": 2, "MUL": 2, "MEAN": 2,
         "TRANSPOSE": 2, "PAD": 2, "PADV2": 2, "STRIDED_SLICE": 4, "RESIZE_BILINEAR": 2,
         "RESIZE_NEAREST_NEIGHBOR": 2, "EXPAND_DIMS": 1, "GATHER": 2}


def check_arity(b: Builder, op: TflOperator) -> None:
    """Refuse an operator without the inputs it needs (a damaged or hand-made file)."""
    need = ARITY.get(op.op, 1)
    given = list(op.inputs[:need])
    if len(given) < need or any(i < 0 for i in given) or not op.outputs:
        raise _refuse(b, op, f"{op.op} needs {need} input(s) and an output; it has inputs {list(op.inputs)} and "
                             f"outputs {list(op.outputs)} (re-export the model with the TFLite converter)")


TRANSLATORS = {
    "CONV_2D": conv,
    "DEPTHWISE_CONV_2D": lambda b, op: conv(b, op, depthwise=True),
    "FULLY_CONNECTED": fully_connected,
    "ADD": binary("Add"), "SUB": binary("Sub"), "MUL": binary("Mul"),
    "AVERAGE_POOL_2D": pool("AveragePool"), "MAX_POOL_2D": pool("MaxPool"),
    "MEAN": mean,
    "CONCATENATION": concatenation,
    "RESHAPE": reshape, "SQUEEZE": reshape, "EXPAND_DIMS": reshape,
    "TRANSPOSE": transpose,
    "PAD": pad, "PADV2": pad,
    "STRIDED_SLICE": strided_slice,
    "RESIZE_BILINEAR": resize(nearest=False), "RESIZE_NEAREST_NEIGHBOR": resize(nearest=True),
    "SOFTMAX": softmax,
    "LOGISTIC": unary("Sigmoid"), "TANH": unary("Tanh"), "HARD_SWISH": unary("HardSwish"),
    "LEAKY_RELU": leaky_relu,
    "RELU": relu(0.0, None), "RELU6": relu(0.0, 6.0), "RELU_N1_TO_1": relu(-1.0, 1.0),
    "QUANTIZE": quantize, "DEQUANTIZE": dequantize,
}
