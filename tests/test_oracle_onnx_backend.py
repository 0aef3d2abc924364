"""External oracle: ONNX's own backend node test cases for the quantization ops, bit for bit.

Every case of ``onnx.backend.test.case.node`` for QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul,
ConvInteger and MatMulInteger (the data the ONNX project ships to certify backends) must be reproduced exactly
with the ``onnx`` board arithmetic:

* QuantizeLinear: float graph input -> QuantizeLinear -> integer graph output (the program's Quantize step).
* DequantizeLinear: integer graph input -> DequantizeLinear -> float graph output (the dequantized output).
* QLinearConv / QLinearMatMul are QOperator ops: each case is rewritten as its QDQ equivalent (integer input ->
  DequantizeLinear; weight initializer -> DequantizeLinear; int32 bias -> DequantizeLinear with scale sx*sw;
  Conv/MatMul; QuantizeLinear -> integer output) and run through ``npu_sim.load(..., board="onnx")``.
* ConvInteger / MatMulInteger have int32 outputs and no requantization: they check the accumulation kernels
  (``kernels.conv2d.conv2d_acc``, ``kernels.gemm.int_matmul``) directly.

Skipped, only when npu-sim refuses the model with an NpuSimError naming the feature: float8 / float4
formats, 2-bit integers, blocked quantization, float16 scales (npu-sim's front door refuses scales that are
not float32, naming the type; were one accepted, its case would run and must match like the others).

Cases whose scales / zero points are 1-element 1-D tensors (shape (1,)) run twice: as given, and with those
reshaped to scalars (``-scalar_qparams``), which tells shape handling apart from arithmetic.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import npu_sim
from tests import helpers_oracle as H

CASES = H.load_node_cases()

# Features npu-sim does not support; a case using one is skipped if (and only if) npu-sim refuses it.
MINIFLOATS = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
              TensorProto.FLOAT8E5M2FNUZ}
for _name in ("FLOAT8E8M0", "FLOAT4E2M1"):
    if hasattr(TensorProto, _name):
        MINIFLOATS.add(getattr(TensorProto, _name))
INT2 = {getattr(TensorProto, n) for n in ("INT2", "UINT2") if hasattr(TensorProto, n)}
STORAGE = {"int4": np.int8, "uint4": np.uint8}
ONNX_OPSET = 21  # of the QDQ models built here (per-axis, int4 and int16 Q/DQ are all in opset 21)


def unsupported_feature(case: H.NodeCase) -> tuple[str, tuple[str, ...]] | None:
    """(feature, words one of which npu-sim's refusal must contain) for a case using an unsupported feature."""
    types = set(case.input_types) | set(case.output_types)
    attrs = {a.name: helper.get_attribute_value(a) for a in case.node.attribute}
    if types & MINIFLOATS:
        return "float8/float4 quantization formats", ("float8", "float4", "unsupported quantized type")
    if types & INT2:
        return "2-bit integer quantization", ("int2", "uint2", "unsupported quantized type")
    if attrs.get("block_size", 0):
        return "blocked quantization (block_size)", ("block",)
    if TensorProto.FLOAT16 in types or TensorProto.BFLOAT16 in types:
        return "float16 scales", ("float16",)
    return None


def case_names(*ops):
    return sorted(n for n, c in CASES.items() if c.node.op_type in ops)


QPARAM_SLOTS = ("scale", "zero_point")


def _has_1d_singletons(case) -> bool:
    return any(k.endswith(QPARAM_SLOTS) and np.ndim(v) == 1 and np.size(v) == 1
               for k, (v, _) in case.named_inputs().items())


def case_params(*ops):
    """One parameter per case; cases with 1-element 1-D scales/zero points (shape (1,)) also get a ``scalar``
    variant with those reshaped to scalars (same values), which separates shape handling from arithmetic."""
    out = []
    for name in case_names(*ops):
        out.append(pytest.param(name, False, id=name))
        feature = unsupported_feature(CASES[name])
        if _has_1d_singletons(CASES[name]) and (feature is None or feature[0] == "float16 scales"):
            out.append(pytest.param(name, True, id=f"{name}-scalar_qparams"))
    return out


def named_inputs(case, scalar_qparams: bool) -> dict:
    named = case.named_inputs()
    if scalar_qparams:
        named = {k: ((np.asarray(v).reshape(()) if k.endswith(QPARAM_SLOTS) and np.size(v) == 1 else v), t)
                 for k, (v, t) in named.items()}
    return named


def test_cases_found():
    """The backend data of every op family is there (a missing family would silently test nothing)."""
    for op in H.CASE_OPS:
        assert case_names(op), f"no ONNX backend test case for {op}"
    for name in ("test_quantizelinear", "test_quantizelinear_axis", "test_quantizelinear_int16",
                 "test_quantizelinear_uint16", "test_dequantizelinear", "test_dequantizelinear_axis",
                 "test_qlinearconv", "test_convinteger_with_padding", "test_convinteger_without_padding",
                 "test_matmulinteger", "test_qlinearmatmul_2D_uint8_float32", "test_qlinearmatmul_3D_int8_float32"):
        assert name in CASES, name


# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------
def _vi(name, elem_type, shape):
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def _load_or_skip(model, feature, name, **kw):
    """npu_sim.load. A case using an unsupported feature is skipped when npu-sim refuses it with an NpuSimError
    that names the feature; if npu-sim accepts it, its result is checked like any other case."""
    if feature is None:
        return npu_sim.load(model, board="onnx", **kw)
    what, words = feature
    try:
        return npu_sim.load(model, board="onnx", **kw)
    except npu_sim.NpuSimError as exc:
        if not any(w.lower() in str(exc).lower() for w in words):
            raise
        pytest.skip(f"{name}: {what}: not supported by npu-sim ({str(exc).splitlines()[-1].strip()})")


def _assert_same(got, expected, what, check_dtype=True):
    """Bit-exact equality (4-bit expected values are held in int8/uint8, as npu-sim stores them)."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != expected {expected.shape}"
    if check_dtype:
        assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != expected {expected.dtype}"
    if expected.dtype.kind == "f":
        same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    else:
        same = got.astype(np.int64) == expected.astype(np.int64)
    if not same.all():
        bad = np.argwhere(~same.reshape(expected.shape) if same.ndim else ~same)
        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        raise AssertionError(f"{what}: {int((~same).sum())}/{same.size} elements differ (max |diff| "
                             f"{diff.max():g}); first at {bad[0].tolist() if len(bad) else '()'}: "
                             f"got {got.reshape(-1)[np.argmax(~same.reshape(-1))]}, expected "
                             f"{expected.reshape(-1)[np.argmax(~same.reshape(-1))]}\n got={got!r}\n expected={expected!r}")


def _axis_attr(case, default=1):
    attrs = {a.name: helper.get_attribute_value(a) for a in case.node.attribute}
    return int(attrs.get("axis", default))


def _copy_attrs(case, keep):
    return {a.name: helper.get_attribute_value(a) for a in case.node.attribute if a.name in keep}


# ----------------------------------------------------------------------------------------------------------
# QuantizeLinear: the program's Quantize step (float model input -> integers)
# ----------------------------------------------------------------------------------------------------------
def _quantize_model(x_shape, scale, zp, zp_type, out_type, attrs, with_zp=True):
    inits = [H.tensor("y_scale", scale)]
    ins = ["x", "y_scale"]
    if with_zp:
        inits.append(H.tensor("y_zero_point", zp, zp_type))
        ins.append("y_zero_point")
    node = helper.make_node("QuantizeLinear", ins, ["y"], **attrs)
    return H.model_of([node], [_vi("x", TensorProto.FLOAT, x_shape)], [_vi("y", out_type, x_shape)], inits,
                      ONNX_OPSET)


@pytest.mark.parametrize("name,scalar_qparams", case_params("QuantizeLinear"))
def test_quantizelinear(name, scalar_qparams):
    case = CASES[name]
    reason = unsupported_feature(case)
    named = named_inputs(case, scalar_qparams)
    x = named["x"][0].astype(np.float32)
    scale = named["y_scale"][0]
    zp, zp_type = named.get("y_zero_point", (None, None))
    expected = case.outputs[0]
    out_type = case.output_types[0]
    attrs = _copy_attrs(case, ("axis", "saturate", "output_dtype", "block_size", "precision"))
    model = _quantize_model(x.shape, scale, zp, zp_type, out_type, attrs, with_zp=zp is not None)
    if reason is None and np.ndim(scale) == 1 and np.size(scale) > 1:
        # Per-axis quantization of a float model input: run it whole if npu-sim accepts it, else (npu-sim
        # quantizes float inputs per tensor only) run each slice along the axis as its own per-tensor model.
        try:
            sim = npu_sim.load(model, board="onnx")
        except npu_sim.UnsupportedModelError as exc:
            if "per axis" not in str(exc):
                raise
            axis = _axis_attr(case) % x.ndim
            slice_attrs = {k: v for k, v in attrs.items() if k != "axis"}
            for c in range(x.shape[axis]):
                xc = np.take(x, [c], axis=axis)
                m = _quantize_model(xc.shape, scale[c], None if zp is None else zp[c], zp_type, out_type,
                                    slice_attrs, with_zp=zp is not None)
                got = npu_sim.load(m, board="onnx").run({"x": xc}, raw=True)["y"]
                _assert_same(got, np.take(expected, [c], axis=axis), f"{name} channel {c}")
            return
    else:
        sim = _load_or_skip(model, reason, name)
    assert [n.op for n in sim.program.nodes] == ["Quantize"]
    got = sim.run({"x": x}, raw=True)["y"]
    _assert_same(got, expected, name)


# ----------------------------------------------------------------------------------------------------------
# DequantizeLinear: integer model input -> dequantized float output
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,scalar_qparams", case_params("DequantizeLinear"))
def test_dequantizelinear(name, scalar_qparams):
    case = CASES[name]
    reason = unsupported_feature(case)
    named = named_inputs(case, scalar_qparams)
    x, x_type = named["x"]
    scale = named["x_scale"][0]
    inits = [H.tensor("x_scale", scale)]
    ins = ["x", "x_scale"]
    if "x_zero_point" in named:
        zp, zp_type = named["x_zero_point"]
        inits.append(H.tensor("x_zero_point", zp, zp_type))
        ins.append("x_zero_point")
    attrs = _copy_attrs(case, ("axis", "block_size", "output_dtype"))
    node = helper.make_node("DequantizeLinear", ins, ["y"], **attrs)
    expected = case.outputs[0]
    model = H.model_of([node], [_vi("x", x_type, x.shape)], [_vi("y", case.output_types[0], expected.shape)],
                       inits, ONNX_OPSET)
    sim = _load_or_skip(model, reason, name)
    assert sim.inputs["x"][0] == tuple(x.shape)
    feed = x.astype(STORAGE.get(sim.inputs["x"][1], sim.inputs["x"][1]))  # int4/uint4 live in int8/uint8 arrays
    assert np.array_equal(feed.astype(np.int64), x.astype(np.int64))
    got = sim.run({"x": feed})["y"]
    _assert_same(got, expected, name)


# ----------------------------------------------------------------------------------------------------------
# QLinearConv -> QDQ Conv
# ----------------------------------------------------------------------------------------------------------
def qlinearconv_as_qdq(case: H.NodeCase, scalar_qparams: bool = False) -> onnx.ModelProto:
    """QLinearConv(x, sx, zx, w, sw, zw, sy, zy, B) as the QDQ graph onnxruntime's quantizer writes."""
    n = named_inputs(case, scalar_qparams)
    x, x_type = n["x"]
    w, w_type = n["w"]
    sx, sw = np.asarray(n["x_scale"][0], np.float32), np.asarray(n["w_scale"][0], np.float32)
    per_channel = sw.size > 1
    inits = [H.tensor("x_scale", sx), H.tensor("x_zero_point", n["x_zero_point"][0]),
             H.tensor("w", w, w_type), H.tensor("w_scale", sw), H.tensor("w_zero_point", n["w_zero_point"][0]),
             H.tensor("y_scale", n["y_scale"][0]), H.tensor("y_zero_point", n["y_zero_point"][0])]
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zero_point"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero_point"], ["wf"],
                              **({"axis": 0} if per_channel else {}))]
    conv_in = ["xf", "wf"]
    if "B" in n:
        b = np.asarray(n["B"][0], np.int32)
        b_scale = (sx.reshape(-1)[0] * sw.reshape(-1)).astype(np.float32)
        b_scale = b_scale if per_channel else b_scale.reshape(())
        inits += [H.tensor("B", b), H.tensor("B_scale", b_scale),
                  H.tensor("B_zero_point", np.zeros(b_scale.shape, np.int32))]
        nodes.append(helper.make_node("DequantizeLinear", ["B", "B_scale", "B_zero_point"], ["bf"],
                                      **({"axis": 0} if per_channel else {})))
        conv_in.append("bf")
    nodes.append(helper.make_node("Conv", conv_in, ["yf"],
                                  **_copy_attrs(case, ("auto_pad", "dilations", "group", "kernel_shape", "pads",
                                                       "strides"))))
    nodes.append(helper.make_node("QuantizeLinear", ["yf", "y_scale", "y_zero_point"], ["y"]))
    y = case.outputs[0]
    return H.model_of(nodes, [_vi("x", x_type, x.shape)], [_vi("y", case.output_types[0], y.shape)], inits,
                      ONNX_OPSET)


@pytest.mark.parametrize("name,scalar_qparams", case_params("QLinearConv"))
def test_qlinearconv(name, scalar_qparams):
    case = CASES[name]
    sim = _load_or_skip(qlinearconv_as_qdq(case, scalar_qparams), unsupported_feature(case), name)
    assert [n.op for n in sim.program.nodes] == ["Conv"]
    x = case.named_inputs()["x"][0]
    got = sim.run({"x": x}, raw=True)["y"]
    _assert_same(got, case.outputs[0], name)


# ----------------------------------------------------------------------------------------------------------
# QLinearMatMul -> QDQ MatMul (B as a second integer input, and for 2-D B also as a constant weight)
# ----------------------------------------------------------------------------------------------------------
def qlinearmatmul_as_qdq(case: H.NodeCase, b_const: bool, scalar_qparams: bool = False) -> onnx.ModelProto:
    """QLinearMatMul(a, sa, za, b, sb, zb, sy, zy): a (and b, unless ``b_const``) integer graph inputs ->
    DequantizeLinear -> MatMul -> QuantizeLinear -> integer output."""
    n = named_inputs(case, scalar_qparams)
    a, a_type = n["a"]
    b, b_type = n["b"]
    inits = [H.tensor("a_scale", n["a_scale"][0]), H.tensor("a_zero_point", n["a_zero_point"][0]),
             H.tensor("b_scale", n["b_scale"][0]), H.tensor("b_zero_point", n["b_zero_point"][0]),
             H.tensor("y_scale", n["y_scale"][0]), H.tensor("y_zero_point", n["y_zero_point"][0])]
    inputs = [_vi("a", a_type, a.shape)]
    if b_const:
        inits.append(H.tensor("b", b, b_type))
    else:
        inputs.append(_vi("b", b_type, b.shape))
    nodes = [helper.make_node("DequantizeLinear", ["a", "a_scale", "a_zero_point"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zero_point"], ["bf"]),
             helper.make_node("MatMul", ["af", "bf"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "y_scale", "y_zero_point"], ["y"])]
    y = case.outputs[0]
    return H.model_of(nodes, inputs, [_vi("y", case.output_types[0], y.shape)], inits, ONNX_OPSET)


def _qlinearmatmul_params():
    out = []
    for p in case_params("QLinearMatMul"):
        name, scalar = p.values
        out.append(pytest.param(name, False, scalar, id=f"{p.id}-b_input"))
        if CASES[name].named_inputs()["b"][0].ndim == 2:
            out.append(pytest.param(name, True, scalar, id=f"{p.id}-b_const"))
    return out


@pytest.mark.parametrize("name,b_const,scalar_qparams", _qlinearmatmul_params())
def test_qlinearmatmul(name, b_const, scalar_qparams):
    case = CASES[name]
    sim = _load_or_skip(qlinearmatmul_as_qdq(case, b_const, scalar_qparams), unsupported_feature(case), name)
    assert [n.op for n in sim.program.nodes] == ["MatMul"]
    n = case.named_inputs()
    feeds = {"a": n["a"][0]} if b_const else {"a": n["a"][0], "b": n["b"][0]}
    got = sim.run(feeds, raw=True)["y"]
    _assert_same(got, case.outputs[0], name)


# ----------------------------------------------------------------------------------------------------------
# ConvInteger / MatMulInteger: the accumulation kernels
# ----------------------------------------------------------------------------------------------------------
def _zp(named, key, n_channels):
    if key not in named:
        return np.zeros(1, np.int64)
    z = np.asarray(named[key][0]).astype(np.int64).reshape(-1)
    assert z.size in (1, n_channels)
    return z


def _conv_pads(attrs, in_hw, k, s, d):
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(2):
            out = -(-in_hw[i] // s[i])
            total = max((out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_hw[i], 0)
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            begin.append(lo)
            end.append(total - lo)
        return (begin[0], begin[1], end[0], end[1])
    p = list(attrs.get("pads", [0, 0, 0, 0]))
    return (p[0], p[1], p[2], p[3])


@pytest.mark.parametrize("name", case_names("ConvInteger"))
def test_convinteger(name):
    from kernels.conv2d import conv2d_acc

    case = CASES[name]
    n = case.named_inputs()
    x, w = n["x"][0], n["w"][0]
    assert x.ndim == 4, "2-D ConvInteger cases only"
    cout = w.shape[0]
    x_zp = _zp(n, "x_zero_point", 1)
    assert x_zp.size == 1
    w_zp = _zp(n, "w_zero_point", cout)
    w_minus_zp = np.ascontiguousarray(w.astype(np.int32) - w_zp.reshape(-1, 1, 1, 1).astype(np.int32))
    a = {at.name: helper.get_attribute_value(at) for at in case.node.attribute}
    k = w.shape[2:]
    s = tuple(a.get("strides", [1, 1]))
    d = tuple(a.get("dilations", [1, 1]))
    pads = _conv_pads(a, x.shape[2:], k, s, d)
    acc = conv2d_acc(np.ascontiguousarray(x), int(x_zp[0]), w_minus_zp, s, pads, d, int(a.get("group", 1)))
    assert acc.dtype == np.int64
    _assert_same(acc, case.outputs[0], name, check_dtype=False)  # int64 accumulator vs ONNX's int32 output


@pytest.mark.parametrize("name", case_names("MatMulInteger"))
def test_matmulinteger(name):
    from kernels.gemm import int_matmul

    case = CASES[name]
    n = case.named_inputs()
    a, b = n["A"][0], n["B"][0]
    assert a.ndim == 2 and b.ndim == 2, "2-D MatMulInteger cases only"
    a_zp = _zp(n, "a_zero_point", a.shape[0]).reshape(-1, 1)   # scalar, or one per row of A
    b_zp = _zp(n, "b_zero_point", b.shape[1]).reshape(1, -1)   # scalar, or one per column of B
    acc = int_matmul(np.ascontiguousarray(a.astype(np.int64) - a_zp), np.ascontiguousarray(b.astype(np.int64) - b_zp))
    assert acc.dtype == np.int64
    _assert_same(acc, case.outputs[0], name, check_dtype=False)  # int64 accumulator vs ONNX's int32 output
