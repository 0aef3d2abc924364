"""Lookup-table ops through the whole loader/lowering/executor on hand-written QDQ models fed with every input code:
the documented table rule, domains, a folded Relu/Clip, Pow's exponent, Div by an activation (zero divisor), mixed
8/16-bit groups, the board's table size, and the unsupported cases."""
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npu_sim
from npu_sim.errors import UnsupportedModelError
from npu_sim.ops import lut
from tests import naive_lut

ELEM = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16,
        "uint16": TensorProto.UINT16}
NP = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16}


def _deq(codes, scale, zp=0):
    """ONNX DequantizeLinear in float32, as float64."""
    return ((codes.astype(np.int64) - zp).astype(np.float32) * np.float32(scale)).astype(np.float64)


def _codes(dtype):
    info = np.iinfo(NP[dtype])
    return np.arange(info.min, info.max + 1).astype(NP[dtype])


def qdq_model(tmp_path, op, inq, outq, attrs=None, consts=None, act=None, n=None, name="m", second=None):
    """x (integer input, every code) -> DequantizeLinear -> op [-> Relu | Clip] -> QuantizeLinear -> y (integers).
    ``inq``/``outq``: (dtype, scale, zero point); ``consts``: extra float inputs of the op (name -> array);
    ``second``: a second integer input b with its quantization (Div)."""
    n = n or (256 if inq[0] in ("int8", "uint8") else 65536)
    inits = [numpy_helper.from_array(np.array(inq[1], np.float32), "sx"),
             numpy_helper.from_array(np.array(inq[2], NP[inq[0]]), "zx"),
             numpy_helper.from_array(np.array(outq[1], np.float32), "sy"),
             numpy_helper.from_array(np.array(outq[2], NP[outq[0]]), "zy")]
    inputs = [helper.make_tensor_value_info("x", ELEM[inq[0]], [n])]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"], name="dq_x")]
    op_inputs = ["xf"]
    if second is not None:
        inputs.append(helper.make_tensor_value_info("b", ELEM[second[0]], [n]))
        inits += [numpy_helper.from_array(np.array(second[1], np.float32), "sb"),
                  numpy_helper.from_array(np.array(second[2], NP[second[0]]), "zb")]
        nodes.append(helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"], name="dq_b"))
        op_inputs.append("bf")
    for cname, value in (consts or {}).items():
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), cname))
        op_inputs.append(cname)
    nodes.append(helper.make_node(op, op_inputs, ["yf"], name="the_op", **(attrs or {})))
    last = "yf"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["yf"], ["ya"], name="act"))
        last = "ya"
    elif act is not None:
        inits += [numpy_helper.from_array(np.array(act[0], np.float32), "lo"),
                  numpy_helper.from_array(np.array(act[1], np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["yf", "lo", "hi"], ["ya"], name="act"))
        last = "ya"
    nodes.append(helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["y"], name="q_y"))
    graph = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("y", ELEM[outq[0]], [n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def run_all_codes(path, in_dtype, board="default", b=None):
    sim = npu_sim.load(path, board=board)
    feeds = {"x": _codes(in_dtype)}
    if b is not None:
        feeds["b"] = b
    return sim, sim.run(feeds, raw=True)["y"]


def expected8(f, inq, outq, lo=None, hi=None):
    info = np.iinfo(NP[outq[0]])
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    table = naive_lut.table8(f, NP[inq[0]], inq[1], inq[2], outq[1], outq[2], lo, hi)
    return np.array(table, NP[outq[0]])


@pytest.mark.parametrize("op,attrs", [("Sigmoid", {}), ("Tanh", {}), ("Erf", {}), ("Gelu", {"approximate": "tanh"}),
                                      ("HardSigmoid", {"alpha": 0.25, "beta": 0.375}), ("Elu", {"alpha": 0.5}),
                                      ("Softplus", {}), ("HardSwish", {}), ("Sin", {}), ("Cos", {}), ("Exp", {})])
@pytest.mark.parametrize("inq,outq", [(("int8", 0.05, 3), ("int8", 0.01, -20)),
                                      (("uint8", 0.04, 128), ("uint8", 0.02, 100))])
def test_8bit_table_is_the_documented_rule(tmp_path, op, attrs, inq, outq):
    """Every code of the input: the board's output is clamp(round_half_even(f(x) / s_out) + z_out) with f in float64
    at the float32-dequantized input (the twin builder, written independently)."""
    path = qdq_model(tmp_path, op, inq, outq, attrs)
    sim, y = run_all_codes(path, inq[0])
    node = next(n for n in sim.program.nodes if n.op == op)
    assert node.tables.main.size == 256
    f = lut.function_for(op, {k: (v.encode() if isinstance(v, str) else v) for k, v in attrs.items()})
    np.testing.assert_array_equal(y, expected8(f, inq, outq))
    # the onnx board runs ONNX's float32 definition: within 1 LSB
    _, y_onnx = run_all_codes(path, inq[0], board="onnx")
    assert np.abs(y.astype(np.int64) - y_onnx.astype(np.int64)).max() <= 1


def test_domains_saturate_as_documented(tmp_path):
    inq, outq = ("int8", 0.05, 0), ("int8", 0.05, 0)
    x = _deq(_codes("int8"), 0.05)
    for op, want in (("Log", lambda v: np.where(v > 0, np.log(np.maximum(v, 1e-300)), -np.inf)),
                     ("Sqrt", lambda v: np.sqrt(np.maximum(v, 0))),
                     ("Reciprocal", lambda v: np.where(v == 0, np.inf, 1 / np.where(v == 0, 1, v)))):
        path = qdq_model(tmp_path, op, inq, outq, name=op)
        _, y = run_all_codes(path, "int8")
        ref = np.clip(np.rint(want(x) / np.float64(np.float32(0.05))), -128, 127)
        np.testing.assert_array_equal(y, ref.astype(np.int8), err_msg=op)
    # Log of x <= 0: -inf -> qmin; Sqrt of x < 0: 0; Reciprocal(+0): +inf -> qmax
    path = qdq_model(tmp_path, "Log", inq, outq, name="log2")
    _, y = run_all_codes(path, "int8")
    assert set(y[:129].tolist()) == {-128}
    path = qdq_model(tmp_path, "Reciprocal", inq, outq, name="rec2")
    _, y = run_all_codes(path, "int8")
    assert y[128] == 127 and y[127] == -128


def test_pow_exponents(tmp_path):
    inq, outq = ("int8", 0.05, 0), ("int16", 0.001, 0)
    xs = _deq(_codes("int8"), 0.05)
    for c, f in ((2.0, lambda v: v * v), (3.0, lambda v: v ** 3), (0.5, lambda v: np.sqrt(np.maximum(v, 0))),
                 (-1.0, lambda v: np.where(v == 0, np.inf, 1 / np.where(v == 0, 1, v)))):
        path = qdq_model(tmp_path, "Pow", inq, outq, consts={"e": np.array(c)}, name=f"pow{c}")
        _, y = run_all_codes(path, "int8")
        ref = np.clip(np.rint(f(xs) / np.float64(np.float32(0.001))), -32768, 32767).astype(np.int16)
        np.testing.assert_array_equal(y, ref, err_msg=str(c))
    path = qdq_model(tmp_path, "Pow", inq, outq, consts={"e": np.array([2.0, 3.0])}, n=2, name="pow_vec")
    with pytest.raises(UnsupportedModelError, match="constant scalar exponent"):
        npu_sim.load(path)


def test_folded_relu_and_clip(tmp_path):
    inq, outq = ("int8", 0.05, 0), ("int8", 0.01, 0)
    for act, lo, hi in (("relu", 0.0, math.inf), ((-0.3, 0.5), -0.3, 0.5)):
        path = qdq_model(tmp_path, "Tanh", inq, outq, act=act, name=f"act{lo}")
        sim, y = run_all_codes(path, "int8")
        assert [n.op for n in sim.program.nodes] == ["Tanh"]  # one op: the clamp is folded into the table
        f = lut.clipped(np.tanh, (lo, hi))
        np.testing.assert_array_equal(y, expected8(f, inq, outq))
        _, y_onnx = run_all_codes(path, "int8", board="onnx")
        assert np.abs(y.astype(np.int64) - y_onnx.astype(np.int64)).max() <= 1


@pytest.mark.parametrize("inq,outq", [(("int16", 8 / 65535, 0), ("int16", 2 / 65535, 0)),
                                      (("uint16", 8 / 65535, 32768), ("uint8", 1 / 255, 0)),
                                      (("int16", 16 / 65535, -1), ("int8", 2 / 255, 0))])
def test_16bit_table_matches_builder_and_error_table(tmp_path, inq, outq):
    """16-bit input (also with an 8-bit output): the kernel's interpolation of the builder's entries, within the
    measured error of ``lut.table_errors``; the entry count follows the board key ``lut_entries_16``."""
    path = qdq_model(tmp_path, "Sigmoid" if outq[0] == "uint8" else "Tanh", inq, outq)
    sim, y = run_all_codes(path, inq[0])
    node = sim.program.nodes[0]
    p = lut.table_view(node)
    assert node.tables.main.size == 513 and node.params["correction"] == "midpoint"
    expected = naive_lut.lut16(_codes(inq[0]), p["table"], p["qmin"], p["qmax"], NP[outq[0]])
    np.testing.assert_array_equal(y, expected)
    err = lut.table_errors(p)
    assert err.max() <= 3.0
    board = tmp_path / "b.toml"
    board.write_text('name = "small_lut"\n[arithmetic]\nlut_entries_16 = 65\n')
    small = npu_sim.load(path, board=str(board))
    ps = lut.table_view(small.program.nodes[0])
    assert ps["table"].size == 65
    y_small = small.run({"x": _codes(inq[0])}, raw=True)["y"]
    np.testing.assert_array_equal(y_small, naive_lut.lut16(_codes(inq[0]), ps["table"], ps["qmin"], ps["qmax"],
                                                           NP[outq[0]]))
    if outq[0] == "int16":  # a coarser table interpolates worse (at 8-bit outputs rounding dominates both)
        assert lut.table_errors(ps).max() > err.max()


def test_div_by_activation_zero_divisor_and_onnx_board(tmp_path):
    inq, bq, outq = ("int8", 0.05, 0), ("uint8", 0.02, 0), ("int8", 0.25, 0)
    n = 256 * 256
    a = np.repeat(_codes("int8"), 256)
    b = np.tile(_codes("uint8"), 256)
    path = qdq_model(tmp_path, "Div", inq, outq, second=bq, n=n, name="div")
    sim = npu_sim.load(path)
    y = sim.run({"x": a, "b": b}, raw=True)["y"].astype(np.int64)
    node = sim.program.nodes[0]
    assert node.op == "Div" and node.params["_lossless"]
    av = _deq(a, 0.05)
    bv = _deq(b, 0.02)
    nz = b != 0
    exact = np.clip(av[nz] / bv[nz] / np.float64(np.float32(0.25)), -128, 127)
    err = np.abs(y[nz] - exact)
    assert err.max() <= lut.div_error_bound(node) <= 1.0
    # a zero divisor code: the reciprocal saturates at +Rmax = 1 / (smallest positive divisor), i.e. a / 0.02
    zero = ~nz
    want = np.clip(np.rint(av[zero] / 0.02 / 0.25), -128, 127)
    assert np.abs(y[zero] - want).max() <= 1
    with np.errstate(divide="ignore", invalid="ignore"):  # ONNX's a/0 = inf, 0/0 = NaN on the onnx board
        onnx_y = npu_sim.load(path, board="onnx").run({"x": a, "b": b}, raw=True)["y"].astype(np.int64)
    assert np.abs(onnx_y[nz] - y[nz]).max() <= 1


def test_div_constant_dividend_is_one_table(tmp_path):
    inq, outq = ("uint8", 0.02, 0), ("int16", 0.001, 0)
    path = qdq_model(tmp_path, "Reciprocal", inq, outq, name="rec")
    _, y_rec = run_all_codes(path, "uint8")
    # Div(1, x): the same function as Reciprocal, built as one table on the divisor
    nodes_path = tmp_path / "div1.onnx"
    m = onnx.load(str(path))
    for nd in m.graph.node:
        if nd.op_type == "Reciprocal":
            nd.op_type = "Div"
            nd.input[:] = ["one", "xf"]
    # the dividend as onnxruntime's quantizer stores a constant: DequantizeLinear of a quantized initializer (= 1.0)
    m.graph.initializer.extend([numpy_helper.from_array(np.array(128, np.uint8), "one_q"),
                                numpy_helper.from_array(np.array(1 / 128, np.float32), "one_s")])
    m.graph.node.insert(0, helper.make_node("DequantizeLinear", ["one_q", "one_s"], ["one"], name="dq_one"))
    onnx.save(m, str(nodes_path))
    sim, y_div = run_all_codes(nodes_path, "uint8")
    assert sim.program.nodes[0].op == "Div" and sim.program.nodes[0].tables.main.size == 256
    np.testing.assert_array_equal(y_div, y_rec)


def test_constant_input(tmp_path):
    """A LUT op on a constant (a DequantizeLinear of an initializer) runs its table on the constant's codes."""
    c = np.array([-128, -5, 0, 7, 127], np.int8)
    inits = [numpy_helper.from_array(c, "c_q"), numpy_helper.from_array(np.array(0.05, np.float32), "sc"),
             numpy_helper.from_array(np.array(0.01, np.float32), "sy"),
             numpy_helper.from_array(np.array(0, np.int8), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["c_q", "sc"], ["cf"], name="dq_c"),
             helper.make_node("Tanh", ["cf"], ["t"], name="the_op"),
             helper.make_node("QuantizeLinear", ["t", "sy", "zy"], ["tq"], name="q_t"),
             helper.make_node("DequantizeLinear", ["tq", "sy", "zy"], ["td"], name="dq_t"),
             helper.make_node("DequantizeLinear", ["x", "sy", "zy"], ["xd"], name="dq_x"),
             helper.make_node("Add", ["xd", "td"], ["s"], name="add"),
             helper.make_node("QuantizeLinear", ["s", "sy", "zy"], ["y"], name="q_y")]
    graph = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.INT8, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = tmp_path / "c.onnx"
    onnx.save(model, str(path))
    y = npu_sim.load(path).run({"x": np.zeros(5, np.int8)}, raw=True)["y"]
    want = expected8(np.tanh, ("int8", 0.05, 0), ("int8", 0.01, 0))[c.astype(np.int64) + 128]
    np.testing.assert_array_equal(y, want)  # x = 0 and equal scales: the Add passes the table values through
