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
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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
    from tests.qdq_models import build_model, rng_for, weights
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
    from tests.qdq_models import quantize
    return onnx.load(str(quantize(mixed_float(), folder, "hostile_mixed", activation_type="s8")))


# ---- edit helpers ----------------------------------------------------------------------------------------------
def node(m, name):
    return next(n for n in m.graph.node if n.name == name)


def init(m, name):
    return next(i for i in m.graph.initializer if i.name == name)


def set_attr(m, node_name, attr, value):
    n = node(m, node_name)
    for a in list(n.attribute):
        if a.name == attr:
            n.attribute.remove(a)
    n.attribute.append(helper.make_attribute(attr, value))


def replace_init(m, name, array, elem=None):
    old = init(m, name)
    new = numpy_helper.from_array(np.asarray(array), name)
    if elem is not None:
        new = helper.make_tensor(name, elem, list(np.shape(array)), np.asarray(array).reshape(-1).tolist())
    m.graph.initializer.remove(old)
    m.graph.initializer.append(new)


def retype_scale(m, name, elem):
    value = numpy_helper.to_array(init(m, name)).astype(np.float64)
    replace_init(m, name, value, elem)


def set_input(m, node_name, index, tensor):
    node(m, node_name).input[index] = tensor


def input_dims(m, dims, elem=None):
    tt = m.graph.input[0].type.tensor_type
    tt.ClearField("shape")
    for d in dims:
        tt.shape.dim.add().dim_value = d
    if elem is not None:
        tt.elem_type = elem


def to_int4(m, name, double=False, short=False):
    t = init(m, name)
    arr = np.clip(numpy_helper.to_array(t).astype(np.int64), -8, 7)
    new = helper.make_tensor(name, TensorProto.INT4, list(arr.shape), arr.reshape(-1).tolist())
    packed = bytes(((int(a) & 15) | ((int(b) & 15) << 4)) for a, b in
                   zip(arr.reshape(-1)[0::2], np.append(arr.reshape(-1)[1::2], 0)))
    new.ClearField("int32_data")
    new.raw_data = packed * 2 if double else (packed[:-3] if short else packed)
    m.graph.initializer.remove(t)
    m.graph.initializer.append(new)
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] == name:
            zp = init(m, n.input[2])
            new_zp = helper.make_tensor(zp.name, TensorProto.INT4, list(zp.dims),
                                        numpy_helper.to_array(zp).reshape(-1).astype(int).tolist())
            m.graph.initializer.remove(zp)
            m.graph.initializer.append(new_zp)
    m.ir_version = max(m.ir_version, 10)
    for o in m.opset_import:
        if o.domain == "":
            o.version = max(o.version, 21)


def external(m, folder, name, location, offset=0, length=None, create=None):
    t = init(m, name)
    data = t.raw_data
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length or len(data)))):
        entry = t.external_data.add()
        entry.key, entry.value = k, v
    if create == "file":
        (Path(folder) / location).write_bytes(data)
    elif create == "dir":
        (Path(folder) / location).mkdir()


def add_q_dq_pair_type(m, tensor, q_zp_elem, dq_zp_elem):
    """Give the QuantizeLinear and DequantizeLinear of ``tensor`` zero points of the given types."""
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor)
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0])
    for nd, elem, suffix in ((q, q_zp_elem, "_qzp"), (dq, dq_zp_elem, "_dqzp")):
        if elem is None:
            continue
        m.graph.initializer.append(helper.make_tensor(tensor + suffix, elem, [], [0]))
        nd.input[2] = tensor + suffix


def sparse_weight(m, name):
    t = init(m, name)
    arr = numpy_helper.to_array(t)
    flat = arr.reshape(-1)
    nz = np.flatnonzero(flat)
    values = numpy_helper.from_array(flat[nz], name)
    indices = numpy_helper.from_array(nz.astype(np.int64), name + "_idx")
    m.graph.initializer.remove(t)
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, list(arr.shape)))


def shadow_input(m, name):
    """A graph input with the same name as an initializer (IR >= 4: the initializer is its default)."""
    t = init(m, name)
    m.graph.input.append(helper.make_tensor_value_info(name, t.data_type, list(t.dims)))


# ---- the cases -------------------------------------------------------------------------------------------------
def _cycle(m, f):
    set_input(m, "conv1", 0, "relu1_out_DequantizeLinear_Output")


def _reverse(m, f):
    nodes = list(m.graph.node)[::-1]
    del m.graph.node[:]
    m.graph.node.extend(nodes)


def _shuffle(m, f):
    nodes = list(m.graph.node)
    order = np.random.default_rng(7).permutation(len(nodes))
    del m.graph.node[:]
    m.graph.node.extend(nodes[i] for i in order)


def _dup_output(m, f):
    node(m, "relu2").output[0] = "relu1_out"


def _dup_init(m, f):
    m.graph.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "conv1_out_scale"))


def _dup_graph_input(m, f):
    m.graph.input.append(copy.deepcopy(m.graph.input[0]))


def _no_outputs(m, f):
    del m.graph.output[:]


def _opset(version):
    def edit(m, f):
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = version
    return edit


def _no_default_opset(m, f):
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))


def _ir(version):
    def edit(m, f):
        m.ir_version = version
    return edit


def _scale_as_graph_input(m, f):
    t = init(m, "conv1_out_scale")
    m.graph.initializer.remove(t)
    m.graph.input.append(helper.make_tensor_value_info("conv1_out_scale", TensorProto.FLOAT, []))


def _zp_as_graph_input(m, f):
    t = init(m, "conv1_out_zero_point")
    m.graph.initializer.remove(t)
    m.graph.input.append(helper.make_tensor_value_info("conv1_out_zero_point", TensorProto.INT8, []))


def _scale_from_node(m, f):
    m.graph.node.insert(0, helper.make_node("Identity", ["conv1_out_scale"], ["s_id"], name="scale_identity"))
    node(m, "conv1_out_QuantizeLinear").input[1] = "s_id"


def _wrong_weight(shape_fn):
    def edit(m, f):
        t = init(m, "conv2.weight_quantized")
        arr = numpy_helper.to_array(t)
        replace_init(m, "conv2.weight_quantized", np.resize(arr, shape_fn(arr.shape)).astype(np.int8))
    return edit


def _big_input(m, f):
    input_dims(m, [1, 1, 10 ** 7, 10 ** 7])


def _drop_init(name):
    def edit(m, f):
        m.graph.initializer.remove(init(m, name))
    return edit


def _raw_bytes(name, factor):
    def edit(m, f):
        t = init(m, name)
        data = numpy_helper.to_array(t).tobytes()
        t.ClearField("int32_data")
        t.raw_data = data * 2 if factor == 2 else data[: len(data) // 2]
    return edit


def _truncate(path, m):
    onnx.save(m, str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _empty(path, m):
    path.write_bytes(b"")
    return path


def _directory(path, m):
    path.mkdir()
    return path


def _fifo(path, m):
    os.mkfifo(path)
    return path


def _npz_named_onnx(path, m):
    np.savez(path.with_suffix(".npz"), x=np.zeros(3))
    path.with_suffix(".npz").rename(path)
    return path


def _fix_q_dq_zp(elem, opset=17):
    def edit(m, f):
        add_q_dq_pair_type(m, "conv1_out", elem, elem)
        _opset(opset)(m, f)
        m.ir_version = max(m.ir_version, 10)
    return edit


def _resize_scales(values):
    def edit(m, f):
        replace_init(m, "scales", np.array(values, np.float32))
    return edit


def _gather_idx(values):
    def edit(m, f):
        replace_init(m, "idx", np.array(values, np.int64))
    return edit


def _reshape_to(values):
    def edit(m, f):
        replace_init(m, "shape", np.array(values, np.int64))
    return edit


def _attr(node_name, attr, value):
    def edit(m, f):
        set_attr(m, node_name, attr, value)
    return edit


def _unknown_attr(m, f):
    set_attr(m, "conv1", "frobnicate", 3)


def _unknown_op(m, f):
    node(m, "relu1").op_type = "Frobnicate"


def _extra_input(m, f):
    node(m, "relu1").input.append("conv1_out_DequantizeLinear_Output")


def _no_weight(m, f):
    del node(m, "conv2").input[1:]


def _float_into_dq(m, f):
    replace_init(m, "conv2.weight_quantized",
                 numpy_helper.to_array(init(m, "conv2.weight_quantized")).astype(np.float32))


def _output_ghost(m, f):
    m.graph.output[0].name = "ghost_output"


def _init_is_node_output(m, f):
    m.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 16, 8, 8), np.float32), "conv1_out"))


def _input_is_node_output(m, f):
    node(m, "conv1").output[0] = "input"


def _bad_data_type(m, f):
    init(m, "conv1_out_scale").data_type = 99


def _huge_init(m, f):
    t = init(m, "conv2.weight_quantized")
    del t.dims[:]
    t.dims.extend([10 ** 7, 10 ** 7])


def _nul_location(m, f):
    external(m, f, "conv2.weight_quantized", "we\x00ights.bin")


def _offset_past_end(m, f):
    (Path(f) / "w.bin").write_bytes(b"\0" * 16)
    external(m, f, "conv2.weight_quantized", "w.bin", offset=4096)


def _location_dir(m, f):
    external(m, f, "conv2.weight_quantized", "wdir", create="dir")


def _custom_domain_unimported(m, f):
    n = node(m, "relu1")
    n.domain = "my.custom"


def _empty_name_required(m, f):
    node(m, "conv1").input[0] = ""


def _q_dq_pair_mismatch(m, f):
    add_q_dq_pair_type(m, "conv1_out", TensorProto.UINT16, TensorProto.INT8)


def _zp_int32(m, f):
    add_q_dq_pair_type(m, "conv1_out", TensorProto.INT32, TensorProto.INT32)


def _scale_type(elem):
    def edit(m, f):
        retype_scale(m, "conv1_out_scale", elem)
    return edit


def _scale_value(value):
    def edit(m, f):
        replace_init(m, "conv1_out_scale", np.array(value, np.float32))
    return edit


def _weight_scale_2d(m, f):
    t = numpy_helper.to_array(init(m, "conv2.weight_scale"))
    replace_init(m, "conv2.weight_scale", t.reshape(4, 4))


def _weight_scale_len(m, f):
    t = numpy_helper.to_array(init(m, "conv2.weight_scale"))
    replace_init(m, "conv2.weight_scale", t[:5])
    t = numpy_helper.to_array(init(m, "conv2.weight_zero_point"))
    replace_init(m, "conv2.weight_zero_point", t[:5])


def _input_type(elem):
    def edit(m, f):
        m.graph.input[0].type.tensor_type.elem_type = elem
    return edit


def _input_dims(dims):
    def edit(m, f):
        input_dims(m, dims)
    return edit


def _gemm_bias_len(m, f):
    for name in ("fc.bias_quantized", "fc.bias_quantized_scale", "fc.bias_quantized_zero_point"):
        replace_init(m, name, numpy_helper.to_array(init(m, name))[:7])


def _pool_kernel_big(m, f):
    set_attr(m, "maxpool", "kernel_shape", [9, 9])


def _int4(double=False, short=False):
    def edit(m, f):
        to_int4(m, "conv2.weight_quantized", double, short)
    return edit


def _same_name_input_output(m, f):
    m.graph.output.append(copy.deepcopy(m.graph.output[0]))


def _empty_graph(m, f):
    del m.graph.node[:]


def _dq_axis(value):
    def edit(m, f):
        set_attr(m, "conv2.weight_DequantizeLinear", "axis", value)
    return edit


def _sparse(m, f):
    sparse_weight(m, "conv2.weight_quantized")


def _shadow(m, f):
    shadow_input(m, "conv1_out_scale")


def _all_dims_dynamic(m, f):
    for i, d in enumerate(m.graph.input[0].type.tensor_type.shape.dim):
        d.dim_param = f"d{i}"


def _missing_scale_input(m, f):
    del node(m, "conv1_out_QuantizeLinear").input[1:]


def _node_no_outputs(m, f):
    del node(m, "relu3").output[:]


def _constant_node_bad(m, f):
    m.graph.node.insert(0, helper.make_node("Constant", [], ["k"], name="const_empty"))


def _attr_wrong_type(m, f):
    n = node(m, "conv1")
    for a in list(n.attribute):
        if a.name == "strides":
            n.attribute.remove(a)
    n.attribute.append(helper.make_attribute("strides", [1.0, 1.0]))


def _softmax_axis(value):
    return _attr("softmax", "axis", value)


def _external_tensor(name, location):
    t = numpy_helper.from_array(np.zeros(4, np.float32), name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        entry = t.external_data.add()
        entry.key, entry.value = k, v
    return t


def _constant_external_escape(m, f):
    m.graph.node.insert(0, helper.make_node("Constant", [], ["k_ext"], name="const_ext",
                                            value=_external_tensor("k_value", "../../etc/passwd")))


def _subgraph_external_escape(m, f):
    branch = helper.make_graph([helper.make_node("Constant", [], ["b_out"], name="branch_const",
                                                 value=_external_tensor("b_value", "/etc/passwd"))],
                               "branch", [], [helper.make_tensor_value_info("b_out", TensorProto.FLOAT, [4])])
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    m.graph.node.insert(0, helper.make_node("If", ["cond"], ["if_out"], name="if_node", then_branch=branch,
                                            else_branch=branch))


def _sparse_bad_indices(m, f):
    sparse_weight(m, "conv2.weight_quantized")
    sp = m.graph.sparse_initializer[0]
    idx = numpy_helper.to_array(sp.indices).copy()
    idx[-1] = 10 ** 9
    sp.indices.CopyFrom(numpy_helper.from_array(idx, sp.indices.name))


D, X = "demo", "mixed"
CASES = [
    # graph structure
    Case("cycle", D, _cycle, ("conv1",)),
    Case("reverse_order", D, _reverse, ("topological",)),
    Case("shuffled_order", D, _shuffle, ("topological",)),
    Case("input_nobody_produces", D, lambda m, f: set_input(m, "conv2", 0, "ghost"), ("ghost", "conv2")),
    Case("missing_initializer", D, _drop_init("conv2.weight_quantized"), ("conv2.weight_quantized",)),
    Case("missing_scale_initializer", D, _drop_init("conv1_out_scale"), ("conv1_out_scale",)),
    Case("two_nodes_write_one_tensor", D, _dup_output, ("relu1_out",)),
    Case("duplicate_initializer", D, _dup_init, ("conv1_out_scale",)),
    Case("duplicate_graph_input", D, _dup_graph_input, ("input",)),
    Case("no_outputs", D, _no_outputs, ("output",)),
    Case("output_nobody_produces", D, _output_ghost, ("ghost_output",)),
    Case("duplicate_graph_output", D, _same_name_input_output, ("logits",)),
    Case("initializer_is_node_output", D, _init_is_node_output, ("conv1_out",)),
    Case("graph_input_is_node_output", D, _input_is_node_output, ("input",)),
    Case("empty_graph", D, _empty_graph, ()),
    Case("node_without_outputs", D, _node_no_outputs, ("relu3",)),
    Case("empty_required_input", D, _empty_name_required, ("conv1",)),
    Case("unknown_op", D, _unknown_op, ("Frobnicate",)),
    Case("unimported_custom_domain", D, _custom_domain_unimported, ("my.custom",)),
    Case("extra_input", D, _extra_input, ("relu1",)),
    Case("conv_without_weight", D, _no_weight, ("conv2",)),
    Case("unknown_attribute", D, _unknown_attr, ("frobnicate",)),
    Case("attribute_wrong_type", D, _attr_wrong_type, ("strides",)),
    Case("constant_without_value", D, _constant_node_bad, ("const_empty",)),
    # opset and IR version
    Case("opset_99", D, _opset(99), ("99",)),
    Case("opset_9", D, _opset(9), ("9",)),
    Case("no_default_opset", D, _no_default_opset, ("opset",)),
    Case("ir_version_99", D, _ir(99), ("99",)),
    Case("ir_version_2", D, _ir(2), ("IR",)),
    # quantization types
    Case("scale_float16", D, _scale_type(TensorProto.FLOAT16), ("conv1_out_scale",)),
    Case("scale_bfloat16", D, _scale_type(TensorProto.BFLOAT16), ("conv1_out_scale",)),
    Case("scale_double", D, _scale_type(TensorProto.DOUBLE), ("conv1_out_scale",)),
    Case("zero_point_int32", D, _zp_int32, ("conv1_out",)),
    Case("zero_point_uint16_q_int8_dq", D, _q_dq_pair_mismatch, ("conv1_out",)),
    Case("zero_point_int16_opset17", D, _fix_q_dq_zp(TensorProto.INT16), (), valid=True),  # as tf2onnx writes
    Case("zero_point_int16_opset21", D, _fix_q_dq_zp(TensorProto.INT16, 21), (), valid=True),
    Case("scale_graph_input", D, _scale_as_graph_input, ("conv1_out_scale",)),
    Case("zero_point_graph_input", D, _zp_as_graph_input, ("conv1_out_zero_point",)),
    Case("scale_from_node", D, _scale_from_node, ("s_id",)),
    Case("scale_denormal", D, _scale_value(1e-42), ("conv1_out_scale",)),
    Case("scale_tiny", D, _scale_value(1e-30), ("conv1_out_QuantizeLinear", "multiplier")),
    Case("scale_huge", D, _scale_value(1e30), ("relu1_out_QuantizeLinear", "multiplier")),  # relu1's factor
    Case("scale_nan", D, _scale_value(np.nan), ("conv1_out_scale",)),
    Case("scale_inf", D, _scale_value(np.inf), ("conv1_out_scale",)),
    Case("scale_zero", D, _scale_value(0.0), ("conv1_out_scale",)),
    Case("scale_negative", D, _scale_value(-0.1), ("conv1_out_scale",)),
    Case("scale_vector_on_activation", D, _scale_value([0.1, 0.2]), ("conv1_out",)),
    Case("weight_scale_2d", D, _weight_scale_2d, ("conv2.weight",)),
    Case("weight_scale_wrong_length", D, _weight_scale_len, ("conv2.weight",)),
    Case("dq_axis_out_of_range", D, _dq_axis(7), ("conv2.weight_DequantizeLinear",)),
    Case("missing_scale_input", D, _missing_scale_input, ("conv1_out_QuantizeLinear",)),
    Case("float_into_dequantize", D, _float_into_dq, ("conv2.weight",)),
    Case("int4_raw_twice", D, _int4(double=True), ("conv2.weight_quantized",)),
    Case("int4_raw_short", D, _int4(short=True), ("conv2.weight_quantized",)),
    Case("int4_valid", D, _int4(), (), valid=True),
    Case("int8_raw_twice", D, _raw_bytes("conv2.weight_quantized", 2), ("conv2.weight_quantized",)),
    Case("int8_raw_half", D, _raw_bytes("conv2.weight_quantized", 0), ("conv2.weight_quantized",)),
    Case("unknown_data_type", D, _bad_data_type, ("conv1_out_scale",)),
    Case("double_model_input", D, _input_type(TensorProto.DOUBLE), ("input",)),
    Case("float16_model_input", D, _input_type(TensorProto.FLOAT16), ("input",)),
    Case("int64_model_input", D, _input_type(TensorProto.INT64), ("input",)),
    # attribute ranges
    Case("conv_stride_0", D, _attr("conv2", "strides", [0, 1]), ("conv2", "strides")),
    Case("conv_stride_negative", D, _attr("conv2", "strides", [-1, 1]), ("conv2", "strides")),
    Case("conv_dilation_0", D, _attr("conv2", "dilations", [0, 1]), ("conv2", "dilations")),
    Case("conv_pads_negative", D, _attr("conv2", "pads", [-1, 1, 1, 1]), ("conv2", "pads")),
    Case("conv_pads_wrong_length", D, _attr("conv2", "pads", [1, 1, 1]), ("conv2", "pads")),
    Case("conv_strides_wrong_length", D, _attr("conv2", "strides", [1, 1, 1]), ("conv2", "strides")),
    Case("conv_group_not_dividing", D, _attr("conv2", "group", 3), ("conv2", "group")),
    Case("conv_group_0", D, _attr("conv2", "group", 0), ("conv2", "group")),
    Case("conv_kernel_shape_mismatch", D, _attr("conv2", "kernel_shape", [5, 5]), ("conv2", "kernel")),
    Case("conv_auto_pad_bad", D, _attr("conv2", "auto_pad", "SIDEWAYS"), ("conv2", "auto_pad")),
    Case("conv_weight_in_channels", D, _wrong_weight(lambda s: (s[0], 8) + s[2:]), ("conv2",)),
    Case("conv_weight_rank", D, _wrong_weight(lambda s: s[:3]), ("conv2",)),
    Case("conv_kernel_larger_than_input", D, _wrong_weight(lambda s: s[:2] + (11, 11)), ("conv2",)),
    Case("model_input_channels", D, _input_dims([1, 3, 8, 8]), ("conv1",)),
    Case("model_input_rank", D, _input_dims([1, 8, 8]), ("conv1",)),
    Case("model_input_too_small", D, _input_dims([1, 1, 1, 1]), ("maxpool",)),
    Case("gemm_bias_length", D, _gemm_bias_len, ("fc",)),
    Case("gemm_transB_0", D, _attr("fc", "transB", 0), ("fc",)),
    Case("maxpool_stride_0", D, _attr("maxpool", "strides", [0, 2]), ("maxpool", "strides")),
    Case("maxpool_pads_negative", D, _attr("maxpool", "pads", [-1, 0, 0, 0]), ("maxpool", "pads")),
    Case("maxpool_pads_ge_kernel", D, _attr("maxpool", "pads", [2, 2, 2, 2]), ("maxpool", "pads")),
    Case("maxpool_kernel_larger_than_input", D, _pool_kernel_big, ("maxpool",)),
    Case("maxpool_dilation_0", D, _attr("maxpool", "dilations", [0, 1]), ("maxpool", "dilations")),
    Case("flatten_axis_out_of_range", D, _attr("flatten", "axis", 9), ("flatten", "axis")),
    Case("concat_axis_out_of_range", X, _attr("concat", "axis", 5), ("concat", "axis")),
    Case("concat_axis_negative_out_of_range", X, _attr("concat", "axis", -9), ("concat", "axis")),
    Case("concat_channel_mismatch_axis", X, _attr("concat", "axis", 2), ("concat",)),
    Case("softmax_axis_out_of_range", X, _softmax_axis(3), ("softmax", "axis")),
    Case("softmax_axis_negative_out_of_range", X, _softmax_axis(-4), ("softmax", "axis")),
    Case("gather_axis_out_of_range", X, _attr("gather", "axis", 3), ("gather", "axis")),
    Case("gather_index_out_of_range", X, _gather_idx([0, 7]), ("gather", "7")),
    Case("gather_negative_index_out_of_range", X, _gather_idx([0, -8]), ("gather", "-8")),
    Case("gather_negative_index_valid", X, _gather_idx([0, -1]), (), valid=True),
    Case("resize_scales_zero", X, _resize_scales([1, 1, 0, 0]), ("resize", "scales")),
    Case("resize_scales_negative", X, _resize_scales([1, 1, -2, 2]), ("resize", "scales")),
    Case("resize_scales_wrong_length", X, _resize_scales([2, 2]), ("resize",)),
    Case("resize_scales_nan", X, _resize_scales([1, 1, np.nan, 2]), ("resize", "scales")),
    Case("reshape_wrong_count", X, _reshape_to([1, 7, 65]), ("reshape",)),
    Case("reshape_two_minus_one", X, _reshape_to([-1, -1, 64]), ("reshape",)),
    Case("matmul_shape_mismatch", X, _reshape_to([1, 14, 32]), ("matmul",)),
    Case("conv_mixed_stride_0", X, _attr("conv", "strides", [1, 0]), ("conv", "strides")),
    # sizes
    Case("input_1e14_elements", D, _big_input, ("100000000000000",)),
    Case("input_shape_1e14_elements", D, _all_dims_dynamic, ("100000000000000",),
         args=["--input-shape", "input=1000000x1x10000x10000"]),
    Case("initializer_1e14_dims_no_data", D, _huge_init, ("conv2.weight_quantized",)),
    # files
    Case("truncated_file", D, _truncate, ("m.onnx",), raw=True),
    Case("empty_file", D, _empty, ("m.onnx",), raw=True),
    Case("directory_as_model", D, _directory, ("m.onnx",), raw=True),
    Case("fifo_as_model", D, _fifo, ("m.onnx",), raw=True),
    Case("npz_named_onnx", D, _npz_named_onnx, ("m.onnx",), raw=True),
    Case("external_nul_in_location", D, _nul_location, ("conv2.weight_quantized",)),
    Case("external_offset_past_end", D, _offset_past_end, ("conv2.weight_quantized",)),
    Case("external_location_directory", D, _location_dir, ("conv2.weight_quantized",)),
    Case("external_location_missing", D, lambda m, f: external(m, f, "conv2.weight_quantized", "gone.bin"),
         ("conv2.weight_quantized",)),
    Case("external_location_escape", D, lambda m, f: external(m, f, "conv2.weight_quantized", "../x.bin"),
         ("conv2.weight_quantized",)),
    Case("constant_external_escape", D, _constant_external_escape, ("k_value", "outside")),
    Case("subgraph_external_escape", D, _subgraph_external_escape, ("b_value", "outside")),
    Case("sparse_initializer_bad_indices", D, _sparse_bad_indices, ("conv2.weight_quantized",)),
    # valid variants that must keep running
    Case("graph_input_shadowed_by_initializer", D, _shadow, (), valid=True),
    Case("sparse_initializer", D, _sparse, (), valid=True),
    Case("external_data_valid", D, lambda m, f: external(m, f, "conv2.weight_quantized", "w.bin", create="file"),
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
