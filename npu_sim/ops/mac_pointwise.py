"""The 1x1 convolutions of ``ops.mac`` that take an exact float GEMM: the centred activations times float weights
in one chunk (or the byte split of 16-bit activations), requantized a block of whole output-channel rows at a time.
"""
from __future__ import annotations

import numpy as np

from kernels.conv2d_common import sub_zero_point
from kernels.conv2d_hilo import combine_hilo, HILO_MIN_K, hilo_ok, split_hilo
from kernels.gemm import abs_max, float_dtype, plan
from kernels import conv_int16

from npu_sim.ops.common import requantize_acc


def is_pointwise(p, w) -> bool:
    """A 1x1 convolution of weights ``w`` (Cout, Cin, kh, kw) with params ``p``, stride 1, unpadded, ungrouped."""
    return (w.shape[2] == 1 and w.shape[3] == 1 and tuple(p["stride"]) == (1, 1) and not any(p["pads"])
            and p["groups"] == 1)


POINTWISE_BLOCK = 1 << 21  # accumulator elements per GEMM call (8 MiB of float32): rows of output channels
PAIR_BLOCK = 1 << 16  # int32 accumulators per block of the fused int16-pair kernel (256 KiB: stays in L2)


def prepare_pointwise(p, w, rq: dict, x) -> dict | None:
    """What a 1x1 convolution needs on every call: the same exact single-chunk GEMM as conv2d_gemm_blocks
    (centred activations, float weights, the centring folded into the bias) with the requantization of whole
    rows of output channels, which are contiguous. None where one exact float chunk does not cover K, or where
    the int16-pair kernel of conv2d_gemm_blocks (faster) applies. ``p``: the node's params, ``w`` its weights,
    ``rq`` its requantization as ``requantize_acc`` reads it (``common.record_params``)."""
    cout, k = w.shape[0], w.shape[1]
    center = conv_int16.x_center(x.dtype)
    info = np.iinfo(x.dtype)
    x_dev = max(abs(int(info.min) - center), abs(int(info.max) - center))
    wmax = abs_max(w)
    if (x[0, 0].size >= conv_int16.NB
            and conv_int16.plan(x.dtype, None, int(np.abs(w.reshape(cout, k).astype(np.int64)).sum(axis=1).max()))):
        return None  # conv2d_gemm_blocks' int16-pair kernel: faster than the float GEMMs below but on tiny planes
    method, kc = plan(x_dev * wmax, k)
    single = method in ("f32", "f64") and kc >= k
    split = not (method == "f32" and single) and (k >= HILO_MIN_K or not single) and hilo_ok(x.dtype, None, wmax, k)
    if not (single or split):
        return None
    dt = np.float32 if split else float_dtype(method)
    wsum = w.reshape(cout, k).astype(np.int64).sum(axis=1)
    params = dict(rq)
    # sum((x - zx) w) = sum((x - c) w) + (c - zx) sum(w); the byte split adds 128 sum(w) (v = 256 hi + lo + 128)
    params["bias"] = rq["bias"] + (center - p["x_zp"] + (128 if split else 0)) * wsum
    hw = int(np.prod(x.shape[2:]))
    rows = max(1, min(cout, POINTWISE_BLOCK // max(1, hw)))
    if split:  # the GEMM result holds both halves: twice the columns per row
        rows = max(1, min(cout, POINTWISE_BLOCK // max(1, 2 * hw)))
    return {"key": (x.dtype, x.shape[1:]), "w": np.ascontiguousarray(w.reshape(cout, k).astype(dt)), "dt": dt,
            "center": center, "params": params, "rows": rows, "split": split,
            "memo": {}}  # requantize_acc's memo for these params


def run_pointwise(node, ctx, x, pw):
    n_img, cin = x.shape[:2]
    hw = x.size // (n_img * cin)
    cout = pw["w"].shape[0]
    y = np.empty((n_img, cout, hw), node.params["_out_dtype"])
    split = pw["split"]
    # byte split (16-bit activations): the bytes side by side, [hi | lo], one GEMM for both
    xf = np.empty((cin, 2 * hw) if split else (cin, hw), pw["dt"])
    rows = pw["rows"]
    for n in range(n_img):
        if split:
            split_hilo(x[n].reshape(cin, hw), pw["center"], xf[:, :hw], xf[:, hw:])
        else:
            sub_zero_point(x[n].reshape(cin, hw), pw["center"], xf)
        for r0 in range(0, cout, rows):
            r1 = min(cout, r0 + rows)
            acc = pw["w"][r0:r1] @ xf
            if split:  # 256*hi + lo, exact in float64
                acc = combine_hilo(acc[:, :hw], acc[:, hw:], np.empty((r1 - r0, hw), np.float64))
            requantize_acc(node, ctx, acc, 1, r1 - r0, hw, params=pw["params"], out=y[n:n + 1, r0:r1],
                           channel_slice=slice(r0, r1), memo=pw["memo"])
    return y
