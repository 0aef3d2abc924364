"""The front door in practice: a model is read and validated once (``open_model``) and passed on; dynamic input
shapes are fixed by one resolver with one message; ``check`` and ``estimate`` take the program they are given;
one dataset read path; one worker-state memo."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest

import npu_sim
from npu_sim.cli.main import main
from npu_sim.errors import FloatReferenceError, InputError, ModelLoadError
from npu_sim.frontend import dataset as ds
from npu_sim.frontend.reader import OpenModel, open_model
from npu_sim.frontend.shapes import ModelInput, dynamic_message, resolve_shapes
from npu_sim.runtime.memo import Memo
from tests.cli_models import free_width

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "models" / "demo"
QDQ, FLOAT, SAMPLE = DEMO / "digits_cnn.qdq.onnx", DEMO / "digits_cnn.float.onnx", DEMO / "digits_sample.npy"


@pytest.fixture
def reads(monkeypatch):
    """The model files ``onnx.load`` read during the test, in order."""
    seen: list[str] = []
    real = onnx.load

    def counting(f, *args, **kwargs):
        seen.append(Path(str(f)).name)
        return real(f, *args, **kwargs)
    monkeypatch.setattr(onnx, "load", counting)
    return seen


# ---- one read per command ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["check", QDQ, "--input", SAMPLE], ["check", QDQ, "--run"], ["estimate", QDQ], ["lower", QDQ],
    ["run", QDQ, "--input", SAMPLE, "--out", "{tmp}/o"],
])
def test_each_command_reads_the_model_once(argv, reads, tmp_path, capsys):
    assert main([str(a).replace("{tmp}", str(tmp_path)) for a in argv]) in (0, 1)
    assert reads == [QDQ.name], reads


def test_compare_reads_the_model_once(reads, tmp_path, capsys):
    assert main(["run", str(QDQ), "--input", str(SAMPLE), "--dump-all", "--out", str(tmp_path / "dump")]) == 0
    reads.clear()
    assert main(["compare", str(QDQ), str(tmp_path / "dump")]) == 0
    assert reads == [QDQ.name], reads


def test_report_and_dataset_run_read_each_model_once(reads, tmp_path):
    data = DEMO / "digits_test.npz"
    npu_sim.accuracy_report(QDQ, data=data, float_model=FLOAT, limit=4, workers=1)
    assert sorted(reads) == sorted([QDQ.name, FLOAT.name]), reads
    reads.clear()
    npu_sim.run_dataset(QDQ, [data], npu_sim.DatasetWriter(tmp_path / "out"), float_model=FLOAT,
                        engine=npu_sim.EngineOptions("local", 1))
    assert sorted(reads) == sorted([QDQ.name, FLOAT.name]), reads


def test_report_with_the_advisor_reads_each_model_once(reads, tmp_path, capsys, monkeypatch):
    """The report, the advisor and the re-quantization (onnxruntime's quantize_static is given the float model as
    the front door read it, not its path) read the QDQ and the float model once each."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    given, real = [], quantization.quantize_static

    def recording(model_input, *args, **kwargs):
        given.append(model_input)
        return real(model_input, *args, **kwargs)
    monkeypatch.setattr(quantization, "quantize_static", recording)
    data = str(DEMO / "digits_test.npz")
    assert main(["report", str(QDQ), "--data", data, "--float", str(FLOAT), "--limit", "4", "--samples", "2",
                 "--no-sensitivity", "--points", "2", "--workers", "1", "--quiet", "--requantize", data,
                 "--calib-limit", "4", "--fixed-model", str(tmp_path / "fixed.qdq.onnx")]) == 0
    assert "verdict: deployable on default" in capsys.readouterr().out  # the fixed model, checked
    assert len(given) == 1 and isinstance(given[0], onnx.ModelProto)
    assert sorted(r for r in reads if r in (QDQ.name, FLOAT.name)) == sorted([QDQ.name, FLOAT.name]), reads


def test_an_open_model_is_passed_on_not_read_again(reads):
    model = npu_sim.open_model(QDQ)
    assert isinstance(model, OpenModel) and open_model(model) is model
    sim = npu_sim.load(model, input_shapes={"input": (1, 1, 8, 8)})
    npu_sim.check(model, input_shapes={"input": (1, 1, 8, 8)})
    npu_sim.estimate(model, board="ethos-u55-128", input_shapes={"input": (1, 1, 8, 8)})
    npu_sim.check(sim, board="ethos-u55-128")  # another board: lowered again from the open model
    assert reads == [QDQ.name]
    assert sim.opened is model and model.file == str(QDQ)


def test_the_handle_describes_the_model():
    model = open_model(QDQ)
    inp = model.inputs["input"]
    assert inp.dims == (None, 1, 8, 8) and inp.dynamic and inp.dtype == "float32"
    assert model.outputs == ["logits"]
    assert "input" in model.quantized.values()  # the input's QuantizeLinear
    graph = model.graph({"input": (2, 1, 8, 8)})
    assert graph.shapes["input"] == (2, 1, 8, 8)
    assert model.proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # the handle's own proto untouched


def test_an_in_memory_model_is_copied():
    proto = onnx.load(str(QDQ))
    before = proto.SerializeToString()
    sim = npu_sim.load(proto, input_shapes={"input": (1, 1, 8, 8)})
    assert proto.SerializeToString() == before and sim.opened.file is None
    assert sim.program.model_path == "<in-memory model>"


def test_the_float_model_beside_it_is_checked(tmp_path):
    model = open_model(QDQ)
    assert not [n for n in model.float_model(FLOAT).graph.node if n.op_type == "QuantizeLinear"]
    with pytest.raises(FloatReferenceError, match="QuantizeLinear/DequantizeLinear"):
        model.float_model(QDQ)
    with pytest.raises(FloatReferenceError, match="file not found"):
        model.float_model(tmp_path / "none.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"no model")
    with pytest.raises(FloatReferenceError, match="cannot read it as an ONNX model"):
        model.float_model(tmp_path / "bad.onnx")


def test_the_float_model_reads_no_data_outside_its_folder(tmp_path):
    """The float model goes through the same door as the QDQ model: external data from its own folder only."""
    m = onnx.load(str(FLOAT))
    tensor = m.graph.initializer[0]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    del tensor.float_data[:]
    tensor.external_data.add(key="location", value="../secret.bin")
    (tmp_path / "m").mkdir()
    onnx.save(m, str(tmp_path / "m" / "float.onnx"))
    with pytest.raises(FloatReferenceError, match="outside the model's folder"):
        open_model(QDQ).float_model(tmp_path / "m" / "float.onnx")


def test_a_missing_model_is_one_message_everywhere(tmp_path, capsys):
    missing = tmp_path / "none.onnx"
    with pytest.raises(ModelLoadError, match="not found"):
        open_model(missing)
    with pytest.raises(ModelLoadError, match="not found"):
        npu_sim.accuracy_report(missing, data=DEMO / "digits_test.npz")
    for command in ("check", "estimate", "lower", "run"):
        assert main([command, str(missing)]) == 2
        assert f"model file {str(missing)!r} not found" in capsys.readouterr().err


# ---- one shape resolver, one message -----------------------------------------------------------------------------
def _inp(dims, labels=None):
    labels = labels or tuple("?" if d is None else str(d) for d in dims)
    return {"x": ModelInput("x", tuple(dims), tuple(labels), "float32")}


def test_resolver_order():
    free = _inp((None, 3, 8, None), ("N", "3", "8", "W"))
    assert resolve_shapes(free, {"x": (2, 3, 8, 20)}) == {"x": (2, 3, 8, 20)}
    assert resolve_shapes(free, fed={"x": (4, 3, 8, 16)}) == {"x": (4, 3, 8, 16)}  # one run on this feed
    assert resolve_shapes(free, fed={"x": np.zeros((4, 3, 8, 16))}, free_batch=1, samples=True) == \
        {"x": (1, 3, 8, 16)}  # data split into samples of batch 1
    assert resolve_shapes(free, fed={"x": (3, 8, 16)}, free_batch=1, samples=True) == {"x": (1, 3, 8, 16)}
    assert resolve_shapes(_inp((None, 3)), free_batch=1) == {"x": (1, 3)}
    with pytest.raises(InputError, match="conflicts with the model's fixed shape"):
        resolve_shapes(free, {"x": (1, 4, 8, 8)})
    with pytest.raises(InputError, match="at least 1"):
        resolve_shapes(free, fed={"x": (0, 3, 8, 8)})
    with pytest.raises(InputError, match="names \\['y'\\]"):
        resolve_shapes(free, {"y": (1,)})


def test_the_one_message():
    free = _inp((None, 3, 8, None), ("N", "3", "8", "W"))
    text = dynamic_message(free["x"], "m.onnx")
    assert text == ("m.onnx: input 'x' has a dynamic shape [N, 3, 8, W]; give a fixed one with --input-shape "
                    "x=1x3x8x8 (input_shapes= in Python), or feed data whose shape fixes it")
    for kwargs in ({}, {"free_batch": 1}, {"fed": {"x": (3, 8)}, "free_batch": 1, "samples": True}):
        with pytest.raises(InputError) as err:
            resolve_shapes(free, where="m.onnx", **kwargs)
        assert str(err.value) == text
    seq = dynamic_message(ModelInput("t", (1, None), ("1", "seq"), "int64"))
    assert "--input-shape t=1xSEQ " in seq


def test_every_command_says_the_one_message(tmp_path, capsys):
    path = free_width(tmp_path)
    want = dynamic_message(open_model(path).inputs["x"], str(path))
    with pytest.raises(InputError) as err:
        npu_sim.load(path)
    assert str(err.value) == want
    for argv in (["run", "--out", tmp_path / "o"], ["lower"], ["check"], ["estimate"]):
        assert main([argv[0], str(path), *map(str, argv[1:])]) == 2
        assert capsys.readouterr().err == f"npu-sim: error: {want}\n", argv
    image = pytest.importorskip("PIL.Image")
    image.new("RGB", (16, 8)).save(tmp_path / "a.png")  # an image is resized to the input: it fixes no shape
    with pytest.raises(InputError) as err:
        npu_sim.api.load_data(path, tmp_path / "a.png")
    assert str(err.value) == want


def test_data_fixes_a_dynamic_shape(tmp_path):
    path = free_width(tmp_path)
    data = tmp_path / "data.npy"
    np.save(data, np.zeros((2, 3, 8, 16), np.float32))
    dset = npu_sim.api.load_data(path, data)
    assert len(dset) == 2 and dset.samples[0]["x"].shape == (1, 3, 8, 16)


# ---- check and estimate take the program they are given ----------------------------------------------------------
def test_check_and_estimate_take_a_program():
    program = npu_sim.api.program_for(QDQ, "ethos-u55-128", {"input": (1, 1, 8, 8)})
    assert npu_sim.api.program_for(program) is program
    assert npu_sim.api.program_for(program, "ethos-u55-128") is program
    assert npu_sim.check(program).board == "ethos-u55-128"
    assert npu_sim.estimate(program).summary["total_cycles"] > 0
    other = npu_sim.api.program_for(program, "default")
    assert other is not program and str(other.board) == "default"
    assert other.tensors[other.inputs["input"]].shape == (1, 1, 8, 8)


# ---- one dataset read path ---------------------------------------------------------------------------------------
def test_load_dataset_is_scan_then_read(tmp_path):
    shapes, dtypes = {"input": (1, 1, 8, 8)}, {"input": "float32"}
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "a.npz", x=rng.standard_normal((3, 1, 8, 8)).astype(np.float32), y=np.arange(3))
    np.save(tmp_path / "b.npy", rng.standard_normal((1, 8, 8)).astype(np.float32))
    files = [tmp_path / "a.npz", tmp_path / "b.npy"]
    dset = ds.load_dataset(files, shapes, dtypes)
    by_reference = []
    for f in files:
        source, _ = ds.scan_file(f, shapes, dtypes)
        by_reference += [ds.read_sample(source, i, shapes, dtypes) for i in range(source.samples)]
    assert len(dset) == len(by_reference) == 4
    for got, want in zip(dset.samples, by_reference):
        assert np.array_equal(got["input"], want["input"]) and got["input"].dtype == np.float32
    assert dset.labels is None  # b.npy has none: labels only when every file has them
    labelled = ds.load_dataset(files[:1], shapes, dtypes, limit=2)
    assert len(labelled) == 2 and labelled.labels.tolist() == [0, 1]


def test_load_dataset_refuses_as_the_scan_does(tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((2, 1, 8, 9), np.float32))
    with pytest.raises(InputError) as loaded:
        ds.load_dataset([tmp_path / "bad.npy"], {"input": (1, 1, 8, 8)}, {"input": "float32"})
    with pytest.raises(InputError) as scanned:
        ds.scan_file(tmp_path / "bad.npy", {"input": (1, 1, 8, 8)}, {"input": "float32"})
    assert str(loaded.value) == str(scanned.value) and re.search(r"does not fit input 'input'", str(loaded.value))


# ---- one worker-state memo ---------------------------------------------------------------------------------------
def test_memo_keeps_builds_and_lends():
    memo = Memo(1)
    built = []
    assert memo.kept({"board": {"a": 1}}, lambda: built.append(1) or "one") == "one"  # an unhashable key
    assert memo.kept({"board": {"a": 1}}, lambda: built.append(2) or "two") == "one" and built == [1]
    memo.put("other", "three")
    assert memo.get({"board": {"a": 1}}) is None and memo.get("other") == "three"  # at most one kept
    jobs = Memo()
    with jobs.lent("job", "state"):
        assert jobs.get("job") == "state"
    assert jobs.get("job") is None
