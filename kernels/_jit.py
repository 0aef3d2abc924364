"""The one place that sets Numba options for every kernel.

``cache=True`` keeps compiled code on disk between runs (first use pays the compile once).
No ``fastmath``: integer code must not be reassociated, and the float requantization of the ``onnx``
arithmetic must round exactly as IEEE float32 does.

:func:`njit_noalloc` is for kernels that allocate nothing (their callers pass every output and scratch array):
compiled without Numba's reference counting, the array views their loops take per row or channel (``x[n, c]``,
``acc[a:b]``) are plain pointer arithmetic. With it, each view costs an atomic increment and decrement of its
array's reference count (~10 ns), which on this project's short rows (2-3 rows of 96 in PP-OCR cls) was a
third of an elementwise Mul. Numba refuses to compile an allocation in such a kernel, and the functions it calls
inherit the setting; these kernels return no arrays either (the caller keeps the ones it passed).

A kernel that passes a constant to another kernel passes it typed (``np.int64(0)``, not ``0``): a bare literal
makes Numba compile the callee once more for that literal value, which only costs first-use compile time.
"""
import numba

JIT_OPTIONS = {"cache": True, "nogil": True, "fastmath": False}


def njit(fn):
    return numba.njit(**JIT_OPTIONS)(fn)


def njit_noalloc(fn):
    return numba.njit(**JIT_OPTIONS, _nrt=False)(fn)
