"""The advisor's evaluator: one baseline integer run per sample and the float reference's outputs, against which
variants of the model are scored — a promotion to int16 (``measure``), a layer computed in float
(``float_layer``), a re-quantized model (``score_sim``)."""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from npu_sim.analysis.advisor.variants import same_nodes
from npu_sim.analysis.cost import estimate_program
from npu_sim.analysis.metrics import MAX_AE, PAIR_SIZE, finish, json_number, pair_stats
from npu_sim.analysis.reference import FloatReference, ort_session
from npu_sim.errors import BoardError, NpuSimError
from npu_sim.frontend.reader import open_model
from npu_sim.qdq import recalibrate as requant
from npu_sim.runtime.replay import Replay
from npu_sim.runtime.simulator import load


@dataclass
class Score:
    cosine: float
    sqnr_db: float
    cosine_min_sample: float = 1.0

    def to_dict(self) -> dict:
        return {k: json_number(v) for k, v in asdict(self).items()}


def sqnr_key(v: float) -> float:
    """An SQNR to rank by: an exact result (+inf dB) counts as 200 dB."""
    return 200.0 if v == math.inf else v


def score_outputs(refs: list[dict], outs: list[dict], names: list[str]) -> Score:
    """Lowest cosine / SQNR over the outputs ``names``; each aggregated over all samples as one vector."""
    cos, sq, worst = [], [], 1.0
    for name in names:
        tot = np.zeros(PAIR_SIZE)
        for r, o in zip(refs, outs):
            x = np.asarray(r[name], np.float64).reshape(-1)
            y = np.asarray(o[name], np.float64).reshape(-1)
            p = pair_stats(x, y)
            worst = min(worst, finish(p, x.size, False).cosine)
            tot[:MAX_AE] += p[:MAX_AE]
            tot[MAX_AE] = max(tot[MAX_AE], p[MAX_AE])
        m = finish(tot, 1.0, False)
        cos.append(m.cosine)
        sq.append(m.sqnr_db)
    return Score(min(cos), min(sq), worst)


def estimated_cycles(sim) -> float | None:
    """Total estimated cycles of a simulator's program on its board (None without a latency model)."""
    try:
        return float(estimate_program(sim.program, sim.board).summary["total_cycles"])
    except BoardError:
        return None


class Evaluator:
    def __init__(self, model, float_model, board, samples: list[dict], input_shapes: dict | None = None):
        """``model``: the QDQ model, a path or already open (``open_model``)."""
        opened = open_model(model)
        self.model = opened.file or opened.name
        self.float_model = str(float_model) if float_model else None
        self.board = board
        self.samples = list(samples)
        self.shapes = {n: tuple(np.shape(v)) for n, v in self.samples[0].items()}
        self.shapes.update(dict(input_shapes or {}))
        self.proto = opened.proto
        self.base = load(opened, board=board, input_shapes=self.shapes)
        prog = self.base.program
        self.outputs = list(prog.outputs)
        self.ref = FloatReference(opened, self.float_model)
        self.ref.prepare(self.outputs)
        self.refs = [{k: v for k, v in self.ref.run(s).items() if k in self.outputs} for s in self.samples]
        self.runs = [self.base.execute(s, keep_all=True).values for s in self.samples]
        self.base_score = score_outputs(self.refs, [self._outs(prog, r) for r in self.runs], self.outputs)
        self._extractor = None
        self._variants: dict[frozenset, tuple[Score, float | None]] = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="npu-sim-advisor.")

    @staticmethod
    def _outs(prog, values) -> dict:
        return {name: prog.tensors[t].q.dequantize(values[t]) for name, t in prog.outputs.items()}

    def score_sim(self, sim, samples=None, refs=None) -> Score:
        samples = self.samples if samples is None else samples
        refs = self.refs if refs is None else refs
        return score_outputs(refs, [sim.run(s) for s in samples], self.outputs)

    def score_variant(self, sim) -> Score:
        """``score_sim`` of a variant of the model (a promotion) on the evaluator's samples, running only what
        differs: the nodes that provably compute what the baseline computes (``same_nodes``) take the baseline
        run's values; the rest run on them. The same integers as a full run, in a fraction of the time."""
        prog = sim.program
        clean = same_nodes(self.base.program, prog)
        part = Replay(prog, [n for i, n in enumerate(prog.nodes) if i not in clean])
        outs = []
        for full in self.runs:
            res = part.run(full).values
            outs.append({name: prog.tensors[t].q.dequantize(res[t] if t in part.made else full[t])
                         for name, t in prog.outputs.items()})
        return score_outputs(self.refs, outs, self.outputs)

    def measure(self, tensors, tag: str) -> tuple[Score, float | None]:
        """Score and estimated cycles of the model with ``tensors`` promoted to int16; cached per set (the
        sensitivity's single promotions come back as the advisor's first curve point)."""
        key = frozenset(tensors)
        hit = self._variants.get(key)
        if hit is None:
            sim = self.load(requant.promote_int16(self.proto, list(tensors)), tag)
            hit = self._variants[key] = (self.score_variant(sim), estimated_cycles(sim))
        return hit

    def measured(self, tensors) -> bool:
        return frozenset(tensors) in self._variants

    def remember(self, tensors, hit: tuple[Score, float | None]) -> None:
        """Cache a ``measure`` result made elsewhere (by a worker's evaluator: the same integers)."""
        self._variants.setdefault(frozenset(tensors), hit)

    def load(self, proto_or_path, tag: str):
        import onnx
        if isinstance(proto_or_path, (str, Path)):
            path = str(proto_or_path)
        else:
            path = os.path.join(self._tmp.name, f"{tag}.onnx")
            onnx.save(proto_or_path, path)
        return load(path, board=self.board, input_shapes=self.shapes)

    # -- one layer in float, the rest integer
    def float_layer(self, ni: int, ir: str) -> tuple[Score, str]:
        """Score of the model with node ``ni`` (writing ``ir``) computed by the float reference's subgraph on
        its dequantized integer inputs (or, where there is none, the float reference's own output), quantized,
        then the rest of the integer program; and how (``"float"`` or ``"float (reference output)"``)."""
        prog = self.base.program
        node, t = prog.nodes[ni], prog.tensors[ir]
        acts = list(dict.fromkeys(n for n in node.inputs if not prog.tensors[n].is_const))
        out_ref = self.ref.name_for(t.float_name)
        in_refs = [self.ref.name_for(prog.tensors[n].float_name) if prog.tensors[n].q is not None
                   else self._input_name(n) for n in acts]
        how = "float"
        sess = self._float_op(in_refs, out_ref) if out_ref is not None and all(in_refs) else None
        if sess is None:
            if out_ref is None:
                raise NpuSimError(f"layer {node.name!r}: no float reference for {t.float_name!r}")
            how = "float (reference output)"
            self.ref.prepare(self.outputs + [out_ref])
        tail = Replay(prog, prog.nodes[ni + 1:])
        outs = []
        for s, full in zip(self.samples, self.runs):
            if sess is not None:
                y = sess.run([out_ref], self._float_feeds(sess, acts, in_refs, full))[0]
            else:
                y = self.ref.run(s)[out_ref]
            vals = dict(full)
            vals[ir] = t.q.quantize(np.asarray(y, np.float32).reshape(t.shape))
            res = tail.run(vals).values
            o = {}
            for name, tn in prog.outputs.items():
                q = res[tn] if tn in res else vals[tn]
                o[name] = prog.tensors[tn].q.dequantize(q)
            outs.append(o)
        if how != "float":
            self.ref.prepare(self.outputs)
        return score_outputs(self.refs, outs, self.outputs), how

    def _float_op(self, in_refs: list[str], out_ref: str):
        """An onnxruntime session of the float reference's subgraph from ``in_refs`` to ``out_ref``; None when
        onnx cannot extract it or onnxruntime cannot load it."""
        import onnx.utils
        try:
            if self._extractor is None:
                self._extractor = onnx.utils.Extractor(self.ref.model)
            sub = self._extractor.extract_model(list(dict.fromkeys(in_refs)), [out_ref])
            return ort_session(sub)
        except Exception:
            return None

    def _float_feeds(self, sess, acts: list[str], in_refs: list[str], full: dict) -> dict:
        """The float op's feeds: the integer run's inputs ``acts`` dequantized, under their reference names,
        reshaped to the session's static input shapes."""
        prog = self.base.program
        feeds = {}
        for n, r in zip(acts, in_refs):
            tt = prog.tensors[n]
            v = full[n] if tt.q is None else tt.q.dequantize(full[n])
            feeds[r] = np.asarray(v, np.float32)
        for i in sess.get_inputs():
            if all(isinstance(d, int) for d in i.shape) and feeds[i.name].size == math.prod(i.shape):
                feeds[i.name] = feeds[i.name].reshape(i.shape)
        return feeds

    def _input_name(self, tname: str) -> str | None:
        for name, t in self.base.program.inputs.items():
            if t == tname:
                return name
        return None

    def close(self) -> None:
        self._tmp.cleanup()
