"""A board's ``[rules]`` section: what its NPU accepts, as data (checked by ``npu_sim.analysis.check``).

Parsed when the board is loaded, so a bad file fails at once with the key at fault."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from npu_sim.errors import BoardError
from npu_sim.ir import BITS
from npu_sim.opset import OPS


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
