"""A board's ``[rules]`` section: what its NPU accepts, as data (checked by ``npu_sim.analysis.check``).

Every key is an ``entry`` of the records below (the schema: ``npu_sim.boards.schema``, docs/BOARDS.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

from npu_sim.boards.fields import entry

# dtype -> the onnxruntime QuantType member that quantizes to it (quantize_static activation_type/weight_type)
QUANT_TYPES = {"int8": "QInt8", "uint8": "QUInt8", "int16": "QInt16", "uint16": "QUInt16", "int4": "QInt4",
               "uint4": "QUInt4"}


def _bits(dtype: str) -> int:
    return int(dtype.lstrip("uint"))


def taken_dtype(dtype: str, allowed) -> str:
    """The dtype a board that takes ``allowed`` wants in place of ``dtype``, changing as little as it can: ``dtype``
    itself; else the same width with the other signedness; else the narrowest allowed one at least as wide; else
    the widest allowed (signed before unsigned)."""
    if dtype in allowed or not allowed:
        return dtype
    other = dtype[1:] if dtype.startswith("u") else "u" + dtype
    if other in allowed:
        return other
    order = sorted(allowed, key=lambda d: (_bits(d), d.startswith("u")))
    wider = [d for d in order if _bits(d) >= _bits(dtype)]
    return wider[0] if wider else max(order, key=lambda d: (_bits(d), not d.startswith("u")))


@dataclass(frozen=True, kw_only=True)
class OpLimits:
    """Limits of one op type (``[rules.ops.OP]``) or of every op of a kind (``[rules.kinds.KIND]``) on the NPU;
    a key left out: no limit, or the board-wide value."""
    npu: bool = entry(True, "the op runs on the NPU (false: on the CPU)")
    activation_dtypes: tuple[str, ...] | None = entry(None, "activation dtypes (default: rules.activation_dtypes)",
                                                      "dtypes")
    weight_dtypes: tuple[str, ...] | None = entry(None, "weight dtypes (default: rules.weight_dtypes)", "dtypes")
    kernel_max: int | None = entry(None, "largest kernel height/width", "int", range=(0, None))
    stride_max: int | None = entry(None, "largest stride", "int", range=(0, None))
    dilation_max: int | None = entry(None, "largest dilation", "int", range=(0, None))
    pad_max: int | None = entry(None, "largest padding", "int", range=(0, None))
    channels_max: int | None = entry(None, "most input and output channels", "int", range=(0, None))
    int16_max_reduction: int | None = entry(None, "int16 MACs only when in_ch/groups * kh * kw <= this", "int",
                                            range=(0, None))
    stride_max_valid: int | None = entry(None, "stride limit when unpadded with dilation 1 (default: stride_max)",
                                         "int", range=(0, None))
    depthwise_stride_max: int | None = entry(None, "largest stride of a depthwise convolution", "int",
                                             range=(0, None))
    kernel_area_max: int | None = entry(None, "largest kh * kw", "int", range=(0, None))
    kernel_max_padded: int | None = entry(None, "kernel size limit when the op pads its input", "int",
                                          range=(0, None))
    weight_abs_sum_max: int | None = entry(None, "largest sum of |w - zw| over one output channel", "int",
                                           range=(0, None))
    bias_max: int | None = entry(None, "|bias| must stay below this (the accumulator's headroom)", "int",
                                 range=(0, None))
    resize_scales: tuple[int, ...] | None = entry(None, "allowed integer upscale factors (1 = same size)", "ints")
    dynamic_dtypes: tuple[str, ...] | None = entry(None, "activation dtypes when both MAC operands are activations",
                                                   "dtypes")


@dataclass(frozen=True, kw_only=True)
class Lint:
    """``[rules.lint]``: thresholds of the quantization-friendliness lint and the numeric-hazard warnings."""
    kernel_max: int = entry(3, "larger Conv/AveragePool kernels: a warning", range=(0, None))
    concat_range_ratio: float = entry(8.0, "Concat inputs whose ranges differ more than this: a warning",
                                      range=(0.0, None))
    activation_range_max: float = entry(1000.0, "|calibrated activation| above this: an outlier warning",
                                        range=(0.0, None))
    weight_range_max: float = entry(16.0, "|weight| above this: a warning", range=(0.0, None))
    weight_scale_ratio_max: float = entry(1000.0, "max/min per-channel weight scale above this: a warning",
                                          range=(0.0, None))
    dead_channel_ratio: float = entry(1e-6, "a channel whose max|w| is below this times the layer's: dead",
                                      range=(0.0, None))
    bias_range_factor: float = entry(4.0, "|bias| alone beyond this many output ranges: an implausible bias",
                                     range=(0.0, None))
    lut_heavy_count: int = entry(8, "more LUT ops than this (Softmax/LayerNorm count 3): heavy use",
                                 range=(0, None))


@dataclass(frozen=True, kw_only=True)
class Rules:
    """The board's ``[rules]`` section. ``constrained = False`` (no section): no hardware rules, only hazards
    and lint."""
    constrained: bool = False
    cpu_fallback: bool = entry(True, "ops the NPU cannot run fall back to the CPU (a warning; false: an error)")
    activation_dtypes: tuple[str, ...] = entry(("int8", "uint8", "int16", "uint16"),
                                               "activation dtypes the NPU takes", "dtypes")
    weight_dtypes: tuple[str, ...] = entry(("int4", "uint4", "int8", "uint8", "int16", "uint16"),
                                           "weight dtypes the NPU takes", "dtypes")
    activation_zero_points: bool | tuple[str, ...] = entry(True, "activations may have zero points (or: the "
                                                             "dtypes that may)", "zero_points")
    weight_zero_points: bool = entry(True, "weights may have zero points (false: symmetric only)")
    per_channel_weights: bool = entry(True, "per-channel weight scales allowed")
    shift_min: int = entry(0, "smallest legal right shift of the requantization multiplier", range=(0, None))
    shift_max: int = entry(62, "largest legal right shift; factors needing more flush to zero", range=(0, None))
    input_scale: float = entry(0.0, "the input stub's fixed scale (0: any)", range=(0.0, None))
    npu_compiler: str = entry("none", "the compiler that takes the NPU nodes (vela: Arm's Vela 5.2); the host "
                              "runtime's prepare-time refusals (LiteRT's) then apply to the CPU nodes only, and a "
                              "degenerate quantization the compiler accepts is a hazard warning",
                              choices=("none", "vela"))
    ops: dict = field(default_factory=dict)  # op type -> OpLimits ([rules.kinds.*] merged with [rules.ops.*])
    lint: Lint = field(default_factory=Lint)

    def zero_points_allowed(self, dtype: str) -> bool:
        """Whether activations of ``dtype`` may have a non-zero zero point on this board."""
        z = self.activation_zero_points
        return z is True or (z is not False and dtype in z)

    def activation_setting(self, dtype: str, allowed=None) -> tuple[str, bool]:
        """How an activation quantized as ``dtype`` must be quantized for this board, changing as little as the
        board needs: the dtype it takes (``taken_dtype`` of ``allowed``, an op's own activation dtypes, default
        the board's) and whether it must be symmetric (zero point 0). A symmetric one is signed where the board
        takes that width signed (an unsigned type cannot hold a zero point of 0 with negative values)."""
        allowed = allowed or self.activation_dtypes
        new = taken_dtype(dtype, allowed)
        symmetric = not self.zero_points_allowed(new)
        if symmetric and new.startswith("u") and new[1:] in allowed:
            new = new[1:]
        return new, symmetric

    def weight_setting(self, dtype: str, allowed=None) -> tuple[str, bool]:
        """How weights quantized as ``dtype`` must be quantized for this board: the dtype it takes and whether
        they must be symmetric (as ``activation_setting``)."""
        allowed = allowed or self.weight_dtypes
        new = taken_dtype(dtype, allowed)
        if not self.weight_zero_points and new.startswith("u") and new[1:] in allowed:
            new = new[1:]
        return new, not self.weight_zero_points

    def limits(self, op: str) -> OpLimits | None:
        """The op's limits on the NPU, or None when the op runs on the CPU."""
        if not self.constrained:
            return OpLimits()
        lim = self.ops.get(op)
        return lim if lim is not None and lim.npu else None
