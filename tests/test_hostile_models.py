"""The hostile corpus (tests/hostile_corpus.py) against every model command and the Python API.

Every broken variant must be refused by ``check``, ``run``, ``estimate`` and ``lower`` alike: exit 1 or 2, a
message of at least one sentence that names the culprit, no traceback, never exit 3 (a bug in npu-sim) and never
exit 0. Every valid variant must run. ``python -m tests.test_hostile_models`` prints the counts per command
(clean / silent exit 0 / internal exit 3).
"""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import npu_sim
from npu_sim.cli.main import main
from npu_sim.errors import NpuSimError
from tests.hostile_corpus import CASES, build_case, demo_base, mixed_base

COMMANDS = ("check", "run", "estimate", "lower")
BY_NAME = {c.name: c for c in CASES}


def test_corpus_is_large_enough():
    assert len(CASES) >= 100 and len(BY_NAME) == len(CASES)
    assert sum(not c.valid for c in CASES) >= 95


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return {"demo": demo_base(), "mixed": mixed_base(tmp_path_factory.mktemp("mixed"))}


def run_cli(command: str, path: Path, out: Path, extra=(), capsys=None) -> tuple[int, str]:
    argv = [command, str(path), *extra]
    if command == "run":
        argv += ["--out", str(out)]
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def verdict(code: int, text: str, case, command: str = "run") -> str:
    """'ok' (refused cleanly, or a valid model ran), 'silent' (exit 0 on a broken model, or a valid one refused),
    'internal' (exit 3 or a traceback)."""
    if code == 3 or "Traceback" in text:
        return "internal"
    if case.valid:
        return "ok" if code == 0 or (command == "check" and code == 1) else "silent"
    if command == "estimate" and code == 0 and "lower bound" in text:  # a node it cannot lower, named
        return "ok"
    return "silent" if code == 0 else "ok"


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_hostile_case(name, bases, tmp_path, capsys):
    case = BY_NAME[name]
    path = build_case(case, tmp_path / "model", bases)
    for command in COMMANDS:
        code, text = run_cli(command, path, tmp_path / "out", case.args, capsys)
        assert "Traceback" not in text, (command, text)
        assert code != 3, (command, text)
        if case.valid:
            assert code in (0, 1) if command == "check" else code == 0, (command, text)
            continue
        if command == "estimate" and code == 0:  # a valid graph whose node npu-sim cannot lower: named, not costed
            assert "lower bound" in text and "Traceback" not in text, text
        else:
            assert code in (1, 2), (command, code, text)
        message = text.split("npu-sim: error:", 1)[-1] if code == 2 else text
        assert len(message.strip()) > 20 and " " in message.strip(), (command, text)
        for fragment in case.fragments:
            assert fragment in message, (command, fragment, text)


@pytest.mark.parametrize("name", ["cycle", "two_nodes_write_one_tensor", "opset_99", "scale_float16",
                                  "conv_stride_0", "gather_index_out_of_range", "input_1e14_elements"])
def test_api_refuses_with_npu_sim_error(name, bases, tmp_path):
    case = BY_NAME[name]
    path = build_case(case, tmp_path / "model", bases)
    for call in (lambda: npu_sim.load(path), lambda: npu_sim.check(path), lambda: npu_sim.estimate(path)):
        with pytest.raises(NpuSimError) as info:
            call()
        for fragment in case.fragments:
            assert fragment in str(info.value)


@pytest.mark.parametrize("name", ["cycle", "scale_denormal", "conv_group_not_dividing"])
def test_console_script(name, bases, tmp_path):
    path = build_case(BY_NAME[name], tmp_path / "model", bases)
    for command in ("check", "estimate"):
        proc = subprocess.run([sys.executable, "-m", "npu_sim.cli", command, str(path)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.startswith("npu-sim: error:")


def measure(folder: Path) -> dict:
    """Counts per command: ok / silent / internal over the corpus (for the issue's before/after figures)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout
    bases = {"demo": demo_base(), "mixed": mixed_base(folder / "mixed")}
    counts = {c: Counter() for c in COMMANDS}
    for case in CASES:
        path = build_case(case, folder / case.name, bases)
        for command in COMMANDS:
            buf = io.StringIO()
            try:
                with redirect_stdout(buf), redirect_stderr(buf):
                    argv = [command, str(path), *case.args] + (["--out", str(folder / "out")] if command == "run"
                                                               else [])
                    code = main(argv)
            except BaseException as exc:  # noqa: BLE001 - measuring, not judging
                code, buf = 3, io.StringIO(f"Traceback {exc!r}")
            v = verdict(code, buf.getvalue(), case, command)
            counts[command][v] += 1
            if v != "ok":
                print(f"{command:9s} {v:9s} {case.name}: {buf.getvalue().strip()[-160:]!r}", file=sys.__stderr__)
    return counts


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for command, c in measure(Path(tmp)).items():
            print(f"{command:9s} ok {c['ok']:3d}  silent {c['silent']:3d}  internal {c['internal']:3d}")
