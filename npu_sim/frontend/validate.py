"""The front door: every model is validated here, once, before anything is lowered, checked or costed.

``open_model`` and ``OpenModel.graph`` (``npu_sim.frontend.reader``) call these in order; every command and API
entry reads models through them, so ``run``, ``lower``, ``check``, ``estimate``, ``report`` and ``compare`` refuse
the same models with the same message:

1. ``check_versions``: the IR version and the default-domain opset within what npu-sim implements;
2. ``check_structure``: unique graph input, initializer, output and node names, one writer per tensor, every input
   produced before it is read (topological order), at least one output, every output produced, every graph input
   and output typed, no graph input with a zero or negative dimension;
3. ``npu_sim.frontend.validate_schema.check_attributes``: every attribute against the ONNX operator schema
   (type, required, finite, the spec's choices and ranges);
4. ``check_onnx``: onnx's own checker (node specs, attribute types, domains);
5. ``infer_strict``: onnx's strict shape and type inference, its first error naming the node;
6. ``npu_sim.frontend.validate_schema.check_types``: every tensor's element type against the schema's type
   constraints; ``npu_sim.frontend.validate_semantics``: Q/DQ type rules, attribute ranges, bias shapes and
   ranges, Reshape counts, constant indices, tensor sizes; then every value_info and graph output as declared.

Each refusal is a ``ModelLoadError`` or ``QuantizationError`` (exit 2) naming the file and node, tensor or
attribute, and what to do.
"""
from __future__ import annotations

import re

import onnx

from npu_sim.errors import ModelLoadError

# The default-domain opsets and IR versions npu-sim reads (QDQ needs opset >= 10; docs/ARITHMETIC.md)
MIN_OPSET, MAX_OPSET = 10, 23
MIN_IR, MAX_IR = 3, onnx.IR_VERSION
_TWO_GB = 2 ** 31 - 1
# sub-byte types, packed several to a byte in raw_data
_PACKED_BITS = {getattr(onnx.TensorProto, name): bits for name, bits in
                (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
                if hasattr(onnx.TensorProto, name)}


def check_versions(model: onnx.ModelProto, path) -> int:
    """The model's default-domain opset, after checking it and the IR version against what npu-sim reads."""
    if not MIN_IR <= model.ir_version <= MAX_IR:
        raise ModelLoadError(f"{path}: the model's IR version is {model.ir_version}; npu-sim reads IR versions "
                             f"{MIN_IR} to {MAX_IR}. Re-export the model with an ONNX release that writes one of "
                             f"those")
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        imported = ", ".join(f"{o.domain!r} {o.version}" for o in model.opset_import) or "none"
        raise ModelLoadError(f"{path}: the model imports no default-domain (ai.onnx) opset (imports: {imported}); "
                             f"every ONNX model needs one. Add it, e.g. model.opset_import.append("
                             f"onnx.helper.make_opsetid('', 17))")
    if len(versions) > 1:
        raise ModelLoadError(f"{path}: the model imports the default-domain opset {len(versions)} times "
                             f"({versions}); keep one")
    opset = versions[0]
    if opset < MIN_OPSET:
        raise ModelLoadError(f"{path}: opset {opset} is too old for QDQ quantization (need >= {MIN_OPSET}); "
                             f"upgrade with onnx.version_converter.convert_version(model, 13)")
    if opset > MAX_OPSET:
        raise ModelLoadError(f"{path}: the model's default-domain opset is {opset}; npu-sim implements opsets "
                             f"{MIN_OPSET} to {MAX_OPSET}. Export with an opset in that range (e.g. "
                             f"onnx.version_converter.convert_version(model, {MAX_OPSET}))")
    return opset


def check_structure(graph: onnx.GraphProto, path) -> None:
    """Names, single assignment, topological order and outputs of ``graph`` (the ONNX spec's graph rules)."""
    inits = _unique([i.name for i in graph.initializer] + [s.values.name for s in graph.sparse_initializer],
                    "initializer", path)
    inputs = _unique([i.name for i in graph.input], "graph input", path)
    _unique([o.name for o in graph.output], "graph output", path)
    _unique([n.name for n in graph.node if n.name], "node", path)  # the IR's node namespace; onnxruntime refuses it
    if not graph.output:
        raise ModelLoadError(f"{path}: the graph declares no outputs, so there is nothing to compute; list the "
                             f"tensors the model returns in graph.output")
    _check_declared_io(graph, inits, path)
    writer: dict[str, str] = {name: "a graph input" for name in inputs}
    writer.update({name: "an initializer" for name in inits})  # an input shadowed by an initializer is valid
    for i, node in enumerate(graph.node):
        label = _node_label(node, i)
        for name in node.input:
            if name and name not in writer:
                later = next((_node_label(n, j) for j, n in enumerate(graph.node) if j > i and name in n.output),
                             None)
                if later:
                    raise ModelLoadError(f"{path}: {label} reads {name!r} before {later} writes it: the nodes are "
                                         f"not in topological order (or form a cycle), which ONNX requires; "
                                         f"re-export the model, or sort its nodes so every producer comes first")
                raise ModelLoadError(f"{path}: {label} reads {name!r}, which no node, graph input or initializer "
                                     f"produces; the model is incomplete (a missing initializer or a renamed "
                                     f"tensor): re-export it")
        if not node.output:
            raise ModelLoadError(f"{path}: {label} has no outputs; remove it or give it its output")
        for name in node.output:
            if not name:
                continue
            if name in writer:
                raise ModelLoadError(f"{path}: tensor {name!r} is written by both {writer[name]} and {label}; "
                                     f"ONNX allows one writer per tensor: rename one of them")
            writer[name] = label
    for out in graph.output:
        if out.name not in writer:
            raise ModelLoadError(f"{path}: graph output {out.name!r} is produced by no node, graph input or "
                                 f"initializer; fix the output's name")


def _check_declared_io(graph: onnx.GraphProto, inits: set[str], path) -> None:
    """Every graph input and output has a type (the IR requires one; onnx's full check refuses a missing one),
    and no graph input declares a zero or negative dimension (a free one is a name, dim_param, or left unset)."""
    for what, infos in (("input", graph.input), ("output", graph.output)):
        for info in infos:
            if not info.HasField("type") or info.type.WhichOneof("value") is None:
                raise ModelLoadError(f"{path}: graph {what} {info.name!r} has no type; ONNX requires a type on "
                                     f"every graph input and output: declare it (e.g. onnx.helper."
                                     f"make_tensor_value_info({info.name!r}, onnx.TensorProto.FLOAT, None))")
    for info in graph.input:
        dims = info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else []
        if info.name not in inits and any(d.HasField("dim_value") and d.dim_value <= 0 for d in dims):
            shown = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
            raise ModelLoadError(f"{path}: graph input {info.name!r} declares shape {shown}: a dimension of "
                                 f"{min(d.dim_value for d in dims if d.HasField('dim_value'))} is an empty (or "
                                 f"invalid) tensor, which npu-sim does not compute; write a free dimension as a "
                                 f"name (dim_param) or give its size")


def _unique(names: list[str], what: str, path) -> set[str]:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ModelLoadError(f"{path}: two {what}s are named {name!r}; ONNX names must be unique (the second "
                                 f"one would silently replace the first): rename or remove one")
        seen.add(name)
    return seen


def _node_label(node, index: int) -> str:
    return f"node {node.name!r} ({node.op_type})" if node.name else f"node #{index} ({node.op_type})"


def check_onnx(model: onnx.ModelProto, path) -> None:
    """onnx's checker (node specs, attribute names and types, opset imports of every domain)."""
    if model.ByteSize() > _TWO_GB:  # protobuf cannot serialize it for the checker; our own checks still ran
        return
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise ModelLoadError(f"{path}: invalid ONNX model: {_clean(str(exc))}") from None


def infer_strict(model: onnx.ModelProto, path) -> onnx.ModelProto:
    """onnx's shape inference in strict mode: the first inconsistency, naming its node, is refused.

    Type constraints are not enforced here (``check_type=False``): ``validate_schema.check_types`` checks them
    after, naming node, input, type and what the schema allows (and reading tf2onnx's TFLite 16x8 dialect, int16
    Q/DQ at opset 15 and int64 biases behind a DequantizeLinear, with a warning)."""
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=True, data_prop=True)
    except Exception as exc:  # onnx raises InferenceError, ValidationError, RuntimeError here
        raise ModelLoadError(f"{path}: invalid model: {_clean(str(exc))}. Fix that node (ONNX shape inference "
                             f"refuses it)") from None


def _clean(text: str) -> str:
    """onnx's error text as one sentence: without its bracketed tags, context lines and trailing blanks."""
    text = re.sub(r"\[[A-Za-z]+Error\] *", "", text)
    text = re.sub(r"Inference error\(s\): *", "", text)
    text = re.sub(r"\(op_type:(\w+), node name: ([^)]*)\): *", r"node '\2' (\1): ", text)
    text = text.replace("==> Context: ", "").replace("Bad node spec for node. ", "")
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return text.rstrip(". ")


def check_tensor_data(tensor: onnx.TensorProto, path) -> None:
    """A stored tensor's data holds exactly its dims' element count (onnx would silently truncate packed int4
    data that is too long, and allocate dims it does not hold)."""
    count = 1
    for d in tensor.dims:
        if d < 0:
            raise ModelLoadError(f"{path}: tensor {tensor.name!r} has a negative dimension in {list(tensor.dims)}")
        count *= d
    if tensor.data_type not in onnx.TensorProto.DataType.values() or tensor.data_type == onnx.TensorProto.UNDEFINED:
        raise ModelLoadError(f"{path}: tensor {tensor.name!r} has data type {tensor.data_type}, not an ONNX "
                             f"type; re-export the model")
    if tensor.data_type == onnx.TensorProto.STRING:  # e.g. class labels no node reads; the op schemas judge the rest
        if len(tensor.string_data) != count and tensor.data_location != onnx.TensorProto.EXTERNAL:
            raise ModelLoadError(f"{path}: string tensor {tensor.name!r} (dims {list(tensor.dims)}) holds "
                                 f"{len(tensor.string_data)} strings, not {count}; re-export the model")
        return
    if tensor.data_location == onnx.TensorProto.EXTERNAL or not tensor.HasField("raw_data"):
        return  # typed fields: onnx refuses a count that does not match its dims
    np_type = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    bits = _PACKED_BITS.get(tensor.data_type)
    want = (count * bits + 7) // 8 if bits else count * np_type.itemsize  # packed types: several per byte
    if len(tensor.raw_data) != want:
        kind = onnx.TensorProto.DataType.Name(tensor.data_type).lower()
        raise ModelLoadError(f"{path}: tensor {tensor.name!r} ({kind}, dims {list(tensor.dims)}) holds "
                             f"{len(tensor.raw_data)} bytes of raw data, but {count} {kind} values take {want}"
                             + (f" ({8 // bits} {bits}-bit values per byte)" if bits else "") + "; re-export the model")
