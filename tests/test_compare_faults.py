"""compare on faults injected with a known cause into an own dump of a real network (issue 29, Deliver 3).

MobileNetV2 a8w8 (``models/build.py``, cached) runs on ``ethos-u55-128`` (TFLite's double rounding) with
``run --dump-all``; into its dump, at the first, a middle and a late projection convolution, each of these faults
is injected, computed here from the layer's accumulator (recovered from the dump's input of the layer and checked
to give the dumped tensor back with TFLite's arithmetic):

* the second rounding stage rounding ties half to even instead of away from zero;
* the output wrapped at 8 bits instead of saturated;
* every channel's multiplier off by k = 2**15;
* random +-1 noise on 1% of the elements;
* one element off by 40.

compare must name the injected cause -- reproducing the whole tensor -- in >= 95% of the cause cases, and leave
>= 90% of the noise and single-error elements unexplained (no arithmetic variation gives random noise)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.analysis.compare.recover import requant_of
from npu_sim.cli.main import main as cli_main

from tests.qdq_models import real_models

BOARD = "ethos-u55-128"
LAYERS = ("features.1.project.conv", "features.8.project.conv", "features.14.project.conv")
K = 1 << 15
CAUSES = {"ties to even": "double rounding, second-stage ties to even",
          "wrap": "output wrapped at 8 bits instead of saturated",
          "multiplier": "every channel's multiplier off by +32768 (2^15) (found from the data"}


def _tflite(acc, m, s, ties_even=False):
    """TFLite's MultiplyByQuantizedMultiplier, written out here (int64: these accumulators are small)."""
    a = acc << np.maximum(s, 0)
    hi = (a * m + (1 << 30)) >> 31
    e = np.maximum(-s, 0)
    h = (1 << e) >> 1
    if not ties_even:
        return np.sign(hi) * ((np.abs(hi) + h) >> e)
    q = hi >> e
    rem = hi - (q << e)
    return q + ((rem > h) | ((rem == h) & ((q & 1) == 1)))


def _faults(prog, node, x, y, rng):
    """{fault: the layer's output with it} for the layer ``node`` fed ``x`` whose dumped output is ``y``."""
    rq = requant_of(prog, node, [x])
    acc, ch = rq.acc.reshape(-1), rq.channel.reshape(-1)
    m, s = rq.tfl[0][ch], rq.tfl[1][ch]
    out = _tflite(acc, m, s) + rq.out_zp
    base = y.reshape(-1).astype(np.int64)
    assert np.array_equal(np.clip(out, rq.qmin, rq.qmax), base)  # the accumulator and pairs are the layer's
    wrapped = ((out + 128) % 256) - 128
    noisy = base.copy()
    pick = rng.choice(base.size, base.size // 100, replace=False)
    noisy[pick] += np.where(noisy[pick] < 127, 1, -1) * np.where(noisy[pick] > -128, rng.choice([-1, 1], pick.size), 1)
    single = base.copy()
    i = int(rng.integers(base.size))
    single[i] += 40 if single[i] < 80 else -40
    got = {"ties to even": _tflite(acc, m, s, True) + rq.out_zp, "wrap": wrapped,
           "multiplier": _tflite(acc, m + K, s) + rq.out_zp, "noise": noisy, "single": single}
    return {k: np.clip(v, rq.qmin, rq.qmax).astype(y.dtype).reshape(y.shape) for k, v in got.items()}


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    _, (path,) = real_models("mobilenetv2_a8w8")
    tmp = tmp_path_factory.mktemp("faults")
    sim = npu_sim.load(path, board=BOARD)
    name = next(iter(sim.program.inputs))
    np.save(tmp / "x.npy", np.random.default_rng(0).uniform(-2, 2, (1, 3, 224, 224)).astype(np.float32))
    assert cli_main(["run", str(path), "--board", BOARD, "--input", f"{name}={tmp / 'x.npy'}", "--dump-all",
                     "--out", str(tmp / "dump")]) == 0
    index = json.loads((tmp / "dump" / "index.json").read_text())
    return sim, {k: np.load(tmp / "dump" / v["file"]) for k, v in index.items()}, tmp


def test_injected_causes_named_and_noise_left_unexplained(mobilenet):
    sim, tensors, tmp = mobilenet
    prog = sim.program
    rng = np.random.default_rng(7)
    named, cases, unexplained, noisy = [], 0, 0, 0
    for layer in LAYERS:
        node = next(n for n in prog.nodes if n.name == layer)
        x_name, y_name = (prog.tensors[t].float_name for t in (node.inputs[0], node.outputs[0]))
        for fault, y in _faults(prog, node, tensors[x_name], tensors[y_name], rng).items():
            changed = int(np.count_nonzero(y != tensors[y_name]))
            if not changed:  # this fault changes nothing on this layer: no case
                continue
            np.savez(tmp / "case.npz", **{**tensors, y_name: y})
            c = npu_sim.compare_dump(sim, tmp / "case.npz")
            t = c.first_divergent_tensor
            assert c.first_divergent == layer and t.differing == changed and t.inherited == 0, (layer, fault)
            if fault in CAUSES:
                cases += 1
                want = CAUSES[fault]
                top = next(iter(t.causes))
                ok = any(n.startswith(want) for n in [top, *t.equally.get(top, ())]) and t.causes[top] == changed
                named.append(ok and t.reproduces[top] == [y.size, y.size])
            else:
                noisy += changed
                unexplained += t.unexplained
    assert cases >= 8 and sum(named) >= 0.95 * cases, named
    assert noisy and unexplained >= 0.9 * noisy, (unexplained, noisy)


def test_multiplier_off_by_k_on_a_single_rounding_board(tmp_path):
    """The default board rounds once (half up, its own 31-bit pairs): every multiplier of a layer off by -2**20 is
    found from the data, named by its offset and reproduces the whole tensor; the same values on a few elements
    only are no cause."""
    from npu_sim.analysis.compare.rounding import half_up
    qdq = Path(__file__).resolve().parent.parent / "models" / "demo" / "digits_cnn.qdq.onnx"
    sample = qdq.parent / "digits_sample.npy"
    assert cli_main(["run", str(qdq), "--input", f"input={sample}", "--dump-all", "--out", str(tmp_path / "d")]) == 0
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    tensors = {k: np.load(tmp_path / "d" / v["file"]) for k, v in index.items()}
    sim = npu_sim.load(qdq, input_shapes={"input": (1, 1, 8, 8)})
    node = next(n for n in sim.program.nodes if n.name == "conv2")
    x_name, y_name = (sim.program.tensors[t].float_name for t in (node.inputs[0], node.outputs[0]))
    rq = requant_of(sim.program, node, [tensors[x_name]])
    assert rq.own == "single"
    acc, ch = rq.acc.reshape(-1), rq.channel.reshape(-1)
    y = np.clip(half_up(acc * (rq.mult[ch] - (1 << 20)), rq.shift[ch]) + rq.out_zp, rq.qmin, rq.qmax)
    y = y.astype(tensors[y_name].dtype).reshape(tensors[y_name].shape)
    changed = int(np.count_nonzero(y != tensors[y_name]))
    assert changed > 0
    np.savez(tmp_path / "case.npz", **{**tensors, y_name: y})
    t = npu_sim.compare_dump(sim, tmp_path / "case.npz").first_divergent_tensor
    (cause, n), = t.causes.items()
    assert cause.startswith("every channel's multiplier off by -1048576 (2^20) (found from the data") and n == changed
    assert t.reproduces[cause] == [y.size, y.size]
    partial = tensors[y_name].copy()
    first = np.flatnonzero(y != tensors[y_name])[0]
    partial.reshape(-1)[first] = y.reshape(-1)[first]
    np.savez(tmp_path / "case.npz", **{**tensors, y_name: partial})
    t = npu_sim.compare_dump(sim, tmp_path / "case.npz").first_divergent_tensor
    assert changed > 1 and t.causes == {"unexplained": 1}
