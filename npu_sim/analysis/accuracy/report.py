"""The accuracy report's entry points: ``load_data`` (the dataset), ``report`` (measure it), ``default_workers``."""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from npu_sim.analysis.accuracy.aggregate import aggregate
from npu_sim.analysis.accuracy.engine import Engine, Spec, worker_init, worker_run
from npu_sim.analysis.accuracy.model import AccuracyReport
from npu_sim.boards import Board
from npu_sim.errors import InputError, ModelLoadError
from npu_sim.frontend import dataset as ds


def _board_spec(board):
    if isinstance(board, Board) and board.source and Path(board.source).is_file():
        return board.source
    return board


def load_data(model, data=None, input_shapes: dict | None = None, mean: str = "0", std: str = "1",
              limit: int | None = None):
    """The report's dataset (``dataset.Dataset``) from ``data`` as ``report`` takes it (see there)."""
    model = str(model)
    if not Path(model).is_file():
        raise ModelLoadError(f"{model}: file not found")
    inputs = ds.model_inputs(model)
    if data is None:
        raise InputError(f"{model}: --data is required: the data to measure accuracy on (folders or files of "
                         f"images, .npy or .npz)")
    if isinstance(data, ds.Dataset):
        dset = data
    elif isinstance(data, (str, Path)) or (isinstance(data, (list, tuple)) and data and
                                           isinstance(data[0], (str, Path))):
        paths = [data] if isinstance(data, (str, Path)) else list(data)
        first = ds.peek_arrays(paths, list(inputs))
        shapes = ds.resolve_shapes(inputs, input_shapes, first)
        dset = ds.load_dataset(paths, shapes, {n: d for n, (_, d) in inputs.items()}, mean, std, limit)
    else:
        samples = list(data)
        if not samples:
            raise InputError("report: the dataset is empty")
        dset = ds.Dataset([dict(s) for s in samples], None, f"{len(samples)} sample(s)")
    if limit is not None:
        dset = ds.Dataset(dset.samples[:limit], dset.labels, dset.description, dset.sources)
    return dset


def report(model, data=None, float_model=None, board="default", input_shapes: dict | None = None,
           workers: int = 1, mean: str = "0", std: str = "1", limit: int | None = None,
           collapse_cosine: float = 0.99,
           progress: Callable[[int, int], None] | None = None) -> AccuracyReport:
    """Accuracy report of the QDQ ``model`` on ``board`` over ``data`` (see ``npu_sim.analysis.accuracy``).

    ``data`` (required): a ``dataset.Dataset``, a list of feed dicts, or file/folder paths (images, .npy,
    .npz); ``None`` is an ``InputError``. ``float_model``: the float ONNX model quantize_static started from
    (default: the QDQ model's own float semantics). ``workers``: processes (each loads the model once); the
    result does not depend on it. ``progress(done, total)`` is called as samples complete.
    """
    t0 = time.perf_counter()
    model = str(model)
    dset = load_data(model, data, input_shapes, mean, std, limit)
    shapes = {n: tuple(np.shape(v)) for n, v in dset.samples[0].items()}
    if input_shapes:
        shapes.update({k: tuple(v) for k, v in input_shapes.items()})
    spec = Spec(model, _board_spec(board), shapes, str(float_model) if float_model else None, 1)
    engine = Engine(spec)
    bad = [n for n in shapes if n not in engine.sim.inputs]
    if bad:
        raise InputError(f"the data feeds {bad}, the model's inputs are {sorted(engine.sim.inputs)}")
    labels = dset.labels
    items = []
    for i, s in enumerate(dset.samples):
        lab = None
        if labels is not None:
            b = next(iter(s.values())).shape[0]
            lab = labels[i * b:(i + 1) * b]
        items.append((s, lab))
    results = _run(engine, spec, items, workers, progress)
    nsamples, outputs, layers, collapse, largest, overflows = aggregate(engine, results, collapse_cosine)
    return AccuracyReport(
        model=model, board=str(engine.program.board), reference=engine.ref.kind,
        reference_source=engine.ref.source, data=dset.description, samples=nsamples, outputs=outputs,
        layers=layers, collapse=collapse, largest_drop=largest, unmatched=list(dict.fromkeys(engine.unmatched)),
        overflows=overflows, collapse_cosine=collapse_cosine, seconds=time.perf_counter() - t0)


def _run(engine: Engine, spec: Spec, items: list, workers: int, progress) -> list[dict]:
    """The engine's ``run_chunk`` results over ``items`` (feeds, labels), in sample order: in this process, in
    about 100 chunks, or in ``workers`` processes (spawned, each with its own engine)."""
    total = len(items)
    workers = max(1, int(workers or 1))
    workers = min(workers, max(1, total // 8))  # starting a worker (imports, Numba cache, model) costs seconds
    results = []
    done = 0
    if workers == 1:
        step = max(1, total // 100)
        for i in range(0, total, step):
            chunk = items[i:i + step]
            results.append(engine.run_chunk(chunk))
            done += len(chunk)
            if progress:
                progress(done, total)
        return results
    nchunks = min(total, workers * 8)
    bounds = np.linspace(0, total, nchunks + 1).astype(int)
    chunks = [items[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=worker_init, initargs=(spec,)) as pool:
        for res in pool.imap(worker_run, chunks):
            results.append(res)
            done += len(res["rows"])
            if progress:
                progress(done, total)
    return results


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)
