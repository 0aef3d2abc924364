"""The graph-level mutation classes of tests/mutants.py: edges rewired, Q/DQ pairs removed, duplicated or swapped,
value_info and graph outputs that lie, and op swaps. Each ``*_mutants(model)`` yields ``(description, edit)``
in a fixed order; ``edit(model)`` changes a copy of ``model`` in place (nodes are found by their index)."""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

QDQ = ("QuantizeLinear", "DequantizeLinear")
FIRST = 12  # nodes (of those that qualify) a graph class rewires, per base: the rest repeat the same shapes
# op -> the ops it is swapped for (inputs and attributes kept): some valid, most an attribute or arity mismatch
SWAPS = {"Relu": ("Sigmoid", "Tanh", "LeakyRelu", "HardSwish", "Softmax", "Abs", "Frobnicate"),
         "MaxPool": ("AveragePool", "GlobalAveragePool", "LpPool", "GlobalMaxPool"),
         "Add": ("Mul", "Sub", "Div", "Max", "MatMul", "Sum"), "Mul": ("Add", "Div", "Pow"), "Div": ("Mul", "Sub"),
         "Conv": ("ConvTranspose", "ConvInteger", "MatMul", "Add"), "Gemm": ("MatMul", "Add"),
         "HardSigmoid": ("Sigmoid", "HardSwish", "Relu", "Elu"), "Concat": ("Sum", "Mean", "Max"),
         "Resize": ("Upsample",), "GlobalAveragePool": ("GlobalMaxPool", "ReduceMean", "Relu"),
         "Flatten": ("Identity", "Squeeze"), "Softmax": ("LogSoftmax", "Hardmax"), "Reshape": ("Expand", "Add"),
         "Clip": ("Relu", "Max", "Min"), "Gather": ("GatherElements",), "MatMul": ("Gemm", "Mul"),
         "QuantizeLinear": ("DequantizeLinear",), "DequantizeLinear": ("QuantizeLinear",),
         "Sigmoid": ("Tanh", "HardSigmoid"), "Transpose": ("Identity",)}


def _label(node, i) -> str:
    return f"node {node.name!r} ({node.op_type})" if node.name else f"node #{i} ({node.op_type})"


def _inits(model) -> set:
    return {t.name for t in model.graph.initializer}


def _consumers(model, name):
    return [(j, k) for j, n in enumerate(model.graph.node) for k, x in enumerate(n.input) if x == name]


# ---- edges -------------------------------------------------------------------------------------------------------
def edge_mutants(model):
    nodes = list(model.graph.node)
    writer = {o: i for i, n in enumerate(nodes) for o in n.output}
    compute = [i for i, n in enumerate(nodes) if n.input and n.input[0] in writer][:FIRST]
    for j in compute:
        n = nodes[j]
        earlier = writer[n.input[0]]
        yield (f"cycle: {_label(nodes[earlier], earlier)} reads {_label(n, j)}'s output",
               lambda m, a=earlier, b=j: _set_input(m, a, 0, m.graph.node[b].output[0]))
        yield f"dangling: {_label(n, j)} reads 'ghost'", lambda m, j=j: _set_input(m, j, 0, "ghost")
        yield (f"duplicate: {_label(n, j)} writes {n.input[0]!r} too",
               lambda m, j=j: _set_output(m, j, m.graph.node[j].input[0]))
        yield (f"duplicate node name: {_label(n, j)} named like {_label(nodes[earlier], earlier)}",
               lambda m, a=earlier, b=j: _rename_node(m, b, m.graph.node[a].name or "same"))
        yield (f"extra graph output {n.output[0]!r} (valid)",
               lambda m, j=j: _add_output(m, m.graph.node[j].output[0], _inferred(m, m.graph.node[j].output[0])))
        yield (f"extra graph output {n.output[0]!r} without a type",
               lambda m, j=j: _add_output(m, m.graph.node[j].output[0]))
        if len(n.input) > 1:
            yield f"{_label(n, j)} inputs 0 and 1 swapped", lambda m, j=j: _swap_inputs(m, j)
            yield f"{_label(n, j)} last input dropped", lambda m, j=j: m.graph.node[j].input.pop()
    x = model.graph.input[0].name
    yield f"graph input {x!r} is also a graph output (valid)", lambda m: _add_output(m, x, m.graph.input[0])
    yield "graph output renamed to 'ghost'", lambda m: setattr(m.graph.output[0], "name", "ghost")
    yield "graph outputs duplicated", lambda m: m.graph.output.append(m.graph.output[0])
    yield "node order reversed", lambda m: _reorder(m, list(m.graph.node)[::-1])


def _set_input(m, j, k, name):
    m.graph.node[j].input[k] = name


def _set_output(m, j, name):
    m.graph.node[j].output[0] = name


def _rename_node(m, j, name):
    m.graph.node[j].name = name


def _swap_inputs(m, j):
    ins = m.graph.node[j].input
    ins[0], ins[1] = ins[1], ins[0]


def _add_output(m, name, like=None):
    info = onnx.ValueInfoProto()
    if like is not None:
        info.CopyFrom(like)
    info.name = name
    m.graph.output.append(info)


def _inferred(m, name):
    """``name``'s value_info as onnx's shape inference finds it (its element type, no shape where none)."""
    info = next((v for v in onnx.shape_inference.infer_shapes(m).graph.value_info if v.name == name), None)
    return info if info is not None else helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def _reorder(m, nodes):
    del m.graph.node[:]
    m.graph.node.extend(nodes)


# ---- Q/DQ pairs ------------------------------------------------------------------------------------------------
def _pairs(model):
    """(Q index, DQ index) of every activation QuantizeLinear and the first DequantizeLinear reading it."""
    inits = _inits(model)
    nodes = list(model.graph.node)
    for i, q in enumerate(nodes):
        if q.op_type != "QuantizeLinear" or q.input[0] in inits:
            continue
        dq = next((j for j, n in enumerate(nodes) if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0]),
                  None)
        if dq is not None:
            yield i, dq


def qdq_pair_mutants(model):
    nodes = list(model.graph.node)
    for i, j in list(_pairs(model))[:FIRST]:
        q, dq = nodes[i], nodes[j]
        yield f"QuantizeLinear {_label(q, i)} removed (its DequantizeLinear reads float)", lambda m, i=i: _drop_q(m, i)
        yield f"DequantizeLinear {_label(dq, j)} removed (its readers read integers)", lambda m, j=j: _drop_dq(m, j)
        yield f"pair {_label(q, i)} duplicated after the DequantizeLinear (valid)", lambda m, j=j: _dup_pair(m, j)
        yield f"pair {_label(q, i)} swapped (DequantizeLinear first)", lambda m, i=i, j=j: _swap_pair(m, i, j)
        yield (f"{_label(dq, j)} with a scale twice its QuantizeLinear's (valid)",
               lambda m, j=j: _other_scale(m, j))
    weights = [j for j, n in enumerate(nodes) if n.op_type == "DequantizeLinear" and n.input[0] in _inits(model)]
    for j in weights[:FIRST]:
        yield (f"weight/bias DequantizeLinear {_label(nodes[j], j)} removed (its reader reads integers)",
               lambda m, j=j: _drop_dq(m, j))


def _drop_q(m, i):
    q = m.graph.node[i]
    for j, k in _consumers(m, q.output[0]):
        m.graph.node[j].input[k] = q.input[0]
    m.graph.node.remove(q)


def _drop_dq(m, j):
    dq = m.graph.node[j]
    for a, k in _consumers(m, dq.output[0]):
        m.graph.node[a].input[k] = dq.input[0]
    for out in m.graph.output:
        if out.name == dq.output[0]:
            out.name = dq.input[0]  # the graph returns the integers (valid)
            out.type.tensor_type.elem_type = _int_type(m, dq)
    m.graph.node.remove(dq)


def _int_type(m, dq):
    zp = dq.input[2] if len(dq.input) > 2 else ""
    return next((t.data_type for t in m.graph.initializer if t.name == zp), TensorProto.UINT8)


def _dup_pair(m, j):
    dq = m.graph.node[j]
    name = dq.output[0]
    q2 = helper.make_node("QuantizeLinear", [name] + list(dq.input[1:]), [name + "_q2"], name=name + "_q2")
    dq2 = helper.make_node("DequantizeLinear", [name + "_q2"] + list(dq.input[1:]), [name + "_dq2"],
                           name=name + "_dq2")
    for a, k in _consumers(m, name):
        m.graph.node[a].input[k] = name + "_dq2"
    for out in m.graph.output:
        if out.name == name:
            out.name = name + "_dq2"
    m.graph.node.insert(j + 1, dq2)
    m.graph.node.insert(j + 1, q2)


def _swap_pair(m, i, j):
    q, dq = m.graph.node[i], m.graph.node[j]
    q.op_type, dq.op_type = "DequantizeLinear", "QuantizeLinear"


def _other_scale(m, j):
    dq = m.graph.node[j]
    scale = next(t for t in m.graph.initializer if t.name == dq.input[1])
    value = onnx.numpy_helper.to_array(scale) * 2
    m.graph.initializer.append(onnx.numpy_helper.from_array(value, dq.input[1] + "_x2"))
    dq.input[1] = dq.input[1] + "_x2"


# ---- value_info and graph outputs --------------------------------------------------------------------------------
def value_info_mutants(model):
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = [v for v in inferred.graph.value_info if v.type.tensor_type.HasField("shape")][:FIRST]
    for v in infos:
        dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
        etype = v.type.tensor_type.elem_type
        other = TensorProto.INT8 if etype != TensorProto.INT8 else TensorProto.UINT8
        for kind, (t, shape) in {"wrong type": (other, dims), "wrong rank": (etype, dims + [1]),
                                 "wrong dim": (etype, dims[:-1] + [dims[-1] + 3] if dims else [2]),
                                 "symbolic dims (valid)": (etype, [f"d{k}" for k in range(len(dims))]),
                                 "true (valid)": (etype, dims), "no shape (valid)": (etype, None)}.items():
            yield (f"value_info {v.name!r} {kind}: {onnx.helper.tensor_dtype_to_string(t)} {shape}",
                   lambda m, n=v.name, t=t, shape=shape: m.graph.value_info.append(
                       helper.make_tensor_value_info(n, t, shape)))
    out = inferred.graph.output[0]
    etype = out.type.tensor_type.elem_type
    dims = [d.dim_value for d in out.type.tensor_type.shape.dim]
    for kind, (t, shape) in {"wrong type": (TensorProto.INT8, dims), "wrong rank": (etype, dims + [1]),
                             "wrong dim": (etype, dims[:-1] + [dims[-1] + 1] if dims else [2]),
                             "symbolic (valid)": (etype, ["n"] * len(dims)), "no shape (valid)": (etype, None)}.items():
        yield (f"graph output {out.name!r} declared {kind}: {onnx.helper.tensor_dtype_to_string(t)} {shape}",
               lambda m, t=t, shape=shape: m.graph.output[0].CopyFrom(
                   helper.make_tensor_value_info(m.graph.output[0].name, t, shape)))


# ---- op swaps ----------------------------------------------------------------------------------------------------
def op_swap_mutants(model):
    seen = set()
    for i, n in enumerate(model.graph.node):
        for new in SWAPS.get(n.op_type, ()):
            key = (n.op_type, new, tuple(a.name for a in n.attribute))
            if key in seen and n.op_type in QDQ:
                continue
            seen.add(key)
            yield f"{_label(n, i)} becomes {new}", lambda m, i=i, new=new: setattr(m.graph.node[i], "op_type", new)


GRAPH_CLASSES = {"edge": edge_mutants, "qdq_pair": qdq_pair_mutants, "value_info": value_info_mutants,
                 "op_swap": op_swap_mutants}
