"""qlinear_avgpool (onnxruntime's QLinearAveragePool) == golden twin, bit for bit; and == onnxruntime."""
import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from onnx import TensorProto, helper, numpy_helper

from kernels.ort_qlavgpool import qlinear_avgpool
from tests import naive_ort as N


@st.composite
def case(draw):
    dtype = draw(st.sampled_from([np.int8, np.uint8]))
    info = np.iinfo(dtype)
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    top, left = draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))
    h, w = draw(st.integers(kh, 6)), draw(st.integers(kw, 6))
    ho, wo = (h + 2 * top - kh) // sh + 1, (w + 2 * left - kw) // sw + 1
    x = np.array(draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=2 * h * w, max_size=2 * h * w)),
                 dtype).reshape(1, 2, h, w)
    sx, sy = draw(st.floats(1e-3, 1.0)), draw(st.floats(1e-3, 1.0))
    zx, zy = draw(st.integers(int(info.min), int(info.max))), draw(st.integers(int(info.min), int(info.max)))
    return (x, np.float32(sx), zx, np.float32(sy), zy, (kh, kw), (sh, sw), (top, left, top, left),
            draw(st.booleans()), (ho, wo), int(info.min), int(info.max), dtype)


@settings(deadline=None, max_examples=examples(150))
@given(case())
def test_qlinear_avgpool_matches_twin(c):
    x, sx, zx, sy, zy, k, s, pads, inc, out_hw, qmin, qmax, dtype = c
    expected = N.qlavgpool(x, sx, zx, sy, zy, k, s, pads, inc, out_hw, qmin, qmax, dtype)
    out = np.empty(expected.shape, dtype)
    qlinear_avgpool(x, sx, zx, sy, zy, k, s, pads, inc, qmin, qmax, out)
    np.testing.assert_array_equal(out, expected)


def _qdq_avgpool(path, dtype, sx, zx, sy, zy, **attrs):
    t = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"), numpy_helper.from_array(np.array(zx, dtype), "zx"),
             numpy_helper.from_array(np.array(sy, np.float32), "sy"), numpy_helper.from_array(np.array(zy, dtype), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x"]),
             helper.make_node("AveragePool", ["x"], ["y"], **attrs),
             helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "p", [helper.make_tensor_value_info("xq", t, [1, 3, 9, 9])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_npu_sim_onnx_board_matches_onnxruntime_qlinear_avgpool(tmp_path):
    import npu_sim
    rng = np.random.default_rng(0)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    mismatches = 0
    for trial in range(24):
        dtype = (np.int8, np.uint8)[trial % 2]
        info = np.iinfo(dtype)
        attrs = dict(kernel_shape=[3, 3], strides=[1 + trial % 2, 1 + trial % 2], pads=[1, 1, 1, 1],
                     count_include_pad=trial // 2 % 2)
        path = _qdq_avgpool(tmp_path / f"m{trial}.onnx", dtype, rng.uniform(0.01, 0.3), int(rng.integers(-20, 20))
                            + (128 if dtype == np.uint8 else 0), rng.uniform(0.01, 0.3),
                            int(rng.integers(-20, 20)) + (128 if dtype == np.uint8 else 0), **attrs)
        x = rng.integers(info.min, int(info.max) + 1, (1, 3, 9, 9)).astype(dtype)
        ref = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]
        got = npu_sim.load(path, board="onnx").run({"xq": x})["out"]
        mismatches += int(np.count_nonzero(got != ref))
    assert mismatches == 0


def test_zero_point_added_before_rounding_is_modelled(tmp_path):
    """2x2 windows at equal scales make x.5 averages; with an odd output zero point onnxruntime's
    rint(v + zy) and ONNX's rint(v) + zy differ on them. The onnx board must follow onnxruntime."""
    import npu_sim
    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    path = _qdq_avgpool(tmp_path / "ties.onnx", np.int8, 0.05, 0, 0.05, 3, kernel_shape=[2, 2], strides=[1, 1])
    x = np.random.default_rng(1).integers(-128, 128, (1, 3, 9, 9)).astype(np.int8)
    ref = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]
    sim = npu_sim.load(path, board="onnx")
    assert any(n.attrs.get("arithmetic") == "onnxruntime QLinearAveragePool" for n in sim.program.nodes)
    np.testing.assert_array_equal(sim.run({"xq": x})["out"], ref)  # (the ONNX definition fails this case)
