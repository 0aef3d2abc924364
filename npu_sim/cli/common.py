"""What several commands share: the model/board/shape arguments and reading ``--input [NAME=]FILE`` feeds."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

from npu_sim.errors import InputError
from npu_sim.frontend import dataset
from npu_sim.frontend.shapes import free_batch_only, shape_text
from npu_sim.frontend.tflite.flatbuf import is_tflite
from npu_sim.runtime.engines import ENGINES, EngineOptions

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 2, 3
TFLITE_BOARD = "ethos-u55-128"  # the board a .tflite is simulated on unless --board says otherwise


def default_board(model) -> str:
    """``--board`` when not given: ``default``, or for a .tflite (by its identifier or suffix) the board whose
    arithmetic is TFLite's."""
    if model and (Path(model).suffix.lower() == ".tflite" or is_tflite(model)):
        return TFLITE_BOARD
    return "default"


def add_model_arguments(sp, boards: list[str], model_optional: bool = False) -> None:
    sp.add_argument("model", nargs="?" if model_optional else None,
                    help="QDQ ONNX model (as written by onnxruntime quantize_static), or a full-integer .tflite")
    sp.add_argument("--board", default=None,
                    help=f"board preset ({', '.join(boards)}) or path to a board .toml (default: default; "
                         f"{TFLITE_BOARD} for a .tflite, whose integers are TFLite's)")
    sp.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                    help="fix a dynamic input shape, e.g. x=1x3x48x192 (repeatable; a free batch dimension "
                         "is 1 without it)")


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.rpartition("=")
    if not sep or not name or not re.fullmatch(r"\d+(x\d+)*", dims):
        raise InputError(f"--input-shape {text!r}: write NAME=DxDxD, e.g. x=1x3x48x192")
    return name, tuple(int(d) for d in dims.split("x"))


def parse_feed(spec: str, input_names: list[str] | None = None) -> tuple[str, Path]:
    """``NAME=FILE``, or ``FILE`` alone for a model with one input (``input_names`` given)."""
    name, sep, path = spec.partition("=")
    if not sep and input_names is not None and not Path(spec).exists():
        raise InputError(f"--input {spec!r}: file not found; write NAME=FILE (or FILE alone for a model with one "
                         f"input)")
    if not sep and input_names is not None:
        if len(input_names) != 1:
            raise InputError(f"--input {spec!r}: the model has {len(input_names)} inputs {input_names}; "
                             f"name the one this file feeds: --input NAME=FILE")
        name, path = input_names[0], spec
    elif not sep or not name or not path:
        one = " (or FILE alone for a model with one input)" if input_names is not None else ""
        raise InputError(f"--input {spec!r}: write NAME=FILE{one}")
    p = Path(path)
    if not p.is_file():
        kind = "not found" if not p.exists() else "not a regular file (a folder, a FIFO or a device)"
        raise InputError(f"--input {name}: file {path!r} is {kind}")
    return name, p


def read_npy(path: Path, name: str) -> np.ndarray:
    """A ``.npy`` file, or from a ``.npz`` the array named like the input (else its only array)."""
    arrays = dataset.read_arrays(path, f"--input {name}")
    if "" in arrays:
        return arrays[""]
    if name in arrays:
        return arrays[name]
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    held = f"arrays {sorted(arrays)}" if arrays else "no array"
    raise InputError(f"--input {name}: {str(path)!r} holds {held}; name one like the input "
                     f"({name!r}) or keep a single array in the file")


def no_repeats(feeds: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    seen: set[str] = set()
    for name, _ in feeds:
        if name in seen:
            raise InputError(f"--input {name} is given twice; give each input once")
        seen.add(name)
    return feeds


def read_npy_feeds(specs: list[str], input_names: list[str] | None = None) -> dict[str, np.ndarray]:
    """``--input NAME=FILE`` arguments (.npy/.npz; FILE alone given ``input_names`` of one) -> feeds by name."""
    return {name: read_npy(path, name) for name, path in no_repeats([parse_feed(s, input_names) for s in specs])}


# ---------------------------------------------------------------------------------------------------------------
# dynamic input shapes

def fixed_shapes(model, shapes: dict, fed: dict | None = None) -> dict:
    """Every input's shape for a command on ``model`` (an ``OpenModel``): ``--input-shape``, else the shape of
    the file that feeds it (``fed``: name -> array), else a free leading (batch) dimension is 1, with a note on
    stderr; anything still dynamic is the one resolver's error (``npu_sim.frontend.shapes``)."""
    fed = dict(fed or {})
    for name, inp in model.inputs.items():
        if name not in shapes and name not in fed and free_batch_only(inp):
            shown = shape_text((1,) + tuple(inp.dims[1:]))
            print(f"note: input {name!r} has a free batch dimension; using batch 1 ({name}={shown}; "
                  f"--input-shape sets another)", file=sys.stderr)
    return model.shapes(shapes, {n: np.shape(a) for n, a in fed.items()}, free_batch=1)


def empty_tensor(program) -> str | None:
    """The first tensor the program would give an empty or negative dimension (an input too small), or None."""
    producer = {o: n.name for n in program.nodes for o in n.outputs}
    for name, t in program.tensors.items():
        if not t.is_const and t.shape is not None and any(int(d) < 1 for d in t.shape):
            return (f"tensor {name!r}" + (f" of node {producer[name]!r}" if name in producer else "")
                    + f" would have shape [{shape_text(t.shape)}]")
    return None


def refuse_empty(program, shapes: dict) -> None:
    """A clear error (exit 2) when the input shapes make a tensor empty or negative (the input is too small)."""
    where = empty_tensor(program)
    if where:
        given = " ".join(f"{n}={shape_text(s)}" for n, s in shapes.items()) or "its input shape"
        raise InputError(f"{program.model_path}: at {given} {where}: the input is too small for the model; give a "
                         f"larger one with --input-shape")


def add_job_arguments(sp, what: str) -> None:
    """Where a dataset job runs (``--engine``, ``--workers``, ``--ray-address``) and ``--quiet``."""
    sp.add_argument("--engine", choices=ENGINES, default="local",
                    help=f"where {what} runs: local (processes on this machine, default) or ray (a Ray cluster; "
                         "pip install 'npu-sim[ray]')")
    sp.add_argument("--workers", type=int, default=None, metavar="N",
                    help="worker processes (local: default one per core) or Ray actors (default: the cluster's "
                         "CPUs); results do not depend on it")
    sp.add_argument("--ray-address", default=None, metavar="ADDR",
                    help="with --engine ray: the cluster to join (default: $RAY_ADDRESS, else a local cluster "
                         "started for the job)")
    sp.add_argument("--quiet", action="store_true", help="no progress bar (there is none when stderr is not a "
                                                        "terminal either)")


def engine_options(args) -> EngineOptions:
    if args.ray_address and args.engine != "ray":
        raise InputError("--ray-address needs --engine ray")
    return EngineOptions(args.engine, args.workers, args.ray_address)


def take_model(args, lists: tuple[str, ...], usage: str) -> None:
    """The MODEL positional, where it was written after a list option (``--data``, ``--requantize``: they take
    several values, so the list took it): an ``.onnx`` file is never data, so it is the model. ``usage`` ends the
    error when no model was given."""
    for attr in lists:
        items = getattr(args, attr, None) or []
        onnx_files = [i for i in items if i.lower().endswith(".onnx")]
        if onnx_files and args.model is None and len(onnx_files) == 1:
            args.model = onnx_files[0]
            items.remove(onnx_files[0])
        elif onnx_files:
            raise InputError(f"--{attr} {onnx_files[0]!r}: an .onnx file is not data; give the model once, "
                             f"before the options")
    if args.model is None:
        raise InputError(f"{args.command}: give the QDQ model: {usage}")
