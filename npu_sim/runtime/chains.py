"""Elementwise chains of one 8- or 16-bit tensor, run as one table lookup each.

A chain is a set of nodes that each compute every output element from the same element of one tensor ``x`` (and
scalar constants): HardSwish exported as ``Add 3 -> Clip -> Mul x -> Div 6``, SiLU as ``Sigmoid -> Mul x``, a
lookup-table activation, a Requantize, an Add of a scalar. Whatever each node rounds, every tensor of the chain
is then a function of the code of ``x`` alone, and there are only 256 codes (65,536 for 16 bits). So the
executor runs the chain's own nodes once on every code (a probe), reads one table per tensor the rest of the
program needs, and at run time computes each such tensor with one gather from ``x`` (``kernels/lut8.py``). The
tables are the nodes' own integers, so a fused run equals the unfused one bit for bit, by construction; the
saving is every intermediate pass over the tensor (a HardSwish is one pass instead of four).

Only the executor's run plan changes: the program, its nodes and what check, cost and trace see stay as lowered,
and a run that keeps every tensor or has hooks (trace, accuracy, dumps) runs node by node. A node joins a chain
only when it provably computes element by element (:func:`elementwise_node`), and a chain is used only when the
probe gives the same integers wherever a code repeats in it; else the nodes run as they are.
"""
from __future__ import annotations

import numpy as np

from kernels.lut8 import bind_codes
from npu_sim.ir import Node, Program, Tensor
from npu_sim.opset import facts_of
from npu_sim.ops.onnx_arith import run_float_reference

CHAIN_KINDS = ("elementwise", "activation", "lut", "convert")  # the kinds whose ops work element by element
CODE_DTYPES = ("int8", "uint8", "int16", "uint16")  # a chain's source and the tensors its tables hold
PROBE_REPEATS = 3  # each code appears at least this often in the probes
PROBE_RUNS = 64     # at most this many runs of a chain's nodes to probe it


def _uniform(value) -> bool:
    """Not an array, or an array of one value (a scalar's parameters repeated per channel)."""
    return not isinstance(value, np.ndarray) or value.size <= 1 or bool(np.all(value == value.reshape(-1)[0]))


def _arrays(value, depth: int = 2):
    """The arrays in a parameter value: itself, or those in a list, tuple or dict it is (two levels deep)."""
    if isinstance(value, np.ndarray):
        yield value
    elif depth and isinstance(value, (list, tuple, dict)):
        for v in (value.values() if isinstance(value, dict) else value):
            yield from _arrays(v, depth - 1)


def elementwise_node(node: Node, tensors: dict[str, Tensor]) -> bool:
    """Whether ``node`` computes each output element from the same element of its inputs with one set of
    parameters: an op of an elementwise kind (not a join), a single output, constant operands of one value, and no
    per-channel parameters (every array it holds -- multipliers, offsets, slopes -- has one value throughout, its
    tables aside). A node of the ``onnx`` arithmetic's float reference holds its constants inside an evaluator, out
    of sight: it is left out."""
    facts = facts_of(node.op)
    if facts.kind not in CHAIN_KINDS or facts.joins or node.layout or len(node.outputs) != 1:
        return False
    if node.op == "Quantize" or node.weights is not None or node.geometry is not None:
        return False
    if node.run is run_float_reference:
        return False
    consts = [tensors[n] for n in node.inputs if n and tensors[n].is_const]
    if node.operands is not None:
        consts += [t for t in (node.operands.a, node.operands.b) if t.data is not None]
    if not all(_uniform(t.data) for t in consts):
        return False
    tables = {id(t) for t in (node.tables.entries.values() if node.tables is not None else ())}
    held = [a for v in node.params.values() for a in _arrays(v)]
    for record in (node.requant, node.affine):
        if record is not None:
            held += [a for a in vars(record).values() if isinstance(a, np.ndarray)]
    return all(_uniform(a) or id(a) in tables for a in held)


def _source(t: Tensor) -> bool:
    return (not t.is_const and t.q is not None and t.q.dtype in CODE_DTYPES and t.q.per_tensor
            and len(t.shape) >= 1)


def find_chains(program: Program) -> dict[str, list[Node]]:
    """Source tensor -> the nodes, in program order, whose every output element is a function of the same element
    of that source (:func:`elementwise_node`, each activation input the source or another member's output, each
    output of the source's shape, per-tensor quantized in a table dtype)."""
    tensors = program.tensors
    root: dict[str, str] = {}
    chains: dict[str, list[Node]] = {}
    for node in program.nodes:
        if not elementwise_node(node, tensors):
            continue
        acts = [n for n in node.inputs if n and not tensors[n].is_const]
        roots = {root.get(n, n if _source(tensors[n]) else None) for n in acts}
        if len(roots) != 1 or None in roots:
            continue
        src = roots.pop()
        out = tensors[node.outputs[0]]
        if out.shape != tensors[src].shape or out.q is None or out.q.dtype not in CODE_DTYPES or not out.q.per_tensor:
            continue
        root[out.name] = src
        chains.setdefault(src, []).append(node)
    return chains


def chain_tables(program: Program, src: str, members: list[Node], wanted: list[str], ctx) -> dict | None:
    """``wanted`` tensor -> its table (one entry per code of ``src``'s dtype, from its minimum), from the members
    run on probes of ``src``'s shape holding every code ``PROBE_REPEATS`` times or more between them (in order, then
    shuffled); None when that takes more than ``PROBE_RUNS`` runs (a 16-bit tensor of fewer than 3,072 elements)
    or the probes show a member is not elementwise after all (an error, or two results for one code)."""
    q, shape = program.tensors[src].q, program.tensors[src].shape
    info = np.iinfo(q.np_dtype)
    codes = np.arange(q.qmin, q.qmax + 1, dtype=np.int64)
    size = int(np.prod(shape))
    runs = -(-PROBE_REPEATS * codes.size // size)
    if runs > PROBE_RUNS:
        return None
    # each probe element's code index: every code once in order, then in shuffled orders (so that a result that
    # depended on an element's place would not repeat with its code)
    shuffled = np.tile(np.arange(codes.size), (-(-runs * size // codes.size) - 1, 1))
    np.random.default_rng(1).permuted(shuffled, axis=1, out=shuffled)  # each row on its own
    index = np.concatenate([np.arange(codes.size), shuffled.reshape(-1)])[:runs * size]
    got: dict[str, list[np.ndarray]] = {name: [] for name in wanted}
    try:
        for part in index.reshape(runs, size):
            values = {src: codes[part].astype(q.np_dtype).reshape(shape)}
            for node in members:
                acts = [values[n] for n in node.inputs if n and not program.tensors[n].is_const]
                values[node.outputs[0]] = np.asarray(node.run(node, acts, ctx)[0])
            for name in wanted:
                got[name].append(values[name].reshape(-1))
    except Exception:  # noqa: BLE001 -- a member that cannot run on the probe is simply not fused
        return None
    tables = {}
    for name in wanted:
        out = np.concatenate(got[name])
        first = np.empty(codes.size, out.dtype)
        first[index] = out  # the last result of each code ...
        if out.size != index.size or not np.array_equal(out, first[index]):  # ... must be every result of it
            return None
        table = np.zeros(int(info.max) - int(info.min) + 1, out.dtype)  # codes outside the type never occur
        table[q.qmin - int(info.min):q.qmax - int(info.min) + 1] = first
        tables[name] = table
    return tables


def _run_gather(node, inputs, ctx):
    """A chain tensor from its table: one gather from the source (bound once per source shape)."""
    x = np.ascontiguousarray(inputs[0])
    table = node.params["table"]
    bound = node.memo.get("bound")
    if bound is None or bound[0] != (x.shape, x.dtype):
        bound = node.memo["bound"] = ((x.shape, x.dtype), bind_codes(x.reshape(-1), table,
                                                                      np.empty(x.size, table.dtype)))
    out = np.empty(x.shape, table.dtype)
    bound[1](x.reshape(-1), out.reshape(-1))
    return [out]


def fused_nodes(program: Program, ctx) -> list[Node]:
    """The program's nodes with every usable chain replaced: each member whose output the rest of the program (or
    the program's outputs) reads becomes one gather of that output from the chain's source, in the member's place
    and under its name; members only other members read are dropped."""
    chains = find_chains(program)
    if not chains:
        return list(program.nodes)
    readers: dict[str, set[str]] = {}
    for node in program.nodes:
        for n in node.inputs:
            readers.setdefault(n, set()).add(node.name)
    kept = set(program.outputs.values()) | set(program.passthrough.values())
    replace: dict[str, Node | None] = {}
    for src, members in chains.items():
        names = {m.name for m in members}
        wanted = [m.outputs[0] for m in members if m.outputs[0] in kept or readers.get(m.outputs[0], set()) - names]
        tables = chain_tables(program, src, members, wanted, ctx)
        if tables is None:
            continue
        for m in members:
            out = m.outputs[0]
            replace[m.name] = (Node(m.name, m.op, [src], [out], _run_gather, {"table": tables[out]},
                                    sources=[n.name for n in members])
                               if out in tables else None)
    out = []
    for node in program.nodes:
        if node.name not in replace:
            out.append(node)
        elif replace[node.name] is not None:
            out.append(replace[node.name])
    return out
