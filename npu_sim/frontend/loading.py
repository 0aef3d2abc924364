"""Reading a model file's bytes safely: the file checked before any byte is read, external tensor data only from
inside the model's folder, sparse initializers made dense. ``npu_sim.frontend.reader.open_model`` (the front door)
calls these; nothing else reads an ONNX file.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from npu_sim.errors import ModelLoadError
from npu_sim.frontend.paths import model_file


def load_file(path) -> tuple[onnx.ModelProto, Path]:
    """The ONNX model in the file ``path``, its external data loaded (from the model's folder only), and the
    file's path; a ``ModelLoadError`` saying what is wrong otherwise."""
    p = model_file(path)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:
        raise ModelLoadError(f"{p}: not an ONNX model ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not model.graph.node and not model.graph.input:
        raise ModelLoadError(f"{p}: not an ONNX model (no graph found in the file)")
    load_external_data(model, p)
    return model, p


def load_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Load external tensor data, refusing any location that escapes the model's folder."""
    base = path.parent.resolve()
    tensors = [t for t in all_tensors(model) if t.data_location == onnx.TensorProto.EXTERNAL]
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if "\x00" in loc:
            raise ModelLoadError(f"{path}: tensor {t.name!r} points its external data at {loc!r}, a name with a NUL "
                                 f"byte; refusing to read it (fix the location)")
        target = (base / loc).resolve()
        if not loc or os.path.isabs(loc) or ".." in Path(loc).parts or not target.is_relative_to(base):
            raise ModelLoadError(f"{path}: tensor {t.name!r} points its external data at {loc!r}, outside the "
                                 f"model's folder; refusing to read it (move the data file beside the model)")
        if not target.is_file():
            raise ModelLoadError(f"{path}: tensor {t.name!r} needs external data file {loc!r}, which is missing "
                                 f"from {base}")
    if tensors:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(base))
        except Exception as exc:
            raise ModelLoadError(f"{path}: cannot read external data ({exc})") from None


def all_tensors(model):
    """Every stored tensor: initializers, sparse ones, Constant values, in the graph and in its sub-graphs."""
    yield from _graph_tensors(model.graph)


def _graph_tensors(graph):
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values
                yield attr.sparse_tensor.indices
            yield from attr.tensors
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graph_tensors(sub)


def densify_sparse_initializers(model: onnx.ModelProto, path) -> None:
    """Sparse initializers (valid ONNX) become ordinary ones, so every later step sees one kind of constant."""
    for sparse in list(model.graph.sparse_initializer):
        name = sparse.values.name
        try:
            dense = numpy_helper.to_array(sparse.values).reshape(-1)
            indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
            shape = tuple(int(d) for d in sparse.dims)
            out = np.zeros(int(np.prod(shape)), dense.dtype)
            flat = (np.ravel_multi_index(tuple(indices.T), shape) if indices.ndim == 2 else indices)
            out[flat] = dense
        except Exception as exc:  # noqa: BLE001 - onnx/numpy raise several types on malformed sparse data
            raise ModelLoadError(f"{path}: cannot read sparse initializer {name!r}: {exc}") from None
        model.graph.initializer.append(numpy_helper.from_array(out.reshape(shape), name))
    del model.graph.sparse_initializer[:]
