"""External oracle: onnxruntime's fused 8-bit Add / Mul / GlobalAveragePool against board ``onnx``.

onnxruntime (CPU, x86-64) fuses these QDQ groups into com.microsoft QLinearAdd / QLinearMul /
QLinearGlobalAveragePool, whose arithmetic differs from the ONNX definition on ties. Board ``onnx`` models those
kernels exactly where onnxruntime fuses and keeps the ONNX definition elsewhere, so on one-op QDQ models
(integer model inputs -> DequantizeLinear -> op -> QuantizeLinear) it must reproduce every output integer:

* ``test_fused_*_bit_exact``: random scales over a wide range (and tie-prone ones: small dyadic/decimal
  ratios), random zero points, uint8 and int8, broadcasting shapes, many random inputs: 0 mismatches, and the
  optimized graph must really contain the fused op.
* ``test_broadcast_operand_order``: onnxruntime hands MLAS the operand broadcast along the innermost dimension as
  its second operand, which changes QLinearAdd's rounding; shapes and scales are chosen so that the two orders
  give different integers, and npu-sim must pick onnxruntime's.
* ``test_fusion_conditions``: graph variants around the op (Relu/Clip after it, a second consumer, mixed types,
  a float constant operand, Sub): npu-sim must predict onnxruntime's fusion decision and match it bit for bit
  either way.

Sessions are single-threaded with ``session.qdqisint8allowed`` = 1 (the configuration the other oracle tests
use); for these ops the option changes nothing in one-op models (onnxruntime fuses 8-bit binary ops and
GlobalAveragePool for both signs).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npu_sim
from kernels.ort_qladd import ort_qladd
from kernels.ort_qlgavgpool import qlgavgpool_scale
from npu_sim.ops.elementwise import ort_input0_is_broadcast
from tests import helpers_oracle as H

ELEM = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
FUSED = {"Add": "QLinearAdd", "Mul": "QLinearMul", "GlobalAveragePool": "QLinearGlobalAveragePool"}
OPSET = 17


# ----------------------------------------------------------------------------------------------------------
# model building
# ----------------------------------------------------------------------------------------------------------
def _qparams(prefix, scale, zp, dtype):
    return [numpy_helper.from_array(np.array(scale, np.float32), f"{prefix}_s"),
            numpy_helper.from_array(np.array(zp, dtype), f"{prefix}_z")]


def binary_model(op, shape_a, shape_b, dtype, qa, qb, qy, *, dtype_b=None, act=None, extra_consumer=False,
                 b_const=None, b_float_const=None):
    """DQ(a), DQ(b) -> op -> [act] -> Q(y). ``qa``/``qb``/``qy``: (scale, zero point).

    ``act``: None, "relu" or ("clip", lo, hi) (lo/hi None = absent); ``extra_consumer``: the op's float output
    also feeds a second QuantizeLinear (output ``y2``); ``b_const``: B is a quantized initializer (DQ of a
    constant); ``b_float_const``: B is a float initializer without DequantizeLinear.
    """
    dtype_b = dtype_b or dtype
    inits = _qparams("a", *qa, dtype) + _qparams("b", *qb, dtype_b) + _qparams("y", *qy, dtype)
    inputs = [helper.make_tensor_value_info("a", ELEM[dtype], list(shape_a))]
    nodes = [helper.make_node("DequantizeLinear", ["a", "a_s", "a_z"], ["af"])]
    if b_float_const is not None:
        inits.append(numpy_helper.from_array(np.asarray(b_float_const, np.float32), "bf"))
    else:
        if b_const is not None:
            inits.append(numpy_helper.from_array(np.asarray(b_const, dtype_b), "b"))
        else:
            inputs.append(helper.make_tensor_value_info("b", ELEM[dtype_b], list(shape_b)))
        nodes.append(helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["bf"]))
    nodes.append(helper.make_node(op, ["af", "bf"], ["of"]))
    last = "of"
    if act == "relu":
        nodes.append(helper.make_node("Relu", [last], ["rf"]))
        last = "rf"
    elif act is not None:
        _, lo, hi = act
        names = [last, "", ""]
        for i, v in ((1, lo), (2, hi)):
            if v is not None:
                inits.append(numpy_helper.from_array(np.array(v, np.float32), f"clip{i}"))
                names[i] = f"clip{i}"
        while names[-1] == "":
            names.pop()
        nodes.append(helper.make_node("Clip", names, ["rf"]))
        last = "rf"
    nodes.append(helper.make_node("QuantizeLinear", [last, "y_s", "y_z"], ["y"]))
    out_shape = list(np.broadcast_shapes(tuple(shape_a), tuple(shape_b)))
    outputs = [helper.make_tensor_value_info("y", ELEM[dtype], out_shape)]
    if extra_consumer:
        nodes.append(helper.make_node("QuantizeLinear", ["of", "y_s", "y_z"], ["y2"]))
        outputs.append(helper.make_tensor_value_info("y2", ELEM[dtype], out_shape))
    return H.model_of(nodes, inputs, outputs, inits, OPSET)


def gap_model(shape, dtype, qx, qy, act=None):
    inits = _qparams("x", *qx, dtype) + _qparams("y", *qy, dtype)
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
             helper.make_node("GlobalAveragePool", ["xf"], ["of"])]
    last = "of"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["of"], ["rf"]))
        last = "rf"
    nodes.append(helper.make_node("QuantizeLinear", [last, "y_s", "y_z"], ["y"]))
    return H.model_of(nodes, [helper.make_tensor_value_info("x", ELEM[dtype], list(shape))],
                      [helper.make_tensor_value_info("y", ELEM[dtype], list(shape[:2]) + [1] * (len(shape) - 2))],
                      inits, OPSET)


def _session(model, tmp_path):
    opt = tmp_path / "optimized.onnx"
    sess = H.ort_session(model, optimized_path=str(opt), int8_fusion=True)
    return sess, [n.op_type for n in onnx.load(str(opt)).graph.node]


def _sim_kernel(sim, op) -> str | None:
    """The onnxruntime kernel npu-sim runs for ``op`` (None: the ONNX definition)."""
    node = next(n for n in sim.program.nodes if n.op == op)
    return node.params.get("kernel")


def _rand(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def _scales(rng, n):
    """n float32 scales: log-uniform over [2**-20, 2**4], or tie-prone (small ratios to a common base)."""
    if rng.random() < 0.5:
        return [float(np.float32(2.0 ** rng.uniform(-20, 4))) for _ in range(n)]
    base = 2.0 ** rng.uniform(-12, 0)
    return [float(np.float32(base * rng.choice([0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 0.1, 0.3, 2.5])))
            for _ in range(n)]


def _zps(rng, dtype, n):
    info = np.iinfo(dtype)
    return [int(rng.choice([info.min, info.max, 0 if info.min < 0 else 128, rng.integers(info.min, info.max + 1)]))
            for _ in range(n)]


# ----------------------------------------------------------------------------------------------------------
# fused ops, bit exact
# ----------------------------------------------------------------------------------------------------------
BINARY_SHAPES = [
    ((1, 8, 6, 6), (1, 8, 6, 6)),      # residual Add
    ((2, 8, 5, 7), (1, 8, 1, 1)),      # per-channel operand second (MLAS: vector + scalar)
    ((1, 8, 1, 1), (2, 8, 5, 7)),      # per-channel operand first (onnxruntime swaps the MLAS operands)
    ((1, 1, 5, 7), (2, 8, 5, 7)),      # broadcast on outer dims only: general span
    ((3, 1), (3, 33)),                 # innermost broadcast first
    ((37,), ()),                       # rank-0 second
    ((), (2, 3, 4)),                   # rank-0 first
    ((1000,), (1000,)),
]
CONFIGS_PER_CASE = 12
INPUTS_PER_CONFIG = 12


@pytest.mark.parametrize("dtype", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_fused_binary_bit_exact(op, dtype, tmp_path):
    rng = np.random.default_rng(hash((op, np.dtype(dtype).name)) % 2 ** 32)
    n_inputs = n_elements = n_bad = 0
    for shape_a, shape_b in BINARY_SHAPES:
        for _ in range(CONFIGS_PER_CASE):
            scales, zps = _scales(rng, 3), _zps(rng, dtype, 3)
            if op == "Mul" and rng.random() < 0.5:  # the usual Mul: output scale near sa*sb
                scales[2] = float(np.float32(scales[0] * scales[1] * rng.choice([1.0, 2.0, 0.5, 16.0, 100.0])))
            model = binary_model(op, shape_a, shape_b, dtype, *zip(scales, zps))
            sess, ops = _session(model, tmp_path)
            assert ops == [FUSED[op]], f"onnxruntime did not fuse {op} {shape_a} {shape_b}: {ops}"
            sim = npu_sim.load(model, board="onnx")
            assert _sim_kernel(sim, op) == FUSED[op]
            for _ in range(INPUTS_PER_CONFIG):
                feeds = {"a": _rand(rng, shape_a, dtype), "b": _rand(rng, shape_b, dtype)}
                want = sess.run(["y"], feeds)[0]
                got = sim.run(feeds, raw=True)["y"]
                assert got.shape == want.shape and got.dtype == want.dtype
                bad = int(np.count_nonzero(got != want))
                assert bad == 0, (f"{op} {np.dtype(dtype).name} {shape_a}+{shape_b} scales {scales} zps {zps}: "
                                  f"{bad} of {want.size} integers differ from onnxruntime")
                n_inputs += 1
                n_elements += want.size
                n_bad += bad
    print(f"\n[oracle-ort-elementwise] {op} {np.dtype(dtype).name}: {n_inputs} random inputs, {n_elements} output "
          f"integers, {n_bad} differ from onnxruntime")


@pytest.mark.parametrize("dtype", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_fused_binary_exhaustive_grid(op, dtype, tmp_path):
    """Every (a, b) pair of the type at once, for a handful of scale/zero-point draws (tie-prone included)."""
    rng = np.random.default_rng(7 + (op == "Mul"))
    info = np.iinfo(dtype)
    grid = np.arange(info.min, info.max + 1).astype(dtype)
    a, b = np.repeat(grid, 256), np.tile(grid, 256)
    for _ in range(10):
        scales, zps = _scales(rng, 3), _zps(rng, dtype, 3)
        model = binary_model(op, (65536,), (65536,), dtype, *zip(scales, zps))
        sess, ops = _session(model, tmp_path)
        assert ops == [FUSED[op]]
        want = sess.run(["y"], {"a": a, "b": b})[0]
        got = npu_sim.load(model, board="onnx").run({"a": a, "b": b}, raw=True)["y"]
        np.testing.assert_array_equal(got, want, err_msg=f"{op} scales {scales} zps {zps}")


def test_add_integer_indefinite_matches_onnxruntime(tmp_path):
    """Scale ratios so large that the float32 result passes 2**31: cvtps2dq's -2**31 saturates to the minimum."""
    dtype = np.uint8
    model = binary_model("Add", (4,), (4,), dtype, (2.0 ** 12, 0), (1.0, 0), (2.0 ** -12, 0))
    sess, ops = _session(model, tmp_path)
    assert ops == ["QLinearAdd"]
    feeds = {"a": np.array([255, 128, 127, 1], dtype), "b": np.zeros(4, dtype)}
    want = sess.run(["y"], feeds)[0]
    assert want.tolist() == [0, 0, 255, 255]
    np.testing.assert_array_equal(npu_sim.load(model, board="onnx").run(feeds, raw=True)["y"], want)


GAP_SHAPES = [(1, 16, 7, 7), (2, 8, 1, 1), (1, 8, 3, 5), (1, 4, 14, 14), (1, 3, 64, 64), (2, 5, 9)]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8], ids=["uint8", "int8"])
def test_fused_gap_bit_exact(dtype, tmp_path):
    rng = np.random.default_rng(11 + (dtype == np.int8))
    n_inputs = n_elements = refused = 0
    for shape in GAP_SHAPES:
        n = int(np.prod(shape[2:]))
        done = 0
        while done < 10:
            (sx, sy), zps = _scales(rng, 2), _zps(rng, dtype, 2)
            model = gap_model(shape, dtype, (sx, zps[0]), (sy, zps[1]))
            sess, ops = _session(model, tmp_path)
            assert ops == ["QLinearGlobalAveragePool"], ops
            sim = npu_sim.load(model, board="onnx")
            x = _rand(rng, shape, dtype)
            try:
                qlgavgpool_scale(sx, sy, n)
            except ValueError:  # onnxruntime refuses these; npu-sim keeps the ONNX definition
                with pytest.raises(Exception, match="out of computation range"):
                    sess.run(["y"], {"x": x})
                assert _sim_kernel(sim, "GlobalAveragePool") is None
                refused += 1
                continue
            assert _sim_kernel(sim, "GlobalAveragePool") == "QLinearGlobalAveragePool"
            for _ in range(INPUTS_PER_CONFIG):
                x = _rand(rng, shape, dtype)
                if rng.random() < 0.3:  # values near the zero point: many exact ties
                    x = np.clip(x, zps[0] - 2, zps[0] + 2).astype(dtype)
                want = sess.run(["y"], {"x": x})[0]
                got = sim.run({"x": x}, raw=True)["y"]
                assert got.shape == want.shape
                np.testing.assert_array_equal(got, want, err_msg=f"GAP {shape} sx {sx} sy {sy} zps {zps}")
                n_inputs += 1
                n_elements += want.size
            done += 1
    print(f"\n[oracle-ort-elementwise] GlobalAveragePool {np.dtype(dtype).name}: {n_inputs} random inputs, "
          f"{n_elements} output integers, 0 differ ({refused} configurations refused by onnxruntime)")


# ----------------------------------------------------------------------------------------------------------
# which operand MLAS gets first
# ----------------------------------------------------------------------------------------------------------
# (shape of A carrying the 256 values, shape of B, whether onnxruntime treats A as the scalar side)
ORDER_CASES = [
    ((1, 256, 1, 1), (1, 256, 1, 9), True),
    ((1, 256, 1, 9), (1, 256, 1, 1), False),
    ((256, 1, 1), (1, 1), True),     # both innermost sizes 1 at the span start: input 0 wins
    ((256, 1), (), True),            # rank-0 B against an innermost 1
    ((256,), (), False),
    ((), (256,), True),
    ((256, 1), (256, 1), False),
    ((1, 1, 256), (4, 3, 256), False),
]


@pytest.mark.parametrize("shape_a, shape_b, a_scalar", ORDER_CASES, ids=lambda v: str(v).replace(" ", ""))
def test_broadcast_operand_order(shape_a, shape_b, a_scalar, tmp_path):
    assert ort_input0_is_broadcast(shape_a, shape_b) == a_scalar
    rng = np.random.default_rng(3)
    dtype = np.uint8
    out_shape = np.broadcast_shapes(shape_a, shape_b)
    for attempt in range(5000):  # scales for which the two operand orders give different integers
        scales, zps = _scales(rng, 3), _zps(rng, dtype, 3)
        a = (np.arange(256, dtype=dtype).reshape(shape_a) if int(np.prod(shape_a)) == 256
             else _rand(rng, shape_a, dtype))
        b = _rand(rng, shape_b, dtype)
        fa, fb = (np.ascontiguousarray(np.broadcast_to(v, out_shape)).reshape(-1) for v in (a, b))
        plain, swapped = np.empty_like(fa), np.empty_like(fa)
        (sa, sb, sy), (za, zb, zy) = scales, zps
        ort_qladd(fa, sa, za, fb, sb, zb, sy, zy, plain)
        ort_qladd(fb, sb, zb, fa, sa, za, sy, zy, swapped)
        if not np.array_equal(plain, swapped):
            break
    else:
        pytest.fail("no discriminating scales found")
    model = binary_model("Add", shape_a, shape_b, dtype, *zip(scales, zps))
    sess, ops = _session(model, tmp_path)
    assert ops == ["QLinearAdd"]
    want = sess.run(["y"], {"a": a, "b": b})[0]
    np.testing.assert_array_equal(want.reshape(-1), swapped if a_scalar else plain)
    got = npu_sim.load(model, board="onnx").run({"a": a, "b": b}, raw=True)["y"]
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------------------------------------
# when onnxruntime fuses
# ----------------------------------------------------------------------------------------------------------
U8 = np.uint8
FUSION_CASES = {
    # name: (op, binary_model keyword arguments, output zero point, expected fused)
    "plain": ("Add", {}, 128, True),
    "relu_zp_min": ("Add", {"act": "relu"}, 0, True),
    "relu_zp_mid": ("Add", {"act": "relu"}, 128, False),
    "clip_covering": ("Add", {"act": ("clip", -100.0, 100.0)}, 128, True),
    "clip_narrow": ("Add", {"act": ("clip", 0.0, 6.0)}, 0, False),
    "clip_min_only": ("Add", {"act": ("clip", -100.0, None)}, 128, True),     # dropped by ClipQuantFusion
    "clip_max_rounds_up": ("Add", {"act": ("clip", -5.12, 5.07)}, 128, True),  # quantized bounds cover the type
    "clip_max_rounds_down": ("Add", {"act": ("clip", -5.12, 5.05)}, 128, False),
    "clip_max_only_narrow": ("Add", {"act": ("clip", None, 1.0)}, 128, False),
    "second_consumer": ("Add", {"extra_consumer": True}, 128, False),
    "mixed_types": ("Add", {"dtype_b": np.int8}, 128, False),
    "const_operand": ("Add", {"b_const": np.arange(8, dtype=U8).reshape(1, 8, 1, 1)}, 128, True),
    "float_operand": ("Add", {"b_float_const": np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8, 1, 1)}, 128,
                      False),
    "sub": ("Sub", {}, 128, False),
    "mul_relu_zp_min": ("Mul", {"act": "relu"}, 0, True),
    "mul_const": ("Mul", {"b_const": np.arange(8, dtype=U8).reshape(1, 8, 1, 1)}, 128, True),
}


@pytest.mark.parametrize("case", list(FUSION_CASES))
def test_fusion_conditions(case, tmp_path):
    op, kwargs, zy, fused = FUSION_CASES[case]
    rng = np.random.default_rng(5)
    shape_a, shape_b = (1, 8, 4, 4), (1, 8, 1, 1)
    dtype_b = kwargs.get("dtype_b", U8)
    qb = (0.03, 0 if dtype_b == np.int8 else 120)
    model = binary_model(op, shape_a, shape_b, U8, (0.05, 128), qb, (0.04 if op != "Mul" else 0.002, zy), **kwargs)
    sess, ops = _session(model, tmp_path)
    target = FUSED.get(op)
    assert (target in ops) == fused, f"{case}: expected onnxruntime fused={fused}, optimized graph {ops}"
    sim = npu_sim.load(model, board="onnx")
    assert (_sim_kernel(sim, op) is not None) == fused, f"{case}: npu-sim predicted the wrong fusion"
    outs = [o.name for o in model.graph.output]
    names = {i.name for i in model.graph.input}
    for _ in range(20):
        feeds = {"a": _rand(rng, shape_a, U8)}
        if "b" in names:
            feeds["b"] = _rand(rng, shape_b, dtype_b)
        want = sess.run(outs, feeds)
        got = sim.run(feeds, raw=True)
        for name, w in zip(outs, want):
            np.testing.assert_array_equal(got[name], w, err_msg=f"{case}: output {name}")


def test_gap_fusion_with_relu(tmp_path):
    for zy, fused in ((0, True), (10, False)):
        model = gap_model((1, 8, 5, 5), U8, (0.05, 100), (0.01, zy), act="relu")
        sess, ops = _session(model, tmp_path)
        assert ("QLinearGlobalAveragePool" in ops) == fused, ops
        sim = npu_sim.load(model, board="onnx")
        assert (_sim_kernel(sim, "GlobalAveragePool") is not None) == fused
        rng = np.random.default_rng(zy)
        for _ in range(20):
            x = _rand(rng, (1, 8, 5, 5), U8)
            np.testing.assert_array_equal(sim.run({"x": x}, raw=True)["y"], sess.run(["y"], {"x": x})[0])
