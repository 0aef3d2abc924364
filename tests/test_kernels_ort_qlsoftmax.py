"""qlinear_softmax (onnxruntime's QLinearSoftmax) == golden twin, bit for bit; board onnx == onnxruntime."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from onnx import TensorProto, helper, numpy_helper

from kernels.ort_qlsoftmax import qlinear_softmax
from tests import naive_ort as N


@st.composite
def y_scales(draw):
    """An output scale: 1/256 (onnxruntime's quantizer), 1/255, 1/128 -- with Y = floor(1 / y_scale) > 255 - zy
    the 255 clamp acts -- or log-uniform in [2**-9, 1]."""
    spread = st.floats(-9.0, 0.0).map(lambda e: 2.0 ** e)
    return np.float32(draw(st.one_of(st.sampled_from([1 / 256, 1 / 255, 1 / 128]), spread)))


@st.composite
def case(draw):
    """Rows of random values or with one clear maximum (p ~ 1 there, rint(p * Y) ~ Y), an output scale and a zero
    point anywhere in the dtype or where p = 1 lands just at or one past the 255 clamp (zy = 255 - Y, 256 - Y)."""
    dtype = draw(st.sampled_from([np.int8, np.uint8]))
    info = np.iinfo(dtype)
    rows, d = draw(st.integers(1, 3)), draw(st.integers(1, 40))
    if draw(st.booleans()):
        x = np.array(draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=rows * d,
                                   max_size=rows * d)), dtype).reshape(rows, d)
    else:
        x = np.full((rows, d), info.min, dtype)
        x[:, draw(st.integers(0, d - 1))] = info.max
    sy = draw(y_scales())
    y_mul = int(np.floor(np.float32(1.0) / sy))
    edges = [z for z in (255 - y_mul, 256 - y_mul) if info.min <= z <= info.max]
    zy = draw(st.one_of(N.zero_point(dtype), st.sampled_from(edges or [0])))
    return x, np.float32(draw(st.floats(1e-3, 0.5))), sy, zy, dtype


@settings(deadline=None, max_examples=examples(150))
@given(case())
def test_qlinear_softmax_matches_twin(c):
    from kernels.ort_qlsoftmax import defined
    x, sx, sy, zy, dtype = c
    out = np.empty(x.shape, dtype)
    if not defined(sx, x.shape[1], sy):  # onnxruntime itself overflows (undefined behaviour): refused
        with pytest.raises(ValueError, match="overflows"):
            qlinear_softmax(x, sx, sy, zy, out)
        return
    qlinear_softmax(x, sx, sy, zy, out)
    np.testing.assert_array_equal(out, N.qlsoftmax(x, sx, sy, zy, dtype))


def _model(path, dtype, sx, zx, shape, axis, sy=1 / 255, zy=None):
    t = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    if zy is None:
        zy = 0 if dtype == np.uint8 else -128
    inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"),
             numpy_helper.from_array(np.array(zx, dtype), "zx"),
             numpy_helper.from_array(np.array(sy, np.float32), "sy"),
             numpy_helper.from_array(np.array(zy, dtype), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x"]),
             helper.make_node("Softmax", ["x"], ["y"], axis=axis),
             helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("xq", t, list(shape))],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_board_onnx_matches_onnxruntime_qlinear_softmax(tmp_path):
    import npu_sim
    rng = np.random.default_rng(0)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    mismatches = total = 0
    for trial in range(16):
        dtype = (np.int8, np.uint8)[trial % 2]
        info = np.iinfo(dtype)
        shape, axis = ((2, 5, 37), -1) if trial < 8 else ((2, 6, 7), 1)
        # output scales 1/255, 1/256, 1/128 and any zero point: the clamp at the type's top (255, or 127 for int8)
        sy, zy = (1 / 255, 1 / 256, 1 / 128)[trial // 2 % 3], int(rng.integers(info.min, int(info.max) + 1))
        path = _model(tmp_path / f"m{trial}.onnx", dtype, rng.uniform(0.02, 0.3), int(rng.integers(-10, 10))
                      + (128 if dtype == np.uint8 else 0), shape, axis, sy, zy)
        x = rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
        ref = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]
        sim = npu_sim.load(path, board="onnx")
        assert any(n.attrs.get("arithmetic") == "onnxruntime QLinearSoftmax" for n in sim.program.nodes)
        got = sim.run({"xq": x})["out"]
        mismatches += int(np.count_nonzero(got != ref))
        total += got.size
    assert mismatches == 0, f"{mismatches} of {total}"


def test_board_onnx_int8_saturation_matches_onnxruntime(tmp_path):
    """int8 output at onnxruntime's quantizer defaults (y_scale 1/256, y_zp -128): where the softmax is ~1,
    rint(p * 256) - 128 = 128 passes the int8 range -- onnxruntime 1.32 gives 127 (0.99609375; older releases
    wrapped to -128, microsoft/onnxruntime#29728), the board onnx too."""
    import npu_sim
    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    x = np.array([[127, -128, -128, -128], [0, 0, 0, 0]], np.int8)
    path = _model(tmp_path / "m.onnx", np.int8, 0.1, 0, x.shape, -1, 1 / 256, -128)
    ref = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]
    assert ref[0, 0] == np.float32(255 / 256)
    np.testing.assert_array_equal(npu_sim.load(path, board="onnx").run({"xq": x})["out"], ref)
