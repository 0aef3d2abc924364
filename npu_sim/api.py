"""The Python API: one way from "a model path, or a loaded Simulator" to an integer program, and every job on it.

    open_model(path)                     -> OpenModel        (npu_sim.frontend.reader: read and validated once)
    load(path, board)                    -> Simulator (run, trace)
    check(model, board, feeds=None)      -> CheckResult      (npu_sim.analysis.check)
    estimate(model, board)               -> Estimate         (npu_sim.analysis.cost)
    accuracy_report(model, data, ...)    -> AccuracyReport   (npu_sim.analysis.accuracy; annotate() adds the advisor)
    compare_dump(model, dump, board)     -> Comparison       (npu_sim.analysis.compare)
    run_dataset(model, data, writer)     -> DatasetSummary   (npu_sim.analysis.dataset.run; files: a DatasetWriter)
    inspect(model)                       -> Inspection       (npu_sim.analysis.inspect: inputs, outputs, quantization)

``model`` is a QDQ ONNX path, a model already open (``open_model``: read once, passed on) or a ``Simulator``
(check and estimate also take its ``Program``); ``board`` a preset name, a TOML path or a ``Board``.
"""
from __future__ import annotations

import numpy as np

from npu_sim.analysis.accuracy import AccuracyReport, default_workers, load_data
from npu_sim.analysis.accuracy import report as accuracy_report
from npu_sim.analysis.advisor import AdviceOptions, annotate
from npu_sim.analysis.check import CheckResult, check_program
from npu_sim.analysis.compare import Comparison, compare_dump
from npu_sim.analysis.cost import Estimate, estimate_program
from npu_sim.analysis.dataset.run import Summary as DatasetSummary
from npu_sim.analysis.dataset.run import execute, plan_dataset
from npu_sim.analysis.inspect import Inspection, inspect_model
from npu_sim.boards import Board, load_board, presets
from npu_sim.errors import BoardError
from npu_sim.frontend.reader import OpenModel, open_model
from npu_sim.ir import Program
from npu_sim.lowering.walk import lower_for_analysis
from npu_sim.runtime.engines import EngineOptions
from npu_sim.runtime.simulator import Simulator, load

__all__ = ["load", "check", "estimate", "accuracy_report", "annotate", "compare_dump", "program_for", "Simulator",
           "Board", "load_board", "presets", "CheckResult", "Estimate", "AccuracyReport", "AdviceOptions",
           "Comparison", "default_workers", "load_data", "run_dataset", "DatasetSummary", "EngineOptions", "open_model",
           "OpenModel", "inspect", "Inspection"]


def program_for(model, board=None, input_shapes: dict | None = None, feed_shapes: dict | None = None) -> Program:
    """The integer program that check and estimate read, and the only place that lowers one for them: the
    program itself (a ``Program``, a Simulator's) when ``board`` is None or its board, else the model (a path, or
    a model already open: ``open_model``) lowered tolerantly (``lower_for_analysis``) for ``board`` (default
    ``default``); a program keeps its input shapes on another board."""
    if isinstance(model, (Program, Simulator)):
        program = model if isinstance(model, Program) else model.program
        if board is None or load_board(board) == program.board:
            return program
        opened = model.opened if isinstance(model, Simulator) and model.opened is not None else \
            open_model(program.model_path)
        shapes = {n: program.tensors[t].shape for n, t in program.inputs.items()}
        return lower_for_analysis(opened, load_board(board), shapes)
    opened = open_model(model)
    return lower_for_analysis(opened, load_board(board or opened.default_board), input_shapes or {}, feed_shapes)


def check(model, board=None, input_shapes: dict | None = None, feeds: dict | None = None) -> CheckResult:
    """Check a QDQ model (a path, a model already open, a loaded ``Simulator`` or its ``Program``) against a board's
    rules.

    ``board``: preset name, TOML path or Board (default: the program's board, else ``default``).
    ``feeds``: run the model on these inputs (or ``"random"`` for seeded random ones) and report observed
    accumulator overflow. Nodes npu-sim cannot lower are reported (placement CPU), not raised.
    """
    feed_shapes = {n: np.shape(v) for n, v in feeds.items()} if isinstance(feeds, dict) else None
    program = program_for(model, board, input_shapes, feed_shapes)
    overflows = None
    if feeds is not None:
        if program.problems or program.arith_gaps:
            raise BoardError("cannot run the model for --run: npu-sim cannot lower "
                             f"{len(program.problems)} node(s) (see the check without --run)")
        sim = Simulator(program)
        overflows = sim.execute(sim.random_inputs() if isinstance(feeds, str) else feeds).overflows
    return check_program(program, overflows)


def estimate(model, board=None, input_shapes=None) -> Estimate:
    """Latency estimate of a QDQ model (path, a model already open, a ``Simulator`` or its ``Program``) on a board
    (preset name, .toml path, Board).

    ``board`` defaults to the program's board (for a path: ``default``, ``ethos-u55-128`` for a .tflite). Returns an ``Estimate``: per-layer
    ``layers`` rows and a ``summary``; ``.to_json()`` / ``.to_csv()`` serialize it."""
    lowered = isinstance(model, (Program, Simulator))
    brd = load_board(board) if board is not None else None
    if brd is None:  # the program's board, else the model's default
        model = model if lowered else open_model(model)
        brd = model.board if lowered else load_board(model.default_board)
    if brd.cost is None and not lowered:  # refuse before the (slower) load
        raise BoardError(f"board {brd.name!r} ({brd.source}) has no [cost] section, so it has no latency model: "
                         f"use --board ethos-u55-128 or default, or add a [cost] section")
    program = program_for(model, brd, input_shapes)
    moved = check_program(program).moved if brd.rules.npu_compiler == "vela" else set()
    return estimate_program(program, brd, moved)


def run_dataset(model, data, writer, float_model=None, board="default", input_shapes: dict | None = None,
                shard_size: int = 64, engine: EngineOptions | None = None, mean: str = "0", std: str = "1",
                progress=None, notify=None) -> DatasetSummary:
    """Run every sample of ``data`` (folders or files of images, .npy, .npz, read as ``accuracy_report`` reads
    them) through the QDQ ``model`` on ``board``, in shards of ``shard_size`` samples, and hand the outputs to
    ``writer``: ``npu_sim.DatasetWriter(out, resume=False)`` writes them into the folder ``out`` (shards,
    manifest.json, and with ``float_model`` metrics.csv: cosine, SQNR, top-1 agreement and label accuracy per
    sample against the float model on onnxruntime). ``engine``: where the shards run
    (``EngineOptions("local", workers)`` by default; the outputs do not depend on it). ``progress(done, total)``
    counts samples; ``notify(message)`` is told of each sample that fails. Returns a ``DatasetSummary``
    (``.failed`` names the samples that failed; the others are written; ``.ok``: none failed and none refused).

    A model with nodes the board does not run runs as ``load(..., partial=True)`` runs it: the outputs computed
    without those nodes are written (metrics: of those outputs), and the summary names the rest as typed fields,
    empty when the board runs the whole model: ``.refused`` (``RefusedNode(node, op, reason)``, the board's
    reason), ``.not_computed`` (``NotComputed(output, reason)``: the model outputs in no shard) and
    ``.not_run_lines`` (what ``npu-sim run`` prints of both); both classes are in
    ``npu_sim.analysis.dataset.run``. A model none of whose outputs can be computed raises
    ``UnsupportedModelError`` naming the refused nodes, before anything is written."""
    plan = plan_dataset(model, data, board, input_shapes, float_model, shard_size, mean, std)
    return execute(plan, writer, engine, progress, notify)


def inspect(model) -> Inspection:
    """What a QDQ model (a path or a model already open) is: producer and opset, its inputs and outputs (dtype,
    shape with dynamic dimensions named, layout guess, the quantization at the model's edge), a summary of the
    quantization and an op histogram. Nothing is lowered or run; ``.to_dict()`` is ``npu-sim inspect --json``."""
    return inspect_model(open_model(model))
