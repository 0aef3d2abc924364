"""npu_sim.frontend.tflite.flatbuf: each committed .tflite fixture read into the right tensors, operators, dtypes,
quantization and builtin options (checked against the tflite package's own accessors, and against facts of the
Keras models the fixtures were made from); builtin options of ops the fixtures lack, on synthetic files."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import tflite

from npu_sim.errors import ModelLoadError
from npu_sim.frontend.tflite.flatbuf import TflModel, is_tflite, read_tflite
from tests.tflite_writer import edited, read_spec, write

FIXTURES = Path(__file__).parent / "fixtures" / "tflite"
FILES = sorted(FIXTURES.glob("*.tflite"))
MOBILENETS = sorted(Path("/root/.cache/npu-sim/issue29").glob("*.tflite"))


def _vector(raw) -> tuple:
    return () if isinstance(raw, int) else tuple(raw)  # the accessors give 0 for an absent vector (a scalar's shape)


def _names(cls) -> dict[int, str]:
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


@pytest.mark.parametrize("path", FILES + MOBILENETS, ids=lambda p: p.stem)
def test_fixture_agrees_with_the_tflite_package(path):
    model = read_tflite(path)
    m = tflite.Model.GetRootAs(path.read_bytes(), 0)
    sg = m.Subgraphs(0)
    assert model.subgraphs == m.SubgraphsLength() == 1 and model.version == 3
    assert model.inputs == _vector(sg.InputsAsNumpy()) and model.outputs == _vector(sg.OutputsAsNumpy())
    assert len(model.tensors) == sg.TensorsLength() and len(model.operators) == sg.OperatorsLength()
    types, ops = _names(tflite.TensorType), _names(tflite.BuiltinOperator)
    for t in model.tensors:
        raw = sg.Tensors(t.index)
        assert t.name == raw.Name().decode() and t.shape == _vector(raw.ShapeAsNumpy())
        assert t.dtype == types[raw.Type()].lower()
        q = raw.Quantization()
        if q is not None and q.ScaleLength():
            np.testing.assert_array_equal(t.quant.scale, q.ScaleAsNumpy())
            np.testing.assert_array_equal(t.quant.zero_point, q.ZeroPointAsNumpy())
            assert t.quant.axis == q.QuantizedDimension() and t.quant.scale.dtype == np.float32
            assert t.quant.zero_point.dtype == np.int64
        data = m.Buffers(raw.Buffer()).DataAsNumpy()
        if isinstance(data, int) or not data.size:
            assert t.data is None
        else:
            assert t.data.shape == t.shape and t.data.tobytes() == data.tobytes()
    for op in model.operators:
        raw = sg.Operators(op.index)
        code = m.OperatorCodes(raw.OpcodeIndex())
        assert op.op == ops[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]
        assert op.inputs == _vector(raw.InputsAsNumpy()) and op.outputs == _vector(raw.OutputsAsNumpy())
        assert op.version == code.Version()


def test_conv_int8():
    model = read_tflite(FIXTURES / "conv_int8.tflite")
    assert [op.op for op in model.operators] == ["CONV_2D", "CONV_2D"]
    first, second = model.operators
    assert first.options == {"padding": "SAME", "stride_w": 1, "stride_h": 1, "dilation_w_factor": 1,
                             "dilation_h_factor": 1, "fused_activation_function": "RELU",
                             "quantized_bias_type": "FLOAT32"}
    assert (second.options["padding"], second.options["stride_w"], second.options["fused_activation_function"]) == \
        ("VALID", 2, "NONE")
    x, w, b = (model.tensors[i] for i in first.inputs)
    assert (x.name, x.shape, x.dtype, x.data, x.shape_signature) == ("serving_default_input:0", (1, 8, 8, 3),
                                                                     "int8", None, None)
    assert x.quant.scale.shape == (1,) and x.quant.zero_point.tolist() == [-1]
    assert (w.shape, w.dtype, w.data.dtype, w.quant.axis, w.quant.scale.shape) == ((8, 3, 3, 3), "int8", np.int8, 0,
                                                                                    (8,))
    assert (b.shape, b.dtype, b.data.dtype) == ((8,), "int32", np.int32)
    assert model.label(second) == "operator 1 (CONV_2D, output 'StatefulPartitionedCall:0')"
    assert model.description == "MLIR Converted." and model.path == FIXTURES / "conv_int8.tflite"


def test_sixteen_by_eight_dtypes():
    model = read_tflite(FIXTURES / "conv_a16w8.tflite")
    x, w, b = (model.tensors[i] for i in model.operators[0].inputs)
    assert (x.dtype, w.dtype, b.dtype, b.data.dtype) == ("int16", "int8", "int64", np.int64)
    assert x.quant.zero_point.tolist() == [0]


@pytest.mark.parametrize("base, index, op, expected", [
    ("depthwise_int8", 0, "DEPTHWISE_CONV_2D", {"depth_multiplier": 2, "fused_activation_function": "RELU6",
                                                "padding": "SAME", "stride_w": 1}),
    ("depthwise_int8", 1, "DEPTHWISE_CONV_2D", {"depth_multiplier": 1, "padding": "VALID", "stride_h": 2}),
    ("fc_int8", 1, "FULLY_CONNECTED", {"keep_num_dims": False, "weights_format": "DEFAULT",
                                       "fused_activation_function": "RELU", "asymmetric_quantize_inputs": False}),
    ("fc_int8", 0, "RESHAPE", {"new_shape": ()}),
    ("add_mul_int8", 2, "ADD", {"fused_activation_function": "NONE", "pot_scale_int16": True}),
    ("add_mul_a16w8", 2, "ADD", {"pot_scale_int16": False}),
    ("add_mul_int8", 3, "MUL", {"fused_activation_function": "NONE"}),
    ("add_mul_int8", 4, "SUB", {"fused_activation_function": "NONE"}),
    ("pools_int8", 1, "AVERAGE_POOL_2D", {"filter_width": 3, "filter_height": 3, "stride_w": 2, "padding": "SAME"}),
    ("pools_int8", 2, "MAX_POOL_2D", {"filter_width": 2, "filter_height": 2, "stride_h": 2, "padding": "VALID"}),
    ("pools_int8", 3, "CONCATENATION", {"axis": 3, "fused_activation_function": "NONE"}),
    ("mean_int8", 1, "MEAN", {"keep_dims": False}),
    ("softmax_int8", 2, "SOFTMAX", {"beta": 1.0}),
    ("resize_int8", 1, "RESIZE_BILINEAR", {"align_corners": False, "half_pixel_centers": True}),
    ("resize_int8", 2, "RESIZE_NEAREST_NEIGHBOR", {"align_corners": False, "half_pixel_centers": True}),
    ("hardswish_int8", 1, "HARD_SWISH", {}),
    ("activations_int8", 1, "LOGISTIC", {}),
])
def test_fixture_options(base, index, op, expected):
    got = read_tflite(FIXTURES / f"{base}.tflite").operators[index]
    assert got.op == op
    assert {k: got.options[k] for k in expected} == expected
    assert not expected or all(isinstance(v, (int, float, bool, str, tuple)) for v in got.options.values())


def _with_op(tmp_path, builtin: str, options: tuple[str, dict] | None) -> TflModel:
    """conv_int8 whose operator 1 is ``builtin`` carrying ``options`` (raw schema values) instead."""
    spec = edited(read_spec(FIXTURES / "conv_int8.tflite"))
    code = getattr(tflite.BuiltinOperator, builtin)
    spec["opcodes"].append({"deprecated": min(code, 127), "builtin": code, "custom": None, "version": 1})
    spec["subgraphs"][0]["operators"][1].update(opcode=len(spec["opcodes"]) - 1, options=options)
    path = tmp_path / f"{builtin}.tflite"
    path.write_bytes(write(spec))
    return read_tflite(path)


A, P = tflite.ActivationFunctionType, tflite.Padding


@pytest.mark.parametrize("builtin, options, expected", [
    ("RESHAPE", ("ReshapeOptions", {"NewShape": np.array([1, 1000], np.int32)}), {"new_shape": (1, 1000)}),
    ("SQUEEZE", ("SqueezeOptions", {"SqueezeDims": np.array([1, 2], np.int32)}), {"squeeze_dims": (1, 2)}),
    ("LEAKY_RELU", ("LeakyReluOptions", {"Alpha": 0.25}), {"alpha": 0.25}),
    ("TRANSPOSE_CONV", ("TransposeConvOptions", {"Padding": P.VALID, "StrideW": 2, "StrideH": 3,
                                                 "FusedActivationFunction": A.RELU_N1_TO_1}),
     {"padding": "VALID", "stride_w": 2, "stride_h": 3, "fused_activation_function": "RELU_N1_TO_1"}),
    ("STRIDED_SLICE", ("StridedSliceOptions", {"BeginMask": 5, "EndMask": 3, "EllipsisMask": 0, "NewAxisMask": 0,
                                               "ShrinkAxisMask": 8, "Offset": True}),
     {"begin_mask": 5, "end_mask": 3, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 8,
      "offset": True}),
    ("PAD", ("PadOptions", {}), {}),
    ("PAD", None, {}),
    ("MEAN", ("ReducerOptions", {"KeepDims": True}), {"keep_dims": True}),
    ("CONCATENATION", ("ConcatenationOptions", {"Axis": -1, "FusedActivationFunction": A.TANH}),
     {"axis": -1, "fused_activation_function": "TANH"}),
    ("FULLY_CONNECTED", ("FullyConnectedOptions", {"KeepNumDims": True, "WeightsFormat": 1}),
     {"keep_num_dims": True, "weights_format": "SHUFFLED4x16INT8", "fused_activation_function": "NONE"}),
    ("FULLY_CONNECTED", None, {"keep_num_dims": False, "weights_format": "DEFAULT"}),  # absent: the defaults
    ("SOFTMAX", ("SoftmaxOptions", {"Beta": 0.5}), {"beta": 0.5}),
    ("RESIZE_BILINEAR", ("ResizeBilinearOptions", {"AlignCorners": True}),
     {"align_corners": True, "half_pixel_centers": False}),
    ("DEPTHWISE_CONV_2D", ("DepthwiseConv2DOptions", {"Padding": P.SAME, "StrideW": 1, "StrideH": 1,
                                                      "DepthMultiplier": 4, "DilationWFactor": 2}),
     {"depth_multiplier": 4, "dilation_w_factor": 2, "dilation_h_factor": 1, "padding": "SAME"}),
    ("RELU", None, {}),
])
def test_synthetic_options(tmp_path, builtin, options, expected):
    op = _with_op(tmp_path, builtin, options).operators[1]
    assert op.op == builtin and {k: op.options[k] for k in expected} == expected


def test_a_greater_op_code_is_read_from_builtin_code(tmp_path):
    assert _with_op(tmp_path, "GELU", None).operators[1].op == "GELU"  # 150: deprecated_builtin_code holds 127


def test_mobilenet_shape_signature():
    if not MOBILENETS:
        pytest.skip("no MobileNet .tflite in /root/.cache/npu-sim/issue29")
    model = read_tflite(MOBILENETS[0])
    x = model.tensors[model.inputs[0]]
    assert x.shape == (1, 224, 224, 3) and x.shape_signature == (-1, 224, 224, 3)
    assert model.operators[0].op in ("CONV_2D", "QUANTIZE")


def test_is_tflite(tmp_path):
    assert is_tflite(FIXTURES / "conv_int8.tflite") and is_tflite(str(FIXTURES / "conv_int8.tflite"))
    assert not is_tflite(FIXTURES / "conv_int8.onnx")
    (tmp_path / "empty.tflite").write_bytes(b"")
    (tmp_path / "short").write_bytes(b"\0\0\0\0TFL")
    (tmp_path / "header").write_bytes(b"\0\0\0\0TFL3")
    assert not is_tflite(tmp_path / "empty.tflite") and not is_tflite(tmp_path / "short")
    assert is_tflite(tmp_path / "header")
    assert not is_tflite(tmp_path / "missing.tflite") and not is_tflite(tmp_path)


def test_missing_and_unreadable(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file"):
        read_tflite(tmp_path / "missing.tflite")
    with pytest.raises(ModelLoadError, match="cannot read"):
        read_tflite(tmp_path)


def test_read_results_are_frozen():
    model = read_tflite(FIXTURES / "conv_int8.tflite")
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.tensors[0].name = "x"
