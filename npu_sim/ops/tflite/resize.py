"""The ``tflite`` arithmetic's Resize: RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR
(``kernels/tflite_resize.py``).
"""
from __future__ import annotations

from kernels.tflite_resize import tfl_resize_bilinear, tfl_resize_nearest

from npu_sim.ir import Node
from npu_sim.lowering.problem import Problem
from npu_sim.ops.common import attrs
from npu_sim.ops.tflite.common import act_tensor


# (ONNX mode, coordinate_transformation_mode, nearest_mode) -> TFLite (align_corners, half_pixel_centers)
_RESIZE_MODES = {
    ("linear", "half_pixel", None): (False, True),
    ("linear", "align_corners", None): (True, False),
    ("linear", "asymmetric", None): (False, False),
    ("nearest", "tf_half_pixel_for_nn", "floor"): (False, True),
    # the same pick: round_prefer_ceil((y + 0.5) / s - 0.5) = floor((y + 0.5) / s) (the .tflite frontend, opset 21)
    ("nearest", "half_pixel", "round_prefer_ceil"): (False, True),
    ("nearest", "asymmetric", "floor"): (False, False),
    ("nearest", "align_corners", "round_prefer_ceil"): (True, False),
}


def _attr_str(a, key, default):
    v = a.get(key, default)
    return v.decode() if isinstance(v, bytes) else v


def lower_resize(lowering, onode, args, out, act):
    """TFLite RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR: integers interpolated or picked as they are
    (input and output share their quantization); tf2onnx's ONNX attributes name TFLite's two flags."""
    x = act_tensor(args[0], "Resize input")
    a = attrs(onode)
    mode = _attr_str(a, "mode", "nearest")
    cmode = _attr_str(a, "coordinate_transformation_mode", "half_pixel")
    nmode = _attr_str(a, "nearest_mode", "round_prefer_floor") if mode == "nearest" else None
    flags = _RESIZE_MODES.get((mode, cmode, nmode))
    if flags is None:
        known = ", ".join(f"{m}/{c}" + (f"/{n}" if n else "") for m, c, n in _RESIZE_MODES)
        raise Problem(f"Resize {mode}/{cmode}" + (f"/{nmode}" if nmode else "") + " has no TFLite equivalent "
                       f"(TFLite's resize ops compute {known})")
    if len(x.shape) != 4 or tuple(out.shape[:2]) != tuple(x.shape[:2]):
        raise Problem("TFLite resizes the two spatial axes of a 4-D tensor only")
    if x.q.bits > 16 or not x.q.same_as(out.q) or act is not None:
        raise Problem("TFLite's integer resize keeps the quantization: input and output must share it (int8/int16)")
    if mode == "linear" and x.q.dtype == "uint8":
        raise Problem("TFLite's integer RESIZE_BILINEAR is for int8/int16 (its uint8 kernel computes another way): "
                      "quantize the activations as int8 (quantize_static activation_type=QInt8)")
    p = {"hw": (int(out.shape[2]), int(out.shape[3])), "align_corners": flags[0], "half_pixel": flags[1],
         "bilinear": mode == "linear"}
    return Node(lowering.node_name(onode), "Resize", [x.name], [out.name], _run_resize, p,
                {"mode": mode, "coordinate_transformation_mode": cmode})


def _run_resize(node, inputs, ctx):
    p = node.params
    fn = tfl_resize_bilinear if p["bilinear"] else tfl_resize_nearest
    return [fn(inputs[0], p["hw"], p["align_corners"], p["half_pixel"])]
