"""`npu-sim compare DUMP_DIR MODEL`: compare a tensor dump with the simulation, bit for bit, in execution order.

A dump is a folder with index.json, which maps each ONNX float tensor name to {"file": ..., ...}: the file is
a .npy of the tensor's integers, relative to the folder; "scale", when present, is checked against the model's
(the other fields npu-sim run --dump-all writes -- "tensor", "dtype", "shape", "zero_point", "producer" -- are
for people). npu-sim run --dump-all writes such a folder; a board's dump tool can write the same layout. The
simulation is fed the dump's own input tensor (the model input's quantized integers, stored under the input's
name) unless --input gives a float .npy. Exit codes: 0 every dumped tensor equal, 1 a mismatch (the first one is
named), 2 bad input.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npu_sim.errors import InputError
from npu_sim.frontend.dataset import model_inputs
from npu_sim.ir import Program
from npu_sim.runtime.executor import execute
from npu_sim.runtime.simulator import load

EXIT_EQUAL, EXIT_MISMATCH = 0, 1


@dataclass
class TensorDiff:
    tensor: str             # ONNX float tensor name (the dump's key)
    ir_tensor: str
    producer: str           # node of the program that writes it
    op: str
    status: str             # "equal" | "differs" | "shape" (shapes differ)
    total: int = 0
    differing: int = 0
    max_diff: int = 0
    first_index: tuple[int, ...] | None = None
    dump_value: int | None = None
    sim_value: int | None = None
    dump_shape: list[int] = field(default_factory=list)
    sim_shape: list[int] = field(default_factory=list)


@dataclass
class Comparison:
    tensors: list[TensorDiff]               # in execution order
    not_in_dump: list[str]                  # quantized tensors of the program the dump lacks
    not_in_model: list[str]                 # dump entries the program does not produce
    notes: list[str]

    @property
    def first_mismatch(self) -> TensorDiff | None:
        return next((t for t in self.tensors if t.status != "equal"), None)

    @property
    def equal(self) -> bool:
        return self.first_mismatch is None


def read_index(dump_dir) -> dict:
    d = Path(dump_dir)
    if not d.is_dir():
        raise InputError(f"dump folder {str(d)!r} does not exist (write one with npu-sim run --dump-all --out DIR)")
    idx = d / "index.json"
    if not idx.is_file():
        raise InputError(f"{str(d)!r} holds no index.json; a dump is the folder written by npu-sim run --dump-all")
    try:
        index = json.loads(idx.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{idx}: not valid JSON ({exc})") from None
    if not isinstance(index, dict) or not all(isinstance(v, dict) and "file" in v for v in index.values()):
        raise InputError(f"{idx}: expected an object mapping tensor names to {{\"file\": \"NAME.npy\", ...}}")
    return index


def _load_entry(dump_dir: Path, name: str, entry: dict) -> np.ndarray:
    path = dump_dir / entry["file"]
    if not path.is_file():
        raise InputError(f"dump tensor {name!r}: file {str(path)!r} listed in index.json is missing")
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise InputError(f"dump tensor {name!r}: cannot read {str(path)!r} as a .npy array ({exc})") from None
    if arr.dtype.kind not in "iu":
        raise InputError(f"dump tensor {name!r}: {str(path)!r} holds {arr.dtype} values; a dump holds integers")
    return arr


def compare_dump(dump_dir, model, board="default", inputs: dict | None = None,
                 input_shapes: dict | None = None) -> Comparison:
    """Re-simulate ``model`` on the dump's input (or ``inputs``: name -> float array) and compare every dumped
    tensor with the simulation's integers."""
    d = Path(dump_dir)
    index = read_index(d)
    inputs = dict(inputs or {})
    feed_shapes = {k: np.shape(v) for k, v in inputs.items()}
    for name in model_inputs(model):  # a dynamic input takes the shape of the dumped input tensor
        if name not in feed_shapes and name in index:
            feed_shapes[name] = tuple(_load_entry(d, name, index[name]).shape)
    sim = load(model, board=board, input_shapes=input_shapes, feed_shapes=feed_shapes)
    prog = sim.program
    feeds, prog_inputs, skip = _feeds(prog, d, index, inputs)
    run_prog = Program(prog.tensors, [n for n in prog.nodes if n.name not in skip], prog_inputs, prog.outputs,
                       prog.board, prog.model_path, prog.opset)
    values = execute(run_prog, feeds, keep_all=True).values
    diffs, seen, notes = [], set(), []
    fed = set(feeds)
    for node in prog.nodes:
        for out in node.outputs:
            t = prog.tensors[out]
            if t.q is None or t.is_const or t.float_name in seen or out in fed:
                continue
            seen.add(t.float_name)
            if t.float_name not in index:
                continue
            entry = index[t.float_name]
            arr = _load_entry(d, t.float_name, entry)
            if "scale" in entry and t.q.per_tensor and not np.isclose(float(entry["scale"]), float(t.q.scale),
                                                                       rtol=1e-6, atol=0):
                notes.append(f"{t.float_name}: dump scale {entry['scale']} differs from the model's "
                             f"{float(t.q.scale):.9g} (is the dump from this model?)")
            diffs.append(_diff(TensorDiff(t.float_name, out, node.name, node.op, "equal"), arr, values[out]))
    program_names = {prog.tensors[o].float_name for n in prog.nodes for o in n.outputs}
    program_names |= {prog.tensors[t].float_name for t in prog.inputs.values()}
    program_names |= set(prog.inputs)
    not_in_model = [k for k in index if k not in program_names]
    not_in_dump = sorted(seen - set(index))
    if not diffs:
        raise InputError(f"none of the {len(index)} tensors of {str(d)!r} is a tensor of {model}; is the dump from "
                         f"this model?")
    return Comparison(diffs, not_in_dump, not_in_model, notes)


def _feeds(prog: Program, d: Path, index: dict, inputs: dict) -> tuple[dict, dict, set]:
    """What the simulation is fed: ``inputs`` where given, else the dump's tensor of each input; for a float
    input, the dump's integers go straight to its Quantize's output (that node is skipped).
    Returns (feeds, the run's program inputs, names of the nodes to skip)."""
    skip, feeds, prog_inputs = set(), {}, {}
    for name, tname in prog.inputs.items():
        t = prog.tensors[tname]
        if name in inputs:
            feeds[name] = np.asarray(inputs[name])
            prog_inputs[name] = tname
            continue
        if t.q is None:
            stub = next((n for n in prog.nodes if n.op == "Quantize" and n.inputs[0] == tname), None)
            qt = prog.tensors[stub.outputs[0]] if stub is not None else None
            key = qt.float_name if qt is not None else name
            if stub is None or key not in index:
                raise InputError(f"the dump has no tensor for input {name!r}; pass --input {name}=FILE.npy")
            arr = _load_entry(d, key, index[key])
            if arr.dtype != qt.q.np_dtype or tuple(arr.shape) != tuple(qt.shape):
                raise InputError(f"dump tensor {key!r} (the input): {arr.dtype}{list(arr.shape)}, the model "
                                 f"expects {np.dtype(qt.q.np_dtype).name}{list(qt.shape)}")
            skip.add(stub.name)
            feeds[stub.outputs[0]] = arr
            prog_inputs[stub.outputs[0]] = stub.outputs[0]
        else:
            if t.float_name not in index and name not in index:
                raise InputError(f"the dump has no tensor for input {name!r}; pass --input {name}=FILE.npy")
            key = t.float_name if t.float_name in index else name
            feeds[name] = _load_entry(d, key, index[key])
            prog_inputs[name] = tname
    return feeds, prog_inputs, skip


def _diff(td: TensorDiff, arr: np.ndarray, sim_arr: np.ndarray) -> TensorDiff:
    """Fill ``td`` with the comparison of the dumped integers ``arr`` and the simulated ``sim_arr``."""
    td.total, td.dump_shape, td.sim_shape = int(sim_arr.size), list(arr.shape), list(sim_arr.shape)
    if tuple(arr.shape) != tuple(sim_arr.shape):
        td.status = "shape"
        return td
    diff = arr.astype(np.int64) - sim_arr.astype(np.int64)
    nz = diff != 0
    td.differing = int(np.count_nonzero(nz))
    if td.differing:
        td.status = "differs"
        td.max_diff = int(np.abs(diff).max())
        first = np.unravel_index(int(np.argmax(nz.reshape(-1))), diff.shape)
        td.first_index = tuple(int(i) for i in first)
        td.dump_value = int(arr[first])
        td.sim_value = int(sim_arr[first])
    return td
