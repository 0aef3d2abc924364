"""The per-process engine of the accuracy report: one simulator, one float reference, one sample at a time.

``Engine.run_chunk`` turns samples into rows of sums (``LAYER_ROW`` numbers per reported tensor, ``OUTPUT_ROW``
per graph output) and exact histograms, which ``npu_sim.analysis.accuracy.aggregate`` adds up in sample order;
``setup``/``run_samples`` are the engine task pair (``npu_sim.runtime.engines.run_tasks``): a worker's engine,
and a chunk of samples run on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from npu_sim.analysis.accuracy.jobs import BadInput, here
from npu_sim.analysis.accuracy.model import HIST_BINS
from npu_sim.analysis.metrics import PAIR_SIZE, cosine, pair_stats
from npu_sim.analysis.reference import FloatReference
from npu_sim.errors import FloatReferenceError, NpuSimError
from npu_sim.frontend.reader import open_model
from npu_sim.runtime.replay import Replay
from npu_sim.runtime.simulator import load

# A layer row: these, then the accumulated and the isolated ``pair_stats`` (PAIR_SIZE each).
LAYER_HEAD = ("n", "xmin", "xmax", "clip_lo", "clip_hi")
LAYER_ROW = len(LAYER_HEAD) + 2 * PAIR_SIZE
# An output row: the element count, the ``pair_stats``, then these.
OUTPUT_TAIL = ("cos_sample", "rows", "top1", "top5", "lab_f", "lab_q", "nlab")
OUTPUT_ROW = 1 + PAIR_SIZE + len(OUTPUT_TAIL)


@dataclass
class Spec:
    """What a worker needs to build its own engine; ``key`` names the job (``jobs.built_here``)."""
    model: str
    board: Any
    input_shapes: dict
    float_model: str | None
    threads: int = 1
    key: str = ""


@dataclass
class _Layer:
    ir: str
    float_name: str
    ref: str
    node_index: int
    q: Any
    lo: float
    width: float


class Engine:
    def __init__(self, spec: Spec, opened=None):
        """``opened``: the model already open here (``open_model``); a worker opens ``spec.model``."""
        opened = open_model(spec.model if opened is None else opened)
        self.sim = load(opened, board=spec.board, input_shapes=spec.input_shapes)
        self.ref = FloatReference(opened, spec.float_model, spec.threads)
        prog = self.sim.program
        self.program = prog
        self.layers: list[_Layer] = []
        self.unmatched: list[str] = []
        for ni, node in enumerate(prog.nodes):
            for out in node.outputs:
                t = prog.tensors[out]
                if t.q is None or t.is_const:
                    continue
                ref = self.ref.name_for(t.float_name)
                if ref is None:
                    self.unmatched.append(t.float_name)
                    continue
                span = t.q.qmax - t.q.qmin + 1
                self.layers.append(_Layer(out, t.float_name, ref, ni, t.q, t.q.qmin - 0.5 - span / 2.0,
                                          2.0 * span / HIST_BINS))
        self._check_reference(spec)
        self.ref.prepare([l.ref for l in self.layers] + list(prog.outputs))
        self.by_ir = {l.ir: l for l in self.layers}
        self.producer = {o: ni for ni, n in enumerate(prog.nodes) for o in n.outputs}
        self.iso_nodes = sorted({l.node_index for l in self.layers})
        self._replays: dict[int, Replay] = {}

    def _check_reference(self, spec: Spec) -> None:
        prog = self.program
        ends = set(self.ref.qdq_inputs) | set(prog.outputs)
        if self.unmatched and not any(l.ref not in ends for l in self.layers):
            raise FloatReferenceError(
                f"none of the intermediate quantized tensors of {spec.model} (e.g. "
                f"{', '.join(repr(n) for n in self.unmatched[:3])}) has a tensor of that name in the float "
                f"reference {self.ref.source}; give the float model quantize_static started from (same tensor "
                f"names)")
        missing_out = [o for o in prog.outputs if o not in self.ref.available]
        if missing_out:
            raise FloatReferenceError(f"the float reference {self.ref.source} has no output tensor {missing_out[0]!r}"
                                      f"; give the float model this QDQ model was quantized from")

    # -- one node alone on chosen inputs
    def _run_node(self, ni: int, feeds: dict, overflows: dict) -> dict:
        part = self._replays.get(ni)
        if part is None:
            node = self.program.nodes[ni]
            part = self._replays[ni] = Replay(self.program, [node], node.outputs)
        res = part.run(feeds)
        for k, v in res.overflows.items():
            overflows[k] = overflows.get(k, 0) + v
        return res.values

    def _iso_input(self, name: str, ref: dict, full: dict, memo: dict, overflows: dict):
        """The value an isolated op is fed for its input ``name``: the float reference quantized with the
        input's quantization; for a tensor the reference lacks (e.g. made by a rewrite), its producer run on
        such inputs in turn; the full integer run's value only where nothing else is possible."""
        if name in memo:
            return memo[name]
        prog = self.program
        t = prog.tensors[name]
        lay = self.by_ir.get(name)
        ref_name = lay.ref if lay is not None else (self.ref.name_for(t.float_name) if t.q is not None else None)
        if t.q is None:
            val = (ref[self.program_input_name(name)], True)
        elif ref_name is not None:
            val = (t.q.quantize(np.asarray(ref[ref_name]).reshape(t.shape)), True)
        elif name in self.producer:
            ni = self.producer[name]
            ins = [n for n in prog.nodes[ni].inputs if not prog.tensors[n].is_const]
            got = {n: self._iso_input(n, ref, full, memo, overflows) for n in dict.fromkeys(ins)}
            out = self._run_node(ni, {n: v for n, (v, _) in got.items()}, overflows)
            complete = all(c for _, c in got.values())
            for o in prog.nodes[ni].outputs:
                memo.setdefault(o, (out[o], complete))
            val = memo[name]
        else:
            val = (full[name], False)
        memo[name] = val
        return val

    def _isolated(self, ni: int, ref: dict, full: dict, memo: dict, overflows: dict) -> tuple[dict, bool]:
        prog = self.program
        ins = [n for n in prog.nodes[ni].inputs if not prog.tensors[n].is_const]
        got = {n: self._iso_input(n, ref, full, memo, overflows) for n in dict.fromkeys(ins)}
        out = self._run_node(ni, {n: v for n, (v, _) in got.items()}, overflows)
        return out, all(c for _, c in got.values())

    def program_input_name(self, tname: str) -> str:
        for name, t in self.program.inputs.items():
            if t == tname:
                return name
        return tname

    def sample(self, feeds: dict, labels: np.ndarray | None, hist_f, hist_q) -> tuple[np.ndarray, np.ndarray, dict, list]:
        prog = self.program
        ref = self.ref.run(feeds)
        run = self.sim.execute(feeds, keep_all=True)
        full = run.values
        overflows = dict(run.overflows)
        iso_overflows: dict[str, int] = {}
        iso_vals, iso_complete, memo = {}, {}, {}
        for ni in self.iso_nodes:
            vals, complete = self._isolated(ni, ref, full, memo, iso_overflows)
            for o in prog.nodes[ni].outputs:
                iso_vals[o] = vals[o]
                iso_complete[o] = complete
        rows = np.zeros((len(self.layers), LAYER_ROW))
        incomplete = []
        for li, lay in enumerate(self.layers):
            self._layer_row(rows[li], li, lay, ref[lay.ref], full[lay.ir], iso_vals[lay.ir], hist_f, hist_q)
            if not iso_complete[lay.ir]:
                incomplete.append(lay.ir)
        return rows, self._output_rows(ref, full, labels), overflows, incomplete

    def _layer_row(self, row, li: int, lay: _Layer, x, q, iso, hist_f, hist_q) -> None:
        """Fill ``row`` (and histogram ``li``) with reported tensor ``lay``: float reference ``x``, the full
        integer run's ``q``, the isolated op's ``iso``."""
        t = self.program.tensors[lay.ir]
        if x.size != q.size:
            raise FloatReferenceError(f"float tensor {lay.ref!r} of {self.ref.source} has shape "
                                      f"{list(x.shape)}, the quantized tensor {lay.ir!r} {list(q.shape)}; "
                                      f"the float model does not match the QDQ model")
        x = np.asarray(x, np.float32).reshape(q.shape)
        if not np.isfinite(x).all():
            raise FloatReferenceError(f"the float reference ({self.ref.kind}, {self.ref.source}) computes NaN "
                                      f"or infinity in tensor {lay.ref!r}; check the float model on this data "
                                      f"(or give the float model with --float)")
        s, z = lay.q.broadcast(q.ndim)
        inv = 1.0 / np.asarray(s, np.float64)
        u = x.astype(np.float64) * inv + z
        row[0] = x.size
        row[1] = float(x.min()) if x.size else 0.0
        row[2] = float(x.max()) if x.size else 0.0
        row[3] = np.count_nonzero(u < lay.q.qmin - 0.5)
        row[4] = np.count_nonzero(u > lay.q.qmax + 0.5)
        idx = np.clip(((u - lay.lo) / lay.width).astype(np.int64), 0, HIST_BINS - 1)
        hist_f[li] += np.bincount(idx.reshape(-1), minlength=HIST_BINS)
        iq = np.clip(((q.astype(np.float64) - lay.lo) / lay.width).astype(np.int64), 0, HIST_BINS - 1)
        hist_q[li] += np.bincount(iq.reshape(-1), minlength=HIST_BINS)
        k = len(LAYER_HEAD)
        inside = (u >= lay.q.qmin - 0.5) & (u <= lay.q.qmax + 0.5)
        row[k:k + PAIR_SIZE] = pair_stats(x, t.q.dequantize(q), inv, inside)
        row[k + PAIR_SIZE:] = pair_stats(x, t.q.dequantize(iso), inv, inside)

    def _output_rows(self, ref: dict, full: dict, labels: np.ndarray | None) -> np.ndarray:
        prog = self.program
        outs = np.zeros((len(prog.outputs), OUTPUT_ROW))
        for oi, (name, tname) in enumerate(prog.outputs.items()):
            t = prog.tensors[tname]
            y = t.q.dequantize(full[tname]).astype(np.float64)
            x = np.asarray(ref[name], np.float64)
            if x.size != y.size:
                raise FloatReferenceError(f"output {name!r}: the float reference gives shape {list(x.shape)}, the "
                                          f"quantized model {list(y.shape)}")
            x = x.reshape(y.shape)
            outs[oi, 0] = x.size
            outs[oi, 1:1 + PAIR_SIZE] = pair_stats(x, y)
            p = outs[oi, 1:1 + PAIR_SIZE]
            k = 1 + PAIR_SIZE
            outs[oi, k] = cosine(p[0], p[1], p[2])
            scores = class_rows(y.shape)
            if scores:
                b, c = scores
                xf, yq = x.reshape(b, c), y.reshape(b, c)
                top_f = np.argmax(xf, axis=1)
                order = np.argsort(-yq, axis=1, kind="stable")
                outs[oi, k + 1] = b
                outs[oi, k + 2] = np.count_nonzero(order[:, 0] == top_f)
                outs[oi, k + 3] = np.count_nonzero((order[:, :5] == top_f[:, None]).any(axis=1))
                if labels is not None and len(labels) == b:
                    outs[oi, k + 4] = np.count_nonzero(top_f == labels)
                    outs[oi, k + 5] = np.count_nonzero(order[:, 0] == labels)
                    outs[oi, k + 6] = b
        return outs

    def run_chunk(self, chunk) -> dict:
        """Rows, histograms, overflows of the samples ``chunk`` ((feeds, labels) each); a sample whose data is bad
        (an ``NpuSimError``) is left out and listed in ``failed`` as (its index in the chunk, ``BadInput``)."""
        hist_f = np.zeros((len(self.layers), HIST_BINS), np.int64)
        hist_q = np.zeros_like(hist_f)
        rows, outs, overflows, incomplete, failed = [], [], {}, set(), []
        for j, (feeds, labels) in enumerate(chunk):
            try:
                r, o, ov, inc = self.sample(feeds, labels, hist_f, hist_q)
            except NpuSimError as exc:
                failed.append((j, BadInput.of(exc)))
                continue
            rows.append(r)
            outs.append(o)
            for k, v in ov.items():
                overflows[k] = overflows.get(k, 0) + v
            incomplete.update(inc)
        return {"rows": rows, "outs": outs, "hist_f": hist_f, "hist_q": hist_q, "overflows": overflows,
                "incomplete": incomplete, "failed": failed}


def class_rows(shape) -> tuple[int, int] | None:
    """(rows, classes) when an output of ``shape`` looks like class scores ([B, C] or [B, C, 1, 1], C >= 2)."""
    if len(shape) == 2 and shape[1] >= 2:
        return shape[0], shape[1]
    if len(shape) == 4 and shape[1] >= 2 and shape[2] == 1 and shape[3] == 1:
        return shape[0], shape[1]
    return None


def setup(spec: Spec) -> Engine:
    """A worker's engine: the one this process built for the job (``spec.key``), else a new one."""
    return here(spec.key) or Engine(spec)


def run_samples(engine: Engine, chunk) -> dict:
    """A task: ``Engine.run_chunk`` of a chunk of samples."""
    return engine.run_chunk(chunk)
