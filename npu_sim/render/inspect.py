"""`npu-sim inspect` as text: the model, its inputs and outputs with their quantization, the quantization summary
and the op histogram. Names are never cut."""
from __future__ import annotations

import json

from npu_sim.analysis.inspect import Inspection, Quant, Tensor


def to_json(ins: Inspection) -> str:
    return json.dumps(ins.to_dict(), indent=2)


def _shape(shape) -> str:
    return "unknown" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _quant(q: Quant | None, none: str) -> str:
    if q is None:
        return f"    {none}"
    if len(q.scale) == 1:
        params = f"scale {q.scale[0]:.6g}, zero point {q.zero_point[0]}"
    else:
        params = f"per-channel (axis {q.axis}, {len(q.scale)} channels), scale {min(q.scale):.6g}..{max(q.scale):.6g}"
    rng = f", float range [{q.range[0]:.6g}, {q.range[1]:.6g}]" if q.range else ""
    return f"    {q.dtype}: {params}{rng} ({q.op} {q.node})"


def _tensor(t: Tensor, none: str) -> list[str]:
    layout = f" {t.layout}" if t.layout else ""
    return [f"  {t.name}: {t.dtype} {_shape(t.shape)}{layout}", _quant(t.quant, none)]


def _counts(entries: dict, keys: tuple[str, ...]) -> str:
    if not entries:
        return "none"
    return "; ".join(f"{dtype} x{e['tensors']} (" + ", ".join(f"{e[k]} {k.replace('_', '-')}" for k in keys if e[k])
                     + ")" for dtype, e in entries.items())


def format_inspection(ins: Inspection) -> str:
    origin = f"{ins.producer}; opset {ins.opset}" if ins.opset else ins.producer  # (a .tflite has no opset)
    lines = [f"model: {ins.path}", f"producer: {origin}", "", f"inputs ({len(ins.inputs)}):"]
    for t in ins.inputs:
        lines += _tensor(t, "not quantized: no QuantizeLinear or DequantizeLinear reads it")
    lines += ["", f"outputs ({len(ins.outputs)}):"]
    for t in ins.outputs:
        lines += _tensor(t, "not quantized: no DequantizeLinear or QuantizeLinear writes it")
    q = ins.quantization
    sixteen = q["sixteen_bit_tensors"]
    lines += ["", "quantization:",
              f"  activations: {_counts(q['activations'], ('symmetric', 'asymmetric'))}",
              f"  weights: {_counts(q['weights'], ('per_channel', 'per_tensor', 'symmetric'))}",
              "  biases: " + ("; ".join(f"{d} x{n}" for d, n in q["biases"].items()) or "none"),
              f"  16-bit tensors: {len(sixteen)}" + (f" ({', '.join(sixteen[:5])}"
                                                       + (f", and {len(sixteen) - 5} more)" if len(sixteen) > 5
                                                          else ")") if sixteen else ""),
              f"  Q/DQ pairs: {q['qdq_pairs']}",
              "", f"ops ({sum(ins.ops.values())} nodes):"]
    lines += [f"  {op:24s} {n:5d}" for op, n in ins.ops.items()]
    return "\n".join(lines)
