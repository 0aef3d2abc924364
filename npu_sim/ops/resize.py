"""Resize (nearest and linear), with ONNX's coordinate transformation modes.

Preparation maps every output coordinate to source coordinates in float64 once (``_source_coords``); at run
time only integers move:

* nearest: a gather with the precomputed source indices; requantized only if the output quantization differs.
* linear (bilinear on the last two axes): integer weights with ``F`` fraction bits (board
  ``resize_fraction_bits``): ``w = round_half_up(frac * 2^F)``, ``acc = sum(w_y w_x (q - zx))`` over the four
  neighbours, ``y = R(acc, sx/(sy 2^(2F))) + zy``. Source coordinates are clamped to [0, in-1], which equals
  ONNX's edge handling.
"""
from __future__ import annotations



import numpy as np

from kernels.resize import resize_linear_acc
from kernels.resize_nearest import X_DTYPES, resize_nearest

from npu_sim.ir import Node, Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import (RESCALE_LISTED, attrs, check_per_tensor, fixed_multipliers, output_params,
                                record_params, requantize_acc, rescale_params)
from npu_sim.ops.elementwise import scalar_rescale
from npu_sim.ops.onnx_arith import lower_float_reference



def _str(v, default):
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else v


def _source_coords(mode: str, out_len: int, in_len: int, scale: float) -> np.ndarray:
    """Source coordinate of every output index, computed in float32 as onnxruntime does (with a non-integer
    ``scales`` input, float64 can land on the other side of a rounding boundary: 3/0.6000000238 = 4.9999998
    in float64 but 5.0 in float32)."""
    o = np.arange(out_len, dtype=np.float32)
    scale = np.float32(scale)
    in_len32, out_len32 = np.float32(in_len), np.float32(out_len)
    half = np.float32(0.5)
    if mode == "half_pixel":
        return (o + half) / scale - half
    if mode == "pytorch_half_pixel":
        return (o + half) / scale - half if out_len > 1 else np.zeros(out_len, np.float32)
    if mode == "align_corners":
        return o * (in_len32 - 1) / (out_len32 - 1) if out_len > 1 else np.zeros(out_len, np.float32)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nn":
        return (o + half) / scale
    if mode == "half_pixel_symmetric":
        adj = out_len32 / (scale * in_len32)
        offset = in_len32 * (1 - adj) / 2
        return offset + (o + half) / scale - half
    raise Problem(f"Resize coordinate_transformation_mode {mode!r} is not supported")


def _nearest(coords: np.ndarray, mode: str, in_len: int) -> np.ndarray:
    if mode == "round_prefer_floor":
        idx = np.where(coords - np.floor(coords) == 0.5, np.floor(coords), np.round(coords))
    elif mode == "round_prefer_ceil":
        idx = np.where(coords - np.floor(coords) == 0.5, np.ceil(coords), np.round(coords))
    elif mode == "floor":
        idx = np.floor(coords)
    elif mode == "ceil":
        idx = np.ceil(coords)
    else:
        raise Problem(f"Resize nearest_mode {mode!r} is not supported")
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def _resize_modes(onode, x: Tensor, out: Tensor, act) -> tuple[str, str, str, bool]:
    """A Resize's checked ``(mode, coordinate_transformation_mode, nearest_mode, exact_gather)``; ``exact_gather``:
    a nearest Resize that keeps the quantization, pure data movement (exact on every arithmetic)."""
    check_per_tensor(x, "Resize input")
    a = attrs(onode)
    mode = _str(a.get("mode"), "nearest")
    cmode = _str(a.get("coordinate_transformation_mode"), "half_pixel")
    nmode = _str(a.get("nearest_mode"), "round_prefer_floor")
    if a.get("antialias", 0):
        raise Problem("Resize with antialias is not supported")
    if "axes" in a:
        raise Problem("Resize with the axes attribute is not supported")
    if mode not in ("nearest", "linear"):
        raise Problem(f"Resize mode {mode!r} is not supported (nearest and linear are)")
    return mode, cmode, nmode, mode == "nearest" and x.q.same_as(out.q) and act is None


def lower_resize_onnx(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic: the board's exact gather where the Resize is pure data movement, else ONNX's
    definition of the QDQ group."""
    if _resize_modes(onode, args[0], out, act)[3]:
        return lower_resize(lowering, onode, args, out, act)
    return lower_float_reference(lowering, onode, args, [out], act)


def lower_resize(lowering, onode, args, out: Tensor, act) -> Node:
    x = args[0]
    mode, cmode, nmode, exact_gather = _resize_modes(onode, x, out, act)
    rank = len(x.shape)
    scales = None
    if len(args) > 2 and isinstance(args[2], np.ndarray) and args[2].size:
        scales = args[2].astype(np.float64)
    coords = []
    for ax in range(rank):
        scale = float(scales[ax]) if scales is not None else out.shape[ax] / x.shape[ax]
        if out.shape[ax] == x.shape[ax] and scale == 1.0:
            coords.append(None)
        else:
            coords.append(_source_coords(cmode, out.shape[ax], x.shape[ax], scale))
    p = {"mode": mode}
    if mode == "nearest":
        p["_index"] = [None if c is None else _nearest(c, nmode, x.shape[ax]) for ax, c in enumerate(coords)]
        p["_rescale"] = None
        if not exact_gather:
            p["_rescale"] = rescale_params(lowering, x.q, out, act)
        return Node(lowering.node_name(onode), "Resize", [x.name], [out.name], _run_nearest, p,
                    {"mode": mode, "coordinate_transformation_mode": cmode, "nearest_mode": nmode})
    if rank != 4 or coords[0] is not None or coords[1] is not None:
        raise Problem("linear Resize is supported on the two spatial axes of NCHW tensors")
    F = lowering.arith.resize_fraction_bits
    tables = []
    for ax in (2, 3):
        n_in, n_out = x.shape[ax], out.shape[ax]
        c = coords[ax] if coords[ax] is not None else np.arange(n_out, dtype=np.float64)
        c = np.clip(c.astype(np.float64), 0, n_in - 1)
        lo = np.floor(c).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        w = np.floor((c - lo) * (1 << F) + 0.5).astype(np.int64)
        tables += [lo, hi, w]
    p.update({"frac_bits": F, "_tables": tables})
    mult, shift = fixed_multipliers(np.array([float(x.q.scale) / (float(out.q.scale) * 4.0 ** F)]),
                                    lowering.arith.multiplier_bits)
    o = output_params(lowering, out, act)
    p["_out_dtype"] = o["_out_dtype"]
    # the requantization lives in the records only (the run reads them, ``common.record_params``)
    return Node(lowering.node_name(onode), "Resize", [x.name], [out.name], _run_linear, p,
                {"mode": mode, "coordinate_transformation_mode": cmode},
                requant=records.fixed_requant(lowering.arith, mult, shift, o["out_zp"], o["qmin"], o["qmax"],
                                              np.zeros(1, np.int64), x.q.zero_point),
                accumulator=records.accumulator(64, o["_saturate"]), clamp=records.clamp(o["qmin"], o["qmax"]),
                listed=("x_zp", "frac_bits") + RESCALE_LISTED[1:])


def _run_nearest(node, inputs, ctx):
    p = node.params
    y = inputs[0]
    index = p["_index"]
    if y.ndim == 4 and index[0] is None and index[1] is None and y.dtype in X_DTYPES:  # NCHW planes
        n, c, h, w = y.shape
        rows = np.arange(h) if index[2] is None else index[2]
        cols = np.arange(w) if index[3] is None else index[3]
        x, y = np.ascontiguousarray(y), np.empty((n, c, rows.size, cols.size), y.dtype)
        resize_nearest(x, rows, cols, y)
    else:
        for ax, idx in enumerate(index):
            if idx is not None:
                y = np.take(y, idx, axis=ax)
    if p["_rescale"] is not None:
        y = scalar_rescale(node, ctx, y, p["_rescale"], node.memo.setdefault("rescale", {}))
    return [np.ascontiguousarray(y)]


def _run_linear(node, inputs, ctx):
    p = node.params
    y0, y1, wy, x0, x1, wx = p["_tables"]
    acc = resize_linear_acc(np.ascontiguousarray(inputs[0]), record_params(node)["x_zp"], y0, y1, wy, x0, x1, wx,
                            p["frac_bits"])
    return [requantize_acc(node, ctx, acc, 1, 1, acc.size).reshape(acc.shape)]



