"""Builtin operator names and builtin options of a TFLite flatbuffer, as plain Python.

Options are decoded generically from the ``tflite`` package's generated classes: the ``BuiltinOptions`` union type
names the options class (``tflite.Conv2DOptions``, ...), each of its accessors becomes a snake_case key
(``StrideW`` -> ``stride_w``), enum fields become their schema names (``padding`` -> ``"SAME"``,
``fused_activation_function`` -> ``"RELU6"``), vectors become tuples of ints (``()`` when absent) and strings are
decoded. An op whose options the file leaves out gets its class's defaults (TFLite's own behaviour); an op that
carries another op's options class is refused. Every problem raises ``OptionsError`` with the message to show.
"""
from __future__ import annotations

import functools
import inspect
import math
import re

import numpy as np

try:
    import flatbuffers
    import tflite
except ImportError:  # the optional extra npu-sim[tflite]; ``read_tflite`` says how to install it
    flatbuffers = tflite = None

# The options class of an op where it is not the op's name in CamelCase + "Options".
_OPTIONS_OF = {
    **dict.fromkeys(("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"), "Pool2DOptions"),
    **dict.fromkeys(("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL"),
                    "ReducerOptions"),
    "L2_NORMALIZATION": "L2NormOptions",
    "LSTM": "LSTMOptions",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "BidirectionalSequenceLSTMOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "BIDIRECTIONAL_SEQUENCE_RNN": "BidirectionalSequenceRNNOptions",
    "RNN": "RNNOptions",
    "SVDF": "SVDFOptions",
    "LSH_PROJECTION": "LSHProjectionOptions",
    "BATCH_MATMUL": "BatchMatMulOptions",
}
# Enum-valued option fields -> the schema enum class naming their values.
_ENUM_FIELDS = {
    "fused_activation_function": "ActivationFunctionType", "padding": "Padding",
    "weights_format": "FullyConnectedOptionsWeightsFormat", "combiner": "CombinerType",
    "type": "LSHProjectionType", "kernel_type": "LSTMKernelType", "mode": "MirrorPadMode",
    "reduce_function": "ReduceWindowFunction", "algorithm": "RngAlgorithm",
    "comparison_direction": "StablehloComparisonDirection", "compare_type": "StablehloComparisonType",
    **dict.fromkeys(("quantized_bias_type", "output_type", "out_type", "in_data_type", "out_data_type",
                     "idx_out_type", "key_dtype", "value_dtype"), "TensorType"),
}
# Fields that must be >= 1 wherever they appear (a stride of 0 divides by zero downstream).
_POSITIVE = ("stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor", "filter_width", "filter_height")
_SKIP = ("Init", "GetRootAs")
_ACCESSORS: dict[type, list[tuple[str, str, bool]]] = {}  # class -> [(accessor, key, is_vector)], filled on use


class OptionsError(ValueError):
    """An operator's code or options are not what the schema allows; the message says what."""


def available() -> bool:
    """The ``tflite`` package (the optional extra npu-sim[tflite]) is installed."""
    return tflite is not None


def _enum_names(cls_name: str, zero: bool = True) -> dict[int, str]:
    """Value -> name of a schema enum class (``zero=False``: without its 0, the NONE of a union)."""
    cls = getattr(tflite, cls_name)
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int) and (v or zero)}


@functools.cache
def _schema() -> dict:
    """The schema's enums as dicts, built on first use (the ``tflite`` package is optional)."""
    return {"builtin": _enum_names("BuiltinOperator"), "tensor": _enum_names("TensorType"),
            "unions": {name: _enum_names(name, zero=False) for name in ("BuiltinOptions", "BuiltinOptions2")},
            "enums": {field: _enum_names(cls) for field, cls in _ENUM_FIELDS.items()},
            "empty": _empty_table()}


def operator_name(builtin_code: int, deprecated_code: int) -> str:
    """The BuiltinOperator name of an OperatorCode: the real code is the larger of its two fields."""
    code, names = max(int(builtin_code), int(deprecated_code)), _schema()["builtin"]
    if code not in names or names[code] == "PLACEHOLDER_FOR_GREATER_OP_CODES":
        raise OptionsError(f"unknown builtin operator code {code}")
    return names[code]


def tensor_type_name(code: int) -> str:
    names = _schema()["tensor"]
    if code not in names:
        raise OptionsError(f"unknown tensor type {code}")
    return names[code].lower()


def _snake(name: str) -> str:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return re.sub(r"([A-Z])([A-Z][a-z])", r"\1_\2", name).lower()


def accessors(cls: type) -> list[tuple[str, str, bool]]:
    """The value accessors of a generated options class: scalars, and vectors that have an ``...AsNumpy``."""
    if cls not in _ACCESSORS:
        found = []
        for name, fn in vars(cls).items():
            if (not callable(fn) or not name[:1].isupper() or name.startswith(_SKIP)
                    or name.endswith(("AsNumpy", "Length", "IsNone", "BufferHasIdentifier"))):
                continue
            vector = len(inspect.signature(fn).parameters) == 2
            if vector and not hasattr(cls, name + "AsNumpy"):
                continue  # a vector of tables or strings: no builtin op the simulator knows carries one
            found.append((name, _snake(name), vector))
        _ACCESSORS[cls] = found
    return _ACCESSORS[cls]


def _empty_table() -> tuple[bytearray, int]:
    """A flatbuffer holding one table with no fields: an options class read on it gives its defaults."""
    builder = flatbuffers.Builder(16)
    builder.StartObject(0)
    builder.Finish(builder.EndObject())
    buf = builder.Output()
    return buf, flatbuffers.encode.Get(flatbuffers.packer.uoffset, buf, 0)


def _value(key: str, raw):
    if isinstance(raw, np.ndarray):
        return tuple(int(v) for v in raw)
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise OptionsError(f"option {key} is {raw}")
        return raw
    enums = _schema()["enums"]
    if key in enums:
        if raw not in enums[key]:
            raise OptionsError(f"option {key} is {raw}, not a value of {_ENUM_FIELDS[key]}")
        return enums[key][raw]
    if key in _POSITIVE and raw < 1:
        raise OptionsError(f"option {key} is {raw}; it must be at least 1")
    return int(raw)


def _decode(cls: type, buf, pos: int) -> dict:
    obj = cls()
    obj.Init(buf, pos)
    out = {}
    for name, key, vector in accessors(cls):
        if vector:
            raw = getattr(obj, name + "AsNumpy")()
            out[key] = () if isinstance(raw, int) else _value(key, raw)
        else:
            raw = getattr(obj, name)()
            if raw is None or isinstance(raw, (int, float, bytes, bool)):
                out[key] = None if raw is None else _value(key, raw)
    return out


def expected_options(op: str) -> str | None:
    """The BuiltinOptions class name an op carries, None when the schema has none for it."""
    name = _OPTIONS_OF.get(op) or "".join(part.capitalize() for part in op.split("_")) + "Options"
    name = name.replace("2d", "2D").replace("3d", "3D")
    return name if name in _schema()["unions"]["BuiltinOptions"].values() else None


def decode_options(op: str, operator) -> dict:
    """The builtin options of ``operator`` (a ``tflite.Operator``) for the op named ``op``, as plain Python."""
    out = {}
    for union, classes in _schema()["unions"].items():
        kind = getattr(operator, union + "Type")()
        if kind == 0:
            continue
        if kind not in classes:
            raise OptionsError(f"unknown {union} type {kind}")
        expected = expected_options(op) if union == "BuiltinOptions" else None
        if expected is not None and classes[kind] != expected:
            raise OptionsError(f"carries {classes[kind]}, not the {expected} a {op} has")
        table = getattr(operator, union)()  # None: a type without its table, read as the defaults (as TFLite)
        where = _schema()["empty"] if table is None else (table.Bytes, table.Pos)
        out.update(_decode(getattr(tflite, classes[kind]), *where))
    if operator.BuiltinOptionsType() == 0 and expected_options(op) is not None:
        out = {**_decode(getattr(tflite, expected_options(op)), *_schema()["empty"]), **out}
    return out
