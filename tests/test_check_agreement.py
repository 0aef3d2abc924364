"""check = run: for the models the tests build and every preset board, `check` passing (exit 0) means `run`
succeeds on a random input, and `run` refusing means `check` fails and names the same nodes with the same reason.
Nodes downstream of a refused node are still judged: several refused layers in a row are all reported."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import npu_sim
from npu_sim.cli.main import main
from npu_sim.errors import NpuSimError, UnsupportedModelError
from tests.hostile_corpus import demo_base, mixed_base
from tests.litert_host import litert_host_board
from tests.qdq_models import build_model, quantize, small_cnn, weights

ROOT = Path(__file__).parent.parent
TFL = ROOT / "tests" / "fixtures" / "tflite"
U55 = "ethos-u55-128"


def conv_clip_chain() -> onnx.ModelProto:
    """x -> Conv -> Clip(0, 6) -> Clip(0, 6) -> Conv -> y (quantized keeping the Clips, each its own QDQ group)."""
    rng = np.random.default_rng(3)
    inits = {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32),
             "w0": weights(rng, (4, 4, 1, 1), 0.5), "w1": weights(rng, (4, 4, 1, 1), 0.5)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", kernel_shape=[1, 1]),
             helper.make_node("Clip", ["c0", "lo", "hi"], ["r0"], name="clip0"),
             helper.make_node("Clip", ["r0", "lo", "hi"], ["r1"], name="clip1"),
             helper.make_node("Conv", ["r1", "w1"], ["y"], name="conv1", kernel_shape=[1, 1])]
    return build_model(nodes, {"x": (1, 4, 6, 6)}, {"y": None}, inits, name="chain")


def softmax_model() -> onnx.ModelProto:
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
             helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1)]
    return build_model(nodes, {"x": (1, 16)}, {"y": None}, {"w": weights(rng, (16, 10), 0.3)}, name="sm")


def set_scale(names_and_values: dict):
    """A quantize ``postprocess``: set these initializers (a float sets a scale, an np.int8 a zero point)."""
    def edit(model):
        for t in model.graph.initializer:
            if t.name in names_and_values:
                value = names_and_values[t.name]
                value = value if isinstance(value, np.generic) else np.float32(value)
                t.CopyFrom(numpy_helper.from_array(np.array(value), t.name))
        return model
    return edit


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """name -> (model path, input shapes) for the agreement sweep."""
    d = tmp_path_factory.mktemp("agreement")
    onnx.save(demo_base(), str(d / "demo.onnx"))
    onnx.save(mixed_base(d), str(d / "mixed.onnx"))
    out = {"demo": (d / "demo.onnx", {}), "mixed": (d / "mixed.onnx", {})}
    sym = {"ActivationSymmetric": True}
    for act, extra in (("u8", {}), ("s8", sym), ("s16", sym)):
        out[f"small_cnn_{act}"] = (quantize(small_cnn(), d, f"cnn_{act}", activation_type=act, extra_options=extra),
                                   {})
    out["chain_tiny_scales"] = (quantize(conv_clip_chain(), d, "chain", activation_type="s8",
                                         extra_options={"QDQKeepRemovableActivations": True},
                                         postprocess=set_scale({"r0_scale": 1e-9, "r1_scale": 1e-9})), {})
    out["chain_huge_bounds"] = (quantize(conv_clip_chain(), d, "chain_huge", activation_type="s8",
                                         extra_options={"QDQKeepRemovableActivations": True},
                                         postprocess=set_scale({"x_scale": 1e-17, "c0_scale": 1e-19,
                                                                "r0_scale": 1e-19, "r1_scale": 1e-16,
                                                                "y_scale": 1e-18})), {})
    out["softmax"] = (quantize(softmax_model(), d, "sm", activation_type="s8"), {})
    out["softmax_tiny_input"] = (quantize(softmax_model(), d, "sm_tiny", activation_type="s8",
                                          postprocess=set_scale({"m_scale": 2.0 ** -30, "y_scale": 1 / 256,
                                                                 "y_zero_point": np.int8(-128)})), {})
    out["softmax_small_input"] = (quantize(softmax_model(), d, "sm_small", activation_type="s8",
                                           postprocess=set_scale({"m_scale": 2.0 ** -26.5, "y_scale": 1 / 256,
                                                                  "y_zero_point": np.int8(-128)})), {})
    out["litert_host"] = (litert_host_board(d), {})
    for path in sorted(TFL.glob("*.onnx")):
        out[f"tflite_{path.stem}"] = (path, {})
    return out


def names_and_sources(result) -> dict[str, list]:
    """Every name a check node answers to (its own and its ONNX sources) -> its findings."""
    out: dict[str, list] = {}
    for n in result.nodes:
        for name in [n.node] + list(n.sources):
            out.setdefault(name, []).extend(n.findings)
    return out


MODELS = ["demo", "mixed", "small_cnn_u8", "small_cnn_s8", "small_cnn_s16", "chain_tiny_scales", "softmax",
          "softmax_tiny_input", "softmax_small_input"] + [f"tflite_{p.stem}" for p in sorted(TFL.glob("*.onnx"))]


@pytest.mark.parametrize("name", MODELS)
def test_check_passes_only_what_run_runs(name, built):
    path, shapes = built[name]
    for board in npu_sim.presets():
        try:
            result = npu_sim.check(path, board=board, input_shapes=shapes)
        except NpuSimError:  # refused at the front door: run must refuse it as well
            with pytest.raises(NpuSimError):
                npu_sim.load(path, board=board, input_shapes=shapes)
            continue
        passes = result.deployable and result.simulated
        try:
            sim = npu_sim.load(path, board=board, input_shapes=shapes)
        except UnsupportedModelError as exc:
            assert not passes, (board, exc)
            findings = names_and_sources(result)
            for node, _, why in exc.problems:
                assert node in findings, (board, node, sorted(findings))
                assert any(why in f.message for f in findings[node]), (board, node, why)
            continue
        sim.run(sim.random_inputs(seed=1))
        assert result.simulated, board


def test_consecutive_refused_layers_are_all_reported(built, capsys):
    """Two Clip layers in a row with output scales too small for their activation bounds: LiteRT refuses both at
    prepare time; on a board whose every node LiteRT prepares check reports both (the second is judged although
    its producer was refused) and run names both. On ethos-u55-128 Vela compiles both (it clamps the bounds):
    two hazard warnings, deployable, and run simulates them."""
    path, _ = built["chain_tiny_scales"]
    host = str(built["litert_host"][0])
    result = npu_sim.check(path, board=host)
    refused = {name for name, fs in names_and_sources(result).items()
               if any(f.rule == "board.refusal" and f.severity == "error" for f in fs)}
    assert {"r0_QuantizeLinear", "r1_QuantizeLinear"} <= refused, refused
    assert not result.deployable
    with pytest.raises(UnsupportedModelError) as info:
        npu_sim.load(path, board=host)
    assert len(info.value.problems) == 2 and all("no_integer_overflow" in why for _, _, why in info.value.problems)
    assert main(["check", str(path), "--board", host]) == 1
    result = npu_sim.check(path, board=U55)
    warned = [f for n in result.nodes for f in n.findings if f.rule == "quant.degenerate"]
    assert len(warned) == 2 and all("1e-09" in f.message and "int8 range" in f.message for f in warned)
    assert result.deployable and result.simulated
    sim = npu_sim.load(path, board=U55)
    sim.run(sim.random_inputs(seed=1))
    assert main(["check", str(path), "--board", U55]) == 0
    capsys.readouterr()


def test_bound_beyond_int64_is_compiled_but_not_simulated(built, tmp_path, capsys):
    """ReLU6's bound 6 / 1e-19 = 6e19 passes 2**63: Vela 5.2 compiles the layer but writes a wrong activation
    bound (measured on MobileNet V1 16x8). check: a quant.degenerate warning saying so, deployable, not simulated
    (exit 1); run leaves that layer and what depends on it out, names it, and exits 1. The next layer (6 / 1e-16,
    within int64) is checked as Vela clamps it. (The scales shrink along the chain, as in that network, so that
    every requantization factor stays representable.)"""
    path, _ = built["chain_huge_bounds"]
    result = npu_sim.check(path, board=U55)
    warned = {n.node: f for n in result.nodes for f in n.findings if f.rule == "quant.degenerate"}
    assert set(warned) == {"clip0", "clip1"}, set(warned)
    assert "2**63" in warned["clip0"].message and "does not simulate" in warned["clip0"].message
    assert "Vela clamps the bound" in warned["clip1"].message
    assert result.deployable and not result.simulated
    assert not any(f.rule == "board.refusal" for n in result.nodes for f in n.findings)
    assert main(["check", str(path), "--board", U55]) == 1
    sim = npu_sim.load(path, board=U55, partial=True)
    assert sim.program.unsimulated == {"clip0"} and not sim.program.outputs
    assert main(["run", str(path), "--board", U55, "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "npu-sim does not simulate what the board runs for node 'clip0'" in err


def test_softmax_prepare_bound_is_a_board_refusal(built, capsys):
    """TFLite's int8 SOFTMAX needs beta * input scale * 2**26 > 1 (LiteRT's reference kernel aborts otherwise);
    Vela 5.2's exp table takes down to 0.5. At 2**-4 neither does: an error board.refusal with run's reason on
    both boards, never DEPLOYABLE."""
    path, _ = built["softmax_tiny_input"]
    for board in (U55, str(built["litert_host"][0])):
        result = npu_sim.check(path, board=board)
        found = [f for fs in names_and_sources(result).values() for f in fs if f.rule == "board.refusal"]
        assert found and all(f.severity == "error" for f in found)
        assert not result.deployable
        with pytest.raises(UnsupportedModelError) as info:
            npu_sim.load(path, board=board)
        reasons = [why for _, _, why in info.value.problems]
        assert any("2**26" in why and "reference kernel aborts" in why for why in reasons)
        assert any(why in f.message for why in reasons for f in found)
        assert ("Vela 5.2" in found[0].message) == (board == U55)
        assert main(["check", str(path), "--board", board]) == 1
    capsys.readouterr()


def test_softmax_scale_vela_takes_is_a_hazard(built):
    """beta * input scale * 2**26 = 2**-0.5: LiteRT's reference kernel aborts (a refusal where LiteRT prepares
    the node), Vela's decomposition takes it: on ethos-u55-128 a quant.degenerate warning, deployable, and run
    computes the TFLite algorithm with left shift 0 (about uniform over the row: the input range is almost
    empty)."""
    path, _ = built["softmax_small_input"]
    host = npu_sim.check(path, board=str(built["litert_host"][0]))
    assert not host.deployable and any(f.rule == "board.refusal" for fs in names_and_sources(host).values()
                                       for f in fs)
    result = npu_sim.check(path, board=U55)
    warned = [f for n in result.nodes for f in n.findings if f.rule == "quant.degenerate"]
    assert len(warned) == 1 and "0.707107" in warned[0].message and "not verified" in warned[0].message
    assert result.deployable and result.simulated
    sim = npu_sim.load(path, board=U55)
    softmax = next(n for n in sim.program.nodes if n.op == "Softmax")
    assert softmax.params["ls"] == 0
    y = next(iter(sim.run(sim.random_inputs(seed=1)).values()))
    assert np.ptp(np.asarray(y, np.float64), axis=-1).max() <= 2


def test_check_exits_1_when_run_would_refuse(built, tmp_path, capsys):
    """A node npu-sim cannot lower on a board with CPU fallback: the board deploys it (warning), but run refuses
    the model, so check does not exit 0, and says why."""
    model = build_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mish", ["r"], ["y"])],
                        {"x": (1, 4, 4, 4)}, {"y": None}, opset=18)
    path = quantize(model, tmp_path, "mish", activation_type="s8", extra_options={"ActivationSymmetric": True})
    result = npu_sim.check(path)
    assert result.deployable and not result.simulated and result.to_dict()["simulated"] is False
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "DEPLOYABLE" in out and "`npu-sim run` refuses this model" in out
    assert main(["check", str(built["demo"][0])]) == 0
    capsys.readouterr()
