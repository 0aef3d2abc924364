"""Is onnxruntime an exact oracle of 8-bit integer GEMM on this CPU?

onnxruntime's x86 u8 x s8 integer GEMM kernels (MLAS, used by QLinearConv / QLinearMatMul / QGemm) multiply with
``vpmaddubsw`` on CPUs without AVX-512 VNNI / AVX-VNNI: each pair of adjacent u8 x s8 products is summed into an
int16 *with saturation*, so a pair beyond 32767 (e.g. 255 x 127 + 255 x 127) is silently clipped (onnxruntime's
quantization docs warn of this for U8S8 on x86-64 without VNNI and suggest ``reduce_range``). With VNNI the same
kernels are exact. On x86 onnxruntime also rewrites int8 (signed) activation Q/DQ pairs to
uint8 (QDQS8ToU8Transformer, zero point + 128) unless ``session.qdqisint8allowed`` is set, so the default session
of an int8-activation model runs the same u8 x s8 kernels; with the option it runs s8 x s8 kernels instead.

``probes()`` measures this once per test session on the very path the tests use: a float QDQ model
x -> QuantizeLinear -> DequantizeLinear -> Conv | MatMul | Gemm (int8 weights) -> QuantizeLinear, which onnxruntime
fuses into QLinearConv / QLinearMatMul / QGemm, fed an input whose every product pair overflows int16.
``inexact_kernels(model)`` lists the integer GEMM nodes of onnxruntime's optimized graph of a model whose kernel
kind (activation x weight type) the probes found inexact here, so that a test can pick an exact oracle for it.
``s8_twin`` writes the same QDQ model with int8 instead of uint8 activations (zero points - 128): identical float
semantics, run by onnxruntime's s8 x s8 kernels with ``session.qdqisint8allowed`` (exact where the probes say so).
"""
from __future__ import annotations

import functools
import os
import platform
import tempfile
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests import helpers_oracle

X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")  # onnxruntime's int8 -> uint8 rewrite
REASON = "onnxruntime's u8s8 kernels saturate on this CPU (AVX2 without VNNI): not an exact oracle here"

# onnxruntime's fused integer GEMM ops; in each of them input 2 is the activation's zero point and input 5 the
# weight's (QLinearConv: x, x_scale, x_zp, w, w_scale, w_zp, ...; QLinearMatMul / QGemm: a, a_scale, a_zp, b, ...)
GEMM_OPS = ("QLinearConv", "QLinearMatMul", "QGemm")

# The weight probes (Conv, MatMul, Gemm with a constant int8 weight): K = 64 products of activation code 255 (u8;
# the s8 model's code is 127, which is 255 again after onnxruntime's +128 rewrite) with weight code 127, activation
# zero point 129 (s8: 1), weight zero point 0, unit scales, output scale 1 and zero point 0. The exact accumulator
# is 64 x (255 - 129) x 127 = 1024128: the output clamps to its largest code. A u8 x s8 kernel that saturates each
# pair of products to int16 (vpmaddubsw) sums 32 pairs of 32767 and subtracts the zero point's contribution
# exactly (as MLAS does): 32 x 32767 - 129 x 64 x 127 = 32, in range: the output code is that accumulator.
# The activation probe (MatMul of two 8-bit activations, onnxruntime's u8 x u8 kernel, or s8 x s8 with int8 fusion):
# a = 255 with zero point 254, b = 255 with zero point 254 (s8: codes and zero points - 128): raw products of 65025,
# exact result 64 x 1 x 1 = 64 (an exactness check only: no saturated value is predicted for this kernel).
K = 64
W_CODE = 127
U8_ZP = 129
EXACT_ACC = K * (255 - U8_ZP) * W_CODE                       # 1024128
SATURATED_ACC = (K // 2) * 32767 - U8_ZP * K * W_CODE       # 32: what vpmaddubsw's int16 saturation leaves
ACT_ZP = 254
PROBE_OPS = {"Conv": "QLinearConv", "MatMul": "QLinearMatMul", "Gemm": "QGemm", "MatMul(a, b)": "QLinearMatMul"}


@dataclass(frozen=True)
class Probe:
    op: str              # Conv | MatMul | Gemm (int8 weight) | MatMul(a, b) (two activations): the QDQ model's op
    act: str             # u8 | s8 (activation type of the QDQ model)
    int8_fusion: bool    # session.qdqisint8allowed
    fused: tuple         # (fused op, activation zp type, weight zp type) of onnxruntime's optimized graph, or ()
    got: int             # output code of onnxruntime's fused session
    exact: int           # the exact result (clamped to the output type)
    saturated: int | None  # a kernel that saturates each u8 x s8 product pair to int16 gives this (by hand)

    @property
    def kind(self) -> str | None:
        """The kernel kind that ran: 'u8s8', 's8s8', 'u8u8' (activation x weight), None when nothing was fused."""
        return _kind(self.fused[1], self.fused[2]) if self.fused else None

    @property
    def is_exact(self) -> bool:
        return bool(self.got == self.exact)


def _kind(a_zp_dtype: str, w_zp_dtype: str) -> str:
    short = {"uint8": "u8", "int8": "s8"}
    return short.get(a_zp_dtype, a_zp_dtype) + short.get(w_zp_dtype, w_zp_dtype)


def session(model, int8_fusion: bool = False, optimize: bool = True, optimized_path: str | None = None):
    """A single-threaded CPU session (all graph optimizations unless ``optimize`` is False): the oracle helpers'."""
    return helpers_oracle.ort_session(model, int8_fusion=int8_fusion, optimize=optimize, optimized_path=optimized_path)


def _probe_model(op: str, act: str) -> tuple[onnx.ModelProto, dict]:
    """The QDQ probe model of ``op`` and its feeds (see the constants above)."""
    np_t, shift = (np.uint8, 0) if act == "u8" else (np.int8, 128)
    zp = lambda name, v: numpy_helper.from_array(np.array(v - shift, np_t), name)
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "s"), zp("y_zp", shift)]
    nodes, inputs, feeds = [], [], {}

    def activation(name, shape, code, zero_point):   # float input -> QuantizeLinear -> DequantizeLinear
        inits.append(zp(f"{name}_zp", zero_point))
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        feeds[name] = np.full(shape, code - zero_point, np.float32)
        nodes.extend([helper.make_node("QuantizeLinear", [name, "s", f"{name}_zp"], [f"{name}_q"]),
                      helper.make_node("DequantizeLinear", [f"{name}_q", "s", f"{name}_zp"], [f"{name}_dq"])])
        return f"{name}_dq"

    if op == "MatMul(a, b)":
        ins, y_shape = [activation("a", [1, K], 255, ACT_ZP), activation("b", [K, 2], 255, ACT_ZP)], [1, 2]
    else:
        conv = op == "Conv"
        x = activation("x", [1, K, 1, 1] if conv else [1, K], 255, U8_ZP)
        w = np.full((2, K, 1, 1) if conv else (K, 2), W_CODE, np.int8)
        inits += [numpy_helper.from_array(w, "w_q"), numpy_helper.from_array(np.array(0, np.int8), "w_zp")]
        nodes.append(helper.make_node("DequantizeLinear", ["w_q", "s", "w_zp"], ["w_dq"]))
        ins, y_shape = [x, "w_dq"], ([1, 2, 1, 1] if conv else [1, 2])
    nodes += [helper.make_node(op.split("(")[0], ins, ["y"]),
              helper.make_node("QuantizeLinear", ["y", "s", "y_zp"], ["y_q"]),
              helper.make_node("DequantizeLinear", ["y_q", "s", "y_zp"], ["out"])]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, y_shape)]
    graph = helper.make_graph(nodes, "probe", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="npu-sim-probe")
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model, feeds


def gemm_nodes(model, int8_fusion: bool = False) -> list[tuple[str, str, str]]:
    """(op type, activation zp dtype, weight zp dtype) of every fused integer GEMM node onnxruntime runs for
    ``model`` (a ModelProto or a path) with all graph optimizations (and ``int8_fusion``)."""
    with tempfile.TemporaryDirectory() as tmp:
        opt = os.path.join(tmp, "optimized.onnx")
        session(model, int8_fusion=int8_fusion, optimized_path=opt)
        graph = onnx.load(opt).graph
    dtypes = {t.name: helper.tensor_dtype_to_np_dtype(t.data_type).name for t in graph.initializer}

    def zp_dtype(node, i):  # an absent zero point is uint8 0
        return dtypes.get(node.input[i], "uint8") if len(node.input) > i and node.input[i] else "uint8"
    return [(n.op_type, zp_dtype(n, 2), zp_dtype(n, 5)) for n in graph.node if n.op_type in GEMM_OPS]


@functools.cache
def probes() -> tuple[Probe, ...]:
    """Every probe (op x activation type x int8 fusion), measured once per test session."""
    result = []
    for act in ("u8", "s8"):
        qmax = 255 if act == "u8" else 127
        for op, fused_op in PROBE_OPS.items():
            model, feeds = _probe_model(op, act)
            exact, saturated = (K, None) if op == "MatMul(a, b)" else (min(EXACT_ACC, qmax), min(SATURATED_ACC, qmax))
            for int8_fusion in (False, True):
                fused = [n for n in gemm_nodes(model, int8_fusion) if n[0] == fused_op]
                out = session(model, int8_fusion=int8_fusion).run(None, feeds)[0]
                result.append(Probe(op, act, int8_fusion, fused[0] if len(fused) == 1 else (),
                                    int(np.rint(out.reshape(-1)[0])), exact, saturated))
    return tuple(result)


@functools.cache
def exact_kinds() -> dict[str, bool]:
    """Kernel kind ('u8s8', 's8s8', 'u8u8') -> whether every probe that ran it was exact on this CPU."""
    kinds: dict[str, bool] = {}
    for p in probes():
        if p.kind is not None:
            kinds[p.kind] = kinds.get(p.kind, True) and p.is_exact
    return kinds


def kind_exact(kind: str) -> bool:
    """Whether onnxruntime's fused integer GEMM of this kind ('u8s8', 's8s8', 'u8u8') is exact here."""
    kinds = exact_kinds()
    assert kind in kinds, f"no probe ran onnxruntime's {kind} kernel: {probes()}"
    return kinds[kind]


def inexact_kernels(model, int8_fusion: bool = False) -> list[str]:
    """'<op> <kind>' of each integer GEMM node onnxruntime runs for ``model`` whose kernel is not exact here
    (empty on CPUs with VNNI)."""
    return [f"{op} {_kind(a, w)}" for op, a, w in gemm_nodes(model, int8_fusion) if not kind_exact(_kind(a, w))]


def fallback_reason(model, int8_fusion: bool = False) -> str | None:
    """None where onnxruntime's fused session of ``model`` is an exact oracle here; else ``REASON`` with the count
    of the affected nodes."""
    bad = inexact_kernels(model, int8_fusion)
    if not bad:
        return None
    counts = {k: bad.count(k) for k in dict.fromkeys(bad)}
    return f"{REASON} ({', '.join(f'{n} x {k}' for k, n in counts.items())})"


# ----------------------------------------------------------------------------------------------------------
# the int8-activation twin of a uint8-activation QDQ model
# ----------------------------------------------------------------------------------------------------------
def s8_twin(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str]]:
    """The model with every uint8 activation (a QuantizeLinear output / DequantizeLinear input that is not a
    constant, and uint8 graph inputs/outputs) turned int8, its zero points - 128: each code moves by -128 with its
    zero point, so every dequantized value, and so the float semantics of the QDQ model, are unchanged. Returns
    (twin, names of the graph inputs/outputs whose type changed: feed them - 128, read them + 128)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    shifted: dict[str, str] = {}

    def s8_zp(name: str) -> str:
        if name not in shifted:
            zp = numpy_helper.to_array(inits[name])
            new = f"{name}__s8twin"
            g.initializer.append(numpy_helper.from_array((zp.astype(np.int16) - 128).astype(np.int8), new))
            shifted[name] = new
        return shifted[name]

    for n in g.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(n.input) < 3 or not n.input[2]:
            continue
        zp = inits.get(n.input[2])
        if zp is None or zp.data_type != TensorProto.UINT8:
            continue
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:
            continue  # a uint8 constant (weight) keeps its type
        n.input[2] = s8_zp(n.input[2])
    changed = set()
    for vi in list(g.input) + list(g.output):
        if vi.type.tensor_type.elem_type == TensorProto.UINT8:
            vi.type.tensor_type.elem_type = TensorProto.INT8
            changed.add(vi.name)
    for vi in g.value_info:
        if vi.type.tensor_type.elem_type == TensorProto.UINT8:
            vi.type.tensor_type.elem_type = TensorProto.INT8
    return m, changed


class TwinSession:
    """onnxruntime with int8 fusion on the ``s8_twin`` of a uint8-activation model, fed and read like a session of
    the model itself (uint8 feeds -128, int8 results of changed outputs +128)."""

    def __init__(self, model, optimized_path: str | None = None):
        model = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
        self.twin, self.changed = s8_twin(model)
        self.sess = session(self.twin, int8_fusion=True, optimized_path=optimized_path)

    def run(self, names, feeds):
        feeds = {k: ((v.astype(np.int16) - 128).astype(np.int8) if k in self.changed else v) for k, v in feeds.items()}
        names = names or [o.name for o in self.sess.get_outputs()]
        outs = self.sess.run(names, feeds)
        return [((o.astype(np.int16) + 128).astype(np.uint8) if k in self.changed else o) for k, o in zip(names, outs)]
