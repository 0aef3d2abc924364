"""The CPU the kernels may use: one set of instruction-set features, read once per process, that every kernel
family with instruction-set-specific code chooses from (the int16 pairs of :mod:`kernels.conv_int16` and the
depthwise kernels built on them, the byte quads of :mod:`kernels.conv_u8s8`, the AMX tiles of
:mod:`kernels.conv_amx`).

Each of those families has a pure ``select(features)``: what it would run on a CPU with ``features``. Tests ask it
for every kind of CPU in :data:`KINDS` without running any of that code, so the choice is tested for CPUs this
machine is not (``tests/test_cpu_kinds.py``).

:func:`features` is the part of LLVM's host CPU features (what Numba compiles for) that the kernels look at
(:data:`USED`), less what is masked:

* ``NPU_SIM_CPU=<kind>`` (a key of :data:`KINDS`) keeps only that kind's features: the kernels then choose as on
  such a CPU, with the same integers (``NPU_SIM_CPU=avx2`` on an AVX-512 machine runs the AVX2 pairs). A mask
  only takes features away: a kind the host does not fully have gets what the two share, never an instruction the
  CPU lacks. The plain loops Numba compiles keep the host's instructions; for those too, compile for another CPU:
* with ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` set, Numba compiles for the CPU they name, not the host: the
  features are then only those ``NUMBA_CPU_FEATURES`` switches on (``+avx2,...``) that the host has too, so that
  nothing chosen can be compiled for instructions the target lacks or run with ones the host lacks
  (``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=+avx2`` is an AVX2-only machine all through).
"""
import os
import sys

import numba
from llvmlite import binding as llvm_binding

ENV = "NPU_SIM_CPU"
# LLVM's names of the features some kernel chooses by
USED = frozenset({"avx2", "avx512bw", "avx512vl", "avx512vnni", "avxvnni", "amx-tile", "amx-int8"})
# CPU kinds by the instruction sets the kernels use: (features, what and e.g. which CPUs)
_KINDS = {
    "generic": (frozenset(), "no AVX2"),  # (or not x86): the plain integer and float paths
    "avx2": (frozenset({"avx2"}), "AVX2 (Haswell, Zen 1-3)"),
    "avx512": (frozenset({"avx2", "avx512bw", "avx512vl"}), "AVX-512BW without VNNI (Skylake-SP)"),
    "avx512vnni": (frozenset({"avx2", "avx512bw", "avx512vl", "avx512vnni"}),
                   "AVX-512 VNNI without AVX-VNNI (Cascade Lake, Ice Lake, Zen 4)"),
    "avxvnni": (frozenset({"avx2", "avxvnni"}), "AVX2 with AVX-VNNI, no AVX-512 (Alder Lake, Raptor Lake)"),
    "amx": (USED, "AVX-512 VNNI, AVX-VNNI and AMX (Sapphire Rapids)"),
}
KINDS = {kind: feats for kind, (feats, _) in _KINDS.items()}
DESCRIPTIONS = {kind: text for kind, (_, text) in _KINDS.items()}


def host_features() -> frozenset:
    """The features of :data:`USED` in LLVM's host CPU features (empty where LLVM cannot tell)."""
    try:
        have = llvm_binding.get_host_cpu_features()
    except RuntimeError:
        return frozenset()
    return frozenset(f for f in USED if have.get(f, False))


def compile_target_features(cpu_name, cpu_features: str) -> frozenset | None:
    """The features Numba compiles for when ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` (``cpu_name``,
    ``cpu_features``) name another target than the host: those switched on with ``+``; None for the host."""
    if cpu_name in (None, "", "host") and not cpu_features:
        return None
    on = {f.strip()[1:] for f in (cpu_features or "").split(",") if f.strip().startswith("+")}
    return frozenset(on & USED)


def masked(host: frozenset, target: frozenset | None, kind: str | None) -> frozenset:
    """What the kernels may use: the host's features, within the compile target's (``target``, None for the
    host) and the kind's (``kind``, a key of :data:`KINDS`, None for no mask)."""
    have = host if target is None else host & target
    return have if kind is None else have & KINDS[kind]


def _mask_from_env() -> str | None:
    kind = os.environ.get(ENV, "").strip().lower() or None
    if kind is not None and kind not in KINDS:
        sys.stderr.write(f"npu-sim: {ENV}={os.environ[ENV]!r} is not a CPU kind; use one of "
                         f"{', '.join(KINDS)} (or unset it for this CPU's own features)\n")
        raise SystemExit(2)
    return kind


def _features() -> frozenset:
    return masked(host_features(), compile_target_features(numba.config.CPU_NAME, numba.config.CPU_FEATURES),
                  _mask_from_env())


FEATURES = _features()  # read once: every family chooses from the same set


def features() -> frozenset:
    """The instruction-set features the kernels of this process may use (module docstring)."""
    return FEATURES


def has(feats: frozenset, *needed: str) -> bool:
    return all(f in feats for f in needed)


def kind_of(feats: frozenset) -> str:
    """The widest kind of :data:`KINDS` whose features ``feats`` all has (``generic`` at least)."""
    fits = [k for k, need in KINDS.items() if need <= feats]
    return max(fits, key=lambda k: len(KINDS[k]))


def describe(feats: frozenset | None = None) -> str:
    """One line: the CPU kind the kernels use and its features, e.g. for a benchmark's header."""
    feats = FEATURES if feats is None else feats
    kind = kind_of(feats)
    mask = os.environ.get(ENV)
    return (f"{kind} ({DESCRIPTIONS[kind]}): {', '.join(sorted(feats)) or 'no AVX2'}"
            + (f"; masked by {ENV}={mask}" if mask else ""))
