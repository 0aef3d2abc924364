"""The Python API: load a QDQ model for a board, run it, trace it."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from npu_sim.boards import Board, load_board
from npu_sim.runtime.executor import RunResult, execute
from npu_sim.ir import Program
from npu_sim.lowering.walk import lower_graph
from npu_sim.frontend.reader import read_model


class Simulator:
    """A QDQ model lowered to the integer program of one board.

    ``run(feeds)`` returns dequantized float outputs by ONNX output name; ``run(feeds, raw=True)`` the integers.
    ``trace(feeds)`` returns every quantized tensor (integers), keyed by the ONNX float tensor it stands for.
    """

    def __init__(self, program: Program):
        self.program = program
        self.last: RunResult | None = None

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
        result = self.execute(feeds)
        out = {}
        for name, tname in self.program.outputs.items():
            q = result.values[tname]
            out[name] = q if raw else self.program.tensors[tname].q.dequantize(q)
        return out

    def trace(self, feeds: dict) -> dict[str, np.ndarray]:
        result = self.execute(feeds, keep_all=True)
        traced = {}
        for tname, arr in result.values.items():
            t = self.program.tensors[tname]
            if t.q is not None and not t.is_const:
                traced.setdefault(t.float_name, arr)
        return traced

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random feeds spanning each input's quantized (calibrated) range."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, tname in self.program.inputs.items():
            t = self.program.tensors[tname]
            q = t.q
            if q is None:  # float input behind the model's QuantizeLinear: use that quantization's range
                stub = next(self.program.tensors[n.outputs[0]].q for n in self.program.nodes
                            if n.op == "Quantize" and n.inputs[0] == tname)
                lo = float((stub.qmin - stub.zero_point) * stub.scale)
                hi = float((stub.qmax - stub.zero_point) * stub.scale)
                feeds[name] = rng.uniform(lo, hi, size=t.shape).astype(np.float32)
            else:
                feeds[name] = rng.integers(q.qmin, q.qmax + 1, size=t.shape).astype(q.np_dtype)
        return feeds


def load(path, board="default", input_shapes: dict | None = None, feed_shapes: dict | None = None) -> Simulator:
    """Load a QDQ ONNX model and lower it for ``board`` (a preset name, a TOML path, or a Board).

    ``input_shapes`` fixes dynamic input dimensions, e.g. ``{"x": (1, 3, 48, 192)}``; ``feed_shapes`` (the shapes
    of the feeds you will pass) resolve dynamic dimensions only.
    Raises an ``npu_sim.errors.NpuSimError`` subclass with a clear message on bad input.
    """
    b = load_board(board)
    graph = read_model(path if not isinstance(path, Path) else str(path), input_shapes, feed_shapes)
    return Simulator(lower_graph(graph, b))
