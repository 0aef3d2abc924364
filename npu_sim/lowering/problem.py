"""Why a node cannot be lowered: the exceptions op families raise while they prepare a node.

The walk (``npu_sim.lowering.walk``) collects them all and reports them at once, by node."""
from __future__ import annotations


class Problem(Exception):
    """A node that cannot be lowered (a gap of npu-sim or of the model); collected and reported with the others."""

    node = None  # the ONNX node it is about, where that is not the node the walk was visiting (set by the walk)


class Refusal(Problem):
    """A node the board's own toolchain refuses (not a gap of npu-sim): the check reports it as an error."""


class Unsimulated(Refusal):
    """A node the board's NPU compiler compiles, but not into what its model means (e.g. Vela 5.2 writing a
    wrapped activation bound): the check warns (it deploys); npu-sim does not claim to simulate it, so it is
    handled like a refusal everywhere else (left out of a partial program, named by run and compare)."""
