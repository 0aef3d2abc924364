"""Build the LiteRT oracle fixtures: small Keras networks -> full-integer .tflite -> QDQ ONNX (tf2onnx).

For each network and each precision (``int8``: int8 activations and weights; ``a16w8``: TFLite's 16x8 mode,
``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``) this writes into ``tests/fixtures/tflite/``:

* ``NAME.tflite``  -- converted with a seeded representative dataset (full-integer quantization, integer I/O);
* ``NAME.onnx``    -- ``python -m tf2onnx.convert --tflite NAME.tflite --output NAME.onnx`` (QDQ, TFLite
  tensor names kept);
* ``NAME.npz``     -- the oracle: a seeded integer input (``input``) and every integer tensor LiteRT computed
  (``t:<tflite tensor name>``), from ``tf.lite.Interpreter`` with ``experimental_preserve_all_tensors=True``
  and the builtin reference kernels (``OpResolverType.BUILTIN_REF``, no delegates), run on a copy of the model
  whose every op output is also a graph output (so no op may overwrite an intermediate tensor in place).

With ``--optimized``, each built network is also run by LiteRT's default *optimized* builtin kernels
(``OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES``: the optimized kernels, no XNNPACK), on the same model copy
(every op output a graph output) and the same input as the oracle; where any op output differs from the reference
kernels' ``optimized/NAME.optimized.npz`` is written (a folder of its own: ``*.npz`` beside the models are the
reference oracles): the model input and every op output, NHWC, keyed by the plain TFLite
tensor name (a board's dump, as ``npu-sim compare MODEL DUMP`` reads it). Equal networks get no file.
``--optimized-only`` does this for the fixtures already in ``--out`` without rebuilding them (a rebuild with
``--only`` renames Keras layers, so the committed fixtures are kept as they are).

Refusal fixtures (LiteRT refuses them at prepare time) get ``NAME.tflite``/``NAME.onnx`` and ``NAME.refusal.txt``
(LiteRT's message) instead of an ``.npz``. LiteRT's prepare stops at the first op that fails, so the message names
one op only; to record LiteRT's own *full* list, every op of the model is also prepared alone
(:func:`refused_ops`): a copy of the .tflite whose subgraph runs only that op (its activation inputs become the
graph inputs, its outputs the graph outputs; tensors, quantization parameters and weights are the model's own), so
LiteRT's prepare judges each op with exactly the parameters it has in the whole model. Each op it refuses is one
line ``refused:<TAB><op index><TAB><OPERATOR><TAB><output tensor name><TAB><LiteRT's message>`` after the first
message.
``refusal_chain`` (16x8) has three consecutive convolution+ReLU6 layers with tiny weights, so each has an
almost empty output range and a tiny output scale, and every one of them is refused.

Needs the optional extra ``tflite-fixtures`` (tensorflow-cpu, tf2onnx) in a virtualenv of its own; npu-sim never
imports this at run time. Usage: ``python models/tflite_fixtures.py [--only NAME ...] [--out DIR] [--optimized]``;
``--relu-0-to-1`` writes ``edited/relu_0_to_1_int8`` (:func:`build_relu_0_to_1`).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tflite"
SEED = 7


def _nets():
    """name -> (input shape without batch, builder(keras) -> list of layers applied to the input)."""
    import tensorflow as tf
    from tensorflow.keras import layers as _layers

    class _L:  # every layer with a bias gets a random one (Keras' zero default would hide bias handling)
        def __getattr__(self, name):
            cls = getattr(_layers, name)
            if name in ("Conv2D", "DepthwiseConv2D", "Dense"):
                return lambda *a, **k: cls(*a, bias_initializer=tf.keras.initializers.RandomUniform(-0.5, 0.5), **k)
            return cls
    L = _L()

    def conv(x):
        x = L.Conv2D(8, 3, padding="same", activation="relu")(x)
        x = L.Conv2D(6, 3, strides=2, padding="valid")(x)
        return x

    def depthwise(x):
        x = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, activation="relu6")(x)
        x = L.DepthwiseConv2D(3, strides=2, padding="valid")(x)
        return x

    def fc(x):
        x = L.Flatten()(x)
        x = L.Dense(16, activation="relu")(x)
        return L.Dense(5)(x)

    def add_mul(x):
        a = L.Conv2D(4, 1)(x)
        b = L.Conv2D(4, 3, padding="same")(x)
        s = L.Add()([a, b])
        m = L.Multiply()([s, a])
        return L.Subtract()([m, b])

    def pools(x):
        x = L.Conv2D(8, 3, padding="same")(x)
        a = L.AveragePooling2D(3, strides=2, padding="same")(x)
        m = L.MaxPooling2D(2)(x)
        return L.Concatenate()([a, m])

    def mean(x):
        x = L.Conv2D(8, 3, padding="same")(x)
        return L.GlobalAveragePooling2D()(x)

    def concat(x):
        a = L.Conv2D(3, 1)(x)
        b = L.Conv2D(5, 3, padding="same")(x)
        return L.Concatenate()([a, b, x])

    def resize(x):
        x = L.Conv2D(4, 1)(x)
        a = L.UpSampling2D(2, interpolation="bilinear")(x)
        b = L.UpSampling2D(2, interpolation="nearest")(x)
        return L.Add()([a, b])

    def activations(x):
        x = L.Conv2D(6, 3, padding="same")(x)
        a = L.Activation("sigmoid")(x)
        b = L.Activation("tanh")(x)
        c = L.Activation(tf.nn.relu6)(x)
        return L.Concatenate()([a, b, c])

    def hardswish(x):  # TFLite has no 16x8 HARD_SWISH: int8 only
        x = L.Conv2D(6, 3, padding="same")(x)
        return L.Activation(lambda v: v * tf.nn.relu6(v + 3.0) * (1.0 / 6.0))(x)

    def refusal_depthwise(x):  # outputs ~0: a tiny output scale, so ReLU6's bound 6/scale overflows int32
        x = L.Conv2D(4, 1)(x)
        return _layers.DepthwiseConv2D(3, padding="same", activation="relu6",
                                       depthwise_initializer=tf.keras.initializers.Constant(1e-9),
                                       bias_initializer="zeros")(x)

    def refusal_chain(x):  # three conv+ReLU6 in a row, each with outputs ~0: every one refused (6/scale > int32)
        x = L.Conv2D(4, 1)(x)
        for _ in range(3):
            x = _layers.Conv2D(4, 3, padding="same", activation="relu6", bias_initializer="zeros",
                               kernel_initializer=tf.keras.initializers.Constant(1e-9))(x)
        return x

    def softmax(x):
        x = L.Flatten()(x)
        x = L.Dense(10)(x)
        return L.Softmax()(x)

    return {
        "conv": ((8, 8, 3), conv), "depthwise": ((8, 8, 3), depthwise), "fc": ((4, 4, 3), fc),
        "add_mul": ((6, 6, 3), add_mul), "pools": ((8, 8, 3), pools), "mean": ((6, 6, 3), mean),
        "concat": ((6, 6, 3), concat), "resize": ((4, 4, 3), resize), "activations": ((6, 6, 3), activations),
        "hardswish": ((6, 6, 3), hardswish), "softmax": ((4, 4, 2), softmax),
        "refusal_depthwise": ((6, 6, 3), refusal_depthwise), "refusal_chain": ((6, 6, 3), refusal_chain),
        **_more_nets(tf, L),
    }


def _more_nets(tf, L):
    """The networks of the operators Vela 5.2 also puts on the NPU (transposed convolution, the activations
    with a slope, max/min and the movement ops), each on a convolution's output."""
    lam = tf.keras.layers.Lambda

    def transpose_conv(x):
        x = L.Conv2D(4, 1)(x)
        return L.Conv2DTranspose(3, 3, strides=2, padding="same",
                                 bias_initializer=tf.keras.initializers.RandomUniform(-0.5, 0.5))(x)

    def leaky(x):
        x = L.Conv2D(6, 3, padding="same")(x)
        return L.LeakyReLU(alpha=0.1)(x)

    def prelu(x):
        x = L.Conv2D(6, 3, padding="same")(x)
        return L.PReLU(alpha_initializer=tf.keras.initializers.RandomUniform(0.0, 0.5),
                       shared_axes=[1, 2])(x)

    def maxmin(x):  # each tensor feeds one of them: 16x8 requantizes their inputs (one name per requantization)
        a = L.Conv2D(4, 1)(x)
        b = L.Conv2D(4, 3, padding="same")(x)
        c = L.Conv2D(4, 3, padding="same")(x)
        return L.Minimum()([L.Maximum()([a, b]), c])

    def split(x):
        x = L.Conv2D(6, 1)(x)
        a, b = lam(lambda v: tf.split(v, 2, axis=-1))(x)
        c, d, e = lam(lambda v: tf.split(v, [1, 2, 3], axis=-1))(x)
        return L.Concatenate()([b, a, e, c, d])

    def slice_(x):
        x = L.Conv2D(4, 1)(x)
        return lam(lambda v: tf.slice(v, [0, 1, 2, 1], [1, 4, 3, 2]))(x)

    def pack(x):
        x = L.Conv2D(3, 1)(x)
        parts = lam(lambda v: tf.unstack(v, axis=3))(x)
        return lam(lambda vs: tf.stack(vs[::-1], axis=1))(parts)

    def mirror_pad(x):
        x = L.Conv2D(4, 1)(x)
        x = lam(lambda v: tf.pad(v, [[0, 0], [1, 2], [2, 1], [0, 0]], mode="REFLECT"))(x)
        return lam(lambda v: tf.clip_by_value(v, 0.0, 1.0))(x)

    def abs_exp(x):
        x = L.Conv2D(4, 1)(x)
        a = lam(lambda v: tf.abs(v))(x)
        return lam(lambda v: tf.exp(v))(a)

    def dilated(x):  # the converter writes a dilated convolution as SPACE_TO_BATCH_ND -> conv -> BATCH_TO_SPACE_ND
        x = L.Conv2D(4, 3, padding="same")(x)
        x = L.Conv2D(6, 3, dilation_rate=(2, 2), padding="same", activation="relu")(x)
        return L.DepthwiseConv2D(3, dilation_rate=(3, 3), padding="same")(x)

    return {"dilated": ((10, 10, 3), dilated),
            "abs_exp": ((4, 4, 3), abs_exp), "transpose_conv": ((4, 4, 3), transpose_conv),
            "leaky": ((6, 6, 3), leaky), "prelu": ((6, 6, 3), prelu), "maxmin": ((6, 6, 3), maxmin),
            "split": ((4, 4, 3), split), "slice": ((6, 6, 3), slice_), "pack": ((4, 4, 3), pack),
            "mirror_pad": ((5, 5, 3), mirror_pad)}


PRECISIONS = {"hardswish": ("int8",), "prelu": ("int8",), "refusal_depthwise": ("a16w8",), "refusal_chain": ("a16w8",)}


def _convert(model, shape, precision: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return full_integer(model, [rng.uniform(-2.0, 2.0, size=(1,) + shape).astype(np.float32) for _ in range(32)],
                        precision)


def full_integer(model, samples: list, precision: str) -> bytes:
    """A Keras model through the TFLite converter, full-integer with integer I/O, calibrated on ``samples``
    (arrays with their batch dimension of 1): ``precision`` "int8", else 16x8 (int16 activations, int8
    weights: EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8)."""
    import tensorflow as tf
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([d] for d in samples)
    if precision == "int8":
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = conv.inference_output_type = tf.int8
    else:
        conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        conv.inference_input_type = conv.inference_output_type = tf.int16
    return conv.convert()


def every_tensor_an_output(tflite_bytes: bytes) -> bytes:
    """The same model with every op output also a graph output.

    ``experimental_preserve_all_tensors`` alone does not stop LiteRT from running some ops in place (an ADD's
    output buffer was reused by the MUL after it), so intermediate tensors could be overwritten; graph outputs
    never are. The kernels and their arithmetic are unchanged."""
    from tensorflow.lite.tools import flatbuffer_utils as fb
    model = fb.convert_bytearray_to_object(bytearray(tflite_bytes))
    for sg in model.subgraphs:
        outs = list(sg.outputs)
        for op in sg.operators:
            outs += [int(t) for t in op.outputs if t >= 0 and int(t) not in outs]
        sg.outputs = outs
    return bytes(fb.convert_object_to_bytearray(model))


def interpreter(tflite_path: Path, optimized: bool = False):
    """LiteRT with the builtin reference kernels (or the optimized ones), no delegates, every tensor kept."""
    import tensorflow as tf
    kind = tf.lite.experimental.OpResolverType
    it = tf.lite.Interpreter(model_content=every_tensor_an_output(Path(tflite_path).read_bytes()),
                             experimental_preserve_all_tensors=True,
                             experimental_op_resolver_type=kind.BUILTIN_WITHOUT_DEFAULT_DELEGATES if optimized
                             else kind.BUILTIN_REF)
    return it


def optimized_dump(tflite_path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    """The model input and every op output computed by LiteRT's optimized kernels, by TFLite tensor name."""
    it = interpreter(tflite_path, optimized=True)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    it.set_tensor(inp["index"], x)
    it.invoke()
    names = {d["index"]: d["name"] for d in it.get_tensor_details()}
    out = {names[inp["index"]]: np.array(x)}
    for d in it.get_output_details():  # every op output (every_tensor_an_output)
        out[names[d["index"]]] = np.array(it.get_tensor(d["index"]))
    return out


def _write_optimized(stem: str, out_dir: Path) -> None:
    ref = np.load(out_dir / f"{stem}.npz")
    dump = optimized_dump(out_dir / f"{stem}.tflite", ref["input"])
    differ = {k: int((v.astype(np.int64) != ref["t:" + k]).sum()) for k, v in dump.items()
              if "t:" + k in ref.files and ref["t:" + k].shape == v.shape}
    differ = {k: n for k, n in differ.items() if n}
    target = out_dir / "optimized" / f"{stem}.optimized.npz"
    target.parent.mkdir(exist_ok=True)
    if not differ:
        target.unlink(missing_ok=True)
        print(f"{stem}: optimized kernels equal the reference kernels")
        return
    np.savez_compressed(target, **dump)
    print(f"{stem}: optimized kernels differ in {differ}")


def _oracle(tflite_path: Path, seed: int) -> dict[str, np.ndarray]:
    """Run LiteRT's reference kernels keeping every tensor; return the input and all integer tensors."""
    it = interpreter(tflite_path)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    info = np.iinfo(inp["dtype"])
    rng = np.random.default_rng(seed + 1)
    x = rng.integers(info.min, info.max + 1, size=inp["shape"]).astype(inp["dtype"])
    it.set_tensor(inp["index"], x)
    it.invoke()
    out = {"input": x}
    for d in it.get_tensor_details():
        if d["dtype"] not in (np.int8, np.int16, np.int32, np.int64, np.uint8):
            continue
        try:
            v = it.get_tensor(d["index"])
        except ValueError:
            continue
        if v is None or v.size == 0:
            continue
        out["t:" + d["name"]] = np.array(v)
    return out


def refused_ops(tflite_bytes: bytes) -> list[str]:
    """LiteRT's own verdict on every op: each op prepared alone (see the module docstring); one line per refusal."""
    import tensorflow as tf
    from tensorflow.lite.tools import flatbuffer_utils as fb
    from tensorflow.lite.python import schema_py_generated as schema
    base = fb.convert_bytearray_to_object(bytearray(tflite_bytes))
    codes = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    lines = []
    for i, op in enumerate(base.subgraphs[0].operators):
        model = fb.convert_bytearray_to_object(bytearray(tflite_bytes))
        sg = model.subgraphs[0]
        tensors = sg.tensors
        op_code = model.operatorCodes[op.opcodeIndex]
        code = max(op_code.builtinCode, op_code.deprecatedBuiltinCode)
        sg.operators = [sg.operators[i]]
        data = [model.buffers[tensors[t].buffer].data if t >= 0 else None for t in op.inputs]
        sg.inputs = [int(t) for t, d in zip(op.inputs, data) if t >= 0 and (d is None or len(d) == 0)]
        sg.outputs = [int(t) for t in op.outputs if t >= 0]
        it = tf.lite.Interpreter(model_content=bytes(fb.convert_object_to_bytearray(model)),
                                 experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_REF)
        try:
            it.allocate_tensors()
        except Exception as exc:  # LiteRT refuses this op at prepare time
            name = tensors[op.outputs[0]].name
            name = name.decode() if isinstance(name, bytes) else name
            msg = " ".join(str(exc).split())
            lines.append("\t".join(["refused:", str(i), str(codes.get(code, code)), name, msg]))
    return lines


def build(name: str, precision: str, out_dir: Path, optimized: bool = False) -> None:
    import tensorflow as tf
    shape, body = _nets()[name]
    tf.keras.utils.set_random_seed(SEED)
    inp = tf.keras.Input(shape=shape, batch_size=1, name="input")
    model = tf.keras.Model(inp, body(inp))
    stem = f"{name}_{precision}"
    tfl = out_dir / f"{stem}.tflite"
    tfl.write_bytes(_convert(model, shape, precision, SEED))
    onnx_path = out_dir / f"{stem}.onnx"
    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", str(tfl), "--output", str(onnx_path)],
                   check=True, capture_output=True)
    try:
        arrays = _oracle(tfl, SEED)
    except Exception as exc:  # LiteRT refused the model at prepare time
        lines = [str(exc).strip()] + refused_ops(tfl.read_bytes())
        (out_dir / f"{stem}.refusal.txt").write_text("\n".join(lines) + "\n")
        print(f"{stem}: refused by LiteRT: {str(exc).splitlines()[0]}")
        return
    np.savez_compressed(out_dir / f"{stem}.npz", **arrays)
    print(f"{stem}: {len(arrays) - 1} integer tensors")
    if optimized:
        _write_optimized(stem, out_dir)


def build_relu_0_to_1(out_dir: Path) -> None:
    """``edited/relu_0_to_1_int8.tflite`` and its ``.npz``: the converter never writes RELU_0_TO_1 (it fuses a clip
    to 0..1 into the op before it, or writes MINIMUM and RELU), so this is ``mirror_pad_int8.tflite`` with its
    MINIMUM dropped and its RELU relabelled RELU_0_TO_1, the convolution and MIRROR_PAD outputs at 4x their scale
    and the output at 2x (so both bounds clamp inside the int8 range); no tf2onnx twin (tf2onnx has no
    RELU_0_TO_1)."""
    from tensorflow.lite.tools import flatbuffer_utils as fb
    from tensorflow.lite.python import schema_py_generated as schema
    model = fb.convert_bytearray_to_object(bytearray((out_dir / "mirror_pad_int8.tflite").read_bytes()))
    sg = model.subgraphs[0]
    ops = schema.BuiltinOperator
    code = lambda op: max(model.operatorCodes[op.opcodeIndex].builtinCode,  # noqa: E731
                          model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode)
    pad, relu = [op for op in sg.operators if code(op) == ops.MIRROR_PAD][0], \
        [op for op in sg.operators if code(op) == ops.RELU][0]
    sg.operators = [op for op in sg.operators if code(op) != ops.MINIMUM]
    relu.inputs = [pad.outputs[0]]
    oc = model.operatorCodes[relu.opcodeIndex]
    oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = ops.RELU_0_TO_1, ops.PLACEHOLDER_FOR_GREATER_OP_CODES, 1
    for t, k in ((pad.inputs[0], 4), (pad.outputs[0], 4), (relu.outputs[0], 2)):
        sg.tensors[t].quantization.scale = [float(v) * k for v in sg.tensors[t].quantization.scale]
    target = out_dir / "edited" / "relu_0_to_1_int8.tflite"
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(bytes(fb.convert_object_to_bytearray(model)))
    np.savez_compressed(target.with_suffix(".npz"), **_oracle(target, SEED))
    print(f"edited/{target.name}: relabelled and run by LiteRT")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="network names (default: all)")
    ap.add_argument("--precision", nargs="*", default=["int8", "a16w8"])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--optimized", action="store_true",
                    help="also write optimized/NAME.optimized.npz where LiteRT's optimized kernels differ "
                         "from the reference kernels")
    ap.add_argument("--optimized-only", action="store_true",
                    help="only write optimized/NAME.optimized.npz for the fixtures already built in --out")
    ap.add_argument("--relu-0-to-1", action="store_true",
                    help="only write edited/relu_0_to_1_int8 (from the mirror_pad_int8 fixture in --out)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.relu_0_to_1:
        build_relu_0_to_1(a.out)
        return
    for name in a.only or list(_nets()):
        for prec in a.precision:
            if prec not in PRECISIONS.get(name, (prec,)):
                continue
            if a.optimized_only:
                if (a.out / f"{name}_{prec}.npz").exists():
                    _write_optimized(f"{name}_{prec}", a.out)
            else:
                build(name, prec, a.out, a.optimized)


if __name__ == "__main__":
    main()
