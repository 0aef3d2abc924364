"""Benchmark: how many multiply-add instructions this CPU retires per cycle -- the physical bound of the
convolution kernels (issue 33, item 4).

    python benchmarks/peak.py [--seconds 0.5]

Times, in one thread, blocks of inline assembly compiled by LLVM through Numba (nothing else in the loop):

* the clock: a chain of 100 dependent 64-bit ``add`` (one cycle each on every x86 CPU) -> cycles per second;
* ``vpmaddwd`` (AVX2, 256-bit: 16 int16 multiply-adds into 8 int32 pair sums; the int16 pairs of
  ``kernels/conv_int16.py``): 12 independent instructions per block -> instructions per cycle;
* ``vpmaddubsw`` (AVX2, 256-bit: 32 uint8 x int8 multiply-adds into 16 saturating int16 pair sums): what
  onnxruntime's u8s8 kernels use on CPUs without VNNI (not exact: npu-sim never uses it);
* ``vpdpbusd`` (AVX-512 VNNI, 512-bit: 64 uint8 x int8 multiply-adds; the byte quads of ``kernels/conv_u8s8.py``)
  where the CPU has it, else skipped with the reason (it is never executed on a CPU without it).

Prints each as instructions per cycle and multiply-adds per cycle and per second. docs/PERFORMANCE.md compares the
convolution kernels' rates with these. Every instruction is checked against the CPU's features first
(``kernels.cpu``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from llvmlite import binding, ir
from numba import njit, types
from numba.extending import intrinsic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernels import cpu  # noqa: E402

binding.initialize_native_asmparser()  # Numba's JIT parses inline assembly only with it

BLOCK = 100  # dependent adds per block (the clock)
INDEPENDENT = 12  # independent multiply-adds per block


def _asm_block(text: str, constraint: str):
    @intrinsic
    def block(typingctx, x):
        sig = types.int64(types.int64)

        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64)])
            return builder.asm(fnty, text, constraint, [args[0]], side_effect=True)

        return sig, codegen

    @njit
    def loop(n):
        x = 0
        for _ in range(n):
            x = block(x)
        return x

    return loop


def _independent(instruction: str, register: str):
    """A loop of blocks of ``INDEPENDENT`` ``instruction``s, each writing its own ``register`` (ymm or zmm)."""
    return _asm_block("\n".join(f"{instruction} %{register}0, %{register}1, %{register}{2 + i}"
                                 for i in range(INDEPENDENT)),
                      "=r,0," + ",".join(f"~{{{register}{2 + i}}}" for i in range(INDEPENDENT)))


_ADDS = _asm_block("\n".join(["addq $$1, $0"] * BLOCK), "=r,0")
_VPMADDWD = _independent("vpmaddwd", "ymm")
_VPMADDUBSW = _independent("vpmaddubsw", "ymm")
_VPDPBUSD = _independent("vpdpbusd", "zmm")


def _rate(loop, per_block: int, seconds: float) -> float:
    """Instructions per second of ``loop`` (blocks of ``per_block``), best of a few timed runs."""
    loop(10)  # compile
    n, best = 1000, 0.0
    while True:
        t0 = time.perf_counter()
        loop(n)
        dt = time.perf_counter() - t0
        if dt > seconds / 5:
            break
        n *= 4
    for _ in range(5):
        t0 = time.perf_counter()
        loop(n)
        best = max(best, n * per_block / (time.perf_counter() - t0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="about how long each measurement runs")
    args = ap.parse_args()
    features = cpu.features()
    print(f"CPU: {cpu.describe()}")
    hz = _rate(_ADDS, BLOCK, args.seconds)
    print(f"clock: {hz / 1e9:.2f} GHz (dependent adds, one per cycle)")
    rows = [("vpmaddwd ymm (AVX2: int16 pairs)", "avx2", _VPMADDWD, 16),
            ("vpmaddubsw ymm (AVX2: onnxruntime's u8s8 without VNNI; its int16 pair sums saturate)", "avx2",
             _VPMADDUBSW, 32),
            ("vpdpbusd zmm (AVX-512 VNNI: byte quads)", "avx512vnni", _VPDPBUSD, 64)]
    for name, feature, loop, macs in rows:
        if feature not in features:
            print(f"{name}: skipped, this CPU lacks {feature}")
            continue
        rate = _rate(loop, INDEPENDENT, args.seconds)
        print(f"{name}: {rate / hz:.2f} per cycle = {macs * rate / hz:.1f} multiply-adds per cycle, "
              f"{macs * rate / 1e9:.1f} G per second")


if __name__ == "__main__":
    main()
