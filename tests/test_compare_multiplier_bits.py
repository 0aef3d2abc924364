"""compare explains with the board's own multiplier bits: a board file with ``multiplier_bits = 16``, an int16 Add
whose dump carries a known fault (truncation instead of rounding at every stage of the three-stage Add, with that
board's 16-bit multipliers). The explanation names the fault for every differing element; the same fault computed
with 31-bit multipliers (what compare assumed before reading the node's records) gives other values."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import helper

import npu_sim
from kernels.fixedpoint import quantize_multiplier
from npu_sim.analysis.compare.explain import explain
from npu_sim.boards import PRESET_DIR, load_board
from npu_sim.cli.main import main as cli_main
from tests.qdq_models import build_model

SA, SB, SY = 0.0123, 0.00457, 0.0171  # float32-exact enough: the test reads the scales back as float32
N = 2048


def _board16(tmp_path) -> str:
    """The default preset with 16-bit requantization multipliers."""
    text = (PRESET_DIR / "default.toml").read_text(encoding="utf-8")
    assert "\nmultiplier_bits = 31\n" in text
    path = tmp_path / "m16.toml"
    path.write_text(text.replace('name = "default"', 'name = "m16"').replace("\nmultiplier_bits = 31\n",
                                                                              "\nmultiplier_bits = 16\n"))
    return str(path)


def _add16(path) -> None:
    """y = a + b, int16 activations (zero points 0): a QDQ model with inputs ``a``, ``b`` [1, N]."""
    inits = {"sa": np.float32(SA), "sb": np.float32(SB), "sy": np.float32(SY), "z": np.int16(0)}
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "z"], ["aq"], name="a_q"),
             helper.make_node("DequantizeLinear", ["aq", "sa", "z"], ["ad"], name="a_dq"),
             helper.make_node("QuantizeLinear", ["b", "sb", "z"], ["bq"], name="b_q"),
             helper.make_node("DequantizeLinear", ["bq", "sb", "z"], ["bd"], name="b_dq"),
             helper.make_node("Add", ["ad", "bd"], ["y"], name="add"),
             helper.make_node("QuantizeLinear", ["y", "sy", "z"], ["yq"], name="y_q"),
             helper.make_node("DequantizeLinear", ["yq", "sy", "z"], ["yd"], name="y_dq")]
    onnx.save(build_model(nodes, {"a": (1, N), "b": (1, N)}, {"yd": (1, N)}, inits, opset=21, name="add16"), path)


def truncated_add(a: np.ndarray, b: np.ndarray, bits: int, left: int) -> np.ndarray:
    """The three-stage Add with every stage truncated toward -inf (``floor(x M / 2**r)``), multipliers of ``bits``
    bits: ``clamp(T(T(a << L, sa/t) + T(b << L, sb/t), t / (2**L sy)))``, t = 2 max(sa, sb)."""
    sa, sb, sy = (float(np.float32(s)) for s in (SA, SB, SY))
    t = 2.0 * max(sa, sb)
    (ma, ra), (mb, rb), (mo, ro) = (quantize_multiplier(r, bits) for r in (sa / t, sb / t, t / (2.0 ** left * sy)))
    out = [((((int(x) << left) * ma >> ra) + ((int(y) << left) * mb >> rb)) * mo) >> ro for x, y in zip(a, b)]
    return np.clip(np.array(out, np.int64), -32768, 32767)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """(model, dump with the add's output replaced by the 16-bit truncated Add, board file, a, b, injected)."""
    tmp = tmp_path_factory.mktemp("bits")
    model, board = tmp / "add16.onnx", _board16(tmp)
    _add16(model)
    rng = np.random.default_rng(28)
    feeds = []
    for name, s in (("a", SA), ("b", SB)):
        np.save(tmp / f"{name}.npy", (rng.uniform(-30000, 30000, (1, N)) * s).astype(np.float32))
        feeds += ["--input", f"{name}={tmp / (name + '.npy')}"]
    assert cli_main(["run", str(model), "--board", board, *feeds, "--dump-all", "--out", str(tmp / "dump")]) == 0
    index = json.loads((tmp / "dump" / "index.json").read_text())
    a, b = (np.load(tmp / "dump" / index[k]["file"]).reshape(-1) for k in ("a", "b"))
    left = load_board(board).arithmetic.add_left_shift(16, 16)
    injected = truncated_add(a, b, 16, left)
    np.save(tmp / "dump" / index["y"]["file"], injected.astype(np.int16).reshape(1, N))
    return model, tmp / "dump", board, a, b, injected


def test_compare_names_the_fault_with_the_boards_16_bit_multipliers(faulty, capsys):
    model, dump, board, a, b, injected = faulty
    t = npu_sim.compare_dump(model, dump, board=board).first_divergent_tensor
    assert t.producer == "add" and t.differing > 100 and t.unexplained == 0
    assert t.causes == {"truncation toward -inf (three-stage Add)": t.differing}
    capsys.readouterr()
    assert cli_main(["compare", str(model), str(dump), "--board", board]) == 1
    assert "truncation toward -inf (three-stage Add)" in capsys.readouterr().out


def test_the_31_bit_pairs_would_not_explain_it(faulty):
    """The same fault with 31-bit multipliers gives other values on some elements: explained with 31-bit pairs (what
    compare assumed before it read the node's records), those elements get another cause or none."""
    model, dump, board, a, b, injected = faulty
    left = load_board(board).arithmetic.add_left_shift(16, 16)
    assert np.count_nonzero(truncated_add(a, b, 31, left) != injected) > 20
    prog = npu_sim.load(model, board=board).program
    node = next(n for n in prog.nodes if n.op == "Add")
    assert all(0 < m < 2 ** 16 for m, _ in node.operands.stages)
    inputs = [a.reshape(1, N), b.reshape(1, N)]
    ours = node.run(node, inputs, SimpleNamespace(shape_of=lambda name: (1, N), overflow=lambda *x: None))[0]
    differ = np.flatnonzero(ours.reshape(-1).astype(np.int64) != injected)
    labels = explain(prog, node, inputs, injected.reshape(1, N), ours, differ).labels
    assert set(labels) == {"truncation toward -inf (three-stage Add)"}
    sa, sb, sy = (float(np.float32(s)) for s in (SA, SB, SY))
    t = 2.0 * max(sa, sb)
    pairs31 = tuple(quantize_multiplier(r, 31) for r in (sa / t, sb / t, t / (2.0 ** left * sy)))
    as31 = dataclasses.replace(node, operands=dataclasses.replace(node.operands, stages=pairs31))
    labels31 = explain(prog, as31, inputs, injected.reshape(1, N), ours, differ).labels
    assert np.count_nonzero(labels31 != "truncation toward -inf (three-stage Add)") > 20
