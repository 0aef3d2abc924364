"""The model path the front door opens (``npu_sim.frontend.loading.load_file``): checked before any byte is
read."""
from __future__ import annotations

from pathlib import Path

from npu_sim.errors import ModelLoadError


def model_file(path) -> Path:
    """``path`` as a Path to a regular file; else a ``ModelLoadError`` saying what it is instead (opening a FIFO
    or a device would block or read forever, a folder is not a model)."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"model file {str(p)!r} not found")
    if not p.is_file():
        raise ModelLoadError(f"{str(p)!r} is not a regular file (a folder, a FIFO or a device); give the .onnx file")
    return p
