"""The op families describe the nodes they make (``npu_sim.ir`` records), from the values they computed: each record
here is checked against an expectation computed independently from the model's scales and the board's rules."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import npu_sim
from kernels.fixedpoint import quantize_multiplier
from kernels.tflite_fixedpoint import tfl_quantize_multiplier
from npu_sim.analysis.cost.memory import lut_bytes
from npu_sim.ir import QParams
from npu_sim.ops import records

from qdq_models import build_model, quantize, rng_for, weights


def _node(path, board, op):
    return next(n for n in npu_sim.load(path, board=board).program.nodes if n.op == op)


def _q(t) -> tuple[float, int]:
    return float(t.q.scale), int(t.q.zero_point)


def test_table_records_name_every_table():
    """A family's tables by name; the input quantization belongs to the op's own table only."""
    in_q = QParams("int8", np.array(0.1, np.float32), np.array(0, np.int64))
    t = records.tables({"recip": np.arange(513, dtype=np.int32) * 60, "exp": np.ones(4, np.int64),
                        "table": np.zeros(256, np.int8)}, in_q)
    assert list(t.entries) == ["recip", "exp", "table"] and t.in_q is in_q and t.main.size == 256
    assert lut_bytes(t) == 513 * 2 + 4 + 256
    assert records.tables({"exp": np.ones(4, np.int64)}, in_q).in_q is None


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("family_records")
    rng = rng_for("family_records")
    conv = build_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
                        helper.make_node("Relu", ["c"], ["y"], name="relu")],
                       {"x": (1, 3, 8, 8)}, {"y": None}, {"w": weights(rng, (4, 3, 3, 3)), "b": weights(rng, (4,))})
    add = build_model([helper.make_node("Add", ["a", "b"], ["s"], name="add"),
                       helper.make_node("Mul", ["s", "a"], ["m"], name="mul"),
                       helper.make_node("ReduceMean", ["m"], ["y"], name="mean", axes=[2, 3], keepdims=1)],
                      {"a": (1, 2, 4, 4), "b": (1, 2, 4, 4)}, {"y": None}, opset=13)
    return {"conv": quantize(conv, root, "conv", activation_type="u8", per_channel=True, calib_count=2),
            "add": quantize(add, root, "add", activation_type="s8", calib_count=2)}


def test_conv_records(models):
    """Conv with its folded Relu on the fixed-point board: one multiplier per output channel from sx*sw[c]/sy, the
    int32 bias, the centred weights in (Cout, Cin, kh, kw), the window, the Relu's clamp."""
    sim = npu_sim.load(models["conv"], board="default")
    node = next(n for n in sim.program.nodes if n.op == "Conv")
    t = sim.program.tensors
    x, w, b, y = (t[n] for n in (node.inputs[0], node.inputs[1], node.inputs[2], node.outputs[0]))
    (sx, zx), (sy, zy) = _q(x), _q(y)
    pairs = [quantize_multiplier(float(np.float64(sx) * np.float64(s) / np.float64(sy)), 31) for s in w.q.scale]
    rq = node.requant
    assert (rq.rounding, rq.bits, rq.in_zp, rq.out_zp, rq.ratio) == ("half_up", 31, zx, zy, None)
    assert rq.mult.dtype == rq.shift.dtype == rq.bias.dtype == np.int64
    assert [(int(m), int(s)) for m, s in zip(rq.mult, rq.shift)] == pairs
    np.testing.assert_array_equal(rq.bias, b.data.astype(np.int64))
    assert (rq.qmin, rq.qmax) == node.clamp == (zy, 255)  # the Relu: nothing below the zero point
    want_w = w.data.astype(np.int64) - w.q.zero_point.reshape(-1, 1, 1, 1)
    assert node.weights.data.dtype == np.int32 and (node.weights.axis, node.weights.per_channel) == (0, True)
    np.testing.assert_array_equal(node.weights.data, want_w)
    g = node.geometry
    assert (g.kernel, g.stride, g.pads, g.dilation, g.groups, g.out_hw) == ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1,
                                                                           None)
    assert (node.accumulator.bits, node.accumulator.saturate) == (32, False)
    assert node.tables is None and node.operands is None and node.affine is None

    onnx_rq = _node(models["conv"], "onnx", "Conv").requant
    want = (np.float32(sx) * w.q.scale.astype(np.float32)).astype(np.float32) / np.float32(sy)
    assert onnx_rq.rounding == "float32" and onnx_rq.mult is None and onnx_rq.ratio.dtype == np.float32
    np.testing.assert_array_equal(onnx_rq.ratio, want.astype(np.float32))


def test_elementwise_and_mean_records(models):
    """Add: its operands and three fixed-point stages; Mul: one multiplier sa*sb/sy; ReduceMean: the zero point in
    the bias, the axes it averages."""
    sim = npu_sim.load(models["add"], board="default")
    nodes = {n.op: n for n in sim.program.nodes}
    t = sim.program.tensors
    add = nodes["Add"]
    a, b, y = add.operands.a, add.operands.b, t[add.outputs[0]]
    (sa, _), (sb, _), (sy, zy) = _q(a), _q(b), _q(y)
    big = 2.0 * max(sa, sb)
    left = add.operands.left_shift
    assert add.operands.stages == tuple(quantize_multiplier(r, 31) for r in (sa / big, sb / big,
                                                                              big / (2.0 ** left * sy)))
    assert add.requant is None and add.clamp == (-128, 127)

    mul = nodes["Mul"]
    ma, mb, my = mul.operands.a, mul.operands.b, t[mul.outputs[0]]
    m, s = quantize_multiplier(_q(ma)[0] * _q(mb)[0] / _q(my)[0], 31)
    assert (int(mul.requant.mult[0]), int(mul.requant.shift[0]), mul.requant.out_zp) == (m, s, _q(my)[1])
    assert mul.requant.channels == 1 and mul.accumulator is None

    mean = nodes["ReduceMean"]
    x, out = t[mean.inputs[0]], t[mean.outputs[0]]
    (sx, zx), (so, zo) = _q(x), _q(out)
    assert mean.geometry.axes == (2, 3) and mean.accumulator.bits == 64
    assert int(mean.requant.bias[0]) == -zx * 16 and mean.requant.in_zp == zx
    pair = quantize_multiplier(float(np.float64(sx) * np.float64(np.float32(1 / 16)) / np.float64(so)), 31)
    assert (int(mean.requant.mult[0]), int(mean.requant.shift[0])) == pair


def test_tflite_records(models):
    """On a TFLite board: Q31 multipliers of TFLite's QuantizeMultiplier, double rounding, no own clamp of the
    accumulator's overflow (TFLite's int32 accumulator)."""
    node = _node(models["conv"], "ethos-u55-128", "Conv")
    sim = npu_sim.load(models["conv"], board="ethos-u55-128")
    t = sim.program.tensors
    x, w, y = t[node.inputs[0]], t[node.inputs[1]], t[node.outputs[0]]
    real = np.float64(np.float32(x.q.scale)) * w.q.scale.astype(np.float64) / np.float64(np.float32(y.q.scale))
    rq = node.requant
    assert (rq.rounding, rq.bits) == ("double", 31)
    assert [(int(m), int(s)) for m, s in zip(rq.mult, rq.shift)] == [tfl_quantize_multiplier(float(r)) for r in real]
    assert node.accumulator.saturate is False and node.weights.axis == 0

    mul = _node(models["add"], "ethos-u55-128", "Mul")
    tm = npu_sim.load(models["add"], board="ethos-u55-128").program.tensors
    a, b, out = mul.operands.a, mul.operands.b, tm[mul.outputs[0]]
    r = np.float32(np.float32(a.q.scale) * np.float32(b.q.scale)) / np.float32(out.q.scale)
    assert mul.requant.rounding == "double" and mul.requant.in_zp is None
    assert (int(mul.requant.mult[0]), int(mul.requant.shift[0])) == tfl_quantize_multiplier(float(np.float32(r)))
