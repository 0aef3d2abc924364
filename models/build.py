"""Build the real test models of npu-sim, reproducibly, into a local cache.

The models are never committed: they are built on demand into a cache
directory, ``$NPU_SIM_CACHE`` if set, else ``~/.cache/npu-sim/models``.
Only the first build of a PP-OCR model needs the network (one ``pip download``
of the ``rapidocr-onnxruntime==1.4.4`` wheel, which ships the PP-OCR ONNX
models); everything after that is offline.

API
---
``get(name) -> Path``
    Build on demand (idempotent, cached, atomic temp-file + rename writes under
    a per-artifact file lock, so concurrent pytest workers are safe) and return
    the path of the ``.onnx`` file.
``sample_inputs(name, count=4, start=0) -> list[dict[str, np.ndarray]]``
    Real, deterministic, preprocessed float32 feeds made from scikit-image's
    bundled photos.  Views ``0 .. CALIBRATION_COUNT-1`` are exactly the
    calibration set of the quantized models; ``start=CALIBRATION_COUNT`` gives
    held-out inputs the quantizer never saw.
``NAMES``
    Every buildable name.

CLI: ``python -m models.build [NAME ...]`` builds those (default: all) and
prints path, size, build time and op-type histograms.

Recipes
-------
``ppocr_{det,rec,cls}_float``
    The PP-OCR models of the rapidocr-onnxruntime 1.4.4 wheel (det = PP-OCRv4
    det, rec = PP-OCRv4 rec, cls = PP-OCR mobile v2.0 cls).  Input shape fixed
    (det 1x3x320x320, rec 1x3x48x320, cls 1x3x48x192), dynamic output dims
    cleared, upgraded to opset 13 with ``onnx.version_converter``, then
    ``onnxruntime.quantization.quant_pre_process(skip_symbolic_shape=True)``.
    Stale ``value_info`` entries (for tensors no node produces any more) and
    the unused opset imports that the onnxruntime optimizer adds are dropped;
    every tensor has a static shape after ONNX shape inference (checked).
``ppocr_*_{a8w8,a8w8u,a16w8}``, ``ppocr_cls_a16w8_contrib``
    ``quantize_static`` QDQ, per-channel, MinMax calibration on
    ``CALIBRATION_COUNT`` preprocessed photos; activations QInt8 / QUInt8 /
    QInt16, weights QInt8.  16-bit models are bumped to opset 21 by the
    quantizer (native 16-bit Q/DQ).  ``_contrib`` uses
    ``UseQDQContribOps=True`` and keeps the float model's opset (13), i.e.
    ``com.microsoft`` Q/DQ in an opset-13 model, as onnxruntime 1.18 wrote them.
``ppocr_{cls,rec}_a16w16_noadjust``
    onnxruntime issue #21000: A16W16 per channel with
    ``QDQDisableWeightAdjustForInt32Bias=True`` (what 1.18 did): channels with
    tiny weight scales get int32 biases clipped at INT32_MIN/INT32_MAX.
    Measured (onnxruntime, held-out views 16-19, cosine vs the float model):
    cls 0.98/0.99/0.34/0.97, rec 0.58/0.89/0.57/0.99.
``mobilenetv2_{float,a8w8,a8w8u}``
    A MobileNetV2-1.0 (torchvision architecture), 224x224, opset 17, built
    with ``onnx.helper`` from seeded random weights (BN folded), then the same
    ``quant_pre_process`` and quantization.

Artifacts go to ``<cache>/r<RECIPE_VERSION>-ort<onnxruntime version>/<name>.onnx``
(the onnxruntime optimizer and quantizer shape them, so another onnxruntime
gets its own directory); the wheel to ``<cache>/wheels``.  Builds are
byte-for-byte reproducible on one machine.  Note that the det input follows
PaddleOCR's ImageNet mean/std, while rapidocr's own config uses 0.5/0.5.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import hashlib
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile

import numpy as np

__all__ = ["NAMES", "get", "sample_inputs", "cache_dir", "artifact_dir", "DownloadError"]

# Bump when any recipe changes: artifacts live in a directory named after it
# (and after the onnxruntime version, whose optimizer and quantizer shape them).
RECIPE_VERSION = 1

RAPIDOCR_REQUIREMENT = "rapidocr-onnxruntime==1.4.4"
RAPIDOCR_WHEEL = "rapidocr_onnxruntime-1.4.4-py3-none-any.whl"
RAPIDOCR_WHEEL_SHA256 = "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"

# family -> (zip member, input shape, description)
_PPOCR = {
    "ppocr_det": (
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        (1, 3, 320, 320),
        "PP-OCRv4 text detection (DB)",
    ),
    "ppocr_rec": (
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        (1, 3, 48, 320),
        "PP-OCRv4 text recognition (SVTR-LCNet, CTC)",
    ),
    "ppocr_cls": (
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        (1, 3, 48, 192),
        "PP-OCR mobile v2.0 text direction classifier",
    ),
}
PPOCR_MIN_OPSET = 13

MOBILENETV2_SEED = 20240611
MOBILENETV2_OPSET = 17

# variant -> (activation type, weight type, extra_options, keep the float opset)
_QUANT = {
    "a8w8": ("QInt8", "QInt8", {}, False),
    "a8w8u": ("QUInt8", "QInt8", {}, False),
    "a16w8": ("QInt16", "QInt8", {}, False),
    "a16w8_contrib": ("QInt16", "QInt8", {"UseQDQContribOps": True}, True),
    # onnxruntime issue #21000 as 1.18 wrote it: A16W16 per channel without the weight-scale fix that keeps
    # int32 biases in range (the quantizer then clips them at INT32_MIN/INT32_MAX)
    "a16w16_noadjust": ("QInt16", "QInt16", {"QDQDisableWeightAdjustForInt32Bias": True}, False),
}

NAMES = [
    "ppocr_det_float",
    "ppocr_rec_float",
    "ppocr_cls_float",
    "ppocr_det_a8w8",
    "ppocr_rec_a8w8",
    "ppocr_cls_a8w8",
    "ppocr_det_a8w8u",
    "ppocr_rec_a8w8u",
    "ppocr_cls_a8w8u",
    "ppocr_det_a16w8",
    "ppocr_rec_a16w8",
    "ppocr_cls_a16w8",
    "ppocr_cls_a16w8_contrib",
    "ppocr_cls_a16w16_noadjust",
    "ppocr_rec_a16w16_noadjust",
    "mobilenetv2_float",
    "mobilenetv2_a8w8",
    "mobilenetv2_a8w8u",
]

_FAMILIES = ("ppocr_det", "ppocr_rec", "ppocr_cls", "mobilenetv2")

CALIBRATION_COUNT = 16

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DownloadError(RuntimeError):
    """The rapidocr wheel is not cached and could not be downloaded."""


def _log(msg: str) -> None:
    print(f"[models.build] {msg}", file=sys.stderr, flush=True)


def _split(name: str) -> tuple[str, str]:
    if name not in NAMES:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(NAMES)}")
    for fam in _FAMILIES:
        if name.startswith(fam + "_"):
            return fam, name[len(fam) + 1 :]
    raise AssertionError(name)


# ---------------------------------------------------------------------------
# Cache directory, locking, atomic writes


def cache_dir() -> pathlib.Path:
    env = os.environ.get("NPU_SIM_CACHE")
    return pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "npu-sim" / "models"


def artifact_dir() -> pathlib.Path:
    import onnxruntime

    return cache_dir() / f"r{RECIPE_VERSION}-ort{onnxruntime.__version__}"


@contextlib.contextmanager
def _locked(lock_path: pathlib.Path):
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: atomic renames alone keep it safe
        yield
        return
    with open(lock_path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _tmp_sibling(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def _save_atomic(model, path: pathlib.Path) -> None:
    import onnx

    tmp = _tmp_sibling(path)
    try:
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Public API


def get(name: str) -> pathlib.Path:
    """Return the path of model ``name``, building it (and what it needs) if absent."""
    family, variant = _split(name)
    out = artifact_dir() / f"{name}.onnx"
    if out.exists():
        return out
    with _locked(out.with_name(f".{name}.lock")):
        if out.exists():  # another process built it while we waited
            return out
        t0 = time.perf_counter()
        _log(f"building {name} ...")
        if variant == "float":
            model = _build_ppocr_float(family) if family in _PPOCR else _build_mobilenetv2_float()
        else:
            model = _build_quantized(family, variant)
        _save_atomic(model, out)
        _log(f"built {name} in {time.perf_counter() - t0:.1f} s -> {out}")
    return out


def sample_inputs(name: str, count: int = 4, start: int = 0) -> list[dict[str, np.ndarray]]:
    """Deterministic preprocessed float32 feeds for model ``name``.

    View ``i`` is the same for every variant of a family; views
    ``0 .. CALIBRATION_COUNT-1`` are the calibration set.
    """
    family, _ = _split(name)
    input_name = "input" if family == "mobilenetv2" else "x"
    return [{input_name: _view(family, i)} for i in range(start, start + count)]


# ---------------------------------------------------------------------------
# Inputs from scikit-image's bundled photos

# All of these ship inside scikit-image (no download).  Order matters: it is the
# order of the views, hence of the calibration set.
PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "camera",
    "page",
    "text",
    "coins",
    "immunohistochemistry",
    "hubble_deep_field",
    "retina",
    "colorwheel",
    "clock",
    "moon",
    "stereo_motorcycle",
    "brick",
    "logo",
    "gravel",
    "grass",
)

# Text-line crops (y0, y1, x0, x1) of skimage.data.page(), cut to at most about
# the 320/48 aspect ratio of the rec input (PP-OCRv4 rec reads them all).
_TEXT_LINES = (
    (10, 39, 0, 300),  # "Region-based segmentation"
    (46, 65, 0, 128),  # "Let us first deterr"
    (64, 83, 120, 248),  # "emarkers are pixe"
    (82, 101, 250, 384),  # "background.Here,"
    (99, 119, 0, 128),  # "the markers are fo"
    (116, 137, 0, 128),  # "histogram of grey"
    (168, 191, 120, 248),  # "zeros_like(coins)"
    (46, 65, 250, 384),  # "the coins and the"
    (64, 83, 0, 128),  # "background.These"
    (82, 101, 0, 128),  # "unambiguously as"
    (99, 119, 120, 248),  # "ound atthe twoe"
    (64, 83, 250, 384),  # "Isthat we can label"
    (82, 101, 120, 248),  # "seither object or"
    (99, 119, 250, 384),  # "xtremepartsof the"
    (46, 65, 120, 248),  # "rmine markers of"
    (168, 191, 0, 128),  # ">>> markers = np"
)


@functools.lru_cache(maxsize=None)
def _photo(name: str) -> np.ndarray:
    """An skimage.data photo as HxWx3 uint8 RGB (gray replicated, alpha over white)."""
    import skimage.data

    img = getattr(skimage.data, name)()
    if isinstance(img, tuple):  # stereo_motorcycle -> (left, right, disparity)
        img = img[0]
    img = np.asarray(img)
    if img.dtype == bool:
        img = img.astype(np.uint8) * 255
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    if img.shape[2] == 4:
        alpha = img[:, :, 3:4].astype(np.float32) / 255.0
        img = np.round(img[:, :, :3] * alpha + 255.0 * (1.0 - alpha)).astype(np.uint8)
    return np.ascontiguousarray(img[:, :, :3], dtype=np.uint8)


def _resize(img: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(img).resize((width, height), Image.BILINEAR))


def _rng(family: str, i: int) -> np.random.Generator:
    seed = int.from_bytes(hashlib.sha256(f"{family}:{i}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed)


def _view(family: str, i: int) -> np.ndarray:
    if family == "ppocr_rec":
        return _text_view(family, i, 48, 320)
    if family == "ppocr_cls":
        return _text_view(family, i, 48, 192)
    size = 320 if family == "ppocr_det" else 224
    return _photo_view(family, i, size)


def _photo_view(family: str, i: int, size: int) -> np.ndarray:
    """Whole photo (first cycle through PHOTOS) or a seeded crop, resized, ImageNet-normalized, NCHW."""
    img = _photo(PHOTOS[i % len(PHOTOS)])
    if i >= len(PHOTOS):
        rng = _rng(family, i)
        h, w = img.shape[:2]
        ch, cw = int(h * rng.uniform(0.5, 0.9)), int(w * rng.uniform(0.5, 0.9))
        y0, x0 = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        img = img[y0 : y0 + ch, x0 : x0 + cw]
    x = _resize(img, size, size).astype(np.float32) / 255.0
    x = (x - np.asarray(IMAGENET_MEAN, np.float32)) / np.asarray(IMAGENET_STD, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def _text_view(family: str, i: int, img_h: int, img_w: int) -> np.ndarray:
    """PaddleOCR's rec/cls preprocessing of a text-like crop.

    Even views are real text lines of skimage's ``page`` (for cls, every other
    one upside down, the case cls exists for), odd views are seeded strips of
    the photos.  As PaddleOCR's ``resize_norm_img``: keep the
    aspect ratio at height ``img_h`` (width capped at ``img_w``), scale to
    [-1, 1] with (x/255 - 0.5)/0.5, zero-pad on the right to ``img_w``.
    """
    if i % 2 == 0:
        y0, y1, x0, x1 = _TEXT_LINES[(i // 2) % len(_TEXT_LINES)]
        crop = _photo("page")[y0:y1, x0:x1]
        if family == "ppocr_cls" and (i // 2) % 2 == 1:
            crop = crop[::-1, ::-1]
    else:
        img = _photo(PHOTOS[(i // 2) % len(PHOTOS)])
        rng = _rng(family, i)
        h, w = img.shape[:2]
        ch = int(rng.integers(max(8, h // 12), max(9, h // 4)))
        cw = min(w, int(ch * rng.uniform(2.0, 10.0)))
        y0, x0 = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        crop = img[y0 : y0 + ch, x0 : x0 + cw]
    h, w = crop.shape[:2]
    resized_w = min(img_w, int(math.ceil(img_h * w / h)))
    x = _resize(crop, img_h, resized_w).astype(np.float32) / 255.0
    x = (x - 0.5) / 0.5
    out = np.zeros((1, 3, img_h, img_w), np.float32)
    out[0, :, :, :resized_w] = x.transpose(2, 0, 1)
    return out


def _view_descriptions(family: str, count: int) -> list[str]:
    out = []
    for i in range(count):
        if family in ("ppocr_rec", "ppocr_cls"):
            if i % 2 == 0:
                y0, y1, x0, x1 = _TEXT_LINES[(i // 2) % len(_TEXT_LINES)]
                flip = ":rot180" if family == "ppocr_cls" and (i // 2) % 2 == 1 else ""
                out.append(f"page[{y0}:{y1},{x0}:{x1}]{flip}")
            else:
                out.append(f"{PHOTOS[(i // 2) % len(PHOTOS)]}:strip{i}")
        else:
            out.append(PHOTOS[i % len(PHOTOS)] + ("" if i < len(PHOTOS) else f":crop{i}"))
    return out


def _input_preprocessing(family: str) -> str:
    if family == "ppocr_det":
        return "RGB, resize 320x320 (bilinear), (x/255-mean)/std, ImageNet mean/std, NCHW"
    if family == "ppocr_rec":
        return (
            "RGB text crop, resize to height 48 keeping aspect (width<=320), (x/255-0.5)/0.5, "
            "zero-pad right to 320, NCHW"
        )
    if family == "ppocr_cls":
        return (
            "RGB text crop, resize to height 48 keeping aspect (width<=192), (x/255-0.5)/0.5, "
            "zero-pad right to 192, NCHW"
        )
    return "RGB, resize 224x224 (bilinear), (x/255-mean)/std, ImageNet mean/std, NCHW"


# ---------------------------------------------------------------------------
# Metadata and graph hygiene


def _set_metadata(model, props: dict[str, object]) -> None:
    import onnx
    import onnxruntime

    props = dict(props)
    props.setdefault("npu_sim.onnxruntime_version", onnxruntime.__version__)
    props.setdefault("npu_sim.onnx_version", onnx.__version__)
    props.setdefault("npu_sim.numpy_version", np.__version__)
    props["npu_sim.recipe_version"] = RECIPE_VERSION
    keep = [p for p in model.metadata_props if p.key not in props]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for k, v in props.items():
        entry = model.metadata_props.add()
        entry.key = k
        entry.value = v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def _tidy(model) -> None:
    """Drop value_info of tensors no node produces, and opset imports no node uses."""
    produced = {o for n in model.graph.node for o in n.output}
    keep = [vi for vi in model.graph.value_info if vi.name in produced]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)
    used = {n.domain or "" for n in model.graph.node} | {""}
    keep_ops = [o for o in model.opset_import if (o.domain or "") in used or o.domain == "ai.onnx"]
    del model.opset_import[:]
    model.opset_import.extend(keep_ops)


def non_static_tensors(model) -> list[str]:
    """Names of tensors whose shape is not fully static after ONNX shape inference."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    known = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
    known.update({init.name: None for init in g.initializer})
    bad = []
    for n in g.node:
        for o in n.output:
            if not o:
                continue
            vi = known.get(o, False)
            if vi is None:
                continue
            if vi is False or not vi.type.tensor_type.HasField("shape"):
                bad.append(o)
            elif any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
                bad.append(o)
    for vi in list(g.input) + list(g.output):
        if any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
            bad.append(vi.name)
    return bad


def _opset(model, domain: str = "") -> int:
    for o in model.opset_import:
        if (o.domain or "") == domain or (domain == "" and o.domain == "ai.onnx"):
            return o.version
    return 0


def _pre_process(model):
    """onnxruntime's quant_pre_process (skip_symbolic_shape=True) on a ModelProto."""
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="npu-sim-pre.") as td:
        src, dst = pathlib.Path(td) / "in.onnx", pathlib.Path(td) / "pre.onnx"
        onnx.save(model, str(src))
        quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
        out = onnx.load(str(dst))
    _tidy(out)
    return out


# ---------------------------------------------------------------------------
# PP-OCR float models


def _wheel() -> pathlib.Path:
    wheels = cache_dir() / "wheels"
    whl = wheels / RAPIDOCR_WHEEL
    if whl.exists():
        return whl
    with _locked(wheels / ".rapidocr.lock"):
        if whl.exists():
            return whl
        _log(f"downloading {RAPIDOCR_REQUIREMENT} with pip ...")
        with tempfile.TemporaryDirectory(dir=wheels, prefix=".dl.") as td:
            cmd = [
                sys.executable, "-m", "pip", "download", RAPIDOCR_REQUIREMENT,
                "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "--no-input",
                "-d", td,
            ]  # fmt: skip
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise DownloadError(f"pip download {RAPIDOCR_REQUIREMENT} failed: {e}") from e
            got = pathlib.Path(td) / RAPIDOCR_WHEEL
            if proc.returncode != 0 or not got.exists():
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
                raise DownloadError(f"pip download {RAPIDOCR_REQUIREMENT} failed: " + " | ".join(tail))
            digest = _sha256(got)
            if digest != RAPIDOCR_WHEEL_SHA256:
                raise RuntimeError(f"{RAPIDOCR_WHEEL}: sha256 {digest}, expected {RAPIDOCR_WHEEL_SHA256}")
            os.replace(got, whl)
    return whl


def _fix_io_shapes(model, input_shape) -> None:
    (inp,) = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    dims = inp.type.tensor_type.shape.dim
    if len(dims) != len(input_shape):
        raise ValueError(f"input {inp.name} has rank {len(dims)}, expected {len(input_shape)}")
    for d, v in zip(dims, input_shape):
        if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != v:
            raise ValueError(f"input {inp.name}: static dim {d.dim_value} != {v}")
        d.Clear()
        d.dim_value = v
    # Outputs: keep the rank, forget the (dynamic) dims; shape inference refills them.
    for o in model.graph.output:
        for d in o.type.tensor_type.shape.dim:
            d.Clear()
    del model.graph.value_info[:]


def _build_ppocr_float(family: str):
    import onnx
    from onnx import version_converter

    member, shape, desc = _PPOCR[family]
    whl = _wheel()
    with zipfile.ZipFile(whl) as z:
        data = z.read(member)
    model = onnx.load_from_string(data)
    src_opset = _opset(model)
    _fix_io_shapes(model, shape)
    if src_opset < PPOCR_MIN_OPSET:
        model = version_converter.convert_version(model, PPOCR_MIN_OPSET)
    onnx.checker.check_model(model)
    model = _pre_process(model)
    bad = non_static_tensors(model)
    if bad:
        raise RuntimeError(f"{family}: non-static shapes after preprocessing: {bad[:10]}")
    onnx.checker.check_model(model)
    _set_metadata(
        model,
        {
            "npu_sim.name": f"{family}_float",
            "npu_sim.source": (
                f"{RAPIDOCR_REQUIREMENT} wheel ({RAPIDOCR_WHEEL}, sha256 {RAPIDOCR_WHEEL_SHA256}): {member}"
            ),
            "npu_sim.source_sha256": hashlib.sha256(data).hexdigest(),
            "npu_sim.description": desc,
            "npu_sim.preprocess": (
                f"input fixed to {'x'.join(map(str, shape))}, output dims cleared, value_info cleared; "
                f"opset {src_opset} -> {_opset(model)} (onnx.version_converter"
                f"{'' if src_opset < PPOCR_MIN_OPSET else ', not needed'}); "
                "onnxruntime.quantization.quant_pre_process(skip_symbolic_shape=True); "
                "dangling value_info and unused opset imports dropped"
            ),
            "npu_sim.input_preprocessing": _input_preprocessing(family),
        },
    )
    return model


# ---------------------------------------------------------------------------
# MobileNetV2 (torchvision architecture), seeded random weights, BN folded

# (expansion t, output channels c, repeats n, first stride s), as torchvision.
_MNV2_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _mobilenetv2_graph(rng: np.random.Generator):
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype=np.float32), name))
        return name

    const("relu6.min", np.array(0.0, np.float32))
    const("relu6.max", np.array(6.0, np.float32))

    def conv_bn(x, prefix, cin, cout, k, stride, groups, relu6):
        """Conv + folded BN (+ ReLU6).

        He init (gain 2 before ReLU6, 1 for the linear projections), each filter
        made zero-mean over its fan-in (else the positive mean of ReLU6 outputs
        swamps the input-dependent signal and every image gets the same logits),
        times a per-channel log-normal factor standing in for the spread of
        gamma/sqrt(var) of a trained BN folded into the conv; small random biases.
        """
        fan_in = (cin // groups) * k * k
        w = rng.standard_normal((cout, cin // groups, k, k)) * math.sqrt((2.0 if relu6 else 1.0) / fan_in)
        w -= w.mean(axis=(1, 2, 3), keepdims=True)
        w *= rng.lognormal(0.0, 0.3, cout)[:, None, None, None]
        b = rng.normal(0.0, 0.05, cout)
        y = f"{prefix}.out"
        nodes.append(
            helper.make_node(
                "Conv",
                [x, const(f"{prefix}.weight", w), const(f"{prefix}.bias", b)],
                [y],
                name=f"{prefix}.conv",
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[k // 2] * 4,
                group=groups,
                dilations=[1, 1],
            )
        )
        if relu6:
            z = f"{prefix}.relu6"
            nodes.append(helper.make_node("Clip", [y, "relu6.min", "relu6.max"], [z], name=f"{prefix}.clip"))
            y = z
        return y

    x = conv_bn("input", "features.0", 3, 32, 3, 2, 1, True)
    cin, idx = 32, 1
    for t, c, n, s in _MNV2_SETTINGS:
        for r in range(n):
            stride = s if r == 0 else 1
            hidden = cin * t
            p = f"features.{idx}"
            h = x
            if t != 1:
                h = conv_bn(h, f"{p}.expand", cin, hidden, 1, 1, 1, True)
            h = conv_bn(h, f"{p}.dw", hidden, hidden, 3, stride, hidden, True)
            residual = stride == 1 and cin == c
            h = conv_bn(h, f"{p}.project", hidden, c, 1, 1, 1, False)
            if residual:
                y = f"{p}.add"
                nodes.append(helper.make_node("Add", [x, h], [y], name=f"{p}.add"))
                h = y
            x, cin, idx = h, c, idx + 1
    x = conv_bn(x, "features.18", cin, 1280, 1, 1, 1, True)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="avgpool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
    wfc = rng.standard_normal((1000, 1280)) * math.sqrt(9.0 / 1280)  # logits std ~1
    wfc -= wfc.mean(axis=1, keepdims=True)
    bfc = rng.normal(0.0, 0.1, 1000)
    nodes.append(
        helper.make_node(
            "Gemm",
            ["flat", const("classifier.weight", wfc), const("classifier.bias", bfc)],
            ["logits"],
            name="classifier",
            transB=1,
        )
    )
    graph = helper.make_graph(
        nodes,
        "mobilenetv2",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", MOBILENETV2_OPSET)], producer_name="npu-sim models.build"
    )
    model.ir_version = 8
    return model


def _activation_stats(model, feeds) -> dict[str, tuple[float, float]]:
    """(max |x|, std) of every float node output over ``feeds`` (float model only)."""
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.add().name = o
                have.add(o)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    acc: dict[str, list[np.ndarray]] = collections.defaultdict(list)
    for feed in feeds:
        for k, v in zip(names, sess.run(names, feed)):
            acc[k].append(np.asarray(v, np.float64).ravel())
    return {k: (float(np.abs(np.concatenate(v)).max()), float(np.concatenate(v).std())) for k, v in acc.items()}


def _build_mobilenetv2_float():
    import onnx

    model = _mobilenetv2_graph(np.random.default_rng(MOBILENETV2_SEED))
    onnx.checker.check_model(model, full_check=True)
    model = _pre_process(model)
    bad = non_static_tensors(model)
    if bad:
        raise RuntimeError(f"mobilenetv2: non-static shapes: {bad[:10]}")
    # Sanity: finite, not degenerate, no exploding intermediates, depends on the input.
    feeds = sample_inputs("mobilenetv2_float", 8)
    stats = _activation_stats(model, feeds)
    worst = max(mx for mx, _ in stats.values())
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = np.concatenate([sess.run(["logits"], f)[0] for f in feeds])
    check = {
        "max_abs_activation": round(worst, 4),
        "logits_std": round(float(logits.std()), 4),
        "logits_std_across_inputs": round(float(logits.std(axis=0).mean()), 4),
    }
    if not (
        np.isfinite(logits).all()
        and worst < 100.0
        and 0.1 <= check["logits_std"] <= 100.0
        and check["logits_std_across_inputs"] >= 0.1 * check["logits_std"]
    ):
        raise RuntimeError(f"mobilenetv2: degenerate float model: {check}")
    _set_metadata(
        model,
        {
            "npu_sim.name": "mobilenetv2_float",
            "npu_sim.source": (
                "synthetic MobileNetV2-1.0 (torchvision architecture) built with onnx.helper by models/build.py; "
                f"weights numpy default_rng({MOBILENETV2_SEED}): He init, filters zero-mean over fan-in, "
                "per-channel log-normal(0, 0.3) gains standing in for folded BN, biases N(0, 0.05)"
            ),
            "npu_sim.description": "MobileNetV2-1.0 224x224, 1000 classes, random weights",
            "npu_sim.preprocess": "onnxruntime.quantization.quant_pre_process(skip_symbolic_shape=True)",
            "npu_sim.input_preprocessing": _input_preprocessing("mobilenetv2"),
            "npu_sim.activation_check": check,
        },
    )
    return model


# ---------------------------------------------------------------------------
# Quantization


@contextlib.contextmanager
def _no_opset_bump():
    """Keep the model's opset for 16-bit QDQ (newer onnxruntime bumps it to 21).

    onnxruntime 1.18 left the opset alone and wrote 16-bit Q/DQ in the
    com.microsoft domain; ``_contrib`` models reproduce that layout.  (Patches
    a module global of onnxruntime for the duration: not thread-safe.)
    """
    import importlib

    # (``from onnxruntime.quantization import quantize`` would give the function.)
    qmod = importlib.import_module("onnxruntime.quantization.quantize")
    orig = getattr(qmod, "update_opset_version", None)
    if orig is None:
        yield
        return
    qmod.update_opset_version = lambda model, *args, **kwargs: model
    try:
        yield
    finally:
        qmod.update_opset_version = orig


def _build_quantized(family: str, variant: str):
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    act, wt, extra, keep_opset = _QUANT[variant]
    float_path = get(f"{family}_float")
    feeds = sample_inputs(f"{family}_float", CALIBRATION_COUNT)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    out_dir = artifact_dir()
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".q.") as td:
        tmp_out = pathlib.Path(td) / "q.onnx"
        with _no_opset_bump() if keep_opset else contextlib.nullcontext():
            quantize_static(
                str(float_path),
                str(tmp_out),
                Reader(),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=getattr(QuantType, act),
                weight_type=getattr(QuantType, wt),
                calibrate_method=CalibrationMethod.MinMax,
                extra_options=dict(extra),
            )
        model = onnx.load(str(tmp_out))
    _tidy(model)
    onnx.checker.check_model(model)
    _set_metadata(
        model,
        {
            "npu_sim.name": f"{family}_{variant}",
            "npu_sim.float_model": f"{family}_float (sha256 {_sha256(float_path)})",
            "npu_sim.quantization": {
                "tool": "onnxruntime.quantization.quantize_static",
                "quant_format": "QDQ",
                "per_channel": True,
                "reduce_range": False,
                "activation_type": act,
                "weight_type": wt,
                "calibrate_method": "MinMax",
                "extra_options": extra,
                "opset_bump_to_21_suppressed": keep_opset,
            },
            "npu_sim.calibration": {
                "count": CALIBRATION_COUNT,
                "views": _view_descriptions(family, CALIBRATION_COUNT),
                "preprocessing": _input_preprocessing(family),
                "note": "models.build.sample_inputs(name, 16) reproduces these feeds",
            },
        },
    )
    return model


# ---------------------------------------------------------------------------
# Reporting (CLI)

_QDQ = ("QuantizeLinear", "DequantizeLinear")


def op_histogram(model) -> collections.Counter:
    return collections.Counter(
        (n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}") for n in model.graph.node
    )


def unwrapped_ops(model) -> collections.Counter:
    """Non-Q/DQ nodes with a float activation input not from DequantizeLinear, or a float
    output that reaches something other than QuantizeLinear (incl. graph outputs)."""
    from onnx import TensorProto

    inits = {t.name for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers = collections.defaultdict(list)
    for n in model.graph.node:
        for i in n.input:
            consumers[i].append(n)
    graph_outputs = {o.name for o in model.graph.output}
    g = model.graph
    elem = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.value_info) + list(g.input) + list(g.output)}
    result = collections.Counter()
    for n in model.graph.node:
        if n.op_type in _QDQ:
            continue
        float_in = any(
            i and i not in inits and elem.get(i, TensorProto.FLOAT) == TensorProto.FLOAT
            and not (i in producer and producer[i].op_type == "DequantizeLinear")
            for i in n.input
        )
        float_out = any(
            o and elem.get(o, TensorProto.FLOAT) == TensorProto.FLOAT
            and (o in graph_outputs or any(c.op_type != "QuantizeLinear" for c in consumers[o]))
            for o in n.output
        )
        if float_in or float_out:
            tag = "in+out" if float_in and float_out else ("in" if float_in else "out")
            result[f"{n.op_type}[float {tag}]"] += 1
    return result


def _dims(value_info) -> list:
    dims = value_info.type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in dims]


def describe(path: pathlib.Path) -> str:
    import onnx

    model = onnx.load(str(path))
    hist = op_histogram(model)
    lines = [
        f"{path}  ({path.stat().st_size / 1e6:.2f} MB, sha256 {_sha256(path)[:16]})",
        "  opsets: " + ", ".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in model.opset_import),
        "  inputs: " + ", ".join(f"{i.name}{_dims(i)}" for i in model.graph.input),
        "  outputs: " + ", ".join(f"{o.name}{_dims(o)}" for o in model.graph.output),
    ]
    qdq = {k: v for k, v in hist.items() if k.split(".")[-1] in _QDQ}
    rest = {k: v for k, v in hist.items() if k not in qdq}
    lines.append("  ops: " + ", ".join(f"{k}:{v}" for k, v in sorted(rest.items(), key=lambda kv: (-kv[1], kv[0]))))
    if qdq:
        inits = {t.name: t for t in model.graph.initializer}
        zp_types = collections.Counter()
        for n in model.graph.node:
            if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] in inits:
                zp_types[onnx.helper.tensor_dtype_to_np_dtype(inits[n.input[2]].data_type).name] += 1
        lines.append(
            "  q/dq: "
            + ", ".join(f"{k}:{v}" for k, v in sorted(qdq.items()))
            + f"; Q zero-point dtypes {dict(zp_types)}"
        )
        unwrapped = unwrapped_ops(model)
        lines.append(
            "  not wrapped in Q/DQ: "
            + (", ".join(f"{k}:{v}" for k, v in sorted(unwrapped.items(), key=lambda kv: (-kv[1], kv[0]))) or "none")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m models.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"models to build (default all): {' '.join(NAMES)}")
    args = ap.parse_args(argv)
    names = args.names or NAMES
    for n in names:
        _split(n)
    t_all = time.perf_counter()
    for n in names:
        t0 = time.perf_counter()
        path = get(n)
        dt = time.perf_counter() - t0
        print(f"== {n}  [{dt:.1f} s]")
        print(describe(path), flush=True)
    print(f"total {time.perf_counter() - t_all:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
