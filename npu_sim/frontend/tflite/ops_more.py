"""More TFLite builtin operators as ONNX QDQ groups (``MORE``: operator name -> function(builder, op)), beside
``npu_sim.frontend.tflite.ops`` (whose helpers these use).

The movement operators move the integers as TFLite does: SPLIT and SPLIT_V become an ONNX ``Split``, SLICE a
``Slice``, UNPACK a ``Split`` and a ``Reshape`` per output, MIRROR_PAD ``REFLECT`` a ``Pad`` of mode ``reflect``
(``SYMMETRIC``, which repeats the edge, has no ONNX mode: refused), PACK an ``Unsqueeze`` per input and a
``Concat`` (TFLite's PACK requires every input quantized as its output: others are refused). RELU_0_TO_1 is a
``Clip`` to 0..1, which the ``tflite`` arithmetic lowers as TFLite's ReluX.

ABS and EXP are an ONNX ``Abs`` and ``Exp``, PRELU a ``PRelu`` of its quantized alpha, MAXIMUM/MINIMUM
``Max``/``Min`` (of inputs quantized as their output, as TFLite requires: others are refused), TRANSPOSE_CONV
(inputs: output shape, OHWI weights, input, bias) a ``ConvTranspose`` (NCHW, weights ``[I, O, KH, KW]``) whose
pads put TFLite's ``SAME`` padding of the output (``ops.same_pads`` over the output size) before the first row and
column.
"""
from __future__ import annotations

import numpy as np

from npu_sim.errors import UnsupportedModelError
from npu_sim.frontend.tflite.builder import Builder
from npu_sim.frontend.tflite.flatbuf import TflOperator
from npu_sim.frontend.tflite.ops import binary, same_pads, unary


def refuse(b: Builder, op: TflOperator, why: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"{b.m.path}: {b.m.label(op)}: {why}")


def inputs(b: Builder, op: TflOperator, need: int) -> list[int]:
    """The operator's first ``need`` inputs, refused by name when one is missing (a damaged or hand-made file)."""
    given = list(op.inputs[:need])
    if len(given) < need or any(i < 0 for i in given) or not op.outputs or any(y < 0 for y in op.outputs):
        raise refuse(b, op, f"{op.op} needs {need} input(s) and its outputs; it has inputs {list(op.inputs)} and "
                            f"outputs {list(op.outputs)} (re-export the model with the TFLite converter)")
    return given


def const_ints(b: Builder, op: TflOperator, i: int, what: str) -> np.ndarray:
    v = b.value(i)
    if v is None:
        raise refuse(b, op, f"its {what} must be a constant tensor")
    return np.asarray(v).astype(np.int64).reshape(-1)


def _axis(b: Builder, op: TflOperator, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise refuse(b, op, f"axis {axis} is outside its input's {rank} dimensions")
    return axis % rank


def split_to(b: Builder, op: TflOperator, x: int, axis: int, outs: list[str], sizes: list[int]) -> None:
    """ONNX Split of TFLite tensor ``x`` along ``axis`` into the ONNX tensors ``outs`` (integers; on a graph input,
    its floats: the walk knows it through its DequantizeLinear)."""
    if sum(sizes) != b.tensor(x).shape[axis] or min(sizes, default=0) < 0:
        raise refuse(b, op, f"its outputs' sizes {sizes} along axis {axis} do not add up to its input's "
                            f"{b.tensor(x).shape[axis]}")
    src = b.float_of(x) if x in b.m.inputs else b.names[x]
    b.node("Split", [src, b.const(np.array(sizes, np.int64), "split")], outs, name=b.fresh(f"{b.names[x]}/split"),
           axis=axis)


def _split(b: Builder, op: TflOperator, x: int, axis: int) -> None:
    axis = _axis(b, op, axis, len(b.tensor(x).shape))
    ys = list(op.outputs)
    sizes = [int(b.tensor(y).shape[axis]) if len(b.tensor(y).shape) > axis else -1 for y in ys]
    on_input = x in b.m.inputs
    split_to(b, op, x, axis, [b.moved(y) if on_input else b.names[y] for y in ys], sizes)
    if on_input:
        for y in ys:
            b.moved_done(y)


def split(b: Builder, op: TflOperator) -> None:
    axis, x = inputs(b, op, 2)
    a = const_ints(b, op, axis, "axis")
    if a.size != 1:
        raise refuse(b, op, "its axis must be a single constant")
    _split(b, op, x, int(a[0]))


def split_v(b: Builder, op: TflOperator) -> None:
    x, _, axis = inputs(b, op, 3)
    a = const_ints(b, op, axis, "axis")
    if a.size != 1:
        raise refuse(b, op, "its axis must be a single constant")
    _split(b, op, x, int(a[0]))


def unpack(b: Builder, op: TflOperator) -> None:
    (x,) = inputs(b, op, 1)
    shape = b.tensor(x).shape
    axis = _axis(b, op, int(op.options.get("axis", 0)), len(shape))
    ys = list(op.outputs)
    if len(ys) != shape[axis]:
        raise refuse(b, op, f"it has {len(ys)} outputs for the {shape[axis]} slices along axis {axis}")
    on_input = x in b.m.inputs
    parts = [b.fresh(f"{b.names[y]}/part") for y in ys]
    split_to(b, op, x, axis, parts, [1] * len(ys))
    for part, y in zip(parts, ys):
        target = b.moved(y) if on_input else b.names[y]
        b.node("Reshape", [part, b.const(np.array(b.tensor(y).shape, np.int64), "shape")], [target], name=target)
        if on_input:
            b.moved_done(y)


def pack(b: Builder, op: TflOperator) -> None:
    y = op.outputs[0] if op.outputs else -1
    xs = inputs(b, op, max(len(op.inputs), 1))
    rank = len(b.tensor(y).shape)
    axis = _axis(b, op, int(op.options.get("axis", 0)), rank)
    yq = b.activation_q(y)
    for x in xs:
        xq = b.activation_q(x)
        if yq is None or xq is None or (float(xq.quant.scale[0]), int(xq.quant.zero_point[0])) != \
                (float(yq.quant.scale[0]), int(yq.quant.zero_point[0])):
            raise refuse(b, op, f"input {b.names[x]!r} is not quantized as its output: TFLite's PACK copies integers "
                                f"and LiteRT refuses it at prepare (re-export the model with the TFLite converter)")
    axes = b.const(np.array([axis], np.int64), "axes")
    parts = []
    for x in xs:
        part = b.fresh(f"{b.names[x]}/unsqueeze")
        b.node("Unsqueeze", [b.float_of(x), axes], [part], name=part)
        parts.append(part)
    f = f"{b.names[y]}/pack"
    b.node("Concat", parts, [f], name=b.names[y], axis=axis)
    b.quantize(f, y)


def slice_(b: Builder, op: TflOperator) -> None:
    x, begin, size = inputs(b, op, 3)
    shape = b.tensor(x).shape
    starts, sizes = const_ints(b, op, begin, "begin"), const_ints(b, op, size, "size")
    if starts.size != len(shape) or sizes.size != len(shape):
        raise refuse(b, op, f"its begin {starts.tolist()} and size {sizes.tolist()} need {len(shape)} values each")
    ends = [int(n) if s == -1 else int(a + s) for a, s, n in zip(starts, sizes, shape)]
    if any(a < 0 or e > n or e < a for a, e, n in zip(starts, ends, shape)):
        raise refuse(b, op, f"its begin {starts.tolist()} and size {sizes.tolist()} fall outside its input "
                            f"{list(shape)}")
    b.move("Slice", x, op.outputs[0], b.const(starts, "starts"), b.const(np.array(ends, np.int64), "ends"),
           b.const(np.arange(len(shape), dtype=np.int64), "axes"))


def mirror_pad(b: Builder, op: TflOperator) -> None:
    x, paddings = inputs(b, op, 2)
    mode = str(op.options.get("mode", "REFLECT"))
    if mode != "REFLECT":
        raise refuse(b, op, f"mode {mode}: npu-sim simulates MIRROR_PAD's REFLECT only (ONNX Pad has no mode that "
                            f"repeats the edge value as SYMMETRIC does)")
    shape = b.tensor(x).shape
    widths = const_ints(b, op, paddings, "paddings")
    if widths.size != 2 * len(shape):
        raise refuse(b, op, f"its paddings have {widths.size} values for {len(shape)} dimensions")
    widths = widths.reshape(-1, 2)
    if np.any(widths < 0) or any(max(w) >= n for w, n in zip(widths.tolist(), shape) if max(w) > 0):
        raise refuse(b, op, f"its paddings {widths.tolist()} must be at least 0 and below each dimension of its "
                            f"input {list(shape)} (a reflection repeats no edge)")
    pads = b.const(np.concatenate([widths[:, 0], widths[:, 1]]).astype(np.int64), "pads")
    b.move("Pad", x, op.outputs[0], pads, mode="reflect")


def relu_0_to_1(b: Builder, op: TflOperator) -> None:
    (x,) = inputs(b, op, 1)
    y = op.outputs[0]
    out = b.fresh(f"{b.names[y]}/relu_0_to_1")
    b.node("Clip", [b.float_of(x), b.const(np.float32(0.0), f"{b.names[y]}/min"),
                    b.const(np.float32(1.0), f"{b.names[y]}/max")], [out], name=out)
    b.quantize(out, y)


def prelu(b: Builder, op: TflOperator) -> None:
    inputs(b, op, 2)
    binary("PRelu")(b, op)


def maxmin(onnx_op: str):
    def fn(b: Builder, op: TflOperator) -> None:
        xs = inputs(b, op, 2)
        y = op.outputs[0]
        yq = b.activation_q(y)
        for x in xs:
            q = b.tensor(x).quant
            if yq is None or q is None or q.scale.size != 1 or (float(q.scale[0]), int(q.zero_point[0])) != \
                    (float(yq.quant.scale[0]), int(yq.quant.zero_point[0])):
                raise refuse(b, op, f"input {b.names[x]!r} is not quantized as its output: TFLite's {op.op} compares "
                                    f"the integers as they are (re-export the model with the TFLite converter, which "
                                    f"gives both inputs the output's quantization)")
        binary(onnx_op)(b, op)
    return fn


def transpose_conv(b: Builder, op: TflOperator) -> None:
    shape, w, x = inputs(b, op, 3)
    bias = op.inputs[3] if len(op.inputs) > 3 else -1
    wt, xs, y = b.tensor(w), b.tensor(x).shape, op.outputs[0]
    ys = b.tensor(y).shape
    if wt.data is None or len(wt.shape) != 4 or len(xs) != 4 or len(ys) != 4:
        raise refuse(b, op, "needs an NHWC input and output and constant 4-D weights")
    if list(const_ints(b, op, shape, "output shape")) != list(ys):
        raise refuse(b, op, f"its output shape input {const_ints(b, op, shape, 'output shape').tolist()} is not its "
                            f"output's {list(ys)}")
    if wt.shape[3] != xs[3] or wt.shape[0] != ys[3]:
        raise refuse(b, op, f"its weights {list(wt.shape)} (OHWI) do not map {xs[3]} input channels to {ys[3]}")
    o = op.options
    strides = [int(o.get("stride_h", 1)), int(o.get("stride_w", 1))]
    kernel = list(wt.shape[1:3])
    pads = same_pads(list(ys[1:3]), kernel, strides, [1, 1], str(o.get("padding", "VALID")))
    ends = [s * (n - 1) + k - p - out for s, n, k, p, out in zip(strides, xs[1:3], kernel, pads[:2], ys[1:3])]
    if min(strides) < 1 or min(ends) < 0:
        raise refuse(b, op, f"its {ys[1]}x{ys[2]} output is larger than strides {strides} of a "
                            f"{kernel[0]}x{kernel[1]} kernel reach from its {xs[1]}x{xs[2]} input: npu-sim "
                            f"simulates outputs every kernel tap reaches")
    data = np.ascontiguousarray(wt.data.transpose(3, 0, 1, 2))  # OHWI -> [I, O, KH, KW]
    args = [b.float_of(x, nchw=True), b.weights(w, data, 1)]
    if bias >= 0:
        args.append(b.bias(bias, ys[3], x, w))
    f = f"{b.names[y]}/conv_transpose"
    b.node("ConvTranspose", args, [f], name=b.names[y], kernel_shape=kernel, strides=strides,
           pads=pads[:2] + ends)
    b.quantize(f, y, nchw=True, act=o.get("fused_activation_function", "NONE"))


MORE: dict = {
    "ABS": unary("Abs"), "EXP": unary("Exp"),
    "PRELU": prelu, "MAXIMUM": maxmin("Max"), "MINIMUM": maxmin("Min"), "TRANSPOSE_CONV": transpose_conv,
    "SPLIT": split, "SPLIT_V": split_v, "UNPACK": unpack, "PACK": pack, "SLICE": slice_,
    "MIRROR_PAD": mirror_pad, "RELU_0_TO_1": relu_0_to_1,
}
