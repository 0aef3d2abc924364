"""Batches (issue 19, item 1): ``Simulator.run`` and ``trace`` on N samples stacked along the batch dimension give,
bit for bit, the N single runs concatenated along axis 0 -- raw integers, dequantized floats and every traced
tensor -- whether the model is lowered once more for N (``batch_programs[N]`` holds that program) or falls back to
single runs (``batch_note`` names the node that forced it).

Models: the real test models (PP-OCR cls/det/rec, MobileNetV2), the committed demo model (dynamic batch), a sample
of the op cases of ``tests/test_ops.py`` with int8 and int16 activations on boards ``default``, ``onnx`` and
``ethos-u55-128`` (LiteRT's arithmetic), the LiteRT fixtures on ``ethos-u55-128``, and small models built here for
the fallbacks and the errors. (Measured once over every op case whose inputs have a batch dimension of 1 on the
three boards, u8/s8/s16 with N = 3 and s8/s16 with N = 7: every batch identical to its single runs.)
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import npu_sim
from npu_sim.cli.main import main
from npu_sim.errors import InputError, NpuSimError
from npu_sim.frontend.reader import read_model
from npu_sim.runtime.simulator import Simulator
from tests import qdq_models as qm
from tests.test_ops import CASE_BY_ID

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "models" / "demo" / "digits_cnn.qdq.onnx"
SEEDS = (3, 11, 29)


def stacked(sim, seeds=SEEDS):
    singles = [sim.random_inputs(seed=s) for s in seeds]
    return singles, {k: np.concatenate([f[k] for f in singles]) for k in singles[0]}


def assert_same(got: dict, parts: list[dict], what: str) -> None:
    assert set(got) == set(parts[0]), what
    for name, value in got.items():
        want = np.concatenate([p[name] for p in parts]) if np.ndim(parts[0][name]) else np.stack(
            [p[name] for p in parts])
        assert value.dtype == want.dtype and value.shape == want.shape, f"{what} {name}: {value.shape} {want.shape}"
        assert np.array_equal(value, want), f"{what} {name}: differs from the single runs"


def assert_batch_identical(sim, batched: bool, seeds=SEEDS) -> None:
    """run(raw=True), run() and trace() of the stacked feeds equal the single runs concatenated, bit for bit; the
    batch ran as one program exactly when ``batched``."""
    singles, batch = stacked(sim, seeds)
    n = len(seeds)
    assert_same(sim.run(batch, raw=True), [sim.run(f, raw=True) for f in singles], "raw")
    assert_same(sim.run(batch), [sim.run(f) for f in singles], "dequantized")
    assert_same(sim.trace(batch), [sim.trace(f) for f in singles], "trace")
    program, reason = sim.batch_programs[n]
    assert (program is not None) == batched, sim.batch_note
    assert (sim.batch_note is None) == batched
    assert (reason is None) == batched and (batched or reason in sim.batch_note)


# ---------------------------------------------------------------------------------------------------------------
# real models
# ---------------------------------------------------------------------------------------------------------------
REAL = [("ppocr_cls_a8w8", "default", True), ("ppocr_cls_a8w8", "onnx", True),
        ("ppocr_cls_a16w8", "default", True),
        ("ppocr_det_a8w8", "default", True), ("mobilenetv2_a8w8", "default", True),
        ("mobilenetv2_a8w8", "onnx", True), ("mobilenetv2_a8w8", "ethos-u55-128", True),
        # the recognizer's attention flattens the batch with its 40 time steps (Reshape to 40x120): single runs
        ("ppocr_rec_a8w8", "default", False)]


@pytest.mark.network
@pytest.mark.full  # the real models at batch 16 and one by one: make test-full
@pytest.mark.parametrize("name,board,batched", REAL, ids=[f"{n}-{b}" for n, b, _ in REAL])
def test_real_model_batch_is_single_runs(name, board, batched):
    _, (path,) = qm.real_models(name)
    try:
        sim = npu_sim.load(path, board=board)
    except NpuSimError as exc:
        pytest.skip(f"{name} does not load on {board}: {exc}")
    # 5 samples: past the 4 rows of Gemm's small kernel (kernels.pointwise_small.MAX_PIXELS), its GEMM path
    assert_batch_identical(sim, batched, SEEDS if "det" in name or "rec" in name else SEEDS + (41, 53))


@pytest.mark.parametrize("threads,seeds", [(2, SEEDS), (3, (1, 2, 3, 4, 5)), (8, SEEDS)],
                         ids=["2-threads-3-samples", "3-threads-5-samples", "more-threads-than-samples"])
def test_batch_on_threads_is_single_runs(threads, seeds, monkeypatch):
    """Each thread runs consecutive samples with a program of its own; the batch equals the single runs."""
    monkeypatch.setenv("NPU_SIM_THREADS", str(threads))
    sim = npu_sim.load(DEMO, input_shapes={"input": (1, 1, 8, 8)})
    singles, batch = stacked(sim, seeds)
    assert_same(sim.run(batch, raw=True), [sim.run(f, raw=True) for f in singles], "raw")
    assert_same(sim.trace(batch), [sim.trace(f) for f in singles], "trace")
    used = min(threads, len(seeds))
    programs = sim.thread_programs[(len(seeds), used)]
    sizes = [p.tensors[p.inputs["input"]].shape[0] for p in programs]
    assert sizes == [len(seeds) // used + (i < len(seeds) % used) for i in range(used)]
    assert len({id(p) for p in programs}) == used  # no two threads share a program (nor its nodes' memos)
    assert sim.batch_note is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_batch_threads_each_keep_a_cpu_of_their_own(monkeypatch):
    """Each thread of a batch pins itself to its own CPU of those the process may use (where there are as many),
    and only itself: the caller's affinity is unchanged, and the integers are the single runs'."""
    from npu_sim.runtime import batch as batch_mod
    monkeypatch.setenv("NPU_SIM_THREADS", "2")
    monkeypatch.setattr(batch_mod.os, "sched_getaffinity", lambda pid: {5, 3, 9})
    pinned = []
    monkeypatch.setattr(batch_mod.os, "sched_setaffinity", lambda pid, cpus: pinned.append((pid, set(cpus))))
    sim = npu_sim.load(DEMO, input_shapes={"input": (1, 1, 8, 8)})
    singles, batch = stacked(sim, SEEDS)
    assert_same(sim.run(batch, raw=True), [sim.run(f, raw=True) for f in singles], "raw")
    assert sorted(pinned, key=lambda p: min(p[1])) == [(0, {3}), (0, {5})]
    pinned.clear()
    batch_mod.pin_part(0, 4)  # fewer CPUs than parts: left to the scheduler
    assert pinned == []


def test_batch_threads_setting_is_checked(monkeypatch):
    sim = npu_sim.load(DEMO, input_shapes={"input": (1, 1, 8, 8)})
    _, batch = stacked(sim)
    monkeypatch.setenv("NPU_SIM_THREADS", "two")
    with pytest.raises(InputError, match="NPU_SIM_THREADS='two'"):
        sim.run(batch)


@pytest.mark.parametrize("board", ["default", "onnx"])
def test_demo_model_dynamic_batch(board):
    sim = npu_sim.load(DEMO, board=board, input_shapes={"input": (1, 1, 8, 8)})
    assert_batch_identical(sim, True)
    assert sim.batch_programs[3][0].tensors[sim.program.inputs["input"]].shape == (3, 1, 8, 8)


def test_dynamic_batch_from_memory(tmp_path):
    """A dynamic batch dimension, a model given as a ModelProto (read again, from a copy, for the batch)."""
    path = qm.quantize(qm.small_cnn(batch="N"), tmp_path, "dyn", per_channel=True, activation_type="s8",
                       calib_shapes={"x": (1, 3, 8, 8)})
    model = onnx.load(str(path))
    sim = npu_sim.load(model, input_shapes={"x": (1, 3, 8, 8)})
    before = model.SerializeToString()
    assert_batch_identical(sim, True, seeds=(1, 2, 3, 4, 5))
    assert model.SerializeToString() == before, "the batch read must not change the caller's model"


# ---------------------------------------------------------------------------------------------------------------
# op cases (tests/test_ops.py), int8 and int16 activations, three arithmetics
# ---------------------------------------------------------------------------------------------------------------
OP_CASES = ["conv_basic_pads1", "conv_depthwise_mult2_stride2", "conv1d_pads_stride", "conv_1x1_pointwise",
            "convtranspose_s2_pads_outpad", "add_broadcast_channel", "mul_same_shape", "div_by_activation",
            "concat_conv_branches", "maxpool_k3s2_pads1", "avgpool_ceil_incl_pads1", "globalavgpool",
            "reducemean_hw_keep", "resize_linear_half_pixel_x2", "resize_nearest_asymmetric_floor_sizes_down",
            "leakyrelu_after_conv", "prelu_per_channel", "batchnorm_4d", "layernorm_4d_axis_neg2",
            "layernorm_chain_transposed", "reshape_flat", "transpose_nhwc", "slice_steps2", "split_sizes_axis1",
            "pad_reflect", "gather_const_indices_axis1", "chain_conv_maxpool_flatten_gemm",
            "chain_conv_transpose_reshape_matmul", "lut_sigmoid", "lut_gelu_tanh_opset20"]


@pytest.fixture(scope="module")
def op_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch_ops")
    cache = {}

    def get(case_id: str, act: str):
        if (case_id, act) not in cache:
            c = CASE_BY_ID[case_id]
            parts = c.build(qm.rng_for(c.id))
            nodes, inputs, outputs, inits = parts[:4]
            model = qm.build_model(nodes, inputs, outputs, inits, opset=parts[4] if len(parts) > 4 else qm.OPSET,
                                   name=c.id)
            cache[case_id, act] = qm.quantize(
                model, root, f"{c.id}.{act}".replace(".", "_"), activation_type=act, per_channel=c.per_channel,
                extra_options=c.extra, spread=c.spreads, smooth=c.smooth, calib_count=c.calib_count,
                offset=c.offsets, postprocess=c.postprocess,
                op_types_to_quantize=list(c.op_types) if c.op_types else None)
        return cache[case_id, act]

    return get


@pytest.mark.parametrize("board", ["default", "onnx", pytest.param("ethos-u55-128", marks=pytest.mark.full)])
@pytest.mark.parametrize("act", ["s8", "s16"])
@pytest.mark.parametrize("case_id", OP_CASES)
def test_op_case_batch_is_single_runs(op_model, case_id, act, board):
    if act not in CASE_BY_ID[case_id].acts:
        pytest.skip(f"{case_id} has no {act} variant")
    try:
        sim = npu_sim.load(op_model(case_id, act), board=board)
    except NpuSimError as exc:  # e.g. LiteRT has no recipe for the op: nothing to batch
        pytest.skip(f"refused on {board}: {str(exc)[:80]}")
    assert all(t.shape[0] == 1 for t in (sim.program.tensors[n] for n in sim.program.inputs.values()))
    assert_batch_identical(sim, True)


LITERT = sorted(p.name for p in (ROOT / "tests" / "fixtures" / "tflite").glob("*.onnx")
                if not p.name.startswith("refusal_"))


@pytest.mark.parametrize("fixture", LITERT)
def test_litert_fixture_batch_is_single_runs(fixture):
    """The LiteRT fixtures (QDQ models of .tflite files) on the Ethos-U55 board, i.e. TFLite's arithmetic."""
    sim = npu_sim.load(ROOT / "tests" / "fixtures" / "tflite" / fixture, board="ethos-u55-128")
    # tf2onnx writes TFLite's STRIDED_SLICE/SLICE with the batch axis sliced [0:1]: that model runs N single runs
    assert_batch_identical(sim, not fixture.startswith("slice_"), SEEDS + (41, 53))


# ---------------------------------------------------------------------------------------------------------------
# fallbacks
# ---------------------------------------------------------------------------------------------------------------
def _conv_then(tmp_path, name, tail_nodes, out_shape, inits=None, opset=qm.OPSET):
    """x[1,3,4,4] -> Conv (3->2, 3x3, pads 1) -> c -> ``tail_nodes`` -> y, quantized with int8 activations."""
    rng = qm.rng_for(name)
    all_inits = {"W": qm.weights(rng, (2, 3, 3, 3), 0.3), **(inits or {})}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1])] + tail_nodes
    model = qm.build_model(nodes, {"x": (1, 3, 4, 4)}, {"y": out_shape}, all_inits, opset=opset, name=name)
    return qm.quantize(model, tmp_path, name, activation_type="s8")


def test_reshape_to_one_then_minus_one_batches(tmp_path):
    """A Reshape to the constant [1, -1] (batch 1 written into the model) is read with N first: still one batch."""
    path = _conv_then(tmp_path, "reshape_1m1", [helper.make_node("Reshape", ["c", "shape"], ["y"], name="flat")],
                      (1, 32), {"shape": np.array([1, -1], np.int64)})
    assert_batch_identical(npu_sim.load(path), True)


def test_output_without_batch_dimension_falls_back(tmp_path):
    """A Reshape to the constant [-1] leaves no batch dimension: N single runs, the note naming the Reshape."""
    path = _conv_then(tmp_path, "reshape_m1", [helper.make_node("Reshape", ["c", "shape"], ["y"], name="to_1d")],
                      (32,), {"shape": np.array([-1], np.int64)})
    sim = npu_sim.load(path)
    assert_batch_identical(sim, False)
    assert "node 'to_1d' (Reshape)" in sim.batch_note and "a batch of 3 runs as 3 single runs" in sim.batch_note
    assert sim.run(stacked(sim)[1], raw=True)["y"].shape == (96,)


def test_node_along_batch_axis_falls_back(tmp_path):
    """A Softmax over axis 0 keeps the shapes but would mix the samples: N single runs, naming the node."""
    path = _conv_then(tmp_path, "softmax0", [helper.make_node("Softmax", ["c"], ["y"], name="soft0", axis=0)],
                      (1, 2, 4, 4))
    sim = npu_sim.load(path)
    assert_batch_identical(sim, False)
    assert "node 'soft0' (Softmax)" in sim.batch_note


def test_simulator_from_a_program_falls_back():
    sim = Simulator(npu_sim.load(DEMO, input_shapes={"input": (1, 1, 8, 8)}).program)
    assert_batch_identical(sim, False)
    assert "built from a Program" in sim.batch_note


def test_batch_comes_from_the_model_as_loaded(tmp_path):
    """The batch program is lowered from the model ``load`` read (its ``OpenModel``), not from the file again: a
    file changed or gone since does not matter."""
    path = tmp_path / "digits.onnx"
    path.write_bytes(DEMO.read_bytes())
    sim = npu_sim.load(path, input_shapes={"input": (1, 1, 8, 8)})
    path.write_bytes(b"not a model any more")
    assert_batch_identical(sim, True, seeds=(1, 2))
    path.unlink()
    assert_batch_identical(sim, True, seeds=(4, 5, 6))


# ---------------------------------------------------------------------------------------------------------------
# one sample, errors
# ---------------------------------------------------------------------------------------------------------------
def test_one_sample_runs_as_before():
    sim = npu_sim.load(DEMO, input_shapes={"input": (1, 1, 8, 8)})
    feeds = sim.random_inputs(seed=5)
    out = sim.run(feeds, raw=True)
    direct = sim.execute(feeds).values[sim.program.outputs["logits"]]
    assert np.array_equal(out["logits"], direct) and out["logits"].shape == (1, 10)
    assert sim.batch_programs == {} and sim.batch_note is None


def test_different_batch_sizes_are_refused(op_model):
    sim = npu_sim.load(op_model("add_same_shape", "s8"))
    a = np.zeros((3, 3, 6, 6), np.int8)
    with pytest.raises(InputError, match=r"different batch sizes \('a' 3, 'b' 2\)"):
        sim.run({"a": a, "b": a[:2]})


def test_wrong_shape_says_a_batch_is_accepted():
    sim = npu_sim.load(DEMO, input_shapes={"input": (1, 1, 8, 8)})
    with pytest.raises(InputError, match=r"expected shape 1x1x8x8, got 3x1x8x9 \(a batch of N samples, Nx1x8x8, "
                                         r"is accepted too"):
        sim.run({"input": np.zeros((3, 1, 8, 9), np.float32)})
    assert sim.batch_programs == {}


def test_batch_needs_a_first_dimension_of_one():
    """A program lowered for batch 2 takes 2 samples exactly; 4 is a wrong shape, not a batch of batches."""
    sim = npu_sim.load(DEMO, input_shapes={"input": (2, 1, 8, 8)})
    with pytest.raises(InputError, match="expected shape 2x1x8x8, got 4x1x8x8$"):
        sim.run({"input": np.zeros((4, 1, 8, 8), np.float32)})


def test_read_model_batch_option_keeps_fixed_dimensions():
    """``batch`` overrides only a first dimension of 1 or free; --input-shape still cannot change a fixed one."""
    graph = read_model(str(DEMO), {"input": (1, 1, 8, 8)}, batch=5)
    assert graph.shapes["input"] == (5, 1, 8, 8) and graph.shapes["logits"] == (5, 10)
    with pytest.raises(InputError, match="conflicts with the model's fixed shape"):
        read_model(str(DEMO), {"input": (1, 2, 8, 8)}, batch=5)


def test_run_batch_hooks_once_per_node_and_overflows_add_up(tmp_path):
    """Each node runs once for the batch (its hook is called once, with N in front); a narrow accumulator that
    wraps counts, over the batch, the overflows of the single runs added up, and gives their integers."""
    board = tmp_path / "narrow.toml"
    text = (ROOT / "npu_sim" / "boards" / "default.toml").read_text()
    text = "\n".join("accumulator_bits_8 = 16" if line.startswith("accumulator_bits_8 =") else line
                     for line in text.splitlines()).replace('name = "default"', 'name = "narrow"')
    board.write_text(text)
    x = np.load(DEMO.parent / "digits_test.npz")["x"][:6]
    sim = npu_sim.load(DEMO, board=board, input_shapes={"input": (1, 1, 8, 8)})
    calls = []
    result = sim.run_batch({"input": x}, hooks=[lambda node, ins, outs, dt: calls.append((node.name, outs[0].shape))])
    assert [name for name, _ in calls] == [n.name for n in sim.program.nodes]
    assert all(shape[0] == 6 for _, shape in calls)
    singles = [sim.run_batch({"input": x[i:i + 1]}) for i in range(6)]
    total = {}
    for r in singles:
        for k, v in r.overflows.items():
            total[k] = total.get(k, 0) + v
    assert total and result.overflows == total
    out = sim.program.outputs["logits"]
    assert np.array_equal(result.values[out], np.concatenate([r.values[out] for r in singles]))


def test_cli_run_takes_a_batch_file(tmp_path, capsys):
    """`npu-sim run --input batch.npy` on a model whose batch dimension is fixed at 1: one run of the N samples,
    the outputs (N first) equal to the single runs; a batch that must run as single runs says so on stderr."""
    for name, tail, shape, consts, batched in (
            ("cli_1m1", "Reshape", (1, 32), np.array([1, -1], np.int64), True),
            ("cli_m1", "Reshape", (32,), np.array([-1], np.int64), False)):
        path = _conv_then(tmp_path, name, [helper.make_node(tail, ["c", "shape"], ["y"], name="flat")], shape,
                          {"shape": consts})
        sim = npu_sim.load(path)
        singles, batch = stacked(sim)
        np.save(tmp_path / f"{name}.npy", batch["x"])
        out = tmp_path / f"{name}_out"
        assert main(["run", str(path), "--input", str(tmp_path / f"{name}.npy"), "--out", str(out)]) == 0
        want = np.concatenate([sim.run(f, raw=True)["y"] for f in singles])
        assert np.array_equal(np.load(out / "y.int.npy"), want)
        err = capsys.readouterr().err
        assert ("runs as 3 single runs" in err) == (not batched), err
