"""A .tflite as plain, editable Python and back: ``spec_of(bytes) -> dict``, ``write(spec) -> bytes``.

For the hostile-.tflite corpus (tests/hostile_tflite.py): a committed fixture is read with the ``tflite`` package's
accessors into a dict of lists (raw schema values: enum numbers, not names), edited, and written again with the
package's generated builder functions (``tflite.TensorStart``, ``tflite.Conv2DOptionsAddStrideW``, ...). Fields the
reader under test does not look at (signature defs, sparsity, custom options) are not carried over.
"""
from __future__ import annotations

import copy

import flatbuffers
import numpy as np
import tflite

from npu_sim.frontend.tflite.options import accessors


def _np(raw, dtype) -> np.ndarray | None:
    return None if isinstance(raw, int) else np.asarray(raw, dtype=dtype).copy()


def _options(op) -> tuple[str, dict] | None:
    kind = op.BuiltinOptionsType()
    if kind == 0:
        return None
    name = {v: k for k, v in vars(tflite.BuiltinOptions).items() if isinstance(v, int)}[kind]
    cls = getattr(tflite, name)
    obj = cls()
    table = op.BuiltinOptions()
    obj.Init(table.Bytes, table.Pos)
    fields = {}
    for accessor, _key, vector in accessors(cls):
        value = getattr(obj, accessor + "AsNumpy")() if vector else getattr(obj, accessor)()
        if not (vector and isinstance(value, int)):  # an absent vector reads as 0
            fields[accessor] = value.copy() if isinstance(value, np.ndarray) else value
    return name, fields


def _tensor(t) -> dict:
    q = t.Quantization()
    quant = None
    if q is not None and q.ScaleLength():
        quant = {"scale": _np(q.ScaleAsNumpy(), np.float32), "zero_point": _np(q.ZeroPointAsNumpy(), np.int64),
                 "axis": q.QuantizedDimension()}
    return {"shape": _np(t.ShapeAsNumpy(), np.int32), "type": t.Type(), "buffer": t.Buffer(), "name": t.Name(),
            "quant": quant, "signature": None if t.ShapeSignatureIsNone() else _np(t.ShapeSignatureAsNumpy(),
                                                                                    np.int32),
            "variable": t.IsVariable()}


def _subgraph(sg) -> dict:
    ops = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        ops.append({"opcode": op.OpcodeIndex(), "inputs": _np(op.InputsAsNumpy(), np.int32),
                    "outputs": _np(op.OutputsAsNumpy(), np.int32), "options": _options(op)})
    return {"tensors": [_tensor(sg.Tensors(i)) for i in range(sg.TensorsLength())], "operators": ops,
            "inputs": _np(sg.InputsAsNumpy(), np.int32), "outputs": _np(sg.OutputsAsNumpy(), np.int32),
            "name": sg.Name()}


def spec_of(buf: bytes) -> dict:
    m = tflite.Model.GetRootAs(bytearray(buf), 0)
    codes = [m.OperatorCodes(i) for i in range(m.OperatorCodesLength())]
    buffers = []
    for i in range(m.BuffersLength()):
        b = m.Buffers(i)
        data = b.DataAsNumpy()
        buffers.append({"data": None if isinstance(data, int) else data.tobytes(), "offset": b.Offset(),
                        "size": b.Size()})
    return {"version": m.Version(), "description": m.Description(),
            "opcodes": [{"deprecated": c.DeprecatedBuiltinCode(), "builtin": c.BuiltinCode(),
                         "custom": c.CustomCode(), "version": c.Version()} for c in codes],
            "subgraphs": [_subgraph(m.Subgraphs(i)) for i in range(m.SubgraphsLength())],
            "buffers": buffers,
            "metadata": [(m.Metadata(i).Name(), m.Metadata(i).Buffer()) for i in range(m.MetadataLength())]}


def read_spec(path) -> dict:
    with open(path, "rb") as f:
        return spec_of(f.read())


# ---- writing ----------------------------------------------------------------------------------------------------
def _vector(b, start, items) -> int:
    start(b, len(items))
    for item in reversed(items):
        b.PrependUOffsetTRelative(item)
    return b.EndVector()


def _numbers(b, values, dtype) -> int | None:
    return None if values is None else b.CreateNumpyVector(np.asarray(values, dtype=dtype))


def _string(b, value) -> int | None:
    if value is None:
        return None
    return b.CreateString(value.encode() if isinstance(value, str) else bytes(value))


def _write_options(b, name: str, fields: dict) -> int:
    made = {k: (b.CreateNumpyVector(v) if isinstance(v, np.ndarray) else _string(b, v) if isinstance(v, bytes)
                else v) for k, v in fields.items()}
    getattr(tflite, name + "Start")(b)
    for accessor, value in made.items():
        if value is not None:
            getattr(tflite, f"{name}Add{accessor}")(b, value)
    return getattr(tflite, name + "End")(b)


def _write_tensor(b, t: dict) -> int:
    quant = None
    if t["quant"] is not None:
        q = t["quant"]
        scale, zp = _numbers(b, q["scale"], np.float32), _numbers(b, q["zero_point"], np.int64)
        tflite.QuantizationParametersStart(b)
        if scale is not None:
            tflite.QuantizationParametersAddScale(b, scale)
        if zp is not None:
            tflite.QuantizationParametersAddZeroPoint(b, zp)
        tflite.QuantizationParametersAddQuantizedDimension(b, q["axis"])
        quant = tflite.QuantizationParametersEnd(b)
    shape, name = _numbers(b, t["shape"], np.int32), _string(b, t["name"])
    signature = _numbers(b, t["signature"], np.int32)
    tflite.TensorStart(b)
    if shape is not None:
        tflite.TensorAddShape(b, shape)
    tflite.TensorAddType(b, t["type"])
    tflite.TensorAddBuffer(b, t["buffer"])
    if name is not None:
        tflite.TensorAddName(b, name)
    if quant is not None:
        tflite.TensorAddQuantization(b, quant)
    if signature is not None:
        tflite.TensorAddShapeSignature(b, signature)
    if t.get("variable"):
        tflite.TensorAddIsVariable(b, True)
    return tflite.TensorEnd(b)


def _write_operator(b, op: dict) -> int:
    inputs, outputs = _numbers(b, op["inputs"], np.int32), _numbers(b, op["outputs"], np.int32)
    options = None if op["options"] is None or op["options"][1] is None else _write_options(b, *op["options"])
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, op["opcode"])
    if inputs is not None:
        tflite.OperatorAddInputs(b, inputs)
    if outputs is not None:
        tflite.OperatorAddOutputs(b, outputs)
    if op["options"] is not None:  # (name, None): the union's type without its table
        tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, op["options"][0]))
    if options is not None:
        tflite.OperatorAddBuiltinOptions(b, options)
    return tflite.OperatorEnd(b)


def _write_subgraph(b, sg: dict) -> int:
    tensors = _vector(b, tflite.SubGraphStartTensorsVector, [_write_tensor(b, t) for t in sg["tensors"]])
    ops = _vector(b, tflite.SubGraphStartOperatorsVector, [_write_operator(b, op) for op in sg["operators"]])
    inputs, outputs = _numbers(b, sg["inputs"], np.int32), _numbers(b, sg["outputs"], np.int32)
    name = _string(b, sg["name"])
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensors)
    tflite.SubGraphAddOperators(b, ops)
    if inputs is not None:
        tflite.SubGraphAddInputs(b, inputs)
    if outputs is not None:
        tflite.SubGraphAddOutputs(b, outputs)
    if name is not None:
        tflite.SubGraphAddName(b, name)
    return tflite.SubGraphEnd(b)


def _write_buffer(b, buf: dict) -> int:
    data = None if buf["data"] is None else b.CreateNumpyVector(np.frombuffer(buf["data"], np.uint8))
    tflite.BufferStart(b)
    if data is not None:
        tflite.BufferAddData(b, data)
    if buf["offset"]:
        tflite.BufferAddOffset(b, buf["offset"])
        tflite.BufferAddSize(b, buf["size"])
    return tflite.BufferEnd(b)


def _write_opcode(b, code: dict) -> int:
    custom = _string(b, code["custom"])
    tflite.OperatorCodeStart(b)
    tflite.OperatorCodeAddDeprecatedBuiltinCode(b, code["deprecated"])
    if custom is not None:
        tflite.OperatorCodeAddCustomCode(b, custom)
    tflite.OperatorCodeAddVersion(b, code["version"])
    tflite.OperatorCodeAddBuiltinCode(b, code["builtin"])
    return tflite.OperatorCodeEnd(b)


def _write_metadata(b, name, buffer: int) -> int:
    text = _string(b, name)
    tflite.MetadataStart(b)
    if text is not None:
        tflite.MetadataAddName(b, text)
    tflite.MetadataAddBuffer(b, buffer)
    return tflite.MetadataEnd(b)


def write(spec: dict, tail: bytes = b"") -> bytes:
    """The flatbuffer of ``spec`` (``tail`` appended after it: the data of buffers stored outside it)."""
    b = flatbuffers.Builder(1024)
    codes = _vector(b, tflite.ModelStartOperatorCodesVector, [_write_opcode(b, c) for c in spec["opcodes"]])
    subgraphs = _vector(b, tflite.ModelStartSubgraphsVector, [_write_subgraph(b, sg) for sg in spec["subgraphs"]])
    buffers = _vector(b, tflite.ModelStartBuffersVector, [_write_buffer(b, x) for x in spec["buffers"]])
    metadata = _vector(b, tflite.ModelStartMetadataVector, [_write_metadata(b, *m) for m in spec["metadata"]])
    description = _string(b, spec["description"])
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, spec["version"])
    tflite.ModelAddOperatorCodes(b, codes)
    tflite.ModelAddSubgraphs(b, subgraphs)
    if description is not None:
        tflite.ModelAddDescription(b, description)
    tflite.ModelAddBuffers(b, buffers)
    tflite.ModelAddMetadata(b, metadata)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output()) + tail


def edited(spec: dict) -> dict:
    return copy.deepcopy(spec)
