"""The mutation fuzzer's seeded slice (issue 32; tests/mutants.py, tests/mutant_runner.py): 200 mutants of the
bases (the demo, mixed and acts models, and the cuts of the real models where models/build.py has them cached)
through every command and board, one forked process each: no crash, hang, contradiction, invalid model accepted,
difference from onnxruntime on board onnx, or unclear refusal. Two halves, so that xdist runs them side by side;
``python -m tests.mutant_runner --count 1000`` is the full run (docs/TESTING.md)."""
from __future__ import annotations

import onnx
import pytest

from tests import mutant_runner, mutants
from tests.mutant_verdict import FINDINGS, classify

SEED = 32
COUNT = 200
HALVES = 2


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return mutants.bases(tmp_path_factory.mktemp("bases"))


def test_generation_is_seeded_and_covers_every_class(models):
    first = mutants.generate(models, 60, SEED)
    again = mutants.generate(models, 60, SEED)
    other = mutants.generate(models, 60, SEED + 1)
    assert [m.id for m in first] == [m.id for m in again] != [m.id for m in other]
    assert {m.cls for m in first} == set(mutants.CLASSES)
    assert len({m.id for m in first}) == len(first) and all(m.desc for m in first)


def test_the_bases_are_valid(models):
    for model in models.values():
        onnx.checker.check_model(model, full_check=True)


def test_verdict_sees_a_crash_and_a_contradiction(tmp_path):
    """The classifier is not blind: an exit 3, and check calling deployable what run refuses."""
    ok = {"code": 0, "err": "", "out": ""}
    refused = {"code": 2, "err": "npu-sim: error: no\n", "out": ""}
    crash = {"cmds": {"run/onnx": {"code": 3, "err": "npu-sim: internal error: boom\n", "out": ""}}, "front": None}
    assert classify(None, crash, tmp_path, None)[0] == "crash"
    split = {"cmds": {"run/onnx": refused, "check/onnx": ok, "lower/onnx": refused}, "front": None, "oracle": {}}
    assert classify(None, split, tmp_path, None)[0] == "contradiction"
    assert classify(None, None, tmp_path, "hang: killed after 60 s")[0] == "hang"


@pytest.mark.parametrize("half", range(HALVES))
def test_mutants_find_nothing(half, models, tmp_path):
    picked = mutants.generate(models, COUNT, SEED)[half::HALVES]
    results = mutant_runner.run_all(picked, models, tmp_path, workers=1)
    assert len(results) == len(picked)
    bad = [r for r in results if r[1] in FINDINGS]
    assert not bad, mutant_runner.summary(bad)
