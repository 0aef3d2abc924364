"""Graph rewrites run before the lowering walk, on the plain ONNX graph (``frontend.reader.Graph``), in place.

* ``fuse_layernorm_chains``: decomposed LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)
  becomes one LayerNormalization node.
* ``commute_scaling_and_maxpool``: ``Div``/``Mul`` by a positive constant whose unquantized output only feeds a
  MaxPool (onnxruntime's quantizer leaves such a float island in hard-swish blocks) is moved after the MaxPool,
  which is exact: division or multiplication by a positive constant is monotone, so it commutes with max.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from npu_sim.frontend.reader import Graph, attrs


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
    matcher = _ChainMatcher(g)  # the graph as it was: later matches read the original producers and consumers
    chains: dict[str, dict] = {}
    used: set[int] = set()
    for r1 in [n for n in g.nodes if n.op_type == "ReduceMean"]:
        if id(r1) in used:
            continue
        chain = matcher.match(r1)
        if chain is None or any(id(n) in used for n in chain["nodes"]):
            continue
        used.update(id(n) for n in chain["nodes"])
        _replace_chain(g, r1, chain, used)
        chains[chain["last"].output[0]] = chain
    return chains


class _ChainMatcher:
    """Matches one decomposed LayerNorm chain from its first ReduceMean (``match``), over a graph's producers and
    consumers. Every ``_match_*`` step appends the nodes it takes to ``taken`` (inner Q/DQ pairs included) and
    returns None when the chain does not continue as a LayerNorm."""

    def __init__(self, g: Graph):
        self.g = g
        self.producer = {o: n for n in g.nodes for o in n.output}
        self.consumers: dict[str, list] = {}
        for n in g.nodes:
            for name in dict.fromkeys(n.input):
                self.consumers.setdefault(name, []).append(n)
        self.outputs = set(g.outputs)

    # ---- lookups
    def only(self, name):
        """The single consumer of ``name`` (None if it has several, none, or is a graph output)."""
        c = self.consumers.get(name, [])
        return c[0] if len(c) == 1 and name not in self.outputs else None

    def skip_qdq(self, name, taken):
        """The tensor after a QuantizeLinear -> DequantizeLinear pair that alone reads ``name`` (else ``name``)."""
        q = self.only(name)
        if q is not None and q.op_type == "QuantizeLinear":
            dq = self.only(q.output[0])
            if dq is not None and dq.op_type == "DequantizeLinear":
                taken += [q, dq]
                return dq.output[0]
        return name

    def const_dq(self, name):
        """None | the DequantizeLinear producing a constant | "init" for an initializer."""
        if name in self.g.consts:
            return "init"
        p = self.producer.get(name)
        if p is not None and p.op_type == "DequantizeLinear" and p.input[0] in self.g.consts:
            return p
        return None

    def value(self, name):
        """Float value of a constant (an initializer or a per-tensor DequantizeLinear of one), else None."""
        g = self.g
        src = self.const_dq(name)
        if src == "init":
            return np.asarray(g.consts[name], np.float64)
        if src is None or len(src.input) < 2 or src.input[1] not in g.consts:
            return None
        scale = np.asarray(g.consts[src.input[1]], np.float64)
        zp = np.asarray(g.consts[src.input[2]], np.float64) if len(src.input) > 2 and src.input[2] else 0.0
        if scale.size != 1:
            return None
        return (np.asarray(g.consts[src.input[0]], np.float64) - zp) * scale.reshape(())

    def reduce_axes(self, node, rank):
        """Sorted non-negative axes of a ReduceMean with keepdims=1 (None for keepdims=0 or a no-op reduction)."""
        a = attrs(node)
        if a.get("keepdims", 1) != 1:
            return None
        axes = a.get("axes")
        if len(node.input) > 1 and node.input[1]:
            axes = self.g.consts.get(node.input[1])
            if axes is None:
                return None
        axes = [int(v) for v in np.asarray(axes).reshape(-1)] if axes is not None else []
        if not axes and a.get("noop_with_empty_axes", 0):
            return None
        return tuple(sorted(v % rank for v in axes)) if axes else tuple(range(rank))

    @staticmethod
    def other(node, name):
        """The other input of a two-input node that reads ``name`` (None if it does not)."""
        ins = list(node.input)
        return ins[1] if ins[0] == name else ins[0] if len(ins) == 2 and ins[1] == name else None

    # ---- the chain, step by step
    def match(self, r1) -> dict | None:
        """The chain starting at ReduceMean ``r1`` (see ``fuse_layernorm_chains``), or None."""
        x = r1.input[0]
        px = self.producer.get(x)
        if px is None or px.op_type != "DequantizeLinear" or x not in self.g.shapes:
            return None
        rank = len(self.g.shapes[x])
        a1 = self.reduce_axes(r1, rank)
        taken = [r1]
        centered = self._match_centering(r1, x, rank, a1, taken)
        if centered is None:
            return None
        d, perm = centered
        normalized = self._match_normalization(d, rank, a1, perm, taken)
        if normalized is None:
            return None
        a2, eps, div = normalized
        last, affine = self._match_affine(div, taken)
        q = self.only(last.output[0])
        if q is None or q.op_type != "QuantizeLinear" or not self._self_contained(taken, last):
            return None
        dqs = [p for p in (self.const_dq(nm) for n in taken for nm in n.input) if p not in (None, "init")]
        return {"input": x, "perm": perm, "axes": a2, "eps": float(eps.reshape(-1)[0]), "gamma": affine["Mul"],
                "beta": affine["Add"], "last": last, "nodes": taken,
                "const_dq": list({id(p): p for p in dqs}.values())}

    def _match_centering(self, r1, x, rank, a1, taken):
        """``d = Sub(x, ReduceMean(x))`` [-> Transpose]: (d, perm or None)."""
        m = self.skip_qdq(r1.output[0], taken)
        sub = self.only(m)
        if a1 is None or sub is None or sub.op_type != "Sub" or list(sub.input) != [x, m]:
            return None
        taken.append(sub)
        d = self.skip_qdq(sub.output[0], taken)
        perm = None
        t = self.only(d)
        if t is not None and t.op_type == "Transpose":
            perm = [int(v) for v in attrs(t).get("perm", list(range(rank))[::-1])]
            taken.append(t)
            d = self.skip_qdq(t.output[0], taken)
        return d, perm

    def _is_square(self, u, d) -> bool:
        return (u.op_type == "Mul" and list(u.input) == [d, d]) or (
            u.op_type == "Pow" and u.input[0] == d and self.value(u.input[1]) is not None
            and np.allclose(self.value(u.input[1]), 2.0, rtol=1e-5, atol=0))

    def _match_normalization(self, d, rank, a1, perm, taken):
        """``Div(d, Sqrt(Add(ReduceMean(d*d), eps)))``: (variance axes, eps, the Div)."""
        users = self.consumers.get(d, [])
        sq = next((u for u in users if self._is_square(u, d)), None)
        div = next((u for u in users if u.op_type == "Div" and u.input[0] == d), None)
        if d in self.outputs or len(users) != 2 or sq is None or div is None:
            return None
        taken.append(sq)
        r2 = self.only(self.skip_qdq(sq.output[0], taken))
        a2 = self.reduce_axes(r2, rank) if r2 is not None and r2.op_type == "ReduceMean" else None
        expect = a1 if perm is None else tuple(sorted(perm.index(a) for a in a1))
        if a2 != expect:
            return None
        taken.append(r2)
        v = self.skip_qdq(r2.output[0], taken)
        add = self.only(v)
        eps = self.value(self.other(add, v)) if add is not None and add.op_type == "Add" and self.other(add, v) \
            else None
        if eps is None or eps.size != 1:
            return None
        taken.append(add)
        v = self.skip_qdq(add.output[0], taken)
        sqrt = self.only(v)
        if sqrt is None or sqrt.op_type != "Sqrt":
            return None
        taken.append(sqrt)
        v = self.skip_qdq(sqrt.output[0], taken)
        if self.only(v) is not div or list(div.input) != [d, v]:
            return None
        taken.append(div)
        return a2, eps, div

    def _match_affine(self, div, taken):
        """The optional ``Mul(y, gamma)``, then ``Add(y, beta)``: (last node, {"Mul": gamma, "Add": beta})."""
        last, affine = div, {"Mul": "", "Add": ""}
        for op in ("Mul", "Add"):
            tail: list = []
            v = self.skip_qdq(last.output[0], tail)
            nxt = self.only(v)
            c = self.other(nxt, v) if nxt is not None and nxt.op_type == op else None
            if not c or self.const_dq(c) is None:
                break
            taken += tail + [nxt]
            affine[op], last = c, nxt
        return last, affine

    def _self_contained(self, taken, last) -> bool:
        """Every intermediate tensor stays inside the chain (only ``last``'s output leaves it)."""
        inside = {id(n) for n in taken}
        for n in taken:
            if n is not last and any(o in self.outputs or any(id(u) not in inside for u in self.consumers.get(o, []))
                                     for o in n.output):
                return False
        return True


def _replace_chain(g: Graph, r1, chain: dict, used: set[int]) -> None:
    """Put ``[Transpose] -> LayerNormalization`` at the chain's last node, drop the chain's (``used``) nodes."""
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
