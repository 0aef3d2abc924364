"""A seeded, schema-driven mutation generator (issue 32, item 3) over cuts of real quantized models.

Bases: the committed demo model and the hostile corpus's ``mixed`` and ``acts`` models (tests/hostile_corpus.py,
tests/hostile_schema.py: quantized here by onnxruntime's ``quantize_static``), and, when models/build.py has them
cached (never built here), the first layers of PP-OCR cls / rec / det and MobileNetV2 cut out with
``onnx.utils.Extractor`` and given a small input.

Every mutant is ``Mutant(id, cls, desc, base, edit)``: ``edit(model)`` changes a copy of the base in place. The
classes (``CLASSES``) are those of the issue; ``candidates(base, model)`` lists every mutant of a base in a fixed
order and ``generate(bases, count, seed)`` draws ``count`` of them, round robin over the classes, with a seeded
generator: the same seed and bases give the same mutants. tests/mutant_runner.py runs them.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from npu_sim.frontend.validate_schema import CHOICES, schema_of
from tests import hostile_edits as e
from tests.hostile_corpus import demo_base, mixed_base
from tests.hostile_schema import acts_base
from tests.mutant_graph import GRAPH_CLASSES

try:
    from models import build as model_build  # the real models' cache (a checkout without models/ has none)
except ImportError:
    model_build = None

QDQ = ("QuantizeLinear", "DequantizeLinear")
# cached real models and where to cut them: (name, QuantizeLinear count kept, input shape given to the cut)
CUTS = {"ppocr_cls_a8w8": (6, [1, 3, 24, 48]), "ppocr_rec_a8w8": (6, [1, 3, 16, 40]),
        "ppocr_det_a16w8": (6, [1, 3, 32, 32]), "mobilenetv2_a8w8u": (6, [1, 3, 32, 32])}
CLASSES = ("attribute", "qdq_param", "initializer", "edge", "qdq_pair", "value_info", "opset", "op_swap", "dims")


@dataclass
class Mutant:
    id: str
    cls: str
    desc: str
    base: str
    edit: Callable


# ---- bases -------------------------------------------------------------------------------------------------------
def cut(model: onnx.ModelProto, keep: int, shape: list) -> onnx.ModelProto:
    """The first ``keep`` activation QuantizeLinear nodes' worth of ``model``: from its input to the
    DequantizeLinear after the last of them, the input fixed to ``shape``."""
    inits = {t.name for t in model.graph.initializer}
    qs = [n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]
    q = qs[min(keep, len(qs)) - 1]
    out = next(n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0])
    x = model.graph.input[0].name
    sub = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(model)).extract_model([x], [out])
    del sub.graph.value_info[:]
    e.input_dims(sub, shape)
    sub.graph.output[0].type.tensor_type.ClearField("shape")
    sub.graph.output[0].type.tensor_type.shape.CopyFrom(
        onnx.shape_inference.infer_shapes(sub, strict_mode=True).graph.output[0].type.tensor_type.shape)
    return sub


def bases(folder, real: bool = True) -> dict[str, onnx.ModelProto]:
    """The base models by name; ``real``: the cuts of the cached real models too (the ones cached)."""
    folder = Path(folder)
    out = {"demo": demo_base(), "mixed": mixed_base(folder / "mixed"), "acts": acts_base(folder / "acts")}
    if not real or model_build is None:
        return out
    for name, (keep, shape) in CUTS.items():
        path = model_build.artifact_dir() / f"{name}.onnx"
        if path.exists():
            out[name.split("_a")[0]] = cut(onnx.load(str(path)), keep, shape)
    return out


# ---- attributes: every attribute of every node's schema x the value kinds ---------------------------------------
def _ints_len(name: str, node, model) -> int:
    for a in node.attribute:
        if a.name == "kernel_shape":
            return len(a.ints) * (2 if name == "pads" else 1)
    return 4 if name == "pads" else 2


def attr_values(op: str, name: str, kind: int, current, n: int):
    """(kind of mutation, value or None for missing) for one attribute of type ``kind``."""
    if current is not None:
        yield "missing", None
    if kind == AttributeProto.INT:
        v = current if current is not None else 1
        yield from (("wrong type", 1.5), ("wrong type", [v, v]), ("wrong type", b"1"), ("out of range", -1),
                    ("out of range", 0), ("out of range", v + 7), ("extreme", 2 ** 62), ("extreme", -2 ** 62))
    elif kind == AttributeProto.INTS:
        v = list(current) if current is not None else [1] * n
        yield from (("wrong type", v[0] if v else 1), ("wrong type", [float(x) for x in v] or [1.0]),
                    ("wrong length", v + v[:1] or [1]), ("wrong length", v[:-1]), ("out of range", [-1] * len(v)),
                    ("out of range", [0] * len(v)), ("extreme", [2 ** 40] * len(v)), ("valid", [2] * len(v)))
    elif kind == AttributeProto.FLOAT:
        yield from (("wrong type", 1), ("wrong type", [0.5, 0.5]), ("nan/inf", float("nan")),
                    ("nan/inf", float("inf")), ("nan/inf", float("-inf")), ("extreme", 1e30), ("extreme", -1e30),
                    ("extreme", 1e-42), ("out of range", -0.5), ("out of range", 0.0))
    elif kind == AttributeProto.STRING:
        yield from (("wrong type", 0), ("out of range", b"bogus"), ("extreme", b"x" * 5000))
        for choice in CHOICES.get((op, name)) or CHOICES.get((None, name)) or ():
            yield "valid", choice.encode()


def _set(node, name, value):
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    if value is not None:
        node.attribute.append(helper.make_attribute(name, value))


def attribute_mutants(model):
    opset = _opset(model)
    for i, node in enumerate(model.graph.node):
        schema = schema_of(node.op_type, opset)
        if schema is None:
            continue
        given = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for name, spec in sorted(schema.attributes.items()):
            current = given.get(name)
            n = len(current) if isinstance(current, list) else _ints_len(name, node, model)
            for kind, value in attr_values(node.op_type, name, spec.type.value, current, n):
                shown = "missing" if value is None else repr(value if not isinstance(value, bytes) or
                                                             len(value) < 20 else value[:8] + b"...")
                yield (f"{_label(node, i)} attribute {name} {kind}: {shown}",
                       lambda m, i=i, name=name, value=value: _set(m.graph.node[i], name, value))


# ---- Q/DQ parameters ---------------------------------------------------------------------------------------------
SCALES = (("0", 0.0), ("negative", -1.0), ("NaN", np.nan), ("inf", np.inf), ("denormal", 1e-42), ("1e30", 1e30),
          ("1e-30", 1e-30))


def _put(m, name, array):
    """Replace initializer ``name`` with ``array``."""
    m.graph.initializer.remove(e.init(m, name))
    m.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))


def _out_of_range(m, name, elem, like, value):
    """Initializer ``name`` of type ``elem`` holding ``value`` (outside the type) in its int32_data field."""
    t = onnx.TensorProto(name=name, data_type=elem, dims=list(like.shape))
    t.int32_data.extend([value] * like.size)
    m.graph.initializer.remove(e.init(m, name))
    m.graph.initializer.append(t)


def qdq_param_mutants(model):
    inits = {t.name: t for t in model.graph.initializer}
    seen = set()
    for i, node in enumerate(model.graph.node):
        if node.op_type not in QDQ or len(node.input) < 2 or node.input[1] not in inits:
            continue
        scale = node.input[1]
        s = numpy_helper.to_array(inits[scale])
        where = f"{_label(node, i)} scale {scale!r}"
        if scale not in seen:
            seen.add(scale)
            for kind, v in SCALES:
                yield f"{where} = {kind}", lambda m, sc=scale, v=v, s=s: _put(m, sc, np.full(s.shape, v, np.float32))
                if s.size > 1:
                    yield (f"{where} channel 0 = {kind}",
                           lambda m, sc=scale, v=v, s=s: _put(m, sc, np.where(np.arange(s.size) == 0, v, s)
                                                              .astype(np.float32)))
            for dt in (np.float16, np.float64):
                yield (f"{where} stored as {np.dtype(dt).name}",
                       lambda m, sc=scale, s=s, dt=dt: _put(m, sc, s.astype(dt)))
            yield (f"{where} one value too many",
                   lambda m, sc=scale, s=s: _put(m, sc, np.append(s.reshape(-1), s.reshape(-1)[:1])))
            yield f"{where} as 2-D", lambda m, sc=scale, s=s: _put(m, sc, s.reshape(1, -1))
        zp = node.input[2] if len(node.input) > 2 else ""
        if zp in inits and zp not in seen:
            seen.add(zp)
            yield from _zp_mutants(_label(node, i), zp, inits[zp])


def _zp_mutants(label, zp, t):
    z = numpy_helper.to_array(t)
    lo, hi = (np.iinfo(z.dtype).min, np.iinfo(z.dtype).max) if z.dtype.kind in "iu" else (0, 0)
    where = f"{label} zero point {zp!r}"
    yield f"{where} = 0", lambda m: _put(m, zp, np.zeros_like(z))
    yield f"{where} = max", lambda m: _put(m, zp, np.full_like(z, hi))
    yield f"{where} = min", lambda m: _put(m, zp, np.full_like(z, lo))
    for v in [v for v in (hi + 1, lo - 1, 2 ** 31 - 1) if -2 ** 31 <= v < 2 ** 31]:  # int32_data holds int32s
        yield f"{where} = {v} (out of range)", lambda m, v=v: _out_of_range(m, zp, t.data_type, z, v)
    for dt in (np.int32, np.float32, np.int16, np.uint8 if z.dtype == np.int8 else np.int8):
        yield f"{where} stored as {np.dtype(dt).name}", lambda m, dt=dt: _put(m, zp, z.astype(dt))
    yield f"{where} one value too many", lambda m: _put(m, zp, np.append(z.reshape(-1), z.reshape(-1)[:1]))


# ---- initializers --------------------------------------------------------------------------------------------------
def initializer_mutants(model):
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.size < 2:
            continue
        name = t.name
        where = f"initializer {name!r} ({a.dtype.name}{list(a.shape)})"
        for dt in (np.float32, np.float64, np.int16, np.int64, np.uint8 if a.dtype == np.int8 else np.int8):
            if dt != a.dtype:
                yield f"{where} stored as {np.dtype(dt).name}", lambda m, n=name, a=a, dt=dt: _put(m, n, a.astype(dt))
        yield f"{where} flattened", lambda m, n=name, a=a: _put(m, n, a.reshape(-1))
        yield f"{where} one more axis", lambda m, n=name, a=a: _put(m, n, a[None])
        yield f"{where} one value short", lambda m, n=name, a=a: _put(m, n, a.reshape(-1)[:-1])
        yield f"{where} empty", lambda m, n=name, a=a: _put(m, n, a.reshape(-1)[:0])
        yield f"{where} raw data truncated to half", lambda m, n=name: _raw(m, n, 0.5)
        yield f"{where} raw data one byte short", lambda m, n=name: _raw(m, n, -1)
        yield f"{where} dims huge, no data", lambda m, n=name: _huge_dims(m, n)


def _raw(m, name, how):
    t = e.init(m, name)
    data = numpy_helper.to_array(t).tobytes()
    for field in ("int32_data", "float_data", "int64_data", "double_data"):
        t.ClearField(field)
    t.raw_data = data[: int(len(data) * how)] if how > 0 else data[:-1]


def _huge_dims(m, name):
    t = e.init(m, name)
    del t.dims[:]
    t.dims.extend([10 ** 7, 10 ** 7])


# ---- opsets and dims ---------------------------------------------------------------------------------------------
def _opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def opset_mutants(model):
    for v in range(10, 26):
        if v != _opset(model):
            yield f"default-domain opset {_opset(model)} -> {v}", lambda m, v=v: e.opset(v)(m, None)


def dims_mutants(model):
    x = model.graph.input[0]
    dims = [d.dim_value for d in x.type.tensor_type.shape.dim]
    variants = {"batch 2": [2] + dims[1:], "batch 3": [3] + dims[1:], "zero batch": [0] + dims[1:],
                "zero spatial dim": dims[:-1] + [0], "huge spatial": dims[:-2] + [2 ** 31, 2 ** 31],
                "spatial 1e5": dims[:-1] + [100000], "odd spatial": dims[:-2] + [d + 1 for d in dims[-2:]],
                "spatial 1x1": dims[:-2] + [1, 1], "rank - 1": dims[1:], "rank + 1": [1] + dims,
                "channels + 1": dims[:1] + [dims[1] + 1] + dims[2:], "negative dim": dims[:-1] + [-3]}
    for kind, new in variants.items():
        yield f"input {x.name!r} {dims} -> {new} ({kind})", lambda m, new=new: e.input_dims(m, new)
    yield f"input {x.name!r} dims symbolic", lambda m: e.all_dims_dynamic(m, None)
    yield f"input {x.name!r} batch symbolic", lambda m: _batch_symbolic(m)


def _batch_symbolic(m):
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"


def _label(node, i) -> str:
    return f"node {node.name!r} ({node.op_type})" if node.name else f"node #{i} ({node.op_type})"


SOURCES = {"attribute": attribute_mutants, "qdq_param": qdq_param_mutants, "initializer": initializer_mutants,
           "opset": opset_mutants, "dims": dims_mutants, **GRAPH_CLASSES}


def candidates(base: str, model: onnx.ModelProto) -> dict[str, list[Mutant]]:
    """Every mutant of ``model`` by class, in a fixed order."""
    out = {}
    for cls in CLASSES:
        out[cls] = [Mutant(f"{base}/{cls}/{k}", cls, desc, base, edit)
                    for k, (desc, edit) in enumerate(SOURCES[cls](model))]
    return out


def generate(models: dict[str, onnx.ModelProto], count: int, seed: int) -> list[Mutant]:
    """``count`` mutants drawn with seed ``seed``: round robin over (base, class), each pool shuffled."""
    rng = np.random.default_rng(seed)
    pools = []
    for base in sorted(models):
        for cls, items in candidates(base, models[base]).items():
            if items:
                pools.append([items[k] for k in rng.permutation(len(items))])
    picked: list[Mutant] = []
    k = 0
    while len(picked) < count and any(pools):
        for pool in pools:
            if k < len(pool) and len(picked) < count:
                picked.append(pool[k])
        k += 1
    return picked


def build(mutant: Mutant, model: onnx.ModelProto, path: Path) -> Path:
    """Write ``mutant`` applied to a copy of its base ``model`` to ``path``."""
    m = copy.deepcopy(model)
    mutant.edit(m)
    onnx.save(m, str(path))
    return path
