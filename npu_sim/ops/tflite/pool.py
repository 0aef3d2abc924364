"""The ``tflite`` arithmetic's averaging ops: AVERAGE_POOL_2D (``lower_avgpool``) and MEAN
(``lower_mean``: ReduceMean, GlobalAveragePool), ``kernels/tflite_pool.py``. MaxPool is exact on every board
(``ops.pool``).
"""
from __future__ import annotations

import numpy as np

from kernels.tflite_pool import tfl_avgpool, tfl_mean

from npu_sim.ir import Geometry, Node
from npu_sim.lowering.problem import Problem
from npu_sim.ops import pool, records
from npu_sim.ops.common import attrs
from npu_sim.ops.tflite.common import act_tensor, float32_of, out_params, quantize_multiplier


def lower_avgpool(lowering, onode, args, out, act):
    x = act_tensor(args[0], "AveragePool input")
    if not x.q.same_as(out.q):
        raise Problem("TFLite AVERAGE_POOL_2D needs equal input and output quantization")
    k, s, pads, d, is1d = pool.pool_window(onode, x, out)
    if d != (1, 1) or is1d or int(attrs(onode).get("count_include_pad", 0)):
        raise Problem("the tflite arithmetic supports 2-D AveragePool without dilation or count_include_pad")
    p = {"kernel": k, "stride": s, "pads": pads}
    o = out_params(lowering, out, act)
    p.update(o)
    return Node(lowering.node_name(onode), "AveragePool", [x.name], [out.name], _run_avgpool, p,
                {"kernel": k, "stride": s, "pads": pads}, geometry=Geometry(k, s, pads),
                clamp=records.clamp(o["qmin"], o["qmax"]))


def _run_avgpool(node, inputs, ctx):
    p = node.params
    return [tfl_avgpool(inputs[0], p["kernel"], p["stride"], p["pads"], p["qmin"], p["qmax"])]


def lower_mean(lowering, onode, args, out, act):
    x = act_tensor(args[0], f"{onode.op_type} input")
    rank = len(x.shape)
    axes = pool.mean_axes(lowering, onode, args, rank)
    keep = [ax for ax in range(rank) if ax not in axes]
    m, s = quantize_multiplier(float32_of(x.q.scale) / float32_of(out.q.scale))
    o = out_params(lowering, out, act)
    # the requantization lives in the ``requant`` record only (the run reads it there)
    p = {"perm": tuple(keep) + axes, "n": int(np.prod([x.shape[i] for i in axes])), "axes": axes,
         "_out_dtype": o["_out_dtype"]}
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_mean, p, {"axes": axes},
                requant=records.tflite_requant(m, s, o["out_zp"], o["qmin"], o["qmax"], in_zp=x.q.zero_point),
                geometry=Geometry(axes=tuple(int(a) for a in axes)), clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=("x_zp", "perm", "n", "axes", "tfl_mult", "tfl_shift", "out_zp", "qmin", "qmax"))


def _run_mean(node, inputs, ctx):
    p, rq = node.params, node.requant
    rows = np.transpose(inputs[0], p["perm"]).reshape(-1, p["n"])
    y = tfl_mean(rows, rq.in_zp, int(rq.mult[0]), int(rq.shift[0]), rq.out_zp, rq.qmin, rq.qmax, p["_out_dtype"])
    return [y.reshape(ctx.shape_of(node.outputs[0]))]
