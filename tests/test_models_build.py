"""Tests of models/build.py: the real test models and their sample inputs.

The models are built into the cache ($NPU_SIM_CACHE or ~/.cache/npu-sim/models)
on first use, so the first run takes some seconds; later runs reuse them.
PP-OCR tests need the rapidocr wheel: they skip, saying why, when it is not
cached and ``pip download`` fails (no network).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")
pytest.importorskip("skimage")
pytest.importorskip("PIL")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import build  # noqa: E402

QDQ = {"QuantizeLinear", "DequantizeLinear"}

# Tests that may need the one-time download of the rapidocr wheel (marker registered in pyproject.toml).
network = pytest.mark.network


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _metadata(model) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def _q_zero_point_types(model) -> set[int]:
    """Element types of the zero points of the QuantizeLinear (activation) nodes."""
    inits = {t.name: t.data_type for t in model.graph.initializer}
    return {inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}


def _non_static(model) -> list[str]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    shapes = {vi.name: vi.type.tensor_type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    inits = {t.name for t in g.initializer}
    bad = []
    for node in g.node:
        for out in node.output:
            if not out or out in inits:
                continue
            tt = shapes.get(out)
            if tt is None or not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
                bad.append(out)
    return bad


def _ppocr(name: str) -> Path:
    try:
        build._wheel()
    except build.DownloadError as e:
        pytest.skip(f"{build.RAPIDOCR_REQUIREMENT} wheel not cached and pip download failed (no network?): {e}")
    return build.get(name)


# ---------------------------------------------------------------------------
# No build needed


def test_names():
    assert len(build.NAMES) == len(set(build.NAMES)) == 18
    for fam in ("ppocr_det", "ppocr_rec", "ppocr_cls"):
        for v in ("float", "a8w8", "a8w8u", "a16w8"):
            assert f"{fam}_{v}" in build.NAMES
    assert {"ppocr_cls_a16w8_contrib", "mobilenetv2_float", "mobilenetv2_a8w8", "mobilenetv2_a8w8u",
            "ppocr_cls_a16w16_noadjust", "ppocr_rec_a16w16_noadjust"} <= set(build.NAMES)
    with pytest.raises(KeyError):
        build.get("no_such_model")


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("NPU_SIM_CACHE", str(tmp_path / "c"))
    assert build.cache_dir() == tmp_path / "c"
    assert build.artifact_dir().parent == tmp_path / "c"
    monkeypatch.delenv("NPU_SIM_CACHE")
    assert build.cache_dir() == Path.home() / ".cache" / "npu-sim" / "models"


@pytest.mark.parametrize(
    "name, input_name, shape, lo, hi",
    [
        ("mobilenetv2_a8w8", "input", (1, 3, 224, 224), -2.2, 2.7),
        ("ppocr_det_a8w8", "x", (1, 3, 320, 320), -2.2, 2.7),
        ("ppocr_rec_a16w8", "x", (1, 3, 48, 320), -1.0, 1.0),
        ("ppocr_cls_a8w8u", "x", (1, 3, 48, 192), -1.0, 1.0),
    ],
)
def test_sample_inputs(name, input_name, shape, lo, hi):
    feeds = build.sample_inputs(name, 3)
    again = build.sample_inputs(name, 3)
    assert len(feeds) == 3
    for f, g in zip(feeds, again):
        assert list(f) == [input_name]
        x = f[input_name]
        assert x.dtype == np.float32 and x.shape == shape
        assert np.isfinite(x).all() and x.min() >= lo - 1e-3 and x.max() <= hi + 1e-3
        assert x.std() > 0.05
        np.testing.assert_array_equal(x, g[input_name])  # deterministic
    assert not np.array_equal(feeds[0][input_name], feeds[1][input_name])
    # held-out views (start past the calibration set) differ from calibration ones
    held_out = build.sample_inputs(name, 1, start=build.CALIBRATION_COUNT)[0][input_name]
    assert held_out.shape == shape
    assert not any(np.array_equal(held_out, f[input_name]) for f in build.sample_inputs(name, build.CALIBRATION_COUNT))


# ---------------------------------------------------------------------------
# MobileNetV2 (no network)


@pytest.fixture(scope="module")
def mnv2_a8w8() -> Path:
    return build.get("mobilenetv2_a8w8")


def test_mobilenetv2_a8w8_structure(mnv2_a8w8):
    assert mnv2_a8w8.is_file() and build.get("mobilenetv2_a8w8") == mnv2_a8w8  # idempotent
    model = onnx.load(str(mnv2_a8w8))
    onnx.checker.check_model(model)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QuantizeLinear") > 50 and ops.count("DequantizeLinear") > 100
    assert ops.count("Conv") == 52 and ops.count("Add") == 10 and "Gemm" in ops
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)
    assert _q_zero_point_types(model) == {onnx.TensorProto.INT8}
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["logits"]
    assert _non_static(model) == []
    meta = _metadata(model)
    q = json.loads(meta["npu_sim.quantization"])
    assert q["activation_type"] == "QInt8" and q["weight_type"] == "QInt8" and q["per_channel"] is True
    assert meta["npu_sim.onnxruntime_version"] == ort.__version__


def test_mobilenetv2_a8w8_runs(mnv2_a8w8):
    quant = _session(mnv2_a8w8)
    flt = _session(build.get("mobilenetv2_float"))
    q_out, f_out = [], []
    for feed in build.sample_inputs("mobilenetv2_a8w8", 4):
        (q,) = quant.run(None, feed)
        (f,) = flt.run(None, feed)
        assert q.shape == f.shape == (1, 1000)
        q_out.append(q.ravel())
        f_out.append(f.ravel())
    q_out, f_out = np.array(q_out), np.array(f_out)
    assert np.isfinite(q_out).all() and np.isfinite(f_out).all()
    assert 0.1 < f_out.std() < 100  # float model not degenerate
    assert f_out.std(axis=0).mean() > 0.1 * f_out.std()  # ... and depends on its input
    assert np.corrcoef(q_out.ravel(), f_out.ravel())[0, 1] > 0.8  # quantization is sane


def test_mobilenetv2_float_static_and_sane():
    model = onnx.load(str(build.get("mobilenetv2_float")))
    assert model.opset_import[0].version == build.MOBILENETV2_OPSET
    assert _non_static(model) == []
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == 52 and ops.count("Clip") == 35 and ops.count("Add") == 10
    assert "BatchNormalization" not in ops
    check = json.loads(_metadata(model)["npu_sim.activation_check"])
    assert check["max_abs_activation"] < 100


# ---------------------------------------------------------------------------
# PP-OCR (first run downloads the rapidocr wheel)


@network
def test_ppocr_det_a8w8_runs():
    path = _ppocr("ppocr_det_a8w8")
    model = onnx.load(str(path))
    ops = [n.op_type for n in model.graph.node]
    assert QDQ <= set(ops)
    assert _non_static(model) == []
    assert json.loads(_metadata(model)["npu_sim.quantization"])["activation_type"] == "QInt8"
    quant, flt = _session(path), _session(build.get("ppocr_det_float"))
    page = build.PHOTOS.index("page")  # the view with the most text
    (feed,) = build.sample_inputs("ppocr_det_a8w8", 1, start=page)
    (q,) = quant.run(None, feed)
    (f,) = flt.run(None, feed)
    assert q.shape == f.shape == (1, 1, 320, 320)
    qm, fm = q > 0.3, f > 0.3
    assert fm.mean() > 0.05  # the float model finds the text of the page
    assert (qm & fm).sum() / (qm | fm).sum() > 0.8  # and so does the quantized one


@network
def test_ppocr_cls_16bit_qdq_domains():
    plain = onnx.load(str(_ppocr("ppocr_cls_a16w8")))
    contrib = onnx.load(str(_ppocr("ppocr_cls_a16w8_contrib")))

    def qdq_domains(m):
        return {n.domain for n in m.graph.node if n.op_type in QDQ}

    def opset(m, domain):
        return {(o.domain or ""): o.version for o in m.opset_import}.get(domain)

    assert qdq_domains(plain) == {""} and opset(plain, "") >= 21
    assert qdq_domains(contrib) == {"com.microsoft"} and opset(contrib, "com.microsoft") == 1
    assert opset(contrib, "") == 13  # kept the float model's opset, as onnxruntime 1.18 did
    for m in (plain, contrib):
        assert _q_zero_point_types(m) == {onnx.TensorProto.INT16}
    feeds = build.sample_inputs("ppocr_cls_a16w8", 2)
    a, b = _session(_ppocr("ppocr_cls_a16w8")), _session(_ppocr("ppocr_cls_a16w8_contrib"))
    for feed in feeds:
        np.testing.assert_array_equal(a.run(None, feed)[0], b.run(None, feed)[0])


@network
def test_ppocr_float_models_static():
    for fam, shape in (("ppocr_det", (1, 3, 320, 320)), ("ppocr_rec", (1, 3, 48, 320)), ("ppocr_cls", (1, 3, 48, 192))):
        model = onnx.load(str(_ppocr(f"{fam}_float")))
        (inp,) = model.graph.input
        assert tuple(d.dim_value for d in inp.type.tensor_type.shape.dim) == shape
        assert {o.domain or "": o.version for o in model.opset_import}[""] >= 13
        assert _non_static(model) == []
        assert "onnx.quant.pre_process" in _metadata(model)


if os.environ.get("NPU_SIM_TEST_ALL_MODELS"):

    @network
    @pytest.mark.parametrize("name", build.NAMES)
    def test_every_model_runs(name):
        path = _ppocr(name) if name.startswith("ppocr") else build.get(name)
        sess = _session(path)
        for feed in build.sample_inputs(name, 2):
            for out in sess.run(None, feed):
                assert np.isfinite(out).all()
