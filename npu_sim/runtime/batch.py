"""Batches: N samples stacked along a leading axis, run as one program or, where the model cannot be lowered for
a batch, as N single runs -- the same integers either way.

``feed_batch`` tells a batch of feeds from a single sample. ``batch_refusal`` says why a program lowered for a
batch is not the one-sample program with N in front (naming the node), or None when it is: every activation
(every non-constant tensor) must have the one-sample shape with its first dimension 1 replaced by N, the nodes
must be the same, and no node may work along the batch axis (a Softmax or LayerNorm over axis 0 would mix the
samples while keeping their shapes). ``split_feeds`` and ``concat_results`` are the loop of single runs.
A batch runs on ``batch_threads()`` threads, each on its part of the samples with a program of its own
(``part_sizes``, ``split_parts``) and on a CPU of its own (``pin_part``): the kernels release the GIL.
"""
from __future__ import annotations

import os

import numpy as np

from npu_sim.errors import InputError
from npu_sim.ir import Program
from npu_sim.runtime.executor import RunResult

# ops whose axis attribute, or axes given as a constant input (index), is read here; others keep samples apart
_AXES_INPUT = {"ReduceMean": 1, "ReduceSum": 1, "ReduceMax": 1, "ReduceMin": 1, "ReduceProd": 1, "ReduceL1": 1,
               "ReduceL2": 1, "ReduceLogSum": 1, "ReduceLogSumExp": 1, "ReduceSumSquare": 1, "Squeeze": 1,
               "Unsqueeze": 1, "CumSum": 1, "Slice": 3}
_DEFAULT_AXES = {"MeanVarianceNormalization": (0, 2, 3)}
_CONVERSIONS = ("QuantizeLinear", "DequantizeLinear")  # their axis is the quantization's channel axis


def _shape(shape) -> str:
    return "x".join(map(str, shape)) or "a scalar"


def feed_batch(program: Program, feeds: dict) -> int | None:
    """N when every feed is its input's one-sample shape (first dimension 1) with N first, N > 1 or the shapes
    otherwise differ; None when the feeds are one sample or are wrong in another way (``check_feeds`` says how).
    Different N across inputs is an ``InputError``."""
    if set(feeds) != set(program.inputs):
        return None
    sizes = {}
    for name, tname in program.inputs.items():
        want = program.tensors[tname].shape
        got = np.shape(feeds[name])
        if tuple(got) == tuple(want):
            sizes[name] = 1
            continue
        if not want or want[0] != 1 or len(got) != len(want) or tuple(got[1:]) != tuple(want[1:]) or got[0] < 1:
            return None
        sizes[name] = int(got[0])
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{name!r} {n}" for name, n in sizes.items())
        raise InputError(f"the inputs have different batch sizes ({listed}); give every input the same number of "
                         f"samples along its first dimension")
    n = next(iter(sizes.values()), 1)
    return n if n > 1 else None


def axis_refusal(graph) -> str | None:
    """The first ONNX node (of a graph read for a batch) that works along axis 0 of an activation, as a reason."""
    for node in graph.nodes:
        if node.op_type in _CONVERSIONS or not node.input or node.input[0] in graph.consts:
            continue
        rank = len(graph.shapes.get(node.input[0], ()))
        axes = list(_DEFAULT_AXES.get(node.op_type, ()))
        for a in node.attribute:
            if a.name == "axis" and a.type == a.INT:
                axes = [a.i]
            elif a.name == "axes" and a.type == a.INTS:
                axes = list(a.ints)
        index = _AXES_INPUT.get(node.op_type)
        if index is not None and len(node.input) > index and node.input[index] in graph.consts:
            axes = [int(v) for v in np.ravel(graph.consts[node.input[index]])]
        if any(ax == 0 or (rank and ax + rank == 0) for ax in axes):
            return f"node {node.name or node.output[0]!r} ({node.op_type}) reads or changes the batch axis 0 of its input"
    return None


def batch_refusal(single: Program, batched: Program, n: int) -> str | None:
    """Why ``batched`` (lowered for ``n`` samples) does not run them as ``n`` runs of ``single`` would, or None."""
    if [(nd.name, nd.op) for nd in single.nodes] != [(nd.name, nd.op) for nd in batched.nodes]:
        first = next((a.name for a, b in zip(single.nodes, batched.nodes) if (a.name, a.op) != (b.name, b.op)),
                     "the last node")
        return f"the program for a batch differs from the one-sample program at node {first!r}"
    if single.inputs != batched.inputs or single.outputs != batched.outputs:
        return "the program for a batch has other inputs or outputs"
    producer = {out: node for node in single.nodes for out in node.outputs}
    for name, t in single.tensors.items():
        if t.is_const:
            continue
        b = batched.tensors.get(name)
        node = producer.get(name)
        where = f"node {node.name!r} ({node.op}) gives" if node is not None else "input"
        if not t.shape or t.shape[0] != 1:
            return f"{where} tensor {t.float_name!r} of shape {_shape(t.shape)}, without a batch dimension of 1"
        if b is None or b.is_const or tuple(b.shape) != (n,) + tuple(t.shape[1:]):
            got = "nothing" if b is None else _shape(b.shape)
            return (f"{where} tensor {t.float_name!r} of shape {got} for a batch of {n}, where "
                    f"{_shape((n,) + tuple(t.shape[1:]))} is needed")
        if b.float_name != t.float_name or (b.q is None) != (t.q is None) or (
                t.q is not None and b.q.dtype != t.q.dtype):
            return f"{where} tensor {t.float_name!r} of another type for a batch"
    if len([t for t in batched.tensors.values() if not t.is_const]) != len(
            [t for t in single.tensors.values() if not t.is_const]):
        return "the program for a batch has other intermediate tensors"
    return None


def batch_threads() -> int:
    """How many threads a batch runs on: ``NPU_SIM_THREADS``, else the CPUs this process may use (a dataset job's
    worker processes are given 1: ``npu_sim.runtime.engines``)."""
    value = os.environ.get("NPU_SIM_THREADS", "")
    if value.strip():
        try:
            return max(1, int(value))
        except ValueError:
            raise InputError(f"NPU_SIM_THREADS={value!r}: give a whole number of threads, e.g. 1") from None
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def pin_part(i: int, parts: int) -> None:
    """Keep the calling thread, which runs part ``i`` of a batch of ``parts`` threads, on the ``i``-th CPU this
    process may use, where there are as many. New threads start beside the thread that made them, and the scheduler
    moved one only after some milliseconds: a PP-OCR cls batch of 16 on 2 threads took 17-21 ms after the caller had
    kept its CPU busy (single runs), against 10-11 ms back to back. The thread ends with the batch."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) >= parts:
            os.sched_setaffinity(0, {cpus[i]})  # 0: this thread only
    except (AttributeError, OSError):  # no affinity on this platform, or a set the system refuses: run unpinned
        pass


def part_sizes(n: int, parts: int) -> list[int]:
    """``n`` samples in ``parts`` consecutive parts as even as can be, larger first."""
    return [n // parts + (i < n % parts) for i in range(parts)]


def split_parts(feeds: dict, sizes: list[int]) -> list[dict]:
    """The feeds of a batch cut along axis 0 into consecutive parts of ``sizes`` samples."""
    out, start = [], 0
    for size in sizes:
        out.append({name: np.asarray(value)[start:start + size] for name, value in feeds.items()})
        start += size
    return out


def split_feeds(feeds: dict, n: int) -> list[dict]:
    """The ``n`` one-sample feeds of a batch (each keeps its leading dimension of 1)."""
    return [{name: np.asarray(value)[i:i + 1] for name, value in feeds.items()} for i in range(n)]


def concat_results(results: list[RunResult]) -> RunResult:
    """One result for single runs in sample order: each kept tensor concatenated along axis 0 (scalars stacked),
    overflow counts and node times added up."""
    names = [k for k in results[0].values if all(k in r.values for r in results[1:])]
    values = {}
    for k in names:
        parts = [r.values[k] for r in results]
        values[k] = np.concatenate(parts) if np.ndim(parts[0]) else np.stack(parts)  # a scalar: one per sample
    merged = RunResult(values)
    for r in results:
        for k, v in r.overflows.items():
            merged.overflows[k] = merged.overflows.get(k, 0) + v
        for k, v in r.seconds.items():
            merged.seconds[k] = merged.seconds.get(k, 0.0) + v
    return merged
