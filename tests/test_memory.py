"""Does it fit (npu_sim.analysis.cost.memory, the board's [memory] section, check's memory.* rules, estimate's
memory section): closed-form bytes of a tiny residual network, boards whose SRAM or flash is too small, the schema."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import npu_sim
from npu_sim.analysis.cost.memory import live_at, live_sets, lut_bytes, memory_report
from npu_sim.boards import PRESET_DIR, load_board
from npu_sim.cli.main import main as cli_main
from npu_sim.errors import BoardError
from npu_sim.ir import Node, Program, QParams, Tables, Tensor
from npu_sim.render.estimate import format_table

from qdq_models import build_model, quantize, rng_for, weights

# x [1,4,8,8] -> Conv 3x3 (4->8) -> a -> Conv 1x1 -> b -> Conv 1x1 -> c -> Add(a, c) -> y: every activation int8,
# 8x8x8 = 512 bytes (x: 256). The residual keeps a alive while b and c are computed.
ACT, X = 512, 256
WEIGHTS = 8 * 4 * 3 * 3 + 8 * 8 + 8 * 8     # int8: 416 bytes
CHANNELS = 3 * 8                             # output channels of the three convolutions (one bias each)


@pytest.fixture(scope="module")
def residual(tmp_path_factory):
    rng = rng_for("memory", "residual")
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "wb", "bb"], ["b"]),
             helper.make_node("Conv", ["b", "wc", "bc"], ["c"]),
             helper.make_node("Add", ["a", "c"], ["y"])]
    inits = {"wa": weights(rng, (8, 4, 3, 3)), "ba": weights(rng, (8,)), "wb": weights(rng, (8, 8, 1, 1)),
             "bb": weights(rng, (8,)), "wc": weights(rng, (8, 8, 1, 1)), "bc": weights(rng, (8,))}
    model = build_model(nodes, {"x": (1, 4, 8, 8)}, {"y": None}, inits)
    return quantize(model, tmp_path_factory.mktemp("memory"), "residual", activation_type="s8", weight_type="s8",
                    extra_options={"ActivationSymmetric": True}, calib_count=2)


def _board(tmp_path, base="default", name="tiny", **memory) -> str:
    """A copy of a preset whose memory facts are replaced (other sections untouched): a key of [memory], or
    ``NAME__KEY`` for a key of [memory.NAME] (``sram__size_bytes=1000``)."""
    text = (PRESET_DIR / f"{base}.toml").read_text().replace(f'name = "{base}"', f'name = "{name}"')
    wanted = {("memory." + k.split("__")[0] if "__" in k else "memory", k.split("__")[-1]): v
              for k, v in memory.items()}
    lines, section = [], ""
    for line in text.split("\n"):
        if line.startswith("["):
            section = line.strip("[]")
            lines += [line] + [f"{key} = {json.dumps(v)}" for (s, key), v in wanted.items() if s == section]
        elif (section, line.split(" =")[0]) not in wanted:
            lines.append(line)
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines))
    return str(path)


def test_closed_form_bytes_default(residual):
    rep = memory_report(npu_sim.load(residual, board="default").program)
    assert rep["weight_bytes"] == WEIGHTS
    assert rep["bias_bytes"] == 4 * CHANNELS                     # int32 biases at their own width
    assert rep["scale_bytes"] == 6 * CHANNELS                    # default.toml: 6 bytes of multiplier + shift
    assert rep["lut_bytes"] == 0 and rep["other_constant_bytes"] == 0
    assert rep["flash_used_bytes"] == WEIGHTS + 10 * CHANNELS
    # node order: Quantize(x), Conv a, Conv b, Conv c, Add: live sets by hand
    assert [r["live_bytes"] for r in rep["layers"]] == [X, X + ACT, 2 * ACT, 3 * ACT, 3 * ACT]
    assert rep["peak_activation_bytes"] == 3 * ACT and rep["peak_node"] == "Conv_c"
    # the residual: a is live while Conv_c runs (without it, b + c alone)
    assert "a_QuantizeLinear_Output" in {t["tensor"] for t in rep["peak_tensors"]}
    # constants stay in flash on this board: the SRAM holds the feature maps only
    assert rep["weight_memory"] == "ddr" and rep["sram_used_bytes"] == 3 * ACT
    assert rep["sram_bytes"] == 2 * 1024 * 1024 and rep["fits_sram"] is True and rep["fits_flash"] is None


def test_closed_form_bytes_ethos(residual):
    """Vela's 10-byte per-channel record (40-bit bias, 32-bit scale, 6-bit shift); Sram_Only as Vela 5.2 runs it:
    constants in on-chip flash, feature maps in a 4 MiB SRAM arena."""
    rep = memory_report(npu_sim.load(residual, board="ethos-u55-128").program)
    assert rep["bias_bytes"] == 5 * CHANNELS and rep["scale_bytes"] == 5 * CHANNELS
    # Vela's weight stream: 4 and 8 input channels go part-kernel-first, output and input channels in micro-blocks
    # of 8, the kernel elements padded to 4: 8 x 12 x 8 for the 3x3 convolution, 8 x 4 x 8 for each 1x1; every
    # stream (and the 80-byte record streams) a multiple of 16 bytes
    assert rep["weight_bytes"] == WEIGHTS and rep["padding_bytes"] == 768 + 2 * 256 - WEIGHTS
    assert rep["flash_used_bytes"] == 768 + 2 * 256 + 10 * CHANNELS
    assert rep["weight_memory"] == "flash" and rep["sram_used_bytes"] == 3 * ACT
    assert rep["sram_bytes"] == 4 * 1024 * 1024 and rep["fits_sram"] is True and rep["fits_flash"] is None


def test_int16_activations_double_the_live_bytes(tmp_path, residual):
    rng = rng_for("memory", "a16")
    model = build_model([helper.make_node("Conv", ["x", "w", "b"], ["y"])], {"x": (1, 4, 8, 8)}, {"y": None},
                        {"w": weights(rng, (8, 4, 1, 1)), "b": weights(rng, (8,))})
    rep = {a: memory_report(npu_sim.load(quantize(model, tmp_path, a, activation_type=a, weight_type="s8",
                                                  extra_options={"ActivationSymmetric": True}, calib_count=2),
                                         board="default").program) for a in ("s8", "s16")}
    assert rep["s8"]["peak_activation_bytes"] == 256 + 512
    assert rep["s16"]["peak_activation_bytes"] == 2 * (256 + 512)
    assert rep["s16"]["weight_bytes"] == rep["s8"]["weight_bytes"] == 32


def _t(name, shape, const=False):
    q = QParams("int8", np.array(0.1, np.float32), np.array(0, np.int64))
    return Tensor(name, name, shape, q, np.zeros(shape, np.int8) if const else None)


def test_views_share_their_input_buffer():
    """x -> Relu -> r -> Flatten -> f -> Gemm -> y: the Flatten adds no bytes, r lives until the Gemm."""
    ts = {n: _t(n, s) for n, s in (("x", (1, 4, 2, 2)), ("r", (1, 4, 2, 2)), ("f", (1, 16)), ("y", (1, 3)))}
    ts["w"] = _t("w", (16, 3), const=True)
    nodes = [Node("relu", "Relu", ["x"], ["r"], None), Node("flat", "Flatten", ["r"], ["f"], None),
             Node("fc", "Gemm", ["f", "w"], ["y"], None)]
    prog = Program(ts, nodes, {"x": "x"}, {"y": "y"}, load_board("default"))
    assert live_sets(prog) == [32, 16, 16 + 3]
    assert live_at(prog, 2) == ["r", "y"]


def test_a_pad_before_a_convolution_is_folded():
    """x -> Pad -> p -> Conv -> y: the padded copy is never held (Vela folds it into the convolution's padding);
    a Pad feeding an Add is a real tensor."""
    def prog(consumer):
        ts = {n: _t(n, s) for n, s in (("x", (1, 1, 4, 4)), ("p", (1, 1, 6, 6)), ("y", (1, 1, 6, 6)))}
        ts["w"] = _t("w", (1, 1, 1, 1), const=True)
        last = (Node("conv", "Conv", ["p", "w"], ["y"], None) if consumer == "Conv"
                else Node("add", "Add", ["p", "p"], ["y"], None))
        return Program(ts, [Node("pad", "Pad", ["x"], ["p"], None), last], {"x": "x"}, {"y": "y"},
                       load_board("default"))
    assert live_sets(prog("Conv")) == [16, 16 + 36]
    assert live_sets(prog("Add")) == [16 + 36, 36 + 36]


def test_lut_bytes_at_their_stored_width():
    assert lut_bytes(Tables({"table": np.arange(-128, 128, dtype=np.int64)})) == 256             # int8 entries
    assert lut_bytes(Tables({"recip": np.arange(513, dtype=np.int32) * 60})) == 513 * 2         # uint16 entries
    assert lut_bytes(Tables({"exp": np.full(4, 1 << 20, np.int64)})) == 16 and lut_bytes(None) == 0


def test_check_fails_a_model_that_does_not_fit_sram(tmp_path, residual, capsys):
    board = _board(tmp_path, sram__size_bytes=1000, spill_memory="sram")
    assert cli_main(["check", str(residual), "--board", board]) == 1
    out = capsys.readouterr().out
    assert "memory.sram" in out and "1,536 bytes" in out and "1,000 bytes" in out and "Conv_c" in out
    assert cli_main(["check", str(residual), "--board", board, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    found = [f for f in doc["model_findings"] if f["rule"] == "memory.sram"]
    assert len(found) == 1 and found[0]["severity"] == "error" and "Reduce the input resolution" in found[0]["fix"]
    # just inside: no finding
    inside = _board(tmp_path, name="inside", sram__size_bytes=3 * ACT, spill_memory="sram")
    assert "memory.sram" not in [f.rule for _, f in npu_sim.check(residual, board=inside).findings]


def test_sram_rule_counts_constants_in_sram_and_says_so(tmp_path, residual):
    board = _board(tmp_path, sram__size_bytes=3 * ACT + 100, weight_memory="sram", spill_memory="sram")
    found = [f for _, f in npu_sim.check(residual, board=board).findings if f.rule == "memory.sram"]
    assert len(found) == 1 and f"constants {WEIGHTS + 10 * CHANNELS:,}" in found[0].message
    assert 'weight_memory = "flash"' in found[0].fix


def test_sram_rule_warns_when_feature_maps_spill(tmp_path, residual):
    board = _board(tmp_path, sram__size_bytes=1000, spill_memory="ddr")
    found = [f for _, f in npu_sim.check(residual, board=board).findings if f.rule == "memory.sram"]
    assert len(found) == 1 and found[0].severity == "warning"
    assert npu_sim.check(residual, board=board).deployable


def test_check_fails_constants_past_the_flash(tmp_path, residual):
    board = _board(tmp_path, ddr__size_bytes=500)
    r = npu_sim.check(residual, board=board)
    found = [f for _, f in r.findings if f.rule == "memory.weights"]
    assert len(found) == 1 and not r.deployable
    assert f"weights {WEIGHTS:,}" in found[0].message and "500 bytes" in found[0].message
    assert "memory.weights" not in [f.rule for _, f in npu_sim.check(residual, board=_board(
        tmp_path, name="big", ddr__size_bytes=WEIGHTS + 10 * CHANNELS)).findings]


def test_memory_is_the_one_source_of_the_memory_facts(tmp_path):
    """[cost] reads the memories from [memory]: a board with [cost] and no [memory] is refused, naming the key."""
    text = (PRESET_DIR / "default.toml").read_text()
    path = tmp_path / "nomem.toml"
    head, rest = text.split("\n[memory]\n", 1)  # [memory] and its [memory.NAME] tables precede [cost]
    path.write_text(head + "\n[cost]" + rest.split("\n[cost]", 1)[1])
    with pytest.raises(BoardError, match="memory.sram.bytes_per_cycle"):
        load_board(str(path))
    board = load_board("default")
    assert board.cost.memory is board.memory and board.memory.sram_key == "memory.sram.size_bytes"
    assert load_board("onnx").memory.sram_bytes == 0  # no [cost], no [memory]: nothing limited


@pytest.mark.parametrize("key, value, words", [
    ("sram__size_bytes", -1, "memory.sram.size_bytes = -1"), ("ddr__size_bytes", 1.5, "memory.ddr.size_bytes"),
    ("weight_memory", "dram", "memory.weight_memory = 'dram'"), ("spill_memory", 1, "memory.spill_memory = 1"),
    ("sram_kib", 4, "unknown key memory.sram_kib")])
def test_memory_schema_errors_name_the_key(tmp_path, residual, capsys, key, value, words):
    board = _board(tmp_path, **{key: value})
    with pytest.raises(BoardError, match="tiny.toml"):
        load_board(board)
    assert cli_main(["estimate", str(residual), "--board", board]) == 2
    assert words in capsys.readouterr().err


def test_estimate_json_and_text_gain_a_memory_section(residual, capsys):
    assert cli_main(["estimate", str(residual), "--board", "default", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"model", "board", "clock_hz", "macs_per_cycle", "summary", "layers"} < set(doc)
    m = doc["memory"]
    for key in ("weight_bytes", "bias_bytes", "scale_bytes", "lut_bytes", "flash_used_bytes",
                "peak_activation_bytes", "peak_node", "sram_used_bytes", "sram_bytes", "flash_bytes", "fits_sram",
                "fits_flash", "layers"):
        assert key in m
    assert [r["node"] for r in m["layers"]] == [r["node"] for r in doc["layers"]]
    text = format_table(npu_sim.estimate(residual, board="default"))
    assert f"peak live activations {3 * ACT:,} (constants in ddr)" in text
    assert f"largest live sets: Conv_c {3 * ACT:,}" in text
    assert f"board: {2 * 1024 * 1024:,} (memory.sram.size_bytes): fits" in text
    assert max(len(line) for line in text.splitlines()) <= 120
