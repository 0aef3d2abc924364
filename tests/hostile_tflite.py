"""A corpus of damaged or odd ``.tflite`` files, built at test time from the committed fixtures (tests/fixtures/tflite).

Each ``Case(name, make, fragments, valid)``: ``make()`` gives the file's bytes; ``fragments`` are strings the
refusal must contain (the culprit and what is wrong); ``valid=True`` marks a file TFLite would read, which
``read_tflite`` must accept too; ``fragments=None`` (random damage) allows either outcome, as long as it is a
``TflModel`` or a ``ModelLoadError``. Targeted damage is made by editing the fixture as plain Python and writing it
again with the tflite package's builders (tests/tflite_writer.py); random damage (truncations, bit flips, byte
overwrites) is seeded, so every run builds the same files. ``build(folder)`` writes them all as ``NAME.tflite``.

The base of most edits is ``conv_int8``: tensors 0 (input, 1x8x8x3), 1/3 (int32 biases), 2/4 (per-channel int8
weights, 6x3x3x8 / 8x3x3x3), 5 (the first CONV_2D's output), 6 (the model output); operator 0 reads (0, 4, 3) into 5,
operator 1 reads (5, 2, 1) into 6.
"""
from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tflite

from tests.tflite_writer import edited, read_spec, write

FIXTURES = Path(__file__).parent / "fixtures" / "tflite"


@dataclass
class Case:
    name: str
    make: Callable[[], bytes]
    fragments: tuple | None = ()    # what a refusal must name; None: random damage, either outcome allowed
    valid: bool = False             # a file TFLite reads: read_tflite must accept it
    refused: bool = False           # (valid) a sound flatbuffer with a broken operator: the commands exit 2
    known: tuple = ()               # commands that still fail the CLI test on it (marked xfail there)
    greedy: bool = False            # its known failure asks for tens of GiB: the xfail is not run


@functools.cache
def _raw(base: str) -> bytes:
    return (FIXTURES / f"{base}.tflite").read_bytes()


@functools.cache
def _spec(base: str) -> dict:
    return read_spec(FIXTURES / f"{base}.tflite")


def _edit(base: str, change: Callable[[dict], None]):
    """A maker: the fixture ``base`` as a spec, ``change``d in place, written again."""
    def make() -> bytes:
        spec = edited(_spec(base))
        change(spec)
        return write(spec)
    return make


def _sg(spec: dict) -> dict:
    return spec["subgraphs"][0]


def _tensor(spec: dict, i: int) -> dict:
    return _sg(spec)["tensors"][i]


def _op(spec: dict, i: int) -> dict:
    return _sg(spec)["operators"][i]


def _set(get: Callable[[dict], dict], key: str, value):
    """A change setting ``get(spec)[key] = value``."""
    def change(spec: dict) -> None:
        get(spec)[key] = value
    return change


def _quant(i: int, **fields):
    def change(spec: dict) -> None:
        _tensor(spec, i)["quant"].update({k: np.asarray(v) for k, v in fields.items()})
    return change


def _option(i: int, field: str, value):
    def change(spec: dict) -> None:
        _op(spec, i)["options"][1][field] = value
    return change


def _buffer_of(spec: dict, i: int) -> dict:
    return spec["buffers"][_tensor(spec, i)["buffer"]]


# ---- targeted damage ----------------------------------------------------------------------------------------------
def _custom(spec: dict) -> None:
    spec["opcodes"][0].update(deprecated=32, builtin=32, custom=b"TFLite_Detection_PostProcess")


def _unknown(spec: dict) -> None:
    spec["opcodes"][0].update(deprecated=127, builtin=250)


def _short_data(spec: dict) -> None:
    _buffer_of(spec, 4)["data"] = _buffer_of(spec, 4)["data"][:-3]


def _long_bias(spec: dict) -> None:
    _buffer_of(spec, 3)["data"] = _buffer_of(spec, 3)["data"] + b"\0\0\0\0"


def _external_past_eof(spec: dict) -> None:
    _buffer_of(spec, 4).update(data=None, offset=1_000_000, size=216)


def _swap_ops(spec: dict) -> None:
    ops = _sg(spec)["operators"]
    ops[0], ops[1] = ops[1], ops[0]


def _extra_tensor(spec: dict, data: bytes | None = None) -> int:
    """Append an int8 1x3x3x6 tensor with a buffer of its own (``data``: constant contents); its index."""
    spec["buffers"].append({"data": data, "offset": 0, "size": 0})
    tensors = _sg(spec)["tensors"]
    tensors.append({"shape": np.array([1, 3, 3, 6], np.int32), "type": tflite.TensorType.INT8,
                    "buffer": len(spec["buffers"]) - 1, "name": f"extra_{len(tensors)}".encode(), "quant": None,
                    "signature": None, "variable": False})
    return len(tensors) - 1


def _output_never_computed(spec: dict) -> None:
    _sg(spec)["outputs"] = np.array([_extra_tensor(spec)], np.int32)


def _wrong_options(spec: dict) -> None:
    _op(spec, 0)["options"] = ("Pool2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "FilterWidth": 2,
                                                 "FilterHeight": 2, "FusedActivationFunction": 0})


def _patched(base: str, locate: Callable[[object], int], value: int) -> Callable[[], bytes]:
    """The fixture with the uint32 at ``locate(model)`` (a position found through the accessors) set to ``value``."""
    def make() -> bytes:
        buf = bytearray(_raw(base))
        struct.pack_into("<I", buf, locate(tflite.Model.GetRootAs(buf, 0)), value)
        return bytes(buf)
    return make


def _length_at(table, slot: int) -> int:
    """Where the length of the vector in vtable slot ``slot`` of ``table`` (a generated accessor object) is."""
    return table._tab.Vector(table._tab.Offset(slot)) - 4


TARGETED = [
    Case("op-input-out-of-range", _edit("conv_int8", lambda s: _op(s, 1)["inputs"].__setitem__(0, 9999)),
         ("operator 1", "input 0", "9999", "out of range")),
    Case("op-output-out-of-range", _edit("conv_int8", _set(lambda s: _op(s, 0), "outputs", np.array([777]))),
         ("operator 0", "777", "out of range")),
    Case("subgraph-input-out-of-range", _edit("conv_int8", _set(_sg, "inputs", np.array([50]))),
         ("input 0", "tensor 50", "out of range")),
    Case("subgraph-output-negative", _edit("conv_int8", _set(_sg, "outputs", np.array([-1]))),
         ("output 0", "tensor -1", "out of range")),
    Case("buffer-index-out-of-range", _edit("conv_int8", _set(lambda s: _tensor(s, 4), "buffer", 4000)),
         ("tensor 4", "buffer index 4000", "out of range")),
    Case("opcode-index-out-of-range", _edit("pools_int8", _set(lambda s: _op(s, 1), "opcode", 42)),
         ("operator 1", "opcode index 42", "out of range")),
    Case("unknown-opcode", _edit("conv_int8", _unknown), ("operator 0", "unknown builtin operator code 250")),
    Case("custom-op", _edit("conv_int8", _custom),
         ("operator 0", "custom operator 'TFLite_Detection_PostProcess'", "builtin operators only")),
    Case("weights-data-short", _edit("conv_int8", _short_data), ("tensor 4", "213 bytes", "needs 216")),
    Case("bias-data-long", _edit("conv_int8", _long_bias), ("tensor 3", "36 bytes", "needs 32")),
    Case("huge-dim", _edit("conv_int8", _set(lambda s: _tensor(s, 5), "shape", np.array([1, 65536, 65536, 8]))),
         ("tensor 5", "2**31")),
    Case("huge-dims-overflow-int64", _edit("conv_int8", _set(lambda s: _tensor(s, 5), "shape",
                                                             np.array([2 ** 31 - 1] * 4))), ("tensor 5", "2**31")),
    Case("negative-dim", _edit("conv_int8", _set(lambda s: _tensor(s, 5), "shape", np.array([1, -8, 8, 8]))),
         ("tensor 5", "negative dimension")),
    Case("scale-zero", _edit("conv_int8", _quant(0, scale=np.float32([0]))), ("tensor 0", "scale 0.0")),
    Case("scale-nan", _edit("conv_int8", _quant(0, scale=np.float32([np.nan]))), ("tensor 0", "scale nan")),
    Case("scale-inf", _edit("conv_int8", _quant(0, scale=np.float32([np.inf]))), ("tensor 0", "scale inf")),
    Case("scale-negative", _edit("conv_int8", _quant(6, scale=np.float32([-0.5]))), ("tensor 6", "scale -0.5")),
    Case("channel-scale-nan", _edit("conv_int8", _quant(4, scale=np.float32([0.01] * 3 + [np.nan] + [0.01] * 4))),
         ("tensor 4", "scale nan")),
    Case("zero-point-count", _edit("conv_int8", _quant(4, zero_point=np.zeros(5, np.int64))),
         ("tensor 4", "8 quantization scales but 5 zero points")),
    Case("scale-count", _edit("conv_int8", _quant(4, scale=np.float32([0.01] * 5), zero_point=np.zeros(5))),
         ("tensor 4", "5 quantization scales", "neither 1 nor the 8")),
    Case("axis-out-of-range", _edit("conv_int8", _quant(4, axis=7)), ("tensor 4", "axis 7", "out of range")),
    Case("zero-point-out-of-range", _edit("conv_int8", _quant(0, zero_point=np.int64([300]))),
         ("tensor 0", "zero point", "int8")),
    Case("external-buffer-past-eof", _edit("conv_int8", _external_past_eof), ("tensor 4", "past the end")),
    Case("no-subgraph", _edit("conv_int8", _set(lambda s: s, "subgraphs", [])), ("no subgraph",)),
    Case("operators-out-of-order", _edit("conv_int8", _swap_ops),
         ("operator 0 (CONV_2D", "reads tensor 5", "execution order")),
    Case("tensor-computed-twice", _edit("conv_int8", _set(lambda s: _op(s, 1), "outputs", np.array([5]))),
         ("operator 1", "tensor 5", "already the output of operator 0")),
    Case("op-overwrites-input", _edit("conv_int8", _set(lambda s: _op(s, 0), "outputs", np.array([0]))),
         ("operator 0", "tensor 0", "already a model input")),
    Case("output-never-computed", _edit("conv_int8", _output_never_computed),
         ("output tensor 7", "'extra_7'", "never computed")),
    Case("op-without-outputs", _edit("conv_int8", _set(lambda s: _op(s, 1), "outputs", None)),
         ("operator 1 (CONV_2D)", "no outputs")),
    Case("conv-options-type-without-table", _edit("conv_int8", _set(lambda s: _op(s, 0), "options",
                                                                    ("Conv2DOptions", None))),
         ("operator 0", "stride_w is 0")),  # TFLite reads the defaults: stride 0
    Case("unknown-tensor-type", _edit("conv_int8", _set(lambda s: _tensor(s, 5), "type", 99)),
         ("tensor 5", "unknown tensor type 99")),
    Case("wrong-options-class", _edit("conv_int8", _wrong_options), ("operator 0", "Pool2DOptions", "Conv2DOptions")),
    Case("padding-enum", _edit("conv_int8", _option(0, "Padding", 9)), ("operator 0", "padding is 9")),
    Case("activation-enum", _edit("conv_int8", _option(1, "FusedActivationFunction", 77)),
         ("operator 1", "fused_activation_function is 77")),
    Case("stride-zero", _edit("pools_int8", _option(2, "StrideH", 0)), ("operator 2 (MAX_POOL_2D", "stride_h is 0")),
    Case("signature-mismatch", _edit("conv_int8", _set(lambda s: _tensor(s, 0), "signature",
                                                       np.array([-1, 8, 9, 3]))), ("tensor 0", "shape_signature")),
    Case("empty-file", lambda: b"", ("empty",)),
    Case("onnx-bytes", lambda: (FIXTURES / "conv_int8.onnx").read_bytes(), ("not a .tflite", "TFL3")),
    Case("identifier-only", lambda: b"\0\0\0\0TFL3", ("no subgraph",)),
    Case("root-offset-past-eof", lambda: b"\xf0\xff\xff\xffTFL3" + bytes(64), ("not a readable .tflite",)),
    Case("tensor-count-huge", _patched("conv_int8", lambda m: _length_at(m.Subgraphs(0), 4), 0x7FFFFFFF),
         ("claims 2147483647 tensors",)),
    Case("operator-count-huge", _patched("conv_int8", lambda m: _length_at(m.Subgraphs(0), 10), 0x40000000),
         ("claims 1073741824 operators",)),
    Case("buffer-length-huge", _patched("conv_int8", lambda m: _length_at(m.Buffers(4), 4), 0x7FFFFFF0),
         ("not a readable .tflite", "tensor 3")),
]


# ---- random damage (seeded) -------------------------------------------------------------------------------------
def _truncated(base: str, at: float) -> Callable[[], bytes]:
    """The fixture cut after ``at`` bytes (``at`` >= 1) or that fraction of its bytes."""
    def make() -> bytes:
        raw = _raw(base)
        return raw[:int(at * len(raw) if at < 1 else at)]
    return make


def _flipped(base: str, seed: int, bits: int) -> Callable[[], bytes]:
    def make() -> bytes:
        rng, buf = np.random.default_rng(seed), bytearray(_raw(base))
        for pos in rng.integers(8, len(buf), bits):
            buf[pos] ^= 1 << int(rng.integers(0, 8))
        return bytes(buf)
    return make


def _overwritten(base: str, seed: int) -> Callable[[], bytes]:
    def make() -> bytes:
        rng, buf = np.random.default_rng(seed), bytearray(_raw(base))
        start, n = int(rng.integers(8, len(buf) - 16)), int(rng.integers(4, 17))
        buf[start:start + n] = b"\xff" * n if seed % 2 else rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        return bytes(buf)
    return make


_BASES = ("conv_int8", "depthwise_a16w8", "fc_int8", "pools_int8", "add_mul_a16w8", "resize_int8", "softmax_int8")
TRUNCATED = [Case(f"truncated-{base}-{at}", _truncated(base, at), ("not a readable .tflite",))
             for base, at in (("conv_int8", 9), ("conv_int8", 64), ("conv_int8", 0.25), ("conv_int8", 0.5),
                              ("fc_int8", 0.75), ("pools_int8", 0.9), ("depthwise_a16w8", 0.33),
                              ("resize_int8", 0.6))]
FLIPPED = [Case(f"bitflip-{_BASES[seed % len(_BASES)]}-{seed}", _flipped(_BASES[seed % len(_BASES)], seed, bits),
                None) for seed, bits in zip(range(18), (1, 1, 1, 2, 2, 3, 4, 8, 1, 1, 16, 2, 3, 1, 32, 5, 1, 64))]
OVERWRITTEN = [Case(f"overwrite-{_BASES[seed % len(_BASES)]}-{seed}", _overwritten(_BASES[seed % len(_BASES)], seed),
                    None) for seed in range(100, 108)]


# ---- valid but odd ----------------------------------------------------------------------------------------------
def _no_operators(spec: dict) -> None:
    sg = _sg(spec)
    sg.update(tensors=sg["tensors"][:1], operators=[], inputs=np.array([0]), outputs=np.array([0]))


def _unicode_names(spec: dict) -> None:
    for i, t in enumerate(_sg(spec)["tensors"]):
        t["name"] = f"модель/слой ✓/😀 {i}/a\\b".encode()


def _empty_names(spec: dict) -> None:
    _tensor(spec, 5)["name"] = b""
    _tensor(spec, 2)["name"] = None


def _two_subgraphs(spec: dict) -> None:
    second = edited(_sg(spec))
    second["name"] = b"second"
    spec["subgraphs"].append(second)


def _dynamic_batch(spec: dict) -> None:
    _tensor(spec, 0)["signature"] = np.array([-1, 8, 8, 3], np.int32)
    _tensor(spec, 6)["signature"] = np.array([-1, 3, 3, 6], np.int32)


def _unused_tensors(spec: dict) -> None:
    _extra_tensor(spec)
    _extra_tensor(spec, bytes(range(54)))


def _odd_strings(spec: dict) -> None:
    spec["description"] = "ünïcode — описание / \u202e\0end".encode()
    spec["buffers"].append({"data": "значение ✓".encode(), "offset": 0, "size": 0})
    spec["metadata"].append(("npu-sim/odd ✓".encode(), len(spec["buffers"]) - 1))


def _deprecated_codes(spec: dict) -> None:
    for code in spec["opcodes"]:
        code["builtin"] = 0


def _fc_without_bias(spec: dict) -> None:
    _op(spec, 2)["inputs"][2] = -1


def _add_without_options(spec: dict) -> None:
    _op(spec, 2)["options"] = None


def _external_buffers() -> bytes:
    """conv_int8 with its weights stored after the flatbuffer (``Buffer.offset``/``size``, as large models do)."""
    spec = edited(_spec("conv_int8"))
    data = _buffer_of(spec, 4)["data"]
    _buffer_of(spec, 4).update(data=None, offset=2 ** 40, size=len(data))  # a placeholder of the same width
    start = -(-len(write(spec)) // 16) * 16
    _buffer_of(spec, 4)["offset"] = start
    body = write(spec)
    return body + bytes(start - len(body)) + data


VALID = [
    Case("no-operators", _edit("conv_int8", _no_operators), valid=True),
    Case("unicode-names", _edit("conv_int8", _unicode_names), valid=True),
    Case("empty-names", _edit("conv_int8", _empty_names), valid=True),
    Case("two-subgraphs", _edit("conv_int8", _two_subgraphs), valid=True),
    Case("dynamic-batch", _edit("conv_int8", _dynamic_batch), valid=True),
    Case("unused-tensors", _edit("conv_int8", _unused_tensors), valid=True),
    Case("odd-strings", _edit("conv_int8", _odd_strings), valid=True),
    Case("deprecated-codes-only", _edit("pools_int8", _deprecated_codes), valid=True),
    Case("fc-without-bias", _edit("fc_int8", _fc_without_bias), valid=True),
    Case("add-without-options", _edit("add_mul_int8", _add_without_options), valid=True),
    Case("add-options-type-without-table", _edit("add_mul_int8", _set(lambda s: _op(s, 2), "options",
                                                                      ("AddOptions", None))), valid=True),
    Case("external-buffers", _external_buffers, valid=True),
    Case("roundtrip-depthwise", _edit("depthwise_a16w8", lambda s: None), valid=True),
]

def _bias_scale(spec: dict) -> None:
    """Channel 1 of the first convolution's bias scaled by 3965, not input scale x weight scale (a scale TFLite's
    int8/int16 kernels do not read)."""
    _tensor(spec, 1)["quant"]["scale"][1] = 3965.0


# A sound flatbuffer whose operators TFLite's reader takes and its kernels' Prepare would refuse (or compute, for
# the huge strides and dilations): read_tflite accepts them; the translation and lowering must refuse them (exit 2)
# or run them, never fail inside (exit 3). ``known``: where that does not hold yet (the exit seen, in a comment).
_ALL = ("check", "run", "estimate")
OPS = [
    Case("logistic-without-inputs", _edit("activations_int8", _set(lambda s: _op(s, 1), "inputs", None)),
         valid=True, refused=True),  # was: 3: IndexError in the translation
    Case("add-one-input", _edit("add_mul_int8", _set(lambda s: _op(s, 2), "inputs", np.array([5], np.int32))),
         valid=True, refused=True),  # was: 3: KeyError -1 in the translation
    Case("conv-one-input", _edit("conv_int8", _set(lambda s: _op(s, 1), "inputs", np.array([5], np.int32))),
         valid=True, refused=True),
    Case("conv-weights-absent", _edit("conv_int8", lambda s: _op(s, 1)["inputs"].__setitem__(1, -1)),
         valid=True, refused=True),
    Case("concat-axis-99", _edit("concat_int8", _option(2, "Axis", 99)), valid=True, refused=True,
         ),  # was: 0: the axis is not checked
    Case("output-scale-1e-30", _edit("conv_int8", _quant(6, scale=np.float32([1e-30]))), valid=True, refused=True,
         ),  # was: check, estimate 0; run 3: multiplier/shift outside TFLite's range
    Case("bias-scale-mismatch", _edit("conv_a16w8", _bias_scale), valid=True),  # TFLite's int16 kernels add
    # the bias integers at input scale x weight scale whatever its own scale says (Prepare checks it for uint8
    # only): it runs, as on LiteRT
    Case("weight-scale-1e38", _edit("conv_int8", _quant(4, scale=np.float32([0.002] * 7 + [1.5e38]))),
         valid=True, refused=True),  # was: check, estimate 0; run 3: multiplier/shift outside the range
    Case("pool-filter-huge", _edit("pools_int8", _option(2, "FilterWidth", 2 ** 31 - 1)), valid=True,
         refused=True),
    # the file's output shapes do not follow from these geometries: refused (were: slow, and a MemoryError of
    # 47 and 160 GiB in run)
    Case("stride-huge", _edit("conv_int8", _option(1, "StrideW", 2 ** 31 - 1)), valid=True, refused=True),
    Case("stride-huge-first", _edit("add_mul_int8", _option(0, "StrideW", 2130706433)), valid=True,
         refused=True),
    Case("dilation-huge", _edit("conv_int8", _option(0, "DilationWFactor", 2 ** 31 - 1)), valid=True,
         refused=True),
]

CASES = TARGETED + TRUNCATED + FLIPPED + OVERWRITTEN + VALID + OPS


def build(folder: Path) -> dict[str, Path]:
    """Every case written as ``folder/NAME.tflite``: name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for case in CASES:
        paths[case.name] = folder / f"{case.name}.tflite"
        paths[case.name].write_bytes(case.make())
    return paths
