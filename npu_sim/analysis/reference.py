"""The float reference on onnxruntime: the one session builder, and ``FloatReference`` (named float tensors).

The reference is a float model (``--float``: the one quantize_static started from) or, without one, the QDQ
model's own float semantics (``npu_sim.qdq.float_model.derive_float_model``). Every session runs on the CPU
provider with graph optimizations off and one thread (deterministic). onnxruntime is optional (the ``report``
extra): it is imported when a session is built, and its absence is a ``FloatReferenceError`` saying how to
install it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from npu_sim.errors import FloatReferenceError, ModelLoadError
from npu_sim.qdq.float_model import derive_float_model, output_aliases


def import_onnxruntime():
    """The ``onnxruntime`` module, or a ``FloatReferenceError`` telling how to install it."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise FloatReferenceError("the accuracy report runs its float reference on onnxruntime, which is not "
                                  "installed: pip install 'npu-sim[report]' (or pip install onnxruntime)") from None
    return ort


def ort_session(model, threads: int = 1):
    """An onnxruntime ``InferenceSession`` of ``model`` (a ModelProto): CPU provider, no graph optimizations,
    ``threads`` intra-op threads, one inter-op thread, warnings off. onnxruntime's own exceptions pass through."""
    ort = import_onnxruntime()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


class FloatReference:
    """Runs the float reference (a float model, or the QDQ model's float semantics) and returns named tensors."""

    def __init__(self, qdq_path, float_path=None, threads: int = 1):
        import onnx
        self.kind = "float model" if float_path else "QDQ model float semantics"
        try:
            qdq = onnx.load(str(qdq_path))
        except Exception as exc:
            raise ModelLoadError(f"{qdq_path}: cannot read the ONNX model ({exc})") from None
        self.aliases = output_aliases(qdq)
        self.qdq_inputs = [i.name for i in qdq.graph.input if i.name not in {t.name for t in qdq.graph.initializer}]
        if float_path:
            model = self._load_float_model(Path(float_path))
            self.source = str(Path(float_path))
        else:
            model = derive_float_model(qdq)
            self.source = str(qdq_path)
        self.model = model
        g = model.graph
        self.available = {o for n in g.node for o in n.output if o} | set(self.qdq_inputs)
        self.outputs = [o.name for o in g.output]
        self.threads = threads
        self._session = None
        self._wanted: list[str] = []

    def _load_float_model(self, p: Path):
        """The ``--float`` model, checked: readable, without QDQ nodes, with the QDQ model's inputs."""
        import onnx
        if not p.is_file():
            raise FloatReferenceError(f"--float {str(p)!r}: file not found")
        try:
            model = onnx.load(str(p))
        except Exception as exc:
            raise FloatReferenceError(f"--float {str(p)!r}: cannot read it as an ONNX model ({exc})") from None
        qops = [n.name or n.op_type for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
        if qops:
            raise FloatReferenceError(f"--float {str(p)!r} contains QuantizeLinear/DequantizeLinear nodes "
                                      f"({qops[0]!r}, ...); give the float model quantize_static started from")
        finputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
        missing = [n for n in self.qdq_inputs if n not in finputs]
        if missing:
            raise FloatReferenceError(f"--float {str(p)!r} has no input(s) {missing} (its inputs: "
                                      f"{sorted(finputs)}); give the float model this QDQ model was quantized "
                                      f"from")
        return model

    def name_for(self, float_name: str) -> str | None:
        if float_name in self.available:
            return float_name
        alias = self.aliases.get(float_name)
        return alias if alias in self.available else None

    def prepare(self, wanted) -> None:
        """Expose ``wanted`` tensors (plus the graph outputs) and build the onnxruntime session."""
        import onnx
        from onnx import helper
        import_onnxruntime()
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        have = {o.name for o in m.graph.output}
        self._wanted = [w for w in dict.fromkeys(wanted) if w not in self.qdq_inputs]
        for w in self._wanted:
            if w not in have:
                m.graph.output.append(helper.make_tensor_value_info(w, onnx.TensorProto.FLOAT, None))
        try:
            self._session = ort_session(m, self.threads)
        except Exception as exc:
            raise FloatReferenceError(f"onnxruntime cannot load the float reference ({self.kind}, "
                                      f"{self.source}): {exc}") from None
        self._names = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outs = self._session.run(self._names, feeds)
        except Exception as exc:
            raise FloatReferenceError(f"onnxruntime failed running the float reference ({self.kind}, "
                                      f"{self.source}): {exc}") from None
        res = dict(zip(self._names, outs))
        res.update(feeds)
        return res
