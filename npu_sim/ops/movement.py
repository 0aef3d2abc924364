"""Pure data movement: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, Transpose, Slice, Split, Pad,
Gather (constant indices).

These move integers without changing them, so they are exact on every board and keep the input's
quantization. Their output (a float tensor in ONNX) becomes an integer tensor with the same scale and zero
point; if a QuantizeLinear with different parameters follows, the walk inserts a Requantize. Applied to a
constant (e.g. a transposed weight), they are folded at lowering.
"""
from __future__ import annotations

import numpy as np

from npu_sim.ir import Node, QParams, Tensor
from npu_sim.opset import VIEW_OPS
from npu_sim.lowering.problem import Problem
from npu_sim.ops.common import attrs, int_const




def lower_movement(lowering, onode, args, _out, _act) -> list[str]:
    x = args[0]
    if not isinstance(x, Tensor):
        if isinstance(x, np.ndarray):
            raise Problem("data movement on a float constant that is not quantized")
        raise Problem(f"input {onode.input[0]!r} is not a dequantized integer tensor")
    op = onode.op_type
    outs = [o for o in onode.output if o]
    if op == "Dropout":
        outs = outs[:1]
    out_shapes = [lowering.shape(o) for o in outs]
    fn, params, out_axis = _prepare(lowering, onode, args, x, out_shapes)
    if not x.q.per_tensor and out_axis is None:
        raise Problem(f"{op} of per-axis quantized tensor {x.float_name!r} is not supported")
    q = x.q if x.q.per_tensor else QParams(x.q.dtype, x.q.scale, x.q.zero_point, out_axis)
    names = []
    if x.is_const:  # fold
        values = fn(x.data, params)
        for o, v in zip(outs, values):
            t = lowering.add_tensor(Tensor(o, o, tuple(v.shape), q, np.ascontiguousarray(v)))
            names.append(t.name)
        return names
    for o, shape in zip(outs, out_shapes):
        names.append(lowering.add_tensor(Tensor(o, o, shape, q)).name)
    params["_fn"] = fn
    lowering.emit(Node(lowering.node_name(onode), op, [x.name], names, _run, params,
                               {k: v for k, v in params.items() if not k.startswith("_")}))
    return names


def _run(node, inputs, ctx):
    return node.params["_fn"](inputs[0], node.params)


def _prepare(lowering, onode, args, x: Tensor, out_shapes):
    op = onode.op_type
    a = attrs(onode)
    axis = x.q.axis
    if op in VIEW_OPS:
        shape = out_shapes[0]
        return ((lambda v, p: [v.reshape(p["shape"])]), {"shape": shape},
                (axis if op in ("Identity", "Dropout") else None))
    if op == "Transpose":
        perm = tuple(a.get("perm", range(len(x.shape) - 1, -1, -1)))
        new_axis = perm.index(axis) if axis is not None else None
        return (lambda v, p: [np.ascontiguousarray(np.transpose(v, p["perm"]))]), {"perm": perm}, new_axis
    if op == "Slice":
        rank = len(x.shape)
        if len(args) > 1:
            starts = int_const(lowering, args[1], "Slice starts")
            ends = int_const(lowering, args[2], "Slice ends")
            axes = (int_const(lowering, args[3], "Slice axes") if len(args) > 3 and args[3] is not None
                    else np.arange(len(starts)))
            steps = (int_const(lowering, args[4], "Slice steps") if len(args) > 4 and args[4] is not None
                     else np.ones(len(starts), np.int64))
        else:
            starts, ends = np.array(a["starts"]), np.array(a["ends"])
            axes = np.array(a.get("axes", range(len(starts))))
            steps = np.ones(len(starts), np.int64)
        index = [slice(None)] * rank
        for s, e, ax, st in zip(starts, ends, axes, steps):
            clip = lambda v: int(max(min(v, 2**62), -2**62))
            index[int(ax) % rank] = slice(clip(s), clip(e), int(st))
        sl = tuple(index)
        return (lambda v, p: [np.ascontiguousarray(v[p["_index"]])]), {"_index": sl}, axis
    if op == "Split":
        ax = int(a.get("axis", 0)) % len(x.shape)
        sizes = [s[ax] for s in out_shapes]
        cuts = list(np.cumsum(sizes)[:-1])
        return (lambda v, p: [np.ascontiguousarray(part) for part in np.split(v, p["cuts"], axis=p["axis"])]), \
            {"axis": ax, "cuts": cuts}, (axis if axis != ax else None)
    if op == "Pad":
        mode = a.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        rank = len(x.shape)
        if len(args) > 1:
            pads = int_const(lowering, args[1], "Pad pads")
            value = args[2] if len(args) > 2 else None
            axes = (int_const(lowering, args[3], "Pad axes") if len(args) > 3 and args[3] is not None
                    else np.arange(rank))
        else:
            pads, value, axes = np.array(a["pads"]), np.array(a.get("value", 0.0), np.float32), np.arange(rank)
        if np.any(pads < 0):
            raise Problem("Pad with negative pads (cropping) is not supported")
        width = [(0, 0)] * rank
        n = len(axes)
        for i, ax in enumerate(axes):
            width[int(ax) % rank] = (int(pads[i]), int(pads[i + n]))
        if mode not in ("constant", "reflect", "edge"):
            raise Problem(f"Pad mode {mode!r} is not supported")
        fill = int(x.q.zero_point) if x.q.per_tensor else 0
        if mode == "constant" and value is not None:
            if isinstance(value, Tensor):
                real = value.q.dequantize(value.data)
            else:
                real = np.asarray(value, np.float32)
            if not x.q.per_tensor:
                raise Problem("constant Pad of a per-axis quantized tensor is not supported")
            fill = int(x.q.quantize(np.asarray(real, np.float32).reshape(())))
        if mode == "constant":
            fn = lambda v, p: [np.pad(v, p["width"], mode="constant", constant_values=p["fill"])]
        else:
            fn = lambda v, p: [np.pad(v, p["width"], mode=p["mode"])]
        return fn, {"width": tuple(width), "mode": mode, "fill": fill}, axis
    if op == "Gather":
        idx = int_const(lowering, args[1], "Gather indices")
        ax = int(a.get("axis", 0)) % len(x.shape)
        idx = np.where(idx < 0, idx + x.shape[ax], idx)
        return (lambda v, p: [np.ascontiguousarray(np.take(v, p["_idx"], axis=p["axis"]))]), \
            {"axis": ax, "_idx": idx}, (axis if axis is not None and axis < ax else None)
    raise Problem(f"{op} is not a data-movement op")
