"""The dataset mode of ``run``: every sample of a dataset through the board's integer program, in fixed-size shards.

``plan_dataset`` checks the data as ``report --data`` reads it (``npu_sim.frontend.dataset``), one file at a time so
a file that cannot be read is named and the others still run, and numbers the samples in file order; shard ``k``
holds samples ``[k * shard_size, (k + 1) * shard_size)``, whatever the engine or the number of workers. The plan
keeps each sample by reference (its file, its item in a .npy/.npz batch, its label), counted from the files'
headers: no sample is decoded then. ``execute`` sends the shards that are not already written as tasks to
``npu_sim.runtime.engines.run_tasks`` (``dataset.task.setup`` / ``shard_task``), which pulls them lazily:
``shard_payload`` reads a shard's samples (decodes its images, slices its arrays) only when a worker can take it,
so the driver holds the decoded shards in flight only. It hands each finished shard to a *writer* (the files are
the render layer's: ``npu_sim.render.dataset_out.DatasetWriter``), which also rewrites the manifest as shards
finish, so a killed run resumes where it stopped and gives the same bytes.

A model with nodes the board does not run is a partial program (``npu_sim.lowering.partial``): the shards hold
the outputs it computes, the manifest (``not_computed``, ``refused``) and the ``Summary`` (``not_computed``,
``refused``) name the others and the refused nodes; a model none of whose outputs can be computed is refused.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from npu_sim.analysis.accuracy.engine import class_rows
from npu_sim.analysis.accuracy.jobs import board_spec
from npu_sim.analysis.dataset.task import JobSpec, ShardPayload, ShardResult, file_sha256, setup, shard_task
from npu_sim.errors import InputError
from npu_sim.frontend import dataset as ds
from npu_sim.frontend.reader import open_model
from npu_sim.lowering.partial import not_run_lines
from npu_sim.runtime.engines import EngineOptions, TaskFailed, run_tasks
from npu_sim.runtime.stop import held

MANIFEST_FORMAT = "npu-sim dataset run"
MANIFEST_VERSION = 1
# What must match between a previous run's manifest and this one for --resume to reuse its shards.
RESUME_KEYS = ("model_sha256", "board", "float_model", "float_model_sha256", "shard_size", "inputs", "sources")


class RefusedNode(NamedTuple):
    """A node the board does not run (its toolchain refuses it, or npu-sim does not simulate what it runs), with
    the reason; it and what depends on it are not simulated."""
    node: str
    op: str
    reason: str


class NotComputed(NamedTuple):
    """A model output a partial run does not compute (it is in no shard), and why."""
    output: str
    reason: str


@dataclass
class SampleRecord:
    index: int
    file: str
    item: int | None                  # position in a .npy/.npz (its batch split into samples); None for an image
    labels: np.ndarray | None = None

    @property
    def name(self) -> str:
        return self.file if self.item is None else f"{self.file}[{self.item}]"


@dataclass
class Plan:
    spec: JobSpec
    model_sha256: str
    board: str
    shard_size: int
    sources: list[str]
    samples: list[SampleRecord]            # by reference: no sample's data is held
    files: dict[str, ds.SourceFile]        # each readable file's samples, as its headers describe them
    load_errors: list[dict]                # {"sample": file, "error": message}: files that could not be read
    outputs: dict[str, dict]               # name -> dtype, shape, scale, zero_point
    dtypes: dict[str, str] = field(default_factory=dict)   # input name -> element type
    mean: str = "0"
    std: str = "1"
    qparams: dict[str, Any] = field(default_factory=dict)
    refused: list[RefusedNode] = field(default_factory=list)        # a partial program's refused nodes
    not_computed: list[NotComputed] = field(default_factory=list)   # and the model outputs it does not compute
    not_run_lines: list[str] = field(default_factory=list)          # both, as `npu-sim run` says them

    @property
    def shards(self) -> int:
        return -(-len(self.samples) // self.shard_size)

    def shard_samples(self, k: int) -> range:
        return range(k * self.shard_size, min(len(self.samples), (k + 1) * self.shard_size))

    def columns(self) -> list[str] | None:
        """The metrics CSV's columns (with ``--float``), else None."""
        if self.spec.float_model is None:
            return None
        labelled = any(s.labels is not None for s in self.samples)
        cols = ["index", "file", "item"] + (["label"] if labelled else [])
        for name, out in self.outputs.items():
            cols += [f"{name}.cosine", f"{name}.sqnr_db"]
            if class_rows(out["shape"]):
                cols.append(f"{name}.top1_agree")
                if labelled:
                    cols += [f"{name}.correct", f"{name}.float_correct"]
        return cols


def shard_file(k: int) -> str:
    return f"shard-{k:05d}.npz"


def plan_dataset(model, data, board="default", input_shapes: dict | None = None, float_model=None,
                 shard_size: int = 64, mean: str = "0", std: str = "1") -> Plan:
    """Load the model once here (a bad model, board or float model fails before the data is read), then read the
    data file by file."""
    opened = open_model(model)
    if opened.file is None:
        raise InputError("run --data: give the model as a file (every worker reads it)")
    if shard_size < 1:
        raise InputError(f"--shard-size {shard_size}: give at least 1")
    if not data:
        raise InputError("--data: give folders or files of images, .npy or .npz")
    model = opened.file
    files = ds.data_files([data] if isinstance(data, (str, Path)) else list(data))
    shapes = opened.shapes(input_shapes, ds.first_headers(files, opened.inputs), free_batch=1, samples=True)
    float_model = None if float_model is None else str(float_model)
    digests = tuple(file_sha256(f) for f in [model] + ([float_model] if float_model and Path(float_model).is_file()
                                                          else []))
    spec = JobSpec(model, board_spec(board), tuple((n, tuple(s)) for n, s in shapes.items()), float_model, digests)
    prog = setup(spec, opened).sim.program
    dtypes = {n: inp.dtype for n, inp in opened.inputs.items()}
    samples, sources, errors = _scan_samples(files, shapes, dtypes, mean, std)
    plan = Plan(spec, digests[0], prog.board.name, int(shard_size), [str(f) for f in files], samples, sources,
                errors, {}, dtypes, mean, std)
    for name, tname in prog.outputs.items():
        t = prog.tensors[tname]
        plan.outputs[name] = {"dtype": t.q.dtype, "shape": [int(d) for d in t.shape],
                              "scale": np.asarray(t.q.scale, np.float64).tolist(),
                              "zero_point": np.asarray(t.q.zero_point).tolist()}
        plan.qparams[name] = t.q
    plan.refused = [RefusedNode(*r) for r in prog.refusals]
    plan.not_computed = [NotComputed(name, why.removeprefix("model output: ")) for name, why in prog.not_run
                         if why.startswith("model output")]
    plan.not_run_lines = not_run_lines(prog) if prog.refusals else []
    return plan


def _scan_samples(files: list[Path], shapes: dict, dtypes: dict, mean: str, std: str):
    """Every file's samples, by reference (``dataset.scan_file`` on each file alone: headers only): records, the
    readable files, and the files that could not be read (by name, with the error). No readable file at all is
    an ``InputError``."""
    samples, sources, errors = [], {}, []
    batch = next(iter(shapes.values()))[0]
    for f in files:
        try:
            source, labels = ds.scan_file(f, shapes, dtypes, mean, std)
        except InputError as exc:
            errors.append({"sample": str(f), "error": str(exc)})
            continue
        if not source.samples:
            errors.append({"sample": str(f), "error": "--data: no samples found"})
            continue
        name = str(f)
        sources[name] = source
        for j in range(source.samples):
            lab = None if labels is None else labels[j * batch:(j + 1) * batch]
            samples.append(SampleRecord(len(samples), name, None if source.image else j, lab))
    if not samples:
        more = f" (and {len(errors) - 1} more file(s) failed)" if len(errors) > 1 else ""
        raise InputError(errors[0]["error"] + more if errors else "--data: no samples found")
    return samples, sources, errors


def shard_payload(plan: Plan, k: int, opened: dict | None = None) -> ShardPayload:
    """Shard ``k``'s payload, its samples read now (images decoded, arrays sliced from their file and converted,
    as ``report --data`` reads them); ``opened`` keeps the last array file open from one shard to the next. A
    sample that cannot be read is left out, its error in the payload (the shard's other samples still run)."""
    opened = {} if opened is None else opened
    payload = ShardPayload(k, [], [], [])
    for i in plan.shard_samples(k):
        s = plan.samples[i]
        try:
            feeds = _read_sample(plan, s, opened)
        except Exception as exc:  # named in the manifest; the other samples go on
            payload.errors[i] = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
            continue
        payload.indices.append(i)
        payload.feeds.append(feeds)
        payload.labels.append(s.labels)
    return payload


def _read_sample(plan: Plan, s: SampleRecord, opened: dict) -> dict[str, np.ndarray]:
    source = plan.files[s.file]
    shapes = dict(plan.spec.shapes)
    if source.image:
        return ds.read_sample(source, 0, shapes, plan.dtypes, plan.mean, plan.std)
    if opened.get("file") != s.file:
        opened.clear()
        opened["file"] = s.file
        try:
            opened["arrays"] = ds.open_arrays(source.path)
        except InputError as exc:
            opened["error"] = exc
    if "error" in opened:
        raise opened["error"]
    return ds.read_sample(source, s.item, shapes, plan.dtypes, arrays=opened["arrays"])


class ShardPayloads(Sequence):
    """The payloads of the shards ``todo`` for ``run_tasks``, each built by ``shard_payload`` when it is pulled."""

    def __init__(self, plan: Plan, todo: list[int]):
        self.plan, self.todo, self.opened = plan, todo, {}

    def __len__(self) -> int:
        return len(self.todo)

    def __getitem__(self, pos):
        return shard_payload(self.plan, self.todo[pos], self.opened)


def header(plan: Plan) -> dict:
    spec = plan.spec
    return {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "model": spec.model,
            "model_sha256": plan.model_sha256, "board": plan.board, "float_model": spec.float_model,
            "float_model_sha256": spec.digests[1] if len(spec.digests) > 1 else None,
            "shard_size": plan.shard_size, "inputs": {n: list(s) for n, s in spec.shapes},
            "outputs": plan.outputs, "sources": plan.sources,
            "not_computed": [{"output": o.output, "reason": o.reason} for o in plan.not_computed],
            "refused": [{"node": r.node, "op": r.op, "reason": r.reason} for r in plan.refused]}


@dataclass
class Progress:
    """The state of a run: the written shards (shard -> its manifest entry), each written sample's shard row,
    the samples that failed (index -> error), and the metrics rows (index -> row)."""
    shards: dict[int, dict] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    metrics: dict[int, dict] = field(default_factory=dict)


def manifest(plan: Plan, state: Progress) -> dict:
    """The manifest: the header, every sample (index, source, shard, and its row once written or its error),
    the failed samples by name, the written shards, and whether every shard is written."""
    samples = []
    for s in plan.samples:
        k = s.index // plan.shard_size
        entry: dict[str, Any] = {"index": s.index, "file": s.file, "item": s.item, "shard": shard_file(k)}
        if s.index in state.rows:
            entry["row"] = state.rows[s.index]
        if s.labels is not None:
            entry["label"] = [int(v) for v in s.labels]
        if s.index in state.errors:
            entry["error"] = state.errors[s.index]
        samples.append(entry)
    failed = list(plan.load_errors) + [{"index": i, "sample": plan.samples[i].name, "error": e}
                                       for i, e in sorted(state.errors.items())]
    return {**header(plan), "samples": samples, "failed": failed,
            "shards": [state.shards[k] for k in sorted(state.shards)], "complete": len(state.shards) == plan.shards}


def resume_state(plan: Plan, previous: dict, hashes: dict[str, str], metrics: dict[int, dict]) -> Progress:
    """What a previous run (its ``previous`` manifest, the sha256 of the shard files found, its metrics rows by
    index) already wrote that this run can keep: shards listed in its manifest whose file is intact (and whose
    metrics rows are there, with ``--float``). A previous run of another model, board, data or shard size is an
    ``InputError``."""
    mine = header(plan)
    if previous.get("format") != MANIFEST_FORMAT or previous.get("version") != MANIFEST_VERSION:
        raise InputError("--resume: the manifest.json in --out is not one this npu-sim writes; give a new --out")
    differ = [k for k in RESUME_KEYS if previous.get(k) != mine[k]]
    if differ:
        shown = {"model_sha256": "model file", "float_model_sha256": "--float file", "float_model": "--float",
                 "shard_size": "--shard-size", "sources": "--data", "inputs": "input shapes"}
        raise InputError(f"--resume: --out holds a run that differs in: {', '.join(shown.get(k, k) for k in differ)} "
                         f"(its manifest.json); give the same model, board, --float, --shard-size and --data, or a "
                         f"new --out")
    state = Progress()
    by_index = {e.get("index"): e for e in previous.get("samples", []) if isinstance(e, dict)}
    for entry in previous.get("shards", []):
        k = entry.get("shard")
        if not isinstance(k, int) or not 0 <= k < plan.shards or hashes.get(entry.get("file")) != entry.get("sha256"):
            continue
        idx = list(plan.shard_samples(k))
        old = [by_index.get(i, {}) for i in idx]
        if any(o.get("file") != plan.samples[i].file or o.get("item") != plan.samples[i].item
               for i, o in zip(idx, old)):
            continue
        done = [i for i, o in zip(idx, old) if "row" in o]
        if plan.spec.float_model is not None and any(i not in metrics for i in done):
            continue
        state.shards[k] = entry
        for i, o in zip(idx, old):
            if "row" in o:
                state.rows[i] = o["row"]
                if i in metrics:
                    state.metrics[i] = metrics[i]
            elif "error" in o:
                state.errors[i] = o["error"]
    return state


@dataclass
class Summary:
    """A finished run: samples written (of those read), the failed ones (by name, with the error; a file that
    could not be read counts once), shards reused by ``--resume``, and
    with ``--float`` per output the mean cosine, the top-1 agreement and, with labels, both models' accuracy
    (of the outputs computed). A model the board does not run whole (a partial program): ``refused`` its
    refused nodes (``RefusedNode``: node, op, reason), ``not_computed`` the model outputs left out of the shards
    (``NotComputed``: output, reason), ``not_run_lines`` what ``npu-sim run`` says of both; all empty otherwise."""
    samples: int
    planned: int
    failed: list[dict]
    reused_shards: int
    shards: int
    metrics: dict[str, dict[str, float | None]]
    refused: list[RefusedNode] = field(default_factory=list)
    not_computed: list[NotComputed] = field(default_factory=list)
    not_run_lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every sample written, with every model output (no failed sample, no refused node)."""
        return not self.failed and not self.refused


def execute(plan: Plan, writer, options: EngineOptions | None = None,
            progress: Callable[[int, int], None] | None = None,
            notify: Callable[[str], None] | None = None) -> Summary:
    """Run the shards not yet written and hand each to ``writer`` as it finishes (any order).

    ``writer.start(plan) -> Progress`` (what a resumed run keeps), ``writer.shard(k, arrays) -> entry`` (writes
    shard ``k``; returns its ``file`` and ``sha256``), ``writer.due()`` (whether to save the manifest now, as a
    shard finishes) and ``writer.update(manifest, metrics_rows, columns)`` (when due, at the end, and when the run
    stops on an exception: a ``Stopped`` by a signal, an error). A shard written is recorded in the manifest
    before a stop signal is let through (``stop.held``). ``progress(done, total)`` counts samples;
    ``notify(message)`` is told of each failed sample or shard."""
    state = writer.start(plan)
    todo = [k for k in range(plan.shards) if k not in state.shards]
    total = len(plan.samples)
    done = sum(len(plan.shard_samples(k)) for k in state.shards)
    reused = len(state.shards)
    for e in plan.load_errors:
        _tell(notify, f"{e['sample']}: {e['error']}")
    if progress:
        progress(done, total)
    payloads = ShardPayloads(plan, todo)  # each shard read when the engine pulls it
    saved = True  # the manifest on disk lists every shard written
    try:
        for pos, res in run_tasks(setup, plan.spec, shard_task, payloads, options or EngineOptions()):
            with held():
                saved = _finished(plan, state, writer, todo[pos], res, notify) and saved
                if not saved and writer.due():
                    writer.update(manifest(plan, state), metric_rows(plan, state), plan.columns())
                    saved = True
            done += len(plan.shard_samples(todo[pos]))
            if progress:
                progress(done, total)
    except BaseException:
        if not saved:
            with held():
                writer.update(manifest(plan, state), metric_rows(plan, state), plan.columns())
        raise
    writer.update(manifest(plan, state), metric_rows(plan, state), plan.columns())
    return summarize(plan, state, reused)


def _finished(plan: Plan, state: Progress, writer, k: int, res, notify) -> bool:
    """Shard ``k`` done: written and noted (a result), or its samples failed (a ``TaskFailed``); False when a shard
    file was written that the manifest does not list yet."""
    if isinstance(res, TaskFailed):
        for i in plan.shard_samples(k):
            state.errors[i] = f"its shard's task failed: {res.error}"
        _tell(notify, f"{shard_file(k)} (samples {', '.join(plan.samples[i].name for i in plan.shard_samples(k))})"
                      f": {res.error}")
        return True
    _record(plan, state, writer, k, res, notify)
    return False


def _tell(notify, message: str) -> None:
    if notify:
        notify(message)


def _record(plan: Plan, state: Progress, writer, k: int, res: ShardResult, notify) -> None:
    """Write shard ``k``'s outputs (integers and dequantized, stacked over its samples that ran) and note them."""
    ints: dict[str, list] = {name: [] for name in plan.outputs}
    deq: dict[str, list] = {name: [] for name in plan.outputs}
    rows: dict[int, int] = {}
    for i, out, met in zip(res.indices, res.outputs, res.metrics):
        if out is None:
            continue
        rows[i] = len(rows)
        for name, q in plan.qparams.items():
            ints[name].append(out[name])
            deq[name].append(q.dequantize(out[name]))
        if met is not None:
            state.metrics[i] = met
    arrays: dict[str, np.ndarray] = {}
    for name, q in plan.qparams.items():
        shape = tuple(plan.outputs[name]["shape"])
        arrays[f"{name}.int"] = np.stack(ints[name]) if rows else np.zeros((0,) + shape, q.np_dtype)
        arrays[name] = np.stack(deq[name]) if rows else np.zeros((0,) + shape, np.float32)
    entry = writer.shard(k, arrays)
    state.shards[k] = {"shard": k, "file": entry["file"], "samples": len(rows), "sha256": entry["sha256"]}
    state.rows.update(rows)
    for i, err in res.errors.items():
        state.errors[i] = err
        _tell(notify, f"{plan.samples[i].name}: {err}")


def metric_rows(plan: Plan, state: Progress) -> list[dict]:
    """The metrics CSV's rows (with ``--float``), in sample order: the sample, then its metrics."""
    if plan.spec.float_model is None:
        return []
    rows = []
    for i in sorted(state.metrics):
        s = plan.samples[i]
        base = {"index": i, "file": s.file, "item": s.item}
        if s.labels is not None:
            base["label"] = " ".join(str(int(v)) for v in s.labels)
        rows.append({**state.metrics[i], **base})
    return rows


def summarize(plan: Plan, state: Progress, reused: int) -> Summary:
    failed = list(plan.load_errors) + [{"index": i, "sample": plan.samples[i].name, "error": e}
                                       for i, e in sorted(state.errors.items())]
    metrics: dict[str, dict[str, float | None]] = {}
    if plan.spec.float_model is not None:
        rows = [state.metrics[i] for i in sorted(state.metrics)]
        batch = plan.spec.shapes[0][1][0]
        for name in plan.outputs:
            metrics[name] = {"cosine": _mean(rows, f"{name}.cosine", 1),
                             "top1_agree": _mean(rows, f"{name}.top1_agree", batch),
                             "accuracy": _mean(rows, f"{name}.correct", batch),
                             "float_accuracy": _mean(rows, f"{name}.float_correct", batch)}
    return Summary(len(state.rows), len(plan.samples), failed, reused, plan.shards, metrics, list(plan.refused),
                   list(plan.not_computed), list(plan.not_run_lines))


def _mean(rows: list[dict], key: str, per: int) -> float | None:
    """Mean of ``key`` over the rows that have it (values may be the CSV's text), per ``per`` batch rows."""
    vals = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    return sum(vals) / (len(vals) * per) if vals else None
