"""Adding up the engine's rows over the dataset (in sample order, so any number of workers gives the same
result) into the report's outputs, layers, collapse point and largest drop."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npu_sim.analysis.accuracy.engine import LAYER_HEAD, LAYER_ROW, OUTPUT_ROW, Engine, class_rows
from npu_sim.analysis.accuracy.model import (HIST_BINS, ActivationStats, Collapse, LayerResult, OutputResult,
                                             WeightStats)
from npu_sim.analysis.metrics import MAX_AE, MAX_LSB, MAX_LSB_IN_RANGE, PAIR_SIZE, finish
from npu_sim.opset import weight_channel_axis


@dataclass
class _Sums:
    """The dataset's sums, maxima and minima of the engine's rows, its histograms, overflows, and the tensors
    whose isolated run was partly the integer run."""
    lsum: np.ndarray
    lmin: np.ndarray
    lmax: np.ndarray
    acc_max: np.ndarray
    iso_max: np.ndarray
    osum: np.ndarray
    omax: np.ndarray
    ocos_min: np.ndarray
    hist_f: np.ndarray
    hist_q: np.ndarray
    nsamples: int = 0
    overflows: dict = field(default_factory=dict)
    incomplete: set = field(default_factory=set)


def _sum_chunks(engine: Engine, chunks_results: list[dict]) -> _Sums:
    L, O = len(engine.layers), len(engine.program.outputs)
    hist_f = np.zeros((L, HIST_BINS), np.int64)
    sums = _Sums(lsum=np.zeros((L, LAYER_ROW)), lmin=np.full(L, np.inf),
                 lmax=np.full((L, 3), -np.inf),  # xmax; the error maxima are in acc_max/iso_max
                 acc_max=np.zeros((L, 3)), iso_max=np.zeros((L, 3)), osum=np.zeros((O, OUTPUT_ROW)),
                 omax=np.zeros(O), ocos_min=np.full(O, np.inf), hist_f=hist_f, hist_q=np.zeros_like(hist_f))
    k = len(LAYER_HEAD)
    acc_cols = [k + MAX_AE, k + MAX_LSB, k + MAX_LSB_IN_RANGE]
    iso_cols = [c + PAIR_SIZE for c in acc_cols]
    for res in chunks_results:
        for r, o in zip(res["rows"], res["outs"]):
            sums.nsamples += 1
            sums.lsum += r
            sums.lmin = np.minimum(sums.lmin, r[:, 1])
            sums.lmax[:, 0] = np.maximum(sums.lmax[:, 0], r[:, 2])
            sums.acc_max = np.maximum(sums.acc_max, r[:, acc_cols])
            sums.iso_max = np.maximum(sums.iso_max, r[:, iso_cols])
            sums.osum += o
            sums.omax = np.maximum(sums.omax, o[:, 1 + MAX_AE])
            sums.ocos_min = np.minimum(sums.ocos_min, o[:, 1 + PAIR_SIZE])
        sums.hist_f += res["hist_f"]
        sums.hist_q += res["hist_q"]
        for kk, v in res["overflows"].items():
            sums.overflows[kk] = sums.overflows.get(kk, 0) + v
        sums.incomplete |= set(res["incomplete"])
    return sums


def aggregate(engine: Engine, chunks_results: list[dict], collapse_cosine: float):
    """(samples, outputs, layers, collapse, largest drop, overflows) of the engine's ``run_chunk`` results."""
    sums = _sum_chunks(engine, chunks_results)
    acc_cos_by_ir: dict[str, float] = {}  # filled in execution order: a layer's inputs come before it
    layers = [_layer_result(engine, li, sums, acc_cos_by_ir) for li in range(len(engine.layers))]
    outputs = [_output_result(engine, oi, sums) for oi in range(len(engine.program.outputs))]
    index_by_ir = {lay.ir: li for li, lay in enumerate(engine.layers)}
    memo: dict = {}
    for li, lay in enumerate(layers):
        lay.inputs = sorted(_input_layers(engine.program, engine.layers[li].node_index, index_by_ir, memo))
    collapse = None
    for lay in layers:
        if lay.accumulated.cosine < collapse_cosine:
            collapse = _collapse(lay, collapse_cosine)
            break
    drop = max(layers, key=lambda l: (l.cosine_drop, -l.index)) if layers else None
    largest = _collapse(drop, collapse_cosine) if drop is not None and drop.cosine_drop > 0 else None
    return sums.nsamples, outputs, layers, collapse, largest, sums.overflows


def _layer_result(engine: Engine, li: int, sums: _Sums, acc_cos_by_ir: dict) -> LayerResult:
    """Reported tensor ``li``: its metrics, statistics and histograms; records its accumulated cosine in
    ``acc_cos_by_ir`` (its consumers' input cosine)."""
    prog = engine.program
    lay = engine.layers[li]
    t = prog.tensors[lay.ir]
    node = prog.nodes[lay.node_index]
    row = sums.lsum[li]
    n = row[0]
    k = len(LAYER_HEAD)
    pa = row[k:k + PAIR_SIZE].copy()
    pa[MAX_AE], pa[MAX_LSB], pa[MAX_LSB_IN_RANGE] = sums.acc_max[li]
    pi = row[k + PAIR_SIZE:].copy()
    pi[MAX_AE], pi[MAX_LSB], pi[MAX_LSB_IN_RANGE] = sums.iso_max[li]
    acc = finish(pa, n, True)
    iso = finish(pi, n, True)
    s, z = t.q.scale, t.q.zero_point
    vmin, vmax = float(sums.lmin[li]), float(sums.lmax[li, 0])
    if t.q.per_tensor:
        umin = vmin / float(s) + float(z)
        umax = vmax / float(s) + float(z)
        to_x = lambda u, s=float(s), z=float(z): (u - z) * s  # noqa: E731
    else:  # per-axis activations: percentiles in LSB units are reported as LSB (scale 1)
        umin, umax = -np.inf, np.inf
        to_x = lambda u: u  # noqa: E731
    hist_f = sums.hist_f[li]
    pct = [to_x(_percentile(hist_f, p, lay.lo, lay.width, umin, umax)) for p in (1, 50, 99, 99.9)]
    if t.q.per_tensor:
        pct = [min(max(v, vmin), vmax) for v in pct]
    clip_lo, clip_hi = int(row[3]), int(row[4])
    stats = ActivationStats(int(n), vmin, vmax, *[float(v) for v in pct],
                            clip_rate=(clip_lo + clip_hi) / max(n, 1), clip_low=clip_lo, clip_high=clip_hi)
    in_cos = _input_cosine(prog, lay.node_index, acc_cos_by_ir, {})
    acc_cos_by_ir[lay.ir] = acc.cosine
    return LayerResult(
        index=li, tensor=engine.ref.aliases.get(lay.float_name, lay.float_name), ir_tensor=lay.ir, node=node.name,
        op=node.op, dtype=t.q.dtype, scale=float(s) if t.q.per_tensor else [float(v) for v in s],
        zero_point=int(z) if t.q.per_tensor else [int(v) for v in z], shape=list(t.shape),
        accumulated=acc, isolated=iso,
        isolated_inputs="partly integer run" if lay.ir in sums.incomplete else "float reference",
        input_cosine=in_cos, stats=stats, weights=weight_stats(prog, node),
        hist_float=hist_f, hist_int=sums.hist_q[li], hist_lo=lay.lo, hist_width=lay.width)


def _output_result(engine: Engine, oi: int, sums: _Sums) -> OutputResult:
    prog = engine.program
    name, tname = list(prog.outputs.items())[oi]
    row = sums.osum[oi]
    p = row[1:1 + PAIR_SIZE].copy()
    p[MAX_AE] = sums.omax[oi]
    kk = 1 + PAIR_SIZE
    m = finish(p, row[0], False)
    cls = class_rows(prog.tensors[tname].shape)
    rows_n = row[kk + 1]
    nsamples = sums.nsamples
    return OutputResult(
        name=name, shape=list(prog.tensors[tname].shape), metrics=m,
        cosine_min_sample=float(sums.ocos_min[oi]) if nsamples else 1.0,
        cosine_mean_sample=float(row[kk] / max(nsamples, 1)),
        classes=cls[1] if cls else None,
        top1_agreement=float(row[kk + 2] / rows_n) if cls and rows_n else None,
        top5_agreement=float(row[kk + 3] / rows_n) if cls and rows_n and cls[1] > 5 else None,
        accuracy_float=float(row[kk + 4] / row[kk + 6]) if row[kk + 6] else None,
        accuracy_int=float(row[kk + 5] / row[kk + 6]) if row[kk + 6] else None)


def _percentile(hist: np.ndarray, p: float, lo: float, width: float, vmin_u: float, vmax_u: float) -> float:
    total = int(hist.sum())
    if total == 0:
        return 0.0
    target = p / 100.0 * total
    cum = np.cumsum(hist)
    b = int(np.searchsorted(cum, target, side="left"))
    b = min(b, len(hist) - 1)
    before = cum[b - 1] if b > 0 else 0
    frac = (target - before) / hist[b] if hist[b] else 0.0
    u = lo + (b + frac) * width
    return float(min(max(u, vmin_u), vmax_u))


def weight_stats(prog, node) -> WeightStats | None:
    """The range per output channel of ``node``'s quantized constant weight (rank >= 2), dequantized; the
    channel axis is the weight's quantization axis when per axis, else the op's (``weight_channel_axis``)."""
    consts = [prog.tensors[n] for n in node.inputs if prog.tensors[n].is_const]
    w = next((c for c in consts if c.q is not None and c.data is not None and c.data.ndim >= 2), None)
    if w is None:
        return None
    if not w.q.per_tensor and w.q.axis is not None:
        axis = w.q.axis % w.data.ndim
    else:
        trans_b = bool(node.attrs.get("transB"))
        axis = weight_channel_axis(node.op, w.data.ndim, trans_b)
    deq = w.q.dequantize(w.data)
    moved = np.moveaxis(deq, axis, 0).reshape(deq.shape[axis], -1)
    mn, mx = moved.min(axis=1), moved.max(axis=1)
    absmax = np.maximum(np.abs(mn), np.abs(mx))
    return WeightStats(w.float_name or w.name, int(axis), int(moved.shape[0]), [float(v) for v in mn],
                       [float(v) for v in mx], float(absmax.min()), float(absmax.max()),
                       int(np.count_nonzero(absmax == 0)))


def _input_cosine(prog, ni: int, known: dict, memo: dict, depth: int = 0) -> float:
    """Lowest accumulated cosine among node ``ni``'s inputs; an input without a float reference takes that of
    its own producer's inputs (1.0 at the program inputs)."""
    producer = memo.setdefault("_producer", {o: i for i, n in enumerate(prog.nodes) for o in n.outputs})
    worst = 1.0
    for name in prog.nodes[ni].inputs:
        if prog.tensors[name].is_const:
            continue
        if name in known:
            worst = min(worst, known[name])
        elif name in producer and depth < 50:
            worst = min(worst, _input_cosine(prog, producer[name], known, memo, depth + 1))
    return worst


def _input_layers(prog, ni: int, index_by_ir: dict, memo: dict) -> set[int]:
    """Indices of the reported tensors node ``ni`` reads, looking through producers without a reported output."""
    if ni in memo:
        return memo[ni]
    producer = memo.setdefault(-1, {o: i for i, n in enumerate(prog.nodes) for o in n.outputs})
    memo[ni] = found = set()
    for name in prog.nodes[ni].inputs:
        if prog.tensors[name].is_const:
            continue
        if name in index_by_ir:
            found.add(index_by_ir[name])
        elif name in producer:
            found |= _input_layers(prog, producer[name], index_by_ir, memo)
    return found


def _collapse(lay: LayerResult, threshold: float) -> Collapse:
    return Collapse(lay.tensor, lay.node, lay.op, lay.index, lay.accumulated.cosine, lay.isolated.cosine,
                    lay.input_cosine, "own error" if lay.isolated.cosine < threshold else "inherited", threshold)
