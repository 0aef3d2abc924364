"""npu-sim check's NPU/CPU placement on ethos-u55-128 against Vela 5.2's own per-layer report, operator by operator.

The fixtures (tests/fixtures/vela_cpu/, built by models/vela_cpu_fixtures.py in the Vela virtualenv) each hold one
operator Vela leaves on the CPU (``Target`` CPU in ``NAME.per-layer.csv``): a stride-4 convolution with SAME
padding, a 10x10 average pool. An operator outside Vela's constraints is a CPU node for npu-sim too, costed there
by estimate, and the model is not deployable (not all of it runs on the NPU).
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

import npu_sim

FIXTURES = Path(__file__).parent / "fixtures" / "vela_cpu"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.tflite"))


def _vela(name: str) -> dict[str, str]:
    with open(FIXTURES / f"{name}.per-layer.csv", newline="") as f:
        return {row["Name"].strip(): row["Target"].strip() for row in csv.DictReader(f)}


@pytest.mark.parametrize("name", NAMES)
def test_placement_equals_velas_per_operator(name):
    vela = _vela(name)
    result = npu_sim.check(str(FIXTURES / f"{name}.tflite"))
    ours = {n.node: n.placement for n in result.nodes}
    assert ours == vela
    assert "CPU" in vela.values() and not result.deployable
    cpu = next(n for n in result.nodes if n.placement == "CPU")
    assert any(f.rule.startswith("limit.") and f.severity == "error" for f in cpu.findings)
    est = npu_sim.estimate(str(FIXTURES / f"{name}.tflite"))
    assert {r.node: r.target for r in est.layers} == vela  # costed where Vela runs it
