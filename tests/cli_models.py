"""A model as a newcomer brings one (issue 20): long, look-alike layer names as TensorFlow exports write them, a
free batch dimension, uint8 asymmetric activations (onnxruntime's default), per-channel weights, a 5x5
depthwise convolution and one int32 bias clipped at INT32_MIN deep inside (onnxruntime issue #21000), so
`check` on the `default` board has many findings of several rules, a numeric hazard among them."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tests.qdq_models import build_model, quantize, rng_for, weights

BLOCKS = 24
PREFIX = "efficientnet-lite0/model/blocks_"
HAZARD_BLOCK = 17  # the conv whose bias is clipped
HAZARD_CHANNELS = [2, 5]


def layer(i: int, kind: str = "conv2d/Conv2D") -> str:
    return f"{PREFIX}{i}/{kind}"


def deep_cnn_float(ch: int = 8, hw: int = 12) -> onnx.ModelProto:
    rng = rng_for("deep_cnn")
    inits = {"W0": weights(rng, (ch, 3, 3, 3), 0.3), "B0": weights(rng, (ch,), 0.1)}
    nodes = [helper.make_node("Conv", ["x", "W0", "B0"], [layer(0) + ":0"], name=layer(0), pads=[1, 1, 1, 1])]
    prev = layer(0) + ":0"
    for i in range(1, BLOCKS):
        r = f"{PREFIX}{i}/Relu6:0"
        nodes.append(helper.make_node("Relu", [prev], [r], name=f"{PREFIX}{i}/Relu6"))
        inits[f"W{i}"], inits[f"B{i}"] = weights(rng, (ch, ch, 3, 3), 0.2), weights(rng, (ch,), 0.1)
        nodes.append(helper.make_node("Conv", [r, f"W{i}", f"B{i}"], [layer(i) + ":0"], name=layer(i),
                                      pads=[1, 1, 1, 1]))
        prev = layer(i) + ":0"
    dw = layer(BLOCKS, "depthwise_conv2d/depthwise")
    inits["WD"], inits["BD"] = weights(rng, (ch, 1, 5, 5), 0.2), weights(rng, (ch,), 0.1)
    nodes.append(helper.make_node("Conv", [prev, "WD", "BD"], [dw + ":0"], name=dw, pads=[2, 2, 2, 2], group=ch))
    inits["G"], inits["GB"] = weights(rng, (ch, 4), 0.5), weights(rng, (4,), 0.1)
    nodes += [helper.make_node("GlobalAveragePool", [dw + ":0"], ["pool:0"], name="head/avg_pool"),
              helper.make_node("Flatten", ["pool:0"], ["flat:0"], name="head/flatten"),
              helper.make_node("Gemm", ["flat:0", "G", "GB"], ["logits"], name="head/dense/MatMul")]
    return build_model(nodes, {"x": ("N", 3, hw, hw)}, {"logits": ("N", 4)}, inits, name="deep_cnn")


def _clip_one_bias(model: onnx.ModelProto) -> onnx.ModelProto:
    conv = next(n for n in model.graph.node if n.name == layer(HAZARD_BLOCK))
    bias_dq = next(n for n in model.graph.node if conv.input[2] in n.output)
    for init in model.graph.initializer:
        if init.name == bias_dq.input[0]:
            arr = numpy_helper.to_array(init).copy()
            arr[HAZARD_CHANNELS] = -(2 ** 31)
            init.CopyFrom(numpy_helper.from_array(arr, init.name))
    return model


def deep_cnn(directory) -> tuple:
    """(float path, QDQ path) of the model in ``directory``: uint8 activations, per-channel int8 weights."""
    qpath = quantize(deep_cnn_float(), directory, "deep_cnn", activation_type="u8", weight_type="s8",
                     per_channel=True, calib_shapes={"x": (1, 3, 12, 12)}, postprocess=_clip_one_bias)
    return qpath.with_name("deep_cnn.float.onnx"), qpath


def free_width(directory):
    """A text-line recognizer's input: x[N, 3, 8, W] with a free width; an unpadded 3x3 conv and two 2x2 pools,
    so a width below 6 leaves an empty or negative tensor (PP-OCR rec has the same shape of input)."""
    rng = rng_for("free_width")
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c"], name="conv"),
             helper.make_node("MaxPool", ["c"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxPool", ["p1"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2])]
    m = build_model(nodes, {"x": ("N", 3, 8, "W")}, {"p2": None}, {"W1": weights(rng, (4, 3, 3, 3), 0.3)})
    return quantize(m, directory, "free_width", activation_type="s8", calib_shapes={"x": (1, 3, 8, 16)},
                    extra_options={"ActivationSymmetric": True})
