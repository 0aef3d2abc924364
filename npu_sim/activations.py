"""The lookup-table activations as data: one entry per ONNX op that the board computes with a table.

An entry gives the op's real function (float64, built from the node's ONNX attributes and, for Pow, its constant
exponent) and the input domains ``docs/LUT_ERRORS.md`` sweeps to measure its tables. ``npu_sim.opset`` lists the
entries as ops of kind ``lut``; ``npu_sim.ops.lut`` builds every table from ``function``; ``docs/lut_errors.py``
and the tests read the sweeps. Adding a LUT activation = one entry here (plus its measured bound in
``tests/test_lut_errors.py``); see docs/ARCHITECTURE.md, "Adding a LUT activation".

Every function returns no NaN on finite inputs: where ``f`` is undefined it takes the value of its continuous
extension from the domain boundary (the domain rules of ``npu_sim/ops/lut.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

Function = Callable[[np.ndarray], np.ndarray]


class ActivationError(ValueError):
    """The node's attributes or exponent define no function (Gelu ``approximate="fast"``, a non-finite exponent)."""


@dataclass(frozen=True)
class Sweep:
    """A domain measured in ``docs/LUT_ERRORS.md``: input range, output range (None: the function's range over the
    input codes), and the attributes / exponent of that row."""
    label: str
    x_range: tuple[float, float]
    y_range: tuple[float, float] | None = None
    attrs: tuple = ()                 # ONNX attributes as (name, value) pairs
    exponent: float | None = None     # Pow


@dataclass(frozen=True)
class LutActivation:
    op: str
    make: Callable[[dict, float | None], Function]  # (ONNX attributes, constant exponent or None) -> f
    sweeps: tuple[Sweep, ...]
    needs_exponent: bool = False      # a second input: a constant scalar (Pow's exponent)

    def function(self, attributes: dict | None = None, exponent: float | None = None) -> Function:
        if self.needs_exponent and exponent is None:
            raise ActivationError(f"{self.op} needs a constant scalar exponent")
        return self.make(attributes or {}, exponent)


# ---- the real functions, in float64 ---------------------------------------------------------------------------
_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    return _ERF(np.asarray(x, np.float64)).astype(np.float64)


def sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _f32(a: dict, name: str, default: float) -> float:
    """A float attribute as the model stores it (float32)."""
    return float(np.float32(a.get(name, default)))


def _gelu(a: dict, _) -> Function:
    approximate = a.get("approximate", "none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    if approximate == "none":
        return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        return lambda x: 0.5 * x * (1.0 + np.tanh(k * (x + 0.044715 * x ** 3)))
    raise ActivationError(f"Gelu approximate={approximate!r} is not 'none' or 'tanh'")


def _hard_sigmoid(a: dict, _) -> Function:
    alpha, beta = _f32(a, "alpha", 0.2), _f32(a, "beta", 0.5)
    return lambda x: np.clip(alpha * x + beta, 0.0, 1.0)


def _elu(a: dict, _) -> Function:
    alpha = _f32(a, "alpha", 1.0)
    return lambda x: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


def _pow(_, c: float) -> Function:
    c = float(c)
    if not math.isfinite(c):
        raise ActivationError(f"Pow exponent {c!r} is not finite")
    if c == int(c):  # an integer exponent: defined for every real base (0**negative = inf)
        return lambda x: np.power(x, c)
    return lambda x: np.power(np.maximum(x, 0.0), c)  # continuous extension from the boundary 0


def _fixed(f: Function):
    return lambda a, c: f


def _entry(op: str, make, *sweeps: Sweep, needs_exponent: bool = False) -> tuple[str, LutActivation]:
    return op, LutActivation(op, make, sweeps or (Sweep(op, (-8, 8)),), needs_exponent)


LUT_ACTIVATIONS: dict[str, LutActivation] = dict([
    _entry("Sigmoid", _fixed(sigmoid)),
    _entry("Tanh", _fixed(np.tanh)),
    _entry("Exp", _fixed(np.exp), Sweep("Exp", (-8, 2))),
    _entry("Log", _fixed(lambda x: np.log(np.maximum(x, 0.0))), Sweep("Log", (0, 8), (-4, math.log(8)))),
    _entry("Sqrt", _fixed(lambda x: np.sqrt(np.maximum(x, 0.0))), Sweep("Sqrt", (0, 8))),
    _entry("Reciprocal", _fixed(lambda x: 1.0 / x), Sweep("Reciprocal", (0, 8), (0, 4))),
    _entry("Sin", _fixed(np.sin)),
    _entry("Cos", _fixed(np.cos)),
    _entry("Erf", _fixed(erf), Sweep("Erf", (-4, 4))),
    _entry("Gelu", _gelu, Sweep("Gelu", (-8, 8)), Sweep("Gelu tanh", (-8, 8), attrs=(("approximate", "tanh"),))),
    _entry("HardSigmoid", _hard_sigmoid),
    _entry("HardSwish", _fixed(lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0))),
    _entry("Softplus", _fixed(lambda x: np.logaddexp(0.0, x))),
    _entry("Elu", _elu),
    _entry("Pow", _pow, Sweep("Pow 2", (-8, 8), exponent=2.0), Sweep("Pow 3", (-4, 4), exponent=3.0),
           Sweep("Pow 0.5", (0, 8), exponent=0.5), needs_exponent=True),
])
