"""Elementwise chains run as tables (npu_sim/runtime/chains.py) give the integers of the nodes run one by one.

Random QDQ chains of elementwise ops on one 8- or 16-bit input (scalar constants, the input read again further
down, intermediate tensors that are outputs too, per-channel constants and slopes that must stay out) are run on
each arithmetic's board with the chains as tables and node by node; every output must be equal, bit for bit.
"""
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from budget import examples

import npu_sim
from npu_sim.runtime import executor
from npu_sim.runtime.chains import elementwise_node, find_chains

DTYPES = {"int8": (TensorProto.INT8, np.int8), "uint8": (TensorProto.UINT8, np.uint8),
          "int16": (TensorProto.INT16, np.int16)}
SHAPE = (1, 3, 5, 7)
SHAPE16 = (1, 3, 64, 64)  # a 16-bit chain is probed in 16 runs of this shape (65,536 codes, each 3 times)
UNARY = ("Sigmoid", "HardSigmoid", "Tanh", "Relu", "Clip", "LeakyRelu", "HardSwish", "Abs")
BINARY_CONST = ("Add", "Sub", "Mul", "Div")
BINARY_ACT = ("Add", "Mul", "Sub")


class _Builder:
    def __init__(self, dtype: str, rng: np.random.Generator):
        self.etype, self.npt = DTYPES[dtype]
        self.rng, self.nodes, self.inits, self.k = rng, [], [], 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}{self.k}"

    def qparams(self, spread: float) -> tuple[str, str]:
        s, z = self.name("s"), self.name("z")
        lo, hi = np.iinfo(self.npt).min, np.iinfo(self.npt).max
        zp = 0 if self.npt == np.int16 else int(self.rng.integers(lo // 2, hi // 2 + 1))
        self.inits += [numpy_helper.from_array(np.array(spread / (hi - lo), np.float32), s),
                       numpy_helper.from_array(np.array(zp, self.npt), z)]
        return s, z

    def dq(self, q: str, s: str, z: str) -> str:
        f = self.name("f")
        self.nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [f]))
        return f

    def const(self, values: np.ndarray) -> str:
        cq, sc = self.name("cq"), self.name("sc")
        scale = np.float32(max(float(np.max(np.abs(values))), 1e-3) / 127)
        self.inits += [numpy_helper.from_array(np.clip(np.rint(values / scale), -127, 127).astype(np.int8), cq),
                       numpy_helper.from_array(np.array(scale, np.float32), sc)]
        return self.dq(cq, sc, "")

    def fconst(self, value: float) -> str:
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return name

    def quantized(self, op: str, ins: list[str], spread: float, **attrs) -> tuple[str, str, str]:
        f, q = self.name("y"), self.name("q")
        self.nodes.append(helper.make_node(op, ins, [f], **attrs))
        s, z = self.qparams(spread)
        self.nodes.append(helper.make_node("QuantizeLinear", [f, s, z], [q]))
        return q, s, z


def _chain_model(draw, dtype: str) -> tuple[onnx.ModelProto, list[str]]:
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    b = _Builder(dtype, rng)
    sx, zx = b.qparams(float(rng.uniform(0.5, 16)))
    x = ("x", sx, zx)
    made, outputs = [x], []
    for _ in range(draw(st.integers(1, 6))):
        src = made[draw(st.integers(0, len(made) - 1))]
        src_f = b.dq(*src)
        spread = float(rng.uniform(0.25, 24))
        kind = draw(st.sampled_from(["unary", "const", "act", "per_channel", "prelu"]))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            ins = [src_f]
            if op == "Clip":
                ins += [b.fconst(-1.5), b.fconst(2.0)]
            made.append(b.quantized(op, ins, spread))
        elif kind in ("const", "per_channel"):
            op = draw(st.sampled_from(BINARY_CONST))
            shape = (1, SHAPE[1], 1, 1) if kind == "per_channel" else ()
            c = rng.uniform(0.5, 3, size=shape).astype(np.float32) * rng.choice([-1, 1])
            made.append(b.quantized(op, [src_f, b.const(c)], spread))
        elif kind == "act":
            other = b.dq(*made[draw(st.integers(0, len(made) - 1))])
            made.append(b.quantized(draw(st.sampled_from(BINARY_ACT)), [src_f, other], spread))
        else:
            made.append(b.quantized("PRelu", [src_f, b.const(rng.uniform(0.05, 0.5, (SHAPE[1], 1, 1))
                                                              .astype(np.float32))], spread))
        if draw(st.booleans()):
            outputs.append(made[-1][0])
    outputs = list(dict.fromkeys(outputs + [made[-1][0]]))
    shape = SHAPE16 if dtype == "int16" else SHAPE
    graph = helper.make_graph(b.nodes, "chain", [helper.make_tensor_value_info("x", b.etype, list(shape))],
                              [helper.make_tensor_value_info(o, b.etype, list(shape)) for o in outputs], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model, outputs


@st.composite
def chain_case(draw):
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    model, outputs = _chain_model(draw, dtype)
    board = draw(st.sampled_from(["default", "onnx", "generic"]))
    return model, board, dtype, draw(st.integers(0, 2 ** 31 - 1))


def _runs(sim, feeds, monkeypatch) -> tuple[dict, dict]:
    fused = sim.run(feeds, raw=True)
    with monkeypatch.context() as m:
        m.setenv("NPU_SIM_CHAINS", "0")
        plain = sim.run(feeds, raw=True)
    return fused, plain


@settings(deadline=None, max_examples=examples(60))
@given(chain_case())
def test_chain_tables_equal_the_nodes(case):
    model, board, dtype, seed = case
    try:
        sim = npu_sim.load(model, board=board)
    except npu_sim.NpuSimError:
        return  # a chain this board does not run (e.g. an op its arithmetic lacks): nothing to compare
    info = np.iinfo(DTYPES[dtype][1])
    shape = sim.program.tensors[sim.program.inputs["x"]].shape
    feeds = {"x": np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(DTYPES[dtype][1])}
    with pytest.MonkeyPatch.context() as mp:
        fused, plain = _runs(sim, feeds, mp)
    for name in plain:
        np.testing.assert_array_equal(fused[name], plain[name], err_msg=f"output {name} on board {board}")
    traced = sim.trace(feeds)  # node by node, every tensor kept
    for name, arr in fused.items():
        np.testing.assert_array_equal(arr, traced[sim.program.tensors[sim.program.outputs[name]].float_name])


def _hardswish_model(dtype: str, per_channel_prelu: bool, shape=SHAPE16) -> onnx.ModelProto:
    """x -> Add 3 -> Clip 0..6 -> Mul x -> Div 6 (HardSwish as exporters write it), then a PRelu with one slope per
    channel (or one slope) on that; the Clip's output is an output of the model too."""
    b = _Builder(dtype, np.random.default_rng(7))
    sx, zx = b.qparams(12.0)
    a = b.quantized("Add", [b.dq("x", sx, zx), b.const(np.array(3.0, np.float32))], 15.0)
    c = b.quantized("Clip", [b.dq(*a), b.fconst(0.0), b.fconst(6.0)], 6.0)
    m = b.quantized("Mul", [b.dq("x", sx, zx), b.dq(*c)], 40.0)
    d = b.quantized("Div", [b.dq(*m), b.const(np.array(6.0, np.float32))], 7.0)
    slope = np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1, 1) if per_channel_prelu else np.array([0.25],
                                                                                                         np.float32)
    p = b.quantized("PRelu", [b.dq(*d), b.const(slope)], 7.0)
    outs = [c[0], p[0]]
    graph = helper.make_graph(b.nodes, "hardswish", [helper.make_tensor_value_info("x", b.etype, list(shape))],
                              [helper.make_tensor_value_info(o, b.etype, list(shape)) for o in outs], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("per_channel", [True, False], ids=["prelu-per-channel", "prelu-one-slope"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_hardswish_chain_is_two_lookups(dtype, per_channel, monkeypatch):
    sim = npu_sim.load(_hardswish_model(dtype, per_channel))
    program = sim.program
    ops = [n.op for n in program.nodes]
    assert ops == ["Add", "Clip", "Mul", "Div", "PRelu"], ops
    chains = find_chains(program)
    members = [n.op for n in chains.get(program.inputs["x"], [])]
    assert members == (["Add", "Clip", "Mul", "Div"] if per_channel else ["Add", "Clip", "Mul", "Div", "PRelu"])
    assert elementwise_node(program.nodes[-1], program.tensors) is not per_channel
    steps = executor.run_steps(program)
    # the Clip's output is a model output: its own lookup; Add and Mul only feed the chain: gone
    expected = ["Clip", "Div", "PRelu"] if per_channel else ["Clip", "PRelu"]
    assert [s.op for s in steps] == expected
    assert all(s.inputs == [program.inputs["x"]] for s in steps if s.run is not program.nodes[-1].run)
    info = np.iinfo(DTYPES[dtype][1])
    feeds = {"x": np.arange(np.prod(SHAPE16)).reshape(SHAPE16).astype(np.int64) * 997 % (info.max - info.min + 1)
             + info.min}
    feeds["x"] = feeds["x"].astype(DTYPES[dtype][1])
    fused, plain = _runs(sim, feeds, monkeypatch)
    for name in plain:
        np.testing.assert_array_equal(fused[name], plain[name])
    result = executor.execute(program, feeds)
    assert set(result.seconds) == {s.name for s in steps}  # one time per lookup, under its chain node's name


def test_a_16_bit_chain_too_small_to_probe_runs_node_by_node():
    program = npu_sim.load(_hardswish_model("int16", True, shape=SHAPE)).program
    assert len(find_chains(program)[program.inputs["x"]]) == 4  # a chain, but 65,536 codes in 105 elements ...
    assert [s.op for s in executor.run_steps(program)] == ["Add", "Clip", "Mul", "Div", "PRelu"]  # ... 1,873 runs


def test_a_node_the_probe_shows_is_not_elementwise_runs_as_it_is(monkeypatch):
    """A member whose result depends on where an element is (here: made so on purpose) is caught by the probe,
    and its chain runs node by node."""
    sim = npu_sim.load(_hardswish_model("int8", True))
    program = sim.program
    mul = program.nodes[2]
    real = mul.run

    def positional(node, inputs, ctx):
        out = real(node, inputs, ctx)[0].copy()
        out.reshape(-1)[::2] ^= 1  # the lowest bit flipped at every other place
        return [out]

    monkeypatch.setattr(mul, "run", positional)
    assert [s.op for s in executor.run_steps(program)] == ["Add", "Clip", "Mul", "Div", "PRelu"]
    x = np.random.default_rng(3).integers(-128, 128, SHAPE16).astype(np.int8)
    fused, plain = _runs(sim, {"x": x}, monkeypatch)
    for name in plain:
        np.testing.assert_array_equal(fused[name], plain[name])


def test_hooks_and_kept_tensors_see_every_node():
    sim = npu_sim.load(_hardswish_model("int8", False))
    x = {"x": np.zeros(SHAPE16, np.int8)}
    seen = []
    sim.execute(x, hooks=[lambda node, *_: seen.append(node.op)])
    assert seen == ["Add", "Clip", "Mul", "Div", "PRelu"]
    kept = sim.execute(x, keep_all=True)
    assert all(n.outputs[0] in kept.values for n in sim.program.nodes)


TFLITE = sorted((Path(__file__).parent / "fixtures" / "tflite").glob("*.tflite"))


@pytest.mark.parametrize("path", TFLITE, ids=[p.stem for p in TFLITE])
def test_tflite_fixtures_run_the_same_with_chains(path, monkeypatch):
    """The ``tflite`` arithmetic (LiteRT's kernels, board ethos-u55-128), on the fixtures LiteRT checked tensor by
    tensor (tests/test_tflite_oracle.py, node by node): the same outputs with the chains as tables."""
    try:
        sim = npu_sim.load(path)
    except npu_sim.NpuSimError:
        pytest.skip("a fixture the board refuses (tests/test_check_litert_refusals.py)")
    feeds = sim.random_inputs(seed=5)
    fused, plain = _runs(sim, feeds, monkeypatch)
    for name in plain:
        np.testing.assert_array_equal(fused[name], plain[name])
