"""The typed parameter records of lowered nodes (``npu_sim.ir``: Requant, Weights, Tables, Accumulator, Operands),
the named exception of ``kernels.fixedpoint`` for scales no multiplier represents, and the one table of LUT
activations (``npu_sim.activations``) that opset, the lowering, docs/lut_errors.py and the tests read."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npu_sim
from kernels.fixedpoint import UnrepresentableScale, quantize_multiplier
from npu_sim.activations import LUT_ACTIVATIONS
from npu_sim.analysis.check.measures import geometry
from npu_sim.analysis.cost.memory import lut_bytes
from npu_sim.boards import PRESET_DIR
from npu_sim.cli.main import main as cli_main
from npu_sim.errors import UnsupportedModelError
from npu_sim.ir import Geometry, Node
from npu_sim.lowering.problem import Problem
from npu_sim.lowering.registry import lowering_of
from npu_sim.opset import CONVERT_OPS, LUT_OPS, MAC_OPS, MOVEMENT_OPS, OPS, facts_of
from npu_sim.ops import lut

from qdq_models import build_model, quantize, rng_for, weights
from test_lut_errors import MEASURED_16

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _unary(path, op: str, q_in, q_out, dtype=np.int8) -> Path:
    """x -> Q/DQ -> op -> Q/DQ on [1, 16], ``q_in``/``q_out`` = (scale, zero point)."""
    (si, zi), (so, zo) = q_in, q_out
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             (("si", si, np.float32), ("so", so, np.float32), ("zi", zi, dtype), ("zo", zo, dtype))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "si", "zi"], ["xq"], name="x_q"),
             helper.make_node("DequantizeLinear", ["xq", "si", "zi"], ["xd"], name="x_dq"),
             helper.make_node(op, ["xd"], ["y"], name="op"),
             helper.make_node("QuantizeLinear", ["y", "so", "zo"], ["yq"], name="y_q"),
             helper.make_node("DequantizeLinear", ["yq", "so", "zo"], ["yd"], name="y_dq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("yd", TensorProto.FLOAT, [1, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _board(tmp_path, bits: int) -> str:
    text = (PRESET_DIR / "default.toml").read_text(encoding="utf-8")
    path = tmp_path / f"m{bits}.toml"
    path.write_text(text.replace('name = "default"', f'name = "m{bits}"').replace(
        "\nmultiplier_bits = 31\n", f"\nmultiplier_bits = {bits}\n"))
    return str(path)


# -- kernels.fixedpoint: the named exception --------------------------------------------------------------------

@pytest.mark.parametrize("real", [2.0 ** 40, math.inf, math.nan, -(2.0 ** 33)])
def test_unrepresentable_scales_raise_the_named_exception(real):
    with pytest.raises(UnrepresentableScale):
        quantize_multiplier(real, 31)
    assert issubclass(UnrepresentableScale, ValueError)  # callers that caught ValueError still do
    assert quantize_multiplier(2.0 ** -70) == (0, 0)  # too small: flushed, not an error


def test_lowering_reports_an_unrepresentable_scale_as_the_nodes_problem(tmp_path):
    """A Relu rescale of factor 1e12 (needs a left shift): the walk catches the exception by its type and names the
    group (its QuantizeLinear); the board's ``onnx`` arithmetic (no multipliers) lowers the same model."""
    model = _unary(tmp_path / "big.onnx", "Relu", (1e6, 0), (1e-6, 0))
    with pytest.raises(UnsupportedModelError, match=r"'y_q' \(QuantizeLinear\): its scales give a requantization "
                                                    r"factor .*needs a left shift"):
        npu_sim.load(model, board="default")
    npu_sim.load(model, board="onnx")


# -- the records ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    rng = rng_for("records", "conv")
    m = build_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                    {"x": (1, 3, 6, 6)}, {"y": None}, {"w": weights(rng, (4, 3, 3, 3)), "b": weights(rng, (4,))})
    return quantize(m, tmp_path_factory.mktemp("records"), "conv", activation_type="s8", per_channel=True,
                    calib_count=2)


def test_conv_records_hold_what_it_runs_with(conv_model, tmp_path):
    for board, bits in (("default", 31), (_board(tmp_path, 16), 16)):
        node = next(n for n in npu_sim.load(conv_model, board=board).program.nodes if n.op == "Conv")
        rq, w = node.requant, node.weights
        assert rq.rounding == "half_up" and rq.bits == bits and rq.channels == 4
        assert not {"mult", "shift", "bias", "out_zp", "qmin", "qmax", "_w"} & set(node.params)  # no copies
        assert f"mult=[{','.join(str(v) for v in rq.mult)}]" in node.describe_params()  # the listing shows it
        assert int(np.abs(rq.mult).max()) < 2 ** bits and int(np.abs(rq.mult).min()) >= 2 ** (bits - 1)
        assert w.axis == 0 and w.data.shape == (4, 3, 3, 3) and w.per_channel and not w.spatial_1d
        assert node.accumulator.bits == 32 and not node.accumulator.saturate
        assert node.tables is None and node.operands is None
        assert node.clamp == (rq.qmin, rq.qmax)
        g = node.geometry
        assert (g.kernel, g.stride, g.dilation, g.groups) == ((3, 3), (1, 1), (1, 1), 1)


def test_check_measures_the_window_record():
    """The check's window measures read the node's Geometry record, never a params or attrs key."""
    node = Node("c", "Conv", [], [], None, params={"kernel": (1, 1), "stride": (1, 1)}, attrs={"kernel": (1, 1)},
                geometry=Geometry((7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1))
    assert geometry(node) == {"kernel": (7, 7), "stride": (2, 2), "dilation": (1, 1), "pads": (3, 3, 3, 3)}
    assert set(geometry(Node("m", "Mul", [], [], None, params={"kernel": "QLinearMul"})).values()) == {None}


def test_op_facts_agree_with_the_op_lists():
    """The facts the analyses read (``opset.facts_of``) say what the op lists say."""
    assert {op for op, f in OPS.items() if f.kind == "mac"} == set(MAC_OPS)
    assert {op for op, f in OPS.items() if f.matrix} == {"Gemm", "MatMul"}
    assert {op for op, f in OPS.items() if f.convolution} == {"Conv"}
    assert {op for op, f in OPS.items() if f.transposed} == {"ConvTranspose"}
    assert {op for op, f in OPS.items() if f.global_pool} <= {op for op, f in OPS.items() if f.window}
    assert {op for op, f in OPS.items() if f.pad} == {"Pad"} and "Pad" in MOVEMENT_OPS
    assert [facts_of(op).kind for op in CONVERT_OPS] == ["convert"] * len(CONVERT_OPS)
    assert facts_of("NoSuchOp").kind == "unknown" and not facts_of("NoSuchOp").folds_pad


def test_conv_records_under_other_arithmetics(conv_model):
    onnx_node = next(n for n in npu_sim.load(conv_model, board="onnx").program.nodes if n.op == "Conv")
    assert onnx_node.requant.rounding == "float32" and onnx_node.requant.mult is None
    assert onnx_node.requant.ratio.dtype == np.float32 and onnx_node.requant.ratio.size == 4
    tfl = next(n for n in npu_sim.load(conv_model, board="ethos-u55-128").program.nodes if n.op == "Conv")
    assert tfl.requant.rounding == "double" and tfl.requant.bits == 31 and tfl.requant.mult.size == 4


def test_lut_records(tmp_path):
    node = next(n for n in npu_sim.load(_unary(tmp_path / "s.onnx", "Sigmoid", (0.05, 0), (1 / 256, -128)),
                                        board="default").program.nodes if n.op == "Sigmoid")
    assert node.tables.main.size == 256 and node.tables.in_q.dtype == "int8" and node.requant is None
    assert lut_bytes(node.tables) == 256


@pytest.mark.parametrize("op,want", [("Softmax", {"exp", "recip"}), ("Div", {"recip"}), ("Tanh", {"table"})])
def test_lowered_tables_are_in_the_record(tmp_path, op, want):
    """Softmax's exponential and reciprocal tables, Div's reciprocal table, a Tanh's own table."""
    ins = {"x": (1, 16), "d": (1, 16)} if op == "Div" else {"x": (1, 16)}
    onode = helper.make_node(op, list(ins), ["y"], name="n")
    sim = npu_sim.load(quantize(build_model([onode], ins, {"y": None}), tmp_path, op, activation_type="s8",
                                calib_count=2), board="default")
    node = next(n for n in sim.program.nodes if n.op == op)
    assert set(node.tables.entries) == want and lut_bytes(node.tables) > 0


# -- the LUT activation table -----------------------------------------------------------------------------------

def test_every_lut_activation_is_an_op_the_boards_lower():
    assert LUT_OPS == tuple(LUT_ACTIVATIONS)
    for op, entry in LUT_ACTIVATIONS.items():
        assert entry.op == op and OPS[op].kind == "lut" and entry.sweeps
        for arith in ("fixedpoint", "onnx"):
            assert lowering_of(arith, op) is not None, (op, arith)


@pytest.mark.parametrize("op", list(LUT_ACTIVATIONS))
def test_lut_functions_have_no_nan_over_their_swept_domains(op):
    """``lut.evaluate`` refuses a NaN: each swept domain, and one unit past either end, gives none."""
    for sweep in LUT_ACTIVATIONS[op].sweeps:
        f = lut.function_for(op, dict(sweep.attrs), sweep.exponent)
        lo, hi = sweep.x_range
        assert lut.evaluate(f, np.linspace(lo - 1, hi + 1, 1001)).shape == (1001,)


def test_every_sweep_is_measured_in_the_docs_and_bounded_by_a_test():
    text = (DOCS / "LUT_ERRORS.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| ([^|]+?) \| \[", text, re.M))
    labels = {s.label for a in LUT_ACTIVATIONS.values() for s in a.sweeps}
    assert labels <= rows and labels == set(MEASURED_16)


def test_bad_attributes_are_the_nodes_problem():
    with pytest.raises(Problem, match="approximate='fast'"):
        lut.function_for("Gelu", {"approximate": b"fast"})
    with pytest.raises(Problem, match="constant scalar exponent"):
        lut.function_for("Pow")
    with pytest.raises(Problem, match="not finite"):
        lut.function_for("Pow", exponent=math.inf)
    with pytest.raises(Problem, match="no lookup-table function"):
        lut.function_for("Relu")


def test_compare_explains_a_tflite_matmul_with_per_tensor_weights(tmp_path):
    """A MatMul by per-tensor int8 weights on a TFLite board has one multiplier per column (its Requant record's
    channels): compare tries its variations per column (it used to fail broadcasting them, a traceback)."""
    rng = rng_for("records", "matmul")
    m = build_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"x": (1, 4, 16)}, {"y": None},
                    {"w": weights(rng, (16, 8))})
    model = quantize(m, tmp_path, "mm", activation_type="s8", calib_count=2)
    node = next(n for n in npu_sim.load(model, board="ethos-u55-128").program.nodes if n.op == "MatMul")
    assert not node.weights.per_channel and node.requant.channels == 8 and node.requant.rounding == "double"
    np.save(tmp_path / "x.npy", rng.standard_normal((1, 4, 16)).astype(np.float32) * 3)
    assert cli_main(["run", str(model), "--board", "ethos-u55-128", "--input", f"x={tmp_path / 'x.npy'}",
                     "--dump-all", "--out", str(tmp_path / "dump")]) == 0
    f = tmp_path / "dump" / json.loads((tmp_path / "dump" / "index.json").read_text())["y_QuantizeLinear_Input"]["file"]
    y = np.load(f)
    y.reshape(-1)[[1, 9, 17]] = np.clip(y.reshape(-1)[[1, 9, 17]].astype(np.int64) + 3, -128, 127)  # not a rule
    np.save(f, y)
    t = npu_sim.compare_dump(model, tmp_path / "dump", board="ethos-u55-128").first_divergent_tensor
    assert t.producer == "mm" and t.differing == 3 and t.unexplained == 3
