"""Graph rewrites run before the lowering walk, on the plain ONNX graph (``onnx_reader.Graph``), in place.

* ``fuse_layernorm_chains``: decomposed LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)
  becomes one LayerNormalization node.
* ``commute_scaling_and_maxpool``: ``Div``/``Mul`` by a positive constant whose unquantized output only feeds a
  MaxPool (onnxruntime's quantizer leaves such a float island in hard-swish blocks) is moved after the MaxPool,
  which is exact: division or multiplication by a positive constant is monotone, so it commutes with max.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from .onnx_reader import Graph, attrs_of


# ---- pre-pass: decomposed LayerNorm chains -> one LayerNormalization node ----------------------------------------
def fuse_layernorm_chains(g: Graph) -> dict[str, dict]:
    """Rewrite every decomposed LayerNorm chain of ``g.nodes`` into one LayerNormalization node, in place.

    The chain exporters write (every intermediate tensor optionally behind a QuantizeLinear -> DequantizeLinear
    pair, as onnxruntime's quantizer leaves some of them)::

        x = DequantizeLinear(...)
        m = ReduceMean(x, axes A, keepdims=1);  d = Sub(x, m)  [-> Transpose(perm)]
        v = ReduceMean(Pow(d, 2) | Mul(d, d), axes A', keepdims=1)
        y = Div(d, Sqrt(Add(v, eps)))  [-> Mul(y, gamma)]  [-> Add(y, beta)]  -> QuantizeLinear

    ``gamma``/``beta``/``eps`` constants (initializers or DequantizeLinear of one), every intermediate tensor used
    only inside the chain, ``A'`` the axes ``A`` after the optional Transpose. The chain's nodes (and its inner
    Q/DQ pairs) are replaced, at the position of its last node, by ``[Transpose(x)] -> LayerNormalization(x,
    gamma, beta)`` writing the last node's output, so the DequantizeLinear of ``x`` and the final QuantizeLinear
    stay and the walk lowers it as one QDQ group. Returns ``{LayerNormalization output: chain}`` with what
    ``ops.layernorm`` needs (normalized axes, eps, the original nodes for the ``onnx`` arithmetic).
    """
    producer = {o: n for n in g.nodes for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.nodes:
        for name in dict.fromkeys(n.input):
            consumers.setdefault(name, []).append(n)
    outputs = set(g.outputs)

    def only(name):
        c = consumers.get(name, [])
        return c[0] if len(c) == 1 and name not in outputs else None

    def skip_qdq(name, taken):
        q = only(name)
        if q is not None and q.op_type == "QuantizeLinear":
            dq = only(q.output[0])
            if dq is not None and dq.op_type == "DequantizeLinear":
                taken += [q, dq]
                return dq.output[0]
        return name

    def const_dq(name):  # None | the DequantizeLinear producing a constant | "init" for an initializer
        if name in g.consts:
            return "init"
        p = producer.get(name)
        if p is not None and p.op_type == "DequantizeLinear" and p.input[0] in g.consts:
            return p
        return None

    def value(name):
        src = const_dq(name)
        if src == "init":
            return np.asarray(g.consts[name], np.float64)
        if src is None or len(src.input) < 2 or src.input[1] not in g.consts:
            return None
        scale = np.asarray(g.consts[src.input[1]], np.float64)
        zp = np.asarray(g.consts[src.input[2]], np.float64) if len(src.input) > 2 and src.input[2] else 0.0
        if scale.size != 1:
            return None
        return (np.asarray(g.consts[src.input[0]], np.float64) - zp) * scale.reshape(())

    def reduce_axes(node, rank):
        a = attrs_of(node)
        if a.get("keepdims", 1) != 1:
            return None
        axes = a.get("axes")
        if len(node.input) > 1 and node.input[1]:
            axes = g.consts.get(node.input[1])
            if axes is None:
                return None
        axes = [int(v) for v in np.asarray(axes).reshape(-1)] if axes is not None else []
        if not axes and a.get("noop_with_empty_axes", 0):
            return None
        return tuple(sorted(v % rank for v in axes)) if axes else tuple(range(rank))

    def other(node, name):
        ins = list(node.input)
        return ins[1] if ins[0] == name else ins[0] if len(ins) == 2 and ins[1] == name else None

    def match(r1):
        x = r1.input[0]
        px = producer.get(x)
        if px is None or px.op_type != "DequantizeLinear" or x not in g.shapes:
            return None
        rank = len(g.shapes[x])
        a1 = reduce_axes(r1, rank)
        taken = [r1]
        m = skip_qdq(r1.output[0], taken)
        sub = only(m)
        if a1 is None or sub is None or sub.op_type != "Sub" or list(sub.input) != [x, m]:
            return None
        taken.append(sub)
        d = skip_qdq(sub.output[0], taken)
        perm = None
        t = only(d)
        if t is not None and t.op_type == "Transpose":
            perm = [int(v) for v in attrs_of(t).get("perm", list(range(rank))[::-1])]
            taken.append(t)
            d = skip_qdq(t.output[0], taken)
        users = consumers.get(d, [])
        sq = next((u for u in users if (u.op_type == "Mul" and list(u.input) == [d, d])
                   or (u.op_type == "Pow" and u.input[0] == d and value(u.input[1]) is not None
                       and np.allclose(value(u.input[1]), 2.0, rtol=1e-5, atol=0))), None)
        div = next((u for u in users if u.op_type == "Div" and u.input[0] == d), None)
        if d in outputs or len(users) != 2 or sq is None or div is None:
            return None
        taken.append(sq)
        r2 = only(skip_qdq(sq.output[0], taken))
        a2 = reduce_axes(r2, rank) if r2 is not None and r2.op_type == "ReduceMean" else None
        expect = a1 if perm is None else tuple(sorted(perm.index(a) for a in a1))
        if a2 != expect:
            return None
        taken.append(r2)
        v = skip_qdq(r2.output[0], taken)
        add = only(v)
        eps = value(other(add, v)) if add is not None and add.op_type == "Add" and other(add, v) else None
        if eps is None or eps.size != 1:
            return None
        taken.append(add)
        v = skip_qdq(add.output[0], taken)
        sqrt = only(v)
        if sqrt is None or sqrt.op_type != "Sqrt":
            return None
        taken.append(sqrt)
        v = skip_qdq(sqrt.output[0], taken)
        if only(v) is not div or list(div.input) != [d, v]:
            return None
        taken.append(div)
        last, affine = div, {"Mul": "", "Add": ""}
        for op in ("Mul", "Add"):
            tail: list = []
            v = skip_qdq(last.output[0], tail)
            nxt = only(v)
            c = other(nxt, v) if nxt is not None and nxt.op_type == op else None
            if not c or const_dq(c) is None:
                break
            taken += tail + [nxt]
            affine[op], last = c, nxt
        q = only(last.output[0])
        if q is None or q.op_type != "QuantizeLinear":
            return None
        # every intermediate tensor stays inside the chain
        inside = {id(n) for n in taken}
        for n in taken:
            if n is not last and any(o in outputs or any(id(u) not in inside for u in consumers.get(o, []))
                                     for o in n.output):
                return None
        dqs = [p for p in (const_dq(nm) for n in taken for nm in n.input) if p not in (None, "init")]
        return {"input": x, "perm": perm, "axes": a2, "eps": float(eps.reshape(-1)[0]), "gamma": affine["Mul"],
                "beta": affine["Add"], "last": last, "nodes": taken, "const_dq": list({id(p): p for p in dqs}.values())}

    chains: dict[str, dict] = {}
    used: set[int] = set()
    for r1 in [n for n in g.nodes if n.op_type == "ReduceMean"]:
        if id(r1) in used:
            continue
        chain = match(r1)
        if chain is None or any(id(n) in used for n in chain["nodes"]):
            continue
        used.update(id(n) for n in chain["nodes"])
        last = chain["last"]
        src, new = chain["input"], []
        if chain["perm"] is not None:
            src = f"{chain['input']}/layernorm_transposed"
            new.append(helper.make_node("Transpose", [chain["input"]], [src], name=f"{last.name}/transpose_input",
                                        perm=chain["perm"]))
            g.shapes[src] = tuple(g.shapes[chain["input"]][p] for p in chain["perm"])
            g.elem_types[src] = g.elem_types.get(chain["input"], 1)
        rank = len(g.shapes[src])
        trailing = chain["axes"] == tuple(range(chain["axes"][0], rank))
        new.append(helper.make_node("LayerNormalization", [src, chain["gamma"], chain["beta"]], [last.output[0]],
                                    name=f"{r1.name or r1.output[0]}..{last.name or last.output[0]}",
                                    axis=chain["axes"][0] if trailing else -1, epsilon=chain["eps"]))
        index = {id(n): i for i, n in enumerate(g.nodes)}
        chain["nodes"] = sorted(chain["nodes"], key=lambda n: index[id(n)])
        at = index[id(last)]
        g.nodes[at:at + 1] = new  # (axis=-1 stands for non-trailing axes: ops.layernorm reads chain["axes"])
        g.nodes[:] = [n for n in g.nodes if id(n) not in used]
        chains[last.output[0]] = chain
    return chains


def _constant(g: Graph, producers: dict, name: str):
    """Float value of a constant tensor: an initializer, or a DequantizeLinear of one (else None)."""
    if name in g.consts:
        return np.asarray(g.consts[name], dtype=np.float64)
    dq = producers.get(name)
    if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in g.consts:
        return None
    names = list(dq.input) + ["", ""]
    if names[1] not in g.consts or np.asarray(g.consts[names[1]]).size != 1:
        return None
    zp = np.asarray(g.consts[names[2]]).astype(np.float64) if names[2] else 0.0
    return (np.asarray(g.consts[dq.input[0]]).astype(np.float64) - zp) * float(np.asarray(g.consts[names[1]]))


def commute_scaling_and_maxpool(g: Graph) -> int:
    """``MaxPool(x / c)`` -> ``MaxPool(x) / c`` (and ``x * c``) for a positive scalar constant ``c``, when the
    scaled tensor is not quantized and feeds only that MaxPool. Returns the number of rewrites."""
    producers = {o: n for n in g.nodes for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.nodes:
        for name in n.input:
            consumers.setdefault(name, []).append(n)
    count = 0
    for scale in list(g.nodes):
        if scale.op_type not in ("Div", "Mul") or scale.domain not in ("", "ai.onnx") or len(scale.input) != 2:
            continue
        sides = [0] if scale.op_type == "Div" else [0, 1]
        for i in sides:
            data, const = scale.input[i], _constant(g, producers, scale.input[1 - i])
            if const is not None and const.size == 1 and float(const.reshape(-1)[0]) > 0:
                break
        else:
            continue
        source = producers.get(data)
        users = consumers.get(scale.output[0], [])
        if (source is None or source.op_type != "DequantizeLinear" or len(users) != 1
                or users[0].op_type not in ("MaxPool", "GlobalMaxPool") or scale.output[0] in g.outputs
                or (len(users[0].output) > 1 and users[0].output[1])):
            continue
        pool = users[0]
        out = pool.output[0]
        mid = f"{out}__max_before_{scale.op_type.lower()}"
        pool.input[0], pool.output[0] = data, mid
        scale.input[i], scale.output[0] = mid, out
        g.shapes[mid] = g.shapes[out]
        g.elem_types[mid] = TensorProto.FLOAT
        g.nodes.remove(pool)
        g.nodes.insert(g.nodes.index(scale), pool)
        count += 1
    return count
