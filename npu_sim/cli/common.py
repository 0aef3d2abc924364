"""What several commands share: the model/board/shape arguments and reading ``--input NAME=FILE`` feeds."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from npu_sim.errors import InputError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 2, 3


def add_model_arguments(sp, boards: list[str]) -> None:
    sp.add_argument("model", help="QDQ ONNX model (as written by onnxruntime quantize_static)")
    sp.add_argument("--board", default="default",
                    help=f"board preset ({', '.join(boards)}) or path to a board .toml (default: default)")
    sp.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                    help="fix a dynamic input shape, e.g. x=1x3x48x192 (repeatable)")


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.rpartition("=")
    if not sep or not name or not re.fullmatch(r"\d+(x\d+)*", dims):
        raise InputError(f"--input-shape {text!r}: write NAME=DxDxD, e.g. x=1x3x48x192")
    return name, tuple(int(d) for d in dims.split("x"))


def parse_feed(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise InputError(f"--input {spec!r}: write NAME=FILE (a .npy file or an image)")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--input {name}: file {path!r} not found")
    return name, p


def read_npy(path: Path, name: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:
        raise InputError(f"--input {name}: cannot read {str(path)!r} as a .npy array ({exc})") from None


def read_npy_feeds(specs: list[str]) -> dict[str, np.ndarray]:
    """``--input NAME=FILE.npy`` arguments -> feeds by input name."""
    feeds = {}
    for spec in specs:
        name, path = parse_feed(spec)
        feeds[name] = read_npy(path, name)
    return feeds
