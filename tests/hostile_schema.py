"""Round 3 of the hostile corpus (issue 32): what a schema-driven fuzzer finds, one case per rule it broke.

Same ``Case`` form and bases as ``tests/hostile_corpus.py``, plus ``acts``: a small float model with a Clip and a
HardSigmoid quantized by onnxruntime's ``quantize_static`` (the float attributes and Clip bounds need one).
Every case names the rule it stands for; the validator (``npu_sim.frontend.validate_schema``) must refuse each
invalid one with exit 2 naming ``fragments``, in every command, and run each valid one.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests import hostile_edits as e
from tests.hostile_corpus import Case
from tests.qdq_models import build_model, quantize, rng_for, weights


def acts_float() -> onnx.ModelProto:
    rng = rng_for("hostile_acts")
    inits = {"W": weights(rng, (4, 3, 3, 3), 0.3), "B": weights(rng, (4,), 0.1)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("HardSigmoid", ["c"], ["y"], name="hsig", alpha=0.2, beta=0.5)]
    return build_model(nodes, {"x": (1, 3, 8, 8)}, {"y": (1, 4, 8, 8)}, inits, name="hostile_acts")


def acts_base(folder) -> onnx.ModelProto:
    """The quantized acts model with a Clip (quantize_static folds a Clip into its producer's quantization) put
    between the Conv's DequantizeLinear and the HardSigmoid: DQ -> Clip(-0.5, 0.5) -> Q -> DQ -> HardSigmoid."""
    m = onnx.load(str(quantize(acts_float(), folder, "hostile_acts", activation_type="s8")))
    m.graph.initializer.extend([numpy_helper.from_array(np.array(-0.5, np.float32), "clip_lo"),
                                numpy_helper.from_array(np.array(0.5, np.float32), "clip_hi")])
    at = [i for i, n in enumerate(m.graph.node) if n.name == "hsig"][0]
    e.node(m, "hsig").input[0] = "k_DequantizeLinear_Output"
    for n in reversed([helper.make_node("Clip", ["c_DequantizeLinear_Output", "clip_lo", "clip_hi"], ["k"],
                                        name="clip"),
                       helper.make_node("QuantizeLinear", ["k", "c_scale", "c_zero_point"], ["k_q"], name="k_q"),
                       helper.make_node("DequantizeLinear", ["k_q", "c_scale", "c_zero_point"],
                                        ["k_DequantizeLinear_Output"], name="k_dq")]):
        m.graph.node.insert(at, n)
    return m


# ---- edits -----------------------------------------------------------------------------------------------------
def _bias(shape):
    def edit(m, f):
        e.replace_init(m, "conv2.bias_quantized", np.zeros(shape, np.int32))
    return edit


def _bias_dq_removed(m, f):
    dq = e.node(m, "conv2.bias_DequantizeLinear")
    m.graph.node.remove(dq)
    e.set_input(m, "conv2", 2, "conv2.bias_quantized")


def _weight_scale(value):
    def edit(m, f):
        e.replace_init(m, "conv2.weight_scale", np.full(16, value, np.float32))
    return edit


def _clip_bound(which, array):
    def edit(m, f):
        clip = next(n for n in m.graph.node if n.op_type == "Clip")
        name = f"clip_{which}_edit"
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        clip.input[1 if which == "min" else 2] = name
    return edit


def _reshape_allowzero(values):
    def edit(m, f):
        e.replace_init(m, "shape", np.array(values, np.int64))
        e.set_attr(m, "reshape", "allowzero", 1)
    return edit


def _value_info_type(m, f):
    m.graph.value_info.append(helper.make_tensor_value_info("conv1_out_QuantizeLinear_Output", TensorProto.UINT8,
                                                            [1, 16, 8, 8]))


def _output_shape(dims):
    def edit(m, f):
        tt = m.graph.output[0].type.tensor_type
        tt.ClearField("shape")
        for d in dims:
            tt.shape.dim.add().dim_value = d
    return edit


def _dq_reads_float(m, f):
    e.set_input(m, "relu1_out_DequantizeLinear", 0, "relu1_out")


def _q_removed(m, f):
    q = e.node(m, "relu1_out_QuantizeLinear")
    m.graph.node.remove(q)
    e.set_input(m, "relu1_out_DequantizeLinear", 0, "relu1_out")


def _dq_removed(m, f):
    dq = e.node(m, "relu1_out_DequantizeLinear")
    m.graph.node.remove(dq)
    for n in m.graph.node:
        for i, name in enumerate(n.input):
            if name == "relu1_out_DequantizeLinear_Output":
                n.input[i] = "relu1_out_QuantizeLinear_Output"


def _resize_sizes(sizes, keep_scales=False):
    """The Resize given ``sizes`` (None: no sizes), its scales kept or emptied."""
    def edit(m, f):
        resize = e.node(m, "resize")
        del resize.input[3:]
        if not keep_scales:
            resize.input[2] = ""
        if sizes is not None:
            m.graph.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes_edit"))
            resize.input.append("sizes_edit")
    return edit


def _shadow(name, dims):
    """A graph input with an initializer as its default value, declared with other (symbolic, or no) dims."""
    def edit(m, f):
        m.graph.input.append(helper.make_tensor_value_info(name, e.init(m, name).data_type, dims))
    return edit


def _string_labels(m, f):
    m.graph.initializer.append(helper.make_tensor("labels", TensorProto.STRING, [3], [b"zero", b"one", b"two"]))


def _uint8_input(m, f):
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.UINT8


D, X, A = "demo", "mixed", "acts"
CASES = [
    # exit 3 before round 3
    Case("conv_pads_int", D, e.attr("conv2", "pads", 1), ("conv2", "pads", "ints")),
    Case("hardsigmoid_alpha_nan", A, e.attr("hsig", "alpha", np.nan), ("hsig", "alpha", "nan")),
    Case("bias_empty", D, _bias((0,)), ("conv2", "bias", "16")),
    # onnx's full check and onnxruntime take it (float), but its bias is 1e30 accumulator units: no integer
    # program computes it, so the front door refuses it for every command and board
    Case("weight_scale_1e-30", D, _weight_scale(1e-30), ("conv2", "accumulator")),
    Case("reshape_zero_dim", X, e.reshape_to([1, 0, 0]), ("reshape",)),
    Case("reshape_zero_dim_allowzero", X, _reshape_allowzero([0, 7, 64]), ("reshape",)),
    Case("reshape_zero_dim_empty", X, _reshape_allowzero([1, 0, 64]), ("reshape",)),
    # exit 0 on invalid models before round 3
    Case("bias_dq_removed", D, _bias_dq_removed, ("conv2", "int32")),
    Case("auto_pad_with_pads", D, e.attr("conv2", "auto_pad", "SAME_UPPER"), ("conv2", "auto_pad", "pads")),
    Case("clip_min_int8", A, _clip_bound("min", np.array(-1, np.int8)), ("clip", "int8")),
    Case("bias_2d", D, _bias((16, 1)), ("conv2", "bias")),
    Case("value_info_wrong_type", D, _value_info_type, ("conv1_out_QuantizeLinear_Output", "uint8")),
    Case("hardsigmoid_beta_inf", A, e.attr("hsig", "beta", np.inf), ("hsig", "beta", "inf")),
    Case("output_shape_contradicts", D, _output_shape([1, 11]), ("logits", "11")),
    # estimate answered where run refused
    Case("dq_reads_float", D, _dq_reads_float, ("relu1_out_DequantizeLinear", "float")),
    Case("q_removed", D, _q_removed, ("relu1_out_DequantizeLinear", "float")),
    Case("dq_removed", D, _dq_removed, ("int8",)),
    Case("resize_mode_bogus", X, e.attr("resize", "mode", "bogus"), ("resize", "mode", "bogus")),
    Case("resize_scales_and_sizes", X, _resize_sizes([1, 4, 16, 16], keep_scales=True), ("resize", "and sizes")),
    Case("resize_neither", X, _resize_sizes(None), ("resize", "neither")),
    Case("resize_sizes_only", X, _resize_sizes([1, 4, 16, 16]), (), valid=True),
    # older corpora
    Case("qdq16_opset17", D, e.fix_q_dq_zp(TensorProto.INT16), ("conv1_out", "int16", "21")),
    Case("uint8_input_into_q", D, _uint8_input, ("input_QuantizeLinear", "uint8")),
    Case("string_labels_unused", D, _string_labels, (), valid=True),
    Case("weight_shadowed_by_input", D, lambda m, f: e.shadow_input(m, "conv2.weight_quantized"), (), valid=True),
    Case("bias_shadowed_by_input", D, lambda m, f: e.shadow_input(m, "conv2.bias_quantized"), (), valid=True),
    Case("reshape_shape_shadowed_by_input", X, lambda m, f: e.shadow_input(m, "shape"), (), valid=True),
    Case("weight_shadowed_by_dynamic_input", D, _shadow("conv2.weight_quantized", ["a", "b", "c", "d"]), (),
         valid=True),
    Case("scale_shadowed_by_input_without_shape", D, _shadow("conv1_out_scale", None), ("shape",)),  # the checker
    Case("clip_min_nan", A, _clip_bound("min", np.array(np.nan, np.float32)), (), valid=True),
    Case("clip_max_nan", A, _clip_bound("max", np.array(np.nan, np.float32)), (), valid=True),
    Case("clip_min_above_max", A, _clip_bound("min", np.array(0.75, np.float32)), (), valid=True),
]
