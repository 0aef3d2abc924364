"""The accuracy report's data model (``AccuracyReport`` and its parts) and its JSON document
(docs/REPORT_SCHEMA.md, version ``SCHEMA_VERSION``)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from npu_sim.analysis.metrics import ErrorMetrics, json_number

SCHEMA_VERSION = "1.2"
HIST_BINS = 2048  # bins of a layer's float and integer histograms (LSB units, over twice the quantized range)


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
    inputs: list[int] = field(default_factory=list)  # indices of the reported tensors feeding this op (through
    #                                                   unreported ones); the HTML graph view's edges, not in the JSON

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
    # Reserved for later sections (null until their feature lands): per-layer latency (npu_sim.analysis.cost), check
    # findings (npu_sim.analysis.check), sensitivity ranking, int16 advisor.
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
# JSON


def _metrics_json(m: ErrorMetrics) -> dict:
    return {k: json_number(v) for k, v in asdict(m).items()}


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
        return None if c is None else {k: json_number(v) for k, v in asdict(c).items()}

    layers = []
    for lay in r.layers:
        layers.append({
            "index": lay.index, "tensor": lay.tensor, "ir_tensor": lay.ir_tensor, "node": lay.node, "op": lay.op,
            "dtype": lay.dtype, "scale": lay.scale, "zero_point": lay.zero_point, "shape": lay.shape,
            "accumulated": _metrics_json(lay.accumulated), "isolated": _metrics_json(lay.isolated),
            "isolated_inputs": lay.isolated_inputs, "input_cosine": lay.input_cosine,
            "stats": {k: json_number(v) for k, v in asdict(lay.stats).items()},
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
