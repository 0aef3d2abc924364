"""Why a node's output differs from the board's, proven on the whole tensor.

The node is re-run from the dump's inputs (``recover``: its exact accumulator ``acc + bias``, its channels, its
fixed-point pairs). Every variation of its arithmetic below is then computed on **every** element of the tensor
(exactly: int64 where no product can overflow it, Python integers otherwise), after which the output zero point is
added and the node's clamp applied. A variation is a *cause* only if it keeps every element the re-run reproduces
as the board has it (it changes nothing the board did not change) and gives the board's value on at least one of
the node's own differing elements (those it gives are the elements it *explains*). Causes are taken in order of how
many of the elements left each explains (most first; ties in the order listed below), so one cause explaining the
whole tensor is not split among variations that agree with it on some elements. A variation that reproduces every
element of the tensor says so; the elements no cause explains are *unexplained*, and the variation agreeing with
the board on most elements of the tensor is reported as the closest.

* single rounding of ``acc * M / 2**r`` (the node's own pair ``M, r`` from its ``Requant`` record, made at the
  board's ``multiplier_bits``; else the pair of the real factor at those bits): half up, half to even, half away
  from zero, truncation toward -inf, truncation toward 0; TFLite's single-rounding build (``TFLITE_SINGLE_ROUNDING``,
  CMSIS-NN's ``CMSIS_NN_USE_SINGLE_ROUNDING``: TFLite's pair, ties toward +inf);
* double rounding (TFLite's ``MultiplyByQuantizedMultiplier``, CMSIS-NN's ``arm_nn_requantize``: a rounding doubling
  high multiply, ties toward +inf, then a rounding right shift, ties away from zero), and the same two stages with
  ties toward +inf, to even or away from zero at each stage (second-stage ties toward +inf: LiteRT's optimized
  kernels), or a truncating second stage;
* float32 requantization (onnxruntime: ``rint(float32(acc) * float32(sx*sw/sy))``); the real factor in float64,
  rounded half to even (ONNX's definition: dequantize, the float op, quantize; onnxruntime unfused);
* the accumulator saturated instead of wrapped at its width (or wrapped instead of saturated), then the node's rule;
* one multiplier for every channel (channel 0's) instead of one per channel, with the node's own rule;
* the output wrapped at its integer width instead of saturated (then the node's clamp);
* every channel's multiplier off by ``k``, ``k`` found from the data (the one offset, if any, consistent with every
  element the board wrote between its bounds);
* LiteRT's optimized int8 Requantize: its SIMD loop (16 elements at a time, in the dump's memory order) rounds
  second-stage ties toward +inf, its scalar loop over the last ``size % 16`` elements as the reference kernels;
* lookup tables (8-bit inputs): the entry of the neighbouring input code (an index off by one);
* int16 logistic at input scale 2**-12: LiteRT's optimized 16-bit LOGISTIC (gemmlowp's fixed-point logistic,
  ``logistic``);
* Add/Sub of two activations: the variations of ``binary``.

This is a diagnostic, not a kernel: plain numpy and Python integers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npu_sim.analysis.compare.mean import mean_candidates
from npu_sim.analysis.compare.binary import add_candidates
from npu_sim.analysis.compare.logistic import logistic16_candidates
from npu_sim.analysis.compare.recover import Requant, requant_of
from npu_sim.analysis.compare.rounding import (ROUNDINGS, floor_shift, float32_rule, half_away, half_even, half_up,
                                               saturate, toward_zero, two_stage, wrap)
from npu_sim.ir import Node, Program

SIMD_LANES = 16  # int8 elements per 128-bit vector (LiteRT's optimized loops)
MAX_PYTHON = 300_000  # elements of an Add/Sub (whose variations run in Python) beyond which none is tried
TFLITE_DOUBLE = "double rounding (TFLite)"
LITERT_OPTIMIZED = "double rounding, second-stage ties toward +inf (LiteRT optimized kernels)"


@dataclass
class Explanation:
    labels: np.ndarray   # the cause of each element asked about ("unexplained" where none)
    equally: dict        # cause -> the other causes that give every element counted under it as well
    reproduces: dict     # cause -> [elements of the tensor it reproduces, elements of the tensor]
    closest: list | None  # [variation, elements it reproduces, elements] when some are unexplained
    not_tried: int = 0


def _exact(a: np.ndarray, bound: int) -> np.ndarray:
    """``a`` as int64 if ``|a| * bound`` fits in 62 bits, else as Python integers (an object array)."""
    big = int(np.abs(a).max(initial=0)) * max(int(bound), 1)
    return a.astype(np.int64) if big < (1 << 62) else a.astype(object)


def _shift_rule(rq: Requant, f, mult=None):
    mult = rq.mult if mult is None else mult

    def run(acc, ch):
        m, r = mult[ch], rq.shift[ch]
        a = _exact(acc, int(np.abs(mult).max(initial=1)))
        if a.dtype == object or int(r.max(initial=0)) > 61:  # (2**r itself must fit too)
            a, m, r = a.astype(object), m.astype(object), r.astype(object)
        return f(a * m, r)
    return run


def _double_rule(rq: Requant, first=half_up, second=half_away, mult=None):
    mult = rq.tfl[0] if mult is None else mult
    s_all = rq.tfl[1]

    def run(acc, ch):
        m, s = mult[ch], s_all[ch]
        a = _exact(acc, int(np.abs(mult).max(initial=1)) << int(max(int(s_all.max(initial=0)), 0)))
        if a.dtype == object:
            m, s = m.astype(object), s.astype(object)
        return two_stage(a, m, s, first, second)
    return run


def _own(rq: Requant, mult=None):
    if rq.own == "single":
        return _shift_rule(rq, half_up, mult)
    if rq.own == "double":
        return _double_rule(rq, mult=mult)
    return lambda acc, ch: float32_rule(acc, rq.f32[ch])


def _finish(rq: Requant, f):
    """The variation ``f`` (the value before the zero point) as the node's output: zero point, then its clamp."""
    return lambda acc, ch: np.clip(np.asarray(f(acc, ch)).astype(np.int64) + rq.out_zp, rq.qmin, rq.qmax)


def variations(rq: Requant) -> list[tuple[str, object]]:
    """(name, f(acc, channel) -> the node's output) for every fixed variation worth trying on this node (arrays)."""
    tfl = bool(np.all(rq.tfl[0] > 0))  # TFLite's pairs (a factor below 2**-32 flushes to 0: those rules then lie)
    out = [(TFLITE_DOUBLE, _double_rule(rq)), (LITERT_OPTIMIZED, _double_rule(rq, half_up, half_up))] if tfl else []
    out += [(name, _shift_rule(rq, f)) for name, f in ROUNDINGS]
    if tfl:
        out += [("single rounding (TFLITE_SINGLE_ROUNDING, CMSIS-NN single)", _single_tflite(rq)),
                ("double rounding, second-stage ties to even", _double_rule(rq, half_up, half_even)),
                ("double rounding, second stage truncated toward -inf", _double_rule(rq, half_up, floor_shift)),
                ("double rounding, second stage truncated toward 0", _double_rule(rq, half_up, toward_zero)),
                ("double rounding (TFLite) with high-multiply ties to even", _double_rule(rq, half_even)),
                ("double rounding (TFLite) with high-multiply ties away from zero", _double_rule(rq, half_away))]
    out.append(("float32 requantization (onnxruntime)", lambda acc, ch: float32_rule(acc, rq.f32[ch])))
    if rq.real is not None:
        out.append(("the real factor in float64, rounding half to even (ONNX's definition, unfused)",
                    lambda acc, ch: np.rint(acc.astype(np.float64) * rq.real[ch])))
    own = _own(rq)
    out = [(name, _finish(rq, f)) for name, f in out]
    if rq.acc_bits < 64:
        bits = rq.acc_bits
        if rq.saturate:
            out.append((f"wrap at the {bits}-bit accumulator", _finish(rq, lambda a, c: own(wrap(a, bits), c))))
        else:
            out.append((f"saturation at the {bits}-bit accumulator",
                        _finish(rq, lambda a, c: own(saturate(a, bits), c))))
    if rq.mult.size > 1 and (np.unique(rq.mult).size > 1 or np.unique(rq.shift).size > 1
                             or np.unique(rq.f32).size > 1):
        out.append(("one multiplier for every channel (channel 0's)",
                    _finish(rq, lambda a, c: own(a, np.zeros_like(c)))))
    out.append((f"output wrapped at {rq.out_bits} bits instead of saturated",
                _wrapped_output(rq, own)))
    return out


def _wrapped_output(rq: Requant, own):
    mid = (rq.out_min + rq.out_max + 1) // 2  # 0 for signed outputs, 2**(bits-1) for unsigned ones

    def run(acc, ch):
        y = np.asarray(own(acc, ch)).astype(np.int64) + rq.out_zp
        return np.clip(wrap(y - mid, rq.out_bits) + mid, rq.qmin, rq.qmax)
    return run


def _single_tflite(rq: Requant):
    m_all, s_all = rq.tfl

    def run(acc, ch):
        a = _exact(acc, int(np.abs(m_all).max(initial=1)))
        m, r = m_all[ch], 31 - s_all[ch]
        if a.dtype == object:
            m, r = m.astype(object), r.astype(object)
        return half_up(a * m, r)
    return run


def fitted_multipliers(rq: Requant, board: np.ndarray) -> list[tuple[str, object]]:
    """"every channel's multiplier off by k": the offsets ``k`` for which the node's own rule gives every element
    the board wrote strictly inside its bounds (at most three of them; verified on the whole tensor like every
    variation). Each such element bounds the product ``n = a * (M + k)`` exactly (``a`` the accumulator, shifted
    left by TFLite's positive shift): single rounding ``(n + 2**(r-1)) >> r = v``; TFLite's double rounding
    ``hi = (n + 2**30) >> 31`` then ``RoundingDivideByPOT(hi, e) = v``."""
    if rq.own not in ("single", "double"):
        return []
    acc, ch = rq.acc.reshape(-1), rq.channel.reshape(-1)
    use = (board > rq.qmin) & (board < rq.qmax) & (acc != 0)
    if not use.any():
        return []
    c, v = ch[use], (board[use] - rq.out_zp).astype(np.float64)
    if rq.own == "single":
        mult, a, r = rq.mult, acc[use].astype(np.float64), rq.shift[c].astype(np.float64)
        h = np.where(r > 0, np.exp2(r - 1), 0.0)
        low, high = v * np.exp2(r) - h, v * np.exp2(r) + h - (r > 0)
    else:
        mult, s = rq.tfl[0], rq.tfl[1][c]
        a = acc[use].astype(np.float64) * np.exp2(np.maximum(s, 0))
        e = np.maximum(-s, 0).astype(np.float64)
        h = np.where(e > 0, np.exp2(e - 1), 0.0)
        step = np.exp2(e)
        hi_low = np.where(e > 0, v * step - h + (v <= 0), v)  # RoundingDivideByPOT(hi, e) == v: ties away
        hi_high = np.where(e > 0, v * step + h - (v >= 0), v)
        low, high = hi_low * 2.0 ** 31 - 2.0 ** 30, hi_high * 2.0 ** 31 + 2.0 ** 30 - 1
    ends = np.stack([low / a, high / a]) - mult[c]
    lo, hi = float(np.ceil(ends.min(axis=0).max() - 1e-6)), float(np.floor(ends.max(axis=0).min() + 1e-6))
    if lo > hi:
        return []
    lo, hi = int(lo), int(hi)
    k = _simplest(lo, hi)
    if k == 0:
        return []
    span = f"; every k from {lo:+d} to {hi:+d} gives the same tensor" if lo != hi else ""
    return [(f"every channel's multiplier off by {_k_name(k)} (found from the data{span})",
             _finish(rq, _own(rq, mult + k)))]


def _simplest(lo: int, hi: int) -> int:
    """The integer of ``[lo, hi]`` with the most trailing zero bits (0 if it is inside): a fault such as a
    multiplier off by 2**15 is then named by its own offset."""
    if lo <= 0 <= hi:
        return 0
    for bit in range(max(abs(lo), abs(hi)).bit_length(), -1, -1):
        step = 1 << bit
        k = -((-lo) // step) * step if lo > 0 else (hi // step) * step  # the multiple nearest to zero
        if lo <= k <= hi:
            return k
    return lo


def _k_name(k: int) -> str:
    a = abs(k)
    return f"{k:+d}" + (f" (2^{a.bit_length() - 1})" if a & (a - 1) == 0 else "")


def _candidates(prog: Program, node: Node, inputs: list, board: np.ndarray, order) -> list | None:
    """(name, the node's output under each variation, flat) on the whole tensor; None: nothing tried."""
    lut = _lut_variations(node, inputs)
    if lut:
        x = inputs[0].reshape(-1).astype(np.int64)
        return [(name, f(x)) for name, f in lut]
    fixed = mean_candidates(prog, node, inputs) or logistic16_candidates(prog, node, inputs)
    if fixed:
        return fixed
    if node.op in ("Add", "Sub") and board.size > MAX_PYTHON:
        return None
    cands = add_candidates(prog, node, inputs, np.arange(board.size))
    if cands:
        return cands
    rq = requant_of(prog, node, inputs)
    if rq is None:
        return []
    acc, ch = rq.acc.reshape(-1), rq.channel.reshape(-1)
    out = [(name, f(acc, ch)) for name, f in variations(rq) + fitted_multipliers(rq, board)]
    if node.op == "Requantize" and rq.own == "double" and order is not None:
        out.append(_simd_requantize(rq, order.reshape(-1), acc, ch, dict(out)))
    return out


def _simd_requantize(rq: Requant, order: np.ndarray, acc: np.ndarray, ch: np.ndarray,
                     done: dict) -> tuple[str, np.ndarray]:
    """LiteRT's optimized int8 Requantize (QUANTIZE int8 -> int8): blocks of 16 elements, in the order the tensor
    lies in memory (``order``: each element's position), rounded by the SIMD loop (second-stage ties toward +inf),
    the last ``size % 16`` by the scalar loop (TFLite's reference double rounding). ``done``: the variations already
    computed (name -> output), whose two double roundings are reused."""
    simd = done.get(LITERT_OPTIMIZED)
    simd = _finish(rq, _double_rule(rq, half_up, half_up))(acc, ch) if simd is None else simd
    scalar = done.get(TFLITE_DOUBLE)
    scalar = _finish(rq, _double_rule(rq))(acc, ch) if scalar is None else scalar
    tail = order >= order.size - order.size % SIMD_LANES
    return (f"LiteRT optimized Requantize ({SIMD_LANES}-lane blocks with second-stage ties toward +inf, the last "
            f"{order.size % SIMD_LANES} in memory order by the reference rounding)", np.where(tail, scalar, simd))


def explain(prog: Program, node: Node, inputs: list, dump: np.ndarray, rerun: np.ndarray,
            flat_idx: np.ndarray, order: np.ndarray | None = None) -> Explanation:
    """The causes of the elements ``flat_idx`` of ``dump`` (the board's output, NCHW) that ``rerun`` (the node
    re-run on ``inputs``) computes differently, proven on the whole tensor (the module docstring). ``order``: each
    element's position in the dump's own memory order (NCHW-shaped), for the variations that depend on it."""
    board, base = dump.reshape(-1).astype(np.int64), rerun.reshape(-1).astype(np.int64)
    labels = np.full(flat_idx.size, "unexplained", dtype=object)
    cands = _candidates(prog, node, inputs, board, order)
    if cands is None:
        return Explanation(labels[:0], {}, {}, None, int(flat_idx.size))
    keep = board == base
    agree = [(name, np.asarray(y).reshape(-1) == board) for name, y in cands]
    valid = [(name, ok[flat_idx]) for name, ok in agree if ok[keep].all()]
    every = list(valid)
    left, also, reproduces = np.ones(flat_idx.size, bool), {}, {}
    counts = {name: int(np.count_nonzero(ok)) for name, ok in agree}
    while valid and left.any():  # the cause explaining most of the elements left first (ties: listed order)
        best = max(range(len(valid)), key=lambda i: (int(np.count_nonzero(valid[i][1] & left)), -i))
        name, hit = valid.pop(best)
        hit = hit & left
        if not hit.any():
            break
        labels[hit] = name
        left &= ~hit
        also[name] = [other for other, h in every if other != name and bool(np.all(h[hit]))]
        reproduces[name] = [counts[name], int(board.size)]
    closest = None
    moved = [name for name, y in cands if not np.array_equal(np.asarray(y).reshape(-1), base)]
    if left.any() and moved:  # among the variations that change anything at all
        name = max(moved, key=lambda n: (counts[n], -moved.index(n)))
        closest = [name, counts[name], int(board.size)]
    return Explanation(labels, also, reproduces, closest)


def _lut_variations(node: Node, inputs: list) -> list:
    """An 8-bit lookup table's neighbouring entries (index off by one), or [] for other nodes."""
    tables = node.tables
    table = tables.main if tables is not None else None
    in_q = tables.in_q if tables is not None else None
    if table is None or in_q is None or in_q.bits > 8 or len(inputs) != 1 or table.size != in_q.qmax - in_q.qmin + 1:
        return []
    t = np.asarray(table, np.int64).reshape(-1)

    def entry(step):
        return lambda x: t[np.clip(x - in_q.qmin + step, 0, t.size - 1)]
    return [("LUT entry of the next input code", entry(1)), ("LUT entry of the previous input code", entry(-1))]
