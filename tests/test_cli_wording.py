"""Noise and wording (issue 20, item 8): onnxruntime's quantizer warnings summarized, a constant output said as
such, the worst-sample cosine of 0 explained, no orphan footnote, rule texts that agree with the board and the
model, advice that fits a depthwise kernel, no sentence that announces nothing."""
import logging
import types
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from npu_sim.api import check
from npu_sim.cli.main import main
from npu_sim.cli.noise import quiet_logs, summary
from npu_sim.render.report_text import format_advice
from tests.cli_models import BLOCKS, deep_cnn, layer
from tests.qdq_models import build_model, quantize

DEMO = Path(__file__).parent.parent / "models" / "demo"
S8 = {"ActivationSymmetric": True}


def _relu_model(tmp_path, act="s8"):
    """y = Relu(x @ I): the output follows the input (and saturates past its calibrated range)."""
    m = build_model([helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
                     helper.make_node("Relu", ["h"], ["y"], name="relu")], {"x": (1, 10)}, {"y": (1, 10)},
                    {"W": np.eye(10, dtype=np.float32)})
    return quantize(m, tmp_path, f"relu_{act}", activation_type=act, extra_options=S8)


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    return deep_cnn(tmp_path_factory.mktemp("deep_cnn_wording"))


def test_constant_output_is_said_not_ranked(tmp_path, capsys):
    path = _relu_model(tmp_path)
    np.save(tmp_path / "big.npy", np.full((1, 10), 1000.0, np.float32))
    assert main(["run", str(path), "--input", str(tmp_path / "big.npy"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "output is constant 127 (saturated)" in out and "top-5" not in out
    np.save(tmp_path / "mixed.npy", np.linspace(-1, 1, 10, dtype=np.float32)[None])
    assert main(["run", str(path), "--input", str(tmp_path / "mixed.npy"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "output is constant" not in out and "top-5" in out


def test_worst_sample_zero_is_explained(tmp_path, capsys):
    path = _relu_model(tmp_path)
    x = np.stack([np.linspace(-1, 1, 10), np.full(10, 1e-5)]).astype(np.float32)  # the second: integers all 0
    np.save(tmp_path / "data.npy", x)
    assert main(["report", str(path), "--data", str(tmp_path / "data.npy"), "--no-sensitivity"]) == 0
    out = capsys.readouterr().out
    assert "(worst sample 0.00000)" in out
    assert "one side's output is all zeros, where cosine is 0 by definition" in out
    assert main(["report", str(path), "--data", str(tmp_path / "data.npy"), "--limit", "1", "--no-sensitivity"]) == 0
    assert "by definition" not in capsys.readouterr().out


def test_only_promotion_candidates_are_ranked():
    """Not a layer that gains nothing, nor the float reference's own output (an upper bound, not a promotion)."""
    rows = [{"rank": i + 1, "layer": f"l{i}", "tensor": f"t{i}", "mode": "int16" if i < 3 else
             "float (reference output)", "cosine": 0.9, "gain_sqnr_db": 1.0 if i < 2 else 0.0, "delta_cycles": 10}
            for i in range(5)]
    r = types.SimpleNamespace(checks=None, latency=None, advisor=None,
                              sensitivity={"baseline": {"cosine": 0.9, "sqnr_db": 10.0}, "samples": 2,
                                           "layers": rows})
    top5 = "\n".join(format_advice(r, 5))
    assert " l1 " in top5 and not any(f" l{i} " in top5 for i in (2, 3, 4))
    assert "(2 promotion candidate(s); 3 other layer(s) gain nothing" in top5


def test_quantizer_warnings_are_summarized(capsys):
    with quiet_logs():
        for _ in range(2):
            logging.warning("Please consider to run pre-processing before quantization. Refer to example: "
                            "https://example.invalid/a/very/long/path")
        logging.warning("The original model opset version is 13, which does not support node fusions. Please "
                        "update the model to opset >= 18.")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "example.invalid" not in err
    assert ("onnxruntime's quantizer logged 3 warning(s): Please consider to run pre-processing before "
            "quantization (x2); The original model opset version is 13") in err
    assert summary({}) is None


def test_requantize_keeps_quantizer_warnings_off_the_screen(deep, tmp_path, capsys):
    fpath, qpath = deep
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(1).standard_normal((2, 3, 12, 12)).astype(np.float32))
    assert main(["report", str(qpath), "--data", str(data), "--float", str(fpath), "--no-sensitivity",
                 "--requantize", str(data), "--fixed-model", str(tmp_path / "fixed.onnx")]) == 0
    err = capsys.readouterr().err
    assert "WARNING:root" not in err and "quantizer logged" in err


def test_rule_texts_agree_with_board_and_model(deep, tmp_path):
    _, qpath = deep
    r = check(qpath, input_shapes={"x": (1, 3, 12, 12)})
    zp = next(f for _, f in r.findings if f.rule == "zero_point.activation")
    assert "takes uint8" not in zp.message and "no uint8 at all (dtype.activation)" in zp.message
    big = next(f for node, f in r.findings if f.rule == "lint.large_kernel")
    assert "stack" not in big.fix and "depthwise" in big.fix and "npu-sim report" in big.fix
    m = build_model([helper.make_node("Sigmoid", ["x"], ["y"], name="sig")], {"x": (1, 4, 6, 6)}, {"y": None})
    a16 = check(quantize(m, tmp_path, "u16", activation_type="u16"))
    fixes = {f.rule: f.fix for _, f in a16.findings}
    assert "QuantType.QInt16" in fixes["dtype.activation"] and "QInt8" not in fixes["dtype.activation"]
    assert "QuantType.QInt16" in fixes["zero_point.activation"]


def test_no_announcement_of_nothing(tmp_path, capsys):
    html = tmp_path / "demo.html"
    assert main(["report", str(DEMO / "digits_cnn.qdq.onnx"), "--data", str(DEMO / "digits_test.npz"), "--limit",
                 "4", "--no-sensitivity", "--html", str(html)]) == 0
    page = html.read_text()
    assert "Check findings" in page and "Next to the layers they affect" not in page
