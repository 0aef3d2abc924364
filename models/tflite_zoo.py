"""Build the TFLite zoo: real Keras-application networks -> full-integer .tflite, tf2onnx twin, LiteRT oracle, Vela.

For each network (Keras applications, ``weights=None``: seeded random weights, no download) and each precision
(``int8``; ``16x8``: TFLite's ``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``) this writes into
``--out`` (default ``~/.cache/npu-sim/tflite-zoo/``), with ``STEM = NAME_PRECISION``:

* ``STEM.tflite``       -- TFLiteConverter, full-integer quantization, integer I/O, batch 1 (static shapes),
  calibrated with 8 seeded representative images;
* ``STEM.tflite.onnx``  -- its twin: ``python -m tf2onnx.convert --tflite STEM.tflite --output STEM.tflite.onnx``
  (tf2onnx's default opset, as ``models/tflite_fixtures.py`` uses);
* ``STEM.npz``          -- the oracle: the seeded integer input (``input``) and every tensor LiteRT computes
  (``t:<TFLite tensor name>``: the graph input and every op output; constants are left out), from the builtin
  reference kernels (``BUILTIN_REF``) with ``experimental_preserve_all_tensors=True`` on a copy of the model whose
  every op output is a graph output (``models/tflite_fixtures.py``'s ``interpreter``);
* ``STEM.optimized.npz`` -- only where LiteRT's optimized kernels (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``)
  differ from the reference kernels on that input: their values of the differing tensors (``t:<name>``);
* ``STEM.vela/``        -- Vela 5.2's compile for ethos-u55-128 with ``benchmarks/vela_anchor.py``'s options
  (per-layer CSV, summary CSV, the optimised .tflite), and ``STEM.vela.txt`` its stdout;
* ``STEM.json``         -- the manifest: what was built (op histogram, sizes, tensor count, Vela's totals: cycles
  = the sum of the per-layer ``Op Cycles`` as benchmarks/vela_anchor.py reads them, ``cycles_summary`` = the
  summary CSV's ``cycles_total``, SRAM and flash bytes = KiB x 1024, CPU/NPU operator counts) and, per step, any
  failure (the step is then skipped, the message recorded).

Weights are reproducible: ``tf.keras.utils.set_random_seed`` before the build; batch normalisation gets seeded
gamma/beta and its moving statistics are set from one training-mode pass (momentum 0) over 16 seeded images, so
every layer sees normalised activations as in a trained network (the identity statistics of an untrained Keras
model make deep activations explode or vanish). Every step is skipped when its output exists (idempotent); delete
a file to rebuild it.

Runs in the Vela virtualenv (tensorflow-cpu 2.15, tf2onnx, ethos-u-vela 5.2), from the repository root:

    nice -n 10 /work/venv-vela/bin/python models/tflite_zoo.py [--only NAME ...] [--precision int8 16x8] [--out DIR]
    /work/venv-vela/bin/python models/tflite_zoo.py --list

``benchmarks/tflite_zoo.py`` (npu-sim's own venv) then measures npu-sim on the zoo.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.vela_anchor import VELA_ARGS  # noqa: E402  (the repository root is on the path only now)
from models.tflite_fixtures import full_integer, interpreter, optimized_dump  # noqa: E402

OUT = Path.home() / ".cache" / "npu-sim" / "tflite-zoo"
SEED = 11
PRECISIONS = ("int8", "16x8")
# name -> (Keras application, input size, keyword arguments, calibration range); cheapest first
NETS = {
    "mobilenet_v3_small": ("MobileNetV3Small", 128, {}, (0.0, 255.0)),
    "mobilenet_v1": ("MobileNet", 128, {}, (-1.0, 1.0)),
    "mobilenet_v2": ("MobileNetV2", 128, {}, (-1.0, 1.0)),
    "mobilenet_v3_large": ("MobileNetV3Large", 128, {}, (0.0, 255.0)),
    "efficientnet_b0": ("EfficientNetB0", 128, {}, (0.0, 255.0)),
    "densenet121": ("DenseNet121", 128, {}, (-1.0, 1.0)),
    "resnet50": ("ResNet50", 128, {}, (-1.0, 1.0)),
    "nasnet_mobile": ("NASNetMobile", 128, {}, (-1.0, 1.0)),
    # ReLU instead of hard-swish, no squeeze-excite: the MobileNetV3 that TFLite's 16x8 mode converts
    "mobilenet_v3_small_minimalistic": ("MobileNetV3Small", 128, {"minimalistic": True}, (0.0, 255.0)),
    "mobilenet_v3_large_minimalistic": ("MobileNetV3Large", 128, {"minimalistic": True}, (0.0, 255.0)),
    "inception_v3": ("InceptionV3", 128, {}, (-1.0, 1.0)),
    "resnet50_v2": ("ResNet50V2", 128, {}, (-1.0, 1.0)),  # pre-activation: batch norms not folded into a conv
    "efficientnet_v2_b0": ("EfficientNetV2B0", 128, {}, (0.0, 255.0)),
    "xception": ("Xception", 128, {}, (-1.0, 1.0)),
}


def images(name: str, count: int, seed: int) -> np.ndarray:
    _, size, _, (lo, hi) = NETS[name]
    return np.random.default_rng(seed).uniform(lo, hi, (count, size, size, 3)).astype(np.float32)


def keras_model(name: str):
    """The network with seeded weights and data-set batch-norm statistics, batch 1, input named ``input``."""
    import tensorflow as tf
    app, size, kwargs, _ = NETS[name]
    tf.keras.utils.set_random_seed(SEED)
    free = getattr(tf.keras.applications, app)(input_shape=(size, size, 3), weights=None, **kwargs)
    rng = np.random.default_rng(SEED)
    bns = [layer for layer in free.layers if isinstance(layer, tf.keras.layers.BatchNormalization)]
    for bn in bns:
        gamma, beta = bn.gamma, bn.beta
        if gamma is not None:
            gamma.assign(rng.uniform(0.5, 1.5, gamma.shape).astype(np.float32))
        if beta is not None:
            beta.assign(rng.uniform(-0.3, 0.3, beta.shape).astype(np.float32))
        bn.momentum = 0.0
    free(images(name, 16, SEED + 2), training=True)  # moving statistics := this batch's statistics
    fixed = getattr(tf.keras.applications, app)(
        input_tensor=tf.keras.Input(shape=(size, size, 3), batch_size=1, name="input"), weights=None, **kwargs)
    fixed.set_weights(free.get_weights())
    return fixed


def to_tflite(model, name: str, precision: str) -> bytes:
    return full_integer(model, [d[None] for d in images(name, 8, SEED + 1)], precision)


def op_histogram(tflite_path: Path) -> dict[str, int]:
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils as fb
    model = fb.convert_bytearray_to_object(bytearray(tflite_path.read_bytes()))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    return dict(Counter(names.get(codes[op.opcodeIndex], str(codes[op.opcodeIndex]))
                        for sg in model.subgraphs for op in sg.operators))


def oracle(tflite_path: Path) -> dict[str, np.ndarray]:
    """The seeded integer input and every tensor LiteRT's reference kernels compute (input and op outputs)."""
    it = interpreter(tflite_path)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    info = np.iinfo(inp["dtype"])
    x = np.random.default_rng(SEED + 3).integers(info.min, info.max + 1, size=inp["shape"]).astype(inp["dtype"])
    it.set_tensor(inp["index"], x)
    it.invoke()
    names = {d["index"]: d["name"] for d in it.get_tensor_details()}
    out = {"input": x, "t:" + names[inp["index"]]: np.array(x)}
    for d in it.get_output_details():  # every op output (every_tensor_an_output)
        out["t:" + names[d["index"]]] = np.array(it.get_tensor(d["index"]))
    return out


def write_optimized(npz: Path, tfl: Path, target: Path, manifest: dict) -> None:
    """Where LiteRT's optimized kernels differ from the reference kernels on the oracle's input: their tensors
    into ``target`` (``t:<name>``) and the differing element counts into the manifest."""
    with np.load(npz) as z:
        ref = {k: z[k] for k in z.files}
    dump = optimized_dump(tfl, ref["input"])
    differ = {k: int(np.sum(v.astype(np.int64) != ref["t:" + k])) for k, v in dump.items()
              if "t:" + k in ref and ref["t:" + k].shape == v.shape}
    differ = {k: n for k, n in differ.items() if n}
    manifest["optimized_differs"] = differ
    if differ:
        np.savez_compressed(target, **{"t:" + k: dump[k] for k in differ})
    print(f"  optimized kernels differ on {len(differ)} tensor(s)", flush=True)


def run_vela(tflite_path: Path, out_dir: Path) -> str:
    exe = shutil.which("vela") or str(Path(sys.executable).with_name("vela"))
    done = subprocess.run([exe, *VELA_ARGS, "--output-dir", str(out_dir), str(tflite_path)],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"vela exit {done.returncode}: {(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def vela_totals(stem: str, out_dir: Path) -> dict:
    """Vela's totals from its stdout and per-layer CSV (as benchmarks/vela_anchor.py reads them)."""
    text = (out_dir / f"{stem}.vela.txt").read_text()
    totals: dict = {}
    for key, label in (("sram_bytes", "Total SRAM used"), ("flash_bytes", "Total (?:On|Off)-chip Flash used")):
        if m := re.search(label + r"\s+([\d.,]+) KiB", text):
            totals[key] = float(m.group(1).replace(",", "")) * 1024
    for key, label in (("cpu_ops", "CPU operators"), ("npu_ops", "NPU operators")):
        if m := re.search(label + r" = (\d+)", text):
            totals[key] = int(m.group(1))
    rows = [{k.strip(): (v or "").strip() for k, v in r.items() if k}
            for r in csv.DictReader((out_dir / f"{stem}.vela" / f"{stem}_per-layer.csv").open())]
    totals["cycles"] = sum(float(r["Op Cycles"] or 0) for r in rows)
    for summary in (out_dir / f"{stem}.vela").glob(f"{stem}_summary_*.csv"):
        totals["cycles_summary"] = float(next(csv.DictReader(summary.open()))["cycles_total"])
    totals["macs"] = sum(int(float(r["MAC Count"] or 0)) for r in rows)
    totals["layers"] = len(rows)
    totals["cpu_layers"] = sorted({r["Original Operator"] for r in rows if r["Target"] != "NPU"})
    return totals


def _step(manifest: dict, step: str, target: Path, make) -> bool:
    """Run make() unless target exists; record a failure in the manifest. True when target is there."""
    if target.exists():
        return True
    t0 = time.time()
    try:
        make()
    except Exception as exc:  # a converter/tool failure: recorded, the variant's later steps are skipped
        sentences = [x.rstrip(".") for x in " ".join(str(exc).split()).split(". ")]  # once per op: say it once
        manifest["failures"][step] = f"{type(exc).__name__}: " + ". ".join(dict.fromkeys(sentences))[:4000]
        print(f"  {step}: FAILED {manifest['failures'][step][:300]}", flush=True)
        return False
    manifest["failures"].pop(step, None)
    print(f"  {step}: {time.time() - t0:.0f} s", flush=True)
    return target.exists()


def build(name: str, precision: str, out: Path, model_cache: dict) -> dict:
    stem = f"{name}_{precision}"
    mpath = out / f"{stem}.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {}
    manifest.update(network=name, keras_application=NETS[name][0], input_size=NETS[name][1], precision=precision,
                    seed=SEED)
    manifest.setdefault("failures", {})
    tfl, twin, npz, vela_dir = (out / f"{stem}.tflite", out / f"{stem}.tflite.onnx", out / f"{stem}.npz",
                                out / f"{stem}.vela")
    print(f"{stem}:", flush=True)

    def convert():
        if name not in model_cache:
            model_cache.clear()
            model_cache[name] = keras_model(name)
        tfl.write_bytes(to_tflite(model_cache[name], name, precision))

    def make_twin():
        done = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", str(tfl), "--output", str(twin)],
                              capture_output=True, text=True)
        if done.returncode or not twin.exists():
            raise RuntimeError(f"tf2onnx exit {done.returncode}: {done.stderr.strip()[-2000:]}")

    def make_vela():
        text = run_vela(tfl, vela_dir)
        (out / f"{stem}.vela.txt").write_text(text)

    if _step(manifest, "tflite", tfl, convert):
        manifest["ops"] = op_histogram(tfl)
        manifest["tflite_bytes"] = tfl.stat().st_size
        if _step(manifest, "tf2onnx", twin, make_twin):
            manifest["twin_bytes"] = twin.stat().st_size
        if _step(manifest, "oracle", npz, lambda: np.savez_compressed(npz, **oracle(tfl))):
            with np.load(npz) as z:
                manifest["oracle_tensors"] = len(z.files) - 1
            if "optimized_differs" not in manifest and npz.exists():
                write_optimized(npz, tfl, out / f"{stem}.optimized.npz", manifest)
        if _step(manifest, "vela", out / f"{stem}.vela.txt", make_vela):
            manifest["vela"] = vela_totals(stem, out)
    manifest["built"] = [p.name for p in (tfl, twin, npz, out / f"{stem}.vela.txt") if p.exists()]
    mpath.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=list(NETS), metavar="NAME", help="networks (default: all)")
    ap.add_argument("--precision", nargs="*", default=list(PRECISIONS), choices=PRECISIONS)
    ap.add_argument("--out", type=Path, default=OUT, help=f"zoo folder (default {OUT})")
    ap.add_argument("--list", action="store_true", help="list the networks and exit")
    a = ap.parse_args(argv)
    if a.list:
        for name, (app, size, _, _) in NETS.items():
            print(f"{name:20s} keras.applications.{app} {size}x{size}")
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    cache: dict = {}
    for name in a.only or list(NETS):
        for prec in a.precision:
            build(name, prec, a.out, cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
