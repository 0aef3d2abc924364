"""The ``tflite`` arithmetic's conversions: QUANTIZE from float (``lower_quantize``) and from integers
(``lower_requantize``).
"""
from __future__ import annotations

import numpy as np

from npu_sim.ir import Node, Tensor
from npu_sim.ops.tflite.common import rescale_prepared, run_rescale


def lower_requantize(lowering, onode, src: Tensor, out: Tensor) -> Node:
    """TFLite QUANTIZE from integers to integers: mbqm32(q - zp_in, QuantizeMultiplier(s_in/s_out)) + zp_out."""
    p, recs = rescale_prepared(src.q, out, None, float32_ratio=False)
    return Node(lowering.node_name(onode), "Requantize", [src.name], [out.name], run_rescale, p, **recs)


def lower_quantize(lowering, onode, src: Tensor, out: Tensor) -> Node:
    """TFLite QUANTIZE from float: zp + round_half_away(float32(x) / scale) (AffineQuantize), saturated."""
    return Node(lowering.node_name(onode), "Quantize", [src.name], [out.name], _run_quantize, {"_q": out.q},
                {"scale": float(out.q.scale), "zero_point": int(out.q.zero_point)})


def _run_quantize(node, inputs, ctx):
    q = node.params["_q"]
    v = (np.asarray(inputs[0], np.float32) / np.float32(q.scale)).astype(np.float32)
    r = np.trunc(np.abs(v).astype(np.float64) + 0.5) * np.sign(v)
    return [np.clip(np.nan_to_num(r) + int(q.zero_point), q.qmin, q.qmax).astype(q.np_dtype)]
