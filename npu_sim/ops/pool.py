"""Pooling and reductions: MaxPool, GlobalMaxPool, AveragePool, GlobalAveragePool, ReduceMean.

Board integer semantics:

* MaxPool: the maximum of the raw integers (order-preserving, so exact) on the input's quantization; a
  following QuantizeLinear with other parameters becomes a Requantize.
* AveragePool: ``s = sum(q - zx)`` over the window, ``n`` = cells counted (all cells of the padded window with
  ``count_include_pad``, else the in-bounds ones), ``y = R(s, sx/(n sy)) + zy`` with one multiplier per ``n``.
* GlobalAveragePool / ReduceMean: ``y = R(sum(q - zx), sx/(n sy)) + zy`` over the reduced cells.
``R`` is the board's fixed-point requantization. The ``onnx`` arithmetic runs the ONNX definition (dequantize,
float32 op, quantize; ``onnx_arith``), except where onnxruntime fuses the group:

* GlobalAveragePool with 8-bit input and output of one type (its QDQ ``UnarySelector``: the input is a
  DequantizeLinear output, the output feeds exactly one QuantizeLinear, possibly through one Relu/Clip it makes
  redundant, and is not a graph output; per-tensor) becomes com.microsoft QLinearGlobalAveragePool, computed as
  MLAS does on x86-64: ``acc = wrap_int32(sum(q) - zx*n)``, ``f = f32(f32(acc) * f32(sx / f32(sy*n)))`` clamped
  to ``[qmin - zy, qmax - zy]``, ``y = rint(f) + zy`` (``kernels/ort_qlgavgpool.py``). onnxruntime refuses a factor
  ``sx/(sy n)`` outside ``[2**-32, 256)`` or ``n >= 2**24``; such groups keep the ONNX definition.
* ReduceMean, AveragePool and re-quantizing MaxPool keep the ONNX definition (onnxruntime's QLinearAveragePool is
  not modelled).
"""
from __future__ import annotations

import numpy as np

from kernels.ort_qlgavgpool import ort_qlgavgpool, qlgavgpool_scale
from kernels.ort_qlavgpool import qlinear_avgpool
from kernels.pool2d import avgpool2d, maxpool2d
from kernels.row_sum import bind_requantized as bind_row_sums_requantized
from kernels.row_sum import row_sums

from npu_sim.ir import Geometry, Node, Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import (attrs, bound_closure, check_per_tensor, clamp_bounds, fixed_multipliers, int_const,
                     layout_memo, output_params, record_params, requant_record, requant_scales,
                     requantize_acc)
from npu_sim.ops.elementwise import ort_fuses_qdq_group
from npu_sim.ops.onnx_arith import lower_float_reference



def pool_window(onode, x: Tensor, out: Tensor):
    a = attrs(onode)
    rank = len(x.shape)
    if rank not in (3, 4):
        raise Problem(f"{onode.op_type} with {rank - 2} spatial dims is not supported (1-D and 2-D are)")
    k = list(a["kernel_shape"])
    s = list(a.get("strides", [1] * len(k)))
    d = list(a.get("dilations", [1] * len(k)))
    nd = len(k)
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    in_sp, out_sp = x.shape[2:], out.shape[2:]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pb, pe = [], []
        for i in range(nd):
            total = max((out_sp[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i], 0)
            head = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pb.append(head)
            pe.append(total - head)
        pads = pb + pe
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = list(a.get("pads", [0] * (2 * nd)))
    if nd == 1:
        return (1, k[0]), (1, s[0]), (0, pads[0], 0, pads[1]), (1, d[0]), True
    return tuple(k), tuple(s), (pads[0], pads[1], pads[2], pads[3]), tuple(d), False


def lower_maxpool(lowering, onode, args, _out, _act) -> list[str]:
    """Max pooling preserves order, so the max of the integers is the integer of the max: it runs on its
    input's quantization like data movement (exact on every board), lowered as soon as it is met. A
    QuantizeLinear with other parameters after it becomes a Requantize; a Relu/Clip after it is its own op."""
    x = args[0]
    if not isinstance(x, Tensor) or x.is_const:
        raise Problem(f"input {onode.input[0]!r} of {onode.op_type} is not a dequantized integer tensor")
    check_per_tensor(x, f"{onode.op_type} input")
    if len(onode.output) > 1 and onode.output[1]:
        raise Problem("MaxPool with an Indices output is not supported")
    name = onode.output[0]
    out = lowering.add_tensor(Tensor(name, name, lowering.shape(name), x.q))
    if onode.op_type == "GlobalMaxPool":
        p, geometry = {"global": True}, None
    else:
        k, s, pads, d, is1d = pool_window(onode, x, out)
        p = {"global": False, "kernel": k, "stride": s, "pads": pads, "dilation": d, "_is1d": is1d}
        geometry = Geometry(k, s, pads, d)
    lowering.emit(Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_maxpool, p,
                       geometry=geometry))
    return [out.name]


def _run_maxpool(node, inputs, ctx):
    p = node.params
    x = inputs[0]
    out_shape = ctx.shape_of(node.outputs[0])
    if p["global"]:
        y = x.reshape(x.shape[0], x.shape[1], -1).max(axis=2).reshape(out_shape)
    else:
        x4 = x[:, :, None, :] if p["_is1d"] else x
        oh, ow = (1, out_shape[2]) if p["_is1d"] else out_shape[2:]
        y = maxpool2d(np.ascontiguousarray(x4), p["kernel"], p["stride"], p["pads"], p["dilation"], (oh, ow),
                      cache=node.memo.setdefault("k_cache", {}))
        y = y.reshape(out_shape)
    return [y]


def lower_avgpool_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: onnxruntime's QLinearAveragePool where it fuses the group, else ONNX's
    definition."""
    x = args[0]
    if (len(x.shape) == 4 and ort_fuses_qdq_group(lowering, onode, args, out) and act is None
            and tuple(attrs(onode).get("dilations", (1, 1))) == (1, 1)):
        k, s, pads, d, _ = pool_window(onode, x, out)
        qmin, qmax = clamp_bounds(out.q, act)
        p = {"kernel": k, "stride": s, "pads": pads, "count_include_pad": int(attrs(onode).get(
             "count_include_pad", 0)), "_sx": np.float32(x.q.scale), "x_zp": int(x.q.zero_point),
             "_sy": np.float32(out.q.scale), "out_zp": int(out.q.zero_point), "qmin": qmin, "qmax": qmax,
             "_out_dtype": out.q.np_dtype}
        return Node(lowering.node_name(onode), "AveragePool", [x.name], [out.name], _run_ort_qlavgpool, p,
                    {"arithmetic": "onnxruntime QLinearAveragePool"}, geometry=Geometry(k, s, pads),
                    clamp=records.clamp(qmin, qmax))
    return lower_float_reference(lowering, onode, args, [out], act)


def lower_avgpool(lowering, onode, args, out: Tensor, act) -> Node:
    x = args[0]
    check_per_tensor(x, "AveragePool input")
    k, s, pads, d, is1d = pool_window(onode, x, out)
    include = int(attrs(onode).get("count_include_pad", 0))
    counts = np.arange(k[0] * k[1] + 1, dtype=np.float64)
    real = np.zeros_like(counts)
    real[1:] = float(x.q.scale) / (counts[1:] * float(out.q.scale))
    mult, shift = fixed_multipliers(real, lowering.arith.multiplier_bits)
    p = {"x_zp": int(x.q.zero_point), "kernel": k, "stride": s, "pads": pads, "dilation": d,
         "count_include_pad": include, "_mult": mult, "_shift": shift, "_is1d": is1d}
    o = output_params(lowering, out, act)
    p.update(o)
    if d != (1, 1):
        raise Problem("AveragePool with dilations is not supported")
    return Node(lowering.node_name(onode), "AveragePool", [x.name], [out.name], _run_avgpool, p,
                {"kernel": k, "stride": s, "pads": pads}, geometry=Geometry(k, s, pads, d),
                clamp=records.clamp(o["qmin"], o["qmax"]))


def _run_ort_qlavgpool(node, inputs, ctx):
    p = node.params
    out = np.empty(ctx.shape_of(node.outputs[0]), p["_out_dtype"])
    qlinear_avgpool(np.ascontiguousarray(inputs[0]), p["_sx"], p["x_zp"], p["_sy"], p["out_zp"], p["kernel"],
                    p["stride"], p["pads"], p["count_include_pad"], p["qmin"], p["qmax"], out)
    return [out]


def _run_avgpool(node, inputs, ctx):
    p = node.params
    x = inputs[0]
    x4 = x[:, :, None, :] if p["_is1d"] else x
    out_shape = ctx.shape_of(node.outputs[0])
    oh, ow = (1, out_shape[2]) if p["_is1d"] else out_shape[2:]
    out = np.empty((x4.shape[0], x4.shape[1], oh, ow), p["_out_dtype"])
    avgpool2d(np.ascontiguousarray(x4), p["x_zp"], p["kernel"], p["stride"], p["pads"], bool(p["count_include_pad"]),
              p["_mult"], p["_shift"], p["out_zp"], p["qmin"], p["qmax"], out)
    return [out.reshape(out_shape)]


def mean_axes(lowering, onode, args, rank: int) -> tuple[int, ...]:
    """The sorted axes a GlobalAveragePool (all spatial axes) or ReduceMean (attribute or input) averages."""
    if onode.op_type == "GlobalAveragePool":
        return tuple(range(2, rank))
    a = attrs(onode)
    if len(args) > 1 and args[1] is not None:
        axes = tuple(int(v) for v in int_const(lowering, args[1], "ReduceMean axes"))
    else:
        axes = tuple(a.get("axes", range(rank)))
    if not axes and a.get("noop_with_empty_axes", 0):
        raise Problem("ReduceMean with noop_with_empty_axes is not supported")
    return tuple(sorted(ax % rank for ax in axes)) or tuple(range(rank))


def _mean_extent(lowering, onode, args) -> tuple[tuple[int, ...], int]:
    """The checked axes of a GlobalAveragePool / ReduceMean (per-tensor input) and how many values each mean
    averages."""
    x = args[0]
    check_per_tensor(x, f"{onode.op_type} input")
    axes = mean_axes(lowering, onode, args, len(x.shape))
    return axes, int(np.prod([x.shape[ax] for ax in axes]))


def lower_mean_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: onnxruntime's QLinearGlobalAveragePool where it fuses a GlobalAveragePool group
    (and would run it), else ONNX's definition."""
    x = args[0]
    axes, n = _mean_extent(lowering, onode, args)
    if onode.op_type == "GlobalAveragePool" and len(x.shape) >= 3 and ort_fuses_qdq_group(lowering, onode, args, out):
        try:
            qlgavgpool_scale(float(x.q.scale), float(out.q.scale), n)
        except ValueError:  # onnxruntime would refuse to run it
            return lower_float_reference(lowering, onode, args, [out], act)
        p = {"kernel": "QLinearGlobalAveragePool", "n": n, "_out_dtype": out.q.np_dtype,
             "_q": (float(x.q.scale), int(x.q.zero_point), float(out.q.scale), int(out.q.zero_point))}
        return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_ort_qlgavgpool, p,
                    {"axes": axes, "n": n, "arithmetic": "onnxruntime QLinearGlobalAveragePool (MLAS x86-64)"})
    return lower_float_reference(lowering, onode, args, [out], act)


def lower_mean(lowering, onode, args, out: Tensor, act) -> Node:
    x = args[0]
    axes, n = _mean_extent(lowering, onode, args)
    # sum(x - x_zp) = sum(x) - x_zp * n: the zero point goes into the bias; the requantization lives in the
    # records only (the run reads them, ``common.record_params``)
    r = requant_scales(lowering, float(x.q.scale), 1.0 / n, float(out.q.scale), 1, (x.q.bits,),
                       bias=-int(x.q.zero_point) * n)
    o = output_params(lowering, out, act)
    listed = ("x_zp", "axes", "n", "bias", "acc_bits") + (("mult", "shift") if r.mult is not None else ("scale",)) + (
        "out_zp", "qmin", "qmax")
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_mean,
                {"axes": axes, "n": n, "_out_dtype": o["_out_dtype"]}, {"axes": axes, "n": n},
                requant=requant_record(lowering, r, o, r.bias, x.q.zero_point),
                accumulator=records.accumulator(64, o["_saturate"]),
                geometry=Geometry(axes=tuple(int(a) for a in axes)), clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=listed)


def _run_ort_qlgavgpool(node, inputs, ctx):
    p = node.params
    x = inputs[0]
    rows = np.ascontiguousarray(x.reshape(x.shape[0] * x.shape[1], p["n"]))
    out = np.empty(rows.shape[0], p["_out_dtype"])
    ort_qlgavgpool(rows, *p["_q"], out)
    return [out.reshape(ctx.shape_of(node.outputs[0]))]


def _run_mean(node, inputs, ctx):
    p = node.params
    x = inputs[0]
    fast = layout_memo(node.memo, "fast", (x.shape, x.dtype),
                       lambda: _mean_closure(p, record_params(node), x, ctx.shape_of(node.outputs[0])))
    if fast is not None:
        return [fast(x)]
    axes = p["axes"]
    if axes == tuple(range(axes[0], x.ndim)):  # trailing axes: the sums of contiguous rows
        rows = np.ascontiguousarray(x).reshape(-1, p["n"])
        acc = np.empty(rows.shape[0], np.int64)
        row_sums(rows, acc)
    else:
        acc = x.astype(np.int64).sum(axis=axes).reshape(-1)
    return [requantize_acc(node, ctx, acc, 1, 1, acc.size).reshape(ctx.shape_of(node.outputs[0]))]


def _mean_closure(p, rq, x, out_shape):
    """``f(x) -> y`` summing and requantizing contiguous rows in one kernel call (``row_sums_requantized``), for
    inputs shaped and typed like ``x`` when the mean is over trailing axes and the fusion is proven; else None.
    ``p``: the node's params, ``rq`` its requantization (``common.record_params``)."""
    axes = p["axes"]
    if "mult" not in rq or axes != tuple(range(axes[0], x.ndim)):
        return None
    shape2 = (x.size // p["n"], p["n"])
    dt = rq["_out_dtype"]
    run = bind_row_sums_requantized(np.ascontiguousarray(x).reshape(shape2), rq["bias"][0], rq["mult"][0],
                                    rq["shift"][0], rq["out_zp"], rq["qmin"], rq["qmax"], rq["acc_bits"],
                                    np.empty(shape2[0], dt))
    return None if run is None else bound_closure(run, shape2, shape2[0], out_shape, dt)
