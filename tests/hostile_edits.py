"""The edits of the hostile corpus (``tests/hostile_corpus.py``): each ``edit(model, folder)`` breaks (or oddly
rewrites) a copy of a base model in place; file-level edits ``edit(path, model)`` write the file themselves."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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
def cycle(m, f):
    set_input(m, "conv1", 0, "relu1_out_DequantizeLinear_Output")


def reverse(m, f):
    nodes = list(m.graph.node)[::-1]
    del m.graph.node[:]
    m.graph.node.extend(nodes)


def shuffle(m, f):
    nodes = list(m.graph.node)
    order = np.random.default_rng(7).permutation(len(nodes))
    del m.graph.node[:]
    m.graph.node.extend(nodes[i] for i in order)


def dup_output(m, f):
    node(m, "relu2").output[0] = "relu1_out"


def dup_init(m, f):
    m.graph.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "conv1_out_scale"))


def dup_graph_input(m, f):
    m.graph.input.append(copy.deepcopy(m.graph.input[0]))


def no_outputs(m, f):
    del m.graph.output[:]


def opset(version):
    def edit(m, f):
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = version
    return edit


def no_default_opset(m, f):
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))


def ir(version):
    def edit(m, f):
        m.ir_version = version
    return edit


def scale_as_graph_input(m, f):
    t = init(m, "conv1_out_scale")
    m.graph.initializer.remove(t)
    m.graph.input.append(helper.make_tensor_value_info("conv1_out_scale", TensorProto.FLOAT, []))


def zp_as_graph_input(m, f):
    t = init(m, "conv1_out_zero_point")
    m.graph.initializer.remove(t)
    m.graph.input.append(helper.make_tensor_value_info("conv1_out_zero_point", TensorProto.INT8, []))


def scale_from_node(m, f):
    m.graph.node.insert(0, helper.make_node("Identity", ["conv1_out_scale"], ["s_id"], name="scale_identity"))
    node(m, "conv1_out_QuantizeLinear").input[1] = "s_id"


def wrong_weight(shape_fn):
    def edit(m, f):
        t = init(m, "conv2.weight_quantized")
        arr = numpy_helper.to_array(t)
        replace_init(m, "conv2.weight_quantized", np.resize(arr, shape_fn(arr.shape)).astype(np.int8))
    return edit


def big_input(m, f):
    input_dims(m, [1, 1, 10 ** 7, 10 ** 7])


def drop_init(name):
    def edit(m, f):
        m.graph.initializer.remove(init(m, name))
    return edit


def raw_bytes(name, factor):
    def edit(m, f):
        t = init(m, name)
        data = numpy_helper.to_array(t).tobytes()
        t.ClearField("int32_data")
        t.raw_data = data * 2 if factor == 2 else data[: len(data) // 2]
    return edit


def truncate(path, m):
    onnx.save(m, str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def empty(path, m):
    path.write_bytes(b"")
    return path


def directory(path, m):
    path.mkdir()
    return path


def fifo(path, m):
    os.mkfifo(path)
    return path


def npz_named_onnx(path, m):
    np.savez(path.with_suffix(".npz"), x=np.zeros(3))
    path.with_suffix(".npz").rename(path)
    return path


def fix_q_dq_zp(elem, version=17):
    def edit(m, f):
        add_q_dq_pair_type(m, "conv1_out", elem, elem)
        opset(version)(m, f)
        m.ir_version = max(m.ir_version, 10)
    return edit


def resize_scales(values):
    def edit(m, f):
        replace_init(m, "scales", np.array(values, np.float32))
    return edit


def gather_idx(values):
    def edit(m, f):
        replace_init(m, "idx", np.array(values, np.int64))
    return edit


def reshape_to(values):
    def edit(m, f):
        replace_init(m, "shape", np.array(values, np.int64))
    return edit


def attr(node_name, attr, value):
    def edit(m, f):
        set_attr(m, node_name, attr, value)
    return edit


def unknown_attr(m, f):
    set_attr(m, "conv1", "frobnicate", 3)


def unknown_op(m, f):
    node(m, "relu1").op_type = "Frobnicate"


def extra_input(m, f):
    node(m, "relu1").input.append("conv1_out_DequantizeLinear_Output")


def no_weight(m, f):
    del node(m, "conv2").input[1:]


def float_into_dq(m, f):
    replace_init(m, "conv2.weight_quantized",
                 numpy_helper.to_array(init(m, "conv2.weight_quantized")).astype(np.float32))


def output_ghost(m, f):
    m.graph.output[0].name = "ghost_output"


def init_is_node_output(m, f):
    m.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 16, 8, 8), np.float32), "conv1_out"))


def input_is_node_output(m, f):
    node(m, "conv1").output[0] = "input"


def bad_data_type(m, f):
    init(m, "conv1_out_scale").data_type = 99


def huge_init(m, f):
    t = init(m, "conv2.weight_quantized")
    del t.dims[:]
    t.dims.extend([10 ** 7, 10 ** 7])


def nul_location(m, f):
    external(m, f, "conv2.weight_quantized", "we\x00ights.bin")


def offset_past_end(m, f):
    (Path(f) / "w.bin").write_bytes(b"\0" * 16)
    external(m, f, "conv2.weight_quantized", "w.bin", offset=4096)


def location_dir(m, f):
    external(m, f, "conv2.weight_quantized", "wdir", create="dir")


def custom_domain_unimported(m, f):
    n = node(m, "relu1")
    n.domain = "my.custom"


def empty_name_required(m, f):
    node(m, "conv1").input[0] = ""


def q_dq_pair_mismatch(m, f):
    add_q_dq_pair_type(m, "conv1_out", TensorProto.UINT16, TensorProto.INT8)


def zp_int32(m, f):
    add_q_dq_pair_type(m, "conv1_out", TensorProto.INT32, TensorProto.INT32)


def scale_type(elem):
    def edit(m, f):
        retype_scale(m, "conv1_out_scale", elem)
    return edit


def scale_value(value):
    def edit(m, f):
        replace_init(m, "conv1_out_scale", np.array(value, np.float32))
    return edit


def weight_scale_2d(m, f):
    t = numpy_helper.to_array(init(m, "conv2.weight_scale"))
    replace_init(m, "conv2.weight_scale", t.reshape(4, 4))


def weight_scale_len(m, f):
    t = numpy_helper.to_array(init(m, "conv2.weight_scale"))
    replace_init(m, "conv2.weight_scale", t[:5])
    t = numpy_helper.to_array(init(m, "conv2.weight_zero_point"))
    replace_init(m, "conv2.weight_zero_point", t[:5])


def input_type(elem):
    def edit(m, f):
        m.graph.input[0].type.tensor_type.elem_type = elem
    return edit


def set_input_dims(dims):
    def edit(m, f):
        input_dims(m, dims)
    return edit


def gemm_bias_len(m, f):
    for name in ("fc.bias_quantized", "fc.bias_quantized_scale", "fc.bias_quantized_zero_point"):
        replace_init(m, name, numpy_helper.to_array(init(m, name))[:7])


def pool_kernel_big(m, f):
    set_attr(m, "maxpool", "kernel_shape", [9, 9])


def int4(double=False, short=False):
    def edit(m, f):
        to_int4(m, "conv2.weight_quantized", double, short)
    return edit


def same_name_input_output(m, f):
    m.graph.output.append(copy.deepcopy(m.graph.output[0]))


def empty_graph(m, f):
    del m.graph.node[:]


def dq_axis(value):
    def edit(m, f):
        set_attr(m, "conv2.weight_DequantizeLinear", "axis", value)
    return edit


def sparse(m, f):
    sparse_weight(m, "conv2.weight_quantized")


def shadow(m, f):
    shadow_input(m, "conv1_out_scale")


def all_dims_dynamic(m, f):
    for i, d in enumerate(m.graph.input[0].type.tensor_type.shape.dim):
        d.dim_param = f"d{i}"


def missing_scale_input(m, f):
    del node(m, "conv1_out_QuantizeLinear").input[1:]


def node_no_outputs(m, f):
    del node(m, "relu3").output[:]


def constant_node_bad(m, f):
    m.graph.node.insert(0, helper.make_node("Constant", [], ["k"], name="const_empty"))


def attr_wrong_type(m, f):
    n = node(m, "conv1")
    for a in list(n.attribute):
        if a.name == "strides":
            n.attribute.remove(a)
    n.attribute.append(helper.make_attribute("strides", [1.0, 1.0]))


def softmax_axis(value):
    return attr("softmax", "axis", value)


def external_tensor(name, location):
    t = numpy_helper.from_array(np.zeros(4, np.float32), name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        entry = t.external_data.add()
        entry.key, entry.value = k, v
    return t


def constant_external_escape(m, f):
    m.graph.node.insert(0, helper.make_node("Constant", [], ["k_ext"], name="const_ext",
                                            value=external_tensor("k_value", "../../etc/passwd")))


def subgraph_external_escape(m, f):
    branch = helper.make_graph([helper.make_node("Constant", [], ["b_out"], name="branch_const",
                                                 value=external_tensor("b_value", "/etc/passwd"))],
                               "branch", [], [helper.make_tensor_value_info("b_out", TensorProto.FLOAT, [4])])
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    m.graph.node.insert(0, helper.make_node("If", ["cond"], ["if_out"], name="if_node", then_branch=branch,
                                            else_branch=branch))


def sparse_bad_indices(m, f):
    sparse_weight(m, "conv2.weight_quantized")
    sp = m.graph.sparse_initializer[0]
    idx = numpy_helper.to_array(sp.indices).copy()
    idx[-1] = 10 ** 9
    sp.indices.CopyFrom(numpy_helper.from_array(idx, sp.indices.name))
