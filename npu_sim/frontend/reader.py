"""The front door: ``open_model`` reads an ONNX model once, safely, and validates it; its ``graph`` is the model at
fixed input shapes, every tensor's static shape inferred.

``open_model(path)`` (or an in-memory ``ModelProto``, copied) gives an :class:`OpenModel`: the validated
``ModelProto`` (external data from the model's folder only, sparse initializers dense), its inputs with their
dynamic dimensions (``npu_sim.frontend.shapes.ModelInput``), outputs and QuantizeLinear names, and the float model
beside it (``float_model``). Every command, the API and the analyses take a model through it; ``graph`` turns it
into plain Python -- a list of nodes, constants as numpy arrays (initializers and Constant nodes), a static shape
for every tensor -- at the shapes ``npu_sim.frontend.shapes.resolve_shapes`` fixes. All problems become
``NpuSimError``s that name what is wrong.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from npu_sim.errors import FloatReferenceError, InputError, ModelLoadError
from npu_sim.frontend import validate, validate_schema, validate_semantics
from npu_sim.frontend.loading import all_tensors, densify_sparse_initializers, load_file
from npu_sim.frontend.paths import model_file
from npu_sim.frontend.shapes import ModelInput, resolve_shapes
from npu_sim.frontend.tflite.flatbuf import is_tflite, read_tflite
from npu_sim.frontend.tflite.translate import Translation, translate

LOG = logging.getLogger("npu_sim.frontend")


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
    warnings: list[str] = field(default_factory=list)  # what the validator found odd but allowed
    layout: frozenset[str] = frozenset()  # Transpose nodes that only change layout (a .tflite's NHWC <-> NCHW)
    own_names: frozenset[str] = frozenset()  # tensors named by the model file itself (a .tflite's, NHWC)


class OpenModel:
    """A QDQ model read and validated once (see the module docstring). ``proto`` must not be changed: ``graph``
    reads a copy of it each time."""

    def __init__(self, proto: onnx.ModelProto, path: Path, opset: int, file: str | None, warnings=(),
                 tflite: Translation | None = None):
        self.proto, self.path, self.opset = proto, path, opset
        self.file = file  # the model file as given, None for an in-memory model
        #: the .tflite this model was translated from (``npu_sim.frontend.tflite``), None for an ONNX model
        self.tflite = tflite
        #: what the front door accepted but found odd (docs/TESTING.md), each said once on stderr as well
        self.warnings: list[str] = []
        self.warn(warnings)
        inits = {t.name for t in proto.graph.initializer}
        self.inputs: dict[str, ModelInput] = {i.name: _model_input(i) for i in proto.graph.input
                                              if i.name not in inits}
        self.outputs = [o.name for o in proto.graph.output]
        #: QuantizeLinear output -> its input, for every QuantizeLinear of the graph
        self.quantized = {n.output[0]: n.input[0] for n in proto.graph.node
                          if n.op_type == "QuantizeLinear" and n.output and n.input}
        self.floats: dict[Path, onnx.ModelProto] = {}  # the float models read beside it (``float_model``)
        self._first: Graph | None = None  # the graph ``open_model`` validated, handed to ``graph``'s first caller

    def __repr__(self) -> str:
        return f"open_model({str(self.path)!r})"

    def warn(self, warnings) -> None:
        """Keep and log (once each) what the validator found odd but allowed."""
        for text in warnings:
            if text not in self.warnings:
                self.warnings.append(text)
                LOG.warning("npu-sim: warning: %s", text)

    @property
    def default_board(self) -> str:
        """The board it is simulated on when none is named: ``default``; ``ethos-u55-128`` for a .tflite, whose
        integers are TFLite's."""
        return "default" if self.tflite is None else "ethos-u55-128"

    @property
    def static(self) -> bool:
        """Every input's shape fixed in the file."""
        return not any(i.dynamic for i in self.inputs.values())

    @property
    def name(self) -> str:
        """The model as messages name it: its path, or ``<in-memory model>``."""
        return str(self.path)

    def shapes(self, given: dict | None = None, fed: dict | None = None, free_batch: int | None = None,
               samples: bool = False) -> dict[str, tuple[int, ...]]:
        """Every input's fixed shape (``npu_sim.frontend.shapes.resolve_shapes``)."""
        return resolve_shapes(self.inputs, given, fed, free_batch, samples, self.name)

    def graph(self, input_shapes: dict | None = None, feed_shapes: dict | None = None, batch: int | None = None
              ) -> Graph:
        """The model at fixed input shapes, validated to the end (shape inference, onnx's checker, the semantic
        checks). ``input_shapes`` fix input shapes (must agree with fixed dims); ``feed_shapes`` (the shapes of the
        feeds that will be given) only resolve dynamic dims. ``batch`` reads it for a leading batch of that many
        samples: every input's first dimension, fixed at 1 or free in the file, becomes ``batch`` (``Simulator``
        asks for it to run N samples at once; ``--input-shape`` never overrides a fixed dimension)."""
        shapes = self.shapes(input_shapes, feed_shapes)
        if batch is None and self._first is not None:  # fixed shapes: any shapes given were checked to be these
            read, self._first = self._first, None  # once: its reader may rewrite it in place (the lowering does)
            return read
        model = onnx.ModelProto()
        model.CopyFrom(self.proto)
        graph = model.graph
        defaults = {t.name: t for t in graph.initializer}
        for inp in graph.input:
            if inp.name in defaults:  # an input with a default value: npu-sim always reads the initializer
                if inp.type.tensor_type.HasField("shape"):  # (without one, onnx's checker refuses it below)
                    _set_shape(inp, tuple(defaults[inp.name].dims))
            elif inp.name in shapes:
                shape = shapes[inp.name] if batch is None else _batched(self.inputs[inp.name], shapes[inp.name],
                                                                        int(batch), self.path)
                _set_shape(inp, shape)
        if batch is not None:
            _batch_shapes(graph, int(batch), self.path)
        read = _inferred(model, self.path, self.opset, declared=batch is None, static=self.static)
        if self.tflite is not None:
            read.layout, read.own_names = self.tflite.layout, frozenset(self.tflite.tensors)
        self.warn(read.warnings)
        return read

    def float_model(self, path) -> onnx.ModelProto:
        """The float model beside this one (``--float``: the one quantize_static started from), read through
        the same door and checked: readable, without QDQ nodes, with this model's inputs. Read once: every float
        reference built on this model shares it (none changes it)."""
        p = Path(path)
        if not p.is_file():
            raise FloatReferenceError(f"--float {str(p)!r}: file not found")
        if p.resolve() not in self.floats:
            self.floats[p.resolve()] = self._read_float(p)
        return self.floats[p.resolve()]

    def _read_float(self, p: Path) -> onnx.ModelProto:
        if is_tflite(p):
            raise FloatReferenceError(f"--float {str(p)!r} is a .tflite: npu-sim reads a float reference as ONNX "
                                      f"(python -m tf2onnx.convert --tflite {p.name} --output float.onnx); "
                                      f"without --float the report uses the quantized model's own float semantics")
        try:
            model, _ = load_file(p)
        except ModelLoadError as exc:
            raise FloatReferenceError(f"--float {str(p)!r}: cannot read it as an ONNX model ({exc})") from None
        qops = [n.name or n.op_type for n in model.graph.node if n.op_type in validate_semantics.QDQ]
        if qops:
            raise FloatReferenceError(f"--float {str(p)!r} contains QuantizeLinear/DequantizeLinear nodes "
                                      f"({qops[0]!r}, ...); give the float model quantize_static started from")
        finputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
        missing = [n for n in self.inputs if n not in finputs]
        if missing:
            raise FloatReferenceError(f"--float {str(p)!r} has no input(s) {missing} (its inputs: "
                                      f"{sorted(finputs)}); give the float model this QDQ model was quantized "
                                      f"from")
        return model


def open_model(source) -> OpenModel:
    """``source`` (a path, an in-memory ``onnx.ModelProto``, or an ``OpenModel``, returned as is) read and
    validated: the front door (``npu_sim.frontend.validate``), so every command refuses alike; a model whose
    input shapes are all fixed is validated to the end here (that graph is the first ``graph()`` at them)."""
    if isinstance(source, OpenModel):
        return source
    tflite = None
    if isinstance(source, onnx.ModelProto):
        model, path, file = onnx.ModelProto(), Path("<in-memory model>"), None
        model.CopyFrom(source)
    elif is_tflite(model_file(source)) or Path(source).suffix.lower() == ".tflite":
        path, file = Path(source), str(source)
        tflite = translate(read_tflite(path))
        model = tflite.model
    else:
        model, path = load_file(source)
        file = str(source)
    opset = validate.check_versions(model, path)
    validate.check_structure(model.graph, path)
    for tensor in all_tensors(model):
        validate.check_tensor_data(tensor, path)
    densify_sparse_initializers(model, path)
    validate_semantics.check_qdq_types(model, path)
    warnings = validate_schema.check_attributes(model, path, opset)
    opened = OpenModel(model, path, opset, file, warnings, tflite)
    if opened.static:  # validated to the end now, so that every command meets the same first refusal
        opened._first = opened.graph()
    return opened


def read_model(source, input_shapes: dict[str, tuple[int, ...]] | None = None,
               feed_shapes: dict[str, tuple[int, ...]] | None = None, batch: int | None = None) -> Graph:
    """``open_model(source).graph(input_shapes, feed_shapes, batch)``: a model read for one use."""
    return open_model(source).graph(input_shapes, feed_shapes, batch)


def _model_input(inp) -> ModelInput:
    tt = inp.type.tensor_type
    if not tt.HasField("shape"):
        dims, labels = None, ()
    else:
        dims = tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim)
        labels = tuple(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "float32"
    except Exception:  # noqa: BLE001 - a type numpy has no name for: the front door's checks name it
        dtype = onnx.TensorProto.DataType.Name(tt.elem_type).lower()
    return ModelInput(inp.name, dims, labels, dtype)


def _default_opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _declared(graph, static: bool) -> dict:
    """Each value_info and graph output as declared: name -> (element type, dims or None); a dim None where
    symbolic; dims None where not declared, or where an input is dynamic (``static`` False: the declared fixed
    sizes were for the shape the model was exported at)."""
    out = {}
    for vi in list(graph.value_info) + list(graph.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = ([d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
                if tt.HasField("shape") else None)
        out[vi.name] = (tt.elem_type, dims if static else None)
    return out


def _inferred(model: onnx.ModelProto, path, opset: int, declared: bool = True, static: bool = True) -> Graph:
    """``model`` (its inputs' shapes fixed) with every shape inferred, validated to the end; ``declared``: its
    value_info and outputs checked against what it computes (``static``: their fixed sizes too)."""
    graph = model.graph
    init_names = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init_names]
    claims = _declared(graph, static) if declared else {}
    # Stale intermediate shapes (often with symbolic dims) would survive inference: drop them and re-infer (the
    # declarations are compared with the result below). An output that is a graph input keeps its shape.
    del graph.value_info[:]
    given = {i.name: i for i in graph.input}
    for out in graph.output:
        if out.name in given:  # a graph input also an output: the input's type, its shape as fixed here (a
            out.type.CopyFrom(given[out.name].type)  # free batch left in the output's copy hid every shape)
        elif out.type.HasField("tensor_type") and out.name not in init_names:
            out.type.tensor_type.ClearField("shape")
            out.type.tensor_type.elem_type = 0
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
    read.warnings = validate_schema.check_types(read, _default_opset(inferred), model.producer_name)
    validate_semantics.check_graph(read)
    validate_schema.check_declared(claims, read)  # after the checks that name a culprit, not a consequence
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


def _batched(inp: ModelInput, shape: tuple[int, ...], batch: int, path) -> tuple[int, ...]:
    """The input's shape for a batch of ``batch`` samples: its first dimension (1 or free) replaced."""
    first = inp.dims[0] if inp.dims else None
    if not shape or first not in (None, 1):
        raise InputError(f"{path}: input {inp.name!r} has no batch dimension of 1 or free ({inp.shown}); it "
                         f"cannot be read for a batch")
    return (batch,) + tuple(shape[1:])


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


def _set_shape(inp, shape: tuple[int, ...]) -> None:
    tt = inp.type.tensor_type
    tt.ClearField("shape")
    tt.shape.SetInParent()  # a scalar too has a (dimensionless) shape
    for d in shape:
        tt.shape.dim.add().dim_value = int(d)


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
