"""A QDQ model's own float semantics, as an ONNX model: the accuracy report's float reference without ``--float``.

``derive_float_model(qdq)``: every activation QuantizeLinear→DequantizeLinear pair is removed (the consumer reads
the float tensor) and every weight/bias DequantizeLinear of a constant becomes a float constant holding the
dequantized values (so weight quantization is part of the reference, activation quantization is not). A clamp
onnxruntime's quantizer folded into an asymmetric quantization is put back as a Clip (``removed_activation_clamp``).

``output_aliases(qdq)``: where quantize_static renamed a graph output ``X`` to ``X_QuantizeLinear_Input``.
"""
from __future__ import annotations

import numpy as np

from npu_sim.opset import MOVEMENT_OPS
from npu_sim.qdq.graph import DEQUANTIZE, QUANTIZE, const_values, dequantize_const, is_op, quantize_const


def derive_float_model(model):
    """The QDQ model's own float semantics (see the module docstring) as a new ``onnx.ModelProto``."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    consts = const_values(g)
    moved = _float_moves(g)
    alias, new_consts, dropped = _fold_dequantize(g, consts, moved)

    def resolve(name: str) -> str:
        seen = 0
        while name in alias and seen < 1000:
            name, seen = alias[name], seen + 1
        return name

    nodes = [n for i, n in enumerate(g.node) if i not in dropped]
    for n in nodes:
        for k, name in enumerate(n.input):
            if name:
                n.input[k] = resolve(name)
    nodes = _drop_unread_quantize(nodes, {o.name for o in g.output})
    extra = _output_identities(g, alias, resolve)
    clips = _restore_clamps(g, nodes, consts, new_consts)
    del g.node[:]
    g.node.extend(_in_order(nodes + clips + extra))
    _replace_constants(g, new_consts)
    del g.value_info[:]
    for o in g.output:  # a moved integer output is float now
        if o.name in moved:
            o.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return m


def _float_moves(g) -> set[str]:
    """Data movement on the integers between a QuantizeLinear and its DequantizeLinear (a .tflite's changes of
    layout, tf2onnx's Transposes) rewired onto the float tensor the QuantizeLinear read: the outputs now float."""
    producer = {o: n for n in g.node for o in n.output}
    moved: set[str] = set()
    for n in g.node:  # (topological order)
        if n.op_type not in MOVEMENT_OPS or not n.input:
            continue
        src = producer.get(n.input[0])
        if src is not None and is_op(src, QUANTIZE):
            n.input[0] = src.input[0]
        elif n.input[0] not in moved:
            continue
        moved.update(o for o in n.output if o)
    return moved


def _fold_dequantize(g, consts, moved: set[str]) -> tuple[dict[str, str], dict[str, np.ndarray], set[int]]:
    """The DequantizeLinear nodes to drop (indices), with what replaces their outputs: a float constant (of a
    constant, or of a QuantizeLinear of a constant), or the float tensor its QuantizeLinear read (``alias``)."""
    producer = {o: n for n in g.node for o in n.output}
    alias: dict[str, str] = {}
    new_consts: dict[str, np.ndarray] = {}
    dropped = set()
    for i, node in enumerate(g.node):
        if not is_op(node, DEQUANTIZE):
            continue
        x = node.input[0]
        src = producer.get(x)
        if x in consts:
            new_consts[node.output[0]] = dequantize_const(node, consts[x], consts)
        elif src is not None and is_op(src, QUANTIZE) and src.input[0] in consts:
            w = consts[src.input[0]]
            new_consts[node.output[0]] = dequantize_const(node, quantize_const(src, w, consts), consts)
        elif src is not None and is_op(src, QUANTIZE):
            alias[node.output[0]] = src.input[0]
        elif x in moved:  # float already (``_float_moves``)
            alias[node.output[0]] = x
        else:
            continue  # a DequantizeLinear of a quantized graph input: keep it
        dropped.add(i)
    return alias, new_consts, dropped


def _drop_unread_quantize(nodes: list, outputs: set[str]) -> list:
    """``nodes`` without the QuantizeLinear nodes nobody reads any more (repeatedly)."""
    while True:
        used = {name for n in nodes for name in n.input} | outputs
        keep = [n for n in nodes if not (is_op(n, QUANTIZE) and not any(o in used for o in n.output))]
        if len(keep) == len(nodes):
            return nodes
        nodes = keep


def _output_identities(g, alias: dict[str, str], resolve) -> list:
    """An Identity from the float tensor to each graph output a dropped DequantizeLinear wrote (now float)."""
    import onnx
    from onnx import helper
    extra = []
    for o in g.output:
        if o.name in alias:
            extra.append(helper.make_node("Identity", [resolve(o.name)], [o.name], name=f"{o.name}_float_ref"))
            o.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return extra


def _restore_clamps(g, nodes: list, consts, new_consts: dict) -> list:
    """The Clip nodes ``removed_activation_clamp`` puts back: each producer now writes ``X__unclamped``, its Clip
    writes ``X``; the Clip's bounds go to ``new_consts``."""
    clamps, seen = [], set()
    final_producer = {o: n for n in nodes for o in n.output
                      if not (is_op(n, QUANTIZE) or is_op(n, DEQUANTIZE))}
    graph_inputs = {i.name for i in g.input}
    for q in [n for n in g.node if is_op(n, QUANTIZE)]:
        if q.input[0] in seen:
            continue
        seen.add(q.input[0])
        clamps.extend(removed_activation_clamp(q, consts, final_producer, graph_inputs))
    for node, clip, lo, hi in clamps:
        x = clip.output[0]
        node.output[list(node.output).index(x)] = clip.input[0]
        new_consts[clip.input[1]] = lo
        if hi is not None:
            new_consts[clip.input[2]] = hi
    return [c for _, c, _, _ in clamps]


def _replace_constants(g, new_consts: dict) -> None:
    """Keep the initializers still read (and not replaced); add the new float constants that are read."""
    from onnx import numpy_helper
    used = {name for n in g.node for name in n.input}
    inits = [i for i in g.initializer if i.name in used and i.name not in new_consts]
    del g.initializer[:]
    g.initializer.extend(inits)
    for name, arr in new_consts.items():
        if name in used:
            g.initializer.append(numpy_helper.from_array(arr, name))


def removed_activation_clamp(q, consts, producer, graph_inputs):
    """onnxruntime's quantizer removes a Relu/Clip before a QuantizeLinear when activations are asymmetric
    (QDQRemovableActivation): the op's output takes the activation's name and range, and the clamp is left to
    the quantization's saturation. Where a quantized range starts exactly at 0 (zero point = qmin) the derived
    reference therefore clamps at 0, and at the range's top too when that is a whole number (Clip(0, 6) -> 6.0;
    a calibrated maximum practically never is). Exact semantics need the float model (--float).
    Returns ``[(producer node, Clip node, low, high or None)]`` (empty when no clamp is due)."""
    from onnx import helper
    x = q.input[0]
    if x in consts or x in graph_inputs or x not in producer or len(q.input) < 3 or not q.input[2]:
        return []
    zp = consts.get(q.input[2])
    scale = consts.get(q.input[1])
    if zp is None or scale is None or zp.size != 1 or scale.size != 1 or zp.dtype.kind not in "iu":
        return []
    info = np.iinfo(zp.dtype)
    if int(zp.reshape(-1)[0]) != info.min:
        return []
    top = float(np.float32((info.max - info.min) * np.float64(scale.reshape(-1)[0])))
    hi = np.array(round(top), np.float32) if top >= 1 and abs(top - round(top)) <= 1e-5 * top else None
    raw = x + "__unclamped"
    names = [raw, x + "__clamp_min", x + "__clamp_max" if hi is not None else ""]
    clip = helper.make_node("Clip", names, [x], name=x + "__removed_activation")
    return [(producer[x], clip, np.array(0.0, np.float32), hi)]


def _in_order(nodes):
    """Topological order (a Clip inserted after its producer)."""
    made = {o for n in nodes for o in n.output}
    ready, out, pending = set(), [], list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all((not i) or i not in made or i in ready for i in n.input):
                out.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            out.extend(rest)
            break
        pending = rest
    return out


def output_aliases(qdq_model) -> dict[str, str]:
    """float_name -> graph output name, where quantize_static renamed a graph output ``X`` to
    ``X_QuantizeLinear_Input`` (Q→DQ on the output, the DQ writing ``X``)."""
    g = qdq_model.graph
    outs = {o.name for o in g.output}
    producer = {o: n for n in g.node for o in n.output}
    alias = {}
    for n in g.node:
        if is_op(n, DEQUANTIZE) and n.output[0] in outs:
            src = producer.get(n.input[0])
            if src is not None and is_op(src, QUANTIZE):
                alias[src.input[0]] = n.output[0]
    return alias
