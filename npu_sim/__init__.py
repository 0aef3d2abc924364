"""npu-sim: a bit-exact integer inference simulator for int8/int16 NPUs, from onnxruntime QDQ models.

    import npu_sim
    sim = npu_sim.load("model.qdq.onnx", board="default")
    outputs = sim.run({"input": x})            # dequantized float outputs by name
    ints = sim.run({"input": x}, raw=True)     # the board's integers
    tensors = sim.trace({"input": x})          # every quantized tensor, keyed by ONNX float tensor name
    rep = npu_sim.accuracy_report("model.qdq.onnx", data=["images/"], float_model="model.onnx")
    est = npu_sim.estimate("model.qdq.onnx", board="ethos-u55-128")   # cycles per layer and in total
"""
from .board import Board, load_board, presets
from .checks import check
from .accuracy import AccuracyReport
from .accuracy import report as accuracy_report
from .compare import compare_dump
from .cost import Estimate, estimate
from .errors import (BoardError, FloatReferenceError, InputError, ModelLoadError, NpuSimError, QuantizationError,
                     UnsupportedModelError)
from .simulator import Simulator, load

__all__ = ["load", "check", "Simulator", "Board", "load_board", "presets", "NpuSimError", "ModelLoadError",
           "QuantizationError", "UnsupportedModelError", "InputError", "BoardError", "FloatReferenceError",
           "accuracy_report", "AccuracyReport", "compare_dump", "estimate", "Estimate"]
__version__ = "0.1.0"
