"""The ``tflite`` arithmetic: TFLite's integer reference kernels, op by op (board ``requantize = "tflite"``).

LiteRT (TFLite) computes a full-integer model with fixed integer recipes; the Ethos-U NPUs reproduce them. This
module lowers each supported ONNX op (from tf2onnx's QDQ twin of a .tflite, or any QDQ model) to those recipes:

* Conv / depthwise Conv / Gemm / MatMul: per output channel ``(M, s) = QuantizeMultiplier(sx*sw[c]/sy)`` (float64
  of the float32 scales); 8-bit: int32 accumulator + int32 bias, ``MultiplyByQuantizedMultiplier`` (double
  rounding); 16x8: int64 accumulator + int64 bias and the int64 overload (16-bit reduced multiplier)
  (``kernels/tflite_requantize.py``).
* Add/Sub, Mul, AveragePool, Mean, Concat, Resize, Quantize/Requantize, Logistic/Tanh/HardSwish, Softmax: the
  functions below, each with its kernel in ``kernels/tflite_*.py``.

Any op not in ``OPS`` is refused at lowering with the node's name: a tflite board never falls back to another
arithmetic silently.
"""
from __future__ import annotations

import numpy as np

import math

from kernels.conv2d import conv2d_acc
from kernels.gemm import int_matmul
from kernels.tflite_add import tfl_add
from kernels.tflite_fixedpoint import tfl_quantize_multiplier
from kernels.tflite_hardswish import reduce_multiplier16, tfl_hardswish
from kernels.tflite_lut8 import build_lut8, lut8_lookup
from kernels.tflite_mul import tfl_mul
from kernels.tflite_pool import tfl_avgpool, tfl_mean
from kernels.tflite_requantize import tfl_requantize
from kernels.tflite_rescale import tfl_rescale
from kernels.tflite_resize import tfl_resize_bilinear, tfl_resize_nearest
from kernels.tflite_sigmoid16 import input_rescale, tfl_sigmoid16
from kernels.tflite_softmax import (softmax8_params, softmax16_params, softmax16_tables, tfl_softmax8,
                                    tfl_softmax16)

from ..ir import Node, QParams, Tensor
from . import OpInfo, mac, movement, pool
from . import OPS as _BASE
from .common import activation_bounds, attrs


def _problem(msg):
    from ..lowering import Problem
    return Problem(msg)


def multipliers(real) -> tuple[np.ndarray, np.ndarray]:
    """Per-element TFLite (M, s) of an array of real factors (float64)."""
    flat = np.asarray(real, np.float64).reshape(-1)
    pairs = [tfl_quantize_multiplier(float(v)) for v in flat]
    return (np.array([p[0] for p in pairs], np.int64).reshape(np.shape(real)),
            np.array([p[1] for p in pairs], np.int64).reshape(np.shape(real)))


def _f32(v) -> float:
    return float(np.float32(v))


def activation_range(q: QParams, act, node_name: str = "") -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized: ``zp + round_half_away(float32(bound) / scale)`` (float32),
    intersected with the dtype range. LiteRT refuses the model at prepare time
    (``no_integer_overflow_from_quantization``) when a rounded bound leaves the int32 range."""
    lo, hi = q.qmin, q.qmax
    if act is None:
        return lo, hi
    s, z = np.float32(q.scale), int(q.zero_point)
    out = []
    for bound in act:
        if not math.isfinite(bound):
            out.append(None)
            continue
        t = float(np.float32(np.float32(bound) / s))
        t = math.floor(abs(t) + 0.5) * (1 if t >= 0 else -1)
        if not -2.0 ** 31 <= t <= 2.0 ** 31:  # TFLite compares the rounded float with float(INT32_MIN/MAX) = -+2**31
            where = f"node {node_name!r}: " if node_name else ""
            from ..lowering import Refusal
            raise Refusal(f"{where}LiteRT refuses this model at prepare time (no_integer_overflow_from_quantization): the "
                           f"activation bound {bound:g} / output scale {float(q.scale):.6g} = {t:.6g} does not fit "
                           f"int32; the output scale is too small for the fused activation (re-calibrate: the "
                           f"output range is almost empty)")
        out.append(z + int(t))
    if out[0] is not None:
        lo = max(lo, out[0])
    if out[1] is not None:
        hi = min(hi, out[1])
    return lo, hi


def _out(lowering, out: Tensor, act, node_name: str = "") -> dict:
    lo, hi = activation_range(out.q, act, node_name)
    return {"out_zp": int(out.q.zero_point), "qmin": lo, "qmax": hi, "_out_dtype": out.q.np_dtype}


def _act_tensor(arg, what: str) -> Tensor:
    if not isinstance(arg, Tensor) or not arg.q.per_tensor:
        raise _problem(f"{what} must be a per-tensor quantized tensor (DequantizeLinear)")
    return arg


def _value(t: Tensor, inputs, i):
    if t.is_const:
        return t.data, i
    return inputs[i], i + 1


def _ins(ts):
    return [t.name for t in ts if not t.is_const]


# ---- multiply-accumulate ops ------------------------------------------------------------------------------------
def _mac_tflite(lowering, node, x_q, w_q, out, n_channels):
    """Turn a node lowered by ``ops.mac`` into TFLite's requantization (same accumulator, TFLite's rescale)."""
    p = node.params
    if x_q.bits > 16 or w_q.bits != 8:
        raise _problem(f"TFLite computes {x_q.dtype} x {w_q.dtype}: only int8 x int8 and int16 x int8 (16x8) exist")
    wide = x_q.bits == 16
    # TFLite's 16x8 ops have zero zero points; a non-zero one (onnxruntime A16W8 models) is subtracted exactly
    sw = np.broadcast_to(np.asarray(w_q.scale, np.float32), (n_channels,)).astype(np.float64)
    real = np.float64(np.float32(x_q.scale)) * sw / np.float64(np.float32(out.q.scale))
    p["tfl_mult"], p["tfl_shift"] = multipliers(real)
    p["tfl_wide"] = wide
    p.update(_out(lowering, out, node_act(node), node.name))
    for key in ("scale", "mult", "shift", "_rq_prep"):
        p.pop(key, None)
    node.run = _RUN[node.op]
    return node


def node_act(node):
    return node.params.get("_tfl_act")


def _requant(node, acc, outer, channels, inner, out=None):
    p = node.params
    acc3 = np.ascontiguousarray(acc.reshape(outer, channels, inner), dtype=np.int64)
    if out is None:
        out = np.empty(acc3.shape, p["_out_dtype"])
    return tfl_requantize(acc3, p["bias"], p["tfl_mult"], p["tfl_shift"], p["tfl_wide"], p["out_zp"], p["qmin"],
                          p["qmax"], out=out)


def _run_conv(node, inputs, ctx):
    p = node.params
    x = np.ascontiguousarray(inputs[0])
    if p["_is1d"]:
        x = x[:, :, None, :]
    acc = conv2d_acc(x, p["x_zp"], p["_w"], p["stride"], p["pads"], p["dilation"], p["groups"])
    n, c = acc.shape[:2]
    return [_requant(node, acc, n, c, acc.size // (n * c)).reshape(ctx.shape_of(node.outputs[0]))]


def _run_gemm(node, inputs, ctx):
    p = node.params
    a = inputs[0].T if p["trans_a"] else inputs[0]
    acc = int_matmul(np.ascontiguousarray(a.astype(np.int32) - p["x_zp"]), p["_w"])
    return [_requant(node, acc, acc.shape[0], acc.shape[1], 1).reshape(acc.shape)]


def _run_matmul(node, inputs, ctx):
    p = node.params
    a = inputs[0].astype(np.int32) - p["a_zp"]
    acc = int_matmul(np.ascontiguousarray(a.reshape(-1, a.shape[-1])), p["_w"])
    return [_requant(node, acc, acc.shape[0], acc.shape[1], 1).reshape(tuple(ctx.shape_of(node.outputs[0])))]


_RUN = {"Conv": _run_conv, "Gemm": _run_gemm, "MatMul": _run_matmul}


def lower_conv(lowering, onode, args, out, act):
    node = mac.lower_conv(lowering, onode, args, out, act)
    node.params["_tfl_act"] = act
    return _mac_tflite(lowering, node, args[0].q, args[1].q, out, node.params["_w"].shape[0])


def lower_gemm(lowering, onode, args, out, act):
    node = mac.lower_gemm(lowering, onode, args, out, act)
    node.params["_tfl_act"] = act
    return _mac_tflite(lowering, node, args[0].q, args[1].q, out, node.params["_w"].shape[1])


def lower_matmul(lowering, onode, args, out, act):
    a_t, b_t = args[:2]
    if not (isinstance(b_t, mac.Tensor) and b_t.is_const and not a_t.is_const and b_t.data.ndim == 2):
        raise _problem("the tflite arithmetic supports MatMul by constant 2-D weights only (TFLite FULLY_CONNECTED)")
    node = mac.lower_matmul(lowering, onode, args, out, act)
    node.params["_tfl_act"] = act
    n = node.params["_w"].shape[1]
    if not node.params["_per_col"]:
        node.params["bias"] = np.zeros(n, np.int64)
    node.params["a_zp"] = int(a_t.q.zero_point)
    return _mac_tflite(lowering, node, a_t.q, b_t.q, out, n)


# ---- elementwise ---------------------------------------------------------------------------------------------
def lower_add(lowering, onode, args, out, act):
    a = _act_tensor(args[0], "Add/Sub input A")
    b = _act_tensor(args[1], "Add/Sub input B")
    bits = max(a.q.bits, b.q.bits, out.q.bits)
    if bits > 16:
        raise _problem("TFLite Add/Sub exists for int8 and int16 only")
    ls = lowering.arith.add_left_shift(bits)
    twice_max = 2.0 * max(_f32(a.q.scale), _f32(b.q.scale))
    m1, s1 = tfl_quantize_multiplier(_f32(a.q.scale) / twice_max)
    m2, s2 = tfl_quantize_multiplier(_f32(b.q.scale) / twice_max)
    mo, so = tfl_quantize_multiplier(twice_max / _f32(np.float32(2.0 ** ls) * np.float32(out.q.scale)))
    p = {"zp": (int(a.q.zero_point), int(b.q.zero_point)), "tfl_mult": (m1, m2, mo), "tfl_shift": (s1, s2, so),
         "left_shift": ls, "subtract": onode.op_type == "Sub", "_ts": (a, b)}
    p.update(_out(lowering, out, act))
    return Node(lowering.node_name(onode), onode.op_type, _ins([a, b]), [out.name], _run_add, p)


def _run_add(node, inputs, ctx):
    p = node.params
    x, i = _value(p["_ts"][0], inputs, 0)
    y, _ = _value(p["_ts"][1], inputs, i)
    (m1, m2, mo), (s1, s2, so) = p["tfl_mult"], p["tfl_shift"]
    return [tfl_add(x, y, *p["zp"], m1, s1, m2, s2, mo, so, p["left_shift"], p["subtract"], p["out_zp"], p["qmin"],
                    p["qmax"], p["_out_dtype"])]


def lower_mul(lowering, onode, args, out, act):
    a = _act_tensor(args[0], "Mul input A")
    b = _act_tensor(args[1], "Mul input B")
    real = np.float32(np.float32(a.q.scale) * np.float32(b.q.scale)) / np.float32(out.q.scale)  # float32 in TFLite
    m, s = tfl_quantize_multiplier(float(np.float32(real)))
    p = {"zp": (int(a.q.zero_point), int(b.q.zero_point)), "tfl_mult": m, "tfl_shift": s, "_ts": (a, b)}
    p.update(_out(lowering, out, act))
    return Node(lowering.node_name(onode), "Mul", _ins([a, b]), [out.name], _run_mul, p)


def _run_mul(node, inputs, ctx):
    p = node.params
    x, i = _value(p["_ts"][0], inputs, 0)
    y, _ = _value(p["_ts"][1], inputs, i)
    return [tfl_mul(x, y, *p["zp"], p["tfl_mult"], p["tfl_shift"], p["out_zp"], p["qmin"], p["qmax"],
                    p["_out_dtype"])]


def _rescale_params(src: QParams, out: Tensor, act, float32_ratio: bool) -> dict:
    ratio = (float(np.float32(np.float32(src.scale) / np.float32(out.q.scale))) if float32_ratio
             else _f32(src.scale) / _f32(out.q.scale))
    m, s = tfl_quantize_multiplier(ratio)
    lo, hi = activation_range(out.q, act)
    return {"x_zp": int(src.zero_point), "tfl_mult": m, "tfl_shift": s, "out_zp": int(out.q.zero_point),
            "qmin": lo, "qmax": hi, "_out_dtype": out.q.np_dtype}


def _apply_rescale(x, p):
    return tfl_rescale(x, p["x_zp"], p["tfl_mult"], p["tfl_shift"], p["out_zp"], p["qmin"], p["qmax"], p["_out_dtype"])


def lower_clamp(lowering, onode, args, out, act):
    """A Relu/Clip that TFLite did not fuse: RELU/RELU6 rescale their input (ReluX, float32 scale ratio)."""
    x = _act_tensor(args[0], f"{onode.op_type} input")
    bounds = activation_bounds(lowering, onode)
    if act is not None:
        bounds = (max(bounds[0], act[0]), min(bounds[1], act[1]))
    p = _rescale_params(x.q, out, bounds, float32_ratio=True)
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_rescale, p)


def _run_rescale(node, inputs, ctx):
    return [_apply_rescale(inputs[0], node.params)]


def lower_requantize(lowering, onode, src: Tensor, out: Tensor) -> Node:
    """TFLite QUANTIZE from integers to integers: mbqm32(q - zp_in, QuantizeMultiplier(s_in/s_out)) + zp_out."""
    return Node(lowering.node_name(onode), "Requantize", [src.name], [out.name], _run_rescale,
                _rescale_params(src.q, out, None, float32_ratio=False))


def lower_quantize(lowering, onode, src: Tensor, out: Tensor) -> Node:
    """TFLite QUANTIZE from float: zp + round_half_away(float32(x) / scale) (AffineQuantize), saturated."""
    return Node(lowering.node_name(onode), "Quantize", [src.name], [out.name], _run_quantize, {"_q": out.q},
                {"scale": float(out.q.scale), "zero_point": int(out.q.zero_point)})


def _run_quantize(node, inputs, ctx):
    q = node.params["_q"]
    v = (np.asarray(inputs[0], np.float32) / np.float32(q.scale)).astype(np.float32)
    r = np.trunc(np.abs(v).astype(np.float64) + 0.5) * np.sign(v)
    return [np.clip(np.nan_to_num(r) + int(q.zero_point), q.qmin, q.qmax).astype(q.np_dtype)]


def lower_concat(lowering, onode, args, out, act):
    """TFLite CONCATENATION copies integers (its quantizer gives every input the output's quantization); an
    input quantized differently is rescaled as TFLite's QUANTIZE would."""
    axis = int(attrs(onode).get("axis", 0)) % len(out.shape)
    parts = []
    for i, arg in enumerate(args):
        t = _act_tensor(arg, f"Concat input {i}")
        same = t.q.same_as(out.q) and act is None
        parts.append((t, None if same else _rescale_params(t.q, out, act, float32_ratio=False)))
    p = {"axis": axis, "_parts": parts, "_out_dtype": out.q.np_dtype}
    return Node(lowering.node_name(onode), "Concat", _ins([t for t, _ in parts]), [out.name], _run_concat, p,
                {"axis": axis})


def _run_concat(node, inputs, ctx):
    p = node.params
    pieces, i = [], 0
    for t, rq in p["_parts"]:
        v, i = _value(t, inputs, i)
        pieces.append((v if rq is None else _apply_rescale(v, rq)).astype(p["_out_dtype"], copy=False))
    return [np.concatenate(pieces, axis=p["axis"])]


# ---- pooling ----------------------------------------------------------------------------------------------------
def lower_avgpool(lowering, onode, args, out, act):
    x = _act_tensor(args[0], "AveragePool input")
    if not x.q.same_as(out.q):
        raise _problem("TFLite AVERAGE_POOL_2D needs equal input and output quantization")
    k, s, pads, d, is1d = pool._window(onode, x, out)
    if d != (1, 1) or is1d or int(attrs(onode).get("count_include_pad", 0)):
        raise _problem("the tflite arithmetic supports 2-D AveragePool without dilation or count_include_pad")
    p = {"kernel": k, "stride": s, "pads": pads}
    p.update(_out(lowering, out, act))
    return Node(lowering.node_name(onode), "AveragePool", [x.name], [out.name], _run_avgpool, p,
                {"kernel": k, "stride": s, "pads": pads})


def _run_avgpool(node, inputs, ctx):
    p = node.params
    return [tfl_avgpool(inputs[0], p["kernel"], p["stride"], p["pads"], p["qmin"], p["qmax"])]


def lower_mean(lowering, onode, args, out, act):
    x = _act_tensor(args[0], f"{onode.op_type} input")
    rank = len(x.shape)
    axes = pool.mean_axes(lowering, onode, args, rank)
    keep = [ax for ax in range(rank) if ax not in axes]
    m, s = tfl_quantize_multiplier(_f32(x.q.scale) / _f32(out.q.scale))
    p = {"x_zp": int(x.q.zero_point), "perm": tuple(keep) + axes, "n": int(np.prod([x.shape[i] for i in axes])),
         "tfl_mult": m, "tfl_shift": s}
    p.update(_out(lowering, out, act))
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_mean, p, {"axes": axes})


def _run_mean(node, inputs, ctx):
    p = node.params
    rows = np.transpose(inputs[0], p["perm"]).reshape(-1, p["n"])
    y = tfl_mean(rows, p["x_zp"], p["tfl_mult"], p["tfl_shift"], p["out_zp"], p["qmin"], p["qmax"], p["_out_dtype"])
    return [y.reshape(ctx.shape_of(node.outputs[0]))]


# ---- resize -------------------------------------------------------------------------------------------------------
# (ONNX mode, coordinate_transformation_mode, nearest_mode) -> TFLite (align_corners, half_pixel_centers)
_RESIZE_MODES = {
    ("linear", "half_pixel", None): (False, True),
    ("linear", "align_corners", None): (True, False),
    ("linear", "asymmetric", None): (False, False),
    ("nearest", "tf_half_pixel_for_nn", "floor"): (False, True),
    ("nearest", "asymmetric", "floor"): (False, False),
    ("nearest", "align_corners", "round_prefer_ceil"): (True, False),
}


def _attr_str(a, key, default):
    v = a.get(key, default)
    return v.decode() if isinstance(v, bytes) else v


def lower_resize(lowering, onode, args, out, act):
    """TFLite RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR: integers interpolated or picked as they are
    (input and output share their quantization); tf2onnx's ONNX attributes name TFLite's two flags."""
    x = _act_tensor(args[0], "Resize input")
    a = attrs(onode)
    mode = _attr_str(a, "mode", "nearest")
    cmode = _attr_str(a, "coordinate_transformation_mode", "half_pixel")
    nmode = _attr_str(a, "nearest_mode", "round_prefer_floor") if mode == "nearest" else None
    flags = _RESIZE_MODES.get((mode, cmode, nmode))
    if flags is None:
        known = ", ".join(f"{m}/{c}" + (f"/{n}" if n else "") for m, c, n in _RESIZE_MODES)
        raise _problem(f"Resize {mode}/{cmode}" + (f"/{nmode}" if nmode else "") + " has no TFLite equivalent "
                       f"(TFLite's resize ops compute {known})")
    if len(x.shape) != 4 or tuple(out.shape[:2]) != tuple(x.shape[:2]):
        raise _problem("TFLite resizes the two spatial axes of a 4-D tensor only")
    if x.q.bits > 16 or not x.q.same_as(out.q) or act is not None:
        raise _problem("TFLite's integer resize keeps the quantization: input and output must share it (int8/int16)")
    p = {"hw": (int(out.shape[2]), int(out.shape[3])), "align_corners": flags[0], "half_pixel": flags[1],
         "bilinear": mode == "linear"}
    return Node(lowering.node_name(onode), "Resize", [x.name], [out.name], _run_resize, p,
                {"mode": mode, "coordinate_transformation_mode": cmode})


def _run_resize(node, inputs, ctx):
    p = node.params
    fn = tfl_resize_bilinear if p["bilinear"] else tfl_resize_nearest
    return [fn(inputs[0], p["hw"], p["align_corners"], p["half_pixel"])]


# ---- lookup tables ----------------------------------------------------------------------------------------------
def lower_lut(lowering, onode, args, out, act):
    x = _act_tensor(args[0], f"{onode.op_type} input")
    if x.q.dtype == "int16" and out.q.dtype == "int16":
        return _lower_sigmoid16(lowering, onode, x, out, act)
    if x.q.dtype != "int8" or out.q.dtype != "int8":
        raise _problem(f"TFLite computes {onode.op_type} int8 -> int8 or int16 -> int16, not {x.q.dtype} -> "
                       f"{out.q.dtype}")
    lo, hi = activation_range(out.q, act)
    table = build_lut8(onode.op_type, x.q.scale, int(x.q.zero_point), out.q.scale, int(out.q.zero_point), lo, hi)
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_lut, {"_table": table},
                {"table": "256 entries"})


def _run_lut(node, inputs, ctx):
    return [lut8_lookup(inputs[0], node.params["_table"])]


def _lower_sigmoid16(lowering, onode, x, out, act):
    """TFLite's int16 LOGISTIC/TANH reference kernels (``kernels/tflite_sigmoid16.py``); LiteRT's prepare
    requires zero points 0 and the output scale 2**-15."""
    if int(x.q.zero_point) != 0 or int(out.q.zero_point) != 0 or np.float32(out.q.scale) != np.float32(2.0 ** -15):
        raise _problem(f"TFLite's int16 {onode.op_type} needs zero points 0 and output scale 2**-15 (LiteRT refuses "
                       f"others at prepare time); got input zp {int(x.q.zero_point)}, output scale "
                       f"{float(out.q.scale):g} zp {int(out.q.zero_point)}")
    if act is not None:
        raise _problem(f"TFLite's int16 {onode.op_type} has no fused activation")
    mult, ls = input_rescale(onode.op_type, float(x.q.scale))
    if not 0 < mult <= 32767:
        raise _problem(f"input scale {float(x.q.scale):g} is too large for TFLite's int16 {onode.op_type}")
    return Node(lowering.node_name(onode), onode.op_type, [x.name], [out.name], _run_sigmoid16,
                {"fn": onode.op_type, "mult": mult, "ls": ls}, {"table": "256-entry sigmoid table, interpolated"})


def _run_sigmoid16(node, inputs, ctx):
    p = node.params
    return [tfl_sigmoid16(inputs[0], p["fn"], p["mult"], p["ls"])]


def _hardswish_params(s_in, s_out):
    """TFLite HardSwishPrepare (float32): (M_out16, e_out, M_relu16, e_relu)."""
    f32 = np.float32
    hires = f32(f32(1.0 / 128.0) * f32(s_in))
    m_out, e_out = tfl_quantize_multiplier(float(f32(hires / f32(s_out))))
    m_relu, e_relu = tfl_quantize_multiplier(float(f32(hires / f32(f32(3.0) / f32(32768.0)))))
    return reduce_multiplier16(m_out), e_out, reduce_multiplier16(m_relu), e_relu


def lower_hardswish(lowering, onode, args, out, act):
    """TFLite's int8 HARD_SWISH (``kernels/tflite_hardswish.py``); TFLite has no int16 HARD_SWISH."""
    x = _act_tensor(args[0], "HardSwish input")
    if x.q.dtype != "int8" or out.q.dtype != "int8" or act is not None:
        raise _problem("TFLite computes HardSwish int8 -> int8 only (no 16x8 HARD_SWISH, no fused activation)")
    m_out, e_out, m_relu, e_relu = _hardswish_params(x.q.scale, out.q.scale)
    if e_out > 0:  # LiteRT: TF_LITE_ENSURE(output_multiplier_exponent <= 0)
        raise _problem("LiteRT refuses this HardSwish at prepare time: output scale below input scale / 128")
    if e_out < -15 or not -15 <= e_relu <= 15:
        raise _problem("HardSwish scales outside the range TFLite's 16-bit arithmetic handles")
    p = {"in_zp": int(x.q.zero_point), "out_zp": int(out.q.zero_point), "m_out": m_out, "e_out": e_out,
         "m_relu": m_relu, "e_relu": e_relu}
    return Node(lowering.node_name(onode), "HardSwish", [x.name], [out.name], _run_hardswish, p)


def _run_hardswish(node, inputs, ctx):
    p = node.params
    return [tfl_hardswish(inputs[0], p["in_zp"], p["out_zp"], p["m_out"], p["e_out"], p["m_relu"], p["e_relu"])]


# ---- softmax ------------------------------------------------------------------------------------------------------
def lower_softmax(lowering, onode, args, out, act):
    """TFLite SOFTMAX (beta 1) over the last axis: int8 -> int8 (gemmlowp fixed point) or int16 -> int16 (exp and
    reciprocal tables), ``kernels/tflite_softmax.py``. LiteRT's prepare fixes the output quantization."""
    x = _act_tensor(args[0], "Softmax input")
    rank = len(x.shape)
    if int(attrs(onode).get("axis", -1)) % rank != rank - 1:
        raise _problem("TFLite's SOFTMAX normalizes the last axis only")
    if act is not None:
        raise _problem("TFLite's SOFTMAX has no fused activation")
    f32 = np.float32
    if x.q.dtype == "int8" and out.q.dtype == "int8":
        if int(out.q.zero_point) != -128 or f32(out.q.scale) != f32(1 / 256):
            raise _problem("TFLite's int8 SOFTMAX needs output scale 1/256 and zero point -128 (LiteRT refuses "
                           "others at prepare time)")
        if not float(f32(x.q.scale)) * 2.0 ** 26 > 1.0:
            raise _problem("input scale too small for TFLite's int8 SOFTMAX (beta * scale * 2**26 must exceed 1)")
        m, ls, diff_min = softmax8_params(float(x.q.scale))
        p = {"wide": False, "m": m, "ls": ls, "diff_min": diff_min}
    elif x.q.dtype == "int16" and out.q.dtype == "int16":
        if int(x.q.zero_point) != 0 or int(out.q.zero_point) != 0 or abs(float(out.q.scale) * 32768 - 1) > 1e-3:
            raise _problem("TFLite's int16 SOFTMAX needs zero points 0 and output scale 1/32768 (LiteRT refuses "
                           "others at prepare time)")
        m, sh = softmax16_params(float(x.q.scale))
        exp_lut, recip_lut = softmax16_tables()
        p = {"wide": True, "m": m, "s": sh, "_exp": exp_lut, "_recip": recip_lut}
    else:
        raise _problem(f"TFLite computes SOFTMAX int8 -> int8 or int16 -> int16 here, not {x.q.dtype} -> "
                       f"{out.q.dtype}")
    return Node(lowering.node_name(onode), "Softmax", [x.name], [out.name], _run_softmax, p, {"axis": rank - 1})


def _run_softmax(node, inputs, ctx):
    p = node.params
    x = inputs[0]
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    if p["wide"]:
        y = tfl_softmax16(rows, p["m"], p["s"], p["_exp"], p["_recip"])
    else:
        y = tfl_softmax8(rows, p["m"], p["ls"], p["diff_min"])
    return [y.reshape(x.shape)]


# ---- the op table -----------------------------------------------------------------------------------------------
OPS: dict[str, OpInfo] = {
    "Conv": OpInfo("mac", lower_conv),
    "Gemm": OpInfo("mac", lower_gemm),
    "MatMul": OpInfo("mac", lower_matmul),
    "Add": OpInfo("elementwise", lower_add),
    "Sub": OpInfo("elementwise", lower_add),
    "Mul": OpInfo("elementwise", lower_mul),
    "Concat": OpInfo("elementwise", lower_concat),
    "Relu": OpInfo("activation", lower_clamp),
    "Clip": OpInfo("activation", lower_clamp),
    "AveragePool": OpInfo("pool", lower_avgpool),
    "GlobalAveragePool": OpInfo("pool", lower_mean),
    "ReduceMean": OpInfo("pool", lower_mean),
    "Resize": OpInfo("resize", lower_resize),
    "Sigmoid": OpInfo("lut", lower_lut),
    "Tanh": OpInfo("lut", lower_lut),
    "HardSwish": OpInfo("lut", lower_hardswish),
    "Softmax": OpInfo("normalization", lower_softmax),
    "MaxPool": _BASE["MaxPool"],  # exact (a max of integers) on every board
    "GlobalMaxPool": _BASE["GlobalMaxPool"],
    **{op: _BASE[op] for op in movement.MOVEMENT_OPS},
}


def op_info(op: str):
    """The tflite OpInfo of an ONNX op type, or raise a Problem naming the op (the walk adds the node name)."""
    info = OPS.get(op)
    if info is None:
        supported = ", ".join(sorted(OPS))
        raise _problem(f"op {op} is not supported by the tflite arithmetic (board requantize = \"tflite\"); "
                       f"supported: {supported}")
    return info
