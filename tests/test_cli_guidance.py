"""The command line guides a newcomer (issue 20): the check summary grouped by rule, a word when the model does
not fit the board, what `check --run` observed, dynamic shapes, names never cut silently. Transcripts on a model
as a newcomer brings one (tests/cli_models.py) and on the committed demo."""
import json
from pathlib import Path

import pytest

from npu_sim.api import check
from npu_sim.cli.main import main
from tests.cli_models import HAZARD_BLOCK, deep_cnn, layer

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
