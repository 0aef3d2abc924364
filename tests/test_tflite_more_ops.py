"""The TFLite operators of ``npu_sim.frontend.tflite.ops_more`` beyond the fixtures (tests/test_tflite_frontend.py
runs those against LiteRT): what they refuse, by name, and their paths the fixtures do not take (a movement op
on the graph input itself; RELU_0_TO_1, which the TFLite converter never writes, on an edited fixture)."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.cli.main import main
from npu_sim.errors import UnsupportedModelError
from npu_sim.frontend.reader import open_model
from npu_sim.frontend.tflite.flatbuf import read_tflite
from tests import tflite_writer

FIXTURES = Path(__file__).parent / "fixtures" / "tflite"
BOARD = "ethos-u55-128"


def _edited(tmp_path, fixture: str, edit) -> Path:
    spec = tflite_writer.read_spec(FIXTURES / fixture)
    edit(spec, spec["subgraphs"][0])
    path = tmp_path / f"edited_{fixture}"
    path.write_bytes(tflite_writer.write(spec))
    return path


def _run(path: Path, x: np.ndarray) -> dict:
    sim = npu_sim.load(path, board=BOARD)
    (name,) = sim.inputs
    res = sim.execute({name: x}, keep_all=True)
    values = dict(res.values)
    for out, t in sim.program.outputs.items():
        values[out] = res.values[t]
    return values


def test_mirror_pad_symmetric_is_refused_by_name(tmp_path):
    def edit(spec, sg):
        sg["operators"][1]["options"][1]["Mode"] = 1  # MirrorPadMode.SYMMETRIC
    path = _edited(tmp_path, "mirror_pad_int8.tflite", edit)
    with pytest.raises(UnsupportedModelError, match=r"operator 1 \(MIRROR_PAD.*mode SYMMETRIC.*REFLECT only"):
        open_model(path)
    assert main(["check", str(path)]) == 2


def test_pack_of_an_input_quantized_unlike_its_output_is_refused(tmp_path):
    def edit(spec, sg):
        sg["tensors"][7]["quant"]["scale"] = sg["tensors"][7]["quant"]["scale"] * 2
    with pytest.raises(UnsupportedModelError, match=r"PACK.*is not quantized as its output"):
        open_model(_edited(tmp_path, "pack_int8.tflite", edit))


def test_minimum_of_an_input_quantized_unlike_its_output_is_refused(tmp_path):
    def edit(spec, sg):  # MINIMUM's constant operand (tensor 2) gets another zero point
        sg["tensors"][2]["quant"]["zero_point"] = sg["tensors"][2]["quant"]["zero_point"] + 1
    with pytest.raises(UnsupportedModelError, match=r"MINIMUM.*is not quantized as its output: TFLite's MINIMUM"):
        open_model(_edited(tmp_path, "mirror_pad_int8.tflite", edit))


def test_unpack_and_pack_of_the_graph_input_move_its_integers(tmp_path):
    def edit(spec, sg):  # drop the convolution: UNPACK reads the graph input; every tensor quantized as it is
        sg["operators"] = sg["operators"][1:]
        sg["operators"][0]["inputs"] = np.array([0], np.int32)
        for t in (4, 5, 6, 7):
            sg["tensors"][t]["quant"] = copy.deepcopy(sg["tensors"][0]["quant"])
    path = _edited(tmp_path, "pack_int8.tflite", edit)
    x = np.random.default_rng(5).integers(-128, 128, (1, 4, 4, 3)).astype(np.int8)
    values = _run(path, x)
    assert np.array_equal(values["StatefulPartitionedCall:0"], x.transpose(0, 3, 1, 2)[:, ::-1])


def test_relu_0_to_1_equals_litert():
    # edited/relu_0_to_1_int8: the mirror_pad fixture with its RELU relabelled RELU_0_TO_1, run by LiteRT
    # (models/tflite_fixtures.py --relu-0-to-1); both bounds clamp inside the int8 range
    path = FIXTURES / "edited" / "relu_0_to_1_int8.tflite"
    ref = np.load(path.with_suffix(".npz"))
    values = _run(path, ref["input"])
    consts = {t.name for t in read_tflite(path).tensors if t.data is not None}
    compared = 0
    for key in ref.files:
        if key.startswith("t:") and key[2:] not in consts:
            assert np.array_equal(values[key[2:]], ref[key]), key
            compared += 1
    out = ref["t:StatefulPartitionedCall:0"]
    assert compared == 4 and out.min() == -128 and out.max() == -1  # 1.0 / (2/255) rounds to 127 above the zp


def test_transpose_conv_whose_output_shape_input_disagrees_is_refused(tmp_path):
    def edit(spec, sg):  # the output-shape constant says 9x9, the output tensor 8x8
        buf = sg["tensors"][sg["operators"][1]["inputs"][0]]["buffer"]
        spec["buffers"][buf]["data"] = np.array([1, 9, 9, 3], np.int32).tobytes()
    with pytest.raises(UnsupportedModelError, match=r"TRANSPOSE_CONV.*output shape input \[1, 9, 9, 3\] is not its "
                                                    r"output's \[1, 8, 8, 3\]"):
        open_model(_edited(tmp_path, "transpose_conv_int8.tflite", edit))


def test_split_along_an_axis_outside_its_input_is_refused(tmp_path):
    def edit(spec, sg):  # SPLIT's axis constant (shared with SPLIT_V) becomes 7
        spec["buffers"][sg["tensors"][2]["buffer"]]["data"] = np.array([7], np.int32).tobytes()
    path = _edited(tmp_path, "split_int8.tflite", edit)
    with pytest.raises(UnsupportedModelError, match=r"\(SPLIT(_V)?, .*axis 7 is outside its input's 4 dimensions"):
        open_model(path)
    assert main(["check", str(path)]) == 2


@pytest.mark.parametrize("name", ["transpose_conv_a16w8", "split_int8", "pack_int8", "leaky_int8", "prelu_int8",
                                  "maxmin_a16w8", "mirror_pad_int8", "abs_exp_a16w8"])
def test_the_new_operators_cost_as_their_twins_do(name):
    a = npu_sim.estimate(str(FIXTURES / f"{name}.tflite"), board=BOARD)
    b = npu_sim.estimate(str(FIXTURES / f"{name}.onnx"), board=BOARD)
    assert a.summary["total_cycles"] == pytest.approx(b.summary["total_cycles"], rel=0.01)
    assert not any("@" in r.node for r in a.layers)  # the layout changes are not ops of the model
