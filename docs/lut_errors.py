"""Measured error of the lookup-table ops on the fixed-point board: writes docs/LUT_ERRORS.md.

    python docs/lut_errors.py           # print the markdown and rewrite docs/LUT_ERRORS.md
    python docs/lut_errors.py --check   # exit 1 if docs/LUT_ERRORS.md is not current

Every op is lowered exactly as a model's node would be (``npu_sim.ops.lut``, board ``default``), at
representative quantizations (onnxruntime-style asymmetric ranges of the domains each activation's entry in
``npu_sim.activations`` gives), and run through the kernels on every input
code (8 bits: 256 codes; 16 bits: all 65536). The error of a code is ``|board output - exact|`` in output LSBs,
with ``exact = clamp(f(x) / s_out + z_out, qmin, qmax)``: ``f`` in float64 at the dequantized input ``x``, real
valued (unrounded), saturated. ``tests/test_lut_errors.py`` recomputes this file and checks it is current.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from onnx import helper

from npu_sim.activations import LUT_ACTIVATIONS
from npu_sim.boards import Arithmetic
from npu_sim.ir import Node, QParams, Tensor
from npu_sim.lowering.registry import lowering_of
from npu_sim.ops import lut

DOC = Path(__file__).resolve().parent / "LUT_ERRORS.md"
DTYPES = ("int8", "int16")
QRANGE = {"int8": (-128, 127), "int16": (-32768, 32767)}
ENTRIES = Arithmetic().lut_entries_16


@dataclass(frozen=True)
class Config:
    label: str
    op: str
    x_range: tuple[float, float]
    y_range: tuple[float, float] | None = None  # None: the function's range over the input codes
    attrs: tuple = ()                            # ONNX attributes as (name, value) pairs
    exponent: float | None = None                # Pow


# one row per domain of every LUT activation (npu_sim.activations: each entry's sweeps)
CONFIGS = [Config(s.label, a.op, s.x_range, s.y_range, s.attrs, s.exponent)
           for a in LUT_ACTIVATIONS.values() for s in a.sweeps]
DIV = {"a": (-8, 8), "b": (0, 8), "y": (-32, 32)}  # Div a/b: divisors below 0.25 saturate the output
DIV_UNSATURATED = 0.25  # divisors from which no quotient saturates


def quant(dtype: str, lo: float, hi: float) -> QParams:
    """onnxruntime-style asymmetric quantization of [lo, hi] (widened to include 0)."""
    qmin, qmax = QRANGE[dtype]
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = np.float32((hi - lo) / (qmax - qmin))
    zp = int(np.clip(np.rint(qmin - lo / float(scale)), qmin, qmax))
    return QParams(dtype, np.array(scale, np.float32), np.array(zp, np.int64))


def _stub(requantize: str = "fixedpoint"):
    return SimpleNamespace(arith=Arithmetic(requantize=requantize, rounding="half_up" if requantize == "fixedpoint"
                                            else "half_even"),
                           node_name=lambda onode: onode.op_type, opset=20)


def _args(cfg: Config, x: Tensor) -> list:
    return [x, np.array(cfg.exponent, np.float32)] if cfg.exponent is not None else [x]


def _onode(cfg: Config):
    ins = ["x", "e"] if cfg.exponent is not None else ["x"]
    return helper.make_node(cfg.op, ins, ["y"], **dict(cfg.attrs))


def quantizations(cfg: Config, dtype: str) -> tuple[QParams, QParams]:
    in_q = quant(dtype, *cfg.x_range)
    if cfg.y_range is not None:
        return in_q, quant(dtype, *cfg.y_range)
    f = lut.function_for(cfg.op, dict(cfg.attrs), cfg.exponent)
    y = lut.evaluate(f, in_q.dequantize(lut.all_codes(in_q)).astype(np.float64))
    y = y[np.isfinite(y)]
    return in_q, quant(dtype, float(y.min()), float(y.max()))


def lowered(cfg: Config, dtype: str):
    """The board's node for this op, lowered by ``npu_sim.ops.lut`` as a model's node would be."""
    in_q, out_q = quantizations(cfg, dtype)
    x = Tensor("x", "x", (1,), in_q)
    y = Tensor("y", "y", (1,), out_q)
    return lut.lower_lut(_stub(), _onode(cfg), _args(cfg, x), y, None)


def onnx_board_codes(cfg: Config, in_q: QParams, out_q: QParams) -> np.ndarray:
    """The ``onnx`` board on every input code: ONNX's definition (float32 op via onnx.reference, quantize)."""
    x = Tensor("x", "x", (256,), in_q)
    y = Tensor("y", "y", (256,), out_q)
    node = lowering_of("onnx", cfg.op).lower(_stub("onnx"), _onode(cfg), _args(cfg, x), y, None)
    ctx = SimpleNamespace(tensor=lambda name: x)
    with np.errstate(all="ignore"):  # log(0) and friends: ONNX's own -inf / NaN
        return node.run(node, [lut.all_codes(in_q)], ctx)[0]


def _fmt(v: float) -> str:
    return f"{v:.2f}" if v < 100 else f"{v:.0f}"


def measure_luts() -> list[dict]:
    """One record per config: the 8-bit and 16-bit errors (max, mean), the 16-bit ones without correction, the
    8-bit comparison with the float32 ONNX definition."""
    records = []
    for cfg in CONFIGS:
        p8 = lut.table_view(lowered(cfg, "int8"))
        e8 = lut.table_errors(p8)
        board = lut.apply_table(p8, lut.all_codes(p8["_in_q"]), p8["_out_q"].np_dtype)
        ref = onnx_board_codes(cfg, p8["_in_q"], p8["_out_q"])
        diff = np.abs(board.astype(np.int64) - ref.astype(np.int64))
        p16 = lut.table_view(lowered(cfg, "int16"))
        e16 = lut.table_errors(p16)
        plain = lut.table_params(p16["_f"], p16["_in_q"], p16["_out_q"], p16["qmin"], p16["qmax"], ENTRIES, "none")
        n16 = lut.table_errors(plain)
        worst = float(p16["_in_q"].dequantize(lut.all_codes(p16["_in_q"])[[int(e16.argmax())]])[0])
        records.append({"label": cfg.label, "x_range": cfg.x_range, "y8": _yr(p8), "y16": _yr(p16),
                        "max8": float(e8.max()), "mean8": float(e8.mean()),
                        "f32_diff_entries": int(np.count_nonzero(diff)), "f32_max_diff": int(diff.max()),
                        "max16": float(e16.max()), "mean16": float(e16.mean()),
                        "max16_plain": float(n16.max()), "mean16_plain": float(n16.mean()), "worst16_x": worst})
    return records


def _yr(p: dict) -> tuple[float, float]:
    q = p["_out_q"]
    s, z = float(q.scale), int(q.zero_point)
    return (s * (q.qmin - z), s * (q.qmax - z))


def _range(r) -> str:
    return f"[{r[0]:.3g}, {r[1]:.3g}]"


def lowered_div(dtype: str):
    qa, qb, qy = (quant(dtype, *DIV[k]) for k in ("a", "b", "y"))
    args = [Tensor("a", "a", (1,), qa), Tensor("b", "b", (1,), qb)]
    return lut.lower_div_by_activation(_stub(), helper.make_node("Div", ["a", "b"], ["y"]), args,
                                       Tensor("y", "y", (1,), qy), None)


def div_errors(dtype: str, a_count: int | None = None, b_min: float = 0.0) -> tuple[np.ndarray, Node]:
    """|board - exact| over (a, b) pairs: every a code (or ``a_count`` evenly spread, extremes included) x every
    covered divisor code with |b| >= ``b_min``."""
    node = lowered_div(dtype)
    p = node.params
    qa, qb = node.operands.a.q, node.operands.b.q
    a = lut.all_codes(qa)
    if a_count is not None:
        a = a[np.unique(np.linspace(0, a.size - 1, a_count).round().astype(np.int64))]
    b = lut.all_codes(qb)
    bv = qb.dequantize(b).astype(np.float64)
    keep = (bv != 0) & (np.abs(bv) >= b_min)
    if not p["_lossless"]:
        with np.errstate(divide="ignore"):
            keep &= np.abs(1.0 / bv) <= lut.RECIP_QMAX * p["recip_scale"]
    aa, bb = np.meshgrid(a, b[keep], indexing="ij")
    shape = aa.shape
    ctx = SimpleNamespace(shape_of=lambda name: shape)
    got = node.run(node, [aa, bb], ctx)[0].astype(np.float64)
    v = qa.dequantize(aa).astype(np.float64) / qb.dequantize(bb).astype(np.float64)
    rq = node.requant
    exact = np.clip(v / p["_sy"] + rq.out_zp, rq.qmin, rq.qmax)
    return np.abs(got - exact), node


def measure_div() -> list[dict]:
    records = []
    for dtype, count in (("int8", None), ("int16", 129)):
        for b_min in (0.0, DIV_UNSATURATED):
            err, node = div_errors(dtype, count, b_min)
            p = node.params
            records.append({"dtype": dtype, "a_count": count, "b_min": b_min, "s_r": p["recip_scale"],
                            "lossless": bool(p["_lossless"]), "min_divisor": p["min_divisor"],
                            "max": float(err.max()), "mean": float(err.mean()),
                            "bound": lut.div_error_bound(node) if b_min == 0 else None})
    return records


def measure() -> dict:
    return {"luts": measure_luts(), "div": measure_div()}


HEADER = """# Lookup-table ops: measured error

Generated by `python docs/lut_errors.py` (do not edit; `tests/test_lut_errors.py` checks it is current).
Semantics: `npu_sim/ops/lut.py`. Board `default` (`lut_entries_16 = {entries}`). Quantizations are onnxruntime-style
asymmetric ranges (widened to include 0): the input range below, the output range of the function over the input
codes unless given. Error of one input code = |board output - exact| in output LSBs, exact =
`clamp(f(x) / s_out + z_out, qmin, qmax)` with `f` in float64 at the dequantized input `x` (real valued, unrounded).
Max and mean are over every input code (all 256; all 65536).

## 8-bit inputs (256-entry tables)

The table is the correctly rounded quantization of the float64 function (round half to even), so the error is at
most 0.5 LSB. ONNX / onnxruntime evaluate `f` in float32: the last two columns compare the table with the `onnx`
board (onnx.reference in float32, then QuantizeLinear) on all 256 codes -- they differ only where `f(x)/s_out`
lies within float32 rounding of a half-integer.

| op | input range | output range | max err (LSB) | mean err | entries != float32 ONNX | max diff |
|---|---|---|---|---|---|---|
"""

MID16 = """
## 16-bit inputs ({entries} entries, linear interpolation)

Entry `j` sits at input code `qmin + j * 2^(16-k)`; between entries the kernel interpolates in fixed point (one
rounding, ties toward +infinity). Columns: with the midpoint correction the board uses, and without it
(entries = rounded function values). The error has three parts: entry rounding (<= 0.5), interpolation rounding
(<= 0.5), and the chord error of the function over a segment of 2^(16-k) codes, which dominates wherever the
curvature is high relative to the output scale: near the singular point of Log / Sqrt / Pow 0.5 (x -> 0), at the
saturation corner of Reciprocal, at kinks (HardSigmoid, HardSwish, Elu), and at the top end of steep functions
(Exp, Pow), where the last entry, one step past the largest input code, must be clamped to the output range.
"worst at x" is the input value of the largest error. The chord error scales with the slope in output codes per
input code, `s_in f'(x) / s_out`: a segment that straddles a kink, or the point where a narrower output range (or
a folded Clip) saturates a steep function, costs up to about `slope * 2^(16-k) / 4` LSBs -- hundreds of LSBs for
slopes of a few codes per code. The ranges below are matched as onnxruntime's calibration matches them (output
range = the function's range over the input range).

| op | input range | output range | max err (LSB) | mean err | max, no correction | mean, no correction | worst at x |
|---|---|---|---|---|---|---|---|
"""

DIV_TEXT = """
## Div by an activation (reciprocal table + integer Mul)

`a` in {a}, divisor `b` in {b}, output in {y}: quotients saturate for some dividends when `b < {bu}`.
Reciprocal codes are int16 at the internal scale `s_r` (see `npu_sim/ops/lut.py`); errors are against the exact
quotient `a/b` (clamped), over every divisor code of the domain and the dividends listed (all 256, or 129 evenly
spread codes with both extremes). "proven bound" is `lut.div_error_bound` over every dividend and covered divisor.
For 16-bit tensors the precision cap (at most {budget} LSB from the reciprocal's rounding at the largest dividend)
limits `s_r`, so divisors below `1/(32767 s_r)` use a saturated reciprocal. Small covered divisors keep large
errors (the chord of 1/b over 2^(16-k) codes near 0); the rows `b >= {bu}` show the error where no quotient
saturates.

| divisor | s_r | divisors | dividends | max err (LSB) | mean err | proven bound |
|---|---|---|---|---|---|---|
"""


def render(data: dict | None = None) -> str:
    data = measure() if data is None else data
    text = HEADER.format(entries=ENTRIES)
    for r in data["luts"]:
        text += (f"| {r['label']} | {_range(r['x_range'])} | {_range(r['y8'])} | {r['max8']:.3f} | {r['mean8']:.3f} "
                 f"| {r['f32_diff_entries']} | {r['f32_max_diff']} |\n")
    text += MID16.format(entries=ENTRIES)
    for r in data["luts"]:
        text += (f"| {r['label']} | {_range(r['x_range'])} | {_range(r['y16'])} | {_fmt(r['max16'])} "
                 f"| {r['mean16']:.3f} | {_fmt(r['max16_plain'])} | {r['mean16_plain']:.3f} | {r['worst16_x']:.4g} |\n")
    text += DIV_TEXT.format(a=_range(DIV["a"]), b=_range(DIV["b"]), y=_range(DIV["y"]), bu=DIV_UNSATURATED,
                            budget=lut.DIV_ROUNDING_BUDGET)
    for r in data["div"]:
        covered = "b != 0" if r["lossless"] else f"abs(b) >= {r['min_divisor']:.3g}"
        domain = covered if r["b_min"] == 0 else f"b >= {r['b_min']:g}"
        pairs = "all a codes" if r["a_count"] is None else f"{r['a_count']} a codes"
        bound = "" if r["bound"] is None else _fmt(r["bound"])
        text += (f"| {r['dtype']} | {r['s_r']:.4g} | {domain} | {pairs} | {_fmt(r['max'])} | {r['mean']:.3f} "
                 f"| {bound} |\n")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that docs/LUT_ERRORS.md is current")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        print("current" if current == text else f"{DOC} is stale: run python docs/lut_errors.py")
        return 0 if current == text else 1
    print(text, end="")
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
