"""Writing output files so that a reader never sees a half-written one: a file is written under a temporary name
and renamed; a folder is filled under a temporary name beside its target and then replaces it whole."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np


def save_npy(path: Path, arr: np.ndarray) -> None:
    """``np.save`` to a temporary name beside ``path``, then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.save(f, arr)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
