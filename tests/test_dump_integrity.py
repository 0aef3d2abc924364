"""`npu-sim run --dump-all` writes dumps that cannot lie: built beside --out and renamed into place (an old dump is
replaced, never mixed; a failed run leaves the old one whole), a stale index never left behind, unique file names
for tensors whose names sanitize alike (recorded in index.json), and byte-identical dumps run after run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import npu_sim
import npu_sim.cli.run as run_module
from npu_sim.cli.main import main
from tests.hostile_corpus import demo_base

DEMO = Path(__file__).parent.parent / "models" / "demo"
SAMPLE = DEMO / "digits_sample.npy"


def run_dump(model, out, sample=SAMPLE, extra=()):
    return main(["run", str(model), "--input", f"input={sample}", "--out", str(out), "--dump-all", *extra])


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(demo_base(), str(path))
    return path


def test_rerun_replaces_the_dump(model, tmp_path, capsys):
    out = tmp_path / "dump"
    assert run_dump(model, out) == 0
    (out / "tensors" / "stale_tensor.npy").write_bytes(b"old")
    (out / "stale_output.npy").write_bytes(b"old")
    other = tmp_path / "other.npy"
    np.save(other, np.load(SAMPLE)[:, :, ::-1].copy())
    assert run_dump(model, out, other) == 0
    capsys.readouterr()
    assert not (out / "tensors" / "stale_tensor.npy").exists() and not (out / "stale_output.npy").exists()
    index = json.loads((out / "index.json").read_text())
    trace = npu_sim.load(model).trace({"input": np.load(other)})
    assert set(index) == set(trace)
    for name, entry in index.items():
        assert np.array_equal(np.load(out / entry["file"]), trace[name]), name
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folder left


def test_golden_vectors_are_part_of_the_dump_they_replace(model, tmp_path, capsys):
    """``--format c`` writes OUT/c inside the dump's temporary folder: a re-run into the dump replaces it whole
    (c/ is the dump's own, not a foreign file), and a later plain dump leaves no golden vectors behind."""
    out = tmp_path / "dump"
    assert run_dump(model, out, extra=("--format", "c")) == 0
    (out / "c" / "stale.h").write_text("old")
    assert run_dump(model, out, extra=("--format", "c")) == 0
    assert (out / "c" / "golden.h").is_file() and not (out / "c" / "stale.h").exists()
    assert run_dump(model, out) == 0
    capsys.readouterr()
    assert not (out / "c").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_failed_run_leaves_the_old_dump_whole(model, tmp_path, capsys, monkeypatch):
    out = tmp_path / "dump"
    assert run_dump(model, out) == 0
    before = files_of(out)
    calls = []
    real_save = run_module.save_npy

    def failing_save(path, arr):
        calls.append(path)
        if len(calls) == 5:
            raise OSError(28, "No space left on device", str(path))
        real_save(path, arr)
    monkeypatch.setattr(run_module, "save_npy", failing_save)
    other = tmp_path / "other.npy"
    np.save(other, -np.load(SAMPLE))
    assert run_dump(model, out, other) == 2
    assert "No space left" in capsys.readouterr().err
    assert files_of(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_plain_run_into_a_dump_removes_its_stale_index(model, tmp_path, capsys):
    out = tmp_path / "dump"
    assert run_dump(model, out) == 0
    assert main(["run", str(model), "--out", str(out)]) == 0
    capsys.readouterr()
    assert not (out / "index.json").exists() and not (out / "tensors").exists()
    assert (out / "logits.int.npy").is_file()


def test_dump_refuses_to_replace_a_folder_of_other_files(model, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert run_dump(model, out) == 2
    assert "notes.txt" in capsys.readouterr().err and (out / "notes.txt").read_text() == "keep me"


def colliding_model(tmp_path) -> Path:
    """The demo with tensors named 't:0' and 't_0' and outputs 'out:0' and 'out_0' (all sanitize alike)."""
    m = demo_base()
    renames = {"conv1_out": "t:0", "relu1_out": "t_0"}
    for n in m.graph.node:
        for i, name in enumerate(n.input):
            n.input[i] = renames.get(name, name)
        for i, name in enumerate(n.output):
            n.output[i] = renames.get(name, name)
    for name in ("out:0", "out_0"):
        m.graph.node.append(helper.make_node("DequantizeLinear", ["logits_QuantizeLinear_Output", "logits_scale",
                                                                  "logits_zero_point"], [name], name=f"dq_{name}"))
    del m.graph.output[:]
    m.graph.output.extend([helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("out:0", "out_0")])
    path = tmp_path / "collide.onnx"
    onnx.save(m, str(path))
    return path


def test_colliding_names_get_unique_files_recorded_in_the_index(tmp_path, capsys):
    path = colliding_model(tmp_path)
    out = tmp_path / "dump"
    assert run_dump(path, out) == 0
    capsys.readouterr()
    index = json.loads((out / "index.json").read_text())
    assert index["t:0"]["file"] != index["t_0"]["file"]
    trace = npu_sim.load(path).trace({"input": np.load(SAMPLE)})
    for name in ("t:0", "t_0"):
        assert np.array_equal(np.load(out / index[name]["file"]), trace[name])
    listed = [f for e in index.values() for f in e.get("output_files", [])]
    assert sorted(listed) == ["out_0.int.npy", "out_0.npy", "out_0_2.int.npy", "out_0_2.npy"]
    assert all((out / f).is_file() for f in listed)


def test_dumps_are_byte_identical_across_runs_and_thread_counts(model, tmp_path, capsys):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert run_dump(model, a) == 0 and run_dump(model, b) == 0
    capsys.readouterr()
    assert files_of(a) == files_of(b)
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(Path(__file__).parent.parent))
    proc = subprocess.run([sys.executable, "-m", "npu_sim.cli", "run", str(model), "--input", f"input={SAMPLE}",
                           "--out", str(c), "--dump-all"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert files_of(a) == files_of(c)
