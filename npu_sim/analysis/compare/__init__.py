"""`npu-sim compare MODEL DUMP`: a board's tensor dump against the simulation, bit for bit.

Tensors are compared in execution order; the first divergent node is named, and why its elements differ.

A dump is a folder (a manifest -- index.json as `npu-sim run --dump-all` writes it, manifest.json or
manifest.csv -- or just .npy files), an .npz, or one .npy; tensors named by the ONNX float tensor name, the
QuantizeLinear output name, or either with characters outside [A-Za-z0-9._-] replaced by _; NCHW or NHWC
(detected from the shape, --layout where both fit); integers, or dequantized floats (quantized with the tensor's
own scale and zero point). Only the tensors present are compared. The simulation is fed the input the board
was fed (--input, any of these forms) or the dump's own input tensor. Each differing node is re-run on the
dump's inputs, and variations of its arithmetic (rounding rules, TFLite's and LiteRT's double roundings, float32
requantization, accumulator saturation/wrap, output wrap, one multiplier for all channels, a multiplier off by k,
LUT index, the Add's stages) are computed on the whole tensor: a variation is a cause only if it keeps every
element the re-run reproduces as the board has it; the rest is inherited (an input already differs) or
unexplained (with the closest variation). Formats and the catalogue: docs/DUMPS.md.
Exit codes: 0 every dumped tensor equal, 1 a mismatch, 2 bad input.
"""
from npu_sim.analysis.compare.core import (EXIT_EQUAL, EXIT_MISMATCH, Comparison, TensorDiff, compare_dump,
                                           refuse_old_order)
from npu_sim.analysis.compare.dumpfile import DumpEntry, read_dump
from npu_sim.analysis.compare.match import sanitize

__all__ = ["EXIT_EQUAL", "EXIT_MISMATCH", "Comparison", "TensorDiff", "compare_dump", "refuse_old_order",
           "DumpEntry", "read_dump", "sanitize"]
