"""The front door's schema checks: every node against the ONNX operator schema of the model's opset
(``onnx.defs.get_schema``), and the spec's rules that the schemas do not encode.

``check_attributes`` runs on the model as stored, before shape inference: every attribute of the schema's type
(an ``int`` where ``ints`` are due is refused here, not met as a Python error later), required attributes given,
float attributes finite, string attributes one of the spec's choices, flags 0 or 1, auto_pad not together with
pads, strides/dilations/kernels >= 1 and pads >= 0 (one per spatial axis, two for pads).

``check_types`` runs on the inferred model: every input and output of every default-domain node of a type its
schema allows at the model's opset, the tensors one type variable binds (Conv's ``T``: X, W and B) of one type,
so that a DequantizeLinear reading a float tensor, a Conv reading an int32 bias without its DequantizeLinear, an
int8 Clip bound on a float Clip or a 16-bit QuantizeLinear before opset 21 is refused naming node, input, type and
what the schema allows; and every declared value_info and graph output agreeing with what the graph computes.

Each refusal is one ``ModelLoadError`` (``QuantizationError`` on a Q/DQ node) naming the node, the attribute or
tensor, its value and what is allowed. Values ONNX allows but that are odd (a NaN Clip bound) are returned as
warnings that say the consequence (docs/TESTING.md lists them).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto

from npu_sim.errors import ModelLoadError, QuantizationError
from npu_sim.frontend.validate_semantics import AUTO_PADS, QDQ, SPATIAL, label_of, type_name

# string attributes whose values the spec lists (the schemas say only "string"); op None: every op
CHOICES = {
    (None, "auto_pad"): AUTO_PADS,
    ("Resize", "mode"): ("nearest", "linear", "cubic"),
    ("Resize", "coordinate_transformation_mode"): ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                                   "align_corners", "asymmetric", "tf_crop_and_resize",
                                                   "tf_half_pixel_for_nn"),
    ("Resize", "nearest_mode"): ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    ("Resize", "keep_aspect_ratio_policy"): ("stretch", "not_larger", "not_smaller"),
    ("Pad", "mode"): ("constant", "reflect", "edge", "wrap"),
    ("Gelu", "approximate"): ("none", "tanh"),
}
# boolean attributes: 0 or 1 (onnxruntime reads keepdims = 2 as 0 but count_include_pad = 2 as 1)
FLAGS = ("transA", "transB", "keepdims", "allowzero", "ceil_mode", "count_include_pad", "exclude_outside",
         "antialias", "noop_with_empty_axes", "storage_order", "saturate", "select_last_index")
AT_LEAST = {"strides": 1, "dilations": 1, "kernel_shape": 1, "pads": 0}  # per spatial axis (pads: 2 per axis)
# tf2onnx writes TFLite's 16x8 models with int16 Q/DQ and int64 biases at opset 15 (ONNX allows 16-bit Q/DQ from
# opset 21, and no int64 DequantizeLinear): npu-sim reads that dialect from tf2onnx only, with a warning
TF2ONNX_QDQ = {TensorProto.INT16, TensorProto.UINT16, TensorProto.INT64}
KIND = {AttributeProto.FLOAT: "a float", AttributeProto.INT: "an int", AttributeProto.STRING: "a string",
        AttributeProto.TENSOR: "a tensor", AttributeProto.GRAPH: "a graph", AttributeProto.FLOATS: "floats",
        AttributeProto.INTS: "ints (a list of integers)", AttributeProto.STRINGS: "strings",
        AttributeProto.TENSORS: "tensors", AttributeProto.GRAPHS: "graphs"}


@lru_cache(maxsize=None)
def schema_of(op: str, opset: int):
    """The default-domain schema of ``op`` in force at ``opset``, None for an op onnx does not define."""
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


def _error(node, text: str):
    return QuantizationError(text) if node.op_type in QDQ else ModelLoadError(text)


def _default_domain(node) -> bool:
    return node.domain in ("", "ai.onnx")


# ---- attributes --------------------------------------------------------------------------------------------------
def check_attributes(model: onnx.ModelProto, path, opset: int) -> list[str]:
    """The attribute rules above on every default-domain node of the stored graph; the warnings."""
    warnings: list[str] = []
    for i, node in enumerate(model.graph.node):
        schema = schema_of(node.op_type, opset) if _default_domain(node) else None
        if schema is None:
            continue
        label = label_of(path, node, i)
        given = {a.name: a for a in node.attribute}
        for name, spec in schema.attributes.items():
            if spec.required and name not in given:
                raise _error(node, f"{label}: the required attribute {name} is missing "
                                   f"({node.op_type}-{schema.since_version} needs {KIND.get(spec.type.value)})")
        for a in node.attribute:
            spec = schema.attributes.get(a.name)
            if spec is None or a.ref_attr_name:
                continue  # an unknown attribute: onnx's checker names it
            if a.type != spec.type.value:
                shown = onnx.helper.get_attribute_value(a) if a.type else "untyped"
                raise _error(node, f"{label}: attribute {a.name} is {KIND.get(a.type, 'untyped')} ({shown!r}); "
                                   f"{node.op_type}-{schema.since_version} takes {KIND.get(spec.type.value)}")
        values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if a.name in schema.attributes}
        warnings += _check_values(node, values, label)
        if node.op_type in SPATIAL:
            _check_spatial(node, values, label)
    return warnings


def _check_values(node, values: dict, label: str) -> list[str]:
    warnings = []
    for name, value in values.items():
        if isinstance(value, float) or (isinstance(value, list) and value and isinstance(value[0], float)):
            bad = [v for v in (value if isinstance(value, list) else [value]) if not math.isfinite(v)]
            if bad and node.op_type == "Clip":  # opset < 11: Clip's bounds are attributes
                warnings.append(clip_warning(label, name, bad[0]))
            elif bad and node.op_type != "Constant":  # a Constant's value is data (NaN is a value like any)
                raise _error(node, f"{label}: attribute {name} = {bad[0]!r}; it must be a finite number (a "
                                   f"non-finite {name} makes every output NaN or infinite, which no integer output "
                                   f"can hold)")
        choices = CHOICES.get((node.op_type, name)) or CHOICES.get((None, name))
        if choices and isinstance(value, bytes):
            text = value.decode("utf-8", "replace")
            if text not in choices:  # a value of 5,000 characters is shown by its start
                shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text)} characters)"
                raise _error(node, f"{label}: attribute {name} = {shown} is not one of {', '.join(choices)}")
        if name in FLAGS and isinstance(value, int) and value not in (0, 1):
            raise _error(node, f"{label}: attribute {name} = {value}; it is a flag: 0 or 1")
    if node.op_type == "Resize" and values.get("exclude_outside") and values.get("mode", b"nearest") != b"cubic":
        # onnxruntime: "exclude_outside can be set to 1 only when mode is CUBIC" (the weights it renormalizes)
        raise _error(node, f"{label}: attribute exclude_outside = 1 with mode "
                           f"{values.get('mode', b'nearest').decode('utf-8', 'replace')!r}; it applies to cubic only")
    return warnings


def clip_warning(label: str, bound: str, value: float) -> str:
    return (f"{label}: Clip {bound} is {value!r}; ONNX allows it, but NaN compares false, so onnxruntime "
            f"(and npu-sim) apply no {bound} bound at all" if math.isnan(value) else
            f"{label}: Clip {bound} is {value!r}; ONNX allows it: the bound clips nothing")


def _check_spatial(node, values: dict, label: str) -> None:
    auto_pad = values.get("auto_pad", b"NOTSET").decode("utf-8", "replace")
    if "pads" in values and auto_pad != "NOTSET":
        # the spec: "pads ... cannot be used simultaneously with auto_pad attribute"; onnxruntime refuses it
        raise _error(node, f"{label}: attribute auto_pad = {auto_pad!r} together with pads {values['pads']}; the "
                           f"ONNX spec forbids using both: drop pads, or set auto_pad to NOTSET")
    pad_out, strides = list(values.get("output_padding", [])), list(values.get("strides", []))
    limits = [max(st, d) for st, d in zip(strides or [1] * len(pad_out), values.get("dilations", [1] * len(pad_out)))]
    if any(p < 0 or p >= lim for p, lim in zip(pad_out, limits)) or (pad_out and len(limits) != len(pad_out)):
        # the spec: "Each padding value in output_padding must be less than the corresponding stride/dilation"
        raise _error(node, f"{label}: attribute output_padding = {pad_out}: each value must be at least 0 and "
                           f"less than its axis's stride or dilation ({limits})")
    axes = len(values["kernel_shape"]) if "kernel_shape" in values else None
    for name, least in AT_LEAST.items():
        if name not in values:
            continue
        v = list(values[name])
        if v and min(v) < least:
            raise _error(node, f"{label}: attribute {name} = {v}: every value must be at least {least}")
        want = None if axes is None else (2 * axes if name == "pads" else axes)
        if want is not None and len(v) != want:
            raise _error(node, f"{label}: attribute {name} has {len(v)} values {v}, but kernel_shape "
                               f"{list(values['kernel_shape'])} has {axes} spatial axes, so it needs {want}")


# ---- types -------------------------------------------------------------------------------------------------------
def check_types(g, opset: int, producer: str = "") -> list[str]:
    """The type rules above on ``g`` (a read ``Graph``: every tensor's inferred element type); the warnings."""
    warnings: list[str] = []
    dialect: list[str] = []  # the tf2onnx 16x8 dialect's tensors: one warning for all of them
    for i, node in enumerate(g.nodes):
        schema = schema_of(node.op_type, opset) if _default_domain(node) else None
        if schema is None:
            continue
        label = label_of(g.path, node, i)
        bound: dict[str, tuple[int, str]] = {}
        for role, names, formals in (("input", node.input, schema.inputs), ("output", node.output, schema.outputs)):
            for k, name in enumerate(names):
                formal = _formal(formals, k)
                etype = g.elem_types.get(name) if name else None
                if formal is None or not etype:
                    continue
                odd = _check_type(node, schema, formal, role, name, etype, bound, label, producer)
                if odd:
                    dialect.append(odd)
        if node.op_type == "Clip":
            warnings += _clip_bounds(g, node, label)
    if dialect:
        warnings.append(f"{g.path}: {len(dialect)} Q/DQ tensor(s) of types opset {opset} does not allow (e.g. "
                        f"{dialect[0].removeprefix(f'{g.path}: ')}; ONNX allows 16-bit Q/DQ from opset 21, int64 "
                        f"never): read as tf2onnx writes TFLite 16x8 models, but onnxruntime refuses this model")
    return warnings


def _formal(formals, k: int):
    if k < len(formals):
        return formals[k]
    last = formals[-1] if formals else None
    return last if last is not None and last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic else None


def _allowed(schema, type_str: str) -> set[str]:
    for c in schema.type_constraints:
        if c.type_param_str == type_str:
            return {t[len("tensor("):-1] for t in c.allowed_type_strs if t.startswith("tensor(")}
    return {type_str[len("tensor("):-1]} if type_str.startswith("tensor(") else set()


def _check_type(node, schema, formal, role, name, etype, bound, label, producer) -> str | None:
    """Refuse a type the schema does not allow; return where the tf2onnx 16x8 dialect was read (None else)."""
    allowed = _allowed(schema, formal.type_str)
    got = type_name(etype)
    where = f"{role} {formal.name} {name!r}"
    warning = None
    if allowed and got not in allowed:
        if node.op_type in QDQ and etype in TF2ONNX_QDQ and producer == "tf2onnx":
            warning = f"{label}: {where} is {got}"
        else:
            more = (" (ONNX allows 16-bit QuantizeLinear/DequantizeLinear from opset 21: raise the opset, or "
                    "use the com.microsoft domain)" if node.op_type in QDQ and etype in (TensorProto.INT16,
                                                                                         TensorProto.UINT16) else "")
            raise _error(node, f"{label}: {where} is {got}, but {node.op_type}-{schema.since_version} allows "
                               f"{', '.join(sorted(allowed))} there{more}")
    if not formal.is_homogeneous:  # a heterogeneous variadic (Loop's carried values): one type each
        return warning
    if formal.type_str in bound and bound[formal.type_str][0] != etype:
        other_type, other = bound[formal.type_str]
        raise _error(node, f"{label}: {where} is {got} but {other} is {type_name(other_type)}; "
                           f"{node.op_type} gives them one type ({formal.type_str})")
    bound.setdefault(formal.type_str, (etype, where))
    return warning


def _clip_bounds(g, node, label: str) -> list[str]:
    warnings, bounds = [], {}
    for k, bound in ((1, "min"), (2, "max")):
        name = node.input[k] if len(node.input) > k else ""
        value = g.consts.get(name) if name else None
        if value is not None and value.size == 1 and value.dtype.kind == "f":
            bounds[bound] = float(np.asarray(value).reshape(-1)[0])
            if not math.isfinite(bounds[bound]):
                warnings.append(clip_warning(label, bound, bounds[bound]))
    if len(bounds) == 2 and bounds["min"] > bounds["max"]:  # NaN compares false: not here
        warnings.append(f"{label}: Clip min {bounds['min']!r} is above max {bounds['max']!r}; ONNX allows it: "
                        f"every output is max (Min(max, Max(input, min)))")
    return warnings


def check_declared(declared: dict, g) -> None:
    """Every value_info and graph output as the model declares it (``declared``: name -> (element type, dims or
    None; a dim None where symbolic)) against what inference computed for ``g``: the same element type and rank,
    and the same size wherever both are fixed numbers (onnx's full check refuses a contradiction, too)."""
    for name, (etype, dims) in declared.items():
        got_type = g.elem_types.get(name)
        if etype and got_type and etype != got_type:
            raise ModelLoadError(f"{g.path}: tensor {name!r} is declared {type_name(etype)} (value_info or graph "
                                 f"output), but the graph computes it as {type_name(got_type)}; fix or remove the "
                                 f"declaration")
        got = g.shapes.get(name)
        if dims is None or got is None:
            continue
        if len(dims) != len(got) or any(d is not None and d != s for d, s in zip(dims, got)):
            shown = ["?" if d is None else d for d in dims]
            raise ModelLoadError(f"{g.path}: tensor {name!r} is declared with shape {shown} (value_info or graph "
                                 f"output), but the graph computes shape {list(got)}; fix or remove the "
                                 f"declaration")
