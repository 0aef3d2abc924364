"""What several commands share: the model/board/shape arguments and reading ``--input [NAME=]FILE`` feeds."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from npu_sim.errors import InputError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 2, 3


def add_model_arguments(sp, boards: list[str], model_optional: bool = False) -> None:
    sp.add_argument("model", nargs="?" if model_optional else None,
                    help="QDQ ONNX model (as written by onnxruntime quantize_static)")
    sp.add_argument("--board", default="default",
                    help=f"board preset ({', '.join(boards)}) or path to a board .toml (default: default)")
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
    if not sep and input_names is not None and Path(spec).is_file():
        if len(input_names) != 1:
            raise InputError(f"--input {spec!r}: the model has {len(input_names)} inputs {input_names}; "
                             f"name the one this file feeds: --input NAME=FILE")
        name, path = input_names[0], spec
    elif not sep or not name or not path:
        one = " (or FILE alone for a model with one input)" if input_names is not None else ""
        raise InputError(f"--input {spec!r}: write NAME=FILE{one}")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--input {name}: file {path!r} not found")
    return name, p


def read_npy(path: Path, name: str) -> np.ndarray:
    """A ``.npy`` file, or from a ``.npz`` the array named like the input (else its only array)."""
    try:
        if path.suffix.lower() != ".npz":
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:
        raise InputError(f"--input {name}: cannot read {str(path)!r} as a .npy/.npz array ({exc})") from None
    if name in arrays:
        return arrays[name]
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    raise InputError(f"--input {name}: {str(path)!r} holds arrays {sorted(arrays)}; name one like the input "
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
