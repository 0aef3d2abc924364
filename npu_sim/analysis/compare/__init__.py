"""`npu-sim compare MODEL DUMP`: a board's tensor dump against the simulation, bit for bit.

Tensors are compared in execution order; the first divergent node is named, and why its elements differ.

A dump is a folder (a manifest -- index.json as `npu-sim run --dump-all` writes it, manifest.json or
manifest.csv -- or just .npy files), an .npz, or one .npy; tensors named by the ONNX float tensor name, the
QuantizeLinear output name, or either with characters outside [A-Za-z0-9._-] replaced by _; NCHW or NHWC
(detected from the shape, --layout where both fit); integers, or dequantized floats (quantized with the tensor's
own scale and zero point). Only the tensors present are compared. The simulation is fed the input the board
was fed (--input, any of these forms) or the dump's own input tensor. Each differing node is re-run on the
dump's inputs and its differing elements are tried against variations of its arithmetic (rounding rules,
double rounding, float32 requantization, accumulator saturation/wrap, one multiplier for all channels, LUT
index, the Add's stages), or counted inherited (an input already differs) or unexplained. Formats: docs/DUMPS.md.
Exit codes: 0 every dumped tensor equal, 1 a mismatch, 2 bad input.
"""
from npu_sim.analysis.compare.core import (EXIT_EQUAL, EXIT_MISMATCH, Comparison, TensorDiff, compare_dump,
                                           refuse_old_order)
from npu_sim.analysis.compare.dumpfile import DumpEntry, read_dump
from npu_sim.analysis.compare.match import sanitize

__all__ = ["EXIT_EQUAL", "EXIT_MISMATCH", "Comparison", "TensorDiff", "compare_dump", "refuse_old_order",
           "DumpEntry", "read_dump", "sanitize"]
