"""One verdict (issue 32): over the whole hostile corpus (tests/hostile_corpus.py and tests/hostile_schema.py) on
every preset board, what the front door refuses every command refuses with the same error and message, and
``check`` never calls a model deployable that ``run`` (``npu_sim.load``) refuses. In-process API calls; a few CLI
runs for the exit codes and messages of every command, ``report`` and ``compare`` included.
"""
from __future__ import annotations

import numpy as np
import pytest

import npu_sim
from npu_sim.boards import load_board, presets
from npu_sim.cli.main import main
from npu_sim.errors import NpuSimError
from npu_sim.frontend.reader import open_model
from tests import hostile_corpus, hostile_schema
from tests.hostile_corpus import build_case, demo_base, mixed_base

CASES = {c.name: c for c in hostile_corpus.CASES + hostile_schema.CASES if not c.args}
BOARDS = sorted(presets())
# a board without a [cost] section estimates nothing: estimate refuses the board first, whatever the model
COSTED = [b for b in BOARDS if load_board(b).cost is not None]


def says_deployable(result) -> bool:
    """check's verdict as the CLI gives it (exit 0): no error finding, and every node simulated (run can run it)."""
    return result.deployable and result.simulated


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("verdict")
    bases = {"demo": demo_base(), "mixed": mixed_base(root / "mixed"), "acts": hostile_schema.acts_base(root / "a")}
    return {name: build_case(case, root / name, bases) for name, case in sorted(CASES.items())}


def outcome(call):
    """None when ``call`` succeeds, else the NpuSimError's type and message."""
    try:
        call()
    except NpuSimError as exc:
        return type(exc).__name__, str(exc)
    return None


_FRONT: dict = {}


def front_door(path):
    """The front door's verdict on ``path`` (read once per file)."""
    if path not in _FRONT:
        _FRONT[path] = outcome(lambda: open_model(path).graph())
    return _FRONT[path]


def test_corpus_has_both_kinds(built):
    refused = [name for name, path in built.items() if front_door(path)]
    assert len(refused) >= 120 and len(built) - len(refused) >= 15


@pytest.mark.parametrize("board", BOARDS)
def test_front_door_refusal_is_every_commands(board, built):
    for name, path in built.items():
        front = front_door(path)
        if front is None:
            continue
        assert not CASES[name].valid, (name, front)
        for command, call in (("run", lambda: npu_sim.load(path, board=board)),
                              ("check", lambda: npu_sim.check(path, board=board)),
                              ("estimate", lambda: npu_sim.estimate(path, board=board))):
            if command == "estimate" and board not in COSTED:
                assert outcome(call)[0] == "BoardError"
                continue
            assert outcome(call) == front, (name, command)


@pytest.mark.parametrize("board", BOARDS)
def test_check_never_deployable_where_run_refuses(board, built):
    for name, path in built.items():
        if front_door(path) is not None:
            continue
        run = outcome(lambda: npu_sim.load(path, board=board))
        if CASES[name].valid and board in ("default", "onnx"):
            assert run is None, (name, run)
        if run is None:
            continue
        checked = []
        refused = outcome(lambda: checked.append(npu_sim.check(path, board=board)))
        assert refused == run if refused else not says_deployable(checked[0]), (name, run)
        if board in COSTED:
            est = outcome(lambda: npu_sim.estimate(path, board=board))
            assert est is None or est == run, (name, est, run)


@pytest.mark.parametrize("name", ["conv_pads_int", "dq_reads_float", "weight_scale_1e-30"])
def test_every_command_exits_2_with_runs_message(name, built, tmp_path, capsys):
    path = str(built[name])
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "x.npy", np.zeros((1, 1, 8, 8), np.float32))  # the demo model's one input
    dump = tmp_path / "dump"
    dump.mkdir()
    np.save(dump / "logits.npy", np.zeros((1, 10), np.int8))
    runs = {"run": ["run", path, "--out", str(tmp_path / "out")], "lower": ["lower", path],
            "check": ["check", path], "estimate": ["estimate", path],
            "report": ["report", path, "--data", str(data)],
            "compare": ["compare", path, str(dump)]}
    messages = {}
    for command, argv in runs.items():
        for board in (["--board", b] for b in (COSTED if command == "estimate" else BOARDS)) \
                if command in ("check", "estimate") else [[]]:
            code = main(argv + board)
            err = capsys.readouterr().err
            assert code == 2, (command, board, err)
            messages[(command, *board)] = err.split("npu-sim: error:", 1)[1].strip()
    assert len(set(messages.values())) == 1, messages
