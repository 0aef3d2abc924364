"""npu-sim (board ethos-u55-128, the ``tflite`` arithmetic) against TensorFlow Lite Micro, tensor by tensor.

TFLite Micro (TFLM) runs the operators a Cortex-M computes next to the NPU. Oracle: ``tests/fixtures/tflite/tflm/``,
recorded by ``models/tflm_oracle.py`` (tflite-micro ``VERSION``, its host build: the portable reference kernels,
every tensor preserved) on each committed fixture ``.tflite`` with the input LiteRT's recording used:
``NAME.tflm.npz`` holds TFLM's integers of every non-constant tensor (``t:<TFLite name>``), ``NAME.tflm.refusal.txt``
TFLM's messages where it refuses a node. Every fixture has one or both (:func:`test_every_fixture_has_a_tflm_record`);
each refusal is listed in ``REFUSED`` with its reason, each tensor where TFLM's integers are not LiteRT's in ``KNOWN``.
The test venv has no tflite-micro: the recorded integers are the oracle.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.frontend.tflite.flatbuf import read_tflite
from tests.litert_host import litert_host_board
from tests.test_tflite_frontend import _run

FIXTURES = Path(__file__).parent / "fixtures" / "tflite"
TFLM = FIXTURES / "tflm"
VERSION = "0.dev20261023182759-g8f6596d"
ALL = sorted([p.stem for p in FIXTURES.glob("*.tflite")] + [f"edited/{p.stem}"
                                                             for p in (FIXTURES / "edited").glob("*.tflite")])
RAN = sorted(str(p.relative_to(TFLM)).removesuffix(".tflm.npz") for p in TFLM.rglob("*.tflm.npz"))

# fixture -> (node number or None, operator, when TFLM refuses it, a line TFLM prints, why). Nodes before an
# invoke-time refusal ran: their outputs are in NAME.tflm.npz and compared like the others.
REFUSED = {
    "abs_exp_int8": (2, "EXP", "prepare", "exp.cc:41 input->type != kTfLiteFloat32 (INT8 != FLOAT32)",
                     "TFLM's EXP kernel is float32 only (LiteRT's has int8 and int16 lookup tables)"),
    "abs_exp_a16w8": (2, "EXP", "prepare", "exp.cc:41 input->type != kTfLiteFloat32 (INT16 != FLOAT32)",
                      "TFLM's EXP kernel is float32 only"),
    "mirror_pad_a16w8": (1, "MIRROR_PAD", "invoke", "Node MIRROR_PAD (number 1) failed to invoke",
                         "TFLM's MIRROR_PAD Eval has cases for float32 and int8 only; int16 reaches its default "
                         "case, which fails without a message"),
    "resize_a16w8": (1, "RESIZE_BILINEAR", "invoke", "Output type is 7, requires float or int8.",
                     "TFLM's RESIZE_BILINEAR takes float32 and int8 only (type 7 is int16)"),
    "refusal_depthwise_a16w8": (1, "DEPTHWISE_CONV_2D", "prepare", "no_integer_overflow_from_quantization",
                                "ReLU6's bound 6/scale beyond int32: the same node LiteRT refuses"),
    "refusal_chain_a16w8": (1, "CONV_2D", "prepare", "no_integer_overflow_from_quantization",
                            "ReLU6's bound 6/scale beyond int32: the first node LiteRT refuses"),
    "edited/relu_0_to_1_int8": (None, "RELU_0_TO_1", "registration",
                                "Didn't find op for builtin opcode 'RELU_0_TO_1'", "TFLM has no RELU_0_TO_1 kernel"),
}


def _round_away(v: np.float32) -> int:  # C's round(): halves away from zero
    return int(np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)))


def tflm_relu6(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """TFLM's int8/int16 RELU6 (activations_common.cc, Relu6Prepare + Relu6Quantized): the *input* integers clamped
    to [input zero point, FloatToQuantizedType(6.0f, input scale, input zero point)] and copied to the output. The
    output's quantization is never read; LiteRT's reference RELU6 requantizes to it (QuantizeMultiplier of
    input scale / output scale), as npu-sim does. The two agree only where the output quantization is the input's."""
    info = np.iinfo(x.dtype)
    six = min(max(_round_away(np.float32(6.0) / np.float32(scale)) + zero_point, info.min), info.max)
    return np.clip(x, zero_point, six).astype(x.dtype)


def _relu6_from_its_input(values, read, name):
    op = next(o for o in read.operators if o.op == "RELU6" and read.tensors[o.outputs[0]].name == name)
    src = read.tensors[op.inputs[0]]
    return tflm_relu6(values[src.name], float(src.quant.scale[0]), int(src.quant.zero_point[0]))


def _concat_with_tflm_relu6(values, read, name):
    op = next(o for o in read.operators if o.op == "CONCATENATION" and read.tensors[o.outputs[0]].name == name)
    parts = [_relu6_from_its_input(values, read, read.tensors[i].name) if read.tensors[i].name in KNOWN_RELU6
             else values[read.tensors[i].name] for i in op.inputs]
    return np.concatenate(parts, axis=op.options["axis"])


KNOWN_RELU6 = {"model_16/activation_2/Relu6"}
# fixture -> {tensor: (TFLM's integers from npu-sim's (= LiteRT's) tensors, elements where TFLM differs)}: where
# TFLM's kernel is not LiteRT's. activations_int8: the RELU6's input is at scale 0.02636 zero point -3 and its output
# at 0.01733 zero point -70 (the converter gives it the concatenation's quantization); TFLM copies the clamped input
# integers, so every element differs (by up to 67), and so do those 216 of the concatenation's 648.
KNOWN = {"activations_int8": {"model_16/activation_2/Relu6": (_relu6_from_its_input, 216),
                              "StatefulPartitionedCall:0": (_concat_with_tflm_relu6, 216)}}


def _precision(name: str) -> str:
    return "16x8" if name.endswith("a16w8") else "int8"


def compare(name: str) -> tuple[int, list[str], list[str]]:
    """npu-sim on NAME.tflite with the recorded input; return (tensors equal, problems, known differences met)."""
    rec = np.load(TFLM / f"{name}.tflm.npz")
    read = read_tflite(FIXTURES / f"{name}.tflite")
    _, values = _run(FIXTURES / f"{name}.tflite", rec["input"])
    equal, problems, known = 0, [], []
    for key in (k for k in rec.files if k.startswith("t:")):
        tname, want = key[2:], rec[key]
        got = values.get(tname)
        if got is None or got.shape != want.shape or got.dtype != want.dtype:
            problems.append(f"{tname}: npu-sim {None if got is None else (got.dtype, got.shape)} vs TFLM "
                            f"{want.dtype}{list(want.shape)}")
            continue
        differ = int(np.sum(got.astype(np.int64) != want))
        if tname in KNOWN.get(name, {}):
            model, count = KNOWN[name][tname]
            if not np.array_equal(model(values, read, tname), want) or differ != count:
                problems.append(f"{tname}: the known TFLM difference is not as modelled ({differ} differ)")
            known.append(tname)
        elif differ:
            problems.append(f"{tname}: {differ} of {want.size} elements differ from TFLM")
        else:
            equal += 1
    return equal, problems, known


@pytest.mark.parametrize("name", RAN)
def test_every_tensor_equals_tflm(name):
    equal, problems, known = compare(name)
    assert not problems, f"{name}: " + "\n  ".join(problems)
    assert sorted(known) == sorted(KNOWN.get(name, {}))
    assert equal >= (2 if name in REFUSED else 3)


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_where_tflm_differs_npu_sim_is_litert(name):
    """npu-sim claims TFLite's reference arithmetic (LiteRT's): on the tensors TFLM computes otherwise it is
    LiteRT's, bit for bit, and not TFLM's."""
    ref = np.load(FIXTURES / f"{name}.npz")
    rec = np.load(TFLM / f"{name}.tflm.npz")
    _, values = _run(FIXTURES / f"{name}.tflite", ref["input"])
    for tname in KNOWN[name]:
        assert np.array_equal(values[tname], ref["t:" + tname]), tname
        assert not np.array_equal(values[tname], rec["t:" + tname]), tname


def test_every_fixture_has_a_tflm_record():
    refusals = sorted(str(p.relative_to(TFLM)).removesuffix(".tflm.refusal.txt")
                      for p in TFLM.rglob("*.tflm.refusal.txt"))
    assert refusals == sorted(REFUSED)
    assert sorted(set(RAN) | set(refusals)) == ALL
    for name in RAN:
        rec = np.load(TFLM / f"{name}.tflm.npz")
        assert str(rec["meta:tflite_micro"]) == VERSION
        if (FIXTURES / f"{name}.npz").exists():
            assert np.array_equal(rec["input"], np.load(FIXTURES / f"{name}.npz")["input"]), name


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_tflm_refusals_are_as_listed(name):
    node, op, when, line, _why = REFUSED[name]
    text = (TFLM / f"{name}.tflm.refusal.txt").read_text()
    assert line in text
    if node is not None:
        assert f"Node {op} (number {node}) failed to {when}" in text
        read = read_tflite(FIXTURES / f"{name}.tflite")
        assert read.operators[node].op == op
    else:
        assert f"Failed to get registration from op code {op}" in text
    assert ((TFLM / f"{name}.tflm.npz").exists()) == (when == "invoke")
    litert = FIXTURES / f"{name}.refusal.txt"
    if litert.exists():  # LiteRT refuses the same node at prepare, for the same reason
        assert f"Node number {node} ({op}) failed to prepare" in litert.read_text().splitlines()[0]
        assert line in litert.read_text()


@pytest.mark.parametrize("name", ["refusal_depthwise_a16w8", "refusal_chain_a16w8"])
def test_tflm_refusals_at_prepare_are_npu_sim_refusals_on_a_cpu(name, tmp_path):
    """Where TFLM (and LiteRT) prepares every node, npu-sim refuses the node TFLM refuses, by that reason."""
    node, _op, _when, line, _why = REFUSED[name]
    out = read_tflite(FIXTURES / f"{name}.tflite")
    out_name = out.tensors[out.operators[node].outputs[0]].name
    with pytest.raises(npu_sim.UnsupportedModelError) as err:
        npu_sim.load(FIXTURES / f"{name}.tflite", board=str(litert_host_board(tmp_path)))
    assert line in str(err.value) and out_name in str(err.value)


def table() -> dict[str, dict[str, str]]:
    """fixture -> precision -> "k of n equal" (or the refusal), for docs/ETHOS_U55.md."""
    rows: dict[str, dict[str, str]] = {}
    for name in ALL:
        base = name.removeprefix("edited/").rsplit("_", 1)[0]
        if name in RAN:
            equal, problems, known = compare(name)
            cell = f"{equal} of {equal + len(problems) + len(known)} equal"
            cell += f" ({len(known)} known differences)" if known else ""
            cell += f", then refused: {REFUSED[name][1]}" if name in REFUSED else ""
        else:
            cell = f"refused: {REFUSED[name][1]} ({REFUSED[name][4]})"
        rows.setdefault(base, {})[_precision(name)] = cell
    return rows


if __name__ == "__main__":
    for base, cells in table().items():
        print(f"| {base} | {cells.get('int8', '—')} | {cells.get('16x8', '—')} |")
