"""Deployability check: will this quantized model run on the board, and if not, why and what to change?

Three families of findings, all read from the one integer program (``npu_sim.ir``):

* **board rules** — what the NPU accepts, as data in the board's ``[rules]`` section: which ops run on the NPU
  (others fall back to the CPU), dtypes, zero points, kernel/stride/dilation/pad/channel limits, the int16
  convolution rule (``in_ch/groups * kh * kw <= 256`` on our board), the legal requantization shift range, the
  input stub's fixed scale;
* **numeric hazards** — things that break the integers whatever the board: int32 biases clipped at INT32_MIN /
  INT32_MAX (onnxruntime issue #21000), biases that alone drive a channel past its output range, worst-case
  (and, given a run, observed) accumulator overflow, requantization factors the board cannot represent, per-channel
  weight scales spanning orders of magnitude, dead weight channels;
* **quantization-friendliness lint** (our design document): lookup-table ops and LUT chains (Softmax, LayerNorm),
  large kernels, Concat of inputs with very different ranges, a model input that is not symmetric or not
  normalized for the fixed 1/128 stub, activations and weights with very large ranges.

Every rule is a small function registered with an id and a severity. Its docstring is the message the user reads:
the first paragraph says what is wrong, the rest (after a blank line) is the fix; both are formatted with the
board's limits and the measured values. ``docs/SUPPORTED_OPS.md`` is generated from the same table
(``python docs/supported_ops.py``).

Severity: ``error`` = cannot deploy as is; ``warning`` = runs, but hurts accuracy or speed; ``info``.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from .errors import BoardError
from .ir import BITS, Node, Program, Tensor

CLI_DESCRIPTION = """\
One line per node: where it runs (NPU, or CPU fallback), its precision (a8w8 = 8-bit activations, 8-bit
weights) and every finding under it: severity, rule id, measured values, and the fix. A summary ends the report.
Severities: error = cannot deploy as is; warning = runs but hurts accuracy or speed; info.
Exit code: 0 deployable, 1 not deployable (an error was found), 2 bad input.
The rules come from the board description ([rules] in its .toml); docs/SUPPORTED_OPS.md lists them."""

SEVERITIES = ("error", "warning", "info")
SCHEMA_VERSION = 1
INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


# ---------------------------------------------------------------------------------------------------------------
# the [rules] section
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpLimits:
    """Limits of one op type on the NPU (None = no limit / inherit the board-wide value)."""
    npu: bool = True
    activation_dtypes: tuple[str, ...] | None = None
    weight_dtypes: tuple[str, ...] | None = None
    kernel_max: int | None = None          # largest kernel height/width
    stride_max: int | None = None
    dilation_max: int | None = None
    pad_max: int | None = None
    channels_max: int | None = None        # input and output channels
    int16_max_reduction: int | None = None  # int16 MACs allowed only when in_ch/groups * kh * kw <= this
    stride_max_valid: int | None = None    # stride limit when unpadded with dilation 1 (default: stride_max)
    depthwise_stride_max: int | None = None
    kernel_area_max: int | None = None     # kh * kw
    kernel_max_padded: int | None = None   # kernel size limit when the op pads its input
    weight_abs_sum_max: int | None = None  # sum of |w - zw| over one output channel
    bias_max: int | None = None            # |bias| must stay below this (the accumulator's headroom)
    resize_scales: tuple[int, ...] | None = None  # allowed integer upscale factors (1 = same size)
    dynamic_dtypes: tuple[str, ...] | None = None  # activation dtypes when both MAC operands are activations


@dataclass(frozen=True)
class Lint:
    """Thresholds of the quantization-friendliness lint and the numeric-hazard warnings."""
    kernel_max: int = 3                  # larger Conv/AveragePool kernels: warning
    concat_range_ratio: float = 8.0      # Concat inputs whose ranges differ more than this: warning
    activation_range_max: float = 1000.0  # |calibrated activation| above this: outlier warning
    weight_range_max: float = 16.0       # |weight| above this: warning
    weight_scale_ratio_max: float = 1000.0  # max/min per-channel weight scale above this: warning
    dead_channel_ratio: float = 1e-6     # channel max|w| below this times the layer's max|w|: dead channel
    bias_range_factor: float = 4.0       # |bias| alone beyond this many output ranges: implausible bias
    lut_heavy_count: int = 8             # more LUT ops than this (Softmax/LayerNorm count 3): heavy use


@dataclass(frozen=True)
class Rules:
    """The board's ``[rules]`` section. ``constrained = False`` (no section): no hardware rules, only hazards
    and lint."""
    constrained: bool = False
    cpu_fallback: bool = True
    activation_dtypes: tuple[str, ...] = ("int8", "uint8", "int16", "uint16")
    weight_dtypes: tuple[str, ...] = ("int4", "uint4", "int8", "uint8", "int16", "uint16")
    activation_zero_points: "bool | tuple[str, ...]" = True  # or the dtypes that may have zero points
    weight_zero_points: bool = True
    per_channel_weights: bool = True
    shift_min: int = 0
    shift_max: int = 62
    input_scale: float = 0.0             # the input stub's fixed scale (0: any)
    ops: dict = field(default_factory=dict)  # op type -> OpLimits (only NPU ops of a constrained board)
    lint: Lint = field(default_factory=Lint)

    def limits(self, op: str) -> OpLimits | None:
        """The op's limits on the NPU, or None when the op runs on the CPU."""
        if not self.constrained:
            return OpLimits()
        lim = self.ops.get(op)
        return lim if lim is not None and lim.npu else None


_DTYPES = tuple(BITS)
_BOARD_KEYS = {"cpu_fallback": bool, "activation_dtypes": list, "weight_dtypes": list,
               "activation_zero_points": "zps", "weight_zero_points": bool, "per_channel_weights": bool,
               "shift_min": int, "shift_max": int, "input_scale": float}
_OP_KEYS = {"npu": bool, "activation_dtypes": list, "weight_dtypes": list, "kernel_max": int, "stride_max": int,
            "dilation_max": int, "pad_max": int, "channels_max": int, "int16_max_reduction": int,
            "stride_max_valid": int, "depthwise_stride_max": int, "kernel_area_max": int, "kernel_max_padded": int,
            "weight_abs_sum_max": int, "bias_max": int, "resize_scales": "ints",
            "dynamic_dtypes": list}


def parse_rules(section: dict, path) -> Rules:
    """Validate and parse a board's ``[rules]`` table (see the presets for every key, documented)."""
    if not section:
        return Rules()

    def bad(key, why):
        raise BoardError(f"board file {path}: rules.{key}: {why}")

    def value(key, v, kind):
        if kind is bool and not isinstance(v, bool):
            bad(key, f"must be true or false, got {v!r}")
        if kind is int and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            bad(key, f"must be a non-negative integer, got {v!r}")
        if kind is float:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                bad(key, f"must be a non-negative number, got {v!r}")
            return float(v)
        if kind == "ints":
            if not isinstance(v, list) or not v or any(isinstance(i, bool) or not isinstance(i, int) or i < 1
                                                       for i in v):
                bad(key, f"must be a non-empty list of positive integers, got {v!r}")
            return tuple(v)
        if kind == "zps":  # true / false, or the dtypes whose tensors may have zero points
            if isinstance(v, bool):
                return v
            return value(key, v, list)
        if kind is list:
            if not isinstance(v, list) or not v or any(d not in _DTYPES for d in v):
                bad(key, f"must be a non-empty list of dtypes from {list(_DTYPES)}, got {v!r}")
            return tuple(v)
        return v

    from .ops import OPS
    kinds = {info.kind for info in OPS.values()}
    board = {}
    ops: dict[str, OpLimits] = {}
    kind_limits: dict[str, dict] = {}
    lint = {}
    for key, v in section.items():
        if key in _BOARD_KEYS:
            board[key] = value(key, v, _BOARD_KEYS[key])
        elif key in ("kinds", "ops"):
            if not isinstance(v, dict):
                bad(key, "must be a table")
            for name, table in v.items():
                if key == "kinds" and name not in kinds:
                    bad(f"kinds.{name}", f"unknown op kind (known: {', '.join(sorted(kinds))})")
                if key == "ops" and name not in OPS and name not in ("Quantize", "Requantize"):
                    bad(f"ops.{name}", "npu-sim has no such op (see docs/SUPPORTED_OPS.md)")
                if not isinstance(table, dict):
                    bad(f"{key}.{name}", "must be a table")
                parsed = {}
                for k, item in table.items():
                    if k not in _OP_KEYS:
                        bad(f"{key}.{name}.{k}", f"unknown key (known: {', '.join(_OP_KEYS)})")
                    parsed[k] = value(f"{key}.{name}.{k}", item, _OP_KEYS[k])
                (kind_limits if key == "kinds" else ops)[name] = parsed
        elif key == "lint":
            if not isinstance(v, dict):
                bad(key, "must be a table")
            known = {f: type(getattr(Lint(), f)) for f in Lint.__dataclass_fields__}
            for k, item in v.items():
                if k not in known:
                    bad(f"lint.{k}", f"unknown key (known: {', '.join(known)})")
                lint[k] = value(f"lint.{k}", item, known[k])
        else:
            bad(key, f"unknown key (known: {', '.join(list(_BOARD_KEYS) + ['kinds', 'ops', 'lint'])})")
    if board.get("shift_min", 0) > board.get("shift_max", 62):
        bad("shift_min", "must not exceed shift_max")
    # every op of a listed kind runs on the NPU with the kind's limits; an ops entry refines (or removes) one op
    merged: dict[str, OpLimits] = {}
    for op, info in OPS.items():
        if info.kind in kind_limits or op in ops:
            merged[op] = OpLimits(**{**kind_limits.get(info.kind, {}), **ops.get(op, {})})
    for op in ("Quantize", "Requantize"):
        if op in ops:
            merged[op] = OpLimits(**ops[op])
    return Rules(constrained=True, ops=merged, lint=Lint(**lint), **board)


# ---------------------------------------------------------------------------------------------------------------
# findings and the rule table
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Finding:
    rule: str
    severity: str
    message: str
    fix: str
    values: dict = field(default_factory=dict)


@dataclass
class NodeReport:
    node: str
    op: str
    placement: str           # "NPU" | "CPU"
    precision: str           # e.g. "a8w8", "a16", "-"
    findings: list[Finding] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # ONNX nodes folded into it
    simulated: bool = True   # False: npu-sim could not lower it (the finding says why)


@dataclass
class CheckResult:
    model: str
    board: str
    nodes: list[NodeReport]
    model_findings: list[Finding]

    @property
    def findings(self) -> list[tuple[str, Finding]]:
        out = [("<model>", f) for f in self.model_findings]
        return out + [(n.node, f) for n in self.nodes for f in n.findings]

    def count(self, severity: str) -> int:
        return sum(1 for _, f in self.findings if f.severity == severity)

    @property
    def deployable(self) -> bool:
        return self.count("error") == 0

    def to_dict(self) -> dict:
        return {
            "schema": "npu-sim-check", "version": SCHEMA_VERSION, "model": self.model, "board": self.board,
            "deployable": self.deployable,
            "summary": {"nodes": len(self.nodes), "npu": sum(n.placement == "NPU" for n in self.nodes),
                        "cpu": sum(n.placement == "CPU" for n in self.nodes),
                        **{s + "s": self.count(s) for s in SEVERITIES}},
            "model_findings": [asdict(f) for f in self.model_findings],
            "nodes": [asdict(n) for n in self.nodes],
        }


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    group: str              # "board" | "hazard" | "lint"
    func: Callable
    scope: str = "node"     # "node": func(ctx, node) ; "model": func(ctx)

    @property
    def text(self) -> tuple[str, str]:
        doc = (self.func.__doc__ or "").strip()
        msg, _, fix = doc.partition("\n\n")
        return " ".join(msg.split()), " ".join(fix.split())


RULES: list[Rule] = []


def rule(rule_id: str, severity: str, group: str, scope: str = "node"):
    """Register a constraint function. It returns None (passes), a dict of measured values (one finding), or a
    list of such dicts. A dict may carry ``severity`` to override the rule's default."""
    def deco(func):
        RULES.append(Rule(rule_id, severity, group, func, scope))
        return func
    return deco


class _Ctx:
    """What a rule may read: the program, the board's rules, placement, and measured run data."""

    def __init__(self, program: Program, rules: Rules, overflows: dict | None):
        self.program = program
        self.rules = rules
        self.lint = rules.lint
        self.arith = program.board.arithmetic
        self.overflows = overflows  # node -> count, when a run was made
        self.limits = {n.name: rules.limits(n.op) for n in program.nodes}
        self.graph_inputs = set(program.inputs.values())

    def t(self, name: str) -> Tensor:
        return self.program.tensors[name]

    def acts(self, node: Node) -> list[Tensor]:
        """Integer activation tensors of the node (non-constant inputs, outputs)."""
        ts = [self.t(n) for n in node.inputs if not self.t(n).is_const] + [self.t(n) for n in node.outputs]
        return [t for t in ts if t.q is not None]

    def owned(self, node: Node) -> list[Tensor]:
        """The activation tensors a finding about quantization belongs to: the node's outputs (data movement
        keeps its input's quantization: its producer answers for it) and integer model inputs it reads."""
        ts = [self.t(n) for n in node.inputs if n in self.graph_inputs]
        if _kind(node.op) != "movement":
            ts += [self.t(n) for n in node.outputs]
        return [t for t in ts if t.q is not None]

    def weight(self, node: Node) -> Tensor | None:
        if _kind(node.op) != "mac" or len(node.inputs) < 2:
            return None
        w = self.t(node.inputs[1])
        return w if w.is_const and w.q is not None and w.data.ndim >= 2 else None


def _kind(op: str) -> str:
    from .ops import OPS
    info = OPS.get(op)
    return info.kind if info else ("convert" if op in ("Quantize", "Requantize") else "unknown")


def _fmt_dtypes(d) -> str:
    return ", ".join(d)


def _channels(idx, limit: int = 8) -> str:
    idx = [int(i) for i in idx]
    head = ", ".join(str(i) for i in idx[:limit])
    return head + (f", … ({len(idx)} in all)" if len(idx) > limit else "")


def _geometry(node: Node) -> dict:
    g = {**node.params, **node.attrs}
    return {k: g.get(k) for k in ("kernel", "stride", "dilation", "pads")}


def _reduction(ctx: _Ctx, node: Node) -> int | None:
    """in_ch/groups * kh * kw of a MAC op: the length of one output's dot product."""
    w = ctx.weight(node)
    if w is None:
        if node.op == "MatMul":
            a = ctx.t(node.inputs[0])
            return int(a.shape[-1])
        return None
    if node.op in ("Conv", "ConvTranspose"):
        return int(np.prod(w.shape[1:])) if node.op == "Conv" else int(w.shape[0] // max(1, node.attrs.get("group", 1))
                                                                        * np.prod(w.shape[2:]))
    if node.op == "Gemm":
        return int(w.shape[1] if node.attrs.get("transB") else w.shape[0])
    return int(w.shape[0])


def _weight_channel_axis(node: Node) -> int:
    if node.op == "ConvTranspose":
        return 1
    if node.op == "Gemm":
        return 0 if node.attrs.get("transB") else 1
    if node.op == "MatMul":
        return 1
    return 0


def _weight_real_per_channel(w: Tensor, axis: int) -> np.ndarray:
    """max |w| per output channel, in real units."""
    real = np.abs(w.q.dequantize(w.data).astype(np.float64))
    return np.moveaxis(real, axis, 0).reshape(real.shape[axis], -1).max(axis=1)


def _real_range(t: Tensor) -> tuple[float, float]:
    s, z = float(np.max(t.q.scale)), int(np.max(t.q.zero_point)) if t.q.per_tensor else 0
    return (t.q.qmin - z) * s, (t.q.qmax - z) * s


# ---- board rules ---------------------------------------------------------------------------------------------
@rule("npu.op", "warning", "board")
def _npu_op(ctx, node):
    """{op} is not an NPU op on this board: it runs on the CPU, with a transfer each way between NPU and CPU
    memory.

    Replace it with ops the NPU runs (see docs/SUPPORTED_OPS.md), or accept the CPU round trip; `npu-sim estimate`
    costs it."""
    if ctx.limits[node.name] is None and ctx.rules.constrained:
        return {"op": node.op, "severity": "warning" if ctx.rules.cpu_fallback else "error"}
    return None


@rule("dtype.activation", "error", "board")
def _dtype_activation(ctx, node):
    """{op} has {dtype} activation tensor(s) ({tensors}); the NPU's {op} takes {allowed}.

    Quantize the model's activations as {allowed} (quantize_static activation_type=QuantType.QInt8, or QInt16 for
    layers that need it)."""
    lim = ctx.limits[node.name]
    if lim is None or not ctx.rules.constrained:
        return None
    allowed = lim.activation_dtypes or ctx.rules.activation_dtypes
    tensors = ctx.owned(node)
    if lim.dynamic_dtypes is not None and _kind(node.op) == "mac" and ctx.weight(node) is None:
        allowed = lim.dynamic_dtypes  # both operands are activations: the inputs are what the limit is about
        tensors = [ctx.t(n) for n in node.inputs if ctx.t(n).q is not None]
    bad = [t for t in tensors if t.q.dtype not in allowed]
    if bad:
        return {"op": node.op, "dtype": "/".join(sorted({t.q.dtype for t in bad})),
                "tensors": ", ".join(t.float_name for t in bad[:3]), "allowed": _fmt_dtypes(allowed)}
    return None


@rule("dtype.weight", "error", "board")
def _dtype_weight(ctx, node):
    """{op} has {dtype} weights; the NPU's {op} takes {allowed}.

    Quantize the weights as {allowed} (quantize_static weight_type=QuantType.QInt8)."""
    lim = ctx.limits[node.name]
    w = ctx.weight(node)
    if lim is None or w is None or not ctx.rules.constrained:
        return None
    allowed = lim.weight_dtypes or ctx.rules.weight_dtypes
    if w.q.dtype not in allowed:
        return {"op": node.op, "dtype": w.q.dtype, "allowed": _fmt_dtypes(allowed)}
    return None


@rule("zero_point.activation", "error", "board")
def _zp_activation(ctx, node):
    """{tensor} has zero point {zp}; the NPU takes {dtype} activations only symmetric (zero point 0).

    Quantize activations symmetrically: quantize_static(..., activation_type=QuantType.QInt8,
    extra_options={{"ActivationSymmetric": True}})."""
    allowed = ctx.rules.activation_zero_points
    if ctx.limits[node.name] is None or allowed is True:
        return None
    for t in ctx.owned(node):
        if not t.q.symmetric and (allowed is False or t.q.dtype not in allowed):
            zp = t.q.zero_point.reshape(-1)
            return {"tensor": t.float_name, "zp": int(zp[np.argmax(zp != 0)]), "dtype": t.q.dtype}
    return None


@rule("zero_point.weight", "error", "board")
def _zp_weight(ctx, node):
    """The weights of {op} have non-zero zero points; the NPU takes symmetric weights only.

    Quantize weights symmetrically (quantize_static extra_options={{"WeightSymmetric": True}}, the default for
    int8 weights)."""
    w = ctx.weight(node)
    if ctx.limits[node.name] is None or w is None or ctx.rules.weight_zero_points or w.q.symmetric:
        return None
    return {"op": node.op}


@rule("weights.per_channel", "error", "board")
def _per_channel(ctx, node):
    """{op} has per-channel weight scales; this NPU takes one weight scale per layer.

    Quantize with per_channel=False."""
    w = ctx.weight(node)
    if ctx.limits[node.name] is None or w is None or ctx.rules.per_channel_weights or w.q.per_tensor:
        return None
    return {"op": node.op}


def _limit_rule(rule_id, what, key, measure, noun, hint=""):
    """A board limit: ``{op} has {what} {value}`` (``what`` reads before the value), fixed by bringing the
    layer's ``noun`` down to the limit; ``hint`` says how, where there is a usual way."""
    def func(ctx, node):
        lim = ctx.limits[node.name]
        limit = getattr(lim, key) if lim is not None else None
        if limit is None:
            return None
        value = measure(ctx, node)
        if value is not None and value > limit:
            return {"op": node.op, "value": value, "limit": limit}
        return None
    func.__doc__ = (f"{{op}} has {what} {{value}}; the NPU allows at most {{limit}}.\n\n"
                    f"Change the layer so that its {noun} is at most {{limit}}{f' ({hint})' if hint else ''}.")
    rule(rule_id, "error", "board")(func)


def _max_of(key):
    def measure(ctx, node):
        v = _geometry(node)[key]
        return None if v is None or isinstance(v, str) else int(max(v))
    return measure


def _channels_of(ctx, node):
    xs = [ctx.t(n) for n in node.inputs if not ctx.t(n).is_const] + [ctx.t(n) for n in node.outputs]
    cs = [t.shape[1] for t in xs if len(t.shape) >= 3]
    return max(cs) if cs else None


def _padded(node) -> bool:
    pads = _geometry(node)["pads"]
    return pads is not None and not isinstance(pads, str) and any(int(v) for v in pads)


def _stride_unless_valid(ctx, node):
    """The stride, when the op pads or dilates (stride_max_valid covers the unpadded, undilated case)."""
    stride = _max_of("stride")(ctx, node)
    dil = _max_of("dilation")(ctx, node)
    return stride if _padded(node) or (dil or 1) > 1 else None


def _stride_valid(ctx, node):
    return None if _stride_unless_valid(ctx, node) is not None else _max_of("stride")(ctx, node)


def _depthwise_stride(ctx, node):
    w = ctx.weight(node)
    if node.op != "Conv" or w is None or w.shape[1] != 1 or node.attrs.get("group", 1) <= 1:
        return None
    return _max_of("stride")(ctx, node)


def _kernel_area(ctx, node):
    k = _geometry(node)["kernel"]
    return None if k is None or isinstance(k, str) else int(np.prod(k))


def _kernel_padded(ctx, node):
    return _max_of("kernel")(ctx, node) if _padded(node) else None


def _weight_abs_sum(ctx, node):
    w = ctx.weight(node)
    if w is None:
        return None
    axis = _weight_channel_axis(node)
    zw = w.q.zero_point if w.q.per_tensor else np.expand_dims(
        w.q.zero_point, tuple(i for i in range(w.data.ndim) if i != (w.q.axis or 0)))
    dev = np.abs(w.data.astype(np.int64) - zw)
    return int(np.moveaxis(dev, axis, 0).reshape(dev.shape[axis], -1).sum(axis=1).max())


def _bias_abs(ctx, node):
    b = _bias_tensor(ctx, node)
    return int(np.abs(b.data.astype(np.int64)).max()) if b is not None and b.data.size else None


_SMALLER_KERNELS = "e.g. a stack of smaller kernels"
_limit_rule("limit.kernel", "a kernel size of", "kernel_max", _max_of("kernel"), "kernel size", _SMALLER_KERNELS)
_limit_rule("limit.kernel_area", "a kernel area (kh x kw) of", "kernel_area_max", _kernel_area, "kernel area",
            _SMALLER_KERNELS)
_limit_rule("limit.kernel_padded", "padding with a kernel size of", "kernel_max_padded", _kernel_padded,
            "kernel size", "or drop its padding")
_limit_rule("limit.stride_valid", "no padding or dilation and a stride of", "stride_max_valid", _stride_valid,
            "stride")
_limit_rule("limit.depthwise_stride", "a depthwise stride of", "depthwise_stride_max", _depthwise_stride,
            "stride", "e.g. stride 1 followed by a strided pooling or subsampling layer")
_limit_rule("limit.weight_sum", "a sum of absolute weights (one output channel) of", "weight_abs_sum_max",
            _weight_abs_sum, "sum of absolute weights per output channel",
            "e.g. split its input channels across layers and add their results")
_limit_rule("limit.bias", "a bias magnitude of", "bias_max", _bias_abs, "largest bias",
            "the bias is in units of input scale x weight scale: larger scales make it smaller")
_limit_rule("limit.stride", "a stride of", "stride_max", lambda ctx, node: (
    _stride_unless_valid(ctx, node) if ctx.limits[node.name].stride_max_valid is not None
    else _max_of("stride")(ctx, node)), "stride")
_limit_rule("limit.dilation", "a dilation of", "dilation_max", _max_of("dilation"), "dilation")
_limit_rule("limit.pad", "a padding of", "pad_max", _max_of("pads"), "padding", "e.g. an explicit Pad before it")
_limit_rule("limit.channels", "a channel count of", "channels_max", _channels_of, "channel count",
            "e.g. split it into layers over fewer channels and concatenate them")


@rule("limit.resize_scale", "error", "board")
def _resize_scale(ctx, node):
    """Resize scales {shape_in} to {shape_out} (factor {factor}); the NPU resizes only by {allowed}.

    Resize by a supported factor (in several steps if needed), or resize on the CPU."""
    lim = ctx.limits[node.name]
    if lim is None or lim.resize_scales is None or node.op != "Resize":
        return None
    x, y = ctx.t(node.inputs[0]), ctx.t(node.outputs[0])
    hin, win, hout, wout = x.shape[-2], x.shape[-1], y.shape[-2], y.shape[-1]
    if (hin, win) == (hout, wout) or (hin == 1 and win == 1):
        return None
    factors = {hout / hin, wout / win}
    if all(f in lim.resize_scales for f in factors) and len(factors) == 1:
        return None
    return {"shape_in": f"{hin}x{win}", "shape_out": f"{hout}x{wout}",
            "factor": "/".join(f"{f:g}" for f in sorted(factors)), "allowed": ", ".join(f"{f}x" for f in lim.resize_scales)}


@rule("int16.reduction", "error", "board")
def _int16_reduction(ctx, node):
    """{op} runs at {precision} but one output sums in_ch/groups x kh x kw = {value} products; the NPU allows
    16-bit MACs only up to {limit}.

    Keep this layer at 8 bits (onnxruntime TensorQuantOverrides for its input/output tensors), or split it so each
    part sums at most {limit} products (fewer input channels per group, smaller kernel)."""
    lim = ctx.limits[node.name]
    if lim is None or lim.int16_max_reduction is None:
        return None
    prec = _precision(ctx, node)
    if "16" not in prec:
        return None
    k = _reduction(ctx, node)
    if k is not None and k > lim.int16_max_reduction:
        return {"op": node.op, "precision": prec, "value": k, "limit": lim.int16_max_reduction}
    return None


@rule("requant.range", "error", "board")
def _requant_range(ctx, node):
    """The requantization factor of {op} (input scale x weight scale / output scale) needs a right shift of
    {shift} on channel(s) {channels}, outside the board's range [{shift_min}, {shift_max}]{underflow}.

    The factor is far too small: the output scale is huge compared with input x weight scales (often a channel
    with tiny weights and a bias). Re-calibrate (check the output range), prune dead channels, or quantize the
    weights per tensor."""
    p = node.params
    if "mult" not in p or "shift" not in p or ctx.limits[node.name] is None:
        return None
    mult, shift = np.asarray(p["mult"]).reshape(-1), np.asarray(p["shift"]).reshape(-1)
    lo, hi = ctx.rules.shift_min, ctx.rules.shift_max
    bad = (mult == 0) | (shift < lo) | (shift > hi)
    if bad.any():
        effect = _max_output_lsb(ctx, node)  # a channel that can never move its output by half an LSB is moot
        if effect is not None and effect.size == bad.size:
            bad &= effect >= 0.5
    bad = np.flatnonzero(bad)
    if bad.size == 0:
        return None
    flushed = bool(np.any(mult[bad] == 0))
    s = shift[bad][mult[bad] != 0]
    return {"op": node.op, "shift": (f"{int(s.min())}..{int(s.max())}" if s.size else f"> {hi}"),
            "channels": _channels(bad), "shift_min": lo, "shift_max": hi,
            "underflow": " (the factor underflows to a zero multiplier)" if flushed else ""}


# ---- numeric hazards -----------------------------------------------------------------------------------------
def _bias_tensor(ctx, node) -> Tensor | None:
    if _kind(node.op) != "mac" or len(node.inputs) < 3:
        return None
    b = ctx.t(node.inputs[2])
    return b if b.is_const and b.q is not None and b.q.dtype == "int32" else None


@rule("bias.saturated", "error", "hazard")
def _bias_saturated(ctx, node):
    """The int32 bias of {op} is at INT32_MIN/INT32_MAX on channel(s) {channels}: the quantizer clipped it
    (bias scale = input scale x weight scale[c] = {bias_scale} is too small for the float bias), so those
    channels compute a wrong, often sign-flipped bias — onnxruntime issue #21000.

    Re-quantize with per-tensor weights (per_channel=False), or reduce_range=True, or int8 weights for this layer,
    or onnxruntime >= 1.20.1, which enlarges such weight scales so the bias fits (keep
    QDQDisableWeightAdjustForInt32Bias off)."""
    b = _bias_tensor(ctx, node)
    if b is None:
        return None
    data = b.data.astype(np.int64)
    bad = np.flatnonzero((data == INT32_MIN) | (data == INT32_MAX))
    if bad.size == 0:
        return None
    scale = np.broadcast_to(b.q.scale, data.shape)[bad]
    return {"op": node.op, "channels": _channels(bad), "count": int(bad.size),
            "bias_scale": f"{float(scale.min()):.3g}", "channel_list": [int(c) for c in bad]}


@rule("bias.implausible", "warning", "hazard")
def _bias_implausible(ctx, node):
    """The bias of {op} alone is {factor:.3g}x the output's whole range on channel(s) {channels} (bias up to
    {bias:.4g}, output range ±{out_range:.4g}): those channels sit at the clamp whatever the input.

    Check the float model's bias and the calibration of this layer's output; if the bias comes from a clipped
    int32 (see bias.saturated), re-quantize with per-tensor weights or int8 weights."""
    b = _bias_tensor(ctx, node)
    if b is None:
        return None
    real = np.abs(b.q.dequantize(b.data).astype(np.float64)).reshape(-1)
    out = ctx.t(node.outputs[0])
    lo, hi = _real_range(out)
    out_range = max(abs(lo), abs(hi))
    ratio = real / out_range
    bad = np.flatnonzero(ratio > ctx.lint.bias_range_factor)
    if bad.size == 0:
        return None
    return {"op": node.op, "channels": _channels(bad), "factor": float(ratio[bad].max()),
            "bias": float(real[bad].max()), "out_range": out_range}


def _worst_acc(ctx, node) -> int | None:
    """Largest |accumulator| any input can produce: max|x - zx| * max over outputs of sum|w - zw| + max|bias|."""
    if _kind(node.op) != "mac":
        return None
    x = ctx.t(node.inputs[0])
    if x.q is None or not x.q.per_tensor:
        return None
    x_dev = max(abs(x.q.qmin - int(x.q.zero_point)), abs(x.q.qmax - int(x.q.zero_point)))
    w = ctx.weight(node)
    bias = np.asarray(node.params.get("bias", [0]), np.int64)
    max_bias = int(np.abs(bias).max()) if bias.size else 0
    if w is None:  # two activations
        y = ctx.t(node.inputs[1])
        if y.q is None or not y.q.per_tensor:
            return None
        y_dev = max(abs(y.q.qmin - int(y.q.zero_point)), abs(y.q.qmax - int(y.q.zero_point)))
        return x_dev * y_dev * int(x.shape[-1]) + max_bias
    axis = _weight_channel_axis(node)
    zw = w.q.zero_point if w.q.per_tensor else np.expand_dims(
        w.q.zero_point, tuple(i for i in range(w.data.ndim) if i != (w.q.axis or 0)))
    dev = np.abs(w.data.astype(np.int64) - zw)
    rows = np.moveaxis(dev, axis, 0).reshape(dev.shape[axis], -1).sum(axis=1)
    return x_dev * int(rows.max()) + max_bias


def _max_output_lsb(ctx, node) -> np.ndarray | None:
    """Per output channel of a MAC op with constant weights: the largest |output change| in output LSBs that any
    input and the bias can cause (factor x (max|x - zx| * sum|w - zw| + |bias|))."""
    w = ctx.weight(node)
    x = ctx.t(node.inputs[0])
    if w is None or x.q is None or not x.q.per_tensor:
        return None
    axis = _weight_channel_axis(node)
    x_dev = max(abs(x.q.qmin - int(x.q.zero_point)), abs(x.q.qmax - int(x.q.zero_point)))
    rows = np.moveaxis(np.abs(w.data.astype(np.int64)), axis, 0).reshape(w.data.shape[axis], -1).sum(axis=1)
    bias = np.abs(np.asarray(node.params.get("bias", 0), np.float64)).reshape(-1)
    sy = float(ctx.t(node.outputs[0]).q.scale)
    factor = float(x.q.scale) * np.broadcast_to(w.q.scale.astype(np.float64), rows.shape) / sy
    return factor * (x_dev * rows + np.broadcast_to(bias if bias.size > 1 else bias.reshape(()), rows.shape))


@rule("accumulator.worst_case", "warning", "hazard")
def _acc_worst(ctx, node):
    """{op}: the worst-case accumulator |acc| <= {bound} needs {needed} bits; the board accumulates in {bits}
    bits ({precision}), so extreme inputs can overflow it ({mode}).

    Usually harmless with real data (run `npu-sim check --run` to see observed overflow); otherwise reduce the
    layer's reduction length or weight range, or keep it at 8 bits."""
    bound = _worst_acc(ctx, node)
    bits = node.params.get("acc_bits")
    if bound is None or bits is None or bits >= 64:
        return None
    if bound < 2 ** (bits - 1):
        return None
    return {"op": node.op, "bound": bound, "needed": bound.bit_length() + 1, "bits": bits,
            "precision": _precision(ctx, node), "mode": ctx.arith.accumulator_overflow}


@rule("accumulator.observed", "error", "hazard")
def _acc_observed(ctx, node):
    """{op}: {count} accumulator value(s) overflowed the board's {bits}-bit accumulator in the run
    ({mode}): the outputs are wrong there.

    Reduce the layer's input range or weight range, or split the reduction; 8-bit operands with a 32-bit
    accumulator cannot overflow below about 130,000 products."""
    if not ctx.overflows or node.name not in ctx.overflows:
        return None
    return {"op": node.op, "count": int(ctx.overflows[node.name]), "bits": node.params.get("acc_bits"),
            "mode": ctx.arith.accumulator_overflow}


@rule("weights.scale_spread", "warning", "hazard")
def _scale_spread(ctx, node):
    """The per-channel weight scales of {op} span {ratio:.3g}x (from {smin:.3g} on channel {cmin} to
    {smax:.3g} on channel {cmax}); tiny scales make the int32 bias scale tiny too (bias overflow, #21000) and
    the board's requantization shifts extreme.

    Check the float weights of the small channels (dead or nearly dead channels can be pruned); quantize this
    layer per tensor, or with reduce_range."""
    w = ctx.weight(node)
    if w is None or w.q.per_tensor or w.q.scale.size < 2:
        return None
    s = w.q.scale.astype(np.float64)
    ratio = float(s.max() / s.min())
    if ratio <= ctx.lint.weight_scale_ratio_max:
        return None
    return {"op": node.op, "ratio": ratio, "smin": float(s.min()), "smax": float(s.max()),
            "cmin": int(np.argmin(s)), "cmax": int(np.argmax(s))}


@rule("weights.dead_channel", "warning", "hazard")
def _dead_channels(ctx, node):
    """{op} has {count} all-zero or near-zero weight channel(s) ({channels}): max|w| below {ratio:.0e} of the
    layer's largest.

    Prune them from the float model (they waste MACs), or make sure their per-channel scales do not underflow."""
    w = ctx.weight(node)
    if w is None:
        return None
    m = _weight_real_per_channel(w, _weight_channel_axis(node))
    top = float(m.max())
    bad = np.flatnonzero(m <= top * ctx.lint.dead_channel_ratio) if top > 0 else np.arange(m.size)
    if bad.size == 0:
        return None
    return {"op": node.op, "count": int(bad.size), "channels": _channels(bad), "ratio": ctx.lint.dead_channel_ratio}


# ---- lint: the quantization-friendliness checklist -----------------------------------------------------------
@rule("lint.lut", "info", "lint")
def _lut(ctx, node):
    """{op} runs as a lookup table ({entries}): an accuracy risk when quantized, worst at 16 bits (interpolated).

    Fine when used sparingly; `npu-sim report` measures its error. docs/LUT_ERRORS.md lists each table's
    error."""
    if _kind(node.op) != "lut" and not (node.op == "Div" and "reciprocal" in str(node.attrs.get("divisor", ""))):
        return None
    bits = ctx.t(node.inputs[0]).q.bits
    entries = node.attrs.get("table") or (  # an arithmetic with its own tables says which (tflite)
        "256 entries" if bits <= 8 else f"{ctx.arith.lut_entries_16} entries, interpolated")
    return {"op": node.op, "entries": entries}


@rule("lint.lut_chain", "warning", "lint")
def _lut_chain(ctx, node):
    """{op} runs on the NPU as a chain of lookup tables and integer steps ({steps}): each step rounds, so it is
    one of the least accurate ops after quantization.

    Keep it at 16 bits if the accuracy report shows a loss here; or move it to the end of the model (CPU)."""
    if node.op == "Softmax":
        return {"op": node.op, "steps": "max, exp table, sum, reciprocal table, multiply"}
    if node.op == "LayerNormalization":
        return {"op": node.op, "steps": "mean, variance, 1/sqrt table, affine"}
    return None


@rule("lint.lut_heavy", "warning", "lint", scope="model")
def _lut_heavy(ctx):
    """The model uses lookup tables heavily: {count} LUT-based ops (Softmax and LayerNorm count 3 each), more than
    {limit}; their rounding errors add up.

    Replace activations like Sigmoid/Tanh/HardSwish by ReLU/ReLU6 where the float model allows, or run the
    LUT-heavy part at 16 bits."""
    count = 0
    for n in ctx.program.nodes:
        if _kind(n.op) == "lut":
            count += 1
        elif n.op in ("Softmax", "LayerNormalization"):
            count += 3
    if count > ctx.lint.lut_heavy_count:
        return {"count": count, "limit": ctx.lint.lut_heavy_count}
    return None


@rule("lint.large_kernel", "warning", "lint")
def _large_kernel(ctx, node):
    """{op} has a {kernel} kernel (larger than {limit}x{limit}): large kernels gather poorly calibrated
    statistics and quantize badly.

    Use conventional kernels (3x3, 2x2): stack several 3x3 convolutions instead of one large one, or pool in
    steps."""
    if node.op not in ("Conv", "ConvTranspose", "AveragePool"):
        return None
    k = _geometry(node)["kernel"]
    if k is None or isinstance(k, str) or max(k) <= ctx.lint.kernel_max:
        return None
    return {"op": node.op, "kernel": "x".join(str(v) for v in k), "limit": ctx.lint.kernel_max}


@rule("lint.concat_range", "warning", "lint")
def _concat_range(ctx, node):
    """Concat joins inputs whose ranges differ {ratio:.3g}x ({narrow} ±{rmin:.3g} vs {wide} ±{rmax:.3g}): one
    shared output scale wastes most of the 8 bits on the narrow input.

    Normalize the branches before the Concat (BatchNorm/ReLU6), or run this Concat at 16 bits."""
    if node.op != "Concat":
        return None
    ins = [ctx.t(n) for n in node.inputs]
    ranges = [(max(abs(v) for v in _real_range(t)), t.float_name) for t in ins if t.q is not None]
    if len(ranges) < 2:
        return None
    (rmin, narrow), (rmax, wide) = min(ranges), max(ranges)
    if rmin <= 0 or rmax / rmin <= ctx.lint.concat_range_ratio:
        return None
    return {"ratio": rmax / rmin, "narrow": narrow, "wide": wide, "rmin": rmin, "rmax": rmax}


@rule("lint.input", "warning", "lint", scope="model")
def _input_quant(ctx):
    """Model input {name} is quantized as {desc}: {problem}.

    {fix}"""
    found = []
    stub = ctx.rules.input_scale
    for name, tname in ctx.program.inputs.items():
        t = ctx.t(tname)
        q = t.q
        if q is None:  # float input behind the model's own QuantizeLinear
            n = next((n for n in ctx.program.nodes if n.op == "Quantize" and n.inputs[0] == tname), None)
            if n is None:
                continue
            q = ctx.t(n.outputs[0]).q
        lo = float((q.qmin - int(q.zero_point)) * float(q.scale))
        hi = float((q.qmax - int(q.zero_point)) * float(q.scale))
        desc = f"{q.dtype} scale {float(q.scale):.6g} zero point {int(q.zero_point)} (range [{lo:.4g}, {hi:.4g}])"
        if lo >= -0.01 * hi:
            found.append({"name": name, "desc": desc, "problem": "its range is one-sided (raw data such as "
                          "[0, 255] pixels), not symmetric about zero as the board's input stub needs",
                          "fix": "Normalize the input symmetrically, e.g. (x - 127.5) / 127.5 into [-1, 1], "
                          "before the model (or as its first layer)."})
        elif stub and q.bits == 8 and not math.isclose(float(q.scale), stub, rel_tol=1e-6):
            found.append({"name": name, "desc": desc, "problem": f"the board's input stub uses the fixed scale "
                          f"{stub:.6g} (1/128: inputs in [-1, 1))",
                          "fix": ("Normalize the input to [-1, 1] (divide by its largest magnitude) so the fixed "
                                  "1/128 scale fits, or use a 16-bit input stub.") if hi > 1.01 else
                          "The input uses less than the stub's [-1, 1) range: scale it up to [-1, 1] to use all 8 "
                          "bits, or use a 16-bit input stub."})
    return found or None


@rule("lint.activation_range", "warning", "lint")
def _activation_range(ctx, node):
    """{tensor} (output of {op}) has a calibrated range of ±{value:.4g}, above {limit:.4g}: feature-map outliers
    make its scale coarse ({scale:.3g} per step at {dtype}).

    Follow the op with BatchNorm/ReLU in the float model, or run this layer at 16 bits{int16}."""
    if _kind(node.op) == "movement" or node.op in ("Quantize", "Requantize"):
        return None
    out = ctx.t(node.outputs[0])
    if out.q is None or not out.q.per_tensor:
        return None
    value = max(abs(v) for v in _real_range(out))
    if value <= ctx.lint.activation_range_max:
        return None
    first = ctx.t(node.inputs[0])
    if first.q is not None and first.q.same_as(out.q):  # inherited unchanged (nearest Resize...): reported upstream
        return None
    return {"tensor": out.float_name, "op": node.op, "value": value, "limit": ctx.lint.activation_range_max,
            "scale": float(out.q.scale), "dtype": out.q.dtype, "int16": _int16_note(ctx, node)}


@rule("lint.weight_range", "warning", "lint")
def _weight_range(ctx, node):
    """The weights of {op} reach |w| = {value:.4g} (above {limit:.4g}) on channel {channel}: a large weight range
    makes the weight scale coarse.

    Train with (more) weight decay, or run this layer with 16-bit weights{int16}."""
    w = ctx.weight(node)
    if w is None:
        return None
    m = _weight_real_per_channel(w, _weight_channel_axis(node))
    if float(m.max()) <= ctx.lint.weight_range_max:
        return None
    return {"op": node.op, "value": float(m.max()), "limit": ctx.lint.weight_range_max,
            "channel": int(np.argmax(m)), "int16": _int16_note(ctx, node)}


def _int16_note(ctx, node) -> str:
    lim = ctx.limits.get(node.name)
    if lim is None or lim.int16_max_reduction is None or not ctx.rules.constrained:
        return ""
    k = _reduction(ctx, node)
    if k is None:
        return ""
    if k <= lim.int16_max_reduction:
        return f" (allowed here: in_ch/groups x kh x kw = {k} <= {lim.int16_max_reduction})"
    return f" (not allowed on this board for this layer: in_ch/groups x kh x kw = {k} > {lim.int16_max_reduction})"


# ---------------------------------------------------------------------------------------------------------------
# running the rules
# ---------------------------------------------------------------------------------------------------------------
def _precision(ctx, node) -> str:
    acts = ctx.acts(node)
    if not acts:
        return "-"
    bits = sorted({t.q.bits for t in acts})
    a = "a" + "/".join(str(b) for b in bits)
    w = ctx.weight(node)
    if w is not None:
        return f"{a}w{w.q.bits}"
    if _kind(node.op) == "mac":  # two activations
        return a + "xa"
    return a


def _finding(r: Rule, values: dict) -> Finding:
    values = dict(values)
    severity = values.pop("severity", r.severity)
    msg, fix = r.text
    shown = {k: v for k, v in values.items()}
    try:
        message = msg.format(**shown)
        fix_text = fix.format(**shown)
    except (KeyError, IndexError, ValueError) as exc:  # a rule bug, never the user's
        raise AssertionError(f"rule {r.id}: message does not format with {sorted(shown)}: {exc}") from None
    plain = {k: v for k, v in values.items() if isinstance(v, (int, float, str, list, bool))}
    return Finding(r.id, severity, message, fix_text, plain)


def _results(out) -> list[dict]:
    if out is None:
        return []
    return out if isinstance(out, list) else [out]


def check_program(program: Program, overflows: dict | None = None) -> CheckResult:
    """Run every rule of the board's table over a (possibly tolerantly) lowered program."""
    rules = program.board.rules or Rules()
    ctx = _Ctx(program, rules, overflows)
    reports = []
    for node in program.nodes:
        limits = ctx.limits[node.name]
        rep = NodeReport(node.name, node.op, "NPU" if limits is not None else "CPU", _precision(ctx, node),
                         sources=list(node.sources))
        for r in RULES:
            if r.scope != "node":
                continue
            for values in _results(r.func(ctx, node)):
                rep.findings.append(_finding(r, values))
        reports.append(rep)
    # nodes npu-sim could not lower: they would run on the CPU (in float), and cannot be simulated
    for name, op, why in program.problems:
        rep = NodeReport(name, op, "CPU", "float", simulated=False)
        severity = "warning" if rules.cpu_fallback else "error"
        rep.findings.append(Finding(
            "npu.lowering", severity,
            f"{op} cannot run as an integer op: {why}. It would run on the CPU in float, and npu-sim cannot simulate "
            f"it (`npu-sim run` refuses the model).",
            "Quantize it (QDQ around the op, op_types_to_quantize including it) or replace it with supported ops; "
            "docs/SUPPORTED_OPS.md lists them.", {"op": op}))
        reports.append(rep)
    by_source = {src: rep for rep, node in zip(reports, program.nodes) for src in [node.name] + list(node.sources)}
    # nodes the board's own toolchain refuses (e.g. LiteRT's prepare checks under the tflite arithmetic)
    for name, op, why in program.refusals:
        rep = by_source.get(name)
        if rep is None:
            rep = NodeReport(name, op, "NPU", "-", simulated=False)
            reports.append(rep)
        rep.simulated = False
        rep.findings.append(Finding("board.refusal", "error", f"the board's toolchain refuses this node: {why}.",
                                    "Fix the quantization of this layer (see the message), or run it on another "
                                    "board.", {"op": op}))
    # nodes the board's arithmetic cannot compute yet: checked on their structure, not simulated
    for name, op, why in program.arith_gaps:
        rep = by_source.get(name)
        finding = Finding(
            "npu.arithmetic", "info",
            f"npu-sim cannot yet compute {op} in this board's {program.board.arithmetic.requantize} arithmetic "
            f"({why}); the rules and the estimate use its structure, but `npu-sim run` refuses the model on this "
            f"board.", "Simulate on another board (e.g. --board default) until this op is covered.", {"op": op})
        if rep is None:
            rep = NodeReport(name, op, "NPU", "-", simulated=False)
            reports.append(rep)
        rep.simulated = False
        rep.findings.append(finding)
    model_findings = []
    for r in RULES:
        if r.scope == "model":
            model_findings += [_finding(r, v) for v in _results(r.func(ctx))]
    return CheckResult(program.model_path, program.board.name, reports, model_findings)


def int16_allowed(program: Program, node: Node) -> bool:
    """Whether ``node`` may run with 16-bit activations on the program's board: the op runs on the NPU, takes
    int16 activations there, and one output's dot product (in_ch/groups x kh x kw, see ``_reduction``) stays
    within the board's ``int16_max_reduction``. A node on the CPU (or on a board without rules) always may."""
    rules = program.board.rules or Rules()
    if not rules.constrained:
        return True
    lim = rules.limits(node.op)
    if lim is None:
        return True
    allowed = lim.activation_dtypes or rules.activation_dtypes
    if "int16" not in allowed:
        return False
    if lim.int16_max_reduction is None:
        return True
    k = _reduction(_Ctx(program, rules, None), node)
    return k is None or k <= lim.int16_max_reduction


def placement(program: Program) -> dict[str, str]:
    """Node name -> "NPU" or "CPU" (fallback) for every node of the program, by the board's rules."""
    rules = program.board.rules or Rules()
    return {node.name: "NPU" if rules.limits(node.op) is not None else "CPU" for node in program.nodes}


def check(model, board=None, input_shapes: dict | None = None, feeds: dict | None = None) -> CheckResult:
    """Check a QDQ model (a path, or a loaded ``Simulator``) against a board's rules.

    ``board``: preset name, TOML path or Board (default: the simulator's board, else ``default``).
    ``feeds``: run the model on these inputs (or ``"random"`` for seeded random ones) and report observed
    accumulator overflow. Nodes npu-sim cannot lower are reported (placement CPU), not raised.
    """
    from .board import load_board
    from .lowering import lower_for_analysis
    from .simulator import Simulator
    if isinstance(model, Simulator) and (board is None or load_board(board) == model.board):
        program = model.program
    else:
        path = str(model)
        if isinstance(model, Simulator):  # same model and shapes, another board
            path = model.program.model_path
            input_shapes = {n: model.program.tensors[t].shape for n, t in model.program.inputs.items()}
        feed_shapes = {n: np.shape(v) for n, v in feeds.items()} if isinstance(feeds, dict) else None
        program = lower_for_analysis(path, load_board(board or "default"), input_shapes, feed_shapes)
    overflows = None
    if feeds is not None:
        if program.problems or program.arith_gaps:
            raise BoardError("cannot run the model for --run: npu-sim cannot lower "
                             f"{len(program.problems)} node(s) (see the check without --run)")
        sim = Simulator(program)
        overflows = sim.execute(sim.random_inputs() if isinstance(feeds, str) else feeds).overflows
    return check_program(program, overflows)


# ---------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------
def add_cli_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON (docs/CHECK_SCHEMA.md)")
    parser.add_argument("--run", action="store_true",
                        help="also run the model on seeded random input and report observed accumulator overflow")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                        help="run on this .npy input instead (implies --run; repeatable)")
    parser.add_argument("--quiet", action="store_true", help="print only nodes with findings, and the summary")


def cli_main(args, shapes) -> int:
    feeds = None
    if args.input:
        from .cli import _parse_feed, _read_npy
        feeds = {}
        for spec in args.input:
            name, path = _parse_feed(spec)
            feeds[name] = _read_npy(path, name)
    elif args.run:
        feeds = "random"
    result = check(args.model, board=args.board, input_shapes=shapes, feeds=feeds)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(format_result(result, quiet=args.quiet))
    return 0 if result.deployable else 1


def format_result(result: CheckResult, quiet: bool = False) -> str:
    """The text report: one line per node, its findings under it. A fix is written out where it first appears;
    the same fix again (a rule that hits many nodes) refers back to it."""
    lines = [f"npu-sim check: {result.model} on board '{result.board}'"]
    first_fix: dict[str, str] = {}  # fix text -> where it was written out
    width = min(40, max([len(n.node) for n in result.nodes] + [4]))
    opw = min(18, max([len(n.op) for n in result.nodes] + [2]))
    lines.append(f"{'node':{width}}  {'op':{opw}}  place  precision  findings")
    for f in result.model_findings:
        lines += _finding_lines(f, first_fix, "the model")
    for n in result.nodes:
        if quiet and not n.findings:
            continue
        counts = [f"{sum(f.severity == s for f in n.findings)} {s}" for s in SEVERITIES
                  if any(f.severity == s for f in n.findings)]
        name = n.node if len(n.node) <= width else "…" + n.node[-(width - 1):]
        lines.append(f"{name:{width}}  {n.op:{opw}}  {n.placement:5}  {n.precision:9}  {', '.join(counts) or 'ok'}")
        for f in n.findings:
            lines += _finding_lines(f, first_fix, n.node)
    npu = sum(n.placement == "NPU" for n in result.nodes)
    verdict = "DEPLOYABLE" if result.deployable else "NOT DEPLOYABLE"
    lines.append(f"summary: {len(result.nodes)} nodes ({npu} NPU, {len(result.nodes) - npu} CPU); "
                 f"{result.count('error')} error(s), {result.count('warning')} warning(s), "
                 f"{result.count('info')} info -> {verdict} on board '{result.board}'")
    by_rule: dict[str, int] = {}
    for _, f in result.findings:
        if f.severity != "info":
            by_rule[f"{f.severity} {f.rule}"] = by_rule.get(f"{f.severity} {f.rule}", 0) + 1
    if by_rule:
        lines.append("         " + "; ".join(f"{k} x{v}" for k, v in sorted(by_rule.items())))
    return "\n".join(lines)


def _finding_lines(f: Finding, first_fix: dict[str, str], where: str) -> list[str]:
    fix = f.fix if first_fix.setdefault(f.fix, where) == where else f"as for {first_fix[f.fix]} above"
    return [f"    {f.severity:7} {f.rule}: {f.message}", f"            fix: {fix}"]


# ---------------------------------------------------------------------------------------------------------------
# docs/SUPPORTED_OPS.md
# ---------------------------------------------------------------------------------------------------------------
def supported_ops_markdown() -> str:
    """The supported-operators document, generated from the rule table and the board presets."""
    from .board import load_board, presets
    from .ops import OPS
    out = ["# Supported operators and deployability rules", "",
           "Generated by `python docs/supported_ops.py` from the rule table in `npu_sim/checks.py` and the `[rules]`",
           "sections of the board presets in `npu_sim/boards/`; `tests/test_checks.py` fails when it is stale.", "",
           "`npu-sim check MODEL --board NAME` applies these rules. Severity: **error** = cannot deploy as is,",
           "**warning** = runs but hurts accuracy or speed, **info**.", ""]
    boards = [load_board(p) for p in presets()]
    for b in boards:
        r = b.rules or Rules()
        out += [f"## Board `{b.name}`", "", b.description, ""]
        if not r.constrained:
            out += ["No hardware rules: every op npu-sim lowers runs as is. Numeric hazards and lint still apply.", ""]
            continue
        out += [f"* activations: {', '.join(r.activation_dtypes)}; "
                "zero points " + ("allowed" if r.activation_zero_points is True else "must be 0 (symmetric)"
                                  if r.activation_zero_points is False else
                                  f"allowed for {', '.join(r.activation_zero_points)} only, else 0"),
                f"* weights: {', '.join(r.weight_dtypes)}; "
                f"zero points {'allowed' if r.weight_zero_points else 'must be 0 (symmetric)'}; "
                f"per-channel scales {'allowed' if r.per_channel_weights else 'not allowed'}",
                f"* accumulators: {b.arithmetic.accumulator_bits_8} bits (8-bit operands), "
                f"{b.arithmetic.accumulator_bits_16} bits (a 16-bit operand); requantization "
                f"{b.arithmetic.requantize}, multiplier {b.arithmetic.multiplier_bits} bits, right shift "
                f"{r.shift_min}..{r.shift_max}",
                f"* lookup tables: 256 entries (8-bit inputs), {b.arithmetic.lut_entries_16} interpolated entries "
                f"(16-bit inputs)",
                "* input stub: " + (f"symmetric, fixed scale {r.input_scale:g}" if r.input_scale else "any scale"),
                f"* ops not listed: {'CPU fallback (warning)' if r.cpu_fallback else 'not deployable (error)'}", "",
                "| op | kind | activations | weights | limits |", "|---|---|---|---|---|"]
        for op in sorted(r.ops):
            lim = r.ops[op]
            if not lim.npu:
                continue
            names = {"kernel_max": "kernel", "kernel_area_max": "kh·kw", "kernel_max_padded": "kernel (padded)",
                     "stride_max": "stride", "stride_max_valid": "stride (unpadded, undilated)",
                     "depthwise_stride_max": "depthwise stride", "dilation_max": "dilation", "pad_max": "pad",
                     "channels_max": "channels", "weight_abs_sum_max": "Σ|w| per output channel",
                     "bias_max": "|bias| <"}
            limits = [f"{label} {'' if label.endswith('<') else '≤ '}{getattr(lim, k)}" for k, label in names.items()
                      if getattr(lim, k) is not None]
            if lim.resize_scales is not None:
                limits.append("scale factors " + "/".join(f"{f}x" for f in lim.resize_scales))
            if lim.int16_max_reduction is not None:
                limits.append(f"int16 only if in_ch/groups·kh·kw ≤ {lim.int16_max_reduction}")
            w = ", ".join(lim.weight_dtypes or r.weight_dtypes) if _kind(op) == "mac" else "—"
            out.append(f"| {op} | {_kind(op)} | {', '.join(lim.activation_dtypes or r.activation_dtypes)} | {w} | "
                       f"{'; '.join(limits) or '—'} |")
        cpu = sorted(op for op in OPS if r.limits(op) is None)
        if cpu:
            out += ["", f"CPU fallback: {', '.join(cpu)}."]
        out.append("")
    out += ["## Rules", "", "Messages as the user reads them (`{…}` = measured value or board limit).", "",
            "| id | severity | group | message | fix |", "|---|---|---|---|---|"]
    for r in RULES:
        msg, fix = r.text
        out.append(f"| `{r.id}` | {r.severity} | {r.group} | {msg.replace('|', '/')} | {fix.replace('|', '/')} |")
    out.append("| `board.refusal` | error | board | the board's own toolchain refuses the node (e.g. LiteRT's "
               "no_integer_overflow_from_quantization under the tflite arithmetic) | fix the layer's quantization |")
    out.append("| `npu.arithmetic` | info | board | npu-sim cannot yet compute this op in the board's arithmetic "
               "(checked and estimated on its structure; `run` refuses the model on this board) | simulate on "
               "another board until it is covered |")
    out.append("| `npu.lowering` | warning (error without CPU fallback) | board | an op npu-sim cannot lower "
               "(unknown op, float island): it runs on the CPU in float and cannot be simulated | quantize it or "
               "replace it |")
    lint = Lint()
    out += ["", "Lint thresholds (board `[rules.lint]`, defaults): " +
            ", ".join(f"`{k}` = {getattr(lint, k)}" for k in Lint.__dataclass_fields__) + ".", ""]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `npu-sim check` or `python docs/supported_ops.py`")
