"""Build the Vela flash fixtures: one small Keras network, int8 and 16x8, and Vela 5.2's read-only allocation.

The network holds one of each constant Vela stores in its read-only area ("Total On-chip Flash used") on
ethos-u55-128: convolutions in both weight orders (3 input channels part-kernel-first; 16 and 24 depth-first),
a 9x9 kernel (sub-kernels of 8x8), depthwise 3x3 and 5x5 kernels (elements padded to 4), a Dense layer, a LOGISTIC
(a lookup table in int8), a multiply by a constant, a zero pad before a max pool (not folded: a fill constant), a
MEAN (Vela's depthwise convolution of ones) and a SOFTMAX (its tables and scalars).

For each precision this writes into ``tests/fixtures/vela_flash/``: ``NAME.tflite`` (seeded weights, a seeded
representative dataset) and ``NAME.readonly.txt``, the part of Vela's stdout with ``--verbose-allocation`` that
lists its read-only NPU tensors (start/end time, address, size, name) and its network summary's flash line.
``tests/test_vela_flash.py`` compares npu-sim's flash with it.

Needs tensorflow-cpu and ethos-u-vela 5.2 (the optional extra ``vela-anchor``, a virtualenv of its own).
Usage: ``python models/vela_flash_fixtures.py [--out DIR]``; it runs, per precision,
``vela NAME.tflite --accelerator-config ethos-u55-128 --system-config Ethos_U55_High_End_Embedded --memory-mode
Sram_Only --config Arm/vela.ini --verbose-performance --verbose-allocation --output-dir TMP``.
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
from models.tflite_fixtures import full_integer  # noqa: E402

SHAPE = (24, 24, 3)


def network():
    import tensorflow as tf
    tf.random.set_seed(0)
    layers = tf.keras.layers
    i = layers.Input(SHAPE, batch_size=1)
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(i)
    x = layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = layers.Conv2D(24, 1, activation="sigmoid")(x)
    x = layers.DepthwiseConv2D(5, padding="same")(x)
    x = layers.Conv2D(8, 9, padding="same", activation="relu")(x)
    x = layers.Rescaling(0.5)(x)
    x = layers.MaxPooling2D(3, strides=2)(layers.ZeroPadding2D(1)(x))
    x = layers.Conv2D(40, 1, activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(i, layers.Dense(10, activation="softmax")(x))


def to_tflite(model, precision: str) -> bytes:
    rng = np.random.default_rng(0)
    return full_integer(model, [rng.uniform(-1, 1, (1,) + SHAPE).astype(np.float32) for _ in range(8)], precision)


def readonly_part(stdout: str) -> str:
    """Vela's read-only allocation table (its heading to its peak line) and the summary's flash line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Tensor Allocation for read-only"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("Allocation Peak Tensor Size"))
    flash = next(line for line in lines if line.startswith("Total On-chip Flash used"))
    return "\n".join(lines[start:end + 1] + [flash]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "vela_flash")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = network()
    for precision in ("int8", "16x8"):
        name = f"flash_mix_{precision}"
        path = args.out / f"{name}.tflite"
        path.write_bytes(to_tflite(model, precision))
        with tempfile.TemporaryDirectory() as tmp:
            vela = shutil.which("vela") or str(Path(sys.executable).with_name("vela"))
            done = subprocess.run([vela, str(path), *VELA_ARGS, "--verbose-allocation", "--output-dir", tmp],
                                  check=True, capture_output=True, text=True, cwd=ROOT)
        (args.out / f"{name}.readonly.txt").write_text(readonly_part(done.stdout))
        print(f"wrote {path} and Vela's read-only allocation")


if __name__ == "__main__":
    main()
