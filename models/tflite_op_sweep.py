"""Sweep single LiteRT ops over chosen inputs and quantizations, to prove npu-sim's tflite kernels against LiteRT.

A fixture's .tflite (``tests/fixtures/tflite/``) is cut down to one operator (``single_op``): the op's activation
input becomes the graph input, its output the graph output, and the input/output quantization can be set to any
value (the op's prepare then derives its integers from them, as for a converted model). LiteRT runs it with the
builtin reference kernels (``OpResolverType.BUILTIN_REF``, no delegates), on every integer the input type holds
(elementwise ops) or on seeded random tensors, and ``main`` compares every output integer with npu-sim's kernel.

Needs the ``tflite-fixtures`` virtualenv (tensorflow-cpu 2.15); usage: ``python models/tflite_op_sweep.py``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures" / "tflite"


def _builtin_names():
    from tensorflow.lite.python import schema_py_generated as schema
    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def single_op(fixture: str, op: str, in_q=None, out_q=None, options=None, const=None) -> bytes:
    """The fixture model reduced to its first ``op`` (a TFLite builtin name); ``in_q``/``out_q`` = (scale, zp)
    override the quantization of the op's first input / output; ``options`` sets builtin-option attributes;
    ``const`` = (input position, int32 array) replaces a constant input's data (e.g. a resize's size)."""
    from tensorflow.lite.tools import flatbuffer_utils as fb
    model = fb.convert_bytearray_to_object(bytearray((FIXTURES / f"{fixture}.tflite").read_bytes()))
    names = _builtin_names()
    sg = model.subgraphs[0]
    for o in sg.operators:
        code = model.operatorCodes[o.opcodeIndex]
        if names.get(max(code.builtinCode, code.deprecatedBuiltinCode)) == op:
            break
    else:
        raise KeyError(f"{fixture} has no {op}")
    sg.operators = [o]
    sg.inputs = [int(o.inputs[0])]
    sg.outputs = [int(o.outputs[0])]
    for idx, q in ((o.inputs[0], in_q), (o.outputs[0], out_q)):
        if q is not None:
            t = sg.tensors[idx]
            t.quantization.scale = np.array([q[0]], np.float32)
            t.quantization.zeroPoint = np.array([q[1]], np.int64)
    for k, v in (options or {}).items():
        setattr(o.builtinOptions, k, v)
    if const is not None:
        pos, data = const
        t = sg.tensors[o.inputs[pos]]
        model.buffers[t.buffer].data = np.frombuffer(np.asarray(data, np.int32).tobytes(), np.uint8)
    return bytes(fb.convert_object_to_bytearray(model))


def run(model: bytes, x: np.ndarray) -> np.ndarray:
    import tensorflow as tf
    it = tf.lite.Interpreter(model_content=model,
                             experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_REF)
    inp = it.get_input_details()[0]
    it.resize_tensor_input(inp["index"], list(x.shape))
    it.allocate_tensors()
    it.set_tensor(inp["index"], x.astype(inp["dtype"]))
    it.invoke()
    return np.array(it.get_tensor(it.get_output_details()[0]["index"]))


def _report(what: str, got: np.ndarray, want: np.ndarray) -> bool:
    bad = int(np.count_nonzero(got.astype(np.int64) != want.astype(np.int64)))
    print(f"{what}: {want.size} integers, {'all equal' if not bad else f'{bad} differ'}")
    return not bad


def sweep_sigmoid16() -> bool:
    from kernels.tflite_sigmoid16 import input_rescale, tfl_sigmoid16
    x = np.arange(-32768, 32768, dtype=np.int16).reshape(1, -1)
    ok = True
    for op, fn in (("LOGISTIC", "Sigmoid"), ("TANH", "Tanh")):
        for s in (0.00010441018, 2.0 ** -12, 2.0 ** -11, 2.0 ** -10, 1e-3, 3.1e-4, 2.5e-5, 1e-6, 0.004, 0.1):
            want = run(single_op("activations_a16w8", op, in_q=(s, 0)), x)
            mult, ls = input_rescale(fn, s)
            ok &= _report(f"int16 {op} input scale {s:g}", tfl_sigmoid16(x, fn, mult, ls), want)
    return ok


def sweep_hardswish() -> bool:
    from npu_sim.ops.tflite.lut import hardswish_params
    from kernels.tflite_hardswish import tfl_hardswish
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, -1)
    ok = True
    for s_in, z_in, s_out, z_out in ((0.026363414, -3, 0.014887092, -103), (0.1, 0, 0.05, -100), (0.002, 5, 0.001, -120),
                                     (0.5, -128, 0.3, -128), (0.01, 127, 0.02, 0), (1e-3, 0, 1e-4, -128),
                                     (0.05, 20, 0.004, 10)):
        want = run(single_op("hardswish_int8", "HARD_SWISH", in_q=(s_in, z_in), out_q=(s_out, z_out)), x)
        prm = hardswish_params(s_in, s_out)
        ok &= _report(f"int8 HARD_SWISH {s_in:g}/{z_in} -> {s_out:g}/{z_out}",
                      tfl_hardswish(x, z_in, z_out, *prm), want)
    return ok


def sweep_resize() -> bool:
    from kernels.tflite_resize import tfl_resize_bilinear, tfl_resize_nearest
    rng = np.random.default_rng(3)
    ok = True
    for fixture, dtype in (("resize_int8", np.int8), ("resize_a16w8", np.int16)):
        info = np.iinfo(dtype)
        for op, fn in (("RESIZE_BILINEAR", tfl_resize_bilinear), ("RESIZE_NEAREST_NEIGHBOR", tfl_resize_nearest)):
            for (h, w), (ho, wo) in (((4, 4), (8, 8)), ((3, 5), (7, 4)), ((5, 2), (11, 9)), ((6, 6), (4, 3)),
                                     ((1, 3), (5, 1))):
                for ac, hp in ((False, False), (True, False), (False, True)):
                    x = rng.integers(info.min, info.max + 1, size=(2, h, w, 3)).astype(dtype)
                    want = run(single_op(fixture, op, options={"alignCorners": ac, "halfPixelCenters": hp},
                                         const=(1, [ho, wo])), x)
                    got = fn(x.transpose(0, 3, 1, 2), (ho, wo), ac, hp).transpose(0, 2, 3, 1)
                    ok &= _report(f"{dtype.__name__} {op} {h}x{w} -> {ho}x{wo} align_corners={ac} "
                                  f"half_pixel={hp}", got, want)
    return ok


def sweep_softmax() -> bool:
    from kernels.tflite_softmax import (softmax8_params, softmax16_params, softmax16_tables, tfl_softmax8,
                                        tfl_softmax16)
    rng = np.random.default_rng(5)
    exp_lut, recip_lut = softmax16_tables()
    ok = True
    for s_in in (0.031331055, 1e-3, 0.004, 0.1, 0.5, 2.0, 1e-6):
        for depth in (10, 1, 37, 300):
            x = rng.integers(-128, 128, size=(64, depth)).astype(np.int8)
            x[:8] = rng.integers(120, 128, size=(8, depth))  # near-ties at the top
            x[8:10] = -128
            want = run(single_op("softmax_int8", "SOFTMAX", in_q=(s_in, 12)), x)
            ok &= _report(f"int8 SOFTMAX scale {s_in:g} depth {depth}", tfl_softmax8(x, *softmax8_params(s_in)), want)
    for s_in in (0.00013372568, 1e-5, 3e-4, 1e-3, 0.01, 1e-7):
        for depth in (10, 1, 37, 300):
            x = rng.integers(-32768, 32768, size=(64, depth)).astype(np.int16)
            x[:8] = rng.integers(32000, 32768, size=(8, depth))
            x[8:10] = -32768
            want = run(single_op("softmax_a16w8", "SOFTMAX", in_q=(s_in, 0)), x)
            got = tfl_softmax16(x, *softmax16_params(s_in), exp_lut, recip_lut)
            ok &= _report(f"int16 SOFTMAX scale {s_in:g} depth {depth}", got, want)
    return ok


SWEEPS = {"sigmoid16": sweep_sigmoid16, "softmax": sweep_softmax, "hardswish": sweep_hardswish, "resize": sweep_resize}


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(SWEEPS)
    ok = all([SWEEPS[n]() for n in names])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
