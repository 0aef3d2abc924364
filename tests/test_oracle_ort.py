"""External oracle: onnxruntime on real quantized models.

``test_conv_matmul_bit_exact_vs_ort_fused``
    Every Conv/Gemm/MatMul of real A8W8 per-channel models is cut out as a one-op QDQ model (integer input ->
    DequantizeLinear -> op -> QuantizeLinear -> integer output), fed a real integer input captured from
    onnxruntime running the full model, and run by onnxruntime (default graph optimizations, one thread: the
    group fuses into QLinearConv / QGemm / QLinearMatMul) and by npu-sim. ``board="onnx"`` must reproduce every
    integer bit for bit; ``board="default"`` (fixed-point requantization) may differ by at most 1 LSB.

    onnxruntime fuses groups with int8 (signed) activations on ARM only; on x86 it keeps them as
    DequantizeLinear -> float Conv -> QuantizeLinear unless the session option ``session.qdqisint8allowed`` is
    set, which these tests do (and they check that the fusion happened).

``test_end_to_end_cosine``
    Dequantized outputs of whole models, npu-sim vs onnxruntime on the same QDQ model.

Both need onnxruntime's fused integer GEMM kernels to be exact. Its u8 x s8 kernels are not on x86 CPUs without VNNI
(they saturate pairs of products to int16: ``tests/ort_cpu.py`` probes this, ``test_ort_integer_gemm_probe``). There,
the one-op models of the uint8-activation models are run by onnxruntime as their int8-activation twin
(``ort_cpu.s8_twin``: zero points and codes - 128, the same float model), whose s8 x s8 kernels the probe found
exact, and compared with the same bounds; inputs and outputs are shifted back by 128. ``test_end_to_end_cosine``
has no exact oracle for them there (onnxruntime's float32 QLinearAdd of the twin is not the uint8 one) and skips.
Where the u8 x s8 kernels are exact, the models themselves are run, as before.
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.utils import Extractor

import npu_sim
from tests import helpers_oracle as H
from tests import ort_cpu

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "models" / "demo" / "digits_cnn.qdq.onnx"
DEMO_DATA = ROOT / "models" / "demo" / "digits_test.npz"

# op type -> the onnxruntime op its QDQ group must fuse into
FUSED = {"Conv": "QLinearConv", "Gemm": "QGemm", "MatMul": "QLinearMatMul"}
SAMPLES_PER_MODEL = 2   # real integer inputs per one-op model (views held out from calibration)
HELD_OUT = 16           # models.build.CALIBRATION_COUNT: views from here on were not used for calibration


def _model_path(name: str) -> Path:
    if name == "digits_cnn":
        return DEMO
    build = pytest.importorskip("models.build")
    try:
        return build.get(name)
    except getattr(build, "DownloadError", RuntimeError) as exc:  # PP-OCR needs one download, once
        pytest.skip(f"{name}: cannot build the model offline ({exc})")


def _feeds(name: str, count: int) -> list[dict]:
    """Real float feeds: ``count`` held-out views, or for the demo the whole 360-image test set as one batch."""
    if name == "digits_cnn":
        return [{"input": np.load(DEMO_DATA)["x"]}]
    from models.build import sample_inputs
    return sample_inputs(name, count, start=HELD_OUT)


def _fused_session(model, optimized_path: str | None = None):
    """onnxruntime with default optimizations and int8 fusion: the model itself where the integer GEMM kernels it
    runs are exact on this CPU, else its int8-activation twin (same float model, s8 x s8 kernels). For a one-op
    Conv / Gemm / MatMul model the twin is bit for bit what exact u8 x s8 kernels give: the int32 accumulator of
    (code - zero point) products does not move with the shift, and the requantization (acc x scale in float32,
    round, + output zero point, clamp) moves by exactly 128. For the full model (the capture of real inputs) the
    twin's float32 kernels (QLinearAdd, ...) may round a rare tie differently: still a real integer input."""
    if ort_cpu.fallback_reason(model, int8_fusion=True) is None:
        return H.ort_session(model, optimized_path=optimized_path, int8_fusion=True)
    twin = ort_cpu.TwinSession(model, optimized_path=optimized_path)
    reason = ort_cpu.fallback_reason(twin.twin, int8_fusion=True)
    if reason:
        pytest.skip(f"{reason}, nor is one of its int8-activation twin")
    return twin


def test_ort_integer_gemm_probe():
    """The probe behind the exact-oracle choices of these tests (and the skips / unfused comparisons elsewhere):
    every probe reached an onnxruntime integer GEMM kernel, the paths run the kernels we think, and each result is
    either exact or, for u8 x s8, exactly what saturating each pair of products to int16 gives, computed here by
    hand -- so 'saturate' in ``ort_cpu.REASON`` is a measured fact wherever a test falls back."""
    probes = ort_cpu.probes()
    assert {(p.op, p.act, p.int8_fusion) for p in probes} == {
        (op, act, fusion) for op in ort_cpu.PROBE_OPS for act in ("u8", "s8") for fusion in (False, True)}
    for p in probes:
        assert p.fused and p.fused[0] == ort_cpu.PROBE_OPS[p.op], f"onnxruntime did not fuse the probe: {p}"
        two_acts = p.op == "MatMul(a, b)"
        # u8 activations: u8 x s8; s8 activations: onnxruntime's x86 int8 -> uint8 Q/DQ rewrite, then u8 x s8,
        # unless int8 fusion is allowed (s8 x s8); two 8-bit activations: u8 x u8 / s8 x s8
        want = "s8" if p.act == "s8" and (p.int8_fusion or not ort_cpu.X86) else "u8"
        assert p.kind == want + (want if two_acts else "s8"), p
        assert isinstance(p.is_exact, bool)
        assert p.is_exact or p.got == p.saturated, f"neither exact nor the int16 pair saturation: {p}"
    kinds = ort_cpu.exact_kinds()
    assert set(kinds) == {"u8s8", "s8s8", "u8u8"} and all(isinstance(v, bool) for v in kinds.values()), kinds
    # the probe input by hand: 64 products of code 255 (zero point 129) and weight 127, in pairs
    codes, w = np.full(64, 255, np.int64), np.full(64, 127, np.int64)
    exact = int(((codes - 129) * w).sum())
    pairs = codes[0::2] * w[0::2] + codes[1::2] * w[1::2]
    saturated = int(np.clip(pairs, -32768, 32767).sum() - 129 * w.sum())
    assert (exact, saturated) == (1024128, 32) == (ort_cpu.EXACT_ACC, ort_cpu.SATURATED_ACC)
    print("\n[ort-probe] " + ", ".join(f"{k}: {'exact' if v else 'NOT exact'}" for k, v in kinds.items()))
    if not kinds["u8s8"]:
        sat = [p for p in probes if p.kind == "u8s8"]
        assert sat and all(p.got == saturated for p in sat), sat   # the saturation, value for value
        print(f"[ort-probe] {ort_cpu.REASON}: every u8s8 probe gave {saturated}, exact is {exact}")
    else:
        assert all(p.is_exact for p in probes if p.kind == "u8s8")


# ----------------------------------------------------------------------------------------------------------
# (b) every Conv/Gemm/MatMul, one op at a time, bit exact against onnxruntime's fused kernels
# ----------------------------------------------------------------------------------------------------------
@dataclass
class BoardStats:
    elements: int = 0
    differing: int = 0
    max_diff: int = 0
    nodes_differing: list = field(default_factory=list)


# ppocr_rec_a8w8 brings Gemm and MatMul of two activations (attention) on top of Conv.
MAC_MODELS = ["mobilenetv2_a8w8u", "mobilenetv2_a8w8", "ppocr_det_a8w8", "ppocr_det_a8w8u", "ppocr_rec_a8w8",
              "digits_cnn"]


@pytest.fixture(scope="module")
def one_op_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("one_op_models")


@pytest.mark.parametrize("name", MAC_MODELS)
def test_conv_matmul_bit_exact_vs_ort_fused(name, one_op_dir):
    t0 = time.perf_counter()
    path = _model_path(name)
    model = onnx.load(str(path))
    cuts = H.mac_cuts(model)
    assert cuts, f"{name}: no Conv/Gemm/MatMul found"
    n_mac = sum(n.op_type in FUSED for n in model.graph.node)
    assert len(cuts) == n_mac, f"{name}: only {len(cuts)} of {n_mac} Conv/Gemm/MatMul nodes could be cut out"

    # Real integer inputs: onnxruntime on the full model, with every cut input as an extra output.
    inputs_of = sorted({t for c in cuts for t in c.inputs})
    full = _fused_session(H.with_outputs(model, inputs_of))
    captured = [dict(zip(inputs_of, full.run(inputs_of, feeds))) for feeds in _feeds(name, SAMPLES_PER_MODEL)]

    extractor = Extractor(onnx.shape_inference.infer_shapes(model))
    stats = {"onnx": BoardStats(), "default": BoardStats()}
    mismatches = []
    fused_ops = collections.Counter()
    out_dir = one_op_dir / name
    out_dir.mkdir(exist_ok=True)
    for i, cut in enumerate(cuts):
        sub = extractor.extract_model(cut.inputs, [cut.y_int])
        sub_path = out_dir / f"{i:03d}_{cut.op_type}.onnx"
        onnx.save(sub, str(sub_path))
        opt_path = out_dir / f"{i:03d}_{cut.op_type}.ort_optimized.onnx"
        sess = _fused_session(sub_path, optimized_path=str(opt_path))
        ops = [n.op_type for n in onnx.load(str(opt_path)).graph.node]
        assert FUSED[cut.op_type] in ops and cut.op_type not in ops, (
            f"{name} node {cut.node!r}: onnxruntime did not fuse the {cut.op_type} group (optimized graph: {ops})")
        fused_ops[FUSED[cut.op_type] + (" (s8 twin)" if isinstance(sess, ort_cpu.TwinSession) else "")] += 1
        shapes = {t: captured[0][t].shape for t in cut.inputs}
        sims = {b: npu_sim.load(sub, board=b, input_shapes=shapes) for b in stats}
        for s, values in enumerate(captured):
            feeds = {t: values[t] for t in cut.inputs}
            expected = sess.run([cut.y_int], feeds)[0]
            for board, sim in sims.items():
                got = sim.run(feeds, raw=True)[cut.y_int]
                assert got.shape == expected.shape and got.dtype == expected.dtype, (
                    f"{name} {cut.node}: board {board} gave {got.dtype}{got.shape}, onnxruntime "
                    f"{expected.dtype}{expected.shape}")
                diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
                st = stats[board]
                st.elements += diff.size
                n_bad = int(np.count_nonzero(diff))
                st.differing += n_bad
                st.max_diff = max(st.max_diff, int(diff.max()))
                if n_bad:
                    st.nodes_differing.append(cut.node)
                if n_bad and board == "onnx":
                    x_path = out_dir / f"{i:03d}_{cut.op_type}.input{s}.npz"
                    np.savez(x_path, **feeds)
                    where = np.argwhere(diff)[:5].tolist()
                    node = next(n for n in model.graph.node if (n.name or n.output[0]) == cut.node)
                    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                    mismatches.append(
                        f"node {cut.node!r} ({cut.op_type}, attrs {attrs}) inputs "
                        f"{ {t: f'{v.dtype}{list(v.shape)}' for t, v in feeds.items()} } "
                        f"-> {expected.dtype}{list(expected.shape)}: {n_bad}/{diff.size} elements differ, max "
                        f"|diff| {int(diff.max())} LSB, first at {where} (got {got[tuple(where[0])]}, onnxruntime "
                        f"{expected[tuple(where[0])]}); model {sub_path}, input {x_path}")
    dt = time.perf_counter() - t0
    on, de = stats["onnx"], stats["default"]
    print(f"\n[oracle-ort] {name}: {len(cuts)} nodes ({dict(collections.Counter(c.op_type for c in cuts))}, fused "
          f"by onnxruntime into {dict(fused_ops)}) x {len(captured)} real inputs, {on.elements} output integers; "
          f"board onnx: {on.differing} differ (max {on.max_diff} LSB); board default: {de.differing} differ "
          f"in {len(set(de.nodes_differing))} nodes (max {de.max_diff} LSB); {dt:.1f} s")
    assert not mismatches, (f"{name}: board 'onnx' is not bit exact with onnxruntime on {len(mismatches)} "
                            f"node/input pairs:\n  " + "\n  ".join(mismatches))
    assert de.max_diff <= 1, (f"{name}: board 'default' differs from onnxruntime by up to {de.max_diff} LSB "
                              f"(nodes {sorted(set(de.nodes_differing))})")


# ----------------------------------------------------------------------------------------------------------
# (c) end to end: dequantized model outputs against onnxruntime
# ----------------------------------------------------------------------------------------------------------
# Reference: onnxruntime with default optimizations and int8 fusion (both MobileNet variants then run the same
# integer kernels; onnxruntime's plain x86 session runs S8S8 Conv groups in float and is only reported).
# Board "onnx" models onnxruntime's fused kernels (QLinearConv/QGemm/QLinearMatMul, QLinearAdd/QLinearMul,
# QLinearGlobalAveragePool) bit for bit, so its outputs must be identical to onnxruntime's (cosine 1.0).
# Board "default" bounds were measured on 4 held-out views (MobileNet) / the 360 test digits (demo), then given
# a margin: per-sample min cosine 0.99951, over all samples 0.99989 (a8w8) and 0.99986 (a8w8u); the demo is
# identical to onnxruntime on both boards (accuracy 98.33%).
E2E = {
    # name: (samples, min cosine per sample on board default, cosine over all samples on board default)
    "digits_cnn": (None, 0.999, 0.999),
    "mobilenetv2_a8w8": (4, 0.998, 0.9995),
    "mobilenetv2_a8w8u": (4, 0.998, 0.9995),
}


def _first_divergence(model, sim, feeds) -> str:
    """The first quantized tensor (graph order) where board onnx and onnxruntime differ, for the message."""
    producer = {o: n for n in model.graph.node for o in n.output}
    qnodes = [n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in producer]
    names = [q.output[0] for q in qnodes]
    ort_vals = dict(zip(names, H.ort_session(H.with_outputs(model, names), int8_fusion=True).run(names, feeds)))
    traced = sim.trace(feeds)
    for q in qnodes:
        if q.input[0] in traced and not np.array_equal(traced[q.input[0]], ort_vals[q.output[0]]):
            op = producer[q.input[0]]
            n_diff = int(np.count_nonzero(traced[q.input[0]] != ort_vals[q.output[0]]))
            return f"first divergence at {op.op_type} {op.name!r} -> {q.output[0]} ({n_diff} element(s))"
    return "outputs differ but no quantized tensor does"


@pytest.mark.parametrize("name", list(E2E))
def test_end_to_end_cosine(name):
    count, min_default, all_default = E2E[name]
    path = _model_path(name)
    # No twin here: whole models also run onnxruntime's float32 kernels (QLinearAdd: raw codes times float32
    # ratios plus a float32 constant), whose rounding depends on the codes themselves, not only on their offsets
    # from the zero point (measured: the s8 twin of mobilenetv2_a8w8u differs from board onnx at one element of
    # QLinearAdd 'features.15.add', sample 2): no exact oracle of the uint8 model where u8 x s8 is inexact.
    reason = ort_cpu.fallback_reason(path, int8_fusion=True)
    if reason:
        pytest.skip(reason)
    model = onnx.load(str(path))
    feeds_list = _feeds(name, count)
    out_name = model.graph.output[0].name
    in_name = next(iter(feeds_list[0]))
    ref_sess = H.ort_session(path, int8_fusion=True)
    plain_sess = H.ort_session(path)  # onnxruntime's default x86 session
    ref = [ref_sess.run([out_name], f)[0] for f in feeds_list]
    plain = [plain_sess.run([out_name], f)[0] for f in feeds_list]
    ref_all = np.concatenate(ref)
    shapes = {in_name: feeds_list[0][in_name].shape}
    lines, results, explained = [], {}, []
    for board in ("onnx", "default"):
        sim = npu_sim.load(path, board=board, input_shapes=shapes)
        got = [sim.run(f)[out_name] for f in feeds_list]
        got_all = np.concatenate(got)
        # per sample = per row of the outputs (the demo feeds its 360 images as one batch)
        per = [H.cosine(g, r) for g, r in zip(got_all, ref_all)]
        cos_all = H.cosine(got_all, ref_all)
        cos_plain = H.cosine(got_all, np.concatenate(plain))
        top1 = float(np.mean(got_all.argmax(-1) == ref_all.argmax(-1)))
        exact = sum(np.array_equal(g, r) for g, r in zip(got_all, ref_all))
        results[board] = (min(per), cos_all, got_all)
        lines.append(f"board {board}: cosine all {cos_all:.6f}, min per sample {min(per):.6f}, "
                     f"{exact}/{len(per)} samples identical, top-1 agreement {top1:.2%}; "
                     f"vs onnxruntime's plain default session: cosine {cos_plain:.6f}")
        if board == "onnx":
            for i, (g, r) in enumerate(zip(got, ref)):
                if not np.array_equal(g, r):
                    explained.append(f"sample {i}: " + _first_divergence(model, sim, feeds_list[i]))
    print(f"\n[oracle-e2e] {name}:\n  " + "\n  ".join(lines + explained))

    assert not explained and np.array_equal(results["onnx"][2], ref_all), "\n".join(lines + explained)
    assert results["onnx"][1] >= 0.9999, lines[0]
    assert results["default"][0] >= min_default and results["default"][1] >= all_default, lines[1]
    if name == "digits_cnn":
        labels = np.load(DEMO_DATA)["y"]
        acc_ort = float(np.mean(ref_all.argmax(1) == labels))
        accs = {b: float(np.mean(results[b][2].argmax(1) == labels)) for b in results}
        print(f"  top-1 accuracy on {len(labels)} digits: onnxruntime {acc_ort:.2%}, board onnx {accs['onnx']:.2%}, "
              f"board default {accs['default']:.2%}")
        for board, acc in accs.items():
            assert abs(acc - acc_ort) <= 0.01, f"board {board}: accuracy {acc:.2%} vs onnxruntime {acc_ort:.2%}"
    else:
        for board in results:  # the predicted class of every sample agrees with onnxruntime
            assert np.array_equal(results[board][2].argmax(-1), ref_all.argmax(-1)), (board, lines)
