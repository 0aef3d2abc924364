"""Shared helpers of the external-oracle tests (ONNX backend node cases, onnxruntime).

Nothing here computes an expected result: expected integers come from ONNX's own backend test data or from
onnxruntime. These helpers only build small QDQ models, cut one-op models out of real ones, and run onnxruntime.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# ----------------------------------------------------------------------------------------------------------
# ONNX backend node test cases
# ----------------------------------------------------------------------------------------------------------
CASE_MODULES = ("quantizelinear", "dequantizelinear", "qlinearconv", "qlinearmatmul", "convinteger",
                "matmulinteger")
CASE_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger")


@dataclass
class NodeCase:
    name: str
    model: onnx.ModelProto
    inputs: list          # numpy arrays, one per present node input (TensorProto values converted)
    outputs: list         # numpy arrays, one per node output
    input_types: list     # onnx elem type per present node input
    output_types: list    # onnx elem type per node output
    source: str           # where the data was read from

    @property
    def node(self) -> onnx.NodeProto:
        return self.model.graph.node[0]

    @property
    def opset(self) -> int:
        return next(o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx"))

    def named_inputs(self) -> dict:
        """Node input slot name -> value, for the inputs that are present (the slot names follow the schema)."""
        schema = onnx.defs.get_schema(self.node.op_type, self.opset)
        names = [p.name for p in schema.inputs]
        out, k = {}, 0
        for i, tensor_name in enumerate(self.node.input):
            if tensor_name:
                out[names[i]] = (self.inputs[k], self.input_types[k])
                k += 1
        return out


def _elem_type_of(value) -> int:
    if isinstance(value, TensorProto):
        return value.data_type
    return helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)


def _to_numpy(value) -> np.ndarray:
    """TensorProto/ndarray -> ndarray; 4-bit integer types become int8/uint8 (their storage in npu-sim)."""
    if isinstance(value, TensorProto):
        if value.data_type == TensorProto.INT4:
            return numpy_helper.to_array(value).astype(np.int8)
        if value.data_type == TensorProto.UINT4:
            return numpy_helper.to_array(value).astype(np.uint8)
        return numpy_helper.to_array(value)
    return np.asarray(value)


def _installed_data_dir() -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


def load_node_cases() -> dict[str, NodeCase]:
    """Every single-node backend test case of the quantization ops.

    Read from ``onnx/backend/test/data/node/<case>/`` (model.onnx + test_data_set_0/*.pb) when the installed
    onnx ships that data; pip wheels do not, and then the same cases are generated from the installed
    ``onnx.backend.test.case.node`` modules (the code that writes that data).
    """
    cases: dict[str, NodeCase] = {}
    data_dir = _installed_data_dir()
    if data_dir.is_dir():
        for case_dir in sorted(data_dir.iterdir()):
            model_path = case_dir / "model.onnx"
            if not model_path.is_file():
                continue
            model = onnx.load(str(model_path))
            if len(model.graph.node) != 1 or model.graph.node[0].op_type not in CASE_OPS:
                continue
            ds = case_dir / "test_data_set_0"
            ins = [_read_pb(ds / f"input_{i}.pb") for i in range(len(model.graph.input))]
            outs = [_read_pb(ds / f"output_{i}.pb") for i in range(len(model.graph.output))]
            cases[case_dir.name] = _make_case(case_dir.name, model, ins, outs, str(case_dir))
    if cases:
        return cases
    import onnx.backend.test.case.node as node_cases
    for mod in CASE_MODULES:
        importlib.import_module(f"onnx.backend.test.case.node.{mod}")  # registers its cases via expect()
    for tc in node_cases._NodeTestCases:
        if len(tc.model.graph.node) != 1 or tc.model.graph.node[0].op_type not in CASE_OPS:
            continue  # e.g. the function-expanded variants
        ins, outs = tc.data_sets[0]
        cases[tc.name] = _make_case(tc.name, tc.model, list(ins), list(outs), "onnx.backend.test.case.node")
    return cases


def _read_pb(path: Path) -> TensorProto:
    t = TensorProto()
    t.ParseFromString(path.read_bytes())
    return t


def _make_case(name, model, ins, outs, source) -> NodeCase:
    return NodeCase(name, model, [_to_numpy(v) for v in ins], [_to_numpy(v) for v in outs],
                    [_elem_type_of(v) for v in ins], [_elem_type_of(v) for v in outs], source)


# ----------------------------------------------------------------------------------------------------------
# Small QDQ model building
# ----------------------------------------------------------------------------------------------------------
def tensor(name: str, value: np.ndarray, elem_type: int | None = None) -> TensorProto:
    """An initializer; ``elem_type`` INT4/UINT4 stores int8/uint8 values as 4-bit."""
    value = np.asarray(value)
    if elem_type in (TensorProto.INT4, TensorProto.UINT4):
        return helper.make_tensor(name, elem_type, value.shape, value.reshape(-1).astype(np.int64).tolist())
    return numpy_helper.from_array(value, name)


def model_of(nodes, inputs, outputs, initializers, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "oracle", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="npu-sim-oracle")
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    return model


# ----------------------------------------------------------------------------------------------------------
# Cutting one-op QDQ models out of real models
# ----------------------------------------------------------------------------------------------------------
@dataclass
class Cut:
    node: str          # ONNX node name of the op
    op_type: str
    x_int: str         # integer tensor feeding the activation DequantizeLinear (a QuantizeLinear output)
    y_int: str         # integer QuantizeLinear output of the op
    folded: list = field(default_factory=list)  # Relu/Clip between the op and its QuantizeLinear
    other_ints: list = field(default_factory=list)  # integer tensors behind the op's other non-constant inputs

    @property
    def inputs(self) -> list[str]:
        return [self.x_int] + self.other_ints


def mac_cuts(model: onnx.ModelProto, op_types=("Conv", "Gemm", "MatMul")) -> list[Cut]:
    """One Cut per op of ``op_types`` whose activation comes from DequantizeLinear(QuantizeLinear output) and
    whose output reaches a QuantizeLinear (through single-consumer Relu/Clip at most). Other inputs that are
    not constants (B of a MatMul of two activations) must come from DequantizeLinear too and become inputs."""
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    inits = {t.name for t in model.graph.initializer}
    cuts = []
    for n in model.graph.node:
        if n.op_type not in op_types:
            continue
        dq = producer.get(n.input[0])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] in inits:
            continue
        out, folded = n.output[0], []
        while True:
            cons = consumers.get(out, [])
            if len(cons) == 1 and cons[0].op_type in ("Relu", "Clip"):
                folded.append(cons[0].op_type)
                out = cons[0].output[0]
                continue
            break
        q = [c for c in consumers.get(out, []) if c.op_type == "QuantizeLinear"]
        if len(q) != 1:
            continue
        others, ok = [], True
        for name in n.input[1:]:
            p = producer.get(name)
            if not name or name in inits or p is None or p.op_type == "Constant":
                continue
            if p.op_type != "DequantizeLinear":
                ok = False
            elif p.input[0] not in inits and p.input[0] not in others and p.input[0] != dq.input[0]:
                others.append(p.input[0])
        if ok:
            cuts.append(Cut(n.name or n.output[0], n.op_type, dq.input[0], q[0].output[0], folded, others))
    return cuts


def with_outputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the tensors ``names`` (for onnxruntime to capture them)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    elem = {}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear":
            zp = n.input[2] if len(n.input) > 2 else ""
            init = next((t for t in m.graph.initializer if t.name == zp), None)
            elem[n.output[0]] = init.data_type if init is not None else TensorProto.UINT8
    for name in names:
        if name not in have:
            m.graph.output.append(helper.make_tensor_value_info(name, elem.get(name, TensorProto.UNDEFINED), None))
            have.add(name)
    return m


# ----------------------------------------------------------------------------------------------------------
# onnxruntime
# ----------------------------------------------------------------------------------------------------------
def ort_session(model, optimized_path: str | None = None, optimize: bool = True, int8_fusion: bool = False,
                quiet: bool = False):
    """A single-threaded CPU session with default (all) graph optimizations, so QDQ groups fuse into
    QLinearConv / QLinearMatMul / QGemm.

    ``int8_fusion``: also fuse groups with int8 (signed) activations. onnxruntime does that by default only on
    ARM; on x86 it keeps S8S8 Conv/MatMul groups as DequantizeLinear -> float op -> QuantizeLinear unless the
    session option ``session.qdqisint8allowed`` is set.
    """
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 4 if quiet else 3  # quiet: a run expected to fail logs nothing (the fuzzer's mutants)
    if int8_fusion:
        so.add_session_config_entry("session.qdqisint8allowed", "1")
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def cosine(a, b) -> float:
    a = np.asarray(a, np.float64).reshape(-1)
    b = np.asarray(b, np.float64).reshape(-1)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))
