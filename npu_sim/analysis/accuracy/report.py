"""The accuracy report's entry points: ``load_data`` (the dataset), ``report`` (measure it), ``default_workers``."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from npu_sim.analysis.accuracy import jobs
from npu_sim.analysis.accuracy.aggregate import aggregate
from npu_sim.analysis.accuracy.engine import Engine, Spec, run_samples, setup
from npu_sim.analysis.accuracy.model import AccuracyReport
from npu_sim.errors import InputError
from npu_sim.frontend import dataset as ds
from npu_sim.frontend.reader import open_model
from npu_sim.runtime.engines import EngineOptions, default_workers, run_tasks

__all__ = ["load_data", "report", "default_workers"]


def load_data(model, data=None, input_shapes: dict | None = None, mean: str = "0", std: str = "1",
              limit: int | None = None):
    """The report's dataset (``dataset.Dataset``) from ``data`` as ``report`` takes it (see there); ``model``: a
    path or a model already open (``open_model``)."""
    opened = open_model(model)
    if data is None:
        raise InputError(f"{opened.name}: --data is required: the data to measure accuracy on (folders or files "
                         f"of images, .npy or .npz)")
    if isinstance(data, ds.Dataset):
        dset = data
    elif isinstance(data, (str, Path)) or (isinstance(data, (list, tuple)) and data and
                                           isinstance(data[0], (str, Path))):
        paths = [data] if isinstance(data, (str, Path)) else list(data)
        first = ds.first_headers(ds.data_files(paths), opened.inputs)
        shapes = opened.shapes(input_shapes, first, free_batch=1, samples=True)
        dset = ds.load_dataset(paths, shapes, {n: i.dtype for n, i in opened.inputs.items()}, mean, std, limit)
    else:
        samples = list(data)
        if not samples:
            raise InputError("report: the dataset is empty")
        dset = ds.Dataset([dict(s) for s in samples], None, f"{len(samples)} sample(s)")
    if limit is not None:
        dset = ds.Dataset(dset.samples[:limit], dset.labels, dset.description, dset.sources)
    return dset


def report(model, data=None, float_model=None, board="default", input_shapes: dict | None = None,
           workers: int | None = 1, mean: str = "0", std: str = "1", limit: int | None = None,
           collapse_cosine: float = 0.99, progress: Callable[[int, int], None] | None = None,
           engine: EngineOptions | None = None) -> AccuracyReport:
    """Accuracy report of the QDQ ``model`` on ``board`` over ``data`` (see ``npu_sim.analysis.accuracy``).

    ``data`` (required): a ``dataset.Dataset``, a list of feed dicts, or file/folder paths (images, .npy,
    .npz); ``None`` is an ``InputError``. ``float_model``: the float ONNX model quantize_static started from
    (default: the QDQ model's own float semantics). ``engine``: where the samples run (``EngineOptions``: local
    processes or a Ray cluster, each worker loading the model once); without it, ``workers`` local processes
    (1: this process; None: as many as pay for themselves). The result does not depend on either.
    ``progress(done, total)`` is called as samples complete.
    """
    t0 = time.perf_counter()
    opened = open_model(model)
    model = opened.file or opened.name
    dset = load_data(opened, data, input_shapes, mean, std, limit)
    shapes = {n: tuple(np.shape(v)) for n, v in dset.samples[0].items()}
    if input_shapes:
        shapes.update({k: tuple(v) for k, v in input_shapes.items()})
    spec = Spec(model, jobs.board_spec(board), shapes, str(float_model) if float_model else None, 1, jobs.new_key())
    t1 = time.perf_counter()
    eng = Engine(spec, opened)
    built = time.perf_counter() - t1
    bad = [n for n in shapes if n not in eng.sim.inputs]
    if bad:
        raise InputError(f"the data feeds {bad}, the model's inputs are {sorted(eng.sim.inputs)}")
    labels = dset.labels
    items = []
    for i, s in enumerate(dset.samples):
        lab = None
        if labels is not None:
            b = next(iter(s.values())).shape[0]
            lab = labels[i * b:(i + 1) * b]
        items.append((s, lab))
    options = engine if engine is not None else EngineOptions("local", workers)
    results = _run(eng, spec, items, options, progress, built)
    nsamples, outputs, layers, collapse, largest, overflows = aggregate(eng, results, collapse_cosine)
    return AccuracyReport(
        model=model, board=str(eng.program.board), reference=eng.ref.kind,
        reference_source=eng.ref.source, data=dset.description, samples=nsamples, outputs=outputs,
        layers=layers, collapse=collapse, largest_drop=largest, unmatched=list(dict.fromkeys(eng.unmatched)),
        overflows=overflows, collapse_cosine=collapse_cosine, seconds=time.perf_counter() - t0)


def _run(engine: Engine, spec: Spec, items: list, options: EngineOptions, progress, built: float) -> list[dict]:
    """The engine's ``run_chunk`` results over ``items`` (feeds, labels), in sample order, whatever engine and
    workers ran them. Locally without an explicit worker count a few samples run here first, timed (the first one
    pays one-off costs, such as loading the kernels, that a worker pays too): the estimate of the work left decides
    how many workers pay for themselves (``jobs.plan``). Never more than one worker per 8 samples."""
    total = len(items)
    results: dict[int, dict] = {}
    start, work = 0, None
    if options.kind == "local" and options.workers is None and total > 2:
        t0 = time.perf_counter()
        results[0] = engine.run_chunk(items[:1])
        t1 = time.perf_counter()
        start = min(total, 5)
        results[1] = engine.run_chunk(items[1:start])
        each = (time.perf_counter() - t1) / (start - 1)
        work, built = each * (total - start), built + max(0.0, t1 - t0 - each)
        if progress:
            progress(start, total)
    opts = jobs.plan(options, total - start, work, built, cap=max(1, total // 8))
    bounds = _bounds(start, total, opts)
    payloads = [items[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    done = start
    with jobs.built_here(spec.key, engine):
        for i, res in run_tasks(setup, spec, run_samples, payloads, opts):
            results[bounds[i]] = res
            done += bounds[i + 1] - bounds[i]
            if progress:
                progress(done, total)
    _raise_failed(results, sorted(set(bounds) | {0, 1, start}))
    return [results[k] for k in sorted(results)]


def _bounds(start: int, total: int, opts: EngineOptions) -> list[int]:
    """Chunk bounds over samples [start, total): about 100 chunks in this process (the progress bar's steps), 8
    per worker, or on a Ray cluster that sizes itself (its CPUs) at least 8 samples per chunk (so at most one
    actor per 8 samples) and at most 256 chunks."""
    n = total - start
    if opts.kind == "local" and opts.workers == 1:
        k = min(n, 100)
    elif opts.workers:
        k = min(n, 8 * opts.workers)
    else:
        k = min(n, max(1, n // 8), 256)
    return sorted({int(b) for b in np.linspace(start, total, max(k, 1) + 1)})


def _raise_failed(results: dict, bounds: list[int]) -> None:
    """A clear error for samples that failed: bad data (exit 2) names each; a task that failed otherwise (a bug,
    or a worker that died on every try) names its samples."""
    bad, bug_samples, bug = [], [], None
    for first in sorted(results):
        res = results[first]
        if isinstance(res, dict):
            bad += [(first + j, b) for j, b in res["failed"]]
        else:
            bug_samples += range(first, next(b for b in bounds if b > first))
            bug = bug or res
    failures = [(jobs.spans(bug_samples), bug)] if bug else []
    if bad and not bug:
        failures = [(jobs.spans([i for i, _ in bad]), bad[0][1])]
    jobs.raise_failures("report: sample(s)", failures, " (0-based, in data order)")
