"""Shared constructors of a lowered node's typed records (``npu_sim.ir``: ``Requant``, ``Accumulator``, ``Tables``,
the output ``clamp``), for the op families that make the node.

Each family describes its node where it makes it, from the values it has just computed (the multipliers it made at
the board's ``multiplier_bits``, the tables it built, its clamp); these helpers only fix the records' types (int64
per-channel multipliers and biases, float32 ratios) so that every family writes them alike. Other layers read the
records only, never a family's params.
"""
from __future__ import annotations

import numpy as np

from npu_sim.ir import Accumulator, QParams, Requant, Tables

TFLITE_MULTIPLIER_BITS = 31  # kernels.tflite_fixedpoint.tfl_quantize_multiplier: Q31 multipliers


def per_channel(value, dtype) -> np.ndarray:
    """``value`` as a flat array of ``dtype`` (the array itself where it already is one)."""
    return np.asarray(value, dtype).reshape(-1)


def _bias(bias) -> np.ndarray:
    return per_channel(np.zeros(1, np.int64) if bias is None else bias, np.int64)


def _zp(in_zp) -> int | None:
    return None if in_zp is None else int(in_zp)


def fixed_requant(arith, mult, shift, out_zp, qmin, qmax, bias=None, in_zp=None) -> Requant:
    """A fixed-point ``(mult, shift)`` requantization made at the board's ``multiplier_bits`` (``arith``: the
    lowering's ``Arithmetic``), rounding half up; ``bias`` None: none (zeros)."""
    return Requant("half_up", int(arith.multiplier_bits), per_channel(mult, np.int64), per_channel(shift, np.int64),
                   None, _bias(bias), _zp(in_zp), int(out_zp), int(qmin), int(qmax))


def float_requant(arith, ratio, out_zp, qmin, qmax, bias=None, in_zp=None) -> Requant:
    """onnxruntime's float32 ratio (the ``onnx`` arithmetic)."""
    return Requant("float32", int(arith.multiplier_bits), None, None, per_channel(ratio, np.float32), _bias(bias),
                   _zp(in_zp), int(out_zp), int(qmin), int(qmax))


def tflite_requant(mult, shift, out_zp, qmin, qmax, bias=None, in_zp=None) -> Requant:
    """TFLite's ``MultiplyByQuantizedMultiplier`` (double rounding) with Q31 multipliers."""
    return Requant("double", TFLITE_MULTIPLIER_BITS, per_channel(mult, np.int64), per_channel(shift, np.int64), None,
                   _bias(bias), _zp(in_zp), int(out_zp), int(qmin), int(qmax))


def accumulator(bits, saturate=False) -> Accumulator:
    return Accumulator(int(bits), bool(saturate))


def clamp(qmin, qmax) -> tuple[int, int] | None:
    """The output clamp ``(qmin, qmax)``; None where the node has no such bounds."""
    return None if qmin is None or qmax is None else (int(qmin), int(qmax))


def tables(entries: dict, in_q: QParams | None = None) -> Tables:
    """The node's lookup tables by name (``"table"``: the op's own, indexed by codes of ``in_q``; ``"exp"``,
    ``"recip"``, ``"rsqrt"``: internal ones)."""
    return Tables(dict(entries), in_q if "table" in entries else None)
