"""Variations of a mean (ReduceMean, GlobalAveragePool), for ``explain``: LiteRT's optimized MEAN.

LiteRT's optimized int8 MEAN over a plane sums the raw integers of each channel, applies one multiplier for
``sx / (n * sy)`` (float32, TFLite's QuantizeMultiplier) and adds a bias that folds both zero points in,
``zy - (int)(zx * sx / sy +- 0.5)`` (float32): measured, it reproduces every element of LiteRT's optimized-kernel
dump of MobileNet V1's global average pool (the reference kernel subtracts the input zero point first and rounds
otherwise: 313 of 1,024 elements differ by 1), with the SIMD rounding shift (second-stage ties toward +inf).
"""
from __future__ import annotations

import numpy as np

from kernels.tflite_fixedpoint import tfl_quantize_multiplier

from npu_sim.analysis.compare.rounding import half_away, half_up, two_stage
from npu_sim.ir import Node, Program

LITERT_MEAN = "LiteRT optimized MEAN (raw sum, one float32 multiplier, the zero points in a float32 bias)"


def mean_candidates(prog: Program, node: Node, inputs: list) -> list:
    """(name, the node's output under each variation, flat) for a mean over fixed axes; [] for other nodes."""
    g = node.geometry
    if node.op not in ("ReduceMean", "GlobalAveragePool") or g is None or g.axes is None or len(inputs) != 1:
        return []
    xq, yq = prog.tensors[node.inputs[0]].q, prog.tensors[node.outputs[0]].q
    if xq is None or yq is None or not (xq.per_tensor and yq.per_tensor):
        return []
    x = np.asarray(inputs[0]).astype(np.int64)
    if any(a >= x.ndim for a in g.axes):
        return []
    n = int(np.prod([x.shape[a] for a in g.axes]))
    sums = x.sum(axis=tuple(g.axes)).reshape(-1)
    f32 = np.float32
    sx, sy, zx, zy = f32(xq.scale), f32(yq.scale), int(xq.zero_point), int(yq.zero_point)
    temp = f32(f32(zx) * sx / sy)
    bias = zy - int(temp + f32(0.5) if temp > 0 else temp - f32(0.5))  # (C++: a float truncated toward zero)
    m, s = tfl_quantize_multiplier(float(sx / (f32(n) * sy)))
    lo, hi = node.clamp or (yq.qmin, yq.qmax)
    return [(f"{LITERT_MEAN}, second-stage ties toward +inf", np.clip(two_stage(sums, m, s, half_up, half_up) + bias,
                                                                      lo, hi)),
            (f"{LITERT_MEAN}, TFLite's reference rounding", np.clip(two_stage(sums, m, s, half_up, half_away) + bias,
                                                                   lo, hi))]
