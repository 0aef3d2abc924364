"""`npu-sim inspect`: what a QDQ model is -- its inputs, outputs, quantization and ops."""
from __future__ import annotations

from npu_sim.api import inspect
from npu_sim.render.inspect import format_inspection, to_json

DESCRIPTION = """\
What a QDQ ONNX model is, read without lowering or running it: the producer and the opset; each input (name,
dtype, shape with dynamic dimensions by name, the layout NCHW/NHWC where the model or the shape says so, and the
QuantizeLinear that reads it: integer dtype, scale, zero point and the float range that maps to); each output
likewise (the DequantizeLinear that writes it); a summary of the quantization (activation dtypes, symmetric or
asymmetric; weight dtypes, per-channel or per-tensor; biases; 16-bit tensors; Q/DQ pairs) and an op histogram.
--json gives the same as data (docs/INSPECT.md). Exit code: 0, or 2 for a file that is missing or that every
command refuses (not ONNX, invalid)."""

MODEL_ONLY = True  # no --board, no --input-shape: nothing is lowered


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the facts as JSON (docs/INSPECT.md)")


def main(args, shapes) -> int:
    ins = inspect(args.model)
    print(to_json(ins) if args.json else format_inspection(ins))
    return 0
