"""What an op family sees while it prepares a node: the narrow side of the walk.

A family function ``lower_x(lowering, onode, args, out, act) -> Node`` receives a ``LowerContext`` as
``lowering``, never the walk itself. It may read the board's arithmetic, the graph's constants, shapes, opset,
consumers and producers, and it may name a node, add a tensor and emit an extra node (ops that produce several
nodes or tensors). ``npu_compiled`` says whether the board's NPU compiler takes the node (``hazard`` then
records what that compiler does where the host runtime would refuse). It cannot see or change the walk's
bookkeeping (pending groups, the dequantization maps, the problems collected so far).
"""
from __future__ import annotations

from typing import Callable

from npu_sim.boards import Arithmetic
from npu_sim.frontend.reader import Graph
from npu_sim.ir import Node, Tensor
from npu_sim.lowering.problem import Problem


class LowerContext:
    """The walk's narrow interface for op families (built once per lowering by ``npu_sim.lowering.walk``)."""

    def __init__(self, graph: Graph, arith: Arithmetic, consumers: dict[str, list], layernorm_chains: dict,
                 node_name: Callable, add_tensor: Callable, emit: Callable):
        self.arith = arith
        self.opset = graph.opset
        self.layernorm_chains = layernorm_chains  # output name -> the decomposed LayerNorm chain it stands for
        self._outputs = frozenset(graph.outputs)
        self._consts = graph.consts
        self._shapes = graph.shapes
        self._nodes = graph.nodes
        self._consumer_map = consumers
        self.node_name: Callable[[object], str] = node_name   # a unique program name for an ONNX node
        self.add_tensor: Callable[[Tensor], Tensor] = add_tensor
        self.emit: Callable[[Node], None] = emit           # append a node to the program (multi-node ops)
        # the node being prepared is compiled by the board's NPU compiler (Vela), not prepared by the host runtime
        # (LiteRT): its prepare-time refusals do not apply; what the compiler does instead is a ``hazard``
        self.npu_compiled = False
        self.hazard: Callable[[str], None] = lambda text: None  # a hazard warning on the node being prepared

    def const(self, name: str):
        """The value of a constant (initializer or Constant node), or None."""
        return self._consts.get(name)

    def consumers(self, name: str) -> list:
        """The ONNX nodes that read tensor ``name``."""
        return self._consumer_map.get(name, [])

    def producer(self, name: str):
        """The ONNX node that writes tensor ``name``, or None (graph input, initializer)."""
        return next((n for n in self._nodes if name in n.output), None)

    def is_output(self, name: str) -> bool:
        return name in self._outputs

    def shape(self, name: str) -> tuple[int, ...]:
        shape = self._shapes.get(name)
        if shape is None:
            raise Problem(f"the shape of {name!r} could not be inferred (give fixed input shapes)")
        return shape
