"""npu-sim: a bit-exact integer inference simulator for int8/int16 NPUs, from onnxruntime QDQ models.

    import npu_sim
    sim = npu_sim.load("model.qdq.onnx", board="default")
    outputs = sim.run({"input": x})            # dequantized float outputs by name
    ints = sim.run({"input": x}, raw=True)     # the board's integers
    tensors = sim.trace({"input": x})          # every quantized tensor, keyed by ONNX float tensor name
    rep = npu_sim.accuracy_report("model.qdq.onnx", data=["images/"], float_model="model.onnx")
    est = npu_sim.estimate("model.qdq.onnx", board="ethos-u55-128")   # cycles per layer and in total
    npu_sim.run_dataset("model.qdq.onnx", ["images/"], npu_sim.DatasetWriter("out"))  # shards + manifest in out/

``import npu_sim`` is cheap: the names below are loaded on first use (``npu_sim.api``, ``npu_sim.errors``, and
``npu_sim.render.dataset_out`` for ``DatasetWriter``),
so ``npu-sim --help`` and ``--version`` load neither numba nor onnx.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "load": "npu_sim.api", "check": "npu_sim.api", "estimate": "npu_sim.api", "accuracy_report": "npu_sim.api",
    "compare_dump": "npu_sim.api", "Simulator": "npu_sim.api", "AccuracyReport": "npu_sim.api",
    "Estimate": "npu_sim.api", "Board": "npu_sim.api", "load_board": "npu_sim.api", "presets": "npu_sim.api",
    "run_dataset": "npu_sim.api", "DatasetSummary": "npu_sim.api", "EngineOptions": "npu_sim.api",
    "open_model": "npu_sim.api",
    "DatasetWriter": "npu_sim.render.dataset_out",
    **{name: "npu_sim.errors" for name in ("NpuSimError", "ModelLoadError", "QuantizationError",
                                           "UnsupportedModelError", "InputError", "BoardError", "FloatReferenceError")},
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'npu_sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
