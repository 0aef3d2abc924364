"""A read .tflite (``flatbuf.TflModel``) as the QDQ ONNX model the rest of npu-sim reads.

Every TFLite tensor keeps its name and its layout: an activation is the ONNX integer tensor of the same name,
NHWC as TFLite stores it (a board's dump matches by name, with no layout guess). Each operator becomes its QDQ
group (``npu_sim.frontend.tflite.ops``) which the ``tflite`` arithmetic (board ``requantize = "tflite"``) lowers to
TFLite's own integer kernels; ``npu_sim.frontend.tflite.builder`` says how names, layouts and constants are kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import helper

from npu_sim.errors import UnsupportedModelError
from npu_sim.frontend.tflite.builder import ELEM, Builder
from npu_sim.frontend.tflite.flatbuf import TflModel
from npu_sim.frontend.tflite.ops import TRANSLATORS as _BASIC
from npu_sim.frontend.tflite.ops import check_arity, fold
from npu_sim.frontend.tflite.ops_more import MORE

TRANSLATORS = {**_BASIC, **MORE}

OPSET = 21
PRODUCER = "npu-sim (TFLite frontend)"


@dataclass(frozen=True)
class Translation:
    model: onnx.ModelProto
    layout: frozenset[str]       # the ONNX Transpose nodes that only change NHWC <-> NCHW
    tensors: dict[str, int]      # ONNX tensor name -> TFLite tensor index, for every TFLite tensor used
    operators: tuple[str, ...] = ()  # the file's builtin operators, in its order
    producer: str = ""           # "TFLite schema version N" and the file's description


def translate(m: TflModel) -> Translation:
    """The ONNX QDQ model of ``m`` (module docstring); ``UnsupportedModelError`` naming the first operator it
    cannot translate."""
    b = Builder(m)
    if not m.operators:
        raise UnsupportedModelError(f"{m.path}: the model has no operators: nothing to simulate")
    for op in vela_order(m):
        check_arity(b, op)
        if fold(b, op):
            continue
        fn = TRANSLATORS.get(op.op)
        if fn is None:
            raise UnsupportedModelError(
                f"{m.path}: {m.label(op)}: npu-sim does not simulate TFLite's {op.op} yet (it simulates "
                f"{', '.join(sorted(TRANSLATORS))})")
        fn(b, op)
    graph = helper.make_graph(b.nodes, m.path.stem, [_value_info(b, i) for i in m.inputs],
                              [_value_info(b, i) for i in m.outputs], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER)
    model.ir_version = 10
    used = {n for node in b.nodes for n in (*node.input, *node.output)} | {b.names[i] for i in m.inputs}
    producer = f"TFLite schema version {m.version}" + (f" ({m.description})" if m.description else "")
    return Translation(model, frozenset(b.layout), {b.names[t.index]: t.index for t in m.tensors
                                                    if b.names[t.index] in used},
                       tuple(op.op for op in m.operators), producer)


def vela_order(m: TflModel) -> list:
    """The operators in the order Vela schedules them (its pass packing: from the graph outputs back, an operator
    once every consumer of its outputs is placed, its inputs then visited in order; the list reversed): the order
    the NPU runs and Vela's SRAM figure assumes (on a residual block, the shortcut branch before the main one,
    where the file lists the main one first). Operators that reach no output keep their place at the end."""
    producer = {t: op for op in m.operators for t in op.outputs}
    need: dict[int, int] = {}
    for op in m.operators:
        for t in op.inputs:
            if t >= 0:
                need[t] = need.get(t, 0) + 1
    for t in m.outputs:
        need[t] = need.get(t, 0) + 1
    seen: dict[int, int] = {}
    placed: list = []
    done: set[int] = set()
    stack = list(reversed(m.outputs))
    while stack:
        t = stack.pop()
        seen[t] = seen.get(t, 0) + 1
        op = producer.get(t)
        if op is None or op.index in done or any(seen.get(o, 0) < need.get(o, 0) for o in op.outputs):
            continue
        done.add(op.index)
        placed.append(op)
        stack.extend(reversed([i for i in op.inputs if i >= 0]))
    order = placed[::-1]
    return order + [op for op in m.operators if op.index not in done]


def _value_info(b: Builder, i: int):
    t = b.tensor(i)
    if t.dtype not in ELEM:
        raise b.refuse_tensor(i, f"is {t.dtype}; graph inputs and outputs must be numeric")
    return helper.make_tensor_value_info(b.names[i], ELEM[t.dtype], list(t.shape))

