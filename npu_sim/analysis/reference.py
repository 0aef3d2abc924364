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

from npu_sim.errors import FloatReferenceError
from npu_sim.frontend.reader import open_model
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
    """Runs the float reference (a float model, or the QDQ model's float semantics) and returns named tensors.
    ``qdq``: the QDQ model, open (``open_model``) or a path; ``float_path``: the float model beside it."""

    def __init__(self, qdq, float_path=None, threads: int = 1):
        opened = open_model(qdq)
        self.kind = "float model" if float_path else "QDQ model float semantics"
        self.aliases = output_aliases(opened.proto)
        self.qdq_inputs = list(opened.inputs)
        if float_path:
            model = opened.float_model(float_path)
            self.source = str(Path(float_path))
        else:
            model = derive_float_model(opened.proto)
            self.source = opened.file or opened.name
        self.model = model
        g = model.graph
        self.available = {o for n in g.node for o in n.output if o} | set(self.qdq_inputs)
        self.outputs = [o.name for o in g.output]
        self.threads = threads
        self._session = None
        self._wanted: list[str] = []

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
