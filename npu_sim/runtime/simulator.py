"""The Python API: load a QDQ model for a board, run it, trace it."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from npu_sim.boards import Board, load_board
from npu_sim.errors import NpuSimError
from npu_sim.runtime.ahead import armed as ahead_armed
from npu_sim.runtime.batch import (axis_refusal, batch_refusal, batch_threads, concat_results, feed_batch,
                                   part_sizes, pin_part, split_feeds, split_parts)
from npu_sim.runtime.executor import RunResult, execute
from npu_sim.ir import Program
from npu_sim.lowering.walk import lower_graph
from npu_sim.frontend.reader import open_model

BATCH_PROGRAMS_KEPT = 4  # programs lowered for a batch size, most recent kept


class Simulator:
    """A QDQ model lowered to the integer program of one board.

    ``run(feeds)`` returns dequantized float outputs by ONNX output name; ``run(feeds, raw=True)`` the integers.
    ``trace(feeds)`` returns every quantized tensor (integers), keyed by the ONNX float tensor it stands for.

    Batches: where every input's one-sample shape starts with 1, ``run`` and ``trace`` also take N samples stacked
    along the first axis, and return what N single runs concatenated along axis 0 would -- bit for bit. The model
    is lowered once more for N (each node then runs once for the whole batch); where that is not exact (a node
    working along axis 0, an activation without the batch dimension) or not possible (a Simulator built from a
    Program), the samples run one by one, and ``batch_note`` says why, naming the node. The batch program comes
    from the model as ``load`` read it (its ``OpenModel``), not from the file again. A batch runs on as many
    threads as the process may use CPUs (``NPU_SIM_THREADS`` sets the number), each on consecutive samples with
    a program lowered for its part; without hooks only (hooks see the nodes in order, in this thread).
    """

    def __init__(self, program: Program, opened=None):
        """``opened``: the model as ``load`` read it (an ``OpenModel``), to lower it again for batches; None for a
        Simulator built from a Program."""
        self.program = program
        self.last: RunResult | None = None
        self.batch_note: str | None = None  # why a batch ran as single runs (None: never so far)
        self.opened = opened
        self.batch_programs: dict[int, tuple[Program | None, str | None]] = {}  # N -> (program or None, reason)
        self.thread_programs: dict[tuple[int, int], list[Program] | None] = {}  # (N, threads) -> one per thread

    @property
    def board(self) -> Board:
        return self.program.board

    @property
    def inputs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """ONNX input name -> (shape, dtype the feed must have)."""
        out = {}
        for name, tname in self.program.inputs.items():
            t = self.program.tensors[tname]
            out[name] = (t.shape, "float32" if t.q is None else np.dtype(t.q.np_dtype).name)
        return out

    @property
    def outputs(self) -> list[str]:
        return list(self.program.outputs)

    def execute(self, feeds: dict, hooks=(), keep_all: bool = False) -> RunResult:
        self.last = execute(self.program, feeds, hooks, keep_all)
        return self.last

    def run(self, feeds: dict, raw: bool = False) -> dict[str, np.ndarray]:
        """Outputs by ONNX name: dequantized floats, or with ``raw`` the integers; feeds may be a batch."""
        result = self.run_batch(feeds)
        out = {}
        for name, tname in self.program.outputs.items():
            q = result.values[tname]
            out[name] = q if raw else self.program.tensors[tname].q.dequantize(q)
        for name, tname in self.program.passthrough.items():  # a float input that is also an output: as fed
            out[name] = result.values[tname]
        return out

    def trace(self, feeds: dict) -> dict[str, np.ndarray]:
        """Every quantized tensor (integers) by ONNX float tensor name; feeds may be a batch."""
        result = self.run_batch(feeds, keep_all=True)
        traced = {}
        for tname, arr in result.values.items():
            t = self.program.tensors[tname]
            if t.q is not None and not t.is_const:
                traced.setdefault(t.float_name, arr)
        return traced

    def run_batch(self, feeds: dict, hooks=(), keep_all: bool = False) -> RunResult:
        """``execute`` for one sample or a batch of N (see the class): the result's tensors are named as in
        ``program``, with N first. Hooks see each node once for the batch (once per sample where the batch runs as
        single runs). Kept in ``last``."""
        n = feed_batch(self.program, feeds)
        if n is None:
            return self.execute(feeds, hooks, keep_all)
        threads = 1 if hooks or ahead_armed() else min(batch_threads(), n)
        programs = self.part_programs(n, threads) if threads > 1 else None
        if programs is not None:
            parts = split_parts(feeds, part_sizes(n, threads))

            def part(i, program, feeds_i):
                pin_part(i, len(programs))
                return execute(program, feeds_i, (), keep_all)
            with ThreadPoolExecutor(len(programs)) as pool:
                results = list(pool.map(part, range(len(programs)), programs, parts))
            self.last = concat_results(results)
            return self.last
        program = self.batch_program(n)
        if program is not None:
            self.last = execute(program, feeds, hooks, keep_all)
        else:
            self.last = concat_results([execute(self.program, one, hooks, keep_all)
                                        for one in split_feeds(feeds, n)])
        return self.last

    def batch_program(self, n: int) -> Program | None:
        """The program lowered for a batch of ``n``, or None when a batch must run as single runs (then
        ``batch_note`` says why). Lowered once per ``n``; the last few are kept."""
        if n not in self.batch_programs:
            self.batch_programs[n] = self.lower_batch(n)
            while len(self.batch_programs) > BATCH_PROGRAMS_KEPT:
                self.batch_programs.pop(next(iter(self.batch_programs)))
        program, reason = self.batch_programs[n]
        if reason is not None:
            where = self.program.model_path or "the model"
            self.batch_note = (f"{where}: a batch of {n} runs as {n} single runs (the same integers, without the "
                               f"speed of a batch): {reason}")
        return program

    def part_programs(self, n: int, threads: int) -> list[Program] | None:
        """One program per thread for a batch of ``n`` on ``threads`` threads (``part_sizes``; each its own, so that
        no two threads share a node's run-time memo), or None where a part cannot be lowered for its size (the
        batch then runs in this thread). Lowered once per (n, threads); the last few are kept."""
        key = (n, threads)
        if key not in self.thread_programs:
            programs = []
            for size in part_sizes(n, threads):
                program, _ = self.lower_batch(size)
                if program is None:
                    programs = None
                    break
                programs.append(program)
            self.thread_programs[key] = programs
            while len(self.thread_programs) > BATCH_PROGRAMS_KEPT:
                self.thread_programs.pop(next(iter(self.thread_programs)))
        return self.thread_programs[key]

    def lower_batch(self, n: int) -> tuple[Program | None, str | None]:
        """``(program for n samples, None)``, or ``(None, the reason it cannot be)``."""
        if self.opened is None:
            return None, "this Simulator was built from a Program, not loaded from a model (npu_sim.load)"
        shapes = {name: self.program.tensors[t].shape for name, t in self.program.inputs.items()}
        try:
            graph = self.opened.graph(shapes, batch=n)
            reason = axis_refusal(graph)
            if reason is not None:
                return None, reason
            program = lower_graph(graph, self.board, partial=bool(self.program.refusals))
        except NpuSimError as exc:
            return None, f"the model does not lower for a batch of {n} ({exc})"
        reason = batch_refusal(self.program, program, n)
        return (None, reason) if reason is not None else (program, None)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random feeds spanning each input's quantized (calibrated) range."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, tname in self.program.inputs.items():
            t = self.program.tensors[tname]
            q = t.q
            if q is None:  # float input behind the model's QuantizeLinear: use that quantization's range
                stub = self.program.tensors[self.program.input_stub(tname).outputs[0]].q
                lo = float((stub.qmin - stub.zero_point) * stub.scale)
                hi = float((stub.qmax - stub.zero_point) * stub.scale)
                feeds[name] = rng.uniform(lo, hi, size=t.shape).astype(np.float32)
            else:
                feeds[name] = rng.integers(q.qmin, q.qmax + 1, size=t.shape).astype(q.np_dtype)
        return feeds


def load(model, board=None, input_shapes: dict | None = None, feed_shapes: dict | None = None,
         partial: bool = False) -> Simulator:
    """Load a QDQ ONNX model or a .tflite (a path, an ``onnx.ModelProto``, or a model already open: ``open_model``)
    and lower it for ``board`` (a preset name, a TOML path, or a Board; default ``default``, ``ethos-u55-128`` for
    a .tflite).

    ``input_shapes`` fixes dynamic input dimensions, e.g. ``{"x": (1, 3, 48, 192)}``; ``feed_shapes`` (the shapes
    of the feeds you will pass) resolve dynamic dimensions only. With a batch dimension of 1 (fixed or given),
    ``run`` and ``trace`` also take a batch of N samples stacked along it (see ``Simulator``).
    ``partial``: a model with nodes the board refuses loads without them and what depends on them
    (``program.refusals``, ``program.not_run``: ``npu_sim.lowering.partial``) instead of raising.
    Raises an ``npu_sim.errors.NpuSimError`` subclass with a clear message on bad input.
    """
    opened = open_model(model)
    b = load_board(board if board is not None else opened.default_board)
    graph = opened.graph(input_shapes, feed_shapes)
    return Simulator(lower_graph(graph, b, partial=partial), opened=opened)
