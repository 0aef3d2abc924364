"""compare's catalogue: LiteRT's optimized 16-bit LOGISTIC (gemmlowp's fixed-point logistic on Q3.12 inputs).

``tests/fixtures/logistic16/`` (``models/tflite_logistic16.py``, in the Vela virtualenv): a tiny 16x8 model
(``input`` -> LOGISTIC, input scale 2**-12, 2,048 elements) and, for 2,048 int16 input codes, what LiteRT's
optimized kernels and its reference kernels computed. The variant (``npu_sim/analysis/compare/logistic.py``)
must give every optimized output, and compare must name it as the cause of every element of a dump of the
optimized kernels that npu-sim (the reference arithmetic) computes otherwise, reproducing the whole tensor."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from benchmarks.tflite_zoo import compare_optimized_dump
from kernels.tflite_sigmoid16 import tfl_sigmoid16
from npu_sim.analysis.compare.logistic import LITERT_LOGISTIC16, gemmlowp_logistic16, logistic16_candidates
from npu_sim.cli.main import main as cli_main

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "logistic16"
MODEL = FIXTURE / "logistic16.tflite"


@pytest.fixture(scope="module")
def litert():
    with np.load(FIXTURE / "logistic16.npz") as z:
        return {k: z[k] for k in z.files}


def test_the_variant_reproduces_every_optimized_output(litert):
    x, opt, ref = litert["input"], litert["optimized"].astype(np.int64), litert["reference"].astype(np.int64)
    assert x.dtype == np.int16 and x.size == 2048 and np.unique(x).size == x.size
    assert {-32768, -1, 0, 1, 32767} <= set(x.reshape(-1).tolist())
    assert np.array_equal(gemmlowp_logistic16(x.reshape(-1)), opt.reshape(-1))
    # the two kernel sets differ on most codes (up to 6 LSB here, 7 over all 65,536 codes); npu-sim's kernel is
    # the reference one
    assert np.count_nonzero(opt != ref) == 1781 and int(np.abs(opt - ref).max()) == 6
    assert np.array_equal(tfl_sigmoid16(x, "Sigmoid", 3, 0).astype(np.int64), ref)


def _dump(path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    opened = npu_sim.open_model(MODEL)
    ((name, _),) = opened.inputs.items()
    sim = npu_sim.load(opened, board="ethos-u55-128")
    (out,) = sim.program.outputs
    np.savez(path, **{name: x, out: y})
    return path


def test_compare_names_it_on_an_optimized_dump(litert, tmp_path, capsys):
    dump = _dump(tmp_path / "opt.npz", litert["input"], litert["optimized"])
    c = npu_sim.compare_dump(MODEL, dump, board="ethos-u55-128")
    first = next(t for t in c.tensors if t.producer == c.first_divergent)
    assert first.op == "Sigmoid" and first.differing == 1781 and first.max_diff == 6
    assert first.causes == {LITERT_LOGISTIC16: 1781} and first.reproduces[LITERT_LOGISTIC16] == [2048, 2048]
    assert cli_main(["compare", str(MODEL), str(dump), "--board", "ethos-u55-128"]) == 1
    assert f"1781 explained by {LITERT_LOGISTIC16}" in capsys.readouterr().out


def test_the_reference_dump_is_equal(litert, tmp_path, capsys):
    dump = _dump(tmp_path / "ref.npz", litert["input"], litert["reference"])
    assert cli_main(["compare", str(MODEL), str(dump), "--board", "ethos-u55-128"]) == 0
    assert "all equal" in capsys.readouterr().out


def test_not_offered_where_litert_runs_the_reference_kernel(litert):
    """At an input scale LiteRT does not take as 2**-12 (here 2**-12 x 1.002, outside CheckedLog2's tolerance;
    measured: both kernel sets then agree on all 65,536 codes) the variant is not tried; within it (x 1.0005) it
    is."""
    sim = npu_sim.load(npu_sim.open_model(MODEL), board="ethos-u55-128")
    prog, (node,) = sim.program, sim.program.nodes
    t = prog.tensors[node.inputs[0]]
    assert [name for name, _ in logistic16_candidates(prog, node, [litert["input"]])] == [LITERT_LOGISTIC16]
    for factor, offered in ((1.0005, True), (1.002, False)):
        q = dataclasses.replace(t.q, scale=np.array(2.0 ** -12 * factor, np.float32))
        prog.tensors[node.inputs[0]] = dataclasses.replace(t, q=q)
        assert bool(logistic16_candidates(prog, node, [litert["input"]])) is offered
    prog.tensors[node.inputs[0]] = t


def test_the_zoo_efficientnet_v2_b0_16x8_logistic_is_explained_on_every_element(tmp_path):
    """The zoo's (``models/tflite_zoo.py``) EfficientNetV2-B0 16x8: LiteRT's optimized kernels first differ from
    the reference kernels at the LOGISTIC of block 6a (input scale 2.4428e-4, which LiteRT's CheckedLog2 takes as
    2**-12: its only LOGISTIC on the optimized path); the variant reproduces the whole tensor."""
    try:
        _, first = compare_optimized_dump("efficientnet_v2_b0_16x8", tmp_path)
    except FileNotFoundError as missing:
        pytest.skip(f"the TFLite zoo lacks {missing}: run models/tflite_zoo.py in the Vela virtualenv")
    assert first.op == "Sigmoid" and "block6a_activation" in first.producer, first
    assert first.causes == {LITERT_LOGISTIC16: first.differing} and first.differing > 0, first.causes
    assert first.reproduces[LITERT_LOGISTIC16] == [first.total, first.total]
