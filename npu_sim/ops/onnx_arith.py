"""The ``onnx`` arithmetic for ops that are not multiply-accumulate: exactly what the QDQ group means in ONNX.

``y = QuantizeLinear(op(DequantizeLinear(x), ...))`` with the op computed in float32 by ONNX's own reference
implementation (``onnx.reference``), and QuantizeLinear rounding half to even. Used to cross-check the board's
integer kernels against onnxruntime; a fixed-point board never takes this path.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from npu_sim.ir import Node, Tensor


def lower_float_reference(lowering, onode, args, outs: list[Tensor], act, op_label: str | None = None) -> Node:
    inputs, inits, feeds_from = [], [], []
    names = []
    for i, (name, arg) in enumerate(zip(onode.input, args)):
        if not name:
            names.append("")
            continue
        local = f"in{i}"
        names.append(local)
        if isinstance(arg, Tensor) and not arg.is_const:
            inputs.append(helper.make_tensor_value_info(local, TensorProto.FLOAT, list(arg.shape)))
            feeds_from.append((local, arg.name))
        elif isinstance(arg, Tensor):
            inits.append(numpy_helper.from_array(arg.q.dequantize(arg.data), local))
        else:
            inits.append(numpy_helper.from_array(np.asarray(arg), local))
    out_names = [f"out{j}" for j in range(len(onode.output))]
    node = helper.make_node(onode.op_type, names, out_names, domain=onode.domain or "")
    node.attribute.extend(onode.attribute)
    nodes = [node]
    final = append_clip(out_names[0], act, nodes, inits)
    outputs = [helper.make_tensor_value_info(final if j == 0 else n, TensorProto.FLOAT, None)
               for j, n in enumerate(out_names)]
    graph = helper.make_graph(nodes, "one_op", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(lowering.opset, 13))])
    evaluator = ReferenceEvaluator(model)
    params = {"_eval": evaluator, "_feeds": feeds_from, "_outs": [o.q for o in outs]}
    return Node(lowering.node_name(onode), op_label or onode.op_type, [t for _, t in feeds_from],
                [o.name for o in outs], run_float_reference, params, {"arithmetic": "onnx float reference"})


def lower_reference_op(lowering, onode, args, out: Tensor, act) -> Node:
    """The ``onnx`` arithmetic's lowering of an op onnxruntime never fuses (registry ``_ONNX`` maps such ops
    here): the QDQ group as ONNX defines it, ``lower_float_reference`` with one output."""
    return lower_float_reference(lowering, onode, args, [out], act)


def run_float_reference(node, inputs, ctx):
    """Run a node lowered by ``lower_float_reference``: dequantize, evaluate in float32, quantize."""
    p = node.params
    feeds = {local: ctx.tensor(tname).q.dequantize(arr) for (local, tname), arr in zip(p["_feeds"], inputs)}
    with np.errstate(all="ignore"):  # onnx.reference evaluates both branches of e.g. Sigmoid: one overflows, unused
        results = p["_eval"].run(None, feeds)
    return [q.quantize(np.asarray(r, dtype=np.float32)) for q, r in zip(p["_outs"], results)]


def append_clip(final: str, act, nodes: list, inits: list) -> str:
    """Append the folded Relu/Clip ``act`` (float bounds, or None) to a reference graph after tensor ``final``;
    returns the name of the graph's result."""
    if act is None:
        return final
    lo, hi = act
    inits += [numpy_helper.from_array(np.array(lo if lo > -math.inf else -3.4e38, np.float32), "act_lo"),
              numpy_helper.from_array(np.array(hi if hi < math.inf else 3.4e38, np.float32), "act_hi")]
    nodes.append(helper.make_node("Clip", [final, "act_lo", "act_hi"], ["clipped"]))
    return "clipped"
