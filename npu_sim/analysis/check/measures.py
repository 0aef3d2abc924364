"""What the rules measure on a node: geometry, reduction length, weight statistics, real ranges, precision, and
the formatting of values into messages. Shared by the board rules, the numeric hazards and the lint."""
from __future__ import annotations

import numpy as np

from npu_sim.analysis.check.findings import Context
from npu_sim.ir import Node, Tensor
from npu_sim.opset import facts_of, kind_of, reduction_length, weight_channel_axis


def fmt_dtypes(d) -> str:
    return ", ".join(d)


def channel_list(idx, limit: int = 8) -> str:
    """Channel indices for a message: the first ``limit``, then how many in all."""
    idx = [int(i) for i in idx]
    head = ", ".join(str(i) for i in idx[:limit])
    return head + (f", … ({len(idx)} in all)" if len(idx) > limit else "")


def geometry(node: Node) -> dict:
    """The window of a convolution or pool (its ``Geometry`` record): kernel, stride, dilation, pads (None: none)."""
    g = node.geometry
    return {"kernel": g.kernel, "stride": g.stride, "dilation": g.dilation, "pads": g.pads} if g is not None else \
        dict.fromkeys(("kernel", "stride", "dilation", "pads"))


def reduction(ctx: Context, node: Node) -> int | None:
    """in_ch/groups * kh * kw of a MAC op: the length of one output's dot product (``opset.reduction_length``)."""
    w = ctx.weight(node)
    if w is None:
        a_shape = ctx.t(node.inputs[0]).shape if facts_of(node.op).matrix else ()  # a MatMul of two activations
        return reduction_length(node.op, None, a_shape)
    return reduction_length(node.op, w.shape, (), groups=node.attrs.get("group", 1),
                            trans_b=bool(node.attrs.get("transB")))


def weight_axis(node: Node, w: Tensor) -> int:
    """The output-channel axis of the node's weight ``w``."""
    return weight_channel_axis(node.op, w.data.ndim, bool(node.attrs.get("transB")))


def weight_real_per_channel(w: Tensor, axis: int) -> np.ndarray:
    """max |w| per output channel, in real units."""
    real = np.abs(w.q.dequantize(w.data).astype(np.float64))
    return np.moveaxis(real, axis, 0).reshape(real.shape[axis], -1).max(axis=1)


def weight_abs_row_sums(node: Node, w: Tensor) -> np.ndarray:
    """sum |w - zw| per output channel (int64): the integer weight mass one output accumulates."""
    axis = weight_axis(node, w)
    zw = w.q.zero_point if w.q.per_tensor else np.expand_dims(
        w.q.zero_point, tuple(i for i in range(w.data.ndim) if i != (w.q.axis or 0)))
    dev = np.abs(w.data.astype(np.int64) - zw)
    return np.moveaxis(dev, axis, 0).reshape(dev.shape[axis], -1).sum(axis=1)


def real_range(t: Tensor) -> tuple[float, float]:
    s, z = float(np.max(t.q.scale)), int(np.max(t.q.zero_point)) if t.q.per_tensor else 0
    return (t.q.qmin - z) * s, (t.q.qmax - z) * s


def bias_tensor(ctx: Context, node: Node) -> Tensor | None:
    """The int32 constant bias of a MAC op, if it has one."""
    if kind_of(node.op) != "mac" or len(node.inputs) < 3:
        return None
    b = ctx.t(node.inputs[2])
    return b if b.is_const and b.q is not None and b.q.dtype == "int32" else None


def precision(ctx: Context, node: Node) -> str:
    """The node's precision as the report shows it: ``a8w8``, ``a16``, ``a8xa`` (two activations), ``-``."""
    acts = ctx.acts(node)
    if not acts:
        return "-"
    bits = sorted({t.q.bits for t in acts})
    a = "a" + "/".join(str(b) for b in bits)
    w = ctx.weight(node)
    if w is not None:
        return f"{a}w{w.q.bits}"
    if kind_of(node.op) == "mac":  # two activations
        return a + "xa"
    return a


def max_output_lsb(ctx: Context, node: Node) -> np.ndarray | None:
    """Per output channel of a MAC op with constant weights: the largest |output change| in output LSBs that any
    input and the bias can cause (factor x (max|x - zx| * sum|w - zw| + |bias|))."""
    w = ctx.weight(node)
    x = ctx.t(node.inputs[0])
    if w is None or x.q is None or not x.q.per_tensor:
        return None
    axis = weight_axis(node, w)
    x_dev = x.q.reach
    rows = np.moveaxis(np.abs(w.data.astype(np.int64)), axis, 0).reshape(w.data.shape[axis], -1).sum(axis=1)
    bias = np.abs(node.requant.bias.astype(np.float64)) if node.requant is not None else np.zeros(1)
    sy = float(ctx.t(node.outputs[0]).q.scale)
    factor = float(x.q.scale) * np.broadcast_to(w.q.scale.astype(np.float64), rows.shape) / sy
    return factor * (x_dev * rows + np.broadcast_to(bias if bias.size > 1 else bias.reshape(()), rows.shape))
