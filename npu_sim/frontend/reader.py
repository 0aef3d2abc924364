"""Read an ONNX file safely and infer static shapes.

Turns protobuf into plain Python: a list of nodes, constants as numpy arrays (initializers and Constant nodes),
and a static shape for every tensor. All problems become ``NpuSimError``s that name what is wrong.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from npu_sim.errors import InputError, ModelLoadError
from npu_sim.frontend import validate, validate_semantics
from npu_sim.frontend.paths import model_file


@dataclass
class Graph:
    path: str
    model: onnx.ModelProto
    nodes: list                      # onnx.NodeProto in topological order
    consts: dict[str, np.ndarray]    # initializers and Constant-node outputs
    shapes: dict[str, tuple[int, ...]]
    elem_types: dict[str, int]       # onnx TensorProto element type per tensor
    inputs: list[str]                # graph inputs that are not initializers
    outputs: list[str]
    opset: int


def read_model(path, input_shapes: dict[str, tuple[int, ...]] | None = None,
               feed_shapes: dict[str, tuple[int, ...]] | None = None, batch: int | None = None) -> Graph:
    """``input_shapes`` fix input shapes (must agree with fixed dims); ``feed_shapes`` (the shapes of the feeds
    that will be given) only resolve dynamic dims, and are ignored where the model's shape is fixed.

    ``batch`` reads the model for a leading batch of that many samples: every input's first dimension, fixed at 1
    or free in the file, becomes ``batch`` (the rest of its shape from ``input_shapes``, ``feed_shapes`` or the
    file). Only ``Simulator`` asks for it, to run N samples at once; ``--input-shape`` never overrides a fixed
    dimension. An in-memory model is copied first (the file's own shapes are rewritten while reading)."""
    if batch is not None and isinstance(path, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(path)
        path = copy
    model, path = _load(path)
    # the front door (npu_sim.frontend.validate): every command reads its model here, so all refuse alike
    opset = validate.check_versions(model, path)
    validate.check_structure(model.graph, path)
    for tensor in _all_tensors(model):
        validate.check_tensor_data(tensor, path)
    _densify_sparse_initializers(model, path)
    validate_semantics.check_qdq_types(model, path)
    graph = model.graph
    init_names = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init_names]
    input_shapes = dict(input_shapes or {})
    unknown = set(input_shapes) - {i.name for i in inputs}
    if unknown:
        raise InputError(f"--input-shape names {sorted(unknown)}, but the model's inputs are "
                         f"{[i.name for i in inputs]}")
    for inp in inputs:
        override = input_shapes.get(inp.name)
        if override is None and feed_shapes and inp.name in feed_shapes and _is_dynamic(inp):
            override = tuple(feed_shapes[inp.name])
        if batch is not None:
            override = _batched(inp, override, int(batch), path)
        _fix_input_shape(inp, override, path, free_batch=batch is not None)
    if batch is not None:
        _batch_shapes(graph, int(batch), path)
    # Stale intermediate shapes (often with symbolic dims) would survive inference: drop them and re-infer.
    del graph.value_info[:]
    for out in graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    _standardize_qdq_domain(model)
    try:
        inferred = validate.infer_strict(model, path)
    except ModelLoadError as strict:
        # name the culprit where onnx names only a consequence (a wrong kernel_shape shows as a later Add's
        # "Incompatible dimensions"): the range checks on what tolerant inference could infer, then onnx's error
        try:
            loose = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001 - onnx raises several types; its strict error is the answer then
            raise strict from None
        validate_semantics.check_graph(_graph_of(loose, path, inputs, opset), sizes=False)
        raise
    validate.check_onnx(inferred, path)  # after inference: the checker wants every output's shape
    read = _graph_of(inferred, path, inputs, opset)
    validate_semantics.check_graph(read)
    return read


def _graph_of(inferred: onnx.ModelProto, path, inputs, opset: int) -> Graph:
    consts: dict[str, np.ndarray] = {}
    const_types: dict[str, int] = {}
    for init in inferred.graph.initializer:
        consts[init.name] = _to_array(init, path)
        const_types[init.name] = init.data_type
    nodes = list(inferred.graph.node)
    for node in nodes:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            consts[node.output[0]] = _constant_value(node, path)
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                const_types[node.output[0]] = value.data_type

    shapes: dict[str, tuple[int, ...]] = {}
    elem_types: dict[str, int] = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        elem_types[vi.name] = tt.elem_type
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if all(d is not None for d in dims):
                shapes[vi.name] = tuple(int(d) for d in dims)
    for name, value in consts.items():
        shapes[name] = tuple(value.shape)
    elem_types.update(const_types)
    return Graph(path=str(path), model=inferred, nodes=nodes, consts=consts, shapes=shapes, elem_types=elem_types,
                 inputs=[i.name for i in inputs], outputs=[o.name for o in inferred.graph.output], opset=opset)


def _densify_sparse_initializers(model: onnx.ModelProto, path) -> None:
    """Sparse initializers (valid ONNX) become ordinary ones, so every later step sees one kind of constant."""
    for sparse in list(model.graph.sparse_initializer):
        name = sparse.values.name
        try:
            dense = numpy_helper.to_array(sparse.values).reshape(-1)
            indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
            shape = tuple(int(d) for d in sparse.dims)
            out = np.zeros(int(np.prod(shape)), dense.dtype)
            flat = (np.ravel_multi_index(tuple(indices.T), shape) if indices.ndim == 2 else indices)
            out[flat] = dense
        except Exception as exc:  # noqa: BLE001 - onnx/numpy raise several types on malformed sparse data
            raise ModelLoadError(f"{path}: cannot read sparse initializer {name!r}: {exc}") from None
        model.graph.initializer.append(numpy_helper.from_array(out.reshape(shape), name))
    del model.graph.sparse_initializer[:]


def _standardize_qdq_domain(model: onnx.ModelProto) -> None:
    """onnxruntime 1.18 wrote 16-bit QuantizeLinear/DequantizeLinear in the com.microsoft domain (opset < 21).

    They mean the same as the default-domain ops of opset 21, which ONNX shape inference understands; rewrite
    them so that every tensor gets a shape (the integer semantics are identical)."""
    contrib = [n for n in model.graph.node
               if n.domain == "com.microsoft" and n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    if not contrib:
        return
    for n in contrib:
        n.domain = ""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version < 21:
            imp.version = 21
    if model.ir_version < 10:
        model.ir_version = 10


def _load(path) -> tuple[onnx.ModelProto, Path]:
    if isinstance(path, onnx.ModelProto):
        return path, Path("<in-memory model>")
    p = model_file(path)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:
        raise ModelLoadError(f"{p}: not an ONNX model ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not model.graph.node and not model.graph.input:
        raise ModelLoadError(f"{p}: not an ONNX model (no graph found in the file)")
    _load_external_data(model, p)
    return model, p


def _load_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Load external tensor data, refusing any location that escapes the model's folder."""
    base = path.parent.resolve()
    tensors = [t for t in _all_tensors(model) if t.data_location == onnx.TensorProto.EXTERNAL]
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if "\x00" in loc:
            raise ModelLoadError(f"{path}: tensor {t.name!r} points its external data at {loc!r}, a name with a NUL "
                                 f"byte; refusing to read it (fix the location)")
        target = (base / loc).resolve()
        if not loc or os.path.isabs(loc) or ".." in Path(loc).parts or not target.is_relative_to(base):
            raise ModelLoadError(f"{path}: tensor {t.name!r} points its external data at {loc!r}, outside the "
                                 f"model's folder; refusing to read it (move the data file beside the model)")
        if not target.is_file():
            raise ModelLoadError(f"{path}: tensor {t.name!r} needs external data file {loc!r}, which is missing "
                                 f"from {base}")
    if tensors:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(base))
        except Exception as exc:
            raise ModelLoadError(f"{path}: cannot read external data ({exc})") from None


def _all_tensors(model):
    """Every stored tensor: initializers, sparse ones, Constant values, in the graph and in its sub-graphs."""
    yield from _graph_tensors(model.graph)


def _graph_tensors(graph):
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values
                yield attr.sparse_tensor.indices
            yield from attr.tensors
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graph_tensors(sub)


def _batched(inp, override, batch: int, path) -> tuple[int, ...]:
    """The input's shape for a batch of ``batch`` samples: its first dimension (1 or free) replaced."""
    tt = inp.type.tensor_type
    dims = list(tt.shape.dim) if tt.HasField("shape") else None
    if override is None and (dims is None or _is_dynamic(inp)):
        shown = _dims_str(dims) if dims is not None else "unknown"
        raise InputError(f"{path}: input {inp.name!r} has a dynamic shape {shown}; give its other dimensions to "
                         f"read it for a batch")
    shape = tuple(override) if override is not None else tuple(int(d.dim_value) for d in dims)
    first = dims[0] if dims else None
    if not shape or (first is not None and first.HasField("dim_value") and first.dim_value not in (0, 1)):
        raise InputError(f"{path}: input {inp.name!r} has no batch dimension of 1 or free "
                         f"({_dims_str(dims) if dims is not None else 'unknown'}); it cannot be read for a batch")
    return (batch,) + shape[1:]


_BATCH_SHAPE_INPUT = {"Reshape": 1, "Resize": 3}  # op -> its input holding an output shape (Resize: sizes)


def _batch_shapes(graph, batch: int, path) -> None:
    """For a batch read: a Reshape of an activation to a constant shape whose first entry is 1 (PP-OCR's classifier
    reshapes to [1, 200]), or a Resize to constant sizes starting with 1, gets a copy of that constant with
    ``batch`` first. Exact when the node maps one sample (1, ...) to (1, ...): each sample keeps its own contiguous
    block (Reshape) or is resized alone (Resize). ``Simulator`` checks that every activation of the batch program
    is the one-sample program's with ``batch`` first, and runs the samples one by one otherwise."""
    consts = {t.name: t for t in graph.initializer}
    values = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx")}
    taken = set(consts) | {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    for node in graph.node:
        index = _BATCH_SHAPE_INPUT.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if (index is None or len(node.input) <= index or node.input[0] in consts or node.input[0] in values
                or any(a.name == "axes" for a in node.attribute)):
            continue
        name = node.input[index]
        if name in consts:
            shape = _to_array(consts[name], path)
        elif name in values:
            shape = _constant_value(values[name], path)
        else:
            continue
        if shape.ndim != 1 or shape.size < 1 or int(shape[0]) != 1:
            continue
        new = f"{name}__batch{batch}"
        while new in taken:
            new += "_"
        taken.add(new)
        graph.initializer.append(numpy_helper.from_array(np.concatenate([[batch], shape[1:]]).astype(shape.dtype),
                                                         new))
        node.input[index] = new


def _fix_input_shape(inp, override, path, free_batch: bool = False) -> None:
    """``free_batch``: the first dimension may differ from a 1 fixed in the file (``read_model``'s ``batch``)."""
    tt = inp.type.tensor_type
    dims = list(tt.shape.dim) if tt.HasField("shape") else None
    if override is not None:
        given = f"input {inp.name!r}: shape {'x'.join(map(str, override))} (from --input-shape or the input file)"
        if any(int(v) < 1 for v in override):
            raise InputError(f"{given}: every dimension must be at least 1")
        if dims is not None and len(dims) != len(override):
            raise InputError(f"{given}: the model input has rank {len(dims)} {_dims_str(dims)}")
        for i, (d, want) in enumerate(zip(dims or [], override)):
            if free_batch and i == 0 and d.HasField("dim_value") and d.dim_value == 1:
                continue
            if d.HasField("dim_value") and d.dim_value not in (0, want):
                raise InputError(f"{given} conflicts with the model's fixed shape {_dims_str(dims)}")
        tt.ClearField("shape")
        for want in override:
            tt.shape.dim.add().dim_value = int(want)
        return
    if dims is None or any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
        shown = _dims_str(dims) if dims is not None else "unknown"
        # the example keeps the model's fixed dimensions and puts 1 for the batch and other free ones
        example = ("x".join(str(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else "1" for d in dims)
                   if dims else "1x3x224x224")
        raise InputError(f"{path}: input {inp.name!r} has a dynamic shape {shown}; give a fixed one with "
                         f"--input-shape {inp.name}={example} (or feed an input file, whose shape is used)")


def _is_dynamic(inp) -> bool:
    tt = inp.type.tensor_type
    return not tt.HasField("shape") or any(not d.HasField("dim_value") or d.dim_value <= 0 for d in tt.shape.dim)


def _dims_str(dims) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"


def _to_array(tensor, path) -> np.ndarray:
    try:
        return numpy_helper.to_array(tensor)
    except Exception as exc:
        raise ModelLoadError(f"{path}: cannot read tensor {tensor.name!r}: {exc}") from None


def _constant_value(node, path) -> np.ndarray:
    for attr in node.attribute:
        if attr.name == "value":
            return _to_array(attr.t, path)
        if attr.name in ("value_float", "value_int"):
            return np.array(onnx.helper.get_attribute_value(attr),
                            dtype=np.float32 if attr.name == "value_float" else np.int64)
        if attr.name in ("value_floats", "value_ints"):
            return np.array(onnx.helper.get_attribute_value(attr),
                            dtype=np.float32 if attr.name == "value_floats" else np.int64)
    raise ModelLoadError(f"{path}: Constant node {node.name!r} has no supported value attribute")


def attrs(node) -> dict:
    """An ONNX node's attributes as plain Python values, by name."""
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
