"""Lookup-table ops: Sigmoid, Tanh, Exp, Log, Sqrt, Reciprocal, Sin, Cos, Erf, Gelu, HardSigmoid, HardSwish,
Softplus, Elu, Pow (constant scalar exponent), and Div by an activation (a reciprocal table, then an integer Mul).

Board integer semantics (``fixedpoint`` arithmetic; the ``onnx`` arithmetic keeps the ONNX definition of the QDQ
group -- dequantize, the op in float32, quantize -- see ``onnx_arith``):

**The table** is built once, at lowering, from the op's real function ``f`` between the input quantization
``(sx, zx)`` and the output quantization ``(sy, zy)`` (a Relu/Clip folded into the group clips ``f`` first):

    x(q)   = float32((q - zx) * sx)                 # exactly ONNX DequantizeLinear (float32)
    v(q)   = f(float64(x(q))) / float64(sy) + zy    # f evaluated in float64
    T(q)   = clamp(round_half_even(v(q)), qmin, qmax)

``f`` is computed in float64 (numpy; ``math.erf``), not in float32 as ONNX / onnxruntime evaluate it: the table
is the correctly rounded quantization of the exact function at the dequantized input (error <= 0.5 LSB). The
float32 evaluation rounds differently only where ``v`` lies within float32 rounding of a half-integer:
``docs/LUT_ERRORS.md`` counts those entries (0 to 4 of 256 per op at the representative scales, 1 LSB each).

* **8-bit inputs** (int8/uint8, and int4/uint4 stored in 8 bits): 256 entries, one per storage code; the kernel
  is a gather ``y = T[q - qmin_in]`` (``kernels/lut8.py``): bit-exact with the rule above by construction.
* **16-bit inputs** (int16/uint16): the board holds ``E = lut_entries_16 = 2**k + 1`` entries (int16, or
  uint16 for a uint16 output), entry ``j`` at input code ``c_j = qmin_in + j * 2**(16-k)``; the last entry lies
  one step past the largest code (``f`` is simply evaluated there, and clamped like every entry: a function
  still rising steeply at the top of the output range loses accuracy in the last segment). Entries are
  ``clamp(round_half_even(v(c_j) - m_j))`` with the midpoint correction ``m_j`` below. At run time
  (``kernels/lut16.py``), with ``s = 16 - k``::

      u = q - qmin_in;  i = u >> s;  frac = u & (2**s - 1)
      y = clamp(T[i] + (((T[i+1] - T[i]) * frac + 2**(s-1)) >> s), qmin, qmax)     # int64, floor shift

  *Midpoint correction* (same idea as TFLite's ``LUTPopulateInt16``, formulated here on the saturated target):
  with ``w(c) = clamp(v(c), qmin, qmax)`` (real valued) and the interpolation excess of segment ``i`` at its
  middle ``e_i = (w(c_i) + w(c_{i+1})) / 2 - w(c_i + 2**(s-1))``, entry ``j`` is lowered by half the mean excess
  of the segments it bounds, ``m_j = (e_{j-1} + e_j) / 4`` (one segment at either end: ``e_0 / 2``,
  ``e_{E-2} / 2``), and limited to half the smaller step to either neighbour ``|w(c_j) - w(c_{j+-1})| / 2``
  so that the entries keep the order of ``w`` (a monotone function keeps a monotone table, e.g. across a
  saturated flat part). For a convex or concave segment this splits the chord error evenly above and below
  ``f``; ``docs/LUT_ERRORS.md`` measures it against the uncorrected table (e.g. Tanh 3.99 -> 2.42 LSB).

**Domains.** Where ``f`` is undefined the table takes the value of its continuous extension from the domain
boundary, so no entry is ever NaN: Log(x <= 0) = log(+0) = -inf, saturating to ``qmin``; Sqrt(x < 0) = 0;
Pow(x < 0, c) with a non-integer ``c`` = 0**c (0 for c > 0, +inf -> ``qmax`` for c < 0, 1 for c == 0).
Reciprocal(+0) = +inf -> ``qmax`` (the zero-point code dequantizes to +0.0); Exp overflow -> ``qmax``. The
``onnx`` board keeps ONNX's NaN there (QuantizeLinear of NaN, implementation defined).

**Pow** needs a constant scalar exponent ``c`` (its float32 value as the model dequantizes it).
**Gelu** (opset 20): ``approximate="none"``: ``x/2 (1 + erf(x/sqrt 2))``; ``"tanh"``:
``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``. HardSigmoid / Elu read ``alpha``/``beta`` as the float32
attribute values.

**Div by an activation** ``y = a / b``:

* dividend a constant scalar ``c``: one table of ``f(x) = c / x`` on ``b`` (exactly as above);
* otherwise ``r = R(b)``, a reciprocal table on the divisor with **int16 output codes at an internal scale**
  ``s_r = float32(Rmax / 32767)``, zero point 0, entries ``clamp(round_half_even((1/b) / s_r), -32767, 32767)``
  (8-bit divisor: 256 entries; 16-bit divisor: the interpolated table above, midpoint-corrected); then the
  integer Mul of ``kernels/mul.py``:
  ``y = clamp(mul_round_shift((a - za) * r, M, n) + zy, qmin, qmax)`` with ``(M, n)`` for ``sa * s_r / sy``.

  ``Rmax = min(1 / min|b|, L * sy / sa, 2 * B * 32767 * sy / max|a|)``, ``min|b|`` over the divisor's non-zero
  codes, ``L`` = the largest distance from ``zy`` to a clamp bound, plus one, ``B = DIV_ROUNDING_BUDGET`` = 4.
  The first two terms are the *lossless* range: ``|1/b| > L sy / sa`` makes ``|a / b| >= L sy`` for every
  non-zero ``a``, i.e. the output saturates whatever the exact reciprocal is, so those entries may saturate at
  +-32767; and no divisor code has a reciprocal above ``1 / min|b|``. The third term is a precision cap: the
  rounding of ``r`` (``s_r / 2``) costs at most ``B`` output LSBs at the largest dividend. With an 8-bit
  dividend and output (``L <= 256``, ``max|a| <= 255 sa``) the lossless range is always the smaller (measured:
  at most 0.51 LSB from the exact quotient, ``docs/LUT_ERRORS.md``); with 16-bit ones the lossless range would
  leave ``r`` only a few significant bits, so the cap applies and divisors with ``|b| < 1 / Rmax``
  (``min_divisor``) use the saturated reciprocal +-Rmax. A divisor code equal to its zero point (b = +0) gets
  ``r = +32767``: the board returns ``a * Rmax`` where ONNX gives +-inf (saturated) or NaN (0/0).
  ``div_error_bound`` proves a bound on the error of the whole Div against the exact quotient from the measured
  reciprocal error (``element_error_bounds``: per element, for given inputs).
"""
from __future__ import annotations

import math
import numpy as np

from kernels.fixedpoint import quantize_multiplier
from kernels.lut16 import lut16
from kernels.lut8 import lut8
from kernels.mul import mul

from npu_sim.activations import LUT_ACTIVATIONS, ActivationError, Function
from npu_sim.ir import Node, Operands, QParams, Tensor
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import attrs, check_per_tensor, clamp_bounds, const_value, operand

CORRECTIONS = ("midpoint", "none")
DEFAULT_CORRECTION = "midpoint"
RECIP_QMAX = 32767  # reciprocal codes of Div: int16, symmetric [-32767, 32767], zero point 0
DIV_ROUNDING_BUDGET = 4  # Div: output LSBs the rounding of the reciprocal may cost at the largest dividend


# ================================================================================================================
# the real functions, in float64 (one entry per op in npu_sim.activations)
# ================================================================================================================
def function_for(op: str, attributes: dict | None = None, exponent: float | None = None) -> Function:
    """The float64 function of a LUT op (``attributes``: the ONNX attributes; ``exponent``: Pow's constant), from
    its entry in ``npu_sim.activations.LUT_ACTIVATIONS``.

    Every function returns no NaN on finite inputs (see the module docstring for the domain rules).
    """
    entry = LUT_ACTIVATIONS.get(op)
    if entry is None:
        raise Problem(f"{op} has no lookup-table function")
    try:
        return entry.function(attributes, exponent)
    except ActivationError as exc:
        raise Problem(str(exc)) from None


def clipped(f: Function, act) -> Function:
    """``f`` followed by a folded Relu/Clip interval (float bounds)."""
    if act is None:
        return f
    lo, hi = act
    return lambda x: np.clip(f(x), lo, hi)


def evaluate(f: Function, x: np.ndarray) -> np.ndarray:
    """``f`` on float64 inputs, floating-point warnings silenced (inf is a legal value: it saturates)."""
    with np.errstate(all="ignore"):
        y = np.asarray(f(np.asarray(x, np.float64)), np.float64)
    if np.isnan(y).any():
        raise ValueError("lookup-table function returned NaN")  # the domain rules exclude this
    return y


# ================================================================================================================
# table construction
# ================================================================================================================
def real_codes(f: Function, in_q: QParams, out_q: QParams, codes: np.ndarray) -> np.ndarray:
    """``f(float32 dequantized code) / sy + zy``: the exact output in (real-valued) output codes, float64."""
    x = in_q.dequantize(np.asarray(codes, np.int64)).astype(np.float64)
    with np.errstate(all="ignore"):
        return evaluate(f, x) / np.float64(out_q.scale) + float(out_q.zero_point)


def _round_clamp(v: np.ndarray, lo: int, hi: int, dtype) -> np.ndarray:
    return np.clip(np.rint(v), lo, hi).astype(dtype)  # rint: half to even; +-inf clamp


def build_table8(f: Function, in_q: QParams, out_q: QParams, lo: int, hi: int, dtype) -> np.ndarray:
    """256 entries: ``clamp(round_half_even(f(x(q)) / sy + zy), lo, hi)`` for every 8-bit storage code q."""
    qmin = int(np.iinfo(in_q.np_dtype).min)
    return _round_clamp(real_codes(f, in_q, out_q, np.arange(qmin, qmin + 256)), lo, hi, dtype)


def table16_codes(in_q: QParams, entries: int) -> tuple[np.ndarray, int]:
    """Input codes of the ``entries`` table points of a 16-bit input, and the shift ``s = 16 - k``."""
    k = (entries - 1).bit_length() - 1
    if entries != (1 << k) + 1:
        raise ValueError(f"lut_entries_16 = {entries} is not 2**k + 1")
    s = 16 - k
    qmin = int(np.iinfo(in_q.np_dtype).min)
    return qmin + (np.arange(entries, dtype=np.int64) << s), s


def build_table16(f: Function, in_q: QParams, out_q: QParams, lo: int, hi: int, entries: int,
                  correction: str = DEFAULT_CORRECTION) -> np.ndarray:
    """``entries`` = 2**k + 1 interpolation points over the 16-bit input range (module docstring)."""
    codes, s = table16_codes(in_q, entries)
    w = np.clip(real_codes(f, in_q, out_q, codes), lo, hi)
    if correction == "midpoint":
        mid = np.clip(real_codes(f, in_q, out_q, codes[:-1] + (1 << (s - 1))), lo, hi) if s > 0 else w[:-1]
        excess = (w[:-1] + w[1:]) / 2.0 - mid
        m = np.empty_like(w)
        m[0], m[-1] = excess[0] / 2.0, excess[-1] / 2.0
        m[1:-1] = (excess[:-1] + excess[1:]) / 4.0
        step = np.abs(np.diff(w))  # limiter: keeps the order of neighbouring entries (monotone stays monotone)
        room = np.minimum(np.concatenate(([np.inf], step)), np.concatenate((step, [np.inf]))) / 2.0
        w = w - np.clip(m, -room, room)
    elif correction != "none":
        raise ValueError(f"unknown table correction {correction!r}; choose one of {CORRECTIONS}")
    dtype = np.uint16 if lo >= 0 and hi > 32767 else np.int16
    return _round_clamp(w, lo, hi, dtype)


def table_params(f: Function, in_q: QParams, out_q: QParams, lo: int, hi: int, entries_16: int,
                 correction: str = DEFAULT_CORRECTION) -> dict:
    """Prepared params of a lookup table from ``in_q`` to output codes of ``out_q`` clamped to [lo, hi]."""
    p = {"qmin": lo, "qmax": hi, "_f": f, "_in_q": in_q, "_out_q": out_q}
    if in_q.bits <= 8:
        p["table"] = build_table8(f, in_q, out_q, lo, hi, out_q.np_dtype)
    elif in_q.bits == 16:
        p["table"] = build_table16(f, in_q, out_q, lo, hi, entries_16, correction)
        p["correction"] = correction
    else:
        raise Problem(f"lookup tables take 4-, 8- or 16-bit inputs, not {in_q.dtype}")
    p["entries"] = int(p["table"].size)
    return p


def table_view(node: Node) -> dict:
    """A table node's ``table_params`` as ``apply_table`` and ``table_errors`` read them, made once from its records
    (the ``tables`` record's table and input quantization, the ``clamp``) and its params (the function, the output
    quantization) and kept in its memo: the table itself lives in the record only."""
    view = node.memo.get("table_view")
    if view is None:
        p = node.params
        view = node.memo["table_view"] = {"qmin": node.clamp[0], "qmax": node.clamp[1], "_f": p["_f"],
                                          "_in_q": node.tables.in_q, "_out_q": p["_out_q"],
                                          "table": node.tables.main}
    return view


def apply_table(p: dict, q: np.ndarray, out_dtype, cache: dict | None = None) -> np.ndarray:
    """Run the table kernel on an integer array of any shape (the kernels' validated arguments kept in ``cache``,
    a run-time memo owned by the caller for this table; None: validated on every call)."""
    flat = np.ascontiguousarray(q).reshape(-1)
    out = np.empty(flat.size, out_dtype)
    if p["_in_q"].bits <= 8:
        if out.dtype != p["table"].dtype:
            tmp = np.empty(flat.size, p["table"].dtype)
            lut8(flat, p["table"], tmp, cache=cache)
            out[...] = tmp
        else:
            lut8(flat, p["table"], out, cache=cache)
    else:
        lut16(flat, p["table"], p["qmin"], p["qmax"], out, cache=cache)
    return out.reshape(np.shape(q))


def all_codes(q: QParams) -> np.ndarray:
    """Every code of a quantization's type, in its storage dtype."""
    return np.arange(q.qmin, q.qmax + 1, dtype=np.int64).astype(q.np_dtype)


def table_errors(p: dict) -> np.ndarray:
    """|board output - exact output| in output LSBs for every input code, the exact output being
    ``clamp(f(x(q)) / sy + zy, qmin, qmax)`` (real valued, unrounded; ``f`` in float64)."""
    codes = all_codes(p["_in_q"])
    got = apply_table(p, codes, p["_out_q"].np_dtype).astype(np.float64)
    exact = np.clip(real_codes(p["_f"], p["_in_q"], p["_out_q"], codes), p["qmin"], p["qmax"])
    return np.abs(got - exact)


# ================================================================================================================
# lowering
# ================================================================================================================
def _scalar_const(lowering, arg, what: str) -> float | None:
    """Float value of a constant scalar input, or None if the input is not a constant scalar."""
    if isinstance(arg, np.ndarray) or (isinstance(arg, Tensor) and arg.is_const):
        value = np.asarray(const_value(lowering, arg, what), np.float32)
        if value.size == 1:
            return float(value.reshape(-1)[0])
    return None


def node_function(lowering, onode, args) -> tuple[Function, dict]:
    """The float64 function of an ONNX node and the attributes worth printing."""
    op = onode.op_type
    a = attrs(onode)
    exponent = None
    shown = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}
    if op == "Pow":
        if len(args) < 2 or args[1] is None:
            raise Problem("Pow needs an exponent input")
        exponent = _scalar_const(lowering, args[1], "Pow exponent")
        if exponent is None:
            raise Problem("Pow needs a constant scalar exponent for a lookup table (the exponent is an activation "
                           "or has more than one value)")
        shown["exponent"] = exponent
    return function_for(op, a, exponent), shown


def _lut_node(lowering, onode, x: Tensor, out: Tensor, act, f: Function, shown: dict, op_label: str) -> Node:
    check_per_tensor(x, f"{onode.op_type} input")
    lo, hi = clamp_bounds(out.q, act)
    t = table_params(clipped(f, act), x.q, out.q, lo, hi, lowering.arith.lut_entries_16)
    # the table, its input quantization and the clamp live in the records only (the run reads them: ``table_view``)
    p = {"_f": t["_f"], "_out_q": out.q, "_out_dtype": out.q.np_dtype,
         "_const": x.data if x.is_const else None}  # a constant input (executors feed only activations)
    if "correction" in t:
        p["correction"] = t["correction"]
    return Node(lowering.node_name(onode), op_label, [x.name], [out.name], _run_lut, p, shown,
                tables=records.tables({"table": t["table"]}, x.q), clamp=records.clamp(lo, hi),
                listed=("qmin", "qmax", "table") + (("correction",) if "correction" in t else ()) + ("entries",))


def lower_lut(lowering, onode, args, out: Tensor, act) -> Node:
    f, shown = node_function(lowering, onode, args)
    return _lut_node(lowering, onode, args[0], out, act, f, shown, onode.op_type)


def _run_lut(node, inputs, ctx):
    p = node.params
    return [apply_table(table_view(node), p["_const"] if p["_const"] is not None else inputs[0], p["_out_dtype"],
                        node.memo.setdefault("k_cache", {}))]


# ---- Div by an activation ----------------------------------------------------------------------------------
def lower_div_by_activation(lowering, onode, args, out: Tensor, act) -> Node:
    """``a / b`` with ``b`` an activation (module docstring)."""
    a, b = args[:2]
    if not isinstance(b, Tensor) or b.is_const:
        raise Problem("Div divisor is not an activation")
    check_per_tensor(b, "Div divisor")
    c = _scalar_const(lowering, a, "Div dividend")
    if c is not None:
        return _lut_node(lowering, onode, b, out, act, _const_over(c), {"dividend": c}, "Div")
    a = operand(lowering, a, "Div input A")
    lo, hi = clamp_bounds(out.q, act)
    sa, sy = float(a.q.scale), float(out.q.scale)
    zy = int(out.q.zero_point)
    bv = b.q.dequantize(all_codes(b.q)).astype(np.float64)
    nonzero = np.abs(bv[bv != 0])
    if nonzero.size == 0:
        raise Problem("Div divisor has no non-zero code")
    limit = max(hi - zy, zy - lo) + 1
    av = a.q.dequantize(a.data if a.is_const else all_codes(a.q)).astype(np.float64)
    a_max = float(np.abs(av).max())
    r_lossless = min(1.0 / float(nonzero.min()), limit * sy / sa)
    r_cap = 2 * DIV_ROUNDING_BUDGET * RECIP_QMAX * sy / a_max if a_max > 0 else math.inf
    r_max = min(r_lossless, r_cap)
    s_r = np.float32(r_max / RECIP_QMAX)
    if not s_r > 0:
        raise Problem("Div: the reciprocal of the divisor is out of range of an int16 scale")
    rq = QParams("int16", np.array(s_r, np.float32), np.array(0, np.int64))
    p = {"recip_scale": float(s_r), "min_divisor": 1.0 / (RECIP_QMAX * float(s_r))}
    recip = table_params(lambda x: 1.0 / x, b.q, rq, -RECIP_QMAX, RECIP_QMAX, lowering.arith.lut_entries_16)
    table = recip.pop("table")  # the reciprocal table lives in the ``tables`` record only (``_recip_view``)
    p["_recip"] = recip
    p["recip_entries"] = recip["entries"]
    mult, shift = quantize_multiplier(sa * float(s_r) / sy, lowering.arith.multiplier_bits)
    # the requantization (multiplier, shift, output zero point, clamp) lives in the ``requant`` record only
    p.update({"_out_dtype": out.q.np_dtype, "_sy": sy, "_a_max": a_max, "_lossless": r_max == r_lossless})
    ins = [t.name for t in (a, b) if not t.is_const]
    return Node(lowering.node_name(onode), "Div", ins, [out.name], _run_div_by_activation, p,
                {"divisor": "activation (reciprocal table)"},
                requant=records.fixed_requant(lowering.arith, mult, shift, zy, lo, hi, in_zp=a.q.zero_point),
                tables=records.tables({"recip": table}), operands=Operands(a, b),
                clamp=records.clamp(lo, hi), listed=("a_zp", "mult", "shift", "out_zp", "qmin", "qmax"))


def _recip_view(node: Node) -> dict:
    """A Div by an activation's reciprocal table as ``apply_table`` reads it: its ``_recip`` params with the table of
    its ``tables`` record, made once and kept in its memo."""
    view = node.memo.get("recip_view")
    if view is None:
        view = node.memo["recip_view"] = dict(node.params["_recip"], table=node.tables.entries["recip"])
    return view


def _const_over(c: float) -> Function:
    if c == 0.0:
        return lambda x: np.zeros_like(x)
    return lambda x: c / x


def _run_div_by_activation(node, inputs, ctx):
    p, rq = node.params, node.requant
    a_t = node.operands.a
    i = 0
    if a_t.is_const:
        a = a_t.data
    else:
        a, i = inputs[0], 1
    b = inputs[i]
    r = apply_table(_recip_view(node), b, np.int16, node.memo.setdefault("recip_k_cache", {}))
    shape = ctx.shape_of(node.outputs[0])
    a_flat = np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1)
    r_flat = np.ascontiguousarray(np.broadcast_to(r, shape)).reshape(-1)
    out = np.empty(a_flat.size, p["_out_dtype"])
    mul(a_flat, int(a_t.q.zero_point), r_flat, 0, int(rq.mult[0]), int(rq.shift[0]), rq.out_zp, rq.qmin, rq.qmax, out)
    return [out.reshape(shape)]


def _div_bounds(node: Node, a_abs: np.ndarray, b_codes: np.ndarray) -> np.ndarray:
    """Bound (output LSBs) on |board Div - clamp(exact a/b)| for dividends of magnitude ``a_abs`` and divisor
    codes ``b_codes`` (broadcast together); inf where the divisor is not covered."""
    p, rq, rp = node.params, node.requant, _recip_view(node)
    b_q, s_r = rp["_in_q"], float(p["recip_scale"])
    codes = all_codes(b_q)
    bv = b_q.dequantize(codes).astype(np.float64)
    r = apply_table(rp, codes, np.int16).astype(np.float64) * s_r
    r_max = RECIP_QMAX * s_r
    with np.errstate(divide="ignore"):
        inv = 1.0 / bv
    covered = (bv != 0) & (p["_lossless"] | (np.abs(inv) <= r_max))
    exact = np.clip(inv, -r_max, r_max)
    delta = np.where(covered, np.abs(r - exact), np.inf)
    small = np.minimum(np.abs(exact), np.abs(r))
    sy = float(p["_sy"])
    # |a| past y_lim / min(|1/b|, |r|) saturates both the exact and the board result (same sign): no error there
    y_lim = (max(rq.qmax - rq.out_zp, rq.out_zp - rq.qmin) + 1) * sy
    i = np.asarray(b_codes, np.int64) - b_q.qmin
    with np.errstate(divide="ignore", invalid="ignore"):
        a_rel = np.minimum(a_abs, np.where(small[i] > 0, y_lim / small[i], np.inf))
        err = np.where(a_rel > 0, a_rel * delta[i], 0.0) / sy
    mult_rel = 2.0 ** -rq.bits  # quantize_multiplier: |M 2**-n / real - 1| <= 2**-bits
    return 0.5 + err + a_abs * r_max / sy * mult_rel


def div_error_bound(node: Node) -> float:
    """A proven bound, in output LSBs, on |board Div - clamp(exact a/b in output codes)| for every a and every
    covered divisor code b: 0.5 (final rounding) + |a| |r(b) s_r - clamp(1/b, +-Rmax)| / sy + the multiplier's
    relative error, maximized over |a| <= max|a| (clamp is 1-Lipschitz; saturated reciprocals saturate the exact
    result too; a product that saturates both results costs nothing).

    Covered: every non-zero divisor when ``Rmax`` is the lossless range; when the precision cap chose a smaller
    ``Rmax`` (16-bit), the divisors with ``|b| >= 1/Rmax`` (``min_divisor``); smaller ones use +-Rmax."""
    codes = all_codes(node.params["_recip"]["_in_q"])
    bounds = _div_bounds(node, np.float64(node.params["_a_max"]), codes)
    return float(bounds[np.isfinite(bounds)].max())


def lut_error_bound(node: Node) -> float:
    """Max |board - exact| in output LSBs of a lowered LUT op (every input code) or Div (``div_error_bound``)."""
    if "_recip" in node.params:
        return div_error_bound(node)
    return float(table_errors(table_view(node)).max())


def element_error_bounds(node: Node, inputs: list, out_shape) -> np.ndarray:
    """Per output element, a bound (output LSBs) on |board - exact| for these run-time inputs: the table's exact
    error at each input code, or ``_div_bounds`` at each (a, b) pair (inf where b = 0 or is not covered)."""
    p = node.params
    if "_recip" not in p:
        view = table_view(node)
        err = table_errors(view)
        return np.broadcast_to(err[inputs[0].astype(np.int64) - view["_in_q"].qmin], out_shape)
    a_t = node.operands.a
    a = a_t.data if a_t.is_const else inputs[0]
    b = inputs[-1]
    a_abs = np.abs(a_t.q.dequantize(a).astype(np.float64))
    return _div_bounds(node, np.broadcast_to(a_abs, out_shape), np.broadcast_to(b, out_shape))


def is_lut_node(node: Node) -> bool:
    """Whether a lowered node is a lookup-table op of this module (a table, or Div's reciprocal table)."""
    return node.run in (_run_lut, _run_div_by_activation)
