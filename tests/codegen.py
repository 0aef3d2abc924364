"""Code-generation checks for a named CPU, compiled and never run: a kernel compiled for Alder Lake holds VEX
instructions (AVX-VNNI) that an AVX-512 machine without AVX-VNNI (Zen 4) cannot execute, so a check of the code
for another CPU only compiles it and reads the assembly.

:func:`compile_for` runs ``code`` in a fresh interpreter whose Numba compiles for ``cpu_name`` with
``cpu_features``. The code wraps the kernels it inspects in ``CompileOnly`` (defined before it): calling one
compiles it for the types of the arguments and returns without running it, so the callers that bind and call a
kernel (``bind(...)(x, out)``) can be used as they are. Nothing compiled in that interpreter runs, except what
importing the kernels runs (none of them calls a kernel at import; ``kernels.cpu`` gives the kernels only the
features the host and the named CPU share).
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PRELUDE = '''
import re
import numba
import numpy as np


class CompileOnly:
    """A Numba function, compiled for the types of its arguments on each call and not run."""

    def __init__(self, py_func):
        self.dispatcher = numba.njit(py_func)  # not cached: inspect_asm needs the compiled text

    def __call__(self, *args):
        self.dispatcher.compile(tuple(numba.typeof(a) for a in args))

    def asm(self):
        return self.dispatcher.inspect_asm(self.dispatcher.signatures[0])

    def llvm(self):
        return self.dispatcher.inspect_llvm(self.dispatcher.signatures[0])

'''


def compile_for(cpu_name: str, cpu_features: str, code: str, cache_dir) -> subprocess.CompletedProcess:
    """Run ``PRELUDE + code`` with Numba compiling for ``cpu_name`` (``NUMBA_CPU_NAME``) and ``cpu_features``
    (``NUMBA_CPU_FEATURES``, e.g. ``+avx2,+avxvnni``); its own cache folder."""
    env = dict(os.environ, NUMBA_CPU_NAME=cpu_name, NUMBA_CPU_FEATURES=cpu_features, NUMBA_CACHE_DIR=str(cache_dir))
    env.pop("NPU_SIM_CPU", None)
    return subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
