"""Train, export and quantize the npu-sim demo model (a small CNN on sklearn digits).

Rebuild every artifact in this directory with:

    python models/demo/train.py

Requirements: numpy, onnx, onnxruntime, scikit-learn (``pip install -e .[demo-train]``).
Training is plain numpy (hand-written forward/backward, im2col convolutions),
single-threaded and seeded, so it is deterministic on a given machine and runs
in well under a minute on a CPU.

Pipeline
--------
1. ``load_digits`` (1797 8x8 images, pixels 0..16) -> x/8 - 1 in [-1, 1],
   stratified 80/20 split (test = 360 images) with a fixed seed.
2. Train  Conv3x3(1->16)+BN+Relu -> Conv3x3(16->16)+Relu -> Add(residual)
   -> MaxPool2x2 -> Conv3x3(16->32)+Relu -> GlobalAveragePool -> Flatten
   -> Gemm(32->10) with Adam on softmax cross-entropy.
3. Fold BN into the first conv and export an opset-17 ONNX graph with
   onnx.helper (input ``input`` [N,1,8,8], output ``logits`` [N,10]).
4. Quantize with onnxruntime ``quantize_static`` (QDQ, int8 activations and
   weights, symmetric, per-channel weights, input scale forced to exactly
   1/128 with zero point 0), calibrated on 200 training images.
5. Evaluate both models with onnxruntime and store the accuracies in the
   quantized model's metadata_props.
"""

from __future__ import annotations

import os

# Single-threaded BLAS for bit-reproducible training; must precede numpy import.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
FLOAT_ONNX = HERE / "digits_cnn.float.onnx"
QDQ_ONNX = HERE / "digits_cnn.qdq.onnx"
TEST_NPZ = HERE / "digits_test.npz"
SAMPLE_NPY = HERE / "digits_sample.npy"
README = HERE / "README.md"

SPLIT_SEED = 0
INIT_SEED = 1234
SHUFFLE_SEED = 4321
CALIB_SEED = 7
N_TEST = 360
N_CALIB = 200
EPOCHS = 40
BATCH = 32
LR = 3e-3
WEIGHT_DECAY = 1e-4
BN_EPS = 1e-5
BN_MOMENTUM = 0.1
OPSET = 17
IR_VERSION = 8  # minimum IR version for opset 17; widest reader compatibility
INPUT_SCALE = np.float32(1.0 / 128.0)
SOURCE = "npu-sim models/demo/train.py: numpy CNN on sklearn load_digits, onnxruntime quantize_static QDQ int8"


# ----------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------
def load_data():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / np.float32(8.0) - np.float32(1.0)).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=N_TEST, stratify=y, random_state=SPLIT_SEED, shuffle=True
    )
    return (
        np.ascontiguousarray(x_tr, dtype=np.float32),
        np.ascontiguousarray(y_tr, dtype=np.int64),
        np.ascontiguousarray(x_te, dtype=np.float32),
        np.ascontiguousarray(y_te, dtype=np.int64),
    )


# ----------------------------------------------------------------------------
# Numpy layers. Activations are NHWC internally; weights use ONNX layouts
# (conv [O, C, kh, kw], gemm [out, in] i.e. transB=1).
# ----------------------------------------------------------------------------
def im2col3x3(x):
    """x [N,H,W,C] -> cols [N*H*W, 9*C] ordered (kh, kw, c), padding 1, stride 1."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = [xp[:, i : i + h, j : j + w, :] for i in range(3) for j in range(3)]
    return np.stack(patches, axis=3).reshape(n * h * w, 9 * c)


def col2im3x3(dcols, shape):
    n, h, w, c = shape
    d = dcols.reshape(n, h, w, 9, c)
    dxp = np.zeros((n, h + 2, w + 2, c), dtype=dcols.dtype)
    k = 0
    for i in range(3):
        for j in range(3):
            dxp[:, i : i + h, j : j + w, :] += d[:, :, :, k, :]
            k += 1
    return dxp[:, 1:-1, 1:-1, :]


def conv_fwd(x, wt, b):
    n, h, w, _ = x.shape
    o = wt.shape[0]
    cols = im2col3x3(x)
    wm = wt.transpose(0, 2, 3, 1).reshape(o, -1)  # [O, 9C] in (kh, kw, c) order
    out = (cols @ wm.T + b).reshape(n, h, w, o)
    return out, (cols, wm, x.shape)


def conv_bwd(dout, cache, wshape):
    cols, wm, xshape = cache
    o = wshape[0]
    d2 = dout.reshape(-1, o)
    dwm = d2.T @ cols  # [O, 9C]
    dw = dwm.reshape(o, 3, 3, wshape[1]).transpose(0, 3, 1, 2)
    db = d2.sum(axis=0)
    dx = col2im3x3(d2 @ wm, xshape)
    return dx, dw, db


def bn_fwd(x, gamma, beta, state, train):
    if train:
        mu = x.mean(axis=(0, 1, 2))
        var = x.var(axis=(0, 1, 2))
        state["mean"] = (1 - BN_MOMENTUM) * state["mean"] + BN_MOMENTUM * mu
        m = x.shape[0] * x.shape[1] * x.shape[2]
        state["var"] = (1 - BN_MOMENTUM) * state["var"] + BN_MOMENTUM * var * m / (m - 1)
    else:
        mu, var = state["mean"], state["var"]
    inv = 1.0 / np.sqrt(var + BN_EPS)
    xhat = (x - mu) * inv
    return gamma * xhat + beta, (xhat, inv)


def bn_bwd(dout, cache, gamma):
    xhat, inv = cache
    m = dout.shape[0] * dout.shape[1] * dout.shape[2]
    dgamma = (dout * xhat).sum(axis=(0, 1, 2))
    dbeta = dout.sum(axis=(0, 1, 2))
    dxhat = dout * gamma
    dx = inv / m * (m * dxhat - dxhat.sum(axis=(0, 1, 2)) - xhat * (dxhat * xhat).sum(axis=(0, 1, 2)))
    return dx, dgamma, dbeta


def maxpool_fwd(x):
    n, h, w, c = x.shape
    win = x.reshape(n, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 5, 2, 4).reshape(n, h // 2, w // 2, c, 4)
    idx = win.argmax(axis=-1)
    out = np.take_along_axis(win, idx[..., None], axis=-1)[..., 0]
    return out, (idx, x.shape)


def maxpool_bwd(dout, cache):
    idx, (n, h, w, c) = cache
    dwin = np.zeros(idx.shape + (4,), dtype=dout.dtype)
    np.put_along_axis(dwin, idx[..., None], dout[..., None], axis=-1)
    return dwin.reshape(n, h // 2, w // 2, c, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(n, h, w, c)


# ----------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------
def init_params(rng):
    def he(shape, fan_in):
        return rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shape)

    p = {
        "w1": he((16, 1, 3, 3), 9),
        "b1": np.zeros(16),
        "g1": np.ones(16),
        "be1": np.zeros(16),
        "w2": he((16, 16, 3, 3), 144),
        "b2": np.zeros(16),
        "w3": he((32, 16, 3, 3), 144),
        "b3": np.zeros(32),
        "w4": rng.normal(0.0, np.sqrt(1.0 / 32), size=(10, 32)),
        "b4": np.zeros(10),
    }
    bn_state = {"mean": np.zeros(16), "var": np.ones(16)}
    return p, bn_state


def forward(p, bn_state, x_nchw, train):
    x = x_nchw.astype(np.float64).transpose(0, 2, 3, 1)
    c1, k1 = conv_fwd(x, p["w1"], p["b1"])
    n1, kbn = bn_fwd(c1, p["g1"], p["be1"], bn_state, train)
    a1 = np.maximum(n1, 0.0)
    c2, k2 = conv_fwd(a1, p["w2"], p["b2"])
    a2 = np.maximum(c2, 0.0)
    s = a1 + a2
    mp, kmp = maxpool_fwd(s)
    c3, k3 = conv_fwd(mp, p["w3"], p["b3"])
    a3 = np.maximum(c3, 0.0)
    gap = a3.mean(axis=(1, 2))  # [N, 32]
    logits = gap @ p["w4"].T + p["b4"]
    cache = (k1, kbn, n1, k2, c2, kmp, k3, c3, a3.shape, gap)
    return logits, cache


def backward(p, cache, dlogits):
    k1, kbn, n1, k2, c2, kmp, k3, c3, a3shape, gap = cache
    g = {}
    g["w4"] = dlogits.T @ gap
    g["b4"] = dlogits.sum(axis=0)
    dgap = dlogits @ p["w4"]
    n, h, w, c = a3shape
    da3 = np.broadcast_to(dgap[:, None, None, :] / (h * w), a3shape)
    dc3 = da3 * (c3 > 0)
    dmp, g["w3"], g["b3"] = conv_bwd(dc3, k3, p["w3"].shape)
    ds = maxpool_bwd(dmp, kmp)
    dc2 = ds * (c2 > 0)
    da1_res, g["w2"], g["b2"] = conv_bwd(dc2, k2, p["w2"].shape)
    da1 = ds + da1_res
    dn1 = da1 * (n1 > 0)
    dc1, g["g1"], g["be1"] = bn_bwd(dn1, kbn, p["g1"])
    _, g["w1"], g["b1"] = conv_bwd(dc1, k1, p["w1"].shape)
    return g


def softmax_xent(logits, y):
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    prob = e / e.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = -np.log(prob[np.arange(n), y] + 1e-12).mean()
    d = prob.copy()
    d[np.arange(n), y] -= 1.0
    return loss, d / n


def predict(p, bn_state, x, batch=512):
    out = [forward(p, bn_state, x[i : i + batch], train=False)[0] for i in range(0, len(x), batch)]
    return np.concatenate(out).argmax(axis=1)


def train(x_tr, y_tr, x_te, y_te):
    rng = np.random.default_rng(INIT_SEED)
    shuffle_rng = np.random.default_rng(SHUFFLE_SEED)
    p, bn_state = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    b1, b2, step = 0.9, 0.999, 0
    n = len(x_tr)
    steps_per_epoch = (n + BATCH - 1) // BATCH
    total_steps = EPOCHS * steps_per_epoch
    for epoch in range(EPOCHS):
        perm = shuffle_rng.permutation(n)
        losses = []
        for i in range(0, n, BATCH):
            idx = perm[i : i + BATCH]
            logits, cache = forward(p, bn_state, x_tr[idx], train=True)
            loss, dlogits = softmax_xent(logits, y_tr[idx])
            losses.append(loss)
            grads = backward(p, cache, dlogits)
            step += 1
            lr = LR * 0.5 * (1.0 + np.cos(np.pi * (step - 1) / total_steps))  # cosine decay
            for k in p:
                gk = grads[k]
                if k.startswith("w"):
                    gk = gk + WEIGHT_DECAY * p[k]
                m[k] = b1 * m[k] + (1 - b1) * gk
                v[k] = b2 * v[k] + (1 - b2) * gk * gk
                mhat = m[k] / (1 - b1**step)
                vhat = v[k] / (1 - b2**step)
                p[k] = p[k] - lr * mhat / (np.sqrt(vhat) + 1e-8)
        if epoch % 5 == 4 or epoch == EPOCHS - 1:
            acc_te = (predict(p, bn_state, x_te) == y_te).mean()
            print(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}  test acc {acc_te:.4f}", flush=True)
    return p, bn_state


# ----------------------------------------------------------------------------
# ONNX export
# ----------------------------------------------------------------------------
def fold_bn(p, bn_state):
    scale = p["g1"] / np.sqrt(bn_state["var"] + BN_EPS)
    w = p["w1"] * scale[:, None, None, None]
    b = (p["b1"] - bn_state["mean"]) * scale + p["be1"]
    return w, b


def export_float(p, bn_state, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w1, b1 = fold_bn(p, bn_state)
    inits = {
        "conv1.weight": w1,
        "conv1.bias": b1,
        "conv2.weight": p["w2"],
        "conv2.bias": p["b2"],
        "conv3.weight": p["w3"],
        "conv3.bias": p["b3"],
        "fc.weight": p["w4"],
        "fc.bias": p["b4"],
    }
    initializers = [numpy_helper.from_array(np.asarray(a, dtype=np.float32), name=k) for k, a in inits.items()]
    conv_attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["conv1_out"], name="conv1", **conv_attrs),
        helper.make_node("Relu", ["conv1_out"], ["relu1_out"], name="relu1"),
        helper.make_node("Conv", ["relu1_out", "conv2.weight", "conv2.bias"], ["conv2_out"], name="conv2", **conv_attrs),
        helper.make_node("Relu", ["conv2_out"], ["relu2_out"], name="relu2"),
        helper.make_node("Add", ["relu1_out", "relu2_out"], ["add_out"], name="residual_add"),
        helper.make_node("MaxPool", ["add_out"], ["pool_out"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool_out", "conv3.weight", "conv3.bias"], ["conv3_out"], name="conv3", **conv_attrs),
        helper.make_node("Relu", ["conv3_out"], ["relu3_out"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["relu3_out"], ["gap_out"], name="gap"),
        helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat_out", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="npu-sim-demo",
        producer_version="1",
        doc_string="Small CNN on sklearn digits (8x8), input x/8-1 in [-1,1]. Built by models/demo/train.py.",
    )
    model.ir_version = IR_VERSION
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return model


# ----------------------------------------------------------------------------
# Quantization
# ----------------------------------------------------------------------------
class _CalibReader:
    """Feeds calibration images one at a time (batch 1)."""

    def __init__(self, x):
        self._it = iter([{"input": x[i : i + 1]} for i in range(len(x))])

    def get_next(self):
        return next(self._it, None)


def quantize(float_path, qdq_path, x_calib):
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    extra_options = {
        "ActivationSymmetric": True,
        "WeightSymmetric": True,
        "TensorQuantOverrides": {
            # This onnxruntime needs 0-d numpy arrays here (numpy scalars are rejected).
            "input": [{"scale": np.array(INPUT_SCALE, dtype=np.float32), "zero_point": np.array(0, dtype=np.int8)}],
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        # Calibration writes an augmented model + temp files; keep them out of the repo.
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            quantize_static(
                str(float_path),
                str(qdq_path),
                _CalibReader(x_calib),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
                extra_options=extra_options,
            )
        finally:
            os.chdir(cwd)


def ort_session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def ort_accuracy(path, x, y):
    sess = ort_session(path)
    logits = sess.run(["logits"], {"input": x})[0]
    return float((logits.argmax(axis=1) == y).mean()), logits


def finalize_qdq(qdq_path, float_acc, qdq_acc):
    import onnx

    model = onnx.load(str(qdq_path))
    # Restore the dynamic batch dim in case the quantizer pinned it.
    for vi in list(model.graph.input) + list(model.graph.output):
        dim0 = vi.type.tensor_type.shape.dim[0]
        dim0.Clear()
        dim0.dim_param = "N"
    props = {
        "float_test_accuracy": f"{float_acc:.6f}",
        "ort_qdq_test_accuracy": f"{qdq_acc:.6f}",
        "source": SOURCE,
    }
    keep = [pp for pp in model.metadata_props if pp.key not in props]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for k, val in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, val
    onnx.checker.check_model(model)
    onnx.save(model, str(qdq_path))


def write_readme(float_acc, qdq_acc, np_acc):
    n_correct_f = round(float_acc * N_TEST)
    n_correct_q = round(qdq_acc * N_TEST)
    text = f"""# Demo model: small CNN on sklearn digits

Built by `python models/demo/train.py` (numpy, onnx, onnxruntime, scikit-learn;
`pip install -e .[demo-train]`). Deterministic: fixed seeds, single-threaded,
CPU only; the whole script takes about 10 s on one core.

- Data: `sklearn.datasets.load_digits` (1797 8x8 images, pixels 0..16), input
  `x/8 - 1` in [-1, 1], float32 `[N, 1, 8, 8]`. Stratified 80/20 split
  (`random_state={SPLIT_SEED}`): 1437 train / {N_TEST} test images.
- Training: hand-written numpy forward/backward (im2col convs), Adam
  (lr {LR}, cosine decay, weight decay {WEIGHT_DECAY}), batch {BATCH}, {EPOCHS} epochs, softmax cross-entropy.
- Architecture: Conv3x3 1->16 pad1 (+BatchNorm, folded at export) + Relu ->
  Conv3x3 16->16 pad1 + Relu -> Add(residual with first Relu) -> MaxPool 2x2 ->
  Conv3x3 16->32 pad1 + Relu -> GlobalAveragePool -> Flatten -> Gemm 32->10 (`logits`).

Files:

- `digits_cnn.float.onnx`: float model, opset {OPSET}, input `input` `[N,1,8,8]`, output `logits` `[N,10]`.
- `digits_cnn.qdq.onnx`: onnxruntime `quantize_static` QDQ model: int8 activations and
  weights, symmetric (all zero points 0), per-channel weights, int32 biases, input
  scale forced to exactly 1/128 (zp 0); MinMax calibration on {N_CALIB} training images.
  Accuracies and provenance are in its `metadata_props`
  (`float_test_accuracy`, `ort_qdq_test_accuracy`, `source`).
- `digits_test.npz`: `x` float32 `[{N_TEST},1,8,8]`, `y` int64 `[{N_TEST}]` (the test split).
- `digits_sample.npy`: one test image, float32 `[1,1,8,8]` (`x[0]`, label {{label}}).

Test accuracy ({N_TEST} images):

| model | accuracy |
|---|---|
| float (numpy) | {np_acc:.4f} |
| float (onnxruntime) | {float_acc:.4f} ({n_correct_f}/{N_TEST}) |
| QDQ int8 (onnxruntime) | {qdq_acc:.4f} ({n_correct_q}/{N_TEST}) |

Notes: pixel value 16 maps to 1.0, which the int8 input (scale 1/128) saturates to
127/128. Because activations are symmetric, onnxruntime keeps each Relu as its own
DQ -> Relu -> Q (same scale as the Conv output); MaxPool and Flatten reuse their input's scale.
"""
    return text


def main():
    t0 = time.perf_counter()
    x_tr, y_tr, x_te, y_te = load_data()
    print(f"train {x_tr.shape}  test {x_te.shape}", flush=True)

    t_train = time.perf_counter()
    p, bn_state = train(x_tr, y_tr, x_te, y_te)
    train_seconds = time.perf_counter() - t_train
    np_acc = float((predict(p, bn_state, x_te) == y_te).mean())
    print(f"training time {train_seconds:.1f} s, numpy float test acc {np_acc:.4f}", flush=True)

    HERE.mkdir(parents=True, exist_ok=True)
    export_float(p, bn_state, FLOAT_ONNX)
    float_acc, float_logits = ort_accuracy(FLOAT_ONNX, x_te, y_te)
    np_logits = np.concatenate([forward(p, bn_state, x_te, train=False)[0]])
    print(f"onnx float test acc {float_acc:.4f}  (max |ort - numpy| logit diff {np.abs(float_logits - np_logits).max():.2e})")

    calib_rng = np.random.default_rng(CALIB_SEED)
    calib_idx = np.sort(calib_rng.choice(len(x_tr), size=N_CALIB, replace=False))
    quantize(FLOAT_ONNX, QDQ_ONNX, x_tr[calib_idx])
    qdq_acc, _ = ort_accuracy(QDQ_ONNX, x_te, y_te)
    print(f"onnxruntime QDQ test acc {qdq_acc:.4f}")
    finalize_qdq(QDQ_ONNX, float_acc, qdq_acc)

    np.savez_compressed(TEST_NPZ, x=x_te, y=y_te)
    np.save(SAMPLE_NPY, np.ascontiguousarray(x_te[0:1]))
    README.write_text(write_readme(float_acc, qdq_acc, np_acc).replace("{label}", str(int(y_te[0]))))

    if float_acc < 0.95 or qdq_acc < 0.95:
        print("ERROR: accuracy below 0.95", file=sys.stderr)
        return 1
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
