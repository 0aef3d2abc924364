"""The worker side of a dataset run (``npu_sim.analysis.dataset.run``): load the model once, run shards of samples.

``setup(spec)`` loads and lowers the model (and builds the float reference with ``--float``) once per worker: a
partial program when the board refuses nodes (``npu_sim.lowering.partial``: their outputs are not computed);
``shard_task(worker, payload)`` runs one shard's samples and returns their integer outputs and, with a float
reference, per-sample metrics. Both are module-level functions and ``JobSpec``, ``ShardPayload`` and
``ShardResult`` are plain data, so a worker process or a Ray actor on another machine needs only the model
files: the samples travel in the payload (read by the driver as the engine pulls the shard).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npu_sim.analysis.accuracy.engine import class_rows
from npu_sim.analysis.metrics import error_metrics
from npu_sim.analysis.reference import FloatReference
from npu_sim.errors import FloatReferenceError, InputError, UnsupportedModelError
from npu_sim.frontend.reader import open_model
from npu_sim.lowering.partial import what_left_out
from npu_sim.runtime.memo import WORKER
from npu_sim.runtime.simulator import Simulator, load


@dataclass(frozen=True)
class JobSpec:
    """What a worker needs to build its simulator: the QDQ model, the board (preset name, .toml path or Board),
    the fixed input shapes (name, shape) pairs, the float model of ``--float`` (or None), and the sha256 of both
    files (a worker refuses files that differ from the ones the run was planned on)."""
    model: str
    board: Any
    shapes: tuple
    float_model: str | None = None
    digests: tuple = ()


@dataclass
class ShardPayload:
    shard: int
    indices: list[int]                  # the samples' indices in the dataset (those that could be read)
    feeds: list[dict[str, np.ndarray]]
    labels: list[np.ndarray | None]     # per sample, when the data has labels
    errors: dict[int, str] = field(default_factory=dict)  # the shard's samples that could not be read: index -> error


@dataclass
class ShardResult:
    shard: int
    indices: list[int]
    outputs: list[dict[str, np.ndarray] | None]   # per sample: the integer outputs by name; None where it failed
    errors: dict[int, str]                        # sample index -> error
    metrics: list[dict[str, float | int] | None]  # per sample, with a float reference


@dataclass
class Worker:
    sim: Simulator
    ref: FloatReference | None


def setup(spec: JobSpec, opened=None) -> Worker:
    """The simulator (and float reference) of ``spec``, built once per process (``memo.WORKER``: the driver's own
    set-up serves its in-process worker). ``opened``: the model already open here (``open_model``)."""
    return WORKER.kept(spec, lambda: _build(spec, opened))


def _build(spec: JobSpec, opened) -> Worker:
    files = [spec.model] + ([spec.float_model] if spec.float_model else [])
    for path, digest in zip(files, spec.digests):
        if file_sha256(path) != digest:
            raise InputError(f"{path}: the file changed since the run started (or differs on this worker's "
                             f"machine); run again on one version of it")
    opened = open_model(spec.model if opened is None else opened)
    sim = load(opened, board=spec.board, input_shapes=dict(spec.shapes), partial=True)
    _refuse_nothing_computed(sim.program, spec.model)
    ref = None
    if spec.float_model is not None:
        ref = FloatReference(opened, spec.float_model)
        missing = [o for o in sim.program.outputs if o not in ref.available]
        if missing:
            raise FloatReferenceError(f"--float {spec.float_model!r} has no tensor named like the output "
                                      f"{missing[0]!r} of {spec.model}; give the float model this QDQ model was "
                                      f"quantized from")
        ref.prepare(list(sim.program.outputs))
    return Worker(sim, ref)


def _refuse_nothing_computed(program, model) -> None:
    """A partial program (the board refuses nodes: ``npu_sim.lowering.partial``) that computes no model output
    leaves a dataset run nothing to write: an error naming the refused nodes, with the board's reasons."""
    if not program.refusals or program.outputs:
        return
    nodes = "; ".join(f"{what_left_out(program, name)} node {name!r} ({op}): {why}"
                      for name, op, why in program.refusals)
    raise UnsupportedModelError(
        f"{model}: run --data: no model output can be computed on board {program.board.name!r}, every one depends "
        f"on a node left out: {nodes}. Nothing to write for --data; `npu-sim run {model} --input FILE --dump-all "
        f"--out DIR` (with the same --board) simulates one sample and dumps every tensor up to the refused "
        f"node(s)", problems=program.refusals)


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


BATCH = 16  # samples per batched run: the per-node cost paid once for 16, the tensors still small enough to cache


def run_shard(sim: Simulator, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The integer outputs of each sample of a shard: the one place the shard meets the simulator. Samples run
    in batches of up to ``BATCH`` (``Simulator.run`` takes them stacked on a batch dimension of 1, with results
    identical to single runs) where every input has that batch dimension, else one by one."""
    shapes = [shape for shape, _ in sim.inputs.values()]
    if len(feeds) == 1 or not all(shape and shape[0] == 1 for shape in shapes):
        return [sim.run(f, raw=True) for f in feeds]
    out: list[dict[str, np.ndarray]] = []
    for a in range(0, len(feeds), BATCH):
        part = feeds[a:a + BATCH]
        stacked = {name: np.concatenate([f[name] for f in part]) for name in part[0]}
        ys = sim.run(stacked, raw=True)
        out.extend({name: y[k:k + 1] for name, y in ys.items()} for k in range(len(part)))
    return out


def shard_task(worker: Worker, payload: ShardPayload) -> ShardResult:
    """One shard: its outputs; where the shard fails as a whole, each sample alone (to name the failing ones)."""
    n = len(payload.indices)
    errors: dict[int, str] = dict(payload.errors)  # samples the driver could not read: failed before they ran
    try:
        outputs: list = list(run_shard(worker.sim, payload.feeds))
    except Exception:
        outputs = []
        for i, feeds in zip(payload.indices, payload.feeds):
            try:
                outputs.append(run_shard(worker.sim, [feeds])[0])
            except Exception as exc:  # named in the manifest; the other samples go on
                outputs.append(None)
                errors[i] = f"{type(exc).__name__}: {exc}"
    metrics: list = [None] * n
    if worker.ref is not None:
        for k, (i, feeds, labels) in enumerate(zip(payload.indices, payload.feeds, payload.labels)):
            if outputs[k] is None:
                continue
            try:
                metrics[k] = sample_metrics(worker, feeds, outputs[k], labels)
            except Exception as exc:
                outputs[k] = None
                errors[i] = f"{type(exc).__name__}: {exc}"
    return ShardResult(payload.shard, list(payload.indices), outputs, errors, metrics)


def sample_metrics(worker: Worker, feeds: dict, ints: dict, labels: np.ndarray | None) -> dict:
    """Per output: cosine and SQNR (dB) of the dequantized output against the float reference; for class scores
    ([B, C] or [B, C, 1, 1]) the rows whose top-1 class agrees, and with labels the rows each model gets right."""
    prog = worker.sim.program
    ref = worker.ref.run(feeds)
    row: dict[str, float | int] = {}
    for name, tname in prog.outputs.items():
        y = prog.tensors[tname].q.dequantize(ints[name]).astype(np.float64)
        x = np.asarray(ref[name], np.float64)
        if x.size != y.size:
            raise FloatReferenceError(f"output {name!r}: the float reference gives shape {list(x.shape)}, the "
                                      f"quantized model {list(y.shape)}")
        x = x.reshape(y.shape)
        m = error_metrics(x, y)
        row[f"{name}.cosine"] = m.cosine
        row[f"{name}.sqnr_db"] = m.sqnr_db
        scores = class_rows(y.shape)
        if scores:
            top_f = np.argmax(x.reshape(scores), axis=1)
            top_q = np.argmax(y.reshape(scores), axis=1)
            row[f"{name}.top1_agree"] = int(np.count_nonzero(top_f == top_q))
            if labels is not None and len(labels) == scores[0]:
                row[f"{name}.correct"] = int(np.count_nonzero(top_q == labels))
                row[f"{name}.float_correct"] = int(np.count_nonzero(top_f == labels))
    return row
