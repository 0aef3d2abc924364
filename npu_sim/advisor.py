"""Sensitivity ranking, int16 advisor and the written-back fix; check findings and the latency breakdown next to
the accuracy report's layers. Every number is measured by simulating a model bit-exactly, none is predicted.

**Layers.** A *layer* is a program node that computes (not data movement, not the input stub) and writes a
quantized activation tensor; with it go the tensors that share that tensor's quantization (onnxruntime gives
MaxPool, Flatten, Reshape, ... their input's scale), so a promotion changes one quantization group as a whole.

**Sensitivity** (``sensitivity``): for each layer, the output similarity when only that layer runs at higher
precision, against the float reference, on the first ``samples`` samples; ``gain`` = that minus the baseline.

* *int16* when the layer's tensor is 8-bit, per tensor, and the board allows 16-bit activations for its producer
  and every consumer (``checks.int16_allowed``: the NPU takes int16 for the op and in_ch/groups·kh·kw is within
  the board's int16 limit): the QDQ model is rewritten (``requant.promote_int16``: int16, symmetric, scale =
  max(|rmin|, |rmax|)/32767 of the calibrated range, consumers' int32 biases re-derived), reloaded and simulated.
* *float* otherwise (already 16-bit, not allowed, or a range starting exactly at 0 whose clamp a symmetric int16
  would lose): the integer run up to the layer, the layer's float op (the float reference's subgraph between the
  layer's inputs and output, run by onnxruntime) on the dequantized integer inputs, its result quantized with the
  tensor's own quantization (as a CPU fallback hands it back to the NPU), then the rest of the integer program.
  When a layer's inputs have no float-reference tensor, its output is the float reference itself (marked
  ``"float (reference output)"``: that also removes the error of everything before it).

The output similarity is, per graph output, the cosine and SQNR over all those samples as one vector; with
several outputs, the lowest of each. Layers are ranked by SQNR gain (dB: additive in noise power, not saturating
near cosine 1 as cosine does), then cosine gain.

**int16 advisor** (``advise``): candidates are the int16 layers with a positive gain; the latency cost of each is
measured with ``npu_sim.estimate`` on its promoted model (``delta_cycles``). Greedy: candidates in decreasing
gain per added cycle (free ones first); the prefixes of that order are the accuracy-latency curve. Every point
is promoted, re-simulated and re-estimated (at most ``max_points``, spread over the order, always including the
largest prefix the greedy sum predicts within budget); ``pareto`` marks the non-dominated points. The chosen set
is the measured point with the best SQNR among those within the budget (``max_slowdown`` x baseline cycles, or
``budget_ms``).

**Bias remedy.** ``bias.saturated`` findings (int32 biases clipped at INT32_MIN/INT32_MAX, onnxruntime #21000) are
not a precision problem int16 can fix: the advisor writes the re-quantization that keeps the bias in range —
onnxruntime's weight-scale adjustment back on (``QDQDisableWeightAdjustForInt32Bias: false``) when the model was
quantized with it off, else per-tensor int8 weights for the affected layers (TensorQuantOverrides).

**The fix** (``fix``): quantize_static ``extra_options`` as JSON — ``TensorQuantOverrides`` with the chosen
tensors at ``QInt16`` (symmetric) plus the bias remedy; ``requant.load_extra_options`` turns it into what
quantize_static takes (QuantType members). With calibration data and the float model, ``requantize`` runs
quantize_static with the model's own settings plus the fix, and the new model is simulated and reported.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import requant
from .accuracy import FloatReference, _finish, _pair_stats
from .errors import BoardError, NpuSimError

_MOVEMENT_KINDS = ("movement",)


# ---------------------------------------------------------------------------------------------------------------
# Scores


@dataclass
class Score:
    cosine: float
    sqnr_db: float
    cosine_min_sample: float = 1.0

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def _sqnr_key(v: float) -> float:
    return 200.0 if v == math.inf else v


def score_outputs(refs: list[dict], outs: list[dict], names: list[str]) -> Score:
    """Lowest cosine / SQNR over the outputs ``names``; each aggregated over all samples as one vector."""
    cos, sq, worst = [], [], 1.0
    for name in names:
        tot = np.zeros(9)
        for r, o in zip(refs, outs):
            x = np.asarray(r[name], np.float64).reshape(-1)
            y = np.asarray(o[name], np.float64).reshape(-1)
            p = _pair_stats(x, y)
            worst = min(worst, _finish(p, x.size, False).cosine)
            tot[:5] += p[:5]
            tot[5] = max(tot[5], p[5])
        m = _finish(tot, 1.0, False)
        cos.append(m.cosine)
        sq.append(m.sqnr_db)
    return Score(min(cos), min(sq), worst)


# ---------------------------------------------------------------------------------------------------------------
# The evaluator: one baseline integer run per sample, float reference outputs, variants scored against them


class Evaluator:
    def __init__(self, model, float_model, board, samples: list[dict], input_shapes: dict | None = None):
        import onnx
        from .simulator import load
        self.model = str(model)
        self.float_model = str(float_model) if float_model else None
        self.board = board
        self.samples = list(samples)
        self.shapes = {n: tuple(np.shape(v)) for n, v in self.samples[0].items()}
        self.shapes.update(dict(input_shapes or {}))
        self.proto = onnx.load(self.model)
        self.base = load(self.model, board=board, input_shapes=self.shapes)
        prog = self.base.program
        self.outputs = list(prog.outputs)
        self.ref = FloatReference(self.model, self.float_model)
        self.ref.prepare(self.outputs)
        self.refs = [{k: v for k, v in self.ref.run(s).items() if k in self.outputs} for s in self.samples]
        self.runs = [self.base.execute(s, keep_all=True).values for s in self.samples]
        self.base_score = score_outputs(self.refs, [self._outs(prog, r) for r in self.runs], self.outputs)
        self._extractor = None
        self._variants: dict[frozenset, tuple[Score, float | None]] = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="npu-sim-advisor.")

    @staticmethod
    def _outs(prog, values) -> dict:
        return {name: prog.tensors[t].q.dequantize(values[t]) for name, t in prog.outputs.items()}

    def score_sim(self, sim, samples=None, refs=None) -> Score:
        samples = self.samples if samples is None else samples
        refs = self.refs if refs is None else refs
        return score_outputs(refs, [sim.run(s) for s in samples], self.outputs)

    def score_variant(self, sim) -> Score:
        """``score_sim`` of a variant of the model (a promotion) on the evaluator's samples, running only what
        differs: the nodes that provably compute what the baseline computes (``same_nodes``) take the baseline
        run's values; the rest run on them. The same integers as a full run, in a fraction of the time."""
        prog = sim.program
        clean = same_nodes(self.base.program, prog)
        dirty = [n for i, n in enumerate(prog.nodes) if i not in clean]
        made = {o for n in dirty for o in n.outputs}
        need = list(dict.fromkeys(i for n in dirty for i in n.inputs if not prog.tensors[i].is_const
                                  and i not in made))
        from .executor import execute
        from .ir import Program
        tail = Program(prog.tensors, dirty, {n: n for n in need}, {o: t for o, t in prog.outputs.items() if t in made},
                       prog.board, prog.model_path, prog.opset)
        outs = []
        for full in self.runs:
            res = execute(tail, {n: full[n] for n in need}).values if dirty else {}
            outs.append({name: prog.tensors[t].q.dequantize(res[t] if t in made else full[t])
                         for name, t in prog.outputs.items()})
        return score_outputs(self.refs, outs, self.outputs)

    def measure(self, tensors, tag: str) -> tuple[Score, float | None]:
        """Score and estimated cycles of the model with ``tensors`` promoted to int16; cached per set (the
        sensitivity's single promotions come back as the advisor's first curve point)."""
        key = frozenset(tensors)
        hit = self._variants.get(key)
        if hit is None:
            sim = self.load(requant.promote_int16(self.proto, list(tensors)), tag)
            hit = self._variants[key] = (self.score_variant(sim), _cycles(sim))
        return hit

    def load(self, proto_or_path, tag: str):
        import onnx
        from .simulator import load
        if isinstance(proto_or_path, (str, Path)):
            path = str(proto_or_path)
        else:
            path = os.path.join(self._tmp.name, f"{tag}.onnx")
            onnx.save(proto_or_path, path)
        return load(path, board=self.board, input_shapes=self.shapes)

    # -- one layer in float, the rest integer
    def float_layer(self, ni: int, ir: str) -> tuple[Score, str]:
        import onnx.utils
        from .executor import execute
        from .ir import Program
        prog = self.base.program
        node, t = prog.nodes[ni], prog.tensors[ir]
        acts = list(dict.fromkeys(n for n in node.inputs if not prog.tensors[n].is_const))
        out_ref = self.ref.name_for(t.float_name)
        in_refs = [self.ref.name_for(prog.tensors[n].float_name) if prog.tensors[n].q is not None
                   else self._input_name(n) for n in acts]
        how = "float"
        sess = None
        if out_ref is not None and all(in_refs):
            try:
                if self._extractor is None:
                    self._extractor = onnx.utils.Extractor(self.ref.model)
                sub = self._extractor.extract_model(list(dict.fromkeys(in_refs)), [out_ref])
                sess = _session(sub)
            except Exception:
                sess = None
        if sess is None:
            if out_ref is None:
                raise NpuSimError(f"layer {node.name!r}: no float reference for {t.float_name!r}")
            how = "float (reference output)"
            self.ref.prepare(self.outputs + [out_ref])
        nodes = prog.nodes[ni + 1:]
        made = {o for n in nodes for o in n.outputs}
        need = list(dict.fromkeys(i for n in nodes for i in n.inputs
                                  if not prog.tensors[i].is_const and i not in made))
        tail = Program(prog.tensors, nodes, {n: n for n in need}, {o: o for o in prog.outputs.values() if o in made},
                       prog.board, prog.model_path, prog.opset)
        outs = []
        for s, full in zip(self.samples, self.runs):
            if sess is not None:
                feeds = {}
                for n, r in zip(acts, in_refs):
                    tt = prog.tensors[n]
                    v = full[n] if tt.q is None else tt.q.dequantize(full[n])
                    feeds[r] = np.asarray(v, np.float32)
                for i in sess.get_inputs():
                    if all(isinstance(d, int) for d in i.shape) and feeds[i.name].size == math.prod(i.shape):
                        feeds[i.name] = feeds[i.name].reshape(i.shape)
                y = sess.run([out_ref], feeds)[0]
            else:
                y = self.ref.run(s)[out_ref]
            vals = dict(full)
            vals[ir] = t.q.quantize(np.asarray(y, np.float32).reshape(t.shape))
            res = execute(tail, {n: vals[n] for n in need}).values if nodes else {}
            o = {}
            for name, tn in prog.outputs.items():
                q = res[tn] if tn in res else vals[tn]
                o[name] = prog.tensors[tn].q.dequantize(q)
            outs.append(o)
        if how != "float":
            self.ref.prepare(self.outputs)
        return score_outputs(self.refs, outs, self.outputs), how

    def _input_name(self, tname: str) -> str | None:
        for name, t in self.base.program.inputs.items():
            if t == tname:
                return name
        return None

    def close(self) -> None:
        self._tmp.cleanup()


def _same(a, b) -> bool:
    """Structural equality of prepared node parameters: arrays by dtype, shape and values, quantizations by
    ``QParams.same_as``, containers and dataclasses field by field; anything else only when it is the same object
    or compares equal as a plain scalar (so an opaque object, e.g. a session, never counts as the same)."""
    from dataclasses import fields, is_dataclass
    from .ir import QParams
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, QParams):
        return a.same_as(b) and a.axis == b.axis
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float, complex, str, bytes, bool, np.generic)) or a is None:
        return bool(a == b) or (isinstance(a, float) and a != a and b != b)
    if is_dataclass(a) and not isinstance(a, type):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    return False


def _same_tensor(a, b) -> bool:
    if a.shape != b.shape or (a.q is None) != (b.q is None) or (a.data is None) != (b.data is None):
        return False
    if a.q is not None and not _same(a.q, b.q):
        return False
    return a.data is None or _same(a.data, b.data)


def _same_params(ran: dict, fresh: dict) -> bool:
    """The prepared parameters of a node that has run (``ran``) equal those of a freshly lowered one (``fresh``),
    run-time memos aside: private keys a node adds on its first run (``_bound``, ``_rq_prep``: saturation bounds
    and requantization set-ups computed from the other parameters) and memo dicts (keys ending in ``_cache``)."""
    extra = set(ran) - set(fresh)
    if any(not k.startswith("_") for k in extra):
        return False
    return all(k in ran and (k.endswith("_cache") or _same(ran[k], fresh[k])) for k in fresh)


def same_nodes(base, prog) -> set[int]:
    """Indices of the nodes of ``prog`` that provably compute what ``base`` computes: a node of ``base`` with the
    same name and outputs, the same run function, the same prepared parameters and attributes (``_same``), the
    same quantization and shape on every input and output (constants: the same data), and every activation input
    made by such a node or a graph input both programs take alike (run-time memos aside, ``_same_params``). A node is a pure function of exactly these
    (its run function reads its parameters and its tensors), so on the same feeds it gives the same integers;
    everything downstream of a difference is left out."""
    bnodes = {(n.name, tuple(n.outputs)): n for n in base.nodes}
    bt, pt = base.tensors, prog.tensors
    clean_t = {t for name, t in prog.inputs.items() if base.inputs.get(name) == t and t in bt
               and _same_tensor(bt[t], pt[t])}
    clean = set()
    for i, n in enumerate(prog.nodes):
        b = bnodes.get((n.name, tuple(n.outputs)))
        if (b is None or b.op != n.op or b.run is not n.run or list(b.inputs) != list(n.inputs)
                or any(not pt[x].is_const and x not in clean_t for x in n.inputs)
                or any(x not in bt or not _same_tensor(bt[x], pt[x]) for x in list(n.inputs) + list(n.outputs))
                or not _same_params(b.params, n.params) or not _same(b.attrs, n.attrs)):
            continue
        clean.add(i)
        clean_t.update(n.outputs)
    return clean


def _session(model):
    from .accuracy import _onnxruntime
    ort = _onnxruntime()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------------------------------------------
# Layers


@dataclass
class Layer:
    node: str
    op: str
    node_index: int
    ir_tensor: str
    tensor: str                      # ONNX float name of the layer's output
    group: list[str]                 # tensors sharing its quantization
    dtype: str
    mode: str                        # "int16" | "float"
    reason: str                      # why this mode


def layers_of(sim, proto) -> list[Layer]:
    from .checks import int16_allowed
    from .ops import OPS
    prog = sim.program
    groups = {t: gr for gr in requant.quant_groups(proto) for t in gr.tensors}
    by_float: dict[str, list[str]] = {}
    for name, t in prog.tensors.items():
        if t.q is not None and not t.is_const:
            by_float.setdefault(t.float_name, []).append(name)
    producers = {o: n for n in prog.nodes for o in n.outputs}
    consumers: dict[str, list] = {}
    for n in prog.nodes:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    out, seen = [], set()
    for ni, node in enumerate(prog.nodes):
        info = OPS.get(node.op)
        if info is None or info.kind in _MOVEMENT_KINDS:
            continue
        for o in node.outputs:
            t = prog.tensors[o]
            gr = groups.get(t.float_name)
            if t.q is None or gr is None or gr.graph_input or id(gr) in seen:
                continue
            seen.add(id(gr))
            if t.q.bits >= 16:
                mode, why = "float", f"already {t.q.dtype}"
            elif not gr.per_tensor:
                mode, why = "float", "quantized per axis"
            else:
                s, z = float(np.asarray(t.q.scale).reshape(-1)[0]), int(np.asarray(t.q.zero_point).reshape(-1)[0])
                _, clamp = requant.int16_params(s, z, gr.dtype)
                nodes = {}
                for ft in gr.tensors:
                    for irn in by_float.get(ft, []):
                        for n in ([producers[irn]] if irn in producers else []) + consumers.get(irn, []):
                            nodes[n.name] = n
                bad = [n.name for n in nodes.values() if not int16_allowed(prog, n)]
                if clamp:
                    mode, why = "float", "its range starts at exactly 0 (a removed Relu's clamp a symmetric int16 " \
                                         "would lose)"
                elif bad:
                    mode, why = "float", f"the board does not allow int16 for {', '.join(bad[:3])}"
                else:
                    mode, why = "int16", "allowed: " + ", ".join(sorted(nodes)[:4]) + (" ..." if len(nodes) > 4 else "")
            out.append(Layer(node.name, node.op, ni, o, t.float_name, list(gr.tensors), t.q.dtype, mode, why))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Sensitivity


def _cycles(sim) -> float | None:
    from .cost import estimate
    try:
        return float(estimate(sim).summary["total_cycles"])
    except BoardError:
        return None


def shortlist(layers: list[Layer], report, k: int | None) -> tuple[list[Layer], list[Layer]]:
    """The layers whose sensitivity is measured (``--candidates K``) and the rest. All of them without ``k``;
    else the ``k`` with the lowest isolated SQNR in the report (the op's own error: its arithmetic and the rounding
    and clipping of its output), clipping rate breaking ties. A cheap proxy, not the measurement: on PP-OCRv4 rec
    A8W8 the 40 layers it ranks first held 3 of the 10 measured best (README), so it is for models too large to
    measure every layer; the advisor's segments cover every int16-allowed layer either way."""
    if k is None or k >= len(layers):
        return list(layers), []
    by_tensor = {}
    for lr in getattr(report, "layers", []) or []:
        by_tensor[lr.tensor] = lr
        by_tensor.setdefault(lr.ir_tensor, lr)

    def proxy(lay: Layer):
        rows = [by_tensor[t] for t in [lay.tensor, lay.ir_tensor] + lay.group if t in by_tensor]
        if not rows:
            return (math.inf, 0.0)
        sq = min(_sqnr_key(r.isolated.sqnr_db) for r in rows)
        return (sq, -max(r.stats.clip_rate for r in rows))

    order = sorted(range(len(layers)), key=lambda i: proxy(layers[i]))
    keep = set(order[:max(0, k)])
    return [l for i, l in enumerate(layers) if i in keep], [l for i, l in enumerate(layers) if i not in keep]


def sensitivity(ev: Evaluator, layers: list[Layer], base_cycles: float | None, progress=None) -> list[dict]:
    rows = []
    for k, lay in enumerate(layers):
        t0 = time.perf_counter()
        delta = None
        if lay.mode == "int16":
            (sc, c), how = ev.measure([lay.tensor], f"int16_{k}"), "int16"
            delta = None if c is None or base_cycles is None else c - base_cycles
        else:
            sc, how = ev.float_layer(lay.node_index, lay.ir_tensor)
        b = ev.base_score
        rows.append({"layer": lay.node, "op": lay.op, "tensor": lay.tensor, "tensors": lay.group, "dtype": lay.dtype,
                     "mode": how, "reason": lay.reason, "cosine": sc.cosine, "sqnr_db": _num(sc.sqnr_db),
                     "gain_cosine": sc.cosine - b.cosine,
                     "gain_sqnr_db": _num(_sqnr_key(sc.sqnr_db) - _sqnr_key(b.sqnr_db)),
                     "delta_cycles": delta, "seconds": round(time.perf_counter() - t0, 3)})
        if progress:
            progress(k + 1, len(layers))
    # a layer measured with the float reference as its output also loses every earlier layer's error: an upper
    # bound, ranked after the layers measured alone
    rows.sort(key=lambda r: (r["mode"] == "float (reference output)", -(r["gain_sqnr_db"] or 0.0), -r["gain_cosine"]))
    for i, r in enumerate(rows):
        r["rank"] = i + 1
    return rows


def _num(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


# ---------------------------------------------------------------------------------------------------------------
# Advisor


def bias_remedy(check_result, settings: requant.QuantSettings, sim) -> dict | None:
    """The re-quantization that keeps clipped int32 biases in range (see the module docstring)."""
    hits = [(node, f) for node, f in check_result.findings if f.rule == "bias.saturated"]
    if not hits:
        return None
    prog = sim.program
    nodes = {n.name: n for n in prog.nodes}
    layers, weights = [], []
    for node, f in hits:
        n = nodes.get(node)
        w = None
        if n is not None and len(n.inputs) > 1:
            wname = prog.tensors[n.inputs[1]].name
            w = wname[:-len("_quantized")] if wname.endswith("_quantized") else wname
            weights.append(w)
        layers.append({"node": node, "channels": f.values.get("channel_list", []), "weight": w,
                       "tensor": prog.tensors[n.outputs[0]].float_name if n is not None else None})
    if settings.extra_options.get("QDQDisableWeightAdjustForInt32Bias"):
        fix = {"QDQDisableWeightAdjustForInt32Bias": False}
        how = ("the model was quantized with QDQDisableWeightAdjustForInt32Bias=True (onnxruntime's weight-scale "
               "adjustment for int32 biases off, as 1.18 behaved): turn it back on (onnxruntime >= 1.20.1), which "
               "enlarges the tiny weight scales of those channels so their biases fit")
    else:
        fix = {"TensorQuantOverrides": {w: [{"quant_type": "QInt8", "symmetric": True}] for w in weights if w}}
        how = ("per-tensor int8 weights for the affected layers (their bias scale input scale x weight scale grows "
               "by orders of magnitude, so the int32 bias fits)")
    return {"layers": layers, "extra_options": fix, "remedy": how}


def _label(p: dict) -> str:
    if p.get("kind") == "segment":
        a, b, n = p["range"][0], p["range"][1], p["of"]
        if b - a == 1:
            return f"segment {a + 1} of {n} int16-allowed layers ({p['tensors'][0]})"
        return f"segment {a + 1}-{b} of {n} int16-allowed layers ({p['tensors'][0]} .. {p['tensors'][-1]})"
    return p["tensors"][-1] if p["tensors"] else "-"


def advise(ev: Evaluator, layers: list[Layer], sens: list[dict], base_cycles: float | None,
           max_slowdown: float | None = 1.2, budget_ms: float | None = None, clock_hz: float | None = None,
           max_points: int = 10, segment_levels: int = 3) -> dict:
    res = {"budget": None, "baseline": {"cosine": ev.base_score.cosine, "sqnr_db": _num(ev.base_score.sqnr_db),
                                        "cycles": base_cycles},
           "order": [], "curve": [], "chosen": [], "chosen_point": None,
           "method": "greedy by SQNR gain per added cycle, plus contiguous segments of the int16-allowed layers "
                     "(halves, quarters, ...); every point promoted, re-simulated and re-estimated"}
    if base_cycles is None:
        res["skipped"] = "the board has no latency model ([cost] section): no budget, no int16 advice"
        return res
    budget = base_cycles * (max_slowdown if max_slowdown else math.inf)
    if budget_ms is not None and clock_hz:
        budget = min(budget, budget_ms * 1e-3 * clock_hz) if max_slowdown is None else budget_ms * 1e-3 * clock_hz
    res["budget"] = {"cycles": budget, "max_slowdown": max_slowdown if budget_ms is None else None,
                     "budget_ms": budget_ms, "ms": budget / clock_hz * 1e3 if clock_hz else None}
    cands = [r for r in sens if r["mode"] == "int16" and (r["gain_sqnr_db"] or 0) > 0 and r["delta_cycles"] is not None]
    cands.sort(key=lambda r: -(r["gain_sqnr_db"] / r["delta_cycles"] if r["delta_cycles"] > 0 else math.inf))
    res["order"] = [{"tensor": r["tensor"], "layer": r["layer"], "gain_sqnr_db": r["gain_sqnr_db"],
                     "delta_cycles": r["delta_cycles"]} for r in cands]
    predicted, fit = base_cycles, 0
    for i, r in enumerate(cands):
        predicted += max(r["delta_cycles"], 0)
        if predicted <= budget:
            fit = i + 1
    n = len(cands)
    ks = {0, n, fit} | ({round(n * j / (max_points - 1)) for j in range(max_points)} if n > max_points else set(range(n + 1)))
    points, seen = [], set()

    def point(tensors, tag, **extra):
        key = frozenset(tensors)
        if key in seen:
            return
        seen.add(key)
        if not tensors:
            sc, cyc = ev.base_score, base_cycles
        else:
            sc, cyc = ev.measure(tensors, tag)
        points.append({"k": len(tensors), "tensors": list(tensors), "cycles": cyc,
                       "slowdown": cyc / base_cycles if base_cycles else None, "cosine": sc.cosine,
                       "sqnr_db": _num(sc.sqnr_db), "within_budget": cyc <= budget * (1 + 1e-12), **extra})

    for k in sorted(ks):
        point([r["tensor"] for r in cands[:k]], f"curve_{k}", kind="greedy")
    # one layer at a time misses error spread over many layers (each alone gains little): contiguous segments of
    # every int16-allowed layer, in graph order, whatever their single gain
    allowed = [lay.tensor for lay in layers if lay.mode == "int16"]
    m = len(allowed)
    for level in range(segment_levels + 1 if m else 0):
        parts = 2 ** level
        if parts > m:
            break
        bounds = [round(m * j / parts) for j in range(parts + 1)]
        for j in range(parts):
            a, b = bounds[j], bounds[j + 1]
            point(allowed[a:b], f"seg_{level}_{j}", kind="segment", range=[a, b], of=m)
    for p in points:
        p["pareto"] = not any(q is not p and q["cycles"] <= p["cycles"] and
                              _sqnr_key(q["sqnr_db"] if q["sqnr_db"] is not None else math.inf) >=
                              _sqnr_key(p["sqnr_db"] if p["sqnr_db"] is not None else math.inf) and
                              (q["cycles"] < p["cycles"] or (q["sqnr_db"] or 0) > (p["sqnr_db"] or 0))
                              for q in points)
        p["label"] = _label(p)
    ok = [p for p in points if p["within_budget"]]
    best = max(ok, key=lambda p: (_sqnr_key(p["sqnr_db"] if p["sqnr_db"] is not None else math.inf), -p["cycles"]))
    best["chosen"] = True
    res["curve"] = points
    res["chosen"] = best["tensors"]
    res["chosen_point"] = {k: best[k] for k in ("k", "cycles", "slowdown", "cosine", "sqnr_db", "kind", "label")}
    return res


def weight_candidates(sim, sens: list[dict], min_gain_db: float = 1.0, limit: int = 3) -> list[dict]:
    """MAC layers whose activations are already 16-bit (int16 activations cannot help them) and whose *float*
    sensitivity gains at least ``min_gain_db``: the op in float loses the error of its 8-bit weights, so the fix
    puts those weights at int16 (where the board's ``weight_dtypes`` allow it), at most ``limit``, best first.
    Not simulated before re-quantization (the QDQ model has no float weights): measured with ``--requantize``."""
    from .checks import Rules
    prog = sim.program
    nodes = {n.name: n for n in prog.nodes}
    rules = prog.board.rules or Rules()
    out = []
    for r in sens:
        if r["mode"] != "float" or (r["gain_sqnr_db"] or 0.0) < min_gain_db:
            continue
        n = nodes.get(r["layer"])
        if n is None or n.op not in requant._MAC or len(n.inputs) < 2:
            continue
        x, w = prog.tensors[n.inputs[0]], prog.tensors[n.inputs[1]]
        if not w.is_const or w.q is None or w.q.bits != 8 or x.q is None or x.q.bits < 16:
            continue
        lim = rules.limits(n.op) if rules.constrained else None
        allowed = (lim.weight_dtypes if lim is not None and lim.weight_dtypes else rules.weight_dtypes)
        if "int16" not in allowed:
            continue
        wname = w.name[:-len("_quantized")] if w.name.endswith("_quantized") else w.name
        out.append({"layer": n.name, "tensor": r["tensor"], "weight": wname, "gain_sqnr_db": r["gain_sqnr_db"]})
        if len(out) >= limit:
            break
    return out


def make_fix(chosen: list[str], remedy: dict | None, aliases: dict | None = None,
             weights: list[str] | None = None) -> dict:
    """quantize_static extra_options (JSON form): the chosen tensors at int16, plus the bias remedy. ``aliases``:
    QDQ float name -> the float model's name (a graph output quantize_static renamed ``X_QuantizeLinear_Input``)."""
    fix: dict = {}
    aliases = aliases or {}
    tqo = {aliases.get(t, t): [{"quant_type": "QInt16", "symmetric": True}] for t in chosen}
    tqo.update({w: [{"quant_type": "QInt16", "symmetric": True}] for w in weights or []})
    if remedy:
        extra = remedy["extra_options"]
        fix.update({k: v for k, v in extra.items() if k != "TensorQuantOverrides"})
        tqo.update(extra.get("TensorQuantOverrides", {}))
    if tqo:
        fix["TensorQuantOverrides"] = tqo
    return fix


# ---------------------------------------------------------------------------------------------------------------
# Checks and latency next to the report's layers


def checks_section(check_result, report) -> dict:
    by_node: dict[str, list] = {}
    for node, f in check_result.findings:
        by_node.setdefault(node, []).append({"rule": f.rule, "severity": f.severity, "message": f.message,
                                             "fix": f.fix, "values": f.values})
    tensors: dict[str, list[str]] = {}
    for lay in report.layers:
        tensors.setdefault(lay.node, []).append(lay.tensor)
    layers = [{"node": node, "tensors": tensors.get(node, []), "findings": fl}
              for node, fl in by_node.items() if node != "<model>"]
    return {"board": check_result.board, "deployable": check_result.deployable,
            "errors": check_result.count("error"), "warnings": check_result.count("warning"),
            "infos": check_result.count("info"), "model_findings": by_node.get("<model>", []), "layers": layers}


def latency_section(est) -> dict:
    s = est.summary
    return {"board": est.board, "clock_hz": est.clock_hz, "total_cycles": s["total_cycles"],
            "latency_ms": s["latency_ms"], "fps": _num(s["fps"]), "cycles_by_class": s["cycles_by_class"],
            "layers": [{"node": r.node, "op": r.op, "op_class": r.op_class, "precision": r.precision,
                        "target": r.target, "cycles": r.cycles, "share_pct": r.share, "bound": r.bound}
                       for r in est.layers]}


# ---------------------------------------------------------------------------------------------------------------
# Everything, on a finished report


@dataclass
class AdviceOptions:
    samples: int = 8                 # samples the sensitivity/advisor measure on (the report's first ones)
    sensitivity: bool = True
    max_slowdown: float | None = 1.2
    budget_ms: float | None = None
    max_points: int = 10
    candidates: int | None = None    # measure the sensitivity of only this many layers (``shortlist``)
    overrides: str | None = None     # write the fix JSON here
    calibration: list | None = None  # feeds for --requantize
    calibration_source: str = ""
    fixed_model: str | None = None   # where the re-quantized model goes
    eval_samples: list | None = None  # samples to measure before/after the fix on (default: the report's)


def annotate(report, samples: list[dict], board, float_model=None, input_shapes=None,
             options: AdviceOptions | None = None, progress=None) -> None:
    """Fill ``report.checks``, ``.latency``, ``.sensitivity`` and ``.advisor`` (see the module docstring)."""
    import json
    from .checks import check
    from .cost import estimate
    opt = options or AdviceOptions()
    ev = Evaluator(report.model, float_model, board, samples[:max(1, opt.samples)], input_shapes)
    try:
        chk = check(ev.base)
        report.checks = checks_section(chk, report)
        try:
            est = estimate(ev.base)
            report.latency = latency_section(est)
            base_cycles, clock = float(est.summary["total_cycles"]), est.clock_hz
        except BoardError as exc:
            report.latency = None
            base_cycles, clock = None, None
            report.latency_note = str(exc)
        settings = requant.quantization_settings(ev.proto)
        remedy = bias_remedy(chk, settings, ev.base)
        if opt.sensitivity:
            layers = layers_of(ev.base, ev.proto)
            measured, skipped = shortlist(layers, report, opt.candidates)
            sens = sensitivity(ev, measured, base_cycles, progress)
            report.sensitivity = {"samples": len(ev.samples), "baseline": ev.base_score.to_dict(),
                                  "metric": "output cosine / SQNR vs the float reference (lowest over outputs)",
                                  "layers": sens, "candidates": opt.candidates,
                                  "not_measured": [lay.tensor for lay in skipped]}
            adv = advise(ev, layers, sens, base_cycles, opt.max_slowdown, opt.budget_ms, clock, opt.max_points)
            adv["weight_int16"] = weight_candidates(ev.base, sens)
        else:
            adv = {"skipped": "sensitivity not measured (--no-sensitivity): no int16 advice", "chosen": [],
                   "curve": []}
        adv["bias_remedy"] = remedy
        adv["settings"] = settings.to_dict()
        from .accuracy import output_aliases
        fix = make_fix(adv["chosen"], remedy, output_aliases(ev.proto),
                       [w["weight"] for w in adv.get("weight_int16") or []])
        adv["fix"] = fix
        if opt.overrides:
            Path(opt.overrides).write_text(json.dumps(fix, indent=1) + "\n")
            adv["overrides_file"] = opt.overrides
        if opt.calibration is not None:
            adv["requantized"] = _requantize_and_measure(ev, report, float_model, settings, fix, opt, base_cycles)
        report.advisor = adv
    finally:
        ev.close()


def _requantize_and_measure(ev, report, float_model, settings, fix, opt, base_cycles) -> dict:
    from .checks import check
    if not float_model:
        return {"error": "re-quantization needs the float model (--float)"}
    out = opt.fixed_model or Path(report.model).name.replace(".qdq.onnx", ".onnx").replace(".onnx", ".fixed.qdq.onnx")
    t0 = time.perf_counter()
    used = requant.requantize(float_model, out, opt.calibration, settings, fix)
    sim = ev.load(out, "fixed")
    samples = opt.eval_samples or ev.samples
    if samples is ev.samples:
        refs = ev.refs
    else:
        refs = [{k: v for k, v in ev.ref.run(s).items() if k in ev.outputs} for s in samples]
    before = ev.score_sim(ev.base, samples, refs)
    after = ev.score_sim(sim, samples, refs)
    c = _cycles(sim)
    chk = check(sim)
    return {"model": out, "calibration": opt.calibration_source, "calibration_samples": len(opt.calibration),
            "extra_options": used, "fix_empty": not fix, "samples": len(samples),
            "before": before.to_dict(), "after": after.to_dict(),
            "cycles_before": base_cycles, "cycles_after": c,
            "bias_saturated_after": sum(1 for _, f in chk.findings if f.rule == "bias.saturated"),
            "seconds": round(time.perf_counter() - t0, 2)}
