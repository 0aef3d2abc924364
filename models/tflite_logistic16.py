"""Measure LiteRT's optimized int16 LOGISTIC against its reference kernel; write the fixture compare's test reads.

A tiny 16x8 model (``input`` -> LOGISTIC, int16 in and out, batch 1, ``CODES`` elements) is converted by the
TFLiteConverter (EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8) and its input scale is then set in
the flatbuffer. LiteRT's prepare takes an input scale that its ``CheckedLog2`` calls 2**-12 (Q3.12) as a
power of two and leaves the input multiplier 0; its optimized kernels (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``)
then run ``optimized_ops::Logistic`` (gemmlowp's fixed-point logistic) instead of the reference
``reference_integer_ops::Logistic`` (a 256-entry table, interpolated), which every other scale gets from both
kernel sets. The sweep prints, for several input scales, on how many of all 65,536 int16 codes the two differ.

It writes (``--out``, default ``tests/fixtures/logistic16/``):

* ``logistic16.tflite`` -- the tiny model, input scale 2**-12;
* ``logistic16.npz``    -- ``input``: ``CODES`` int16 codes (sorted; the six extreme/zero codes and a seeded
  sample of the rest, shape (1, CODES)); ``optimized`` and ``reference``: LiteRT's outputs for them from the
  optimized and the reference kernels.

Runs in the Vela virtualenv (tensorflow-cpu 2.15), from the repository root:

    nice -n 19 /work/venv-vela/bin/python models/tflite_logistic16.py [--out DIR] [--no-sweep]
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "logistic16"
CODES = 2048
SEED = 16
POT = 2.0 ** -12
# input scales of the sweep: 2**-12, two within CheckedLog2's tolerance of it, and others
SCALES = (POT, POT * 1.0005, POT * 0.9995, POT * 1.002, 2.0 ** -11, 2.0 ** -13, 0.00010441018, 3.1e-4, 1e-3)


def tiny_model(size: int, scale: float) -> bytes:
    """input (1, size) int16 -> LOGISTIC -> int16 output, the input tensor's scale set to ``scale``."""
    import tensorflow as tf
    from tensorflow.lite.tools import flatbuffer_utils as fb
    inp = tf.keras.Input(shape=(size,), batch_size=1, name="input")
    model = tf.keras.Model(inp, tf.keras.layers.Activation("sigmoid", name="logistic")(inp))
    data = np.random.default_rng(SEED).uniform(-8.0, 8.0, (8, 1, size)).astype(np.float32)
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: (list(d[None]) for d in data)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int16
    flat = fb.convert_bytearray_to_object(bytearray(conv.convert()))
    sg = flat.subgraphs[0]
    if len(sg.operators) != 1:
        raise RuntimeError(f"expected one LOGISTIC, got {len(sg.operators)} operators")
    q = sg.tensors[sg.operators[0].inputs[0]].quantization
    q.scale, q.zeroPoint = np.array([scale], np.float32), np.array([0], np.int64)
    return bytes(fb.convert_object_to_bytearray(flat))


def run(model: bytes, x: np.ndarray, optimized: bool) -> np.ndarray:
    """LiteRT's output for ``x``: the optimized builtin kernels (no delegates) or the reference kernels."""
    import tensorflow as tf
    kind = tf.lite.experimental.OpResolverType
    it = tf.lite.Interpreter(model_content=model, experimental_preserve_all_tensors=True,
                             experimental_op_resolver_type=kind.BUILTIN_WITHOUT_DEFAULT_DELEGATES if optimized
                             else kind.BUILTIN_REF)
    inp = it.get_input_details()[0]
    it.resize_tensor_input(inp["index"], list(x.shape))
    it.allocate_tensors()
    it.set_tensor(inp["index"], x)
    it.invoke()
    return np.array(it.get_tensor(it.get_output_details()[0]["index"]))


def sweep() -> None:
    x = np.arange(-32768, 32768, dtype=np.int16).reshape(1, -1)
    for s in SCALES:
        model = tiny_model(x.shape[1], s)
        ref, opt = run(model, x, False).astype(np.int64), run(model, x, True).astype(np.int64)
        n = int(np.count_nonzero(ref != opt))
        print(f"input scale {s!r}: optimized differs from reference on {n} of {x.size} codes"
              + (f" (max |diff| {int(np.abs(ref - opt).max())})" if n else ""))


def codes() -> np.ndarray:
    special = np.array([-32768, -32767, -1, 0, 1, 32767], np.int64)
    rest = np.setdiff1d(np.arange(-32768, 32768), special)
    pick = np.random.default_rng(SEED).choice(rest, CODES - special.size, replace=False)
    return np.sort(np.concatenate([special, pick])).astype(np.int16).reshape(1, -1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-sweep", action="store_true", help="only write the fixture")
    a = ap.parse_args(argv)
    if not a.no_sweep:
        sweep()
    a.out.mkdir(parents=True, exist_ok=True)
    model = tiny_model(CODES, POT)
    x = codes()
    ref, opt = run(model, x, False), run(model, x, True)
    (a.out / "logistic16.tflite").write_bytes(model)
    np.savez_compressed(a.out / "logistic16.npz", input=x, optimized=opt, reference=ref)
    print(f"{a.out}: {x.size} codes, optimized differs from reference on {int(np.count_nonzero(opt != ref))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
