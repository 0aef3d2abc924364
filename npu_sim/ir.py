"""The integer program: the one representation that run, check, cost and accuracy all read.

A ``Program`` is a list of ``Node``s in execution order over named ``Tensor``s. Every quantized tensor carries
its quantization (``QParams``) and the name of the ONNX float tensor it stands for (``float_name``: the input of
its QuantizeLinear), so layers can be matched to the float model. Node parameters are prepared once at lowering
(integer multipliers, shifts, clamps, index tables); executing a node only moves integers. What other layers read
about a node's parameters is in its typed records (``Requant``, ``Weights``, ``Geometry``, ``Affine``, ``Tables``,
``Accumulator``, ``Operands``, the output ``clamp``), filled by the op families at lowering.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# Integer storage types and their ranges.
DTYPES = {
    "int4": (np.int8, -8, 7), "uint4": (np.uint8, 0, 15),
    "int8": (np.int8, -128, 127), "uint8": (np.uint8, 0, 255),
    "int16": (np.int16, -32768, 32767), "uint16": (np.uint16, 0, 65535),
    "int32": (np.int32, -(2**31), 2**31 - 1),
    "int64": (np.int64, -(2**63), 2**63 - 1),  # constants only: TFLite 16x8 biases
}
BITS = {"int4": 4, "uint4": 4, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "int64": 64}


@dataclass(frozen=True, eq=False)
class QParams:
    """Quantization of an integer tensor: real = (q - zero_point) * scale, per tensor or along ``axis``."""
    dtype: str
    scale: np.ndarray       # float32, shape () per tensor, (C,) per axis
    zero_point: np.ndarray  # int64, same shape as scale
    axis: int | None = None

    @property
    def bits(self) -> int:
        return BITS[self.dtype]

    @property
    def qmin(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def qmax(self) -> int:
        return DTYPES[self.dtype][2]

    @property
    def np_dtype(self):
        return DTYPES[self.dtype][0]

    @property
    def reach(self) -> int:
        """The largest ``|q - zero point|`` over every code of the type (per-tensor quantization)."""
        zp = int(self.zero_point)
        return max(abs(self.qmin - zp), abs(self.qmax - zp))

    @property
    def per_tensor(self) -> bool:
        return self.scale.ndim == 0

    @property
    def symmetric(self) -> bool:
        return bool(np.all(self.zero_point == 0))

    def same_as(self, other: "QParams") -> bool:
        return (self.dtype == other.dtype and self.scale.shape == other.scale.shape
                and bool(np.all(self.scale == other.scale)) and bool(np.all(self.zero_point == other.zero_point))
                and (self.per_tensor or self.axis == other.axis))

    def broadcast(self, ndim: int) -> tuple[np.ndarray, np.ndarray]:
        """Scale and zero point shaped to broadcast against a tensor of ``ndim`` dims."""
        if self.per_tensor:
            return self.scale, self.zero_point
        shape = [1] * ndim
        shape[self.axis] = -1
        return self.scale.reshape(shape), self.zero_point.reshape(shape)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """ONNX DequantizeLinear: (q - zp) * scale, in float32."""
        s, z = self.broadcast(q.ndim)
        return ((q.astype(np.int64) - z).astype(np.float32) * s).astype(np.float32)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zp), float32 division."""
        s, z = self.broadcast(np.ndim(x))
        v = np.array(np.rint(np.asarray(x, dtype=np.float32) / s), dtype=np.float32, ndmin=0)  # half to even
        v += np.asarray(z, np.float32)  # exact below 2**24; beyond, the value saturates either way
        np.nan_to_num(v, copy=False)
        np.clip(v, self.qmin, self.qmax, out=v)
        return v.astype(self.np_dtype)

    def describe(self) -> str:
        if self.per_tensor:
            return f"{self.dtype} s={float(self.scale):.6g} zp={int(self.zero_point)}"
        s = self.scale
        return f"{self.dtype} s[{s.size}]@axis{self.axis}={float(s.min()):.3g}..{float(s.max()):.3g} zp={'0' if self.symmetric else 'var'}"


@dataclass(eq=False)
class Tensor:
    name: str                      # unique IR name (the ONNX integer tensor name when there is one)
    float_name: str                # the ONNX float tensor this integer tensor stands for
    shape: tuple[int, ...]
    q: QParams | None              # None only for float program inputs
    data: np.ndarray | None = None  # constants (weights, biases)

    @property
    def is_const(self) -> bool:
        return self.data is not None


# ---- typed parameter records of a node: what the layers above the op families read about it ----------------------
# The op families (``npu_sim.ops``) prepare a node's integer parameters once, at lowering, and describe them in these
# frozen records where they make the node, from the values they have just computed (``npu_sim.ops.records`` has the
# shared constructors; no layer guesses a record from params keys). The run functions read the requantization,
# weights, affine, tables and operands from the records, and ``Node.params`` keeps no copy of them, only the run
# functions' own arguments (the output dtype, a function, ...; a window's geometry and the output clamp of a node
# with no ``requant`` record are kept there too, as its kernel takes them); its private keys (``_in_q``, ...) are
# read by ``npu_sim.ops`` and ``npu_sim.lowering`` only (``tests/test_architecture.py``).
@dataclass(frozen=True, eq=False)
class Requant:
    """``y = clamp(rule(acc + bias[c]) + out_zp, qmin, qmax)`` per output channel ``c``.

    ``half_up``: ``rule(v) = floor((v * mult[c] + 2**(shift[c]-1)) / 2**shift[c])`` (``kernels/fixedpoint.py``);
    ``double``: TFLite's ``MultiplyByQuantizedMultiplier(v, mult[c], shift[c])``; ``float32``: onnxruntime's
    ``rint(float32(v) * ratio[c])``. ``bits`` is the width of the board's multipliers (``[arithmetic]
    multiplier_bits``; 31 for TFLite's): a fixed-point pair of any factor on this board has that many bits."""
    rounding: str               # "half_up" | "double" | "float32"
    bits: int
    mult: np.ndarray | None     # int64 per channel (half_up, double); None under float32
    shift: np.ndarray | None
    ratio: np.ndarray | None    # float32 per channel (float32 only)
    bias: np.ndarray            # int64 per channel, in accumulator units (zeros when the op has none)
    in_zp: int | None           # the input's zero point where the node subtracts one before the multiply
    out_zp: int
    qmin: int
    qmax: int

    @property
    def channels(self) -> int:
        return int(self.bias.size)


@dataclass(frozen=True, eq=False)
class Weights:
    """The centred integer weights ``w - zw[c]`` (int32) in the layout the kernels read: Conv (Cout, Cin/g, kh, kw),
    a Conv1d with kh = 1 (``spatial_1d``); ConvTranspose (Cin, Cout/g, kh, kw); Gemm and MatMul (K, N)."""
    data: np.ndarray
    axis: int                   # the output-channel axis of ``data``
    per_channel: bool           # one requantization per output channel (else one for the tensor)
    spatial_1d: bool = False


@dataclass(frozen=True)
class Geometry:
    """Where a sliding-window or matrix op reads its input: kernel (kh, kw), stride, pads (top, left, bottom,
    right), dilation, groups; a ConvTranspose's output size; a Gemm's transposed A. None where the op has none."""
    kernel: tuple | None = None
    stride: tuple | None = None
    pads: tuple | None = None
    dilation: tuple | None = None
    groups: int = 1
    out_hw: tuple | None = None
    transpose_a: bool = False
    axes: tuple | None = None  # the axes a mean averages (ReduceMean, GlobalAveragePool)


@dataclass(frozen=True, eq=False)
class Affine:
    """A per-channel affine in output units (BatchNormalization, Add/Sub of a constant):
    ``y = clamp(round_half_up(((x - in_zp) * scale[c] + offset[c]) / 2**fraction_bits) + out_zp, qmin, qmax)``,
    channels along axis 1."""
    scale: np.ndarray           # int64 per channel
    offset: np.ndarray          # int64 per channel
    fraction_bits: int
    in_zp: int
    out_zp: int
    qmin: int
    qmax: int


@dataclass(frozen=True, eq=False)
class Tables:
    """Lookup tables held by a node (name -> entries, integer arrays), and the quantization of the input codes
    that index the main one (None where the tables are internal: exponentials, reciprocals)."""
    entries: dict[str, np.ndarray] = field(default_factory=dict)
    in_q: QParams | None = None

    @property
    def main(self) -> np.ndarray | None:
        """The op's own table (a Sigmoid's, a Tanh's, ...), if it has one."""
        return self.entries.get("table")


@dataclass(frozen=True)
class Accumulator:
    """The accumulator: ``bits`` wide (64: not limited); past its range it wraps or saturates."""
    bits: int
    saturate: bool = False


@dataclass(frozen=True, eq=False)
class Operands:
    """The two quantized operands of an elementwise node (constants carry their data). A fixed-point Add/Sub also
    gives its three stages ``R(R(a << left_shift, M_a) +- R(b << left_shift, M_b), M_out)`` as (mult, shift)
    pairs, made at the board's ``multiplier_bits``; TFLite's Add/Sub gives its left shift only."""
    a: Tensor
    b: Tensor
    left_shift: int | None = None
    stages: tuple[tuple[int, int], ...] | None = None


@dataclass(eq=False)
class Node:
    name: str                      # the ONNX node name of the op (group anchor)
    op: str                        # ONNX op type (or Quantize / Requantize for the program's own conversions)
    inputs: list[str]
    outputs: list[str]
    run: Callable[..., list]       # run(node, input_arrays, ctx) -> output arrays
    params: dict[str, Any] = field(default_factory=dict)  # prepared integer parameters
    attrs: dict[str, Any] = field(default_factory=dict)   # ONNX attributes that matter, for printing/checks
    sources: list[str] = field(default_factory=list)      # ONNX nodes folded into this op (Q, DQ, Relu, ...)
    # the run function's caches, filled on first run (bound kernels, validated set-ups); never part of what a
    # node computes: not compared, not printed, not pickled (a memo may hold Numba closures)
    memo: dict = field(default_factory=dict, repr=False, compare=False)
    # the typed records of the node's parameters (above); None where the op has no such part
    requant: Requant | None = None
    weights: Weights | None = None
    geometry: Geometry | None = None
    affine: Affine | None = None
    tables: Tables | None = None
    accumulator: Accumulator | None = None
    operands: Operands | None = None
    clamp: tuple[int, int] | None = None  # the output codes' (qmin, qmax) the node clamps to (a folded Relu/Clip
    #                                       included); None where it does not clamp its output itself
    # a change of layout only (the .tflite frontend's NHWC <-> NCHW Transpose around ONNX's NCHW ops): not an op
    # of the model, so check, cost and memory leave it out (its output is its input's buffer)
    layout: bool = False
    # the names the program listing shows last, in this order (``describe_params``): each a params key, else a
    # record value by its name in ``LISTED``
    listed: tuple[str, ...] = ()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["memo"] = {}
        return state

    def describe_params(self) -> str:
        parts = []
        for key, value in self.params.items():
            if key.startswith("_") or key in self.listed:
                continue
            parts.append(f"{key}={_short(value)}")
        parts += [f"{key}={_short(self.params[key] if key in self.params else LISTED[key](self))}"
                  for key in self.listed]
        return " ".join(parts)


# the typed records of a node (its fields above), and the record values a program listing can show by name
RECORDS = ("requant", "weights", "geometry", "affine", "tables", "accumulator", "operands", "clamp")
LISTED: dict[str, Callable[[Node], Any]] = {
    "bias": lambda n: n.requant.bias, "acc_bits": lambda n: n.accumulator.bits, "mult": lambda n: n.requant.mult,
    "shift": lambda n: n.requant.shift, "scale": lambda n: n.requant.ratio, "tfl_mult": lambda n: n.requant.mult,
    "tfl_shift": lambda n: n.requant.shift, "w": lambda n: n.affine.scale, "b": lambda n: n.affine.offset,
    "f_bits": lambda n: n.affine.fraction_bits, "table": lambda n: n.tables.main,
    "entries": lambda n: n.tables.main.size, "qmin": lambda n: n.clamp[0], "qmax": lambda n: n.clamp[1],
    # the input and output zero points: the node's ``requant`` record's, or its ``affine`` one's
    "x_zp": lambda n: _stage(n).in_zp, "out_zp": lambda n: _stage(n).out_zp,
    # an elementwise node's operands, and a fixed-point Add/Sub's left shift and three (mult, shift) stages
    "a_zp": lambda n: int(n.operands.a.q.zero_point), "b_zp": lambda n: int(n.operands.b.q.zero_point),
    "zp": lambda n: (int(n.operands.a.q.zero_point), int(n.operands.b.q.zero_point)),
    "left_shift": lambda n: n.operands.left_shift,
    **{f"{stage}_{part}": (lambda n, i=i, j=j: n.operands.stages[i][j])
       for i, stage in enumerate(("a", "b", "out")) for j, part in enumerate(("mult", "shift"))}}


def _stage(node: Node) -> "Requant | Affine":
    return node.requant if node.requant is not None else node.affine


def _short(value) -> str:
    if isinstance(value, np.ndarray):
        if value.size == 1:
            return str(value.reshape(-1)[0])
        if value.size <= 4:
            return "[" + ",".join(str(v) for v in value.reshape(-1)) + "]"
        return f"[{value.size}:{value.min()}..{value.max()}]"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (tuple, list)) and len(value) > 6:
        return f"[{len(value)} items]"
    return str(value)


@dataclass(eq=False)
class Program:
    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: dict[str, str]   # ONNX graph input name -> program tensor (float for Quantize stubs, else integer)
    outputs: dict[str, str]  # ONNX graph output name -> integer tensor
    board: Any
    model_path: str = ""
    opset: int = 0
    problems: list = field(default_factory=list)  # (onnx node, op, reason) left out by a tolerant lowering
    arith_gaps: list = field(default_factory=list)  # (onnx node, op, reason) the board's arithmetic cannot compute
    refusals: list = field(default_factory=list)    # (onnx node, op, reason) the board's own toolchain refuses
    compiler_notes: list = field(default_factory=list)  # (onnx node, op, hazard) the NPU compiler takes as it is
    not_run: list = field(default_factory=list)  # (node or output, reason) left out downstream of a refusal
    unsimulated: set = field(default_factory=set)  # refusals the board runs all the same (problem.Unsimulated)
    # ONNX graph output -> the float program input it is (a graph input that is also an output): no integers, no
    # op; ``Simulator.run`` and ``npu-sim run`` return it as fed
    passthrough: dict = field(default_factory=dict)

    def layout_copies(self) -> dict[str, str]:
        """NCHW tensor -> the NHWC tensor it is a transposed copy of, for every change of layout (``Node.layout``:
        a .tflite's integers around ONNX's NCHW ops). The NHWC one is the model's own tensor."""
        out: dict[str, str] = {}
        for n in self.nodes:
            if n.layout and n.inputs:
                src, dst = n.inputs[0], n.outputs[0]
                out.update({dst: src} if tuple(n.attrs.get("perm", ())) == (0, 3, 1, 2) else {src: dst})
        return out

    def input_stub(self, tname: str) -> "Node | None":
        """The node that quantizes the float program input ``tname`` (the model's input QuantizeLinear), if any."""
        return next((n for n in self.nodes if n.op == "Quantize" and n.inputs[0] == tname), None)

    def format(self) -> str:
        """One line per op: name, op, dtypes, shapes, scales, requantization parameters."""
        lines = [f"# program of {self.model_path or '<model>'} on board '{self.board}' "
                 f"({self.board.arithmetic.requantize} arithmetic): {len(self.nodes)} ops"]
        for name, tname in self.inputs.items():
            t = self.tensors[tname]
            lines.append(f"input  {name}: {_tdesc(t)}")
        for node in self.nodes:
            ins = ", ".join(_tdesc(self.tensors[i]) for i in node.inputs if not self.tensors[i].is_const)
            consts = [self.tensors[i] for i in node.inputs if self.tensors[i].is_const]
            cdesc = "".join(f" {c.name.split('/')[-1]}:{c.q.dtype if c.q else c.data.dtype}{list(c.shape)}" for c in consts)
            outs = ", ".join(_tdesc(self.tensors[o]) for o in node.outputs)
            params = node.describe_params()
            lines.append(f"{node.name} [{node.op}] ({ins}){cdesc} -> {outs}" + (f" | {params}" if params else ""))
        for name, tname in self.outputs.items():
            lines.append(f"output {name}: {_tdesc(self.tensors[tname])}")
        return "\n".join(lines)


def _tdesc(t: Tensor) -> str:
    shape = "x".join(str(d) for d in t.shape)
    if t.q is None:
        return f"{t.name} float32[{shape}]"
    return f"{t.name} {t.q.describe()} [{shape}]"
