"""Graph rewrites for QDQ models that tf2onnx made from a .tflite (``python -m tf2onnx.convert --tflite``).

Such graphs keep TFLite's integer graph inputs in NHWC and put the layout change on the integers::

    input (int8, NHWC) -> Transpose -> DequantizeLinear -> ...                      (a "DQ-first" graph)

A per-tensor DequantizeLinear commutes with a Transpose (or Reshape) exactly, so the walk sees the usual QDQ form
``input -> DequantizeLinear -> Transpose -> Identity -> ...`` (the graph input and every tensor name are kept).
Integer Transposes elsewhere (``QuantizeLinear -> Transpose -> output`` and inside the graph) are lowered by the walk
as integer data movement.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from npu_sim.frontend.reader import Graph

_MOVES = ("Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze")
_INT_TYPES = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16)


def _per_tensor(graph: Graph, node) -> bool:
    names = list(node.input) + ["", ""]
    return names[1] in graph.consts and np.asarray(graph.consts[names[1]]).size == 1


def move_integer_io_transposes(graph: Graph) -> int:
    """Rewrite integer Transposes at graph inputs as described above, in place; return how many."""
    consumers: dict[str, list] = {}
    for n in graph.nodes:
        for name in n.input:
            consumers.setdefault(name, []).append(n)
    replace: dict[int, list] = {}
    for name in graph.inputs:
        if graph.elem_types.get(name) not in _INT_TYPES:
            continue
        for t in consumers.get(name, []):
            users = consumers.get(t.output[0], [])
            if (t.op_type not in _MOVES or len(t.output) != 1 or t.input[0] != name or not users
                    or t.output[0] in graph.outputs
                    or any(u.op_type != "DequantizeLinear" or u.input[0] != t.output[0] for u in users)
                    or len({tuple(u.input[1:]) for u in users}) != 1 or not _per_tensor(graph, users[0])):
                continue
            mid, moved = f"{t.output[0]}__dq", t.output[0]  # the moved tensor keeps its (TFLite) name
            new_dq = helper.make_node("DequantizeLinear", [name] + list(users[0].input[1:]), [mid],
                                      name=f"{t.name}__dq")
            new_t = helper.make_node(t.op_type, [mid] + list(t.input[1:]), [moved], name=t.name)
            new_t.attribute.extend(t.attribute)
            graph.shapes[mid], graph.shapes[moved] = graph.shapes.get(name), graph.shapes.get(t.output[0])
            graph.elem_types[mid] = graph.elem_types[moved] = TensorProto.FLOAT
            replace[id(t)] = [new_dq, new_t]
            for u in users:
                replace[id(u)] = [helper.make_node("Identity", [moved], [u.output[0]], name=u.name)]
    out = []
    for n in graph.nodes:
        out.extend(replace.get(id(n), [n]))
    graph.nodes[:] = out
    return len(replace) + _label_integer_inputs(graph)


def _label_integer_inputs(graph: Graph) -> int:
    """An integer graph input still read by a non-DequantizeLinear op (e.g. a Transpose feeding an integer Concat)
    gets ``DQ -> QuantizeLinear`` with the quantization a DequantizeLinear reading it (directly or after one data
    movement) uses; the walk aliases that pair to the input, and the op reads integers."""
    consumers: dict[str, list] = {}
    for n in graph.nodes:
        for name in n.input:
            consumers.setdefault(name, []).append(n)
    head, count = [], 0
    for name in graph.inputs:
        users = consumers.get(name, [])
        others = [u for u in users if u.op_type != "DequantizeLinear"]
        if graph.elem_types.get(name) not in _INT_TYPES or not others:
            continue
        dqs = [u for u in users if u.op_type == "DequantizeLinear"]
        dqs += [d for u in others if u.op_type in _MOVES for d in consumers.get(u.output[0], [])
                if d.op_type == "DequantizeLinear"]
        if not dqs or not _per_tensor(graph, dqs[0]):
            continue
        qp = list(dqs[0].input[1:])
        f, q = f"{name}__float", f"{name}__int"
        head += [helper.make_node("DequantizeLinear", [name] + qp, [f], name=f"{name}__dq"),
                 helper.make_node("QuantizeLinear", [f] + qp, [q], name=f"{name}__q")]
        graph.shapes[f] = graph.shapes[q] = graph.shapes.get(name)
        graph.elem_types[f] = TensorProto.FLOAT
        graph.elem_types[q] = graph.elem_types[name]
        for u in others:
            for i, v in enumerate(u.input):
                if v == name:
                    u.input[i] = q
        count += 1
    graph.nodes[:0] = head
    return count

