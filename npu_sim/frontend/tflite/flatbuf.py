"""Read a ``.tflite`` flatbuffer into plain Python, validated: ``read_tflite(path) -> TflModel``.

Subgraph 0 is read eagerly and completely (tensors with their constant data and quantization, operators in the
file's order -- TFLite's execution order -- with their builtin options), so nothing lazy fails later. Whatever is
wrong becomes one ``ModelLoadError`` naming the file and the tensor or operator: a damaged flatbuffer (any exception
of the accessors, or a vector longer than the file), out-of-range tensor, buffer or opcode indices, unknown and custom
operators, constant data that does not match its shape, buffers past the end of the file, negative or huge shapes,
bad quantization, and operators that read a tensor nothing computed before them or compute one twice.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npu_sim.errors import ModelLoadError
from npu_sim.frontend.tflite import options as opts

IDENTIFIER = b"TFL3"
MAX_ELEMENTS = 2 ** 31
REEXPORT = "re-export the model with the TFLite converter (or copy the file again if it was cut short)"
_NUMPY = {"float32": "<f4", "float16": "<f2", "float64": "<f8", "int8": "i1", "uint8": "u1", "int16": "<i2",
          "uint16": "<u2", "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8", "bool": "?",
          "complex64": "<c8", "complex128": "<c16"}
_ZP_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535)}


@dataclass(frozen=True)
class TflQuant:
    scale: np.ndarray        # float32, shape (n,)  (n == 1 per tensor)
    zero_point: np.ndarray   # int64, shape (n,)
    axis: int                # quantized_dimension (meaningful when n > 1)


@dataclass(frozen=True)
class TflTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str               # the TensorType name in lower case: "int8", "float32", ...
    data: np.ndarray | None  # constant contents (raw uint8 bytes for types numpy lacks: string, int4, ...)
    quant: TflQuant | None
    shape_signature: tuple[int, ...] | None = None   # -1 = dynamic dim, when the file has one


@dataclass(frozen=True)
class TflOperator:
    index: int
    op: str                  # BuiltinOperator name, e.g. "CONV_2D"
    version: int
    inputs: tuple[int, ...]  # tensor indices; -1 = optional input absent
    outputs: tuple[int, ...]
    options: dict            # builtin options, snake_case -> plain Python (see npu_sim.frontend.tflite.options)


@dataclass(frozen=True)
class TflModel:
    path: Path
    version: int
    description: str
    tensors: tuple[TflTensor, ...]
    operators: tuple[TflOperator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    subgraphs: int

    def label(self, op: TflOperator) -> str:
        """``operator 12 (CONV_2D, output 'model/conv2d/Relu')``, for messages."""
        return _label(self.tensors, op.index, op.op, op.outputs)


def _label(tensors, index: int, op: str, outputs: tuple[int, ...]) -> str:
    if outputs and 0 <= outputs[0] < len(tensors):
        return f"operator {index} ({op}, output {tensors[outputs[0]].name!r})"
    return f"operator {index} ({op})"


def is_tflite(path) -> bool:
    """True when the file's bytes 4..8 are the TFLite identifier (only 8 bytes are read; a FIFO or a device is
    not opened)."""
    try:
        if not Path(path).is_file():
            return False
        with open(path, "rb") as f:
            head = f.read(8)
    except (OSError, ValueError):
        return False
    return len(head) == 8 and head[4:8] == IDENTIFIER


class _Refusal(Exception):
    """A problem found while reading: ``where`` (a tensor or operator label) and what is wrong."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")


def read_tflite(path) -> TflModel:
    """The validated subgraph 0 of the ``.tflite`` at ``path``; any problem raises a ``ModelLoadError``."""
    p = Path(path)
    buf = _file_bytes(p)
    if not opts.available():
        raise ModelLoadError(f"{p}: reading a .tflite needs the tflite package: pip install 'npu-sim[tflite]'")
    reader = _Reader(p, buf)
    try:
        model = reader.read()
    except _Refusal as exc:
        raise ModelLoadError(f"{p}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 -- whatever a damaged flatbuffer makes the accessors raise
        detail = str(exc).splitlines()[0] if str(exc) else ""
        detail = detail if len(detail) <= 100 else detail[:99] + "…"
        kind = "struct.error" if isinstance(exc, struct.error) else type(exc).__name__
        raise ModelLoadError(f"{p}: not a readable .tflite ({kind}: {detail}, at {reader.where}); "
                             f"{REEXPORT}") from None
    try:
        _check_graph(model, reader.variables)
    except _Refusal as exc:
        raise ModelLoadError(f"{p}: {exc}") from None
    return model


def _file_bytes(p: Path) -> bytearray:
    try:
        buf = bytearray(p.read_bytes())
    except FileNotFoundError:
        raise ModelLoadError(f"{p}: no such file") from None
    except OSError as exc:
        raise ModelLoadError(f"{p}: cannot read the file ({exc.strerror or exc})") from None
    if len(buf) < 8 or buf[4:8] != IDENTIFIER:
        what = "empty" if not buf else f"{len(buf)} bytes, without the TFLite identifier 'TFL3' at bytes 4..8"
        raise ModelLoadError(f"{p}: not a .tflite model ({what}); give a model the TFLite converter wrote "
                             f"(an ONNX model belongs in a file named .onnx)")
    return buf


class _Reader:
    """One pass over the flatbuffer's accessors; ``where`` says what it was reading when an accessor failed."""

    def __init__(self, path: Path, buf: bytearray):
        self.path, self.buf, self.where = path, buf, "the model header"
        self.buffers: dict[int, bytes] = {}
        self.variables: set[int] = set()  # stateful tensors (is_variable): known before any operator runs

    def count(self, n: int, what: str) -> int:
        """A vector length, refused when the file is too small to hold that many 4-byte entries."""
        if not 0 <= n <= len(self.buf) // 4:
            raise _Refusal(self.where, f"claims {n} {what}, more than a {len(self.buf)}-byte file can hold; "
                                       f"the file is damaged: {REEXPORT}")
        return n

    def read(self) -> TflModel:
        m = opts.tflite.Model.GetRootAs(self.buf, 0)
        version, description = int(m.Version()), _text(m.Description())
        self.where = "the operator codes"
        codes = [self.opcode(m.OperatorCodes(i)) for i in range(self.count(m.OperatorCodesLength(), "operator codes"))]
        self.where = "the subgraphs"
        subgraphs = self.count(m.SubgraphsLength(), "subgraphs")
        if subgraphs == 0:
            raise _Refusal("the model", f"holds no subgraph (no operators or tensors at all); {REEXPORT}")
        sg, self.where = m.Subgraphs(0), "subgraph 0"
        self.model, self.n_buffers = m, self.count(m.BuffersLength(), "buffers")
        tensors = []
        for i in range(self.count(sg.TensorsLength(), "tensors")):
            self.where = f"tensor {i}"
            tensors.append(self.tensor(i, sg.Tensors(i)))
        self.where = "subgraph 0"
        inputs, outputs = _ints(sg.InputsAsNumpy()), _ints(sg.OutputsAsNumpy())
        operators = []
        for i in range(self.count(sg.OperatorsLength(), "operators")):
            self.where = f"operator {i}"
            operators.append(self.operator(i, sg.Operators(i), codes, tensors))
        return TflModel(self.path, version, description, tuple(tensors), tuple(operators), inputs, outputs,
                        subgraphs)

    @staticmethod
    def opcode(code) -> tuple[str | None, str, int]:
        """(builtin name or None, the problem when it has none, version)."""
        version = int(code.Version())
        try:
            name = opts.operator_name(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        except opts.OptionsError as exc:
            return None, f"{exc}: newer than the TFLite schema npu-sim reads, or a damaged file; {REEXPORT}", version
        if name == "CUSTOM":
            custom = _text(code.CustomCode())
            return None, (f"custom operator {custom!r}: npu-sim computes builtin operators only (convert without "
                          f"it, or run that part outside the simulated model)"), version
        return name, "", version

    def operator(self, i: int, op, codes, tensors) -> TflOperator:
        index = int(op.OpcodeIndex())
        if not 0 <= index < len(codes):
            raise _Refusal(f"operator {i}", f"its opcode index {index} is out of range (the file has "
                                            f"{len(codes)} operator codes); {REEXPORT}")
        name, problem, version = codes[index]
        inputs, outputs = _ints(op.InputsAsNumpy()), _ints(op.OutputsAsNumpy())
        if name is None:
            raise _Refusal(f"operator {i}", problem)
        if not outputs:
            raise _Refusal(f"operator {i} ({name})", f"has no outputs (every builtin operator writes one); {REEXPORT}")
        label = _label(tensors, i, name, outputs)
        try:
            options = opts.decode_options(name, op)
        except opts.OptionsError as exc:
            raise _Refusal(label, f"{exc}; {REEXPORT}") from None
        return TflOperator(i, name, version, inputs, outputs, options)

    def tensor(self, i: int, t) -> TflTensor:
        name = _text(t.Name())
        label = f"tensor {i} {name!r}"
        try:
            dtype = opts.tensor_type_name(t.Type())
        except opts.OptionsError as exc:
            raise _Refusal(label, f"{exc}; {REEXPORT}") from None
        shape = _ints(t.ShapeAsNumpy())
        signature = None if t.ShapeSignatureIsNone() else _ints(t.ShapeSignatureAsNumpy())
        _check_shape(label, shape, signature)
        if t.Sparsity() is not None:
            raise _Refusal(label, "is a sparse tensor, which npu-sim does not read; convert the model without "
                                  "sparsity (the TFLite converter's default)")
        data = self.data(label, int(t.Buffer()), shape, dtype)
        if t.IsVariable():
            self.variables.add(i)
        quant = _quant(label, t.Quantization(), shape, dtype)
        return TflTensor(i, name, shape, dtype, data, quant, signature)

    def raw_buffer(self, label: str, index: int) -> bytes:
        if not 0 <= index < self.n_buffers:
            raise _Refusal(label, f"its buffer index {index} is out of range (the file has {self.n_buffers} "
                                  f"buffers); {REEXPORT}")
        if index not in self.buffers:
            b = self.model.Buffers(index)
            raw = b.DataAsNumpy()
            if not isinstance(raw, int) and raw.size:
                self.buffers[index] = raw.tobytes()
            else:
                self.buffers[index] = self.external(label, index, int(b.Offset()), int(b.Size()))
        return self.buffers[index]

    def external(self, label: str, index: int, offset: int, size: int) -> bytes:
        """The bytes a buffer stores after the flatbuffer (large models: ``offset`` from the file's start)."""
        if offset <= 1:
            return b""
        if offset + size > len(self.buf):
            raise _Refusal(label, f"its buffer {index} lies at bytes {offset}..{offset + size}, past the end of "
                                  f"the {len(self.buf)}-byte file; the file is truncated: copy it again or "
                                  f"re-export the model")
        return bytes(self.buf[offset:offset + size])

    def data(self, label: str, index: int, shape: tuple[int, ...], dtype: str) -> np.ndarray | None:
        raw = self.raw_buffer(label, index)
        if not raw:
            return None
        if dtype not in _NUMPY:
            return np.frombuffer(raw, dtype=np.uint8).copy()
        item = np.dtype(_NUMPY[dtype]).itemsize
        want = math.prod(shape) * item
        if len(raw) != want:
            raise _Refusal(label, f"holds {len(raw)} bytes of constant data, but its shape {shape} of {dtype} "
                                  f"needs {want}; {REEXPORT}")
        return np.frombuffer(raw, dtype=_NUMPY[dtype]).astype(_NUMPY[dtype].lstrip("<")).reshape(shape)


def _text(raw) -> str:
    return "" if raw is None else bytes(raw).decode("utf-8", errors="replace")


def _ints(raw) -> tuple[int, ...]:
    """A flatbuffer int vector (the accessors give 0 when it is absent) as a tuple."""
    return () if isinstance(raw, int) else tuple(int(v) for v in raw)


def _check_shape(label: str, shape: tuple[int, ...], signature: tuple[int, ...] | None) -> None:
    if any(d < 0 for d in shape):
        raise _Refusal(label, f"has shape {shape}, with a negative dimension (a dynamic one belongs in "
                              f"shape_signature, with a fixed size in shape); {REEXPORT}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise _Refusal(label, f"has shape {shape}: {math.prod(shape)} elements, more than the 2**31 a TFLite "
                              f"tensor can hold; the file is damaged: {REEXPORT}")
    if signature is not None and (len(signature) != len(shape)
                                  or any(s != d and s != -1 for s, d in zip(signature, shape))):
        raise _Refusal(label, f"has shape_signature {signature}, which does not match its shape {shape} (only -1, "
                              f"a dynamic dimension, may differ); {REEXPORT}")


def _quant(label: str, q, shape: tuple[int, ...], dtype: str) -> TflQuant | None:
    if q is None or q.ScaleLength() == 0:
        return None
    scale = np.asarray(q.ScaleAsNumpy(), dtype=np.float32).copy()
    zp_raw = q.ZeroPointAsNumpy()
    zero_point = np.zeros(0, np.int64) if isinstance(zp_raw, int) else zp_raw.astype(np.int64)
    axis, n = int(q.QuantizedDimension()), scale.size
    if zero_point.size != n:
        raise _Refusal(label, f"has {n} quantization scales but {zero_point.size} zero points; {REEXPORT}")
    if n > 1 and not 0 <= axis < len(shape):
        raise _Refusal(label, f"is quantized per channel along axis {axis}, out of range for its shape {shape}; "
                              f"{REEXPORT}")
    if n > 1 and shape[axis] != n:
        raise _Refusal(label, f"has {n} quantization scales, neither 1 nor the {shape[axis]} of its axis {axis}; "
                              f"{REEXPORT}")
    bad = ~np.isfinite(scale) | (scale <= 0)
    if bad.any():
        raise _Refusal(label, f"has quantization scale {float(scale[bad][0])!r}: a scale must be finite and above 0; "
                              f"{REEXPORT}")
    low, high = _ZP_RANGE.get(dtype, (-2 ** 63, 2 ** 63 - 1))
    if ((zero_point < low) | (zero_point > high)).any():
        raise _Refusal(label, f"has a zero point outside the {dtype} range {low}..{high}; {REEXPORT}")
    return TflQuant(scale, zero_point, axis)


def _check_graph(model: TflModel, variables: set[int]) -> None:
    """Indices in range, and every operator reads only what is known by then (TFLite runs them in file order)."""
    n = len(model.tensors)

    def tensor(where: str, what: str, index: int) -> TflTensor:
        if not 0 <= index < n:
            raise _Refusal(where, f"its {what} is tensor {index}, out of range (the subgraph has {n} tensors); "
                                  f"{REEXPORT}")
        return model.tensors[index]

    for k, i in enumerate(model.inputs):
        tensor("the model", f"input {k}", i)
    for k, i in enumerate(model.outputs):
        tensor("the model", f"output {k}", i)
    known = {i: "a model input" for i in model.inputs}
    known.update({t.index: "a constant" for t in model.tensors if t.data is not None})
    known.update({i: "a variable" for i in variables})
    for op in model.operators:
        label = model.label(op)
        for k, i in enumerate(op.inputs):
            if i == -1:
                continue
            t = tensor(label, f"input {k}", i)
            if i not in known:
                raise _Refusal(label, f"reads tensor {i} {t.name!r}, which no earlier operator computes and which "
                                      f"is neither a model input nor a constant (the operators must be in "
                                      f"execution order); {REEXPORT}")
        for k, i in enumerate(op.outputs):
            t = tensor(label, f"output {k}", i)
            if i in known:
                raise _Refusal(label, f"computes tensor {i} {t.name!r}, which is already {known[i]}; {REEXPORT}")
            known[i] = f"the output of operator {op.index}"
    for i in model.outputs:
        if i not in known:
            raise _Refusal("the model", f"its output tensor {i} {model.tensors[i].name!r} is never computed "
                                        f"(no operator writes it and it is no input or constant); {REEXPORT}")
