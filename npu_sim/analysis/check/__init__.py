"""Deployability check: will this quantized model run on the board, and if not, why and what to change?

Three families of findings, all read from the one integer program (``npu_sim.ir``):

* **board rules** — what the NPU accepts, as data in the board's ``[rules]`` section: which ops run on the NPU
  (others fall back to the CPU), dtypes, zero points, kernel/stride/dilation/pad/channel limits, the int16
  convolution rule (``in_ch/groups * kh * kw <= 256`` on our board), the legal requantization shift range, the
  input stub's fixed scale;
* **numeric hazards** — things that break the integers whatever the board: int32 biases clipped at INT32_MIN /
  INT32_MAX (onnxruntime issue #21000), biases that alone drive a channel past its output range, worst-case
  (and, given a run, observed) accumulator overflow, requantization factors the board cannot represent, per-channel
  weight scales spanning orders of magnitude, dead weight channels;
* **quantization-friendliness lint** (our design document): lookup-table ops and LUT chains (Softmax, LayerNorm),
  large kernels, Concat of inputs with very different ranges, a model input that is not symmetric or not
  normalized for the fixed 1/128 stub, activations and weights with very large ranges.

Every rule is a small function registered with an id and a severity. Its docstring is the message the user reads:
the first paragraph says what is wrong, the rest (after a blank line) is the fix; both are formatted with the
board's limits and the measured values. ``docs/SUPPORTED_OPS.md`` is generated from the same table
(``python docs/supported_ops.py``).

Severity: ``error`` = cannot deploy as is; ``warning`` = runs, but hurts accuracy or speed; ``info``.

The package: ``findings`` (data model, rule registry, the ``Context`` rules read), ``measures`` (what rules
measure on a node), the rules in ``board_rules``, ``hazards`` and ``lint``, ``engine`` (running them:
``check_program``, ``int16_allowed``), ``supported_ops`` (the Markdown generator). ``placement`` (which node runs
on the NPU) is the board's: ``npu_sim.boards.placement``, re-exported here.
"""
from __future__ import annotations

from npu_sim.analysis.check.engine import check_program, int16_allowed
from npu_sim.analysis.check.findings import RULES, SCHEMA_VERSION, SEVERITIES, CheckResult, Finding, NodeReport
from npu_sim.analysis.check.supported_ops import supported_ops_markdown
from npu_sim.boards.placement import placement

__all__ = ["check_program", "CheckResult", "Finding", "NodeReport", "SEVERITIES", "SCHEMA_VERSION", "int16_allowed",
           "placement", "supported_ops_markdown", "RULES"]
