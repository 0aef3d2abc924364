"""The exceptions npu-sim raises for bad input. The CLI prints their message and exits with code 2.

Every message names the file, node or tensor at fault and says what to do about it.
"""


class NpuSimError(Exception):
    """Base class: a problem with what the user gave us (model, input, board), not a bug."""


class ModelLoadError(NpuSimError):
    """The file is missing, unreadable, not ONNX, or references external data unsafely."""


class QuantizationError(NpuSimError):
    """The model's quantization parameters are invalid (NaN/zero/negative scale, zero point out of range, ...)."""


class UnsupportedModelError(NpuSimError):
    """The model (or some of its nodes) cannot be turned into an integer program: float model, unsupported ops."""

    def __init__(self, message, problems=()):
        super().__init__(message)
        self.problems = list(problems)  # [(node_name, op_type, reason), ...]


class InputError(NpuSimError):
    """A feed has the wrong name, shape or dtype, or a dynamic dimension was left unresolved."""


class BoardError(NpuSimError):
    """A board description is missing or malformed."""


class FloatReferenceError(NpuSimError):
    """The float reference for an accuracy report cannot be built: the float model is missing or unreadable,
    does not share the quantized model's tensor names, or onnxruntime (needed to run it) is not installed."""
