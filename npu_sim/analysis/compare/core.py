"""Comparing a dump with the simulation: which tensors differ, the first divergent node, and why.

The simulation is fed the input the board was fed (``inputs``, or the dump's own input tensor) and run once;
every dumped tensor is compared with it in execution order. A node whose output differs is then re-run alone on
the dump's own inputs (``runtime.replay``; inputs missing from the dump take the simulation's values): an element
the re-run reproduces is *inherited* (an input already differs there); one it does not is the node's own, and the
variations of its arithmetic are proven on the whole tensor (``explain``). The *first divergent node* is the first, in
execution order, whose output differs while every input the dump holds equals the simulation's.
"""
from __future__ import annotations

from dataclasses import dataclass, field, asdict

import numpy as np

from npu_sim.analysis.compare.dumpfile import DumpEntry, read_dump
from npu_sim.analysis.compare.explain import explain
from npu_sim.analysis.compare.match import (CHANNELS_LAST, dump_layout, layout_of, lookup, name_table, sanitize,
                                            through_layout,
                                            scale_note, to_program)
from npu_sim.errors import InputError
from npu_sim.frontend.reader import open_model
from npu_sim.ir import Program
from npu_sim.runtime.replay import Replay
from npu_sim.runtime.simulator import Simulator, load

EXIT_EQUAL, EXIT_MISMATCH = 0, 1
EXAMPLES = 5  # example elements per differing tensor


@dataclass
class TensorDiff:
    tensor: str             # ONNX float tensor name
    dump_name: str          # the name the dump gives it
    ir_tensor: str
    producer: str           # node of the program that writes it
    op: str
    status: str             # "equal" | "differs" | "shape" (shapes differ)
    layout: str = "nchw"    # as dumped; indices below are in this layout
    dequantized: bool = False
    total: int = 0
    differing: int = 0
    max_diff: int = 0
    first_index: tuple[int, ...] | None = None
    dump_value: int | None = None
    sim_value: int | None = None
    examples: list = field(default_factory=list)   # [index, dump value, simulation value]
    shape_message: str = ""
    # per differing node (its first output): the re-run from the dump's inputs
    inputs_differ: list = field(default_factory=list)       # its inputs (float names) the dump holds and that differ
    inputs_not_in_dump: list = field(default_factory=list)  # its inputs the dump lacks (simulation values used)
    inherited: int = 0
    causes: dict = field(default_factory=dict)              # cause -> elements ("unexplained" included)
    equally: dict = field(default_factory=dict)             # cause -> other variations reproducing the same elements
    reproduces: dict = field(default_factory=dict)          # cause -> [elements of the tensor it gives, elements]
    closest: list | None = None                             # [variation, elements it gives, elements]: some unexplained
    not_tried: int = 0

    @property
    def unexplained(self) -> int:
        return self.causes.get("unexplained", 0)


@dataclass
class Comparison:
    tensors: list[TensorDiff]               # in execution order
    not_in_dump: list[str]                  # quantized tensors of the program the dump lacks
    not_in_model: list[str]                 # dump entries matching no tensor of the program
    notes: list[str]
    first_divergent: str | None = None      # the node
    fed: str = ""                           # what the simulation was fed
    refused: list[str] = field(default_factory=list)  # nodes the board does not run: not compared (exit 1)

    @property
    def first_mismatch(self) -> TensorDiff | None:
        return next((t for t in self.tensors if t.status != "equal"), None)

    @property
    def first_divergent_tensor(self) -> TensorDiff | None:
        return next((t for t in self.tensors if t.producer == self.first_divergent and t.status != "equal"), None)

    @property
    def equal(self) -> bool:
        return self.first_mismatch is None

    @property
    def exit_code(self) -> int:
        return EXIT_EQUAL if self.equal and not self.refused else EXIT_MISMATCH

    def to_dict(self) -> dict:
        return {"equal": self.equal, "compared": len(self.tensors),
                "matched": sum(t.status == "equal" for t in self.tensors),
                "differing": sum(t.status != "equal" for t in self.tensors),
                "not_in_dump": self.not_in_dump, "not_in_model": self.not_in_model,
                "first_divergent_node": self.first_divergent, "fed": self.fed, "notes": self.notes,
                "refused": self.refused,
                "tensors": [_tensor_dict(t) for t in self.tensors]}


def _tensor_dict(t: TensorDiff) -> dict:
    d = asdict(t)
    d["first_index"] = list(t.first_index) if t.first_index is not None else None
    return d


def refuse_old_order(model, dump) -> None:
    """``compare DUMP MODEL`` (the order of earlier versions): refused, with the new order in the message."""
    m, d = str(model), str(dump)
    if d.lower().endswith(".onnx") and not m.lower().endswith(".onnx"):
        raise InputError(f"compare takes the model first: npu-sim compare {d} {m} (MODEL DUMP, like every other "
                         f"command)")


def compare_dump(model, dump, board=None, inputs: dict | None = None, input_shapes: dict | None = None,
                 layout: str | None = None) -> Comparison:
    """Compare the tensor dump ``dump`` (folder, .npz or .npy; docs/DUMPS.md) of a board with the simulation of
    ``model`` (a path or a ``Simulator``) on ``board`` (default ``default``, ``ethos-u55-128`` for a .tflite). ``inputs``: what the board was fed, by input name (float or
    integer arrays, NCHW or NHWC); default: the dump's own input tensor. ``layout``: ``nhwc``/``nchw`` for tensors
    whose shape fits both."""
    refuse_old_order(model, dump)
    if layout is not None and layout not in ("nhwc", "nchw"):
        raise InputError(f"--layout {layout!r}: write nhwc or nchw")
    entries = read_dump(dump)
    opened = None if isinstance(model, Simulator) else open_model(model)
    sim = model if opened is None else _load(opened, board or opened.default_board, input_shapes, entries,
                                             inputs or {})
    prog = sim.program
    table = name_table(prog, sim.opened.quantized if sim.opened is not None else {})
    wide = dump_layout(entries, table, prog)
    if layout is None and sim.opened is not None and sim.opened.tflite is not None:
        wide = "nchw"  # a .tflite's tensors are as TFLite lays them out: a dump of it needs no guess
    matched, notes, not_in_model, shapes = {}, [], [], {}
    for key, e in entries.items():
        tname = lookup(table, key)
        if tname is None:
            not_in_model.append(key)
            continue
        if tname in matched or tname in shapes:
            notes.append(f"{key}: another dump entry already stands for tensor {prog.tensors[tname].float_name!r}; "
                         f"ignored")
            continue
        got = to_program(prog.tensors[tname], e, layout, wide)
        if isinstance(got, str):
            shapes[tname] = (key, got)
        else:
            matched[tname] = got
        note = scale_note(prog.tensors[tname], e)
        if note:
            notes.append(note)
    through_layout(prog, matched)
    feeds, fed, skip = _feeds(prog, matched, inputs or {}, layout, wide)
    values = Replay(prog, [n for n in prog.nodes if n.name not in skip]).run(feeds, keep_all=True).values
    for tname, m in matched.items():
        if (m.alt is not None and tname not in feeds and not np.array_equal(m.array, values[tname])
                and np.array_equal(m.alt, values[tname])):
            other = "nchw" if m.layout == "nhwc" else "nhwc"
            notes.append(f"{m.key}: its shape reads as NCHW and as NHWC; read as {other.upper()}, the only order "
                         f"that matches the simulation")
            m.array, m.alt, m.layout = m.alt, m.array, other
    notes += _overwritten(prog, matched, values)
    c = _walk(prog, matched, shapes, values, set(feeds))
    if not c.tensors:
        raise InputError(f"none of the {len(entries)} tensors of {str(dump)!r} is a tensor of the model (by ONNX "
                         f"name, QuantizeLinear output name, or either sanitized); is the dump from this model?")
    c.not_in_model, c.notes, c.fed = not_in_model, notes + c.notes, fed
    c.refused = _refused_lines(prog, matched)
    c.notes = c.refused + c.notes
    _explain_nodes(prog, c, matched, values)
    return c


def _refused_lines(prog: Program, matched: dict) -> list[str]:
    """A partial program's refused nodes (``npu_sim.lowering.partial``) and the dumped tensors nothing computes
    because of them: named, never compared."""
    if not prog.refusals:
        return []
    lines = [f"the board does not run node {name!r} ({op}): {why}; it and what depends on it are not compared"
             for name, op, why in prog.refusals]
    computed = {o for n in prog.nodes for o in n.outputs}
    lines += [f"{m.key}: not compared (nothing the board runs computes it)" for tname, m in matched.items()
              if tname not in computed and not prog.tensors[tname].is_const and tname not in prog.inputs.values()]
    return lines


def _load(opened, board, input_shapes, entries, inputs) -> Simulator:
    """The simulator; a dynamic input takes the shape of what the board was fed (``inputs``, else the dump's
    tensor of that input or of its QuantizeLinear's output), read as NCHW or NHWC against the input's fixed
    dimensions; the shapes are fixed by the one resolver (``OpenModel.shapes``)."""
    fed = {}
    for name, inp in opened.inputs.items():
        if not inp.dynamic or name in (input_shapes or {}):
            continue
        names = [name] + [q for q, source in opened.quantized.items() if source == name]
        arr = inputs.get(name)
        if arr is None:  # by name, else the entry run --dump-all wrote for that program tensor
            e = next((entries[k] for n in names for k in (n, sanitize(n)) if k in entries), None) or next(
                (e for e in entries.values() if e.meta.get("tensor") in names), None)
            arr = None if e is None else e.array
        if arr is None:  # what feeds it is missing, whatever its shape (``_feeds`` would refuse it too)
            raise InputError(_no_feed(name))
        shape = tuple(np.shape(arr))
        dims = inp.dims or ()
        if len(shape) == len(dims) and len(shape) in CHANNELS_LAST:
            nchw = tuple(shape[a] for a in np.argsort(CHANNELS_LAST[len(shape)]))
            fits = lambda s: all(d is None or d == v for d, v in zip(dims, s))  # noqa: E731
            if not fits(shape) and fits(nchw):
                shape = nchw
        fed[name] = shape
    return load(opened, board=board, input_shapes=opened.shapes(input_shapes, fed), partial=True)


def _no_feed(name: str) -> str:
    return f"the dump has no tensor for input {name!r}; pass --input {name}=FILE.npy"


def _feeds(prog: Program, matched: dict, inputs: dict, layout, wide) -> tuple[dict, str, set]:
    """What the simulation is fed, by program tensor: ``inputs`` where given (a float array feeds a float input;
    integers go straight to its Quantize's output, which node is then skipped), else the dump's tensor of the
    input. Returns (feeds, a description, the names of the nodes skipped)."""
    feeds, said, skip = {}, [], set()
    unknown = sorted(set(inputs) - set(prog.inputs))
    if unknown:
        raise InputError(f"--input {unknown[0]}: the model has no input {unknown[0]!r}; its inputs are "
                         f"{sorted(prog.inputs)}")
    for name, tname in prog.inputs.items():
        t = prog.tensors[tname]
        stub = prog.input_stub(tname) if t.q is None else None
        qname = stub.outputs[0] if stub is not None else tname
        if name in inputs:
            arr = np.asarray(inputs[name])
            if t.q is None and arr.dtype.kind == "f":
                lay = layout_of(arr.shape, t.shape, layout or wide) if arr.ndim in CHANNELS_LAST else "nchw"
                if lay is None:
                    raise InputError(f"--input {name}: shape {list(arr.shape)} is neither the input's "
                                     f"{list(t.shape)} (NCHW) nor its NHWC permutation (or pass --layout)")
                feeds[tname] = arr if lay == "nchw" else np.transpose(arr, np.argsort(CHANNELS_LAST[arr.ndim]))
                said.append(f"{name} from --input (float, {_as_fed(lay, t.shape)})")
                continue
            got = to_program(prog.tensors[qname], DumpEntry(name, arr, f"--input {name}"), layout, wide)
            if isinstance(got, str):
                raise InputError(f"--input {name}: {got}")
        elif qname in matched:
            got = matched[qname]
        else:
            raise InputError(_no_feed(name))
        feeds[qname] = got.array
        if stub is not None:
            skip.add(stub.name)
        said.append(f"{name} from {got.source} ({'dequantized float' if got.dequantized else 'integers'}, "
                    f"{_as_fed(got.layout, prog.tensors[qname].shape)})")
    return feeds, "; ".join(said), skip


def _overwritten(prog: Program, matched: dict, values: dict) -> list[str]:
    """Drop the dumped tensors a consumer overwrote in place (LiteRT's optimized ADD writes its output over its
    input even with ``experimental_preserve_all_tensors``): a tensor that differs from the simulation and holds,
    bit for bit, what the dump holds for the output of a node that reads it. Returns the notes saying so."""
    notes = []
    for node in prog.nodes:
        for out in node.outputs:
            if out not in matched:
                continue
            for i in node.inputs:
                m = matched.get(i)
                if (m is not None and i in values and m.array.shape == matched[out].array.shape
                        and np.array_equal(m.array, matched[out].array) and not np.array_equal(m.array, values[i])):
                    del matched[i]
                    notes.append(f"{m.key}: holds the values of {matched[out].key!r}, which reads it (written over "
                                 f"it in place, as LiteRT's optimized ADD does); not compared")
    return notes


def _as_fed(layout: str, shape) -> str:
    """How an input was read: in the model's own shape, or channels-last and transposed to it."""
    dims = "x".join(str(d) for d in shape)
    return f"NHWC, transposed to the model's {dims}" if layout == "nhwc" else f"as the model's {dims}"


def _walk(prog: Program, matched: dict, shapes: dict, values: dict, fed: set) -> Comparison:
    """Every dumped tensor against the simulation's ``values``, in execution order."""
    diffs, seen, missing = [], set(), []
    for node in prog.nodes:
        for out in node.outputs:
            t = prog.tensors[out]
            if t.q is None or t.is_const or out in fed or out in seen:
                continue
            seen.add(out)
            if out in shapes:
                key, why = shapes[out]
                diffs.append(TensorDiff(t.float_name, key, out, node.name, node.op, "shape", shape_message=why))
            elif out in matched and matched[out].view:
                continue
            elif out in matched:
                m = matched[out]
                td = TensorDiff(t.float_name, m.key, out, node.name, node.op, "equal", m.layout, m.dequantized)
                diffs.append(_diff(td, m, values[out]))
            elif t.float_name not in missing:
                missing.append(t.float_name)
    return Comparison(diffs, missing, [], [])


def _diff(td: TensorDiff, m, sim_arr: np.ndarray) -> TensorDiff:
    """Fill ``td`` with the comparison of the dumped integers and the simulated ``sim_arr`` (both NCHW)."""
    arr = m.array
    td.total = int(sim_arr.size)
    diff = arr.astype(np.int64) - sim_arr.astype(np.int64)
    where = np.flatnonzero(diff)
    td.differing = int(where.size)
    if td.differing:
        td.status = "differs"
        td.max_diff = int(np.abs(diff).max())
        idx = [np.unravel_index(int(i), arr.shape) for i in where[:EXAMPLES]]
        td.examples = [[list(m.dump_index(tuple(int(v) for v in i))), int(arr[i]), int(sim_arr[i])] for i in idx]
        td.first_index, td.dump_value, td.sim_value = tuple(td.examples[0][0]), td.examples[0][1], td.examples[0][2]
    return td


def _explain_nodes(prog: Program, c: Comparison, matched: dict, values: dict) -> None:
    """Re-run every node with a differing output on the dump's inputs; set the first divergent node."""
    by_ir = {t.ir_tensor: t for t in c.tensors}
    nodes = {n.name: n for n in prog.nodes}
    moved = {n.outputs[0]: n.inputs[0] for n in prog.nodes if n.layout and n.inputs}  # a .tflite's layout changes
    for td in c.tensors:
        if td.status == "equal":
            continue
        node = nodes[td.producer]
        acts = [i for i in node.inputs if not prog.tensors[i].is_const]
        td.inputs_differ = [prog.tensors[i].float_name for i in acts
                            if by_ir.get(moved.get(i, i), by_ir.get(i)) is not None
                            and by_ir.get(moved.get(i, i), by_ir.get(i)).status != "equal"]
        td.inputs_not_in_dump = [prog.tensors[i].float_name for i in acts if moved.get(i, i) not in matched]
        if c.first_divergent is None and not td.inputs_differ:
            c.first_divergent = node.name
        if td.status != "differs":
            continue
        local = {i: matched[i].array if i in matched else values[i] for i in acts}
        rerun = Replay(prog, [node], outputs=[td.ir_tensor]).run(local).values[td.ir_tensor]
        m = matched[td.ir_tensor]
        dump, sim = m.array.astype(np.int64), values[td.ir_tensor].astype(np.int64)
        differs = (dump != sim).reshape(-1)
        own = np.flatnonzero(differs & (dump != rerun.astype(np.int64)).reshape(-1))
        td.inherited = int(np.count_nonzero(differs)) - int(own.size)
        ex = explain(prog, node, [local[i] for i in acts], m.array, rerun, own, m.memory_order()) if own.size else None
        labels = ex.labels if ex is not None else own[:0]
        if ex is not None:
            td.equally, td.reproduces, td.closest, td.not_tried = ex.equally, ex.reproduces, ex.closest, ex.not_tried
        names, counts = np.unique(labels.astype(str), return_counts=True) if labels.size else ([], [])
        td.causes = {str(n): int(k) for n, k in sorted(zip(names, counts), key=lambda p: (p[0] == "unexplained",
                                                                                          -p[1]))}
        td.examples = [[list(m.dump_index(tuple(int(v) for v in np.unravel_index(int(i), dump.shape)))),
                        int(dump.reshape(-1)[i]), int(rerun.reshape(-1)[i]), str(lab)]
                       for i, lab in zip(own[:EXAMPLES], labels[:EXAMPLES])] or td.examples
