"""Writing output files so that a reader never sees a half-written one: a file is written under a temporary name
and renamed; a folder is filled under a temporary name beside its target and then replaces it whole."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np


def write_file(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write(f)`` into a temporary file beside ``path``, then renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: Path, data: bytes) -> None:
    """``data`` into ``path``, atomically (see :func:`write_file`)."""
    write_file(path, lambda f: f.write(data))


def save_npy(path: Path, arr: np.ndarray) -> None:
    """``np.save`` into ``path``, atomically (see :func:`write_file`)."""
    write_file(path, lambda f: np.save(f, arr))


def replace_folder(target: Path, fill: Callable[[Path], None]) -> Path:
    """``fill(tmp)`` writes the folder's content into a temporary folder beside ``target``, which then replaces
    ``target`` whole (an old one is moved aside first and removed after); on any failure ``target`` is left as
    it was and the temporary folder removed. Returns ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    old = None
    try:
        fill(tmp)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / target.name)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target
