"""Which kernels run on each kind of CPU (kernels/cpu.py), tested without being that CPU:

* every family's choice for every kind of :data:`kernels.cpu.KINDS`, from its pure ``select(features)``;
* the masks: ``NPU_SIM_CPU`` and Numba's compile target only ever take features away from the host's;
* end to end, in fresh processes masked to each kind this machine can stand in for (a kind it lacks collapses onto
  the features the two share): the kernels chosen, and whole real models tracing the same integers on every one.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernels import conv_amx, conv_int16, conv_u8s8, cpu, lut8
from tests.qdq_models import real_models

ROOT = Path(__file__).resolve().parent.parent

# kind -> (the int16 pairs' set, the byte quads' set, the AMX tiles): what each family is given
EXPECTED = {
    "generic": (None, None, False),
    "avx2": ("avx2", None, False),
    "avx512": ("avx512bw", None, False),
    "avx512vnni": ("avx512bw", "avx512vnni", False),  # Zen 4: no AVX-VNNI, so never the VEX byte quads
    "avxvnni": ("avx2", "avxvnni", False),  # Alder Lake: the 256-bit VEX byte quads on the AVX2 pairs' tile
    "amx": ("avx512bw", "avx512vnni", True),
}


def test_every_kind_is_expected():
    assert set(EXPECTED) == set(cpu.KINDS) == set(cpu.DESCRIPTIONS)


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_selection_per_kind(kind):
    feats = cpu.KINDS[kind]
    assert (conv_int16.select(feats), conv_u8s8.select(feats), conv_amx.select(feats)) == EXPECTED[kind]
    assert lut8.select(feats) == (None if kind == "generic" else "avx2")  # byte tables: vpshufb on AVX2
    assert cpu.kind_of(feats) == kind
    for name in conv_int16.ISAS:  # what a family is given it can run
        assert conv_int16.runs(name, feats) == (name == "avx2" and "avx2" in feats
                                                or name == "avx512bw" and "avx512bw" in feats)
    if conv_u8s8.select(feats):
        assert conv_u8s8.runs(conv_u8s8.select(feats), feats)


def test_the_vex_byte_quads_need_avx_vnni_or_avx512vl():
    """The 256-bit byte quads run where the CPU decodes the code their compile target gets: the VEX form with
    AVX-VNNI, the EVEX form with AVX-512 VNNI and VL (Zen 4). Given, they are only where no wider set is."""
    assert conv_u8s8.runs("avxvnni", cpu.KINDS["avx512vnni"]) and conv_u8s8.runs("avxvnni", cpu.KINDS["avxvnni"])
    assert not conv_u8s8.runs("avxvnni", cpu.KINDS["avx512"]) and not conv_u8s8.runs("avxvnni", cpu.KINDS["avx2"])
    assert not conv_u8s8.runs("avx512vnni", cpu.KINDS["avxvnni"])


def test_masks_only_take_features_away():
    zen4, alder = cpu.KINDS["avx512vnni"], cpu.KINDS["avxvnni"]
    assert cpu.masked(zen4, None, None) == zen4
    assert cpu.masked(zen4, None, "amx") == zen4  # a wider kind never adds what the host lacks
    assert cpu.masked(zen4, None, "avxvnni") == {"avx2"}  # Alder Lake's VEX VNNI is not on Zen 4
    assert cpu.masked(alder, None, "avx512vnni") == {"avx2"}
    assert cpu.masked(zen4, None, "generic") == frozenset()
    assert cpu.masked(zen4, frozenset({"avx2", "avxvnni"}), None) == {"avx2"}  # compiled for Alder Lake


def test_compile_target_features():
    assert cpu.compile_target_features(None, "") is None and cpu.compile_target_features("host", "") is None
    assert cpu.compile_target_features("haswell", "") == frozenset()
    assert cpu.compile_target_features("alderlake", "+avx2,+avxvnni,-avx512f,+sse4.2") == {"avx2", "avxvnni"}


CHOICE = ("from kernels import conv_amx, conv_int16, conv_u8s8, cpu, lut8, depthwise_nhwc, depthwise_s2, depthwise_int16\n"
          "import json\n"
          "print(json.dumps([sorted(cpu.features()), conv_int16.ISA, conv_u8s8.ISA, conv_amx.AVAILABLE,\n"
          "                  [m.KERNELS.isa.name if m.KERNELS else None\n"
          "                   for m in (depthwise_int16, depthwise_nhwc, depthwise_s2)], lut8.ISA]))\n")


def _python(code: str, *args: str, **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, on this CPU's own features but for ``env`` (no mask of the caller's)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NPU_SIM_CPU", "NUMBA_CPU"))}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=dict(full, **env), capture_output=True,
                          text=True, timeout=600)


def _kinds_here() -> dict:
    """Each distinct feature set this machine gives under a mask, named by the first kind that gives it."""
    here = {}
    for kind in cpu.KINDS:
        here.setdefault(cpu.masked(cpu.host_features(), None, kind), kind)
    return {kind: feats for feats, kind in here.items()}


@pytest.mark.parametrize("kind", list(cpu.KINDS))
def test_the_mask_chooses_in_a_fresh_process(kind):
    res = _python(CHOICE, NPU_SIM_CPU=kind)
    assert res.returncode == 0, res.stderr[-3000:]
    feats, pairs, quads, amx, depthwise, tables = json.loads(res.stdout)
    want = cpu.masked(cpu.host_features(), None, kind)
    assert set(feats) == want
    assert (pairs, quads) == (conv_int16.select(want), conv_u8s8.select(want))
    assert amx == (conv_amx.select(want) and conv_amx.AVAILABLE)
    assert depthwise == [pairs] * 3
    assert tables == lut8.select(want)


def test_an_unknown_mask_is_refused():
    res = _python("import kernels.conv_int16", NPU_SIM_CPU="avx1024")
    assert res.returncode == 2 and "NPU_SIM_CPU='avx1024' is not a CPU kind" in res.stderr
    assert "Traceback" not in res.stderr


TRACE = """
import sys, numpy as np, npu_sim
feeds = dict(np.load(sys.argv[1]))
trace = npu_sim.load(sys.argv[2], board="default").trace(feeds)
np.savez(sys.argv[3], **{f"t{i}": np.asarray(v) for i, v in enumerate(trace.values())}, names=np.array(list(trace)))
"""


@pytest.mark.parametrize("name", [pytest.param("mobilenetv2_a8w8u", marks=pytest.mark.full), "ppocr_cls_a8w8"])
def test_whole_models_trace_the_same_integers_on_every_kind(name, tmp_path):
    """Every tensor of a real model, traced in a fresh process per kind this machine can stand in for (every
    kernel family binds afresh: pairs, quads, AMX tiles, depthwise sets, float paths), equal bit for bit."""
    build, (path,) = real_models(name)
    np.savez(tmp_path / "feeds.npz", **build.sample_inputs(name, 1)[0])
    runs = {}
    for kind in _kinds_here():
        out = tmp_path / f"{kind}.npz"
        res = _python(TRACE, str(tmp_path / "feeds.npz"), str(path), str(out), NPU_SIM_CPU=kind)
        assert res.returncode == 0, res.stderr[-3000:]
        runs[kind] = dict(np.load(out))
    assert len(runs) >= 2 or cpu.host_features() == frozenset()
    base_kind, base = next(iter(runs.items()))
    for kind, got in runs.items():
        assert list(got["names"]) == list(base["names"])
        for i, tensor in enumerate(base["names"]):
            np.testing.assert_array_equal(got[f"t{i}"], base[f"t{i}"], err_msg=f"{tensor}: {kind} vs {base_kind}")
