"""A corpus of broken or odd variants of real QDQ models, built at test time (nothing committed but this code).

Two bases: the committed demo model (``models/demo/digits_cnn.qdq.onnx``, batch fixed to 1) and ``mixed``, a small
float model quantized by onnxruntime's ``quantize_static`` (Conv, Resize, MaxPool, Concat, Reshape, MatMul,
Gather, Softmax), so that axis, index and scale cases have an op to hit.

Each case is ``Case(name, base, edit, fragments)``: ``edit(model, folder)`` changes a copy of the base in place
(or returns a replacement, or writes files beside it); ``fragments`` are strings the refusal must contain (the
culprit: a node, tensor, attribute or number). ``valid=True`` marks a variant that is valid ONNX and must run.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests import hostile_edits as e
from tests.qdq_models import build_model, quantize, rng_for, weights

DEMO = Path(__file__).parent.parent / "models" / "demo" / "digits_cnn.qdq.onnx"


@dataclass
class Case:
    name: str
    base: str                       # "demo" | "mixed"
    edit: Callable
    fragments: tuple = ()           # what a refusal must name
    valid: bool = False             # valid ONNX: must run (exit 0)
    raw: bool = False               # edit writes the file itself (edit(path, model) -> path)
    args: list = field(default_factory=list)   # extra CLI arguments


# ---- the bases -------------------------------------------------------------------------------------------------
def demo_base() -> onnx.ModelProto:
    m = onnx.load(str(DEMO))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    return m


def mixed_float() -> onnx.ModelProto:
    rng = rng_for("hostile_mixed")
    inits = {"W": weights(rng, (4, 3, 3, 3), 0.3), "B": weights(rng, (4,), 0.1),
             "scales": np.array([1, 1, 2, 2], np.float32), "shape": np.array([1, 7, 64], np.int64),
             "M": weights(rng, (64, 10), 0.2), "idx": np.array([0, 2], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "scales"], ["r"], name="resize", mode="nearest"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Concat", ["p", "x"], ["cat"], name="concat", axis=1),
             helper.make_node("Reshape", ["cat", "shape"], ["flat"], name="reshape"),
             helper.make_node("MatMul", ["flat", "M"], ["mm"], name="matmul"),
             helper.make_node("Gather", ["mm", "idx"], ["g"], name="gather", axis=1),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1)]
    return build_model(nodes, {"x": (1, 3, 8, 8)}, {"y": (1, 2, 10)}, inits, name="hostile_mixed")


def mixed_base(folder) -> onnx.ModelProto:
    return onnx.load(str(quantize(mixed_float(), folder, "hostile_mixed", activation_type="s8")))


D, X = "demo", "mixed"
CASES = [
    # graph structure
    Case("cycle", D, e.cycle, ("conv1",)),
    Case("reverse_order", D, e.reverse, ("topological",)),
    Case("shuffled_order", D, e.shuffle, ("topological",)),
    Case("input_nobody_produces", D, lambda m, f: e.set_input(m, "conv2", 0, "ghost"), ("ghost", "conv2")),
    Case("missing_initializer", D, e.drop_init("conv2.weight_quantized"), ("conv2.weight_quantized",)),
    Case("missing_scale_initializer", D, e.drop_init("conv1_out_scale"), ("conv1_out_scale",)),
    Case("two_nodes_write_one_tensor", D, e.dup_output, ("relu1_out",)),
    Case("duplicate_initializer", D, e.dup_init, ("conv1_out_scale",)),
    Case("duplicate_graph_input", D, e.dup_graph_input, ("input",)),
    Case("no_outputs", D, e.no_outputs, ("output",)),
    Case("output_nobody_produces", D, e.output_ghost, ("ghost_output",)),
    Case("duplicate_graph_output", D, e.same_name_input_output, ("logits",)),
    Case("initializer_is_node_output", D, e.init_is_node_output, ("conv1_out",)),
    Case("graph_input_is_node_output", D, e.input_is_node_output, ("input",)),
    Case("empty_graph", D, e.empty_graph, ()),
    Case("node_without_outputs", D, e.node_no_outputs, ("relu3",)),
    Case("empty_required_input", D, e.empty_name_required, ("conv1",)),
    Case("unknown_op", D, e.unknown_op, ("Frobnicate",)),
    Case("unimported_custom_domain", D, e.custom_domain_unimported, ("my.custom",)),
    Case("extra_input", D, e.extra_input, ("relu1",)),
    Case("conv_without_weight", D, e.no_weight, ("conv2",)),
    Case("unknown_attribute", D, e.unknown_attr, ("frobnicate",)),
    Case("attribute_wrong_type", D, e.attr_wrong_type, ("strides",)),
    Case("constant_without_value", D, e.constant_node_bad, ("const_empty",)),
    # opset and IR version
    Case("opset_99", D, e.opset(99), ("99",)),
    Case("opset_9", D, e.opset(9), ("9",)),
    Case("no_default_opset", D, e.no_default_opset, ("opset",)),
    Case("ir_version_99", D, e.ir(99), ("99",)),
    Case("ir_version_2", D, e.ir(2), ("IR",)),
    # quantization types
    Case("scale_float16", D, e.scale_type(TensorProto.FLOAT16), ("conv1_out_scale",)),
    Case("scale_bfloat16", D, e.scale_type(TensorProto.BFLOAT16), ("conv1_out_scale",)),
    Case("scale_double", D, e.scale_type(TensorProto.DOUBLE), ("conv1_out_scale",)),
    Case("zero_point_int32", D, e.zp_int32, ("conv1_out",)),
    Case("zero_point_uint16_q_int8_dq", D, e.q_dq_pair_mismatch, ("conv1_out",)),
    # ONNX allows 16-bit Q/DQ in the default domain from opset 21 (onnxruntime refuses it at 17); only tf2onnx's
    # TFLite 16x8 dialect is read, with a warning (tests/test_validate_schema.py)
    Case("zero_point_int16_opset17", D, e.fix_q_dq_zp(TensorProto.INT16), ("conv1_out", "int16", "opset 21")),
    Case("zero_point_int16_opset21", D, e.fix_q_dq_zp(TensorProto.INT16, 21), (), valid=True),
    Case("scale_graph_input", D, e.scale_as_graph_input, ("conv1_out_scale",)),
    Case("zero_point_graph_input", D, e.zp_as_graph_input, ("conv1_out_zero_point",)),
    Case("scale_from_node", D, e.scale_from_node, ("s_id",)),
    Case("scale_denormal", D, e.scale_value(1e-42), ("conv1_out_scale",)),
    Case("scale_tiny", D, e.scale_value(1e-30), ("conv1_out_QuantizeLinear", "multiplier")),
    Case("scale_huge", D, e.scale_value(1e30), ("relu1_out_QuantizeLinear", "multiplier")),  # relu1's factor
    Case("scale_nan", D, e.scale_value(np.nan), ("conv1_out_scale",)),
    Case("scale_inf", D, e.scale_value(np.inf), ("conv1_out_scale",)),
    Case("scale_zero", D, e.scale_value(0.0), ("conv1_out_scale",)),
    Case("scale_negative", D, e.scale_value(-0.1), ("conv1_out_scale",)),
    Case("scale_vector_on_activation", D, e.scale_value([0.1, 0.2]), ("conv1_out",)),
    Case("weight_scale_2d", D, e.weight_scale_2d, ("conv2.weight",)),
    Case("weight_scale_wrong_length", D, e.weight_scale_len, ("conv2.weight",)),
    Case("dq_axis_out_of_range", D, e.dq_axis(7), ("conv2.weight_DequantizeLinear",)),
    Case("missing_scale_input", D, e.missing_scale_input, ("conv1_out_QuantizeLinear",)),
    Case("float_into_dequantize", D, e.float_into_dq, ("conv2.weight",)),
    Case("int4_raw_twice", D, e.int4(double=True), ("conv2.weight_quantized",)),
    Case("int4_raw_short", D, e.int4(short=True), ("conv2.weight_quantized",)),
    Case("int4_valid", D, e.int4(), (), valid=True),
    Case("int8_raw_twice", D, e.raw_bytes("conv2.weight_quantized", 2), ("conv2.weight_quantized",)),
    Case("int8_raw_half", D, e.raw_bytes("conv2.weight_quantized", 0), ("conv2.weight_quantized",)),
    Case("unknown_data_type", D, e.bad_data_type, ("conv1_out_scale",)),
    Case("double_model_input", D, e.input_type(TensorProto.DOUBLE), ("input",)),
    Case("float16_model_input", D, e.input_type(TensorProto.FLOAT16), ("input",)),
    Case("int64_model_input", D, e.input_type(TensorProto.INT64), ("input",)),
    # attribute ranges
    Case("conv_stride_0", D, e.attr("conv2", "strides", [0, 1]), ("conv2", "strides")),
    Case("conv_stride_negative", D, e.attr("conv2", "strides", [-1, 1]), ("conv2", "strides")),
    Case("conv_dilation_0", D, e.attr("conv2", "dilations", [0, 1]), ("conv2", "dilations")),
    Case("conv_pads_negative", D, e.attr("conv2", "pads", [-1, 1, 1, 1]), ("conv2", "pads")),
    Case("conv_pads_wrong_length", D, e.attr("conv2", "pads", [1, 1, 1]), ("conv2", "pads")),
    Case("conv_strides_wrong_length", D, e.attr("conv2", "strides", [1, 1, 1]), ("conv2", "strides")),
    Case("conv_group_not_dividing", D, e.attr("conv2", "group", 3), ("conv2", "group")),
    Case("conv_group_0", D, e.attr("conv2", "group", 0), ("conv2", "group")),
    Case("conv_kernel_shape_mismatch", D, e.attr("conv2", "kernel_shape", [5, 5]), ("conv2", "kernel")),
    Case("conv_auto_pad_bad", D, e.attr("conv2", "auto_pad", "SIDEWAYS"), ("conv2", "auto_pad")),
    Case("conv_weight_in_channels", D, e.wrong_weight(lambda s: (s[0], 8) + s[2:]), ("conv2",)),
    Case("conv_weight_rank", D, e.wrong_weight(lambda s: s[:3]), ("conv2",)),
    Case("conv_kernel_larger_than_input", D, e.wrong_weight(lambda s: s[:2] + (11, 11)), ("conv2",)),
    Case("model_input_channels", D, e.set_input_dims([1, 3, 8, 8]), ("conv1",)),
    Case("model_input_rank", D, e.set_input_dims([1, 8, 8]), ("conv1",)),
    Case("model_input_too_small", D, e.set_input_dims([1, 1, 1, 1]), ("maxpool",)),
    Case("gemm_bias_length", D, e.gemm_bias_len, ("fc",)),
    Case("gemm_transB_0", D, e.attr("fc", "transB", 0), ("fc",)),
    Case("maxpool_stride_0", D, e.attr("maxpool", "strides", [0, 2]), ("maxpool", "strides")),
    Case("maxpool_pads_negative", D, e.attr("maxpool", "pads", [-1, 0, 0, 0]), ("maxpool", "pads")),
    Case("maxpool_pads_ge_kernel", D, e.attr("maxpool", "pads", [2, 2, 2, 2]), ("maxpool", "pads")),
    Case("maxpool_kernel_larger_than_input", D, e.pool_kernel_big, ("maxpool",)),
    Case("maxpool_dilation_0", D, e.attr("maxpool", "dilations", [0, 1]), ("maxpool", "dilations")),
    Case("flatten_axis_out_of_range", D, e.attr("flatten", "axis", 9), ("flatten", "axis")),
    Case("concat_axis_out_of_range", X, e.attr("concat", "axis", 5), ("concat", "axis")),
    Case("concat_axis_negative_out_of_range", X, e.attr("concat", "axis", -9), ("concat", "axis")),
    Case("concat_channel_mismatch_axis", X, e.attr("concat", "axis", 2), ("concat",)),
    Case("softmax_axis_out_of_range", X, e.softmax_axis(3), ("softmax", "axis")),
    Case("softmax_axis_negative_out_of_range", X, e.softmax_axis(-4), ("softmax", "axis")),
    Case("gather_axis_out_of_range", X, e.attr("gather", "axis", 3), ("gather", "axis")),
    Case("gather_index_out_of_range", X, e.gather_idx([0, 7]), ("gather", "7")),
    Case("gather_negative_index_out_of_range", X, e.gather_idx([0, -8]), ("gather", "-8")),
    Case("gather_negative_index_valid", X, e.gather_idx([0, -1]), (), valid=True),
    Case("resize_scales_zero", X, e.resize_scales([1, 1, 0, 0]), ("resize", "scales")),
    Case("resize_scales_negative", X, e.resize_scales([1, 1, -2, 2]), ("resize", "scales")),
    Case("resize_scales_wrong_length", X, e.resize_scales([2, 2]), ("resize",)),
    Case("resize_scales_nan", X, e.resize_scales([1, 1, np.nan, 2]), ("resize", "scales")),
    Case("reshape_wrong_count", X, e.reshape_to([1, 7, 65]), ("reshape",)),
    Case("reshape_two_minus_one", X, e.reshape_to([-1, -1, 64]), ("reshape",)),
    Case("matmul_shape_mismatch", X, e.reshape_to([1, 14, 32]), ("matmul",)),
    Case("conv_mixed_stride_0", X, e.attr("conv", "strides", [1, 0]), ("conv", "strides")),
    # sizes
    Case("input_1e14_elements", D, e.big_input, ("100000000000000",)),
    Case("input_shape_1e14_elements", D, e.all_dims_dynamic, ("100000000000000",),
         args=["--input-shape", "input=1000000x1x10000x10000"]),
    Case("initializer_1e14_dims_no_data", D, e.huge_init, ("conv2.weight_quantized",)),
    # files
    Case("truncated_file", D, e.truncate, ("m.onnx",), raw=True),
    Case("empty_file", D, e.empty, ("m.onnx",), raw=True),
    Case("directory_as_model", D, e.directory, ("m.onnx",), raw=True),
    Case("fifo_as_model", D, e.fifo, ("m.onnx",), raw=True),
    Case("npz_named_onnx", D, e.npz_named_onnx, ("m.onnx",), raw=True),
    Case("external_nul_in_location", D, e.nul_location, ("conv2.weight_quantized",)),
    Case("external_offset_past_end", D, e.offset_past_end, ("conv2.weight_quantized",)),
    Case("external_location_directory", D, e.location_dir, ("conv2.weight_quantized",)),
    Case("external_location_missing", D, lambda m, f: e.external(m, f, "conv2.weight_quantized", "gone.bin"),
         ("conv2.weight_quantized",)),
    Case("external_location_escape", D, lambda m, f: e.external(m, f, "conv2.weight_quantized", "../x.bin"),
         ("conv2.weight_quantized",)),
    Case("constant_external_escape", D, e.constant_external_escape, ("k_value", "outside")),
    Case("subgraph_external_escape", D, e.subgraph_external_escape, ("b_value", "outside")),
    Case("sparse_initializer_bad_indices", D, e.sparse_bad_indices, ("conv2.weight_quantized",)),
    # valid variants that must keep running
    Case("graph_input_shadowed_by_initializer", D, e.shadow, (), valid=True),
    Case("sparse_initializer", D, e.sparse, (), valid=True),
    Case("external_data_valid", D, lambda m, f: e.external(m, f, "conv2.weight_quantized", "w.bin", create="file"),
         (), valid=True),
    Case("unchanged_demo", D, lambda m, f: None, (), valid=True),
    Case("unchanged_mixed", X, lambda m, f: None, (), valid=True),
]


def build_case(case: Case, folder: Path, bases: dict) -> Path:
    """Write ``case``'s model into ``folder`` (``m.onnx``) and return its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(bases[case.base])
    path = folder / "m.onnx"
    if case.raw:
        return case.edit(path, model)
    result = case.edit(model, folder)
    onnx.save(result if result is not None else model, str(path))
    return path
