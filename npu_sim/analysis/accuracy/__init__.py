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
same whatever engine (``npu_sim.runtime.engines``: this process, worker processes, a Ray cluster) and however many
workers ran the samples.

Modules: ``model`` (the report's data model and its JSON), ``engine`` (one worker: a simulator, a float
reference, rows of sums per sample; its ``setup``/``run_samples`` task pair), ``aggregate`` (the rows added up
into the report), ``jobs`` (how many workers a job gets, failed tasks named), ``report`` (``load_data``,
``report``, ``default_workers``). The metrics are ``npu_sim.analysis.metrics``, the float reference
``npu_sim.analysis.reference``.
"""
from __future__ import annotations

from npu_sim.analysis.accuracy.model import (HIST_BINS, SCHEMA_VERSION, AccuracyReport, ActivationStats, Collapse,
                                             LayerResult, OutputResult, WeightStats, coarse_histogram)
from npu_sim.analysis.accuracy.report import default_workers, load_data, report
from npu_sim.analysis.metrics import ErrorMetrics, error_metrics
from npu_sim.analysis.reference import FloatReference
from npu_sim.qdq.float_model import derive_float_model, output_aliases

__all__ = ["HIST_BINS", "SCHEMA_VERSION", "AccuracyReport", "ActivationStats", "Collapse", "LayerResult",
           "OutputResult", "WeightStats", "coarse_histogram", "default_workers", "load_data", "report",
           "ErrorMetrics", "error_metrics", "FloatReference", "derive_float_model", "output_aliases"]
