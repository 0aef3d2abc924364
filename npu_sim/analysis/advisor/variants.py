"""Which nodes of a variant of a program provably compute what the baseline computes (``same_nodes``): the
advisor runs only the rest when it scores a promotion."""
from __future__ import annotations

from dataclasses import fields, is_dataclass

import numpy as np

from npu_sim.ir import RECORDS, QParams


def _same(a, b) -> bool:
    """Structural equality of prepared node parameters: arrays by dtype, shape and values, quantizations by
    ``QParams.same_as``, containers and dataclasses field by field; anything else only when it is the same object
    or compares equal as a plain scalar (so an opaque object, e.g. a session, never counts as the same)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, QParams):
        return a.same_as(b) and a.axis == b.axis
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float, complex, str, bytes, bool, np.generic)) or a is None:
        return bool(a == b) or (isinstance(a, float) and a != a and b != b)
    if is_dataclass(a) and not isinstance(a, type):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    return False


def _same_tensor(a, b) -> bool:
    if a.shape != b.shape or (a.q is None) != (b.q is None) or (a.data is None) != (b.data is None):
        return False
    if a.q is not None and not _same(a.q, b.q):
        return False
    return a.data is None or _same(a.data, b.data)


def _same_params(ran: dict, fresh: dict) -> bool:
    """The prepared parameters of a node that has run (``ran``) equal those of a freshly lowered one (``fresh``):
    the same keys, each value ``_same``. Parameters are set once at lowering; what a node's run function caches
    lives in its ``memo``, never compared."""
    return _same(ran, fresh)


def same_nodes(base, prog) -> set[int]:
    """Indices of the nodes of ``prog`` that provably compute what ``base`` computes: a node of ``base`` with the
    same name and outputs, the same run function, the same prepared parameters (``_same_params``), records
    (``ir.RECORDS``) and attributes (``_same``), the same quantization and shape on every input and output
    (constants: the same data), and every activation input made by such a node or a graph input both programs take
    alike. A node is a pure function of exactly these (its run function reads its parameters, records and tensors;
    its ``memo`` only caches), so on the same feeds it gives the same integers; everything downstream of a
    difference is left out."""
    bnodes = {(n.name, tuple(n.outputs)): n for n in base.nodes}
    bt, pt = base.tensors, prog.tensors
    clean_t = {t for name, t in prog.inputs.items() if base.inputs.get(name) == t and t in bt
               and _same_tensor(bt[t], pt[t])}
    clean = set()
    for i, n in enumerate(prog.nodes):
        b = bnodes.get((n.name, tuple(n.outputs)))
        if (b is None or b.op != n.op or b.run is not n.run or list(b.inputs) != list(n.inputs)
                or any(not pt[x].is_const and x not in clean_t for x in n.inputs)
                or any(x not in bt or not _same_tensor(bt[x], pt[x]) for x in list(n.inputs) + list(n.outputs))
                or not _same_params(b.params, n.params) or not _same(b.attrs, n.attrs)
                or not all(_same(getattr(b, r), getattr(n, r)) for r in RECORDS)):
            continue
        clean.add(i)
        clean_t.update(n.outputs)
    return clean
