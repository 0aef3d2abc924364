"""QDQ ONNX graph -> integer program.

The walk visits ONNX nodes in topological order and keeps three maps:

* ``deq``: float tensor -> integer tensor it is the dequantization of (DequantizeLinear outputs, and the outputs
  of data-movement ops applied to them, which keep the quantization);
* ``ints``: ONNX integer tensor (QuantizeLinear output, quantized initializer) -> integer tensor;
* ``pending``: float output of a compute op whose inputs are all dequantized, waiting for the QuantizeLinear that
  closes its QDQ group (a Relu/Clip in between is folded in as an output clamp).

When the QuantizeLinear arrives, the op is lowered by its family (``npu_sim.ops``): float scales become integer
multipliers, shifts, tables and clamps, once. Everything that cannot be lowered is collected and reported at
once, by node.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto

from kernels.fixedpoint import UnrepresentableScale

from npu_sim.boards import Board
from npu_sim.errors import QuantizationError, UnsupportedModelError
from npu_sim.frontend import rewrites, rewrites_tflite
from npu_sim.frontend.reader import Graph, attrs, read_model
from npu_sim.ir import DTYPES, Node, Program, QParams, Tensor
from npu_sim.lowering.context import LowerContext
from npu_sim.lowering.partial import prune_refused
from npu_sim.lowering.problem import Problem, Refusal, Unsimulated
from npu_sim.lowering.registry import lowering_of
from npu_sim.opset import NONLINEAR, OPS
from npu_sim.ops.common import activation_bounds

ELEM_DTYPES = {
    TensorProto.INT8: "int8", TensorProto.UINT8: "uint8", TensorProto.INT16: "int16",
    TensorProto.UINT16: "uint16", TensorProto.INT32: "int32", TensorProto.INT4: "int4", TensorProto.UINT4: "uint4",
    TensorProto.INT64: "int64",  # TFLite 16x8 biases (tf2onnx keeps them int64)
}
NP_DTYPES = {"int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16", "int32": "int32",
             "int4": "int4", "uint4": "uint4", "int64": "int64"}  # numpy names; onnx gives ml_dtypes int4/uint4 arrays
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)


@dataclass
class Pending:
    node: object                     # onnx NodeProto of the compute op
    args: list                       # Tensor | np.ndarray | None per ONNX input
    act: tuple[float, float] | None = None
    sources: list[str] = field(default_factory=list)
    done: str | None = None          # integer tensor once a QuantizeLinear closed the group


def _problem_lines(problems, shown: int = 4) -> list[str]:
    """One line per distinct (op, reason), in the order first met, naming its nodes (the first ``shown`` of
    them): a reason shared by many nodes (an op the board lacks) is said once."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, op, why in problems:
        groups.setdefault((op, why), []).append(name)
    lines = []
    for (op, why), names in groups.items():
        if len(names) == 1:
            lines.append(f"  - node {names[0]!r} ({op}): {why}")
        else:
            more = f" and {len(names) - shown} more" if len(names) > shown else ""
            lines.append(f"  - {len(names)} {op} nodes ({', '.join(map(repr, names[:shown]))}{more}): {why}")
    return lines


class Lowering:
    def __init__(self, graph: Graph, board: Board, tolerant: bool = False, partial: bool = False):
        self.g = graph
        self.tolerant = tolerant  # collect problems in Program.problems instead of raising (for the check)
        self.partial = partial  # the board's refusals only: a program without them (npu_sim.lowering.partial)
        self.board = board
        self.arith = board.arithmetic
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.problems: list[tuple[str, str, str]] = []
        self.refusals: list[tuple[str, str, str]] = []  # the subset of problems that are the board's refusals
        self.compiler_notes: list[tuple[str, str, str]] = []  # hazards where the NPU compiler takes a node
        self.unsimulated: set[str] = set()  # refusals the board runs all the same (``Unsimulated``)
        self.deq: dict[str, str] = {}
        self.ints: dict[str, str] = {}
        self.pending: dict[str, Pending] = {}
        self.inputs: dict[str, str] = {}
        # graph rewrites first (in place), so that the walk and its consumer map see the final graph
        self.layernorm_chains = rewrites.fuse_layernorm_chains(graph)
        rewrites.commute_scaling_and_maxpool(graph)
        rewrites_tflite.move_integer_io_transposes(graph)  # tf2onnx --tflite: integer NHWC graph inputs/outputs
        self.consumers: dict[str, list] = {}
        for node in graph.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self._names: set[str] = set()
        self.ctx = LowerContext(graph, self.arith, self.consumers, self.layernorm_chains, self.node_name,
                                self.add_tensor, self.nodes.append)

    # ---- bookkeeping (op families reach these through ``self.ctx``) ----------------------------------------
    def add_tensor(self, t: Tensor) -> Tensor:
        if t.name in self.tensors:
            raise AssertionError(f"duplicate tensor {t.name}")
        self.tensors[t.name] = t
        return t

    def node_name(self, onode) -> str:
        base = onode.name or f"{onode.op_type}_{onode.output[0]}"
        name, i = base, 1
        while name in self._names:
            i += 1
            name = f"{base}#{i}"
        self._names.add(name)
        return name

    def op_info(self, op: str):
        """The op's facts and lowering function under the board's arithmetic (``npu_sim.lowering.registry``)."""
        return lowering_of(self.arith.requantize, op)

    # ---- the walk ------------------------------------------------------------------------------------------
    def lower(self) -> Program:
        has_qdq = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in self.g.nodes)
        if not has_qdq:
            raise UnsupportedModelError(
                f"{self.g.path}: this is a float model (no QuantizeLinear/DequantizeLinear nodes). Quantize it first, "
                f"e.g. onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ)")
        for name in self.g.inputs:
            etype = self.g.elem_types.get(name)
            if etype in FLOAT_TYPES:
                self.add_tensor(Tensor(name, name, self.g.shapes[name], None))
        # Outputs of nodes that failed. A QuantizeLinear of such an output still yields a (never executed) integer
        # tensor, so the walk goes on and reports every independent problem once, not its consequences.
        self.failed: set[str] = set()
        for onode in self.g.nodes:
            if onode.op_type != "QuantizeLinear" and any(name in self.failed for name in onode.input):
                self.failed.update(onode.output)
                if onode.op_type not in OPS and onode.op_type != "DequantizeLinear":
                    try:
                        self.visit(onode)  # reports why this op type itself is unsupported
                    except Problem as p:
                        self.problems.append((onode.name or onode.output[0], onode.op_type, str(p)))
                continue
            before = len(self.nodes)
            try:
                self.visit(onode)
                if onode.name in self.g.layout:  # a .tflite's change of layout (its one node)
                    for node in self.nodes[before:]:
                        node.layout = True
            except (Problem, UnrepresentableScale) as p:  # the latter: the model's scales, not a bug
                why = str(p) if isinstance(p, Problem) else (f"its scales give a requantization {p}; check the "
                                                             f"scales of its inputs and output (re-run calibration)")
                where = getattr(p, "node", None) or onode  # an UnrepresentableScale has none
                self.problems.append((where.name or where.output[0], where.op_type, why))
                if isinstance(p, Refusal):
                    self.refusals.append(self.problems[-1])
                    if isinstance(p, Unsimulated):
                        self.unsimulated.add(self.problems[-1][0])
                    if onode.op_type == "QuantizeLinear" and onode.output[0] in self.tensors:
                        # the op's output tensor stands: its consumers are still judged on their own quantization
                        self.ints[onode.output[0]] = onode.output[0]
                        continue
                self.failed.update(onode.output)
        self._outputs()
        partial = self.partial and len(self.refusals) == len(self.problems)  # only the board's refusals
        if self.problems and not self.tolerant and not partial:
            lines = "\n".join(_problem_lines(self.problems))
            raise UnsupportedModelError(
                f"{self.g.path}: {len(self.problems)} node(s) cannot run as integer ops on board "
                f"'{self.board}':\n{lines}", self.problems)
        program = Program(self.tensors, self.nodes, self.inputs, self.outputs, self.board, self.g.path, self.g.opset)
        for name in self.g.own_names & self.tensors.keys():  # a .tflite: its tensors go by its names
            self.tensors[name].float_name = name
        for nchw, nhwc in program.layout_copies().items():  # and the NCHW copies by theirs
            self.tensors[nchw].float_name = self.tensors[nhwc].float_name
        program.problems = list(self.problems)
        program.refusals = list(self.refusals)
        program.compiler_notes = list(self.compiler_notes)
        program.unsimulated = set(self.unsimulated)
        program.passthrough = dict(self.passthrough)
        return prune_refused(program, self.g.outputs) if partial and self.refusals and not self.tolerant else program

    def visit(self, onode) -> None:
        op = onode.op_type
        if op == "Constant":
            return
        if onode.domain not in ("", "ai.onnx", "com.microsoft"):
            raise Problem(f"custom domain {onode.domain!r} is not supported")
        if op == "DequantizeLinear":
            return self._dequantize(onode)
        if op == "QuantizeLinear":
            return self._quantize(onode)
        if onode.domain == "com.microsoft":
            raise Problem("com.microsoft ops other than QuantizeLinear/DequantizeLinear are not supported; "
                           "quantize with QuantFormat.QDQ (not QOperator) and without contrib fusions")
        info = self.op_info(op)
        if info is None:
            if op in NONLINEAR:
                raise Problem(f"{op} is a nonlinear op that would need its own lookup-table lowering; "
                               f"npu-sim does not support it yet")
            raise Problem(f"op {op} is not supported by npu-sim")
        data = onode.input[0] if onode.input else ""
        if (info.facts.kind == "movement" and data in self.ints and data not in self.deq and data not in self.g.consts
                and self.ints[data] in self.tensors):
            # data movement on integers (tf2onnx puts Transposes between QuantizeLinear and DequantizeLinear):
            # exact on every board; the output is an integer tensor with the input's quantization
            args = [self.tensors[self.ints[data]]] + [self._arg(n, onode, i) for i, n in enumerate(onode.input)
                                                      if i > 0]
            for name, tname in zip(onode.output, info.lower(self.ctx, onode, args, None, None)):
                if name:
                    self.ints[name] = tname
            return
        if (op == "Concat" and all(n in self.ints and n not in self.deq and n not in self.g.consts
                                   for n in onode.input) and onode.input):
            # a Concat of integer tensors that share one quantization (tf2onnx drops their DequantizeLinear)
            ts = [self.tensors[self.ints[n]] for n in onode.input]
            if all(t.q.same_as(ts[0].q) for t in ts):
                t = self.add_tensor(Tensor(onode.output[0], onode.output[0], self.ctx.shape(onode.output[0]),
                                           ts[0].q))
                node = info.lower(self.ctx, onode, ts, t, None)
                node.sources = [onode.name]
                self.nodes.append(node)
                self.ints[onode.output[0]] = t.name
                return
        # Relu/Clip right after a compute op (before its QuantizeLinear): fold into the op as an output clamp.
        if op in ("Relu", "Clip") and data in self.pending and len(self.consumers.get(data, [])) == 1:
            p = self.pending[data]
            self.pending[onode.output[0]] = Pending(p.node, p.args, _merge_act(p.act, activation_bounds(self.ctx, onode)),
                                                    p.sources + [onode.name])
            return
        args = [self._arg(name, onode, i) for i, name in enumerate(onode.input)]
        if info.facts.immediate:
            outs = info.lower(self.ctx, onode, args, None, None)
            for name, tname in zip(onode.output, outs):
                if name:
                    self.deq[name] = tname
            return
        if info.facts.needs_activation and (not args or not isinstance(args[0], Tensor)):
            raise Problem(f"input {data!r} is not a dequantized integer tensor")
        self.pending[onode.output[0]] = Pending(onode, args, None, [onode.name])

    def _arg(self, name: str, onode, index: int):
        if not name:
            return None
        if name in self.deq:
            return self.tensors[self.deq[name]]
        if name in self.g.consts:
            return self.g.consts[name]
        if name in self.pending:
            raise Problem(f"input {name!r} is the float output of {self.pending[name].node.op_type} "
                           f"{self.pending[name].node.name!r}, which is not quantized (no QuantizeLinear): "
                           f"it would run in float. Quantize that op's output.")
        if name in self.ints:
            raise Problem(f"input {name!r} is an integer tensor used without DequantizeLinear")
        raise Problem(f"input {name!r} is a float tensor that is not quantized (no DequantizeLinear before "
                       f"this op); quantize the model with QDQ around every op")

    # ---- Q and DQ --------------------------------------------------------------------------------------------
    def _qparams(self, onode, dtype: str, tensor_shape, what: str) -> QParams:
        a = attrs(onode)
        if a.get("block_size", 0):
            raise Problem("blocked quantization (block_size) is not supported")
        names = list(onode.input) + ["", ""]
        scale_name, zp_name = names[1], names[2]
        if scale_name not in self.g.consts:
            raise Problem(f"scale {scale_name!r} is not a constant")
        scale = np.asarray(self.g.consts[scale_name], dtype=np.float32)
        zp = (np.asarray(self.g.consts[zp_name]).astype(np.int64) if zp_name else np.zeros(scale.shape, np.int64))
        label = f"{what} (node {onode.name!r})"
        if scale.size == 1 and zp.size == 1:  # a one-element 1-D scale/zero point is per tensor (ONNX, ORT)
            scale, zp = scale.reshape(()), zp.reshape(())
        if scale.ndim > 1 or zp.shape != scale.shape:
            raise QuantizationError(f"{label}: scale shape {scale.shape} and zero point shape {zp.shape} must be "
                                    f"equal scalars or 1-D")
        if not np.all(np.isfinite(scale)):
            raise QuantizationError(f"{label}: scale {scale_name!r} contains NaN or infinity; re-run calibration")
        if np.any(scale <= 0):
            bad = float(scale.reshape(-1)[np.argmax(scale.reshape(-1) <= 0)])
            raise QuantizationError(f"{label}: scale {scale_name!r} must be positive, found {bad!r}; "
                                    f"re-run calibration (a constant tensor may need a non-zero range)")
        lo, hi = DTYPES[dtype][1], DTYPES[dtype][2]
        if np.any(zp < lo) or np.any(zp > hi):
            raise QuantizationError(f"{label}: zero point out of the {dtype} range [{lo}, {hi}]")
        axis = None
        if scale.ndim == 1:
            axis = int(a.get("axis", 1))
            rank = len(tensor_shape) if tensor_shape is not None else None
            if rank is not None:
                if axis < 0:
                    axis += rank
                if not 0 <= axis < rank or tensor_shape[axis] != scale.shape[0]:
                    raise QuantizationError(
                        f"{label}: per-axis scale has {scale.shape[0]} values but axis {a.get('axis', 1)} of "
                        f"the tensor (shape {list(tensor_shape)}) does not match")
        return QParams(dtype, scale, zp, axis)

    def _dtype_of(self, name: str, onode) -> str:
        if name in self.g.consts:
            etype = self.g.elem_types.get(name)
            arr = self.g.consts[name]
            if etype in ELEM_DTYPES:
                return ELEM_DTYPES[etype]
            key = str(arr.dtype)
            if key in NP_DTYPES:
                return NP_DTYPES[key]
            raise Problem(f"quantized tensor {name!r} has unsupported type {arr.dtype}")
        etype = self.g.elem_types.get(name)
        if etype in ELEM_DTYPES:
            return ELEM_DTYPES[etype]
        type_name = TensorProto.DataType.Name(etype) if etype in TensorProto.DataType.values() else str(etype)
        raise Problem(f"tensor {name!r} has quantized type {type_name}, which npu-sim does not support "
                       f"(int4, uint4, int8, uint8, int16, uint16 are)")

    def _dequantize(self, onode) -> None:
        x = onode.input[0]
        out = onode.output[0]
        if x in self.g.consts:
            dtype = self._dtype_of(x, onode)
            q = self._qparams(onode, dtype, self.g.consts[x].shape, f"DequantizeLinear of {x!r}")
            name = x if x not in self.tensors else f"{x}@{out}"
            data = np.asarray(self.g.consts[x]).astype(DTYPES[dtype][0])
            self.add_tensor(Tensor(name, out, tuple(data.shape), q, data))
            self.deq[out] = name
            return
        if x in self.ints:
            src = self.tensors[self.ints[x]]
            q = self._qparams(onode, src.q.dtype, src.shape, f"DequantizeLinear of {x!r}")
            if not q.same_as(src.q):
                raise Problem(f"DequantizeLinear uses different scale/zero point than the QuantizeLinear that "
                               f"produced {x!r}")
            self.deq[out] = src.name
            return
        if x in self.g.inputs:
            dtype = self._dtype_of(x, onode)
            shape = self.g.shapes[x]
            q = self._qparams(onode, dtype, shape, f"DequantizeLinear of input {x!r}")
            self.add_tensor(Tensor(x, out, shape, q))
            self.inputs[x] = x
            self.ints[x] = x
            self.deq[out] = x
            return
        raise Problem(f"input {x!r} of DequantizeLinear is neither a constant, a model input nor the output of "
                       f"a QuantizeLinear")

    def _quantize(self, onode) -> None:
        f = onode.input[0]
        out = onode.output[0]
        a = attrs(onode)
        names = list(onode.input) + ["", ""]
        if names[2]:
            dtype = self._dtype_of(names[2], onode)
        elif a.get("output_dtype"):
            dtype = ELEM_DTYPES.get(a["output_dtype"])
            if dtype is None:
                raise Problem(f"output_dtype {a['output_dtype']} is not an integer type npu-sim supports")
        else:
            dtype = "uint8"
        shape = self.g.shapes.get(f) or (self.g.consts[f].shape if f in self.g.consts else None)
        q = self._qparams(onode, dtype, shape, f"QuantizeLinear of {f!r}")
        if f in self.failed:
            self.add_tensor(Tensor(out, f, shape or (), q))
            self.ints[out] = out
            return
        if f in self.pending:
            p = self.pending[f]
            if p.done is not None:  # the same float value quantized twice: requantize from the first
                return self._requantize(onode, self.tensors[p.done], out, f, q)
            if not q.per_tensor:
                raise Problem(f"activation {f!r} is quantized per axis; npu-sim supports per-tensor activations")
            t = self.add_tensor(Tensor(out, f, self.ctx.shape(f), q))
            info = self.op_info(p.node.op_type)
            rules = self.board.rules
            self.ctx.npu_compiled = rules.npu_compiler != "none" and rules.limits(p.node.op_type) is not None
            self.ctx.hazard = lambda text: self.compiler_notes.append((p.node.name, p.node.op_type, text))
            try:
                node = info.lower(self.ctx, p.node, p.args, t, p.act)
            except Problem as exc:
                exc.node = p.node  # the op that cannot be lowered, not the QuantizeLinear that completed its group
                raise
            finally:
                self.ctx.npu_compiled = False
            node.sources = p.sources + [onode.name]
            self.nodes.append(node)
            self.ints[out] = out
            p.done = out
            return
        if f in self.deq:
            src = self.tensors[self.deq[f]]
            if src.q.same_as(q):
                self.ints[out] = src.name
                return
            return self._requantize(onode, src, out, f, q)
        if f in self.g.inputs and f in self.tensors and self.tensors[f].q is None:
            if not q.per_tensor:
                raise Problem(f"model input {f!r} is quantized per axis; only per-tensor input quantization is "
                               f"supported")
            t = self.add_tensor(Tensor(out, f, self.g.shapes[f], q))
            self.inputs[f] = f
            quantize = lowering_of(self.arith.requantize, "Quantize").lower
            self.nodes.append(quantize(self.ctx, onode, self.tensors[f], t))
            self.ints[out] = out
            return
        if f in self.g.consts:
            data = q.quantize(np.asarray(self.g.consts[f], dtype=np.float32))
            self.add_tensor(Tensor(out, f, tuple(data.shape), q, data))
            self.ints[out] = out
            return
        raise Problem(f"QuantizeLinear input {f!r} comes from an op npu-sim could not lower")

    def _requantize(self, onode, src: Tensor, out: str, f: str, q: QParams) -> None:
        if not (q.per_tensor and src.q.per_tensor):
            raise Problem(f"requantizing {f!r} between per-axis quantizations is not supported")
        data = None if not src.is_const else q.quantize(src.q.dequantize(src.data))
        t = self.add_tensor(Tensor(out, f, src.shape, q, data))
        self.ints[out] = out
        if not src.is_const:
            requantize = lowering_of(self.arith.requantize, "Requantize").lower
            self.nodes.append(requantize(self.ctx, onode, src, t))

    def _outputs(self) -> None:
        self.outputs: dict[str, str] = {}
        self.passthrough: dict[str, str] = {}
        for name in self.g.outputs:
            if name in self.failed:
                continue
            if name in self.deq:
                self.outputs[name] = self.deq[name]
            elif name in self.ints:
                self.outputs[name] = self.ints[name]
            elif name in self.inputs and self.tensors[self.inputs[name]].q is None:
                self.passthrough[name] = self.inputs[name]  # a float graph input that is also an output
            elif name in self.pending:
                p = self.pending[name]
                self.problems.append((p.node.name, p.node.op_type,
                                      f"model output {name!r} is computed in float (no QuantizeLinear after it)"))
            elif not any(pr[0] for pr in self.problems):
                self.problems.append((name, "output", f"model output {name!r} is not a quantized tensor"))


def _merge_act(a, b):
    if a is None:
        return b
    return (max(a[0], b[0]), min(a[1], b[1]))


def lower_for_analysis(path, board: Board, input_shapes=None, feed_shapes=None) -> Program:
    """The program that the deployability check and the latency estimate read: lowered tolerantly (nodes that
    cannot be lowered at all are listed in ``problems``), and where the board's own arithmetic cannot compute an
    op yet (e.g. an op the tflite arithmetic does not cover) the op's structure comes from the fixed-point
    lowering instead and the node is listed in ``arith_gaps`` (shapes, dtypes and quantization do not depend on
    the arithmetic; such a program must not be run)."""
    graph = read_model(path, input_shapes, feed_shapes)  # a path, or a model already open (open_model)
    # the lowering rewrites its graph in place: a second lowering needs an untouched copy
    spare = None if board.arithmetic.own_recipe else copy.deepcopy(graph)
    program = lower_graph(graph, board, tolerant=True)
    if not program.problems or spare is None:
        return program
    fixed = dataclasses.replace(board, arithmetic=dataclasses.replace(
        board.arithmetic, requantize="fixedpoint", rounding="half_up"))
    alt = lower_graph(spare, fixed, tolerant=True)
    structural = {name for name, _, _ in alt.problems}
    refused = {name for name, _, _ in program.refusals}
    gaps = [pr for pr in program.problems if pr[0] not in structural and pr[0] not in refused]
    if not gaps and not program.refusals:
        return program
    alt.board = board
    alt.arith_gaps = gaps
    alt.refusals = list(program.refusals)  # still refused by the board, whatever the fixed-point lowering did
    alt.compiler_notes = list(program.compiler_notes)
    alt.unsimulated = set(program.unsimulated)
    return alt


def lower_graph(graph: Graph, board: Board, tolerant: bool = False, partial: bool = False) -> Program:
    """Lower ``graph`` for ``board``. ``tolerant``: nodes that cannot be lowered are left out and listed in
    ``Program.problems`` (node, op, reason) instead of raising ``UnsupportedModelError``; such a program cannot run.
    ``partial``: when every problem is a node the board refuses, the program without those nodes and what depends
    on them (``npu_sim.lowering.partial``; listed in ``Program.refusals`` and ``Program.not_run``), which runs."""
    return Lowering(graph, board, tolerant, partial).lower()


