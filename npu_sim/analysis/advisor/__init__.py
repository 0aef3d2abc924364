"""Sensitivity ranking, int16 advisor and the written-back fix; check findings and the latency breakdown next to
the accuracy report's layers. Every number is measured by simulating a model bit-exactly, none is predicted.

**Layers.** A *layer* is a program node that computes (not data movement, not the input stub) and writes a
quantized activation tensor; with it go the tensors that share that tensor's quantization (onnxruntime gives
MaxPool, Flatten, Reshape, ... their input's scale), so a promotion changes one quantization group as a whole.

**Sensitivity** (``sensitivity``): for each layer, the output similarity when only that layer runs at higher
precision, against the float reference, on the first ``samples`` samples; ``gain`` = that minus the baseline.

* *int16* when the layer's tensor is 8-bit, per tensor, and the board allows 16-bit activations for its producer
  and every consumer (``npu_sim.analysis.check.int16_allowed``: the NPU takes int16 for the op and
  in_ch/groups·kh·kw is within the board's int16 limit): the QDQ model is rewritten
  (``npu_sim.qdq.recalibrate.promote_int16``: int16, symmetric, scale = max(|rmin|, |rmax|)/32767 of the calibrated
  range, consumers' int32 biases re-derived), reloaded and simulated.
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
tensors at ``QInt16`` (symmetric) plus the bias remedy; ``npu_sim.qdq.recalibrate.load_extra_options`` turns it
into what quantize_static takes (QuantType members).

**What the board requires** (``board_fix.board_settings``): the model's own settings changed only where the board's
rules refuse them (a dtype it does not take, a zero point it does not allow, per-channel weights), the cheapest
change first; their extra_options join the fix. With calibration data and the float model, ``requantize`` runs
quantize_static with those settings plus the fix; the new model is checked on the board — where an op's own limit
still refuses a tensor's type, it is re-quantized once more with the check's per-tensor fixes
(``board_fix.finding_overrides``) — simulated and reported with its verdict (``board_fix.verdict``: deployable, or
the rules that block it).

Every measurement (a layer's sensitivity, a curve point) is independent: they run as engine tasks (``tasks``;
``annotate(..., engine=EngineOptions(...))``), each worker building the evaluator once, with the same numbers as
in this process.

Modules: ``evaluator`` (the baseline run, scores, variants and one layer in float), ``tasks`` (measurements as
engine tasks), ``variants`` (which nodes a variant shares with the baseline), ``sensitivity`` (layers and their ranking), ``advise`` (the curve, the bias
remedy, the fix), ``board_fix`` (the board's settings, the verdict), ``annotate`` (all of it on a report).
"""
from __future__ import annotations

from npu_sim.analysis.advisor.advise import advise, bias_remedy, make_fix, weight_candidates
from npu_sim.analysis.advisor.annotate import AdviceOptions, annotate, checks_section, latency_section
from npu_sim.analysis.advisor.evaluator import Evaluator, Score, estimated_cycles, score_outputs, sqnr_key
from npu_sim.analysis.advisor.sensitivity import Layer, layers_of, sensitivity, shortlist
from npu_sim.analysis.advisor.variants import same_nodes

__all__ = ["advise", "bias_remedy", "make_fix", "weight_candidates", "AdviceOptions", "annotate", "checks_section",
           "latency_section", "Evaluator", "Score", "estimated_cycles", "score_outputs", "sqnr_key", "Layer",
           "layers_of", "sensitivity", "shortlist", "same_nodes"]
