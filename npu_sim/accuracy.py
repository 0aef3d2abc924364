"""Accuracy report: where a quantized model loses accuracy, layer by layer, on the board's real integers.

``report(model, data, float_model=None, board=...)`` runs every sample of a dataset twice — through the integer
program (the board) and through a float reference (onnxruntime) — and returns an ``AccuracyReport``:

* **Float reference.** With ``float_model``: that ONNX model (the one ``quantize_static`` started from), every
  needed intermediate tensor exposed as a graph output. Without: the QDQ model's own float semantics — a derived
  graph where every activation QuantizeLinear→DequantizeLinear pair is removed (the consumer reads the float
  tensor) and every weight/bias DequantizeLinear of a constant becomes a float constant holding the dequantized
  values (so weight quantization is part of the reference, activation quantization is not). Both run on
  onnxruntime's CPU provider with graph optimizations off and one thread (deterministic).
* **Matching.** An integer tensor stands for the ONNX float tensor ``float_name`` (its QuantizeLinear's input).
  Graph outputs are matched by their output name (quantize_static renames the op's own output
  ``<out>_QuantizeLinear_Input``).
* **Output metrics** per graph output over the dataset: cosine similarity, MAE, max |error|, SQNR, and when the
  output looks like class scores (``[B, C]`` or ``[B, C, 1, 1]``, C ≥ 2) top-1 agreement (same argmax) and top-5
  agreement (the float top-1 class is among the integer top-5); with labels, both accuracies.
* **Layerwise**, for every quantized tensor matched to the reference:
  *accumulated* error — the full integer run (dequantized) against the float reference; *isolated* error — the
  op alone, fed the float reference of its inputs quantized with its inputs' quantization, against the float
  reference of its output (its own error: rounding, requantization, lookup tables, clipping). Each as cosine,
  SQNR, MAE and in output LSBs (|diff| / scale: mean and max).
  Statistics of the float activation: min, max, percentiles 1/50/99/99.9 (from a histogram of 2048 bins over
  twice the quantized range, so exact to one bin: ¼ LSB for 8-bit, 64 LSB for 16-bit tensors; values beyond the
  histogram are reported as the exact min/max), and the clipping rate (share of float values that quantize
  outside [qmin, qmax]). For ops with a weight: its range per output channel.
* **Collapse point**: the first tensor, in execution order, whose accumulated cosine falls below
  ``collapse_cosine`` (default 0.99). Its *cause* is ``own error`` when its isolated cosine is also below the
  threshold (the layer itself is broken: bias, scale, clipping, table), else ``inherited`` (its inputs were
  already degraded and it amplifies that). ``largest_drop`` names the tensor whose accumulated cosine falls the
  most below that of its inputs.

Aggregates over the dataset are sums in sample order (float64) and exact integer histograms, so the result is the
same for any number of worker processes.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import FloatReferenceError, InputError, ModelLoadError

SCHEMA_VERSION = "1.1"
HIST_BINS = 2048

# ---------------------------------------------------------------------------------------------------------------
# Metrics


@dataclass
class ErrorMetrics:
    cosine: float
    sqnr_db: float          # 10·log10(Σx² / Σ(x−y)²); +inf when the error is exactly zero
    mae: float
    max_abs: float
    mean_lsb: float | None  # mean |x−y| / scale (layers only)
    max_lsb: float | None
    max_lsb_in_range: float | None  # max |x−y| / scale where the float value lies inside the quantized range
    exact: bool             # every value equal


_PAIR = ("sxx", "syy", "sxy", "see", "sae", "max_ae", "s_lsb", "max_lsb", "max_lsb_in_range")
_NP = len(_PAIR)


def _pair_stats(x: np.ndarray, y: np.ndarray, inv_scale=None, in_range=None) -> np.ndarray:
    x = np.asarray(x, np.float64).reshape(-1) if inv_scale is None else np.asarray(x, np.float64)
    y = np.asarray(y, np.float64).reshape(x.shape)
    d = x - y
    ad = np.abs(d)
    out = np.empty(_NP)
    out[0] = np.dot(x.reshape(-1), x.reshape(-1))
    out[1] = np.dot(y.reshape(-1), y.reshape(-1))
    out[2] = np.dot(x.reshape(-1), y.reshape(-1))
    out[3] = np.dot(d.reshape(-1), d.reshape(-1))
    out[4] = ad.sum()
    out[5] = ad.max() if ad.size else 0.0
    if inv_scale is not None:
        lsb = ad * inv_scale
        out[6] = lsb.sum()
        out[7] = lsb.max() if lsb.size else 0.0
        if in_range is not None:
            sel = lsb[in_range]
            out[8] = sel.max() if sel.size else 0.0
        else:
            out[8] = out[7]
    else:
        out[6] = out[7] = out[8] = 0.0
    return out


def _cos(sxx, syy, sxy) -> float:
    if sxx == 0.0 and syy == 0.0:
        return 1.0
    if sxx == 0.0 or syy == 0.0:
        return 0.0
    return float(max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy))))


def _finish(p: np.ndarray, n: float, lsb: bool) -> ErrorMetrics:
    sxx, syy, sxy, see, sae, max_ae, s_lsb, max_lsb, max_in = (float(v) for v in p)
    exact = see == 0.0
    sqnr = math.inf if exact else (10.0 * math.log10(sxx / see) if sxx > 0 else -math.inf)
    n = max(n, 1.0)
    return ErrorMetrics(cosine=_cos(sxx, syy, sxy), sqnr_db=sqnr, mae=float(sae / n), max_abs=max_ae,
                        mean_lsb=float(s_lsb / n) if lsb else None, max_lsb=max_lsb if lsb else None,
                        max_lsb_in_range=max_in if lsb else None, exact=exact)


def error_metrics(reference, actual, scale=None) -> ErrorMetrics:
    """Cosine, SQNR (dB), MAE, max |error| of ``actual`` against ``reference`` (and in LSBs when ``scale``)."""
    x = np.asarray(reference, np.float64)
    y = np.asarray(actual, np.float64)
    if x.shape != y.shape:
        raise ValueError(f"shapes differ: {x.shape} vs {y.shape}")
    inv = None if scale is None else 1.0 / np.asarray(scale, np.float64)
    return _finish(_pair_stats(x, y, inv), float(x.size), scale is not None)


# ---------------------------------------------------------------------------------------------------------------
# Float reference


def _onnxruntime():
    try:
        import onnxruntime as ort
    except ImportError:
        raise FloatReferenceError("the accuracy report runs its float reference on onnxruntime, which is not "
                                  "installed: pip install 'npu-sim[report]' (or pip install onnxruntime)") from None
    return ort


def _is_op(node, op) -> bool:
    return node.op_type == op and node.domain in ("", "ai.onnx", "com.microsoft")


def _const_values(graph) -> dict[str, np.ndarray]:
    from onnx import numpy_helper
    vals = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value":
                    vals[n.output[0]] = numpy_helper.to_array(a.t)
    return vals


def _qdq_params(node, consts):
    scale = consts[node.input[1]].astype(np.float32)
    zp = consts[node.input[2]] if len(node.input) > 2 and node.input[2] else None
    axis, block = 1, 0
    for a in node.attribute:
        if a.name == "axis":
            axis = a.i
        elif a.name == "block_size":
            block = a.i
    if block:
        raise FloatReferenceError(f"node {node.name!r}: blocked quantization (block_size) is not supported by the "
                                  f"derived float reference; pass --float FLOAT.onnx")
    return scale, zp, axis


def _bshape(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    if v.ndim == 0 or v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return v.reshape(shape)


def _dequantize_const(node, x: np.ndarray, consts) -> np.ndarray:
    scale, zp, axis = _qdq_params(node, consts)
    z = np.zeros((), np.int64) if zp is None else zp.astype(np.int64)
    return ((x.astype(np.int64) - _bshape(z, x.ndim, axis)).astype(np.float32)
            * _bshape(scale, x.ndim, axis)).astype(np.float32)


def _quantize_const(node, x: np.ndarray, consts) -> np.ndarray:
    scale, zp, axis = _qdq_params(node, consts)
    dt = np.dtype(zp.dtype) if zp is not None else np.dtype(np.uint8)
    info = np.iinfo(dt)
    z = np.zeros((), np.int64) if zp is None else zp.astype(np.int64)
    v = np.rint(x.astype(np.float32) / _bshape(scale, x.ndim, axis)) + _bshape(z, x.ndim, axis)
    return np.clip(v, info.min, info.max).astype(dt)


def derive_float_model(model):
    """The QDQ model's own float semantics (see the module docstring) as a new ``onnx.ModelProto``."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    consts = _const_values(g)
    producer = {o: n for n in g.node for o in n.output}
    alias: dict[str, str] = {}
    new_consts: dict[str, np.ndarray] = {}
    dropped = set()
    for i, node in enumerate(g.node):
        if not _is_op(node, "DequantizeLinear"):
            continue
        x = node.input[0]
        src = producer.get(x)
        if x in consts:
            new_consts[node.output[0]] = _dequantize_const(node, consts[x], consts)
        elif src is not None and _is_op(src, "QuantizeLinear") and src.input[0] in consts:
            w = consts[src.input[0]]
            new_consts[node.output[0]] = _dequantize_const(node, _quantize_const(src, w, consts), consts)
        elif src is not None and _is_op(src, "QuantizeLinear"):
            alias[node.output[0]] = src.input[0]
        else:
            continue  # a DequantizeLinear of a quantized graph input: keep it
        dropped.add(i)

    def resolve(name: str) -> str:
        seen = 0
        while name in alias and seen < 1000:
            name, seen = alias[name], seen + 1
        return name

    nodes = [n for i, n in enumerate(g.node) if i not in dropped]
    for n in nodes:
        for k, name in enumerate(n.input):
            if name:
                n.input[k] = resolve(name)
    outputs = {o.name for o in g.output}
    while True:  # drop QuantizeLinear nodes nobody reads any more
        used = {name for n in nodes for name in n.input} | outputs
        keep = [n for n in nodes if not (_is_op(n, "QuantizeLinear") and not any(o in used for o in n.output))]
        if len(keep) == len(nodes):
            break
        nodes = keep
    extra = []
    for o in g.output:
        if o.name in alias:
            extra.append(helper.make_node("Identity", [resolve(o.name)], [o.name], name=f"{o.name}_float_ref"))
            o.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    clamps, seen = [], set()
    final_producer = {o: n for n in nodes for o in n.output
                      if not (_is_op(n, "QuantizeLinear") or _is_op(n, "DequantizeLinear"))}
    for q in [n for n in g.node if _is_op(n, "QuantizeLinear")]:
        if q.input[0] in seen:
            continue
        seen.add(q.input[0])
        clamps.extend(_removed_activation_clamp(q, consts, final_producer, {i.name for i in g.input}))
    for node, clip, lo, hi in clamps:  # the producer writes X__unclamped, a Clip writes X
        x = clip.output[0]
        node.output[list(node.output).index(x)] = clip.input[0]
        new_consts[clip.input[1]] = lo
        if hi is not None:
            new_consts[clip.input[2]] = hi
    del g.node[:]
    g.node.extend(_in_order(nodes + [c for _, c, _, _ in clamps] + extra))
    used = {name for n in g.node for name in n.input}
    inits = [i for i in g.initializer if i.name in used and i.name not in new_consts]
    del g.initializer[:]
    g.initializer.extend(inits)
    for name, arr in new_consts.items():
        if name in used:
            g.initializer.append(numpy_helper.from_array(arr, name))
    del g.value_info[:]
    return m


def _removed_activation_clamp(q, consts, producer, graph_inputs):
    """onnxruntime's quantizer removes a Relu/Clip before a QuantizeLinear when activations are asymmetric
    (QDQRemovableActivation): the op's output takes the activation's name and range, and the clamp is left to
    the quantization's saturation. Where a quantized range starts exactly at 0 (zero point = qmin) the derived
    reference therefore clamps at 0, and at the range's top too when that is a whole number (Clip(0, 6) -> 6.0;
    a calibrated maximum practically never is). Exact semantics need the float model (--float)."""
    from onnx import helper
    x = q.input[0]
    if x in consts or x in graph_inputs or x not in producer or len(q.input) < 3 or not q.input[2]:
        return []
    zp = consts.get(q.input[2])
    scale = consts.get(q.input[1])
    if zp is None or scale is None or zp.size != 1 or scale.size != 1 or zp.dtype.kind not in "iu":
        return []
    info = np.iinfo(zp.dtype)
    if int(zp.reshape(-1)[0]) != info.min:
        return []
    top = float(np.float32((info.max - info.min) * np.float64(scale.reshape(-1)[0])))
    hi = np.array(round(top), np.float32) if top >= 1 and abs(top - round(top)) <= 1e-5 * top else None
    raw = x + "__unclamped"
    names = [raw, x + "__clamp_min", x + "__clamp_max" if hi is not None else ""]
    clip = helper.make_node("Clip", names, [x], name=x + "__removed_activation")
    return [(producer[x], clip, np.array(0.0, np.float32), hi)]


def _in_order(nodes):
    """Topological order (a Clip inserted after its producer)."""
    made = {o for n in nodes for o in n.output}
    ready, out, pending = set(), [], list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all((not i) or i not in made or i in ready for i in n.input):
                out.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            out.extend(rest)
            break
        pending = rest
    return out


def output_aliases(qdq_model) -> dict[str, str]:
    """float_name -> graph output name, where quantize_static renamed a graph output ``X`` to
    ``X_QuantizeLinear_Input`` (Q→DQ on the output, the DQ writing ``X``)."""
    g = qdq_model.graph
    outs = {o.name for o in g.output}
    producer = {o: n for n in g.node for o in n.output}
    alias = {}
    for n in g.node:
        if _is_op(n, "DequantizeLinear") and n.output[0] in outs:
            src = producer.get(n.input[0])
            if src is not None and _is_op(src, "QuantizeLinear"):
                alias[src.input[0]] = n.output[0]
    return alias


class FloatReference:
    """Runs the float reference (a float model, or the QDQ model's float semantics) and returns named tensors."""

    def __init__(self, qdq_path, float_path=None, threads: int = 1):
        import onnx
        self.kind = "float model" if float_path else "QDQ model float semantics"
        try:
            qdq = onnx.load(str(qdq_path))
        except Exception as exc:
            raise ModelLoadError(f"{qdq_path}: cannot read the ONNX model ({exc})") from None
        self.aliases = output_aliases(qdq)
        self.qdq_inputs = [i.name for i in qdq.graph.input if i.name not in {t.name for t in qdq.graph.initializer}]
        if float_path:
            p = Path(float_path)
            if not p.is_file():
                raise FloatReferenceError(f"--float {str(p)!r}: file not found")
            try:
                model = onnx.load(str(p))
            except Exception as exc:
                raise FloatReferenceError(f"--float {str(p)!r}: cannot read it as an ONNX model ({exc})") from None
            qops = [n.name or n.op_type for n in model.graph.node
                    if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
            if qops:
                raise FloatReferenceError(f"--float {str(p)!r} contains QuantizeLinear/DequantizeLinear nodes "
                                          f"({qops[0]!r}, ...); give the float model quantize_static started from")
            finputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
            missing = [n for n in self.qdq_inputs if n not in finputs]
            if missing:
                raise FloatReferenceError(f"--float {str(p)!r} has no input(s) {missing} (its inputs: "
                                          f"{sorted(finputs)}); give the float model this QDQ model was quantized "
                                          f"from")
            self.source = str(p)
        else:
            model = derive_float_model(qdq)
            self.source = str(qdq_path)
        self.model = model
        g = model.graph
        self.available = {o for n in g.node for o in n.output if o} | set(self.qdq_inputs)
        self.outputs = [o.name for o in g.output]
        self.threads = threads
        self._session = None
        self._wanted: list[str] = []

    def name_for(self, float_name: str) -> str | None:
        if float_name in self.available:
            return float_name
        alias = self.aliases.get(float_name)
        return alias if alias in self.available else None

    def prepare(self, wanted) -> None:
        """Expose ``wanted`` tensors (plus the graph outputs) and build the onnxruntime session."""
        import onnx
        from onnx import helper
        ort = _onnxruntime()
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        have = {o.name for o in m.graph.output}
        self._wanted = [w for w in dict.fromkeys(wanted) if w not in self.qdq_inputs]
        for w in self._wanted:
            if w not in have:
                m.graph.output.append(helper.make_tensor_value_info(w, onnx.TensorProto.FLOAT, None))
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise FloatReferenceError(f"onnxruntime cannot load the float reference ({self.kind}, "
                                      f"{self.source}): {exc}") from None
        self._names = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outs = self._session.run(self._names, feeds)
        except Exception as exc:
            raise FloatReferenceError(f"onnxruntime failed running the float reference ({self.kind}, "
                                      f"{self.source}): {exc}") from None
        res = dict(zip(self._names, outs))
        res.update(feeds)
        return res


# ---------------------------------------------------------------------------------------------------------------
# Report data model


@dataclass
class ActivationStats:
    count: int
    min: float
    max: float
    p1: float
    p50: float
    p99: float
    p99_9: float
    clip_rate: float      # share of float values that quantize outside [qmin, qmax]
    clip_low: int
    clip_high: int


@dataclass
class WeightStats:
    tensor: str
    channel_axis: int
    channels: int
    min: list[float]      # per output channel, dequantized
    max: list[float]
    absmax_smallest: float
    absmax_largest: float
    zero_channels: int    # channels whose weights are all zero


@dataclass
class LayerResult:
    index: int            # execution order among reported tensors
    tensor: str           # ONNX float tensor name
    ir_tensor: str
    node: str
    op: str
    dtype: str
    scale: float | list[float]
    zero_point: int | list[int]
    shape: list[int]
    accumulated: ErrorMetrics
    isolated: ErrorMetrics
    isolated_inputs: str  # "float reference" or "partly integer run" (an input had no float reference)
    input_cosine: float   # lowest accumulated cosine among the op's reported inputs (1.0 when none)
    stats: ActivationStats
    weights: WeightStats | None = None
    hist_float: np.ndarray | None = field(default=None, repr=False)   # counts per bin, LSB units
    hist_int: np.ndarray | None = field(default=None, repr=False)
    hist_lo: float = 0.0
    hist_width: float = 1.0

    @property
    def cosine_drop(self) -> float:
        return self.input_cosine - self.accumulated.cosine


@dataclass
class OutputResult:
    name: str
    shape: list[int]
    metrics: ErrorMetrics
    cosine_min_sample: float
    cosine_mean_sample: float
    classes: int | None = None        # set when the output looks like class scores
    top1_agreement: float | None = None
    top5_agreement: float | None = None
    accuracy_float: float | None = None
    accuracy_int: float | None = None


@dataclass
class Collapse:
    tensor: str
    node: str
    op: str
    index: int
    accumulated_cosine: float
    isolated_cosine: float
    input_cosine: float
    cause: str            # "own error" | "inherited"
    threshold: float


@dataclass
class AccuracyReport:
    model: str
    board: str
    reference: str        # "float model" | "QDQ model float semantics"
    reference_source: str
    data: str
    samples: int
    outputs: list[OutputResult]
    layers: list[LayerResult]
    collapse: Collapse | None
    largest_drop: Collapse | None
    unmatched: list[str]                 # quantized tensors with no float reference
    overflows: dict[str, int]            # node -> accumulators past the board's width (full integer runs)
    collapse_cosine: float
    seconds: float = 0.0
    # Reserved for later sections (null until their feature lands): per-layer latency (npu_sim.cost), check
    # findings (npu_sim.checks), sensitivity ranking, int16 advisor.
    latency: Any = None
    checks: Any = None
    sensitivity: Any = None
    advisor: Any = None

    def worst(self, view: str = "accumulated", count: int = 5) -> list[LayerResult]:
        """Layers with the lowest SQNR in ``view`` ("accumulated" or "isolated"), worst first."""
        return sorted(self.layers, key=lambda l: (getattr(l, view).sqnr_db, l.index))[:count]

    def to_dict(self, histograms: int = 4) -> dict:
        """The JSON document (docs/REPORT_SCHEMA.md)."""
        return _to_json(self, histograms)


# ---------------------------------------------------------------------------------------------------------------
# The per-process engine: one simulator, one float reference, one sample at a time


_L_HEAD = ("n", "xmin", "xmax", "clip_lo", "clip_hi")
_LK = len(_L_HEAD) + 2 * _NP
_O_TAIL = ("cos_sample", "rows", "top1", "top5", "lab_f", "lab_q", "nlab")
_OK = 1 + _NP + len(_O_TAIL)


@dataclass
class _Spec:
    model: str
    board: Any
    input_shapes: dict
    float_model: str | None
    threads: int = 1


@dataclass
class _Layer:
    ir: str
    float_name: str
    ref: str
    node_index: int
    q: Any
    lo: float
    width: float


class _Engine:
    def __init__(self, spec: _Spec):
        from .simulator import load
        self.sim = load(spec.model, board=spec.board, input_shapes=spec.input_shapes)
        self.ref = FloatReference(spec.model, spec.float_model, spec.threads)
        prog = self.sim.program
        self.program = prog
        self.layers: list[_Layer] = []
        self.unmatched: list[str] = []
        for ni, node in enumerate(prog.nodes):
            for out in node.outputs:
                t = prog.tensors[out]
                if t.q is None or t.is_const:
                    continue
                ref = self.ref.name_for(t.float_name)
                if ref is None:
                    self.unmatched.append(t.float_name)
                    continue
                span = t.q.qmax - t.q.qmin + 1
                self.layers.append(_Layer(out, t.float_name, ref, ni, t.q, t.q.qmin - 0.5 - span / 2.0,
                                          2.0 * span / HIST_BINS))
        ends = set(self.ref.qdq_inputs) | set(prog.outputs)
        if self.unmatched and not any(l.ref not in ends for l in self.layers):
            raise FloatReferenceError(
                f"none of the intermediate quantized tensors of {spec.model} (e.g. "
                f"{', '.join(repr(n) for n in self.unmatched[:3])}) has a tensor of that name in the float "
                f"reference {self.ref.source}; give the float model quantize_static started from (same tensor "
                f"names)")
        missing_out = [o for o in prog.outputs if o not in self.ref.available]
        if missing_out:
            raise FloatReferenceError(f"the float reference {self.ref.source} has no output tensor {missing_out[0]!r}"
                                      f"; give the float model this QDQ model was quantized from")
        self.ref.prepare([l.ref for l in self.layers] + list(prog.outputs))
        self.by_ir = {l.ir: l for l in self.layers}
        self.producer = {o: ni for ni, n in enumerate(prog.nodes) for o in n.outputs}
        self.iso_nodes = sorted({l.node_index for l in self.layers})
        self._subprograms = {}

    # -- one node alone on chosen inputs (through the executor's public entry point)
    def _run_node(self, ni: int, feeds: dict, overflows: dict) -> dict:
        from .executor import execute
        from .ir import Program
        prog = self.program
        sub = self._subprograms.get(ni)
        if sub is None:
            node = prog.nodes[ni]
            ins = list(dict.fromkeys(n for n in node.inputs if not prog.tensors[n].is_const))
            sub = Program(prog.tensors, [node], {n: n for n in ins}, {o: o for o in node.outputs}, prog.board,
                          prog.model_path, prog.opset)
            self._subprograms[ni] = sub
        res = execute(sub, {n: feeds[n] for n in sub.inputs})
        for k, v in res.overflows.items():
            overflows[k] = overflows.get(k, 0) + v
        return res.values

    def _iso_input(self, name: str, ref: dict, full: dict, memo: dict, overflows: dict):
        """The value an isolated op is fed for its input ``name``: the float reference quantized with the
        input's quantization; for a tensor the reference lacks (e.g. made by a rewrite), its producer run on
        such inputs in turn; the full integer run's value only where nothing else is possible."""
        if name in memo:
            return memo[name]
        prog = self.program
        t = prog.tensors[name]
        lay = self.by_ir.get(name)
        ref_name = lay.ref if lay is not None else (self.ref.name_for(t.float_name) if t.q is not None else None)
        if t.q is None:
            val = (ref[self.program_input_name(name)], True)
        elif ref_name is not None:
            val = (t.q.quantize(np.asarray(ref[ref_name]).reshape(t.shape)), True)
        elif name in self.producer:
            ni = self.producer[name]
            ins = [n for n in prog.nodes[ni].inputs if not prog.tensors[n].is_const]
            got = {n: self._iso_input(n, ref, full, memo, overflows) for n in dict.fromkeys(ins)}
            out = self._run_node(ni, {n: v for n, (v, _) in got.items()}, overflows)
            complete = all(c for _, c in got.values())
            for o in prog.nodes[ni].outputs:
                memo.setdefault(o, (out[o], complete))
            val = memo[name]
        else:
            val = (full[name], False)
        memo[name] = val
        return val

    def _isolated(self, ni: int, ref: dict, full: dict, memo: dict, overflows: dict) -> tuple[dict, bool]:
        prog = self.program
        ins = [n for n in prog.nodes[ni].inputs if not prog.tensors[n].is_const]
        got = {n: self._iso_input(n, ref, full, memo, overflows) for n in dict.fromkeys(ins)}
        out = self._run_node(ni, {n: v for n, (v, _) in got.items()}, overflows)
        return out, all(c for _, c in got.values())

    def program_input_name(self, tname: str) -> str:
        for name, t in self.program.inputs.items():
            if t == tname:
                return name
        return tname

    def sample(self, feeds: dict, labels: np.ndarray | None, hist_f, hist_q) -> tuple[np.ndarray, np.ndarray, dict, list]:
        prog = self.program
        ref = self.ref.run(feeds)
        run = self.sim.execute(feeds, keep_all=True)
        full = run.values
        overflows = dict(run.overflows)
        iso_overflows: dict[str, int] = {}
        iso_vals, iso_complete, memo = {}, {}, {}
        for ni in self.iso_nodes:
            vals, complete = self._isolated(ni, ref, full, memo, iso_overflows)
            for o in prog.nodes[ni].outputs:
                iso_vals[o] = vals[o]
                iso_complete[o] = complete
        rows = np.zeros((len(self.layers), _LK))
        incomplete = []
        for li, lay in enumerate(self.layers):
            t = prog.tensors[lay.ir]
            x = ref[lay.ref]
            q = full[lay.ir]
            if x.size != q.size:
                raise FloatReferenceError(f"float tensor {lay.ref!r} of {self.ref.source} has shape "
                                          f"{list(x.shape)}, the quantized tensor {lay.ir!r} {list(q.shape)}; "
                                          f"the float model does not match the QDQ model")
            x = np.asarray(x, np.float32).reshape(q.shape)
            if not np.isfinite(x).all():
                raise FloatReferenceError(f"the float reference ({self.ref.kind}, {self.ref.source}) computes NaN "
                                          f"or infinity in tensor {lay.ref!r}; check the float model on this data "
                                          f"(or give the float model with --float)")
            s, z = lay.q.broadcast(q.ndim)
            inv = 1.0 / np.asarray(s, np.float64)
            u = x.astype(np.float64) * inv + z
            rows[li, 0] = x.size
            rows[li, 1] = float(x.min()) if x.size else 0.0
            rows[li, 2] = float(x.max()) if x.size else 0.0
            rows[li, 3] = np.count_nonzero(u < lay.q.qmin - 0.5)
            rows[li, 4] = np.count_nonzero(u > lay.q.qmax + 0.5)
            idx = np.clip(((u - lay.lo) / lay.width).astype(np.int64), 0, HIST_BINS - 1)
            hist_f[li] += np.bincount(idx.reshape(-1), minlength=HIST_BINS)
            iq = np.clip(((q.astype(np.float64) - lay.lo) / lay.width).astype(np.int64), 0, HIST_BINS - 1)
            hist_q[li] += np.bincount(iq.reshape(-1), minlength=HIST_BINS)
            k = len(_L_HEAD)
            inside = (u >= lay.q.qmin - 0.5) & (u <= lay.q.qmax + 0.5)
            rows[li, k:k + _NP] = _pair_stats(x, t.q.dequantize(q), inv, inside)
            rows[li, k + _NP:] = _pair_stats(x, t.q.dequantize(iso_vals[lay.ir]), inv, inside)
            if not iso_complete[lay.ir]:
                incomplete.append(lay.ir)
        outs = np.zeros((len(prog.outputs), _OK))
        for oi, (name, tname) in enumerate(prog.outputs.items()):
            t = prog.tensors[tname]
            y = t.q.dequantize(full[tname]).astype(np.float64)
            x = np.asarray(ref[name], np.float64)
            if x.size != y.size:
                raise FloatReferenceError(f"output {name!r}: the float reference gives shape {list(x.shape)}, the "
                                          f"quantized model {list(y.shape)}")
            x = x.reshape(y.shape)
            outs[oi, 0] = x.size
            outs[oi, 1:1 + _NP] = _pair_stats(x, y)
            p = outs[oi, 1:1 + _NP]
            k = 1 + _NP
            outs[oi, k] = _cos(p[0], p[1], p[2])
            scores = _class_rows(y.shape)
            if scores:
                b, c = scores
                xf, yq = x.reshape(b, c), y.reshape(b, c)
                top_f = np.argmax(xf, axis=1)
                order = np.argsort(-yq, axis=1, kind="stable")
                outs[oi, k + 1] = b
                outs[oi, k + 2] = np.count_nonzero(order[:, 0] == top_f)
                outs[oi, k + 3] = np.count_nonzero((order[:, :5] == top_f[:, None]).any(axis=1))
                if labels is not None and len(labels) == b:
                    outs[oi, k + 4] = np.count_nonzero(top_f == labels)
                    outs[oi, k + 5] = np.count_nonzero(order[:, 0] == labels)
                    outs[oi, k + 6] = b
        return rows, outs, overflows, incomplete

    def run_chunk(self, chunk) -> dict:
        hist_f = np.zeros((len(self.layers), HIST_BINS), np.int64)
        hist_q = np.zeros_like(hist_f)
        rows, outs, overflows, incomplete = [], [], {}, set()
        for feeds, labels in chunk:
            r, o, ov, inc = self.sample(feeds, labels, hist_f, hist_q)
            rows.append(r)
            outs.append(o)
            for k, v in ov.items():
                overflows[k] = overflows.get(k, 0) + v
            incomplete.update(inc)
        return {"rows": rows, "outs": outs, "hist_f": hist_f, "hist_q": hist_q, "overflows": overflows,
                "incomplete": incomplete}


def _class_rows(shape) -> tuple[int, int] | None:
    if len(shape) == 2 and shape[1] >= 2:
        return shape[0], shape[1]
    if len(shape) == 4 and shape[1] >= 2 and shape[2] == 1 and shape[3] == 1:
        return shape[0], shape[1]
    return None


_WORKER: _Engine | None = None


def _worker_init(spec: _Spec) -> None:
    global _WORKER
    _WORKER = _Engine(spec)


def _worker_run(chunk):
    return _WORKER.run_chunk(chunk)


# ---------------------------------------------------------------------------------------------------------------
# Aggregation


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


def _weight_stats(prog, node) -> WeightStats | None:
    consts = [prog.tensors[n] for n in node.inputs if prog.tensors[n].is_const]
    w = next((c for c in consts if c.q is not None and c.data is not None and c.data.ndim >= 2), None)
    if w is None:
        return None
    if not w.q.per_tensor and w.q.axis is not None:
        axis = w.q.axis % w.data.ndim
    elif node.op == "ConvTranspose":
        axis = 1
    elif node.op in ("MatMul",) or (node.op == "Gemm" and not (node.attrs.get("transB") or
                                                               node.params.get("trans_b"))):
        axis = w.data.ndim - 1
    else:
        axis = 0
    deq = w.q.dequantize(w.data)
    moved = np.moveaxis(deq, axis, 0).reshape(deq.shape[axis], -1)
    mn, mx = moved.min(axis=1), moved.max(axis=1)
    absmax = np.maximum(np.abs(mn), np.abs(mx))
    return WeightStats(w.float_name or w.name, int(axis), int(moved.shape[0]), [float(v) for v in mn],
                       [float(v) for v in mx], float(absmax.min()), float(absmax.max()),
                       int(np.count_nonzero(absmax == 0)))


def _aggregate(engine: _Engine, chunks_results: list[dict], collapse_cosine: float):
    prog = engine.program
    L = len(engine.layers)
    lsum = np.zeros((L, _LK))
    lmin = np.full(L, np.inf)
    lmax = np.full((L, 3), -np.inf)  # xmax, acc max_ae/max_lsb handled below
    acc_max = np.zeros((L, 3))
    iso_max = np.zeros((L, 3))
    O = len(prog.outputs)
    osum = np.zeros((O, _OK))
    omax = np.zeros(O)
    ocos_min = np.full(O, np.inf)
    nsamples = 0
    hist_f = np.zeros((L, HIST_BINS), np.int64)
    hist_q = np.zeros_like(hist_f)
    overflows: dict[str, int] = {}
    incomplete = set()
    k = len(_L_HEAD)
    for res in chunks_results:
        for r, o in zip(res["rows"], res["outs"]):
            nsamples += 1
            lsum += r
            lmin = np.minimum(lmin, r[:, 1])
            lmax[:, 0] = np.maximum(lmax[:, 0], r[:, 2])
            acc_max = np.maximum(acc_max, r[:, [k + 5, k + 7, k + 8]])
            iso_max = np.maximum(iso_max, r[:, [k + _NP + 5, k + _NP + 7, k + _NP + 8]])
            osum += o
            omax = np.maximum(omax, o[:, 1 + 5])
            ocos_min = np.minimum(ocos_min, o[:, 1 + _NP])
        hist_f += res["hist_f"]
        hist_q += res["hist_q"]
        for kk, v in res["overflows"].items():
            overflows[kk] = overflows.get(kk, 0) + v
        incomplete |= set(res["incomplete"])
    layers: list[LayerResult] = []
    acc_cos_by_ir: dict[str, float] = {}
    for li, lay in enumerate(engine.layers):
        t = prog.tensors[lay.ir]
        node = prog.nodes[lay.node_index]
        row = lsum[li]
        n = row[0]
        pa = row[k:k + _NP].copy()
        pa[5], pa[7], pa[8] = acc_max[li]
        pi = row[k + _NP:].copy()
        pi[5], pi[7], pi[8] = iso_max[li]
        acc = _finish(pa, n, True)
        iso = _finish(pi, n, True)
        s, z = t.q.scale, t.q.zero_point
        vmin, vmax = float(lmin[li]), float(lmax[li, 0])
        if t.q.per_tensor:
            umin = vmin / float(s) + float(z)
            umax = vmax / float(s) + float(z)
            to_x = lambda u, s=float(s), z=float(z): (u - z) * s  # noqa: E731
        else:  # per-axis activations: percentiles in LSB units are reported as LSB (scale 1)
            umin, umax = -np.inf, np.inf
            to_x = lambda u: u  # noqa: E731
        pct = [to_x(_percentile(hist_f[li], p, lay.lo, lay.width, umin, umax)) for p in (1, 50, 99, 99.9)]
        if t.q.per_tensor:
            pct = [min(max(v, vmin), vmax) for v in pct]
        clip_lo, clip_hi = int(row[3]), int(row[4])
        stats = ActivationStats(int(n), vmin, vmax, *[float(v) for v in pct],
                                clip_rate=(clip_lo + clip_hi) / max(n, 1), clip_low=clip_lo, clip_high=clip_hi)
        in_cos = _input_cosine(prog, lay.node_index, acc_cos_by_ir, {})
        acc_cos_by_ir[lay.ir] = acc.cosine
        layers.append(LayerResult(
            index=li, tensor=engine.ref.aliases.get(lay.float_name, lay.float_name), ir_tensor=lay.ir, node=node.name, op=node.op, dtype=t.q.dtype,
            scale=float(s) if t.q.per_tensor else [float(v) for v in s],
            zero_point=int(z) if t.q.per_tensor else [int(v) for v in z], shape=list(t.shape),
            accumulated=acc, isolated=iso,
            isolated_inputs="partly integer run" if lay.ir in incomplete else "float reference",
            input_cosine=in_cos, stats=stats, weights=_weight_stats(prog, node),
            hist_float=hist_f[li], hist_int=hist_q[li], hist_lo=lay.lo, hist_width=lay.width))
    outputs = []
    for oi, (name, tname) in enumerate(prog.outputs.items()):
        row = osum[oi]
        p = row[1:1 + _NP].copy()
        p[5] = omax[oi]
        kk = 1 + _NP
        m = _finish(p, row[0], False)
        cls = _class_rows(prog.tensors[tname].shape)
        rows_n = row[kk + 1]
        outputs.append(OutputResult(
            name=name, shape=list(prog.tensors[tname].shape), metrics=m,
            cosine_min_sample=float(ocos_min[oi]) if nsamples else 1.0,
            cosine_mean_sample=float(row[kk] / max(nsamples, 1)),
            classes=cls[1] if cls else None,
            top1_agreement=float(row[kk + 2] / rows_n) if cls and rows_n else None,
            top5_agreement=float(row[kk + 3] / rows_n) if cls and rows_n and cls[1] > 5 else None,
            accuracy_float=float(row[kk + 4] / row[kk + 6]) if row[kk + 6] else None,
            accuracy_int=float(row[kk + 5] / row[kk + 6]) if row[kk + 6] else None))
    collapse = None
    for lay in layers:
        if lay.accumulated.cosine < collapse_cosine:
            collapse = _collapse(lay, collapse_cosine)
            break
    drop = max(layers, key=lambda l: (l.cosine_drop, -l.index)) if layers else None
    largest = _collapse(drop, collapse_cosine) if drop is not None and drop.cosine_drop > 0 else None
    return nsamples, outputs, layers, collapse, largest, overflows


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


def _collapse(lay: LayerResult, threshold: float) -> Collapse:
    return Collapse(lay.tensor, lay.node, lay.op, lay.index, lay.accumulated.cosine, lay.isolated.cosine,
                    lay.input_cosine, "own error" if lay.isolated.cosine < threshold else "inherited", threshold)


# ---------------------------------------------------------------------------------------------------------------
# Public entry point


def _board_spec(board):
    from .board import Board
    if isinstance(board, Board) and board.source and Path(board.source).is_file():
        return board.source
    return board


def load_data(model, data=None, input_shapes: dict | None = None, mean: str = "0", std: str = "1",
              limit: int | None = None):
    """The report's dataset (``dataset.Dataset``) from ``data`` as ``report`` takes it (see there)."""
    from . import dataset as ds
    model = str(model)
    if not Path(model).is_file():
        raise ModelLoadError(f"{model}: file not found")
    inputs = ds.model_inputs(model)
    if isinstance(data, ds.Dataset):
        dset = data
    elif data is None or isinstance(data, (str, Path)) or (isinstance(data, (list, tuple)) and data and
                                                            isinstance(data[0], (str, Path))):
        if data is None:
            if not ds.is_demo_model(model):
                raise InputError(f"{model}: give the data to measure accuracy on with --data (a folder of images, "
                                 f".npy or .npz files); only the bundled demo model has default data")
            paths = [ds.DEMO_DATA]
        else:
            paths = [data] if isinstance(data, (str, Path)) else list(data)
        first = ds.peek_arrays(paths, list(inputs))
        shapes = ds.resolve_shapes(inputs, input_shapes, first)
        dset = ds.load_dataset(paths, shapes, {n: d for n, (_, d) in inputs.items()}, mean, std, limit)
    else:
        samples = list(data)
        if not samples:
            raise InputError("report: the dataset is empty")
        dset = ds.Dataset([dict(s) for s in samples], None, f"{len(samples)} sample(s)")
    if limit is not None:
        dset = ds.Dataset(dset.samples[:limit], dset.labels, dset.description, dset.sources)
    return dset


def report(model, data=None, float_model=None, board="default", input_shapes: dict | None = None,
           workers: int = 1, mean: str = "0", std: str = "1", limit: int | None = None,
           collapse_cosine: float = 0.99,
           progress: Callable[[int, int], None] | None = None) -> AccuracyReport:
    """Accuracy report of the QDQ ``model`` on ``board`` over ``data`` (see the module docstring).

    ``data``: a ``dataset.Dataset``, a list of feed dicts, or file/folder paths (images, .npy, .npz); ``None``
    means the bundled digits when ``model`` is the demo, else an ``InputError``. ``float_model``: the float ONNX
    model quantize_static started from (default: the QDQ model's own float semantics). ``workers``: processes
    (each loads the model once); the result does not depend on it. ``progress(done, total)`` is called as
    samples complete.
    """
    import time
    t0 = time.perf_counter()
    model = str(model)
    dset = load_data(model, data, input_shapes, mean, std, limit)
    shapes = {n: tuple(np.shape(v)) for n, v in dset.samples[0].items()}
    if input_shapes:
        shapes.update({k: tuple(v) for k, v in input_shapes.items()})
    spec = _Spec(model, _board_spec(board), shapes, str(float_model) if float_model else None, 1)
    engine = _Engine(spec)
    bad = [n for n in shapes if n not in engine.sim.inputs]
    if bad:
        raise InputError(f"the data feeds {bad}, the model's inputs are {sorted(engine.sim.inputs)}")
    total = len(dset.samples)
    rows_per = None
    labels = dset.labels
    items = []
    for i, s in enumerate(dset.samples):
        lab = None
        if labels is not None:
            b = next(iter(s.values())).shape[0]
            rows_per = b
            lab = labels[i * b:(i + 1) * b]
        items.append((s, lab))
    del rows_per
    workers = max(1, int(workers or 1))
    workers = min(workers, max(1, total // 8))  # starting a worker (imports, Numba cache, model) costs seconds
    results = []
    done = 0
    if workers == 1:
        step = max(1, total // 100)
        for i in range(0, total, step):
            chunk = items[i:i + step]
            results.append(engine.run_chunk(chunk))
            done += len(chunk)
            if progress:
                progress(done, total)
    else:
        nchunks = min(total, workers * 8)
        bounds = np.linspace(0, total, nchunks + 1).astype(int)
        chunks = [items[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        ctx = mp.get_context("spawn")
        with ctx.Pool(workers, initializer=_worker_init, initargs=(spec,)) as pool:
            for res in pool.imap(_worker_run, chunks):
                results.append(res)
                done += len(res["rows"])
                if progress:
                    progress(done, total)
    nsamples, outputs, layers, collapse, largest, overflows = _aggregate(engine, results, collapse_cosine)
    return AccuracyReport(
        model=model, board=str(engine.program.board), reference=engine.ref.kind,
        reference_source=engine.ref.source, data=dset.description, samples=nsamples, outputs=outputs,
        layers=layers, collapse=collapse, largest_drop=largest, unmatched=list(dict.fromkeys(engine.unmatched)),
        overflows=overflows, collapse_cosine=collapse_cosine, seconds=time.perf_counter() - t0)


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------------------------
# JSON


def _num(v):
    if v is None:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _metrics_json(m: ErrorMetrics) -> dict:
    return {k: _num(v) for k, v in asdict(m).items()}


def coarse_histogram(lay: LayerResult, bins: int = 64) -> dict:
    """The layer's float and integer histograms over their occupied range, merged to at most ``bins`` bins;
    edges in LSB units (quantized values: x / scale + zero_point)."""
    both = lay.hist_float + lay.hist_int
    nz = np.nonzero(both)[0]
    if nz.size == 0:
        return {"lsb_edges": [], "float_counts": [], "integer_counts": []}
    a, b = int(nz[0]), int(nz[-1]) + 1
    group = max(1, math.ceil((b - a) / bins))
    b = a + group * math.ceil((b - a) / group)
    hf = np.zeros(b - a, np.int64)
    hq = np.zeros(b - a, np.int64)
    end = min(b, HIST_BINS)
    hf[:end - a] = lay.hist_float[a:end]
    hq[:end - a] = lay.hist_int[a:end]
    hf = hf.reshape(-1, group).sum(1)
    hq = hq.reshape(-1, group).sum(1)
    edges = [lay.hist_lo + (a + i * group) * lay.hist_width for i in range(len(hf) + 1)]
    return {"lsb_edges": [round(e, 6) for e in edges], "float_counts": [int(v) for v in hf],
            "integer_counts": [int(v) for v in hq]}


def _to_json(r: AccuracyReport, histograms: int) -> dict:
    def collapse(c):
        return None if c is None else {k: _num(v) for k, v in asdict(c).items()}

    layers = []
    for lay in r.layers:
        layers.append({
            "index": lay.index, "tensor": lay.tensor, "ir_tensor": lay.ir_tensor, "node": lay.node, "op": lay.op,
            "dtype": lay.dtype, "scale": lay.scale, "zero_point": lay.zero_point, "shape": lay.shape,
            "accumulated": _metrics_json(lay.accumulated), "isolated": _metrics_json(lay.isolated),
            "isolated_inputs": lay.isolated_inputs, "input_cosine": lay.input_cosine,
            "stats": {k: _num(v) for k, v in asdict(lay.stats).items()},
            "weights": None if lay.weights is None else asdict(lay.weights)})
    hists = []
    for lay in r.worst("accumulated", histograms):
        h = coarse_histogram(lay)
        h["tensor"] = lay.tensor
        hists.append(h)
    return {
        "schema_version": SCHEMA_VERSION,
        "model": r.model, "board": r.board,
        "reference": {"kind": r.reference, "source": r.reference_source},
        "data": {"description": r.data, "samples": r.samples},
        "collapse_cosine": r.collapse_cosine,
        "outputs": [{"name": o.name, "shape": o.shape, **_metrics_json(o.metrics),
                     "cosine_min_sample": o.cosine_min_sample, "cosine_mean_sample": o.cosine_mean_sample,
                     "classes": o.classes, "top1_agreement": o.top1_agreement, "top5_agreement": o.top5_agreement,
                     "accuracy_float": o.accuracy_float, "accuracy_int": o.accuracy_int} for o in r.outputs],
        "collapse": collapse(r.collapse),
        "largest_drop": collapse(r.largest_drop),
        "worst_accumulated": [l.tensor for l in r.worst("accumulated")],
        "worst_isolated": [l.tensor for l in r.worst("isolated")],
        "layers": layers,
        "histograms": hists,
        "unmatched": r.unmatched,
        "overflows": r.overflows,
        "seconds": round(r.seconds, 3),
        "latency": r.latency, "checks": r.checks, "sensitivity": r.sensitivity, "advisor": r.advisor,
    }
