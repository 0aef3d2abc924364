"""The dataset mode of `run` (issue 19, item 2): `npu-sim run MODEL --data ... --out OUT`.

Outputs equal single `Simulator.run` calls; the files do not depend on the number of workers; a killed run,
resumed, gives the same bytes; a failing sample is named and the others written; the --float metrics CSV; no
progress bar off a terminal; bad --out, missing data and mixed options exit 2.
"""
from __future__ import annotations

import csv
import io
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.analysis.dataset import task as dataset_task
from npu_sim.cli.main import main
from npu_sim.render.dataset_out import DatasetWriter, npz_bytes
from npu_sim.runtime import memo

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "models" / "demo"
MODEL = DEMO / "digits_cnn.qdq.onnx"
FLOAT = DEMO / "digits_cnn.float.onnx"
TEST = DEMO / "digits_test.npz"
N = 40  # samples in the small dataset


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    """The first N test digits with their labels, as one .npz."""
    z = np.load(TEST)
    path = tmp_path_factory.mktemp("data") / "digits40.npz"
    np.savez(path, x=z["x"][:N], y=z["y"][:N])
    return path


@pytest.fixture(scope="module")
def sim():
    return npu_sim.load(MODEL, input_shapes={"input": (1, 1, 8, 8)})


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _cli(*args) -> int:
    """`npu-sim run ...` in this process (one worker: no process start-up in the tests that need none)."""
    return main(["run", *map(str, args), "--workers", "1"])


def _run(out, data, workers=1, kind="local", **kw):
    writer = DatasetWriter(out, resume=kw.pop("resume", False))
    return npu_sim.run_dataset(MODEL, data, writer, engine=npu_sim.EngineOptions(kind, workers), **kw)


def test_outputs_equal_single_runs(tmp_path, digits, sim):
    summary = _run(tmp_path / "out", [digits], shard_size=16)
    assert summary.ok and summary.samples == N and summary.shards == 3
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "shard-00000.npz", "shard-00001.npz",
                                                    "shard-00002.npz"]
    man = json.loads((out / "manifest.json").read_text())
    assert man["complete"] and man["board"] == "default" and man["shard_size"] == 16 and man["failed"] == []
    assert man["model"] == str(MODEL) and man["inputs"] == {"input": [1, 1, 8, 8]}
    x = np.load(digits)["x"]
    shards = {k: np.load(out / f"shard-{k:05d}.npz") for k in range(3)}
    assert [len(shards[k]["logits.int"]) for k in range(3)] == [16, 16, 8]
    for entry in man["samples"]:
        i = entry["index"]
        assert entry["file"] == str(digits) and entry["item"] == i and entry["label"] == [int(np.load(digits)["y"][i])]
        assert entry["shard"] == f"shard-{i // 16:05d}.npz" and entry["row"] == i % 16
        shard = shards[i // 16]
        q = sim.run({"input": x[i:i + 1]}, raw=True)["logits"]
        f = sim.run({"input": x[i:i + 1]})["logits"]
        got_q, got_f = shard["logits.int"][entry["row"]], shard["logits"][entry["row"]]
        assert got_q.dtype == q.dtype and np.array_equal(got_q, q)
        assert got_f.dtype == np.float32 and np.array_equal(got_f, f)


def test_npz_bytes_are_deterministic_and_loadable(tmp_path):
    arrays = {"a.int": np.arange(6, dtype=np.int8).reshape(2, 3), "a": np.ones((2, 3), np.float32)}
    data = npz_bytes(arrays)
    assert data == npz_bytes(dict(arrays))
    (tmp_path / "s.npz").write_bytes(data)
    z = np.load(tmp_path / "s.npz")
    assert z.files == ["a.int", "a"] and np.array_equal(z["a.int"], arrays["a.int"])


def test_layout_and_bytes_do_not_depend_on_workers(tmp_path, digits):
    one = _run(tmp_path / "w1", [digits], workers=1, shard_size=8, float_model=FLOAT)
    two = _run(tmp_path / "w2", [digits], workers=2, shard_size=8, float_model=FLOAT)
    assert one.ok and two.ok and one.metrics == two.metrics
    a, b = _files(tmp_path / "w1"), _files(tmp_path / "w2")
    assert list(a) == list(b) and len(a) == 5 + 2
    assert a == b


@pytest.mark.full  # a Ray cluster of its own: make test-full
def test_ray_cluster_gives_the_same_files(tmp_path, digits):
    """--engine ray on a local cluster of 2 CPUs (started here, shut down after): the files of --workers 1, byte
    for byte."""
    ray = pytest.importorskip("ray")
    one = _run(tmp_path / "w1", [digits], workers=1, shard_size=8, float_model=FLOAT)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        on_ray = _run(tmp_path / "ray", [digits], workers=2, kind="ray", shard_size=8, float_model=FLOAT)
    finally:
        ray.shutdown()
    assert one.ok and on_ray.ok and one.metrics == on_ray.metrics
    assert _files(tmp_path / "w1") == _files(tmp_path / "ray")


class _Killed(BaseException):
    pass


def test_resume_after_a_kill_gives_the_same_bytes(tmp_path, digits, monkeypatch):
    """Stopped after two shards (as a kill leaves OUT: the shards and manifest written so far), then --resume."""
    whole = _run(tmp_path / "whole", [digits], shard_size=8, float_model=FLOAT)
    original = DatasetWriter.shard
    written = []

    def dies_on_third(self, k, arrays):
        if len(written) == 2:
            raise _Killed()
        written.append(k)
        return original(self, k, arrays)

    monkeypatch.setattr(DatasetWriter, "shard", dies_on_third)
    with pytest.raises(_Killed):
        _run(tmp_path / "part", [digits], shard_size=8, float_model=FLOAT)
    monkeypatch.setattr(DatasetWriter, "shard", original)
    part = tmp_path / "part"
    man = json.loads((part / "manifest.json").read_text())
    assert not man["complete"] and [s["shard"] for s in man["shards"]] == [0, 1]
    (part / ".shard-00002.npz.12345.tmp").write_bytes(b"half a shard")  # a write cut short
    # without --resume the folder is refused, naming --resume
    assert _cli(MODEL, "--data", digits, "--out", part, "--shard-size", 8, "--float", FLOAT) == 2
    resumed = _run(part, [digits], shard_size=8, float_model=FLOAT, resume=True)
    assert resumed.reused_shards == 2 and resumed.ok
    assert _files(part) == _files(tmp_path / "whole")
    assert resumed.metrics == whole.metrics
    # a shard damaged after it was written is written again; the others are kept
    (part / "shard-00001.npz").write_bytes(b"damaged")
    again = _run(part, [digits], shard_size=8, float_model=FLOAT, resume=True)
    assert again.reused_shards == 4 and _files(part) == _files(tmp_path / "whole")


def test_resume_of_another_job_is_refused(tmp_path, digits, capsys):
    out = tmp_path / "out"
    assert _cli(MODEL, "--data", digits, "--out", out, "--shard-size", 8) == 0
    capsys.readouterr()
    assert _cli(MODEL, "--data", digits, "--out", out, "--shard-size", 16, "--resume") == 2
    err = capsys.readouterr().err
    assert "differs in: --shard-size" in err and "new --out" in err
    before = _files(out)
    assert _cli(MODEL, "--data", digits, "--out", out, "--shard-size", 8, "--resume") == 0
    assert _files(out) == before


def test_failing_samples_are_named_and_the_others_written(tmp_path, sim, capsys, monkeypatch):
    x = np.load(TEST)["x"]
    data = tmp_path / "npys"
    data.mkdir()
    for i in range(6):
        np.save(data / f"s{i}.npy", x[i:i + 1])
    np.save(data / "s3.npy", np.zeros((1, 1, 7, 7), np.float32))  # the wrong shape
    out = tmp_path / "out"
    code = _cli(MODEL, "--data", data, "--out", out, "--shard-size", 2)
    err = capsys.readouterr().err
    assert code == 1
    assert "s3.npy" in err and "[1, 1, 7, 7]" in err and "1 sample(s) failed" in err
    man = json.loads((out / "manifest.json").read_text())
    assert [f["sample"] for f in man["failed"]] == [str(data / "s3.npy")]
    assert [s["file"] for s in man["samples"]] == [str(data / f"s{i}.npy") for i in (0, 1, 2, 4, 5)]
    assert all(s["item"] == 0 for s in man["samples"])
    assert len(list(out.glob("shard-*.npz"))) == 3
    last = np.load(out / "shard-00002.npz")["logits.int"]
    assert np.array_equal(last[0], sim.run({"input": x[5:6]}, raw=True)["logits"])

    # a sample the simulator fails on: named; its shard keeps the others, rows closing up
    real = dataset_task.run_shard

    def fails_on_a_constant_input(s, feeds):
        if any(float(f["input"].min()) == float(f["input"].max()) for f in feeds):
            raise RuntimeError("kernel refused")
        return real(s, feeds)

    monkeypatch.setattr(dataset_task, "run_shard", fails_on_a_constant_input)
    np.save(data / "s3.npy", np.full((1, 1, 8, 8), 0.5, np.float32))
    out2 = tmp_path / "out2"
    code = _cli(MODEL, "--data", data, "--out", out2, "--shard-size", 2)
    err = capsys.readouterr().err
    assert code == 1 and f"{data / 's3.npy'}[0]: RuntimeError: kernel refused" in err
    man = json.loads((out2 / "manifest.json").read_text())
    assert [f["sample"] for f in man["failed"]] == [f"{data / 's3.npy'}[0]"]
    entries = {s["file"]: s for s in man["samples"]}
    assert "row" not in entries[str(data / "s3.npy")] and entries[str(data / "s2.npy")]["row"] == 0
    assert entries[str(data / "s3.npy")]["error"] == "RuntimeError: kernel refused"
    shard1 = np.load(out2 / "shard-00001.npz")["logits.int"]
    assert len(shard1) == 1 and np.array_equal(shard1[0], sim.run({"input": x[2:3]}, raw=True)["logits"])


def test_float_metrics_csv(tmp_path, digits):
    import onnxruntime as ort
    summary = _run(tmp_path / "out", [digits], shard_size=16, float_model=FLOAT)
    with open(tmp_path / "out" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["index", "file", "item", "label", "logits.cosine", "logits.sqnr_db", "logits.top1_agree",
                             "logits.correct", "logits.float_correct"]
    assert [int(r["index"]) for r in rows] == list(range(N))
    z = np.load(digits)
    sess = ort.InferenceSession(str(FLOAT), providers=["CPUExecutionProvider"])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    agree = correct = 0
    for r, entry in zip(rows, manifest["samples"]):
        i = int(r["index"])
        ref = sess.run(None, {"input": z["x"][i:i + 1]})[0].astype(np.float64).reshape(-1)
        y = np.load(tmp_path / "out" / entry["shard"])["logits"][entry["row"]].astype(np.float64).reshape(-1)
        cos = ref @ y / math.sqrt((ref @ ref) * (y @ y))
        sqnr = 10 * math.log10((ref @ ref) / ((ref - y) @ (ref - y)))
        assert float(r["logits.cosine"]) == pytest.approx(cos, abs=1e-6)
        assert float(r["logits.sqnr_db"]) == pytest.approx(sqnr, abs=1e-3)
        assert int(r["logits.top1_agree"]) == int(np.argmax(ref) == np.argmax(y))
        assert int(r["label"]) == int(z["y"][i]) and r["file"] == str(digits) and int(r["item"]) == i
        assert int(r["logits.correct"]) == int(np.argmax(y) == z["y"][i])
        assert int(r["logits.float_correct"]) == int(np.argmax(ref) == z["y"][i])
        agree += int(r["logits.top1_agree"])
        correct += int(r["logits.correct"])
    m = summary.metrics["logits"]
    assert m["top1_agree"] == agree / N and m["accuracy"] == correct / N
    assert m["cosine"] == pytest.approx(np.mean([float(r["logits.cosine"]) for r in rows]))


def test_images_and_cli_summary(tmp_path, capsys):
    from PIL import Image
    x = np.load(TEST)["x"][:3]
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i, img in enumerate(x):
        Image.fromarray(np.uint8(np.clip((img[0] + 1) * 127.5, 0, 255))).save(folder / f"d{i}.png")
    out = tmp_path / "out"
    # the model may follow --data; --mean/--std apply to the images
    code = _cli("--data", folder, MODEL, "--out", out, "--mean", "0.5", "--std", "0.5", "--float", FLOAT)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "wrote 3 of 3 sample(s) in 1 shard(s)" in captured.out and "mean cosine" in captured.out
    assert "top-1 agreement" in captured.out and "accuracy" not in captured.out.replace("top-1", "")
    man = json.loads((out / "manifest.json").read_text())
    assert [(s["file"], s["item"]) for s in man["samples"]] == [(str(folder / f"d{i}.png"), None) for i in range(3)]
    assert captured.err == ""  # stderr is not a terminal: no progress bar


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_only_on_a_terminal_and_not_quiet(tmp_path, digits, monkeypatch):
    pytest.importorskip("tqdm")
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(["run", str(MODEL), "--data", str(digits), "--out", str(tmp_path / "a"), "--workers", "1"]) == 0
    assert "samples" in tty.getvalue()
    tty2 = _Tty()
    monkeypatch.setattr(sys, "stderr", tty2)
    assert main(["run", str(MODEL), "--data", str(digits), "--out", str(tmp_path / "b"), "--workers", "1",
                 "--quiet"]) == 0
    assert tty2.getvalue() == ""


def test_bad_out_missing_data_and_mixed_options_exit_2(tmp_path, digits, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        (["--data", str(digits), "--out", str(afile)], "is a file"),
        (["--data", str(tmp_path / "nothing"), "--out", str(tmp_path / "o1")], "does not exist"),
        (["--data", str(digits), "--out", str(tmp_path / "o2"), "--input", str(DEMO / "digits_sample.npy")],
         "--input and --data"),
        (["--data", str(digits)], "--data needs --out"),
        (["--resume", "--out", str(tmp_path / "o3")], "--resume is for dataset runs"),
        (["--shard-size", "4", "--out", str(tmp_path / "o3")], "--shard-size is for dataset runs"),
        (["--data", str(digits), "--out", str(tmp_path / "o4"), "--shard-size", "0"], "--shard-size 0"),
        (["--data", str(digits), "--out", str(tmp_path / "o5"), "--dump-all"], "--dump-all"),
    ]
    for extra, said in cases:
        assert _cli(MODEL, *extra) == 2, extra
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, (extra, err)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert _cli(MODEL, "--data", digits, "--out", other) == 2
    assert "holds other files (notes.txt)" in capsys.readouterr().err
    assert (other / "notes.txt").read_text() == "mine" and len(list(other.iterdir())) == 1


def test_float_without_onnxruntime_exits_2(tmp_path, digits, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    monkeypatch.setattr(memo.WORKER, "states", [])
    assert _cli(MODEL, "--data", digits, "--out", tmp_path / "o", "--float", FLOAT) == 2
    assert "pip install 'npu-sim[report]'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_plain_run_is_unchanged(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(MODEL), "--input", str(DEMO / "digits_sample.npy")]) == 0
    assert (tmp_path / "npu_sim_out" / "logits.int.npy").is_file()
    shutil.rmtree(tmp_path / "npu_sim_out")


def test_a_failed_task_is_named_and_run_again_on_resume(tmp_path, digits, capsys, monkeypatch):
    """A shard whose task failed as a whole (its worker died on every try): its samples named, the other shards
    written, exit 1; --resume runs that shard alone and ends with the bytes of an uninterrupted run."""
    from npu_sim.analysis.dataset import run as dataset_run
    from npu_sim.runtime.engines import TaskFailed
    whole = tmp_path / "whole"
    assert _cli(MODEL, "--data", digits, "--out", whole, "--shard-size", 16) == 0
    real = dataset_run.run_tasks

    def second_dies(setup, arg, task, payloads, options):
        for pos, res in real(setup, arg, task, payloads, options):
            yield pos, TaskFailed("its worker process died on every try") if payloads[pos].shard == 1 else res

    monkeypatch.setattr(dataset_run, "run_tasks", second_dies)
    out = tmp_path / "out"
    capsys.readouterr()
    assert _cli(MODEL, "--data", digits, "--out", out, "--shard-size", 16) == 1
    err = capsys.readouterr().err
    assert f"shard-00001.npz (samples {digits}[16], {digits}[17]," in err and "16 sample(s) failed" in err
    assert sorted(p.name for p in out.glob("shard-*")) == ["shard-00000.npz", "shard-00002.npz"]
    man = json.loads((out / "manifest.json").read_text())
    assert not man["complete"] and [f["index"] for f in man["failed"]] == list(range(16, 32))
    monkeypatch.setattr(dataset_run, "run_tasks", real)
    ran = []
    monkeypatch.setattr(dataset_run, "run_tasks", lambda s, a, t, payloads, o: (ran.extend(p.shard for p in payloads)
                                                                              or real(s, a, t, payloads, o)))
    assert _cli(MODEL, "--data", digits, "--out", out, "--shard-size", 16, "--resume") == 0
    assert ran == [1] and _files(out) == _files(whole)


def _arrays_in(obj, seen=None) -> list[np.ndarray]:
    """Every numpy array reachable from ``obj`` through dataclasses, lists, tuples and dicts."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif hasattr(obj, "__dataclass_fields__"):
        items = [getattr(obj, f) for f in obj.__dataclass_fields__]
    else:
        return []
    return [a for item in items for a in _arrays_in(item, seen)]


def test_the_plan_holds_sample_references_not_samples(tmp_path):
    """Many samples: the plan keeps (file, item, label) per sample, counted from the headers; no decoded array."""
    from npu_sim.analysis.dataset.run import plan_dataset
    z = np.load(TEST)
    data = tmp_path / "many"
    data.mkdir()
    np.save(data / "a.npy", np.concatenate([z["x"]] * 6))                       # 2160 samples
    np.savez(data / "b.npz", x=z["x"][:100], y=z["y"][:100])
    plan = plan_dataset(MODEL, [data], shard_size=64)
    assert len(plan.samples) == 2260 and plan.shards == 36 and not hasattr(plan, "feeds")
    assert [(s.file, s.item) for s in plan.samples[2158:2162]] == [(str(data / "a.npy"), 2158),
                                                                   (str(data / "a.npy"), 2159),
                                                                   (str(data / "b.npz"), 0), (str(data / "b.npz"), 1)]
    assert plan.samples[2161].labels.tolist() == [int(z["y"][1])]
    held = _arrays_in(plan.samples) + _arrays_in(plan.files) + _arrays_in(plan.load_errors)
    assert held and all(a.size <= 1 for a in held), "the plan holds sample data"


def test_a_sample_that_cannot_be_read_when_its_shard_is_built_fails_alone(tmp_path, sim, capsys):
    """Headers fine, data not: a .npy cut short, a row with NaN, a truncated image. Each is named in the manifest
    when its shard is built; the other samples of the same shards are written."""
    from PIL import Image
    x = np.load(TEST)["x"]
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "a.npy", x[:4])
    bad = x[4:8].copy()
    bad[1, 0, 3, 3] = np.nan
    np.save(data / "b.npy", bad)
    np.save(data / "c.npy", x[8:11])
    cut = (data / "c.npy").read_bytes()
    (data / "c.npy").write_bytes(cut[:len(cut) - 100])  # the header promises 3 samples; the data is short
    Image.fromarray(np.uint8(np.clip((x[11, 0] + 1) * 127.5, 0, 255))).save(data / "d.png")
    png = (data / "d.png").read_bytes()
    (data / "d.png").write_bytes(png[:len(png) // 2])
    out = tmp_path / "out"
    assert _cli(MODEL, "--data", data, "--out", out, "--shard-size", 3) == 1
    err = capsys.readouterr().err
    man = json.loads((out / "manifest.json").read_text())
    failed = {f["sample"]: f["error"] for f in man["failed"]}
    assert sorted(failed) == [f"{data / 'b.npy'}[1]", f"{data / 'c.npy'}[0]", f"{data / 'c.npy'}[1]",
                              f"{data / 'c.npy'}[2]", str(data / "d.png")]
    assert "NaN" in failed[f"{data / 'b.npy'}[1]"] and "d.png" in failed[str(data / "d.png")]
    assert all(name in err for name in failed)
    assert len(man["samples"]) == 12 and [f.get("index") for f in man["failed"]] == [5, 8, 9, 10, 11]
    written = {s["index"]: s for s in man["samples"] if "row" in s}
    assert sorted(written) == [0, 1, 2, 3, 4, 6, 7]
    for i, s in written.items():
        row = np.load(out / s["shard"])["logits.int"][s["row"]]
        assert np.array_equal(row, sim.run({"input": x[i:i + 1]}, raw=True)["logits"]), i


@pytest.mark.parametrize("workers", [1, 2])
def test_shards_are_built_as_the_engine_pulls_them(tmp_path, digits, monkeypatch, workers):
    """Each shard's payload is built when a worker can take it: when the first shard is written, at most two
    per worker were built; every shard is built once."""
    from npu_sim.analysis.dataset import run as dataset_run
    real_build, real_write = dataset_run.shard_payload, DatasetWriter.shard
    built, at_first_write = [], []

    def counting_build(plan, k, opened=None):
        built.append(k)
        return real_build(plan, k, opened)

    def noting_write(self, k, arrays):
        at_first_write.append(len(built))
        return real_write(self, k, arrays)

    monkeypatch.setattr(dataset_run, "shard_payload", counting_build)
    monkeypatch.setattr(DatasetWriter, "shard", noting_write)
    summary = _run(tmp_path / "out", [digits], workers=workers, shard_size=2)
    assert summary.ok and summary.shards == 20 and sorted(built) == list(range(20))
    assert 1 <= at_first_write[0] <= 2 * workers, at_first_write
