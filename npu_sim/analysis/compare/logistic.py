"""Variations of an int16 logistic, for ``explain``: LiteRT's optimized 16-bit LOGISTIC.

LiteRT's int16 LOGISTIC (TensorFlow 2.15, ``tensorflow/lite/kernels/activations.cc``): ``SigmoidPrepare`` leaves
the input multiplier 0 when the input scale is 2**-12 (Q3.12, a power of two by TFLite's float32 ``CheckedLog2``,
which accepts a scale within 2**+-0.001 of it); ``SigmoidEval`` then runs ``reference_integer_ops::Logistic`` (the
interpolated 256-entry table, ``kernels/tflite_sigmoid16.py``, what npu-sim computes) in the reference kernels
but ``optimized_ops::Logistic`` in the optimized ones. Every other input scale gets the reference arithmetic from
both kernel sets.

``optimized_ops::Logistic`` on int16 is the old gemmlowp fixed-point logistic (``gemmlowp::logistic`` of
``fixedpoint/fixedpoint.h``, the copy TensorFlow 2.15.1 ships), on the raw input read as Q3.12 (its scale is not
used) and written as Q0.15:

* ``logistic(a)`` = 1/2 at 0; ``f(|a|)`` for ``a > 0``; ``32767 - f(|a|)`` for ``a < 0``; with
  ``f(a) = 1 / (1 + exp(-a))`` as ``one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(-a))``;
* ``exp_on_negative_values``: ``a mod 1/4 - 1/4`` through a fourth-order Taylor polynomial around -1/8, then
  multiplied by ``exp(-1/4)``, ``exp(-1/2)``, ``exp(-1)``, ``exp(-2)``, ``exp(-4)`` for each bit set in the rest
  (a "barrel shifter"), exactly 1 at 0;
* ``one_over_one_plus_x_for_x_in_0_1``: three Newton-Raphson steps for ``1 / (1 + x)`` from ``48/17 - 32/17 d``
  (``d = (1 + x) / 2``) in Q2.13;
* every product is int16 ``SaturatingRoundingDoublingHighMul`` (``(a b + 2**14) / 2**15``, ties away from zero,
  -1 * -1 saturated); power-of-two rescales round half away from zero (right) or saturate (left); additions wrap
  at 16 bits except the last of the exponential (saturating); gemmlowp's constants are its 32-bit ones rounded to
  16 bits (``RoundingDivideByPOT(c, 16)``).

Measured (``models/tflite_logistic16.py``, tensorflow-cpu 2.15.1 on x86-64): on all 65,536 int16 codes at input
scale 2**-12 the optimized kernel differs from the reference kernel on 56,761 codes (up to 7 LSB), and this
arithmetic reproduces all 65,536; at 2**-12 times 1.0005 or 0.9995 the optimized kernel gives the same, at 2**-11,
2**-13, 2**-12 times 1.002 and other scales it equals the reference kernel. (On aarch64 the kernel's NEON loop
rounds its products with ``vqrdmulh``, ties toward +inf: not measured, not in the catalogue.)
"""
from __future__ import annotations

import numpy as np

from kernels.tflite_sigmoid16 import input_rescale

from npu_sim.ir import Node, Program

LITERT_LOGISTIC16 = "LiteRT optimized 16-bit LOGISTIC (gemmlowp's fixed-point logistic on the input as Q3.12)"
MIN16, MAX16 = -32768, 32767


def _wrap(x):
    """int16 wrap-around (C++'s cast of an int sum back to int16_t)."""
    return ((np.asarray(x, np.int64) - MIN16) & 0xFFFF) + MIN16


def _div_trunc(n, d: int):
    """C++'s integer division (toward zero) of an int64 array by a positive ``d``."""
    n = np.asarray(n, np.int64)
    return np.where(n >= 0, n // d, -((-n) // d))


def _mul(a, b):
    """gemmlowp's int16 SaturatingRoundingDoublingHighMul."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    high = _div_trunc(ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14)), 1 << 15)
    return np.where((a == MIN16) & (b == MIN16), MAX16, _wrap(high))


def _shift_right(x, e: int):
    """gemmlowp's RoundingDivideByPOT: ``x / 2**e``, ties away from zero."""
    x = np.asarray(x, np.int64)
    mask = (1 << e) - 1
    return (x >> e) + ((x & mask) > (mask >> 1) + (x < 0))


def _mul_pot(x, e: int):
    """gemmlowp's SaturatingRoundingMultiplyByPOT<e> on int16."""
    x = np.asarray(x, np.int64)
    if e <= 0:
        return _shift_right(x, -e) if e else x
    limit = (1 << (15 - e)) - 1
    return np.where(x > limit, MAX16, np.where(x < -limit, MIN16, x << e))


def _const(raw32: int) -> int:
    """A gemmlowp constant (given as a 32-bit raw value) in 16 bits: RoundingDivideByPOT(raw32, 16)."""
    return int(_shift_right(np.int64(raw32), 16))


def _half_sum(a, b):
    """gemmlowp's int16 RoundingHalfSum: ``(a + b) / 2``, ties away from zero."""
    s = np.asarray(a, np.int64) + b
    return _wrap(_div_trunc(s + np.where(s >= 0, 1, -1), 2))


def _exp_quarter(a):
    """exp(a) for Q0.15 ``a`` in [-1/4, 0): the Taylor polynomial around -1/8."""
    c, third = _const(1895147668), _const(715827883)  # exp(-1/8), 1/3
    x = _wrap(a + (1 << 12))  # a + 1/8
    x2 = _mul(x, x)
    x3, x4 = _mul(x2, x), _mul(x2, x2)
    poly = _mul_pot(_wrap(_mul(_wrap(_mul_pot(x4, -2) + x3), third) + x2), -1)  # x4/24 + x3/6 + x2/2
    return np.clip(c + _mul(c, _wrap(x + poly)), MIN16, MAX16)  # (AddSaturatingIf16Bit)


# exp(-2**k) for each bit of the barrel shifter, as gemmlowp's 32-bit raw Q0.31 constants
_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
           (4, 242))


def _exp_negative(a, integer_bits: int):
    """exp(a) in Q0.15 for a Q(integer_bits).(15 - integer_bits) ``a <= 0`` (gemmlowp's exp_on_negative_values)."""
    frac = 15 - integer_bits
    quarter = 1 << (frac - 2)
    part = _wrap((a & (quarter - 1)) - quarter)  # a mod 1/4 - 1/4, in [-1/4, 0)
    result = _exp_quarter(_mul_pot(part, integer_bits))  # (Rescale to Q0.15)
    rest = _wrap(part - a)
    for k, raw in _BARREL:
        if integer_bits > k:
            result = np.where((rest & (1 << (frac + k))) != 0, _mul(result, _const(raw)), result)
    return np.where(a == 0, MAX16, result)


def _one_over_one_plus(a):
    """1 / (1 + a) in Q0.15 for Q0.15 ``a`` in (0, 1): Newton-Raphson in Q2.13."""
    d = _half_sum(a, MAX16)
    x = _wrap(_const(1515870810) + _mul(d, _const(-1010580540)))  # 48/17 - 32/17 d
    for _ in range(3):
        x = _wrap(x + _mul_pot(_mul(x, _wrap((1 << 13) - _mul(d, x))), 2))
    return _mul_pot(x, 1)  # x / 2 (ExactMulByPot<-1>), Q1.14 -> Q0.15


def gemmlowp_logistic16(x, integer_bits: int = 3) -> np.ndarray:
    """gemmlowp's fixed-point logistic of int16 ``x`` read as Q(integer_bits), as int16 Q0.15 values (int64)."""
    a = np.asarray(x, np.int64)
    positive = a > 0
    magnitude = np.where(positive, a, _wrap(-a))  # (-32768 stays -32768, as in C++)
    f = _one_over_one_plus(_exp_negative(_wrap(-magnitude), integer_bits))
    return np.where(a == 0, _const(1 << 30), np.where(positive, f, _wrap(MAX16 - f)))


def logistic16_candidates(prog: Program, node: Node, inputs: list) -> list:
    """(name, the node's output under each variation, flat) for an int16 logistic whose input scale LiteRT takes
    as 2**-12 (zero points 0, output scale 2**-15); [] for other nodes."""
    if node.op != "Sigmoid" or len(inputs) != 1:
        return []
    xq, yq = prog.tensors[node.inputs[0]].q, prog.tensors[node.outputs[0]].q
    if xq is None or yq is None or xq.dtype != "int16" or yq.dtype != "int16" or not (xq.per_tensor
                                                                                     and yq.per_tensor):
        return []
    if int(xq.zero_point) or int(yq.zero_point) or np.float32(yq.scale) != np.float32(2.0 ** -15):
        return []
    if input_rescale("Sigmoid", float(xq.scale)) != (3, 0):  # not 2**-12 to LiteRT: both kernels agree
        return []
    y = gemmlowp_logistic16(np.asarray(inputs[0]).reshape(-1))
    lo, hi = node.clamp or (yq.qmin, yq.qmax)
    return [(LITERT_LOGISTIC16, np.clip(y, lo, hi))]
