"""The one place that sets Numba options for every kernel.

``cache=True`` keeps compiled code on disk between runs (first use pays the compile once).
No ``fastmath``: integer code must not be reassociated, and the float requantization of the ``onnx``
arithmetic must round exactly as IEEE float32 does.
"""
import numba

JIT_OPTIONS = {"cache": True, "nogil": True, "fastmath": False}


def njit(fn):
    return numba.njit(**JIT_OPTIONS)(fn)

