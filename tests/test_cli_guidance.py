"""The command line guides a newcomer (issue 20): the check summary grouped by rule, a word when the model does
not fit the board, what `check --run` observed, dynamic shapes, names never cut silently. Transcripts on a model
as a newcomer brings one (tests/cli_models.py) and on the committed demo."""
import json
import re
from pathlib import Path

import onnx
import pytest

from npu_sim.api import check
from npu_sim.cli.main import main
from npu_sim.render.report_text import fix_summary
from npu_sim.render.text import cut_end, cut_middle
from tests.cli_models import BLOCKS, HAZARD_BLOCK, PREFIX, deep_cnn, free_width, layer

DEMO = Path(__file__).parent.parent / "models" / "demo"
MODEL = DEMO / "digits_cnn.qdq.onnx"
SHAPE = ["--input-shape", "x=1x3x12x12"]


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    return deep_cnn(tmp_path_factory.mktemp("deep_cnn"))


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_summary_is_short_grouped_hazards_first(deep, capsys):
    _, qpath = deep
    code, text, _ = run_cli(capsys, "check", qpath, *SHAPE)
    lines = text.splitlines()
    result = check(qpath, input_shapes={"x": (1, 3, 12, 12)})
    assert code == 1 and result.count("error") > 20
    code_v, verbose, _ = run_cli(capsys, "check", qpath, *SHAPE, "--verbose")
    assert code_v == 1 and len(verbose.splitlines()) > 100  # the full listing, one block per node
    assert len(lines) <= 60, text
    # one line per rule, the numeric hazard (which changes results) before the format rules
    rule_lines = [l for l in lines if l.startswith("  error") or l.startswith("  warning")]
    rules = [l.split()[1] for l in rule_lines]
    assert rules[0] == "bias.saturated" and rules.index("zero_point.activation") > 0
    assert len(rules) == len(set(rules)) == len({f.rule for _, f in result.findings})
    assert rule_lines[0].startswith(f"  error   bias.saturated x1: {layer(HAZARD_BLOCK)}")
    n_dtype = sum(f.rule == "dtype.activation" for _, f in result.findings)
    assert f"dtype.activation x{n_dtype}:" in text and "more" in text
    # each fix once
    for _, f in result.findings:
        assert text.count(f.fix) <= 1
    assert "nodes with errors" in text and "--verbose lists every one" in text
    assert "NOT DEPLOYABLE" in lines[-2]
    # --verbose is the full listing: every finding's message
    for node, f in result.findings:
        assert f"{f.rule}: {f.message}" in verbose
    # --json unchanged: the same document as the API's
    code_j, js, _ = run_cli(capsys, "check", qpath, *SHAPE, "--json")
    assert code_j == 1 and json.loads(js) == json.loads(json.dumps(result.to_dict()))


def test_check_severity_filter(deep, capsys):
    _, qpath = deep
    _, errors, _ = run_cli(capsys, "check", qpath, *SHAPE, "--severity", "error")
    assert "bias.saturated" in errors and "lint.large_kernel" not in errors and "  warning " not in errors
    assert "warning(s)" in errors  # the summary still counts everything
    _, warn, _ = run_cli(capsys, "check", qpath, *SHAPE, "--severity", "warning", "--verbose")
    assert "lint.large_kernel" in warn and "bias.saturated" in warn
    _, demo, _ = run_cli(capsys, "check", MODEL, "--input-shape", "input=1x1x8x8", "--severity", "error")
    assert "no findings at severity error or worse" in demo and "DEPLOYABLE" in demo


def test_run_estimate_report_say_the_model_fails_the_board(deep, tmp_path, capsys):
    fpath, qpath = deep
    hint = f"`npu-sim check {qpath}` for why"
    n = check(qpath, input_shapes={"x": (1, 3, 12, 12)}).count("error")
    code, _, err = run_cli(capsys, "run", qpath, *SHAPE, "--out", tmp_path / "o")
    assert code == 0 and f"note: this model fails board 'default' with {n} check error(s) (bias.saturated x1" in err
    assert hint in err
    code, out, err = run_cli(capsys, "estimate", qpath, *SHAPE)
    assert code == 0 and f"with {n} check error(s)" in err and hint in err and "total:" in out
    code, _, err = run_cli(capsys, "estimate", qpath, *SHAPE, "--board", "onnx")
    assert code == 2 and "no [cost] section" in err
    np = pytest.importorskip("numpy")
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((3, 3, 12, 12)).astype(np.float32))
    code, out, _ = run_cli(capsys, "report", qpath, "--data", data, "--float", fpath, "--no-sensitivity",
                           "--requantize", data, "--fixed-model", tmp_path / "fixed.onnx")
    lines = out.splitlines()
    assert code == 0 and lines[2].startswith(f"note: this model fails board 'default' with {n} check error(s)")
    fixed = check(tmp_path / "fixed.onnx", input_shapes={"x": (1, 3, 12, 12)})
    assert "bias.saturated" not in {f.rule for _, f in fixed.findings}  # the fix cured the hazard
    assert fixed.deployable and "verdict: deployable on default; cosine " in out, out  # with the board's settings
    # a model that fits says nothing
    code, _, err = run_cli(capsys, "run", MODEL, "--input", DEMO / "digits_sample.npy", "--out", tmp_path / "d")
    assert code == 0 and "note: this model fails" not in err
    code, out, _ = run_cli(capsys, "report", MODEL, "--data", DEMO / "digits_test.npz", "--limit", "4",
                           "--no-sensitivity")
    assert code == 0 and "fails board" not in out


def test_check_run_says_what_it_observed(deep, capsys):
    _, qpath = deep
    code, text, _ = run_cli(capsys, "check", qpath, *SHAPE, "--run")
    assert code == 1 and "run (seeded random input in the calibrated range, 1 sample):" in text
    assert f"  {layer(HAZARD_BLOCK)}: " in text and "accumulator value(s) overflowed" in text
    assert "run `npu-sim check --run`" not in text and "the run below says what it observed" in text
    _, plain, _ = run_cli(capsys, "check", qpath, *SHAPE)
    assert "run `npu-sim check --run` to see observed overflow" in plain and "run (" not in plain
    code, demo, _ = run_cli(capsys, "check", MODEL, "--input", DEMO / "digits_sample.npy")
    assert code == 0 and "run (input [1, 1, 8, 8]):\n  no accumulator overflow observed on any node" in demo


def _flags_of(capsys, command) -> set[str]:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return set(re.findall(r"--[a-z][a-z0-9-]*", capsys.readouterr().out))


def test_free_batch_defaults_to_one_with_a_note(capsys):
    for command in ("lower", "check", "estimate"):
        code, out, err = run_cli(capsys, command, MODEL)
        assert code == 0, err
        assert ("note: input 'input' has a free batch dimension; using batch 1 (input=1x1x8x8; --input-shape sets "
                "another)") in err
    code, out, err = run_cli(capsys, "lower", MODEL, "--input-shape", "input=2x1x8x8")
    assert code == 0 and "free batch" not in err and "[2x1x8x8]" in out


def test_suggested_input_shape_works(tmp_path, capsys):
    path = free_width(tmp_path)
    for command in ("run", "lower", "check", "estimate"):
        extra = ["--out", tmp_path / "o"] if command == "run" else []
        code, _, err = run_cli(capsys, command, path, *extra)
        assert code == 2 and "input 'x' has a dynamic shape [N, 3, 8, W]" in err and "Traceback" not in err, err
        assert set(re.findall(r"--[a-z][a-z0-9-]*", err)) <= _flags_of(capsys, command), err  # its own flags only
        suggested = re.search(r"give a fixed one with (--input-shape x=\S+) ", err).group(1).split()
        code, _, err = run_cli(capsys, command, path, *suggested, *extra)
        assert code in (0, 1), err  # 1: check finds board errors; the shape itself works
    # a width the model cannot take is refused clearly (it was an internal error)
    for command in ("run", "estimate", "check", "lower"):
        code, _, err = run_cli(capsys, command, path, "--input-shape", "x=1x3x8x1", "--out", tmp_path / "o")[:3] \
            if command == "run" else run_cli(capsys, command, path, "--input-shape", "x=1x3x8x1")
        assert code == 2 and "node 'conv'" in err and "output would be empty" in err and "internal" not in err, err


def test_names_are_never_cut_silently(deep, tmp_path, capsys):
    fpath, qpath = deep
    code, out, _ = run_cli(capsys, "estimate", qpath, *SHAPE)
    rows = [l for l in out.splitlines() if l.startswith(PREFIX)]
    assert code == 0 and len(rows) == BLOCKS + 1
    for i in range(BLOCKS):  # look-alike names, each in full, each row told apart
        assert any(l.startswith(layer(i) + " ") for l in rows), layer(i)
    assert all("…" not in l for l in rows)
    np = pytest.importorskip("numpy")
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((2, 3, 12, 12)).astype(np.float32))
    code, out, _ = run_cli(capsys, "report", qpath, "--data", data, "--no-sensitivity", "--top", "28")
    assert code == 0
    table = out.split("worst 28 tensors, accumulated")[1].split("\n\n")[0].splitlines()[2:]
    whole = {o for n in onnx.load(str(fpath)).graph.node for o in n.output} | {"x", "logits_QuantizeLinear_Input"}
    for l in table:
        assert l.split()[1] in whole, l
    assert sum(l.split()[1].startswith(PREFIX) for l in table) >= BLOCKS - 1


def test_cut_helpers():
    assert cut_middle("short", 10) == "short"
    cut = cut_middle("efficientnet-lite0/model/blocks_24/depthwise_conv2d/depthwise:0", 40)
    assert len(cut) == 40 and cut.startswith("efficientnet") and cut.endswith("depthwise:0") and "…" in cut
    text = json.dumps({"TensorQuantOverrides": {f"t{i}": [{"quant_type": "QInt16"}] for i in range(40)}})
    shown = cut_end(text, 300)
    assert len(shown) == 300 and shown.endswith("…") and text.startswith(shown[:299]) and cut_end("{}", 300) == "{}"


def test_the_fix_line_names_each_override_once():
    """The report's fix line is a summary, never JSON cut off mid-way: 40 tensors at int16 and one symmetric int8
    tensor are two overrides with their counts; other options as they are."""
    fix = {"TensorQuantOverrides": {**{f"t{i}": [{"quant_type": "QInt16", "symmetric": True}] for i in range(40)},
                                    "x": [{"quant_type": "QInt8", "symmetric": True}]},
           "ActivationSymmetric": True}
    assert fix_summary(fix) == ('TensorQuantOverrides [{"quant_type": "QInt16", "symmetric": true}] for 40 tensors; '
                                'TensorQuantOverrides [{"quant_type": "QInt8", "symmetric": true}] for \'x\'; '
                                'ActivationSymmetric=true')
