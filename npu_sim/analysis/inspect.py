"""What a QDQ model is, read from the model opened at the front door (``OpenModel``): producer and opset, every
input and output with its shape, a layout guess and the quantization at its edge (the QuantizeLinear that reads
an input, the DequantizeLinear that writes an output), a summary of the quantization (activations, weights, biases,
16-bit tensors, Q/DQ pairs) and an op histogram. Nothing runs and nothing is lowered: it answers for any model
the front door accepts, dynamic dimensions included.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from npu_sim.frontend.reader import OpenModel
from npu_sim.frontend.validate_semantics import QDQ

SIXTEEN = ("int16", "uint16")


@dataclass
class Quant:
    """One QuantizeLinear/DequantizeLinear's parameters: its node and op, integer dtype, scale(s), zero point(s),
    the float range the integer range maps to, and the axis when per-channel."""
    node: str
    op: str
    dtype: str
    scale: list[float]
    zero_point: list[int]
    range: list[float]
    axis: int | None = None


@dataclass
class Tensor:
    name: str
    dtype: str
    shape: list  # ints, dynamic dimensions by their name ("?" when unnamed); None: no shape in the file
    layout: str | None = None  # "NCHW" / "NHWC" where the model or the shape says so
    quant: Quant | None = None


@dataclass
class Inspection:
    path: str
    producer: str
    opset: int
    inputs: list[Tensor]
    outputs: list[Tensor]
    quantization: dict
    ops: dict[str, int]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """``npu-sim inspect --json`` (docs/INSPECT.md)."""
        return {"schema": "npu-sim-inspect", "version": 1, **asdict(self)}


def inspect_model(opened: OpenModel) -> Inspection:
    """The facts about ``opened`` (see the module docstring)."""
    graph = opened.proto.graph
    consts = _constants(opened)
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    writer = {out: node for node in graph.node for out in node.output}
    layout = opened.tflite.layout if opened.tflite is not None else frozenset()
    for out, node in list(writer.items()):  # a .tflite's output is written through a change of layout
        while node.name in layout and node.input and node.input[0] in writer:
            node = writer[node.input[0]]
        writer[out] = node
    inputs = []
    for inp in opened.inputs.values():  # a float input's QuantizeLinear, an integer one's DequantizeLinear
        q = next((n for n in readers.get(inp.name, []) if n.op_type in QDQ), None)
        shape = None if inp.dims is None else [d if d is not None else label for d, label in zip(inp.dims, inp.labels)]
        inputs.append(Tensor(inp.name, inp.dtype, shape, _layout(inp.dims, q, readers),
                             _quant(q, consts) if q is not None else None))
    outputs = []
    for out in graph.output:
        dq = writer.get(out.name)  # a float output's DequantizeLinear, an integer one's QuantizeLinear
        dq = dq if dq is not None and dq.op_type in QDQ else None
        outputs.append(Tensor(out.name, _elem_name(out.type.tensor_type.elem_type), _declared_shape(out), None,
                              _quant(dq, consts) if dq is not None else None))
    producer = " ".join(p for p in (opened.proto.producer_name, opened.proto.producer_version) if p)
    ops = Counter(n.op_type for n in graph.node)
    if opened.tflite is not None:  # the file's own operators, and what wrote it
        producer, ops = opened.tflite.producer, Counter(opened.tflite.operators)
    return Inspection(opened.name, producer or "unknown", opened.opset if opened.tflite is None else 0, inputs, outputs,
                      _summary(graph, consts, readers), dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
                      list(opened.warnings))


def _constants(opened: OpenModel) -> dict[str, np.ndarray]:
    consts = {t.name: numpy_helper.to_array(t) for t in opened.proto.graph.initializer}
    for node in opened.proto.graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                consts[node.output[0]] = numpy_helper.to_array(value)
    return consts


def _elem_name(elem: int) -> str:
    """The element type as numpy names it (as the inputs' ``ModelInput.dtype``), else onnx's name."""
    try:
        return helper.tensor_dtype_to_np_dtype(elem).name
    except Exception:  # noqa: BLE001 - no numpy name (or no type at all)
        return TensorProto.DataType.Name(elem).lower() if elem else "unknown"


def _declared_shape(value_info) -> list | None:
    tt = value_info.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def _qdtype(node, consts) -> str:
    """The integer type of a Q/DQ node: its zero point's (uint8 when it has none, as ONNX defines); a DQ without
    a zero point takes its input's type."""
    if len(node.input) > 2 and node.input[2] in consts:
        return consts[node.input[2]].dtype.name
    if node.op_type == "DequantizeLinear" and node.input[0] in consts:
        return consts[node.input[0]].dtype.name
    return "uint8"


def _quant(node, consts) -> Quant | None:
    scale = consts.get(node.input[1]) if len(node.input) > 1 else None
    if scale is None:
        return None
    dtype = _qdtype(node, consts)
    zp = consts[node.input[2]] if len(node.input) > 2 and node.input[2] in consts else np.zeros(1, np.int64)
    scales = np.asarray(scale, np.float64).ravel()
    zps = np.broadcast_to(np.asarray(zp, np.int64).ravel(), scales.shape) if zp.size == 1 else \
        np.asarray(zp, np.int64).ravel()
    info = np.iinfo(dtype) if dtype.startswith(("int", "uint")) else None
    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 1) if scales.size > 1 else None
    rng = [] if info is None else [float(((info.min - zps) * scales).min()), float(((info.max - zps) * scales).max())]
    return Quant(node.name or node.output[0], node.op_type, dtype, [float(s) for s in scales], [int(z) for z in zps], rng, axis)


def _layout(dims, q, readers) -> str | None:
    """NCHW when the input's (de)quantized value goes straight into a Conv (ONNX's Conv is NCHW), NHWC when it goes
    through a Transpose with perm (0, 3, 1, 2); else a guess from a 4-D shape: a channel count (<= 4) in one place,
    a larger spatial size in the other."""
    if dims is None or len(dims) != 4:
        return None
    nexts = []
    if q is not None and q.op_type == "DequantizeLinear":  # an integer input
        nexts = readers.get(q.output[0], [])
    elif q is not None:
        for dq in (n for n in readers.get(q.output[0], []) if n.op_type == "DequantizeLinear"):
            nexts += readers.get(dq.output[0], [])
    for node in nexts:
        if node.op_type == "Conv":
            return "NCHW"
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        if node.op_type == "Transpose" and perm == [0, 3, 1, 2]:
            return "NHWC"
    d1, d3 = dims[1], dims[3]
    if d1 is not None and d1 <= 4 and (d3 is None or d3 > 4):
        return "NCHW"
    if d3 is not None and d3 <= 4 and (d1 is None or d1 > 4):
        return "NHWC"
    return None


def _symmetric(dtype: str, zps) -> bool:
    mid = 0 if not dtype.startswith("uint") else (np.iinfo(dtype).max + 1) // 2
    return all(int(z) == mid for z in zps)


def _summary(graph, consts, readers) -> dict:
    """Activations: the QuantizeLinear nodes of computed tensors; weights and biases (int32): the constants a
    DequantizeLinear reads (or a QuantizeLinear quantizes: a float weight kept in the file)."""
    acts: dict[str, dict] = {}
    weights: dict[str, dict] = {}
    biases: dict[str, int] = {}
    sixteen, pairs = [], 0
    for node in graph.node:
        if node.op_type not in QDQ or len(node.input) < 2:
            continue
        constant = node.input[0] in consts
        q = _quant(node, consts) if constant or node.op_type == "QuantizeLinear" else None
        if q is None:
            continue
        if node.op_type == "QuantizeLinear":
            pairs += any(n.op_type == "DequantizeLinear" for n in readers.get(node.output[0], []))
        if not constant:
            entry = acts.setdefault(q.dtype, {"tensors": 0, "symmetric": 0, "asymmetric": 0})
            entry["tensors"] += 1
            entry["symmetric" if _symmetric(q.dtype, q.zero_point) else "asymmetric"] += 1
            sixteen += [node.input[0]] if q.dtype in SIXTEEN else []
        elif q.dtype == "int32":
            biases[q.dtype] = biases.get(q.dtype, 0) + 1
        else:
            entry = weights.setdefault(q.dtype, {"tensors": 0, "per_channel": 0, "per_tensor": 0, "symmetric": 0})
            entry["tensors"] += 1
            entry["per_channel" if q.axis is not None else "per_tensor"] += 1
            entry["symmetric"] += _symmetric(q.dtype, q.zero_point)
    return {"activations": acts, "weights": weights, "biases": biases, "sixteen_bit_tensors": sixteen,
            "qdq_pairs": pairs}
