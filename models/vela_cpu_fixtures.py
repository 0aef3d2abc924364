"""Build the Vela placement fixtures: small Keras networks with one operator Vela 5.2 leaves on the CPU.

For each network this writes into ``tests/fixtures/vela_cpu/``: ``NAME.tflite`` (full-integer int8, a seeded
representative dataset) and ``NAME.per-layer.csv``, Vela 5.2's per-layer report for ``ethos-u55-128``
(``Target`` = NPU or CPU per operator, ``Name`` = its output tensor). ``stride4``: a 5x5 convolution with stride 4
and SAME padding (Vela: "Stride>3 is only supported IF (dilation = 1 AND padding = VALID)"); ``avgpool10``: a 10x10
average pool with SAME padding (Vela: kernel width 10 out of range). ``tests/test_vela_placement.py`` requires
``npu-sim check``'s placement to equal Vela's, operator by operator.

Needs tensorflow-cpu and ethos-u-vela 5.2 (the optional extra ``vela-anchor``, a virtualenv of its own).
Usage: ``python models/vela_cpu_fixtures.py [--out DIR]``.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.vela_anchor import VELA_ARGS  # noqa: E402  (the repository root is on the path only now)


def _convert(model, shape, path: Path) -> None:
    import tensorflow as tf

    def data():
        rng = np.random.default_rng(0)
        for _ in range(8):
            yield [rng.uniform(-1, 1, (1,) + shape).astype(np.float32)]
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = data
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int8
    path.write_bytes(conv.convert())


def networks():
    import tensorflow as tf
    tf.random.set_seed(0)
    layers = tf.keras.layers
    i = layers.Input((32, 32, 3))
    x = layers.Conv2D(8, 5, strides=4, padding="same", activation="relu")(i)
    yield "stride4", tf.keras.Model(i, layers.Conv2D(8, 3, padding="same")(x)), (32, 32, 3)
    i = layers.Input((32, 32, 8))
    x = layers.AveragePooling2D(pool_size=(10, 10), strides=1, padding="same")(layers.Conv2D(8, 1)(i))
    yield "avgpool10", tf.keras.Model(i, layers.Conv2D(4, 1)(x)), (32, 32, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "vela_cpu")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, model, shape in networks():
        path = args.out / f"{name}.tflite"
        _convert(model, shape, path)
        with tempfile.TemporaryDirectory() as tmp:
            vela = shutil.which("vela") or str(Path(sys.executable).with_name("vela"))
            subprocess.run([vela, str(path), *VELA_ARGS, "--output-dir", tmp], check=True, capture_output=True,
                           cwd=tmp)
            shutil.copy(Path(tmp) / f"{name}_per-layer.csv", args.out / f"{name}.per-layer.csv")
        print(f"wrote {path} and its Vela per-layer report")


if __name__ == "__main__":
    main()
