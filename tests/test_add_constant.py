"""Add/Sub of an activation and a constant on the fixed-point board: one affine with a single rounding.

Checked against exact rational arithmetic (Python Fractions, the golden twin): the board's result is the exact
QDQ value ``(+-(x - zx) sx +- c) / sy + zy`` rounded half up, except within the documented precision (the
constant is held in output LSBs with 16 fraction bits; the multiplier with at least 16), and saturated.
"""
from fractions import Fraction

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from onnx import TensorProto, helper, numpy_helper

import npu_sim

DT = {"int8": (TensorProto.INT8, np.int8, -128, 127), "int16": (TensorProto.INT16, np.int16, -32768, 32767)}


def _model(path, op, x_first, dtype, sx, zx, sy, zy, c):
    """x -> DQ -> op(with DQ(int8 constant)) -> Q, as quantize_static writes it. Returns the channel count and the
    constant's dequantized float32 values."""
    etype, npt, _, _ = DT[dtype]
    c = np.asarray(c, np.float32)
    sc = np.float32(max(float(np.max(np.abs(c))), 1e-6) / 127)
    cq = np.clip(np.rint(c / sc), -127, 127).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"),
             numpy_helper.from_array(np.array(zx, npt), "zx"),
             numpy_helper.from_array(np.array(sy, np.float32), "sy"),
             numpy_helper.from_array(np.array(zy, npt), "zy"),
             numpy_helper.from_array(cq.reshape((1, -1, 1, 1) if c.size > 1 else ()), "cq"),
             numpy_helper.from_array(np.array(sc, np.float32), "sc")]
    ins = ["xf", "c"] if x_first else ["c", "xf"]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["cq", "sc"], ["c"]),
             helper.make_node(op, ins, ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"])]
    channels = c.size if c.size > 1 else 3
    graph = helper.make_graph(nodes, "addc", [helper.make_tensor_value_info("x", etype, [1, channels, 2, 5])],
                              [helper.make_tensor_value_info("y", etype, [1, channels, 2, 5])], inits)
    opset = 21 if dtype == "int16" else 17  # ONNX allows 16-bit Q/DQ in the default domain from opset 21
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if dtype == "int16" else 9
    onnx.save(model, str(path))
    return channels, (cq.astype(np.float32) * sc).astype(np.float32).reshape(-1)


@settings(max_examples=examples(60), deadline=None)
@given(op=st.sampled_from(["Add", "Sub"]), x_first=st.booleans(), dtype=st.sampled_from(["int8", "int16"]),
       sx=st.floats(1e-4, 10.0), ratio=st.floats(0.05, 20.0), zx=st.integers(-20, 20), zy=st.integers(-20, 20),
       per_channel=st.booleans(), seed=st.integers(0, 2**16), data=st.data())
def test_matches_exact_arithmetic(tmp_path_factory, op, x_first, dtype, sx, ratio, zx, zy, per_channel, seed,
                                  data):
    _, npt, lo, hi = DT[dtype]
    rng = np.random.default_rng(seed)
    sy = float(np.float32(sx * ratio))
    sx = float(np.float32(sx))
    span = (hi - lo) * sy
    c = (rng.uniform(-0.5, 0.5, 4 if per_channel else 1) * span).astype(np.float32)
    path = tmp_path_factory.mktemp("addc") / "m.onnx"
    channels, c = _model(path, op, x_first, dtype, sx, zx, sy, zy, c if per_channel else c[0])
    sim = npu_sim.load(path)
    node = sim.program.nodes[0]
    assert node.op == op and "constant" in node.attrs  # the affine path, not the two-input Add
    x = rng.integers(lo, hi + 1, (1, channels, 2, 5)).astype(npt)
    x.reshape(-1)[0] = zx  # x at its zero point: the constant alone
    y = sim.run({"x": x}, raw=True)["y"]
    f_bits = node.attrs["fraction_bits"]
    for idx in np.ndindex(x.shape):
        cv = Fraction(float(c[idx[1]] if per_channel else c[0]))
        xv = (int(x[idx]) - zx) * Fraction(sx)
        real = (xv + cv if op == "Add" else (xv - cv if x_first else cv - xv)) / Fraction(sy)
        # documented precision: constant to 2^-17 LSB, multiplier to |x - zx| * 2^-(F+1) LSB
        slack = Fraction(1, 2 ** 17) + abs(int(x[idx]) - zx) * Fraction(1, 2 ** (f_bits + 1)) + Fraction(1, 2 ** 40)
        lo_ok = int(np.floor(real + Fraction(1, 2) - slack)) + zy
        hi_ok = int(np.floor(real + Fraction(1, 2) + slack)) + zy
        got = int(y[idx])
        assert max(lo, min(hi, lo_ok)) <= got <= max(lo, min(hi, hi_ok)), (idx, float(real), got)


def test_exact_half_way_sums_round_up(tmp_path):
    """x + 3 into a [0, 6] output (scale 6/255): 127.5 LSB at x = zero point, whatever float32 did to the
    scales; the board rounds it up, like the exact value would."""
    sy = float(np.float32(6 / 255))
    _, c = _model(tmp_path / "m.onnx", "Add", True, "int8", 0.3, 3, sy, -128, 3.0)
    assert c[0] == 3.0
    sim = npu_sim.load(tmp_path / "m.onnx")
    x = np.full((1, 3, 2, 5), 3, np.int8)
    assert np.all(sim.run({"x": x}, raw=True)["y"] == 0)  # -128 + 128
