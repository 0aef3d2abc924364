"""Latency estimate (npu_sim.analysis.cost, `npu-sim estimate`): closed-form cases on the ethos-u55-128 preset (Vela 5.2
reference figures), monotonicity and scaling properties, serialization and the command line."""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from budget import examples
from onnx import helper

import npu_sim
from npu_sim.analysis import cost
from npu_sim.boards import load_board
from npu_sim.cli.main import main as cli_main
from npu_sim.ir import Geometry, Node, Program, QParams, Tensor
from npu_sim.render.estimate import format_table

from qdq_models import QTYPES, build_model, quantize, rng_for, weights

U55 = load_board("ethos-u55-128")
DEMO = "models/demo/digits_cnn.qdq.onnx"
DEMO_SHAPE = {"input": (1, 1, 8, 8)}

# Vela 5.2, Ethos-U55-128, High_End_Embedded, Sram_Only (shared/reference/cycle-estimation.md)
VELA_CONV_INT8, VELA_CONV_16X8 = 905_204, 1_810_222
# We reproduce Vela's MAC and output-pipeline cycles of this layer exactly (903,168 + one block); the tail differs
# by a few hundred cycles because Vela picks the output block per layer from its SHRAM allocator (8x8x16 for int8,
# 19x4x16 for int16) and adds a command-issue limit we do not model; our preset uses one nominal 8x8x32 block.
TOLERANCE = 0.001


def _conv_model(tmp_path, act: str):
    rng = rng_for("cost", "conv56", act)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    model = build_model(nodes, {"x": (1, 64, 56, 56)}, {"y": None},
                        {"w": weights(rng, (64, 64, 3, 3), 0.1), "b": weights(rng, (64,), 0.1)})
    return quantize(model, tmp_path, f"conv56_{act}", activation_type=QTYPES[act], weight_type=QTYPES["s8"],
                    per_channel=True, calib_count=2)


@pytest.fixture(scope="module")
def conv_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("cost")
    return {act: _conv_model(d, act) for act in ("s8", "s16")}


def _conv_row(est):
    rows = [r for r in est.layers if r.op == "Conv"]
    assert len(rows) == 1
    return rows[0]


def test_conv3x3_56x56x64_int8_matches_vela(conv_models):
    est = npu_sim.estimate(conv_models["s8"], board="ethos-u55-128")
    row = _conv_row(est)
    assert row.macs == 56 * 56 * 64 * 64 * 9 == 115_605_504
    assert row.precision == "a8w8" and row.bound == "compute"
    # MAC stage: 98 blocks of 8x8x32, each 9 kernel steps x 4 ublock columns x 2 passes of 32 channels x 128 cycles
    assert row.compute_cycles == 903_168 + 1024          # + one block of the output pipeline (0.5 cycle/output)
    assert abs(row.cycles - VELA_CONV_INT8) / VELA_CONV_INT8 < TOLERANCE
    assert est.summary["total_cycles"] == row.cycles     # the input Quantize is the host's


def test_conv3x3_56x56x64_16x8_is_twice(conv_models):
    r8 = _conv_row(npu_sim.estimate(conv_models["s8"], board="ethos-u55-128"))
    r16 = _conv_row(npu_sim.estimate(conv_models["s16"], board="ethos-u55-128"))
    assert r16.precision == "a16w8"
    assert r16.compute_cycles == 2 * 903_168 + 1536      # MAC stage exactly 2x; 40-bit output 0.75 cycle/output
    assert abs(r16.cycles - VELA_CONV_16X8) / VELA_CONV_16X8 < TOLERANCE
    assert abs(r16.cycles / r8.cycles - VELA_CONV_16X8 / VELA_CONV_INT8) < 0.002


# ---------------------------------------------------------------------------------------------------------------
# synthetic programs for the properties (no ONNX round trip: fast)
# ---------------------------------------------------------------------------------------------------------------
def _q(dtype):
    return QParams(dtype, np.float32(0.1), np.int64(0))


def _conv_program(board, cin, cout, h, w, k=3, stride=1, depthwise=False, act="int8"):
    groups = cin if depthwise else 1
    if depthwise:
        cout = cin
    oh, ow = (h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1
    x = Tensor("x", "x", (1, cin, h, w), _q(act))
    wt = Tensor("w", "w", (cout, cin // groups, k, k), _q("int8"), data=np.zeros((cout, cin // groups, k, k), np.int8))
    y = Tensor("y", "y", (1, cout, oh, ow), _q(act))
    p = k // 2
    node = Node("conv", "Conv", ["x", "w"], ["y"], run=None,
                attrs={"kernel": (k, k), "stride": (stride, stride), "pads": (p, p, p, p), "dilation": (1, 1),
                       "group": groups},
                geometry=Geometry((k, k), (stride, stride), (p, p, p, p), (1, 1), groups))
    return Program({"x": x, "w": wt, "y": y}, [node], {"x": "x"}, {"y": "y"}, board)


def _with_cost(board, **changes):
    return replace(board, cost=replace(board.cost, **changes))


def _cycles(board, **kw):
    return cost.estimate_program(_conv_program(board, **kw), board).summary["total_cycles"]


shapes = st.fixed_dictionaries({"cin": st.integers(1, 96), "cout": st.integers(1, 96), "h": st.integers(1, 40),
                                "w": st.integers(1, 40), "k": st.sampled_from([1, 3, 5]),
                                "stride": st.sampled_from([1, 2]), "depthwise": st.booleans(),
                                "act": st.sampled_from(["int8", "int16"])})


@settings(max_examples=examples(60), deadline=None)
@given(shapes, st.sampled_from(["cin", "cout", "h", "w"]), st.integers(1, 40),
       st.sampled_from(["ethos-u55-128", "default"]))
# found by hypothesis: a 1x1 stride-2 conv whose input grows from 7x1 to 7x2 reads the same pixels; the burst was
# sized by the tensor's row (2 bytes, not 1) instead of the block's, so it got cheaper (124 -> 114 cycles)
@example(dict(cin=1, cout=1, h=7, w=1, k=1, stride=2, depthwise=False, act="int8"), "w", 1, "ethos-u55-128")
def test_cycles_never_decrease_when_the_layer_grows(s, dim, grow, board_name):
    board = load_board(board_name)
    if s["depthwise"]:  # one channel with group = 1 is an ordinary convolution: compare depthwise with depthwise
        s = dict(s, cin=max(2, s["cin"]))
    bigger = dict(s, **{dim: s[dim] + grow})
    assert _cycles(board, **bigger) >= _cycles(board, **s)


@settings(max_examples=examples(60), deadline=None)
@given(shapes, st.sampled_from(["step", "ublock_c", "bandwidth"]), st.sampled_from([2, 4]))
def test_cycles_never_increase_with_more_macs_or_bandwidth(s, what, factor):
    # More MACs per cycle = a faster step (more input channels per cycle) or more output channels per micro-block.
    # (Reshaping the micro-block spatially is not monotone, in Vela either: the weight-bandwidth floor per step
    # and the tiling waste of a taller/wider micro-block can cost more on a small layer.)
    board = U55
    c = board.cost
    if what == "step":
        faster = _with_cost(board, ublock_step_cycles=c.ublock_step_cycles // factor,
                            weight_step_cycles=c.weight_step_cycles // factor)
    elif what == "ublock_c":
        faster = _with_cost(board, ublock=(c.ublock[0], c.ublock[1], c.ublock[2] * factor))
    else:
        mems = {n: replace(m, bytes_per_cycle=m.bytes_per_cycle * factor) for n, m in c.memory.memories.items()}
        faster = _with_cost(board, memory=replace(c.memory, memories=mems))
    assert faster.cost.macs_per_cycle >= c.macs_per_cycle
    assert _cycles(faster, **s) <= _cycles(board, **s)


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(1, 4), st.integers(1, 96), st.integers(1, 40), st.integers(1, 40), st.sampled_from([1, 3, 5]),
       st.sampled_from(["conv", "depthwise"]))
def test_int16_mac_cycles_are_factor_times_int8(cin_blocks, cout, h, w, k, kind):
    cfg = U55.cost
    cin = cin_blocks * cfg.ifm_depth_block
    _, nu, _ = cost.block_geometry(cfg, h, w, cout)
    c8 = cost.mac_block_cycles(cfg, kind, nu, k * k, cin, wide=False)
    c16 = cost.mac_block_cycles(cfg, kind, nu, k * k, cin, wide=True)
    if kind == "conv" or 4 * nu[0] * nu[1] >= cfg.weight_step_cycles:  # depthwise below the weight floor: no 2x
        assert c16 == cfg.int16_factor * c8
    # and on whole MAC-bound layers
    prog8 = _conv_program(U55, cin, cout, h, w, k, depthwise=kind == "depthwise")
    prog16 = _conv_program(U55, cin, cout, h, w, k, depthwise=kind == "depthwise", act="int16")
    r8, r16 = cost.layer_cost(cfg, prog8, prog8.nodes[0]), cost.layer_cost(cfg, prog16, prog16.nodes[0])
    (bh, bw, bc), _, _ = cost.block_geometry(cfg, prog8.tensors["y"].shape[2], prog8.tensors["y"].shape[3],
                                             prog8.tensors["y"].shape[1])
    ao8 = math.ceil(cfg.output_cycles_per_element["mac"] * bh * bw * bc)
    ao16 = math.ceil(cfg.output_cycles_per_element["mac_wide"] * bh * bw * bc)
    c8 = cost.mac_block_cycles(cfg, kind, nu, k * k, cin, wide=False)
    if kind == "conv" and c8 > ao16:  # MAC-bound in both precisions
        assert r16.compute_cycles - ao16 == cfg.int16_factor * (r8.compute_cycles - ao8)


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(shapes, min_size=1, max_size=4))
def test_layer_sum_is_total(layers):
    nodes, tensors = [], {}
    for i, s in enumerate(layers):
        p = _conv_program(U55, **s)
        for t in p.tensors.values():
            tensors[f"{t.name}{i}"] = replace(t, name=f"{t.name}{i}")
        n = p.nodes[0]
        nodes.append(Node(f"conv{i}", n.op, [f"x{i}", f"w{i}"], [f"y{i}"], None, n.params, n.attrs,
                          geometry=n.geometry))
    est = cost.estimate_program(Program(tensors, nodes, {}, {}, U55), U55)
    assert sum(r.cycles for r in est.layers) == est.summary["total_cycles"]
    assert abs(sum(r.share for r in est.layers) - 100.0) < 1e-6
    assert est.summary["total_macs"] == sum(r.macs for r in est.layers)


def test_depthwise_reaches_an_eighth_of_peak():
    prog = _conv_program(U55, 64, 64, 56, 56, 3, depthwise=True)
    r = cost.layer_cost(U55.cost, prog, prog.nodes[0])
    assert r.op_class == "depthwise" and r.macs == 56 * 56 * 64 * 9
    # 4 kernel elements per 4-cycle step on 16 outputs: ceil(9/4)=3 steps -> 9/12 of 1/8 of the peak
    assert r.compute_cycles == pytest.approx(56 * 56 * 64 / 16 * 3 * 4 + 1024, abs=1)


def test_input_layer_uses_part_kernel_traversal():
    prog = _conv_program(U55, 3, 32, 224, 224, 3, stride=2)
    r = cost.layer_cost(U55.cost, prog, prog.nodes[0])
    # Vela: 301,824 MAC cycles for MobileNetV2's first layer (3 kernel steps of 4 elements, one 8-channel pass)
    assert r.compute_cycles == pytest.approx(112 * 112 * 32 / 16 * 3 * 4 + 1024, abs=1)


def test_spill_and_cpu_fallback(tmp_path):
    mem = load_board("default").memory
    small = _with_cost(load_board("default"), memory=replace(mem, memories={
        **mem.memories, "sram": replace(mem.sram, size_bytes=1024)}))
    prog = _conv_program(small, 16, 16, 32, 32)
    est = cost.estimate_program(prog, small)
    assert est.layers[0].spill and "ddr" in est.layers[0].bytes and est.summary["spilled_nodes"] == ["conv"]
    assert "feature maps too large for on-chip memory (bound marked *): conv" in format_table(est)
    fast = cost.estimate_program(_conv_program(load_board("default"), 16, 16, 32, 32), load_board("default"))
    assert est.summary["total_cycles"] > fast.summary["total_cycles"]
    on_cpu = replace(U55, rules=replace(U55.rules, ops={}))  # rules that place every op on the CPU
    cpu = cost.estimate_program(_conv_program(on_cpu, 16, 16, 32, 32), on_cpu)
    row = cpu.layers[0]
    assert row.target == "CPU" and row.bound == "cpu"
    assert row.compute_cycles == pytest.approx(row.macs / U55.cost.cpu.macs_per_cycle + 16 * 32 * 32 / 2.0)
    assert cpu.summary["cpu_share_pct"] == 100.0


def test_board_cost_section_errors(tmp_path):
    text = (npu_sim.boards.PRESET_DIR / "ethos-u55-128.toml").read_text()
    for old, new, needle in (("clock_hz = 500e6", "clock_hz = -1", "cost.clock_hz"),
                             ("ublock = [2, 1, 8]", "ublock = [2, 1]", "cost.ublock"),
                             ("int16_factor = 2", "int16_factor = 2\nmacs = 3", "cost.macs"),
                             ('weight_memory = "flash"', 'weight_memory = "dram"', "memory.weight_memory"),
                             ("bytes_per_cycle = 8\n", "bytes_per_cycle = 0\n", "bytes_per_cycle"),
                             ("mul = 0.75\n", "", "output_cycles_per_element lacks mul")):
        assert old in text
        path = tmp_path / "bad.toml"
        path.write_text(text.replace(old, new, 1))
        with pytest.raises(npu_sim.BoardError, match=str(path).replace(".", r"\.")) as err:
            load_board(str(path))
        assert needle in str(err.value)


def test_estimate_json_csv_roundtrip():
    est = npu_sim.estimate(DEMO, board="ethos-u55-128", input_shapes=DEMO_SHAPE)
    d = json.loads(est.to_json())
    assert d["summary"]["total_cycles"] == est.summary["total_cycles"] > 0
    assert len(d["layers"]) == len(est.layers)
    rows = list(csv.DictReader(io.StringIO(est.to_csv())))
    assert [r["node"] for r in rows] == [r.node for r in est.layers]
    assert sum(float(r["cycles"]) for r in rows) == pytest.approx(est.summary["total_cycles"], abs=len(rows))
    sim = npu_sim.load(DEMO, board="onnx", input_shapes=DEMO_SHAPE)  # a simulator, re-lowered for the cost board
    assert npu_sim.estimate(sim, board="ethos-u55-128").summary == est.summary


# ---------------------------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------------------------
def test_cli_table(capsys):
    assert cli_main(["estimate", DEMO, "--input-shape", "input=1x1x8x8", "--board", "ethos-u55-128"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "node" in lines[1] and "util%" in lines[1] and "cycles" in lines[1]
    assert any(line.startswith("conv1 ") for line in lines)
    assert "total:" in out and "FPS" in out and "NPU 100.0%" in out and "hotspots:" in out
    assert max(len(line) for line in lines) <= 120


def test_cli_json_and_csv(capsys):
    assert cli_main(["estimate", DEMO, "--input-shape", "input=1x1x8x8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["board"] == "default" and d["summary"]["latency_ms"] > 0
    assert cli_main(["estimate", DEMO, "--input-shape", "input=1x1x8x8", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {"node", "op", "precision", "macs", "bytes_sram", "compute_cycles", "memory_cycles", "cycles", "bound",
            "utilization_pct", "share_pct"} <= set(rows[0])


def test_cli_bad_board_and_board_without_cost(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text((npu_sim.boards.PRESET_DIR / "default.toml").read_text().replace("ifm_depth_block = 32",
                                                                                   "ifm_depth_block = 'x'"))
    assert cli_main(["estimate", DEMO, "--input-shape", "input=1x1x8x8", "--board", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "cost.ifm_depth_block" in err and str(bad) in err and "Traceback" not in err
    assert cli_main(["estimate", DEMO, "--input-shape", "input=1x1x8x8", "--board", "onnx"]) == 2
    err = capsys.readouterr().err
    assert "no [cost] section" in err and "Traceback" not in err


def test_cli_real_model(capsys):
    from models.build import get
    try:
        path = get("mobilenetv2_a8w8")
    except Exception as exc:  # pragma: no cover - offline machine without the cache
        pytest.skip(f"real model unavailable: {exc}")
    assert cli_main(["estimate", str(path), "--board", "ethos-u55-128"]) == 0
    out = capsys.readouterr().out
    assert "features.0.conv" in out and "total:" in out
    est = npu_sim.estimate(path, board="ethos-u55-128")
    assert est.summary["total_macs"] == 300_774_272  # Vela: 300.8 M (its conv/FC MACs; it also counts the mean)
    assert 0.85 < est.summary["total_cycles"] / 5.86e6 < 1.15
