"""What onnx's full checker and onnxruntime say of a mutant (tests/mutant_runner.py), and the differential: the
``--board onnx`` outputs of ``npu-sim run`` against onnxruntime's on the same input.

onnxruntime is asked in two modes (tests/helpers_oracle.py): fused (all graph optimizations and
``session.qdqisint8allowed``: QLinearConv / QGemm / QLinearMatMul, what board onnx models) and unfused (no graph
optimization: DequantizeLinear -> float op -> QuantizeLinear; a model only the fused one refuses, by a limit of
its kernels, is not invalid). Board onnx must equal one of them within 1 LSB of
the output's scale (a rounding tie the two modes themselves break differently); more is a finding. Where
onnxruntime's fused integer GEMM is not exact on this CPU (tests/ort_cpu.py: u8 x s8 without VNNI) the
differential is skipped and says so.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from tests import helpers_oracle, ort_cpu

# onnxruntime's words for "no kernel for this" (not a statement about the model's validity)
UNIMPLEMENTED = ("NOT_IMPLEMENTED", "Could not find an implementation", "is not supported", "not implemented")
# onnx's full check (strict shape inference) refuses a graph output or value_info declared without a shape,
# which the IR allows (TypeProto.Tensor.shape is optional) and onnxruntime runs: not a refusal for validity
CHECKER_QUIRKS = ("Field 'shape' of 'type' is required but missing",)
_OUTPUT = re.compile(r"^output (.+?): \w+\[[^\]]*\] scale=(\S+) zp=(\S+) .* -> (\S+\.int\.npy), dequantized -> "
                     r"(\S+\.npy)$", re.M)


def exact_kinds_forked(path: Path, forked) -> dict:
    """tests/ort_cpu.exact_kinds(), measured in a forked child (no onnxruntime session in the warm parent)."""
    pid = forked(lambda: Path(path).write_text(json.dumps(ort_cpu.exact_kinds())))
    os.waitpid(pid, 0)
    return json.loads(Path(path).read_text()) if Path(path).exists() else {}


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def judge(model: onnx.ModelProto, feeds: dict | None, out_dir: Path, run_onnx: dict, kinds: dict) -> dict:
    """{checker, ort_load, ort_run: None or the refusal; unimplemented: onnxruntime lacks a kernel; diff: the
    differential (None when not made, with ``diff_skipped`` saying why)}."""
    verdict = {"checker": None, "ort_load": None, "ort_run": None, "unimplemented": False, "diff": None,
               "diff_skipped": None}
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # ValidationError, InferenceError, ...
        verdict["checker"] = _short(exc)
        if any(q in str(exc) for q in CHECKER_QUIRKS):
            verdict["checker_quirk"], verdict["checker"] = verdict["checker"], None
    try:
        fused = helpers_oracle.ort_session(model, int8_fusion=True, quiet=True)
    except Exception as exc:
        verdict["ort_load"] = _short(exc)
        verdict["unimplemented"] = any(w in str(exc) for w in UNIMPLEMENTED)
        return verdict
    ort_feeds = feeds if feeds is not None else _zeros(fused)
    if ort_feeds is None:
        verdict["diff_skipped"] = "no input onnxruntime can be fed"
        return verdict
    try:
        expected = dict(zip([o.name for o in fused.get_outputs()], fused.run(None, ort_feeds)))
    except Exception as exc:  # a fused kernel's own limit (QLinearGlobalAveragePool's range) when unfused runs
        try:
            unfused = helpers_oracle.ort_session(model, optimize=False, quiet=True)
            expected = dict(zip([o.name for o in unfused.get_outputs()], unfused.run(None, ort_feeds)))
            verdict["ort_fused_only"] = _short(exc)
        except Exception as exc2:
            verdict["ort_run"] = _short(exc2)
            verdict["unimplemented"] = any(w in str(exc2) for w in UNIMPLEMENTED)
            return verdict
    if run_onnx["code"] != 0 or feeds is None:
        verdict["diff_skipped"] = "board onnx did not run on the fed input"
        return verdict
    verdict["diff"], verdict["diff_skipped"] = differential(model, feeds, expected, run_onnx["out"], kinds)
    return verdict


def differs(verdict: dict) -> bool:
    """Whether the differential found an output more than 1 LSB (or of another shape) from onnxruntime's."""
    return any(isinstance(d, str) or d > 1 for d in (verdict.get("diff") or {}).values())


def _zeros(session) -> dict | None:
    feeds = {}
    for x in session.get_inputs():
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in x.shape]
        if x.type != "tensor(float)" or math.prod(dims) > 10 ** 6:
            return None
        feeds[x.name] = np.zeros(dims, np.float32)
    return feeds


def differential(model, feeds, fused_out: dict, run_stdout: str, kinds: dict):
    """(the largest difference in LSB of each output against the closer onnxruntime mode, None) or (None, why)."""
    try:
        gemm = ort_cpu.gemm_nodes(model, int8_fusion=True)
    except Exception as exc:
        return None, f"onnxruntime's optimized graph: {_short(exc)}"
    inexact = [f"{op} {kind_of(a, w)}" for op, a, w in gemm if not kinds.get(kind_of(a, w), True)]
    if inexact:
        return None, f"{ort_cpu.REASON} ({', '.join(inexact)})"
    unfused_out = dict(zip([o.name for o in model.graph.output],
                           helpers_oracle.ort_session(model, optimize=False, quiet=True).run(None, feeds)))
    written = {m.group(1): m.groups()[1:] for m in _OUTPUT.finditer(run_stdout)}
    worst = {}
    for name, ref in fused_out.items():
        if name not in written:
            return None, f"run printed no output {name!r}"
        scale, _, int_path, deq_path = written[name]
        got = np.load(int_path if np.issubdtype(ref.dtype, np.integer) else deq_path)
        if got.shape != ref.shape:
            worst[name] = f"shape {list(got.shape)} vs onnxruntime {list(ref.shape)}"
            continue
        lsb = 1.0 if np.issubdtype(ref.dtype, np.integer) else float(scale)
        worst[name] = round(min(lsb_diff(got, r, lsb) for r in (ref, unfused_out.get(name, ref))), 3)
    if differs({"diff": worst}):
        nan = nan_quantized(model, feeds)
        if nan:
            return None, (f"onnxruntime quantizes NaN ({nan!r}): ONNX leaves QuantizeLinear of NaN to an integer "
                          f"type undefined (onnxruntime gives qmin, npu-sim 0); differences {worst}")
        wrapped = int32_wrap(model)
        if wrapped:
            return None, (f"onnxruntime computes {wrapped!r} minus its zero point in int32 and wraps (npu-sim "
                          f"exactly; the front door takes such a bias: onnxruntime 1.18 writes them, #21000); "
                          f"differences {worst}")
    return worst, None


def int32_wrap(model) -> str | None:
    """The first int32 DequantizeLinear of a constant whose x minus zero point leaves int32 (on some channel)."""
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type != "DequantizeLinear" or len(n.input) < 3 or n.input[0] not in consts or n.input[2] not in consts:
            continue
        x, z = consts[n.input[0]], consts[n.input[2]]
        if x.dtype != np.int32:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
        zz = z.reshape([-1 if d == axis % max(x.ndim, 1) else 1 for d in range(x.ndim)]) if z.size > 1 else z
        diff = x.astype(np.int64) - zz.astype(np.int64)
        if diff.size and (diff.min() < -2 ** 31 or diff.max() >= 2 ** 31):
            return n.input[0]
    return None


def nan_quantized(model, feeds) -> str | None:
    """The first float tensor a QuantizeLinear reads that is NaN somewhere in onnxruntime's unfused run."""
    consts = {t.name for t in model.graph.initializer} | {x.name for x in model.graph.input}
    names = list(dict.fromkeys(n.input[0] for n in model.graph.node
                               if n.op_type == "QuantizeLinear" and n.input and n.input[0] not in consts))
    probe = helpers_oracle.with_outputs(model, names)
    for out in probe.graph.output:
        if out.name in names:
            out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    try:
        values = helpers_oracle.ort_session(probe, optimize=False, quiet=True).run(names, feeds)
    except Exception:
        return None
    return next((name for name, v in zip(names, values) if np.isnan(v).any()), None)


def kind_of(a_zp_dtype: str, w_zp_dtype: str) -> str:
    """'u8s8', 's8s8'...: the kernel kind of tests/ort_cpu.exact_kinds (activation x weight zero point type)."""
    short = {"uint8": "u8", "int8": "s8"}
    return short.get(a_zp_dtype, a_zp_dtype) + short.get(w_zp_dtype, w_zp_dtype)


def lsb_diff(got: np.ndarray, ref: np.ndarray, lsb: float) -> float:
    """The largest |got - ref| in units of ``lsb`` (NaN equals NaN; NaN against a number is infinite)."""
    a, b = got.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
    d[(np.isnan(a) & np.isnan(b)) | (a == b)] = 0.0
    d[np.isnan(d)] = np.inf
    return float(np.max(d, initial=0.0)) / lsb
