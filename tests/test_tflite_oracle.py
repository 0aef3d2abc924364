"""npu-sim (board ethos-u55-128, the ``tflite`` arithmetic) against LiteRT, tensor by tensor, bit for bit.

Fixtures (``tests/fixtures/tflite/``) come from ``models/tflite_fixtures.py`` (optional extra ``tflite-fixtures``):
small Keras networks converted to full-integer .tflite (int8, and TFLite's 16x8 mode) and to QDQ ONNX with
``python -m tf2onnx.convert --tflite``. Each ``NAME.npz`` holds the seeded integer input (``input``) and every
integer tensor LiteRT computed (``t:<TFLite tensor name>``): the script ran ``tf.lite.Interpreter`` (tensorflow-cpu
2.15.1) with ``experimental_preserve_all_tensors=True`` and the builtin reference kernels
(``OpResolverType.BUILTIN_REF``, no delegates), on a copy of the model whose every op output is also a graph
output (LiteRT runs some ops in place otherwise, overwriting kept tensors). The test venv has no tensorflow, so the stored tensors are the
oracle; when tensorflow is importable, LiteRT is also run live and must reproduce the stored tensors.

tf2onnx keeps TFLite tensor names: a TFLite activation tensor is the ONNX QuantizeLinear output (or graph
input/output) of the same name, NCHW inside the graph where TFLite is NHWC.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import npu_sim
from tests.litert_host import litert_host_board

FIXTURES = Path(__file__).parent / "fixtures" / "tflite"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.npz"))
# fixtures whose ops the tflite arithmetic does not compute yet (lowering refuses them by node): expected failures
NOT_YET = {
}


def compare(name: str) -> tuple[int, list[str]]:
    """Run npu-sim on NAME.onnx with the stored input; return (tensors compared, problems)."""
    ref = np.load(FIXTURES / f"{name}.npz")
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    consts = {i.name for i in model.graph.initializer}
    consts |= {n.output[0] for n in model.graph.node if n.op_type == "Constant"}
    produced = {o for n in model.graph.node for o in n.output}
    io = {i.name for i in model.graph.input} | {o.name for o in model.graph.output}
    sim = npu_sim.load(FIXTURES / f"{name}.onnx", board="ethos-u55-128")
    (in_name,) = sim.inputs
    result = sim.execute({in_name: ref["input"]}, keep_all=True)
    values = dict(result.values)
    for oname, tname in sim.program.outputs.items():
        values[oname] = result.values[tname]
    quantized_from = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    by_float = {t.float_name: t.name for t in sim.program.tensors.values() if t.q is not None and not t.is_const}
    compared, problems = 0, []
    for key in ref.files:
        if not key.startswith("t:"):
            continue
        tname = key[2:]
        if tname in consts or not tname or (ref[key].dtype.itemsize >= 4 and tname not in produced):
            continue  # TFLite constants: weights (ONNX initializers), biases, shapes and axes
        want = ref[key]
        got = values.get(tname)
        if got is None and tname in quantized_from:  # a QuantizeLinear that only re-labels its input (same q)
            src = by_float.get(quantized_from[tname])
            got = None if src is None else values.get(src)
        if got is None:  # tf2onnx names a tensor it had to re-create NAME_prequant (e.g. a Reshape of the input)
            got = values.get(f"{tname}_prequant")
        if got is None:
            problems.append(f"{tname}: no npu-sim tensor of that name")
            continue
        if got.ndim == 4 and tname not in io and got.transpose(0, 2, 3, 1).shape == want.shape:
            got = got.transpose(0, 2, 3, 1)  # NCHW inside the ONNX graph, NHWC in TFLite
        if got.shape != want.shape and got.size == want.size and tuple(n for n in got.shape if n != 1) == \
                tuple(n for n in want.shape if n != 1):
            got = got.reshape(want.shape)  # tf2onnx's UNPACK: a Split keeping the unit axis, then a Squeeze
        if got.shape != want.shape or got.dtype != want.dtype:
            problems.append(f"{tname}: npu-sim {got.dtype}{list(got.shape)} vs LiteRT {want.dtype}{list(want.shape)}")
            continue
        compared += 1
        diff = got.astype(np.int64) - want.astype(np.int64)
        if np.any(diff):
            idx = np.argwhere(diff)
            first = tuple(int(i) for i in idx[0])
            problems.append(f"{tname}: {len(idx)} of {diff.size} elements differ (max |diff| "
                            f"{int(np.abs(diff).max())}; first at {first}: npu-sim {int(got[first])}, "
                            f"LiteRT {int(want[first])})")
    return compared, problems


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=NOT_YET[n], strict=True,
                                                                          raises=npu_sim.NpuSimError))
                                  if n in NOT_YET else n for n in NAMES])
def test_every_tensor_equals_litert(name):
    compared, problems = compare(name)
    assert not problems, f"{name}: " + "\n  ".join(problems)
    assert compared >= 2


def test_litert_refusal_is_refused_by_node(tmp_path):
    """LiteRT refuses refusal_depthwise_a16w8.tflite at prepare time (NAME.refusal.txt): ReLU6's bound 6 over the
    depthwise convolution's tiny output scale does not fit int32. Where LiteRT prepares every node
    (``tests.litert_host``) npu-sim refuses the same node, with the reason (on ethos-u55-128 Vela takes it)."""
    assert "no_integer_overflow_from_quantization" in (FIXTURES / "refusal_depthwise_a16w8.refusal.txt").read_text()
    with pytest.raises(npu_sim.UnsupportedModelError) as err:
        npu_sim.load(FIXTURES / "refusal_depthwise_a16w8.onnx", board=str(litert_host_board(tmp_path)))
    assert "no_integer_overflow_from_quantization" in str(err.value)
    assert "StatefulPartitionedCall:0_prequant" in str(err.value)


def _live_interpreter():
    try:
        import tensorflow as tf
    except ImportError:
        return None
    return tf


@pytest.mark.parametrize("name", NAMES)
def test_stored_tensors_are_litert_live(name):
    tf = _live_interpreter()
    if tf is None:
        pytest.skip("tensorflow is not installed (the stored .npz are the oracle)")
    ref = np.load(FIXTURES / f"{name}.npz")
    from models.tflite_fixtures import interpreter
    it = interpreter(FIXTURES / f"{name}.tflite")
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], ref["input"])
    it.invoke()
    by_name = {d["name"]: d["index"] for d in it.get_tensor_details()}
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    produced = {o for n in model.graph.node for o in n.output}
    for key in ref.files:  # activations only: int32 temporaries (e.g. MEAN's running sums) hold no result
        if key.startswith("t:") and (ref[key].dtype.itemsize < 4 or key[2:] in produced):
            np.testing.assert_array_equal(it.get_tensor(by_name[key[2:]]), ref[key], err_msg=key)


if __name__ == "__main__":
    for n in NAMES:
        try:
            c, p = compare(n)
        except Exception as exc:  # noqa: BLE001 (a summary for the developer)
            c, p = 0, [f"{type(exc).__name__}: {str(exc)[:300]}"]
        print(f"{n}: {c} tensors compared, {'all equal' if not p else str(len(p)) + ' problem(s)'}")
        for line in p:
            print("   ", line)
