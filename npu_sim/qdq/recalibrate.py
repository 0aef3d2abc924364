"""Rewriting a QDQ model's quantization: the int16 promotion of activation tensors (done here, on the QDQ graph)
and re-quantization from the float model with onnxruntime's ``quantize_static`` (the written-back fix).

* ``quant_groups(model)``: the activation tensors that share one quantization (one scale/zero-point initializer
  pair: onnxruntime gives MaxPool, Reshape, Flatten, ... their input's), in graph order.
* ``promote_int16(model, tensors)``: a copy of the model in which those activation tensors (with every tensor
  sharing their quantization) are quantized int16, symmetric: scale = max(|rmin|, |rmax|) / 32767 of the 8-bit
  range [rmin, rmax] the calibration gave, zero point 0. The int32 biases of their consumers (bias scale = input
  scale x weight scale) are re-derived with the new input scale. 16-bit QuantizeLinear/DequantizeLinear need
  opset 21; in an older model the rewritten nodes move to the ``com.microsoft`` domain (as onnxruntime 1.18 did).
* ``quantization_settings(model)``: how a QDQ model was made (its ``npu_sim.quantization`` metadata when
  models/build.py wrote it, else read off the graph: activation and weight types, per-channel weights, symmetric
  activations, the model input's fixed quantization).
* ``requantize(float_model, name, out, calibration, settings, extra_options)``: ``quantize_static`` with those
  settings plus the advisor's ``extra_options`` (TensorQuantOverrides and the like), on the float model as the
  front door read it.
* ``load_extra_options(path)``: the advisor's JSON fix as ``quantize_static`` takes it (quant type names ->
  ``QuantType``, scale/zero point -> 0-d numpy arrays).
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npu_sim.boards.rules import QUANT_TYPES
from npu_sim.errors import InputError
from npu_sim.opset import MAC_OPS
from npu_sim.qdq.graph import DEQUANTIZE, QUANTIZE, initializer_values, is_op, onnx_opset

INT16_QMAX = 32767


@dataclass
class QuantGroup:
    """Activation tensors (ONNX float names, in graph order) quantized with one scale/zero-point pair."""
    scale: str                      # initializer names
    zero_point: str
    tensors: list[str] = field(default_factory=list)
    dtype: str = ""
    per_tensor: bool = True
    graph_input: bool = False       # the model's input is one of them


def quant_groups(model) -> list[QuantGroup]:
    """The activation quantization groups of a QDQ model (QuantizeLinear of a non-constant tensor)."""
    g = model.graph
    consts = initializer_values(model.graph)
    inputs = {i.name for i in g.input} - set(consts)
    groups: dict[tuple[str, str], QuantGroup] = {}
    for n in g.node:
        if not is_op(n, QUANTIZE) or n.input[0] in consts or len(n.input) < 3 or not n.input[2]:
            continue
        key = (n.input[1], n.input[2])
        grp = groups.get(key)
        if grp is None:
            zp = consts.get(n.input[2])
            scale = consts.get(n.input[1])
            if zp is None or scale is None:
                continue
            grp = groups[key] = QuantGroup(n.input[1], n.input[2], dtype=str(zp.dtype), per_tensor=scale.size == 1)
        if n.input[0] not in grp.tensors:
            grp.tensors.append(n.input[0])
        grp.graph_input |= n.input[0] in inputs
    return list(groups.values())


def int16_params(scale: float, zero_point: int, dtype: str) -> tuple[np.float32, bool]:
    """int16 symmetric scale covering the 8-bit range, and whether that range starts exactly at 0 (a clamp at 0
    the 8-bit quantization performs — e.g. a Relu onnxruntime removed — which a symmetric int16 would lose)."""
    info = np.iinfo(np.dtype(dtype))
    rmin = (info.min - int(zero_point)) * float(scale)
    rmax = (info.max - int(zero_point)) * float(scale)
    s = max(abs(rmin), abs(rmax)) / INT16_QMAX
    return np.float32(s if s > 0 else 1.0), int(zero_point) == info.min


def promote_int16(model, tensors) -> "onnx.ModelProto":  # noqa: F821
    """A copy of ``model`` with the quantization groups holding ``tensors`` at int16 (see the module docstring)."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    consts = initializer_values(m.graph)
    wanted = set(tensors)
    groups = [gr for gr in quant_groups(m) if wanted & set(gr.tensors)]
    missing = wanted - {t for gr in groups for t in gr.tensors}
    if missing:
        raise InputError(f"cannot promote {sorted(missing)} to int16: not quantized activation tensor(s) of the model")
    new_domain = onnx_opset(m) < 21
    ratio: dict[str, float] = {}     # quantized tensor name (Q output) -> new scale / old scale
    renamed: dict[tuple[str, str], tuple[str, str]] = {}
    for gr in groups:
        if not gr.per_tensor:
            raise InputError(f"cannot promote {gr.tensors[0]!r} to int16: it is quantized per axis")
        if gr.dtype not in ("int8", "uint8"):
            continue  # already 16-bit (or wider)
        old_s = float(consts[gr.scale].reshape(-1)[0])
        old_z = int(consts[gr.zero_point].reshape(-1)[0])
        s16, _ = int16_params(old_s, old_z, gr.dtype)
        sname, zname = gr.scale + "_int16", gr.zero_point + "_int16"
        g.initializer.append(numpy_helper.from_array(np.array(s16, np.float32), sname))
        g.initializer.append(numpy_helper.from_array(np.array(0, np.int16), zname))
        renamed[(gr.scale, gr.zero_point)] = (sname, zname)
        for n in g.node:
            if is_op(n, QUANTIZE) and n.input[0] not in consts \
                    and (n.input[1], n.input[2] if len(n.input) > 2 else "") == (gr.scale, gr.zero_point):
                ratio[n.output[0]] = float(s16) / old_s
    for n in g.node:  # every Q of the groups and every DQ reading what they wrote
        if is_op(n, QUANTIZE) and n.output[0] in ratio:
            n.input[1], n.input[2] = renamed[(n.input[1], n.input[2])]
        elif is_op(n, DEQUANTIZE) and n.input[0] in ratio and len(n.input) > 2 and (n.input[1], n.input[2]) in renamed:
            n.input[1], n.input[2] = renamed[(n.input[1], n.input[2])]
        else:
            continue
        if new_domain:
            n.domain = "com.microsoft"
    if new_domain and not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    _rederive_biases(m, ratio)
    return m


def _rederive_biases(m, ratio: dict[str, float]) -> None:
    """Consumers whose int32 bias scale is input scale x weight scale: the bias is requantized with the input's
    new scale (bias scale x ratio), from its dequantized value; int32 saturation as onnxruntime >= 1.20."""
    from onnx import numpy_helper
    g = m.graph
    producer = {o: n for n in g.node for o in n.output}
    consts = initializer_values(m.graph)
    inits = {i.name: i for i in g.initializer}
    done = set()
    for n in g.node:
        if n.op_type not in MAC_OPS or len(n.input) < 3 or not n.input[2]:
            continue
        x = producer.get(n.input[0])
        if x is None or not is_op(x, DEQUANTIZE) or x.input[0] not in ratio:
            continue
        bdq = producer.get(n.input[2])
        if bdq is None or not is_op(bdq, DEQUANTIZE) or bdq.input[0] not in consts or bdq.input[0] in done:
            continue
        bq = consts[bdq.input[0]]
        if bq.dtype != np.int32:
            continue
        r = ratio[x.input[0]]
        old_scale = consts[bdq.input[1]].astype(np.float32)
        new_scale = (old_scale.astype(np.float64) * r).astype(np.float32)
        real = bq.astype(np.float64) * old_scale.astype(np.float64).reshape(-1) if old_scale.size > 1 else \
            bq.astype(np.float64) * float(old_scale.reshape(-1)[0])
        newq = np.clip(np.rint(real / new_scale.astype(np.float64).reshape(-1 if new_scale.size > 1 else ())),
                       -2**31, 2**31 - 1).astype(np.int32)
        sname = bdq.input[1] + "_int16in"
        g.initializer.append(numpy_helper.from_array(new_scale, sname))
        inits[bdq.input[0]].CopyFrom(numpy_helper.from_array(newq.reshape(bq.shape), bdq.input[0]))
        bdq.input[1] = sname
        done.add(bdq.input[0])


# ---------------------------------------------------------------------------------------------------------------
# Re-quantization with onnxruntime


@dataclass
class QuantSettings:
    activation_type: str = "QInt8"
    weight_type: str = "QInt8"
    per_channel: bool = True
    reduce_range: bool = False
    calibrate_method: str = "MinMax"
    extra_options: dict = field(default_factory=dict)
    source: str = "read off the graph"

    def to_dict(self) -> dict:
        return {"activation_type": self.activation_type, "weight_type": self.weight_type,
                "per_channel": self.per_channel, "reduce_range": self.reduce_range,
                "calibrate_method": self.calibrate_method, "extra_options": _jsonable(self.extra_options),
                "source": self.source}


def quantization_settings(model) -> QuantSettings:
    """How ``model`` (a QDQ ModelProto) was quantized (see the module docstring)."""
    meta = {p.key: p.value for p in model.metadata_props}
    consts = initializer_values(model.graph)
    g = model.graph
    # the model input's fixed quantization (e.g. the board's 1/128 input stub): keep it
    inputs = {i.name for i in g.input} - set(consts)
    input_overrides = {}
    for n in g.node:
        if is_op(n, QUANTIZE) and n.input[0] in inputs and len(n.input) > 2 and n.input[2] in consts:
            input_overrides[n.input[0]] = [{"scale": float(consts[n.input[1]].reshape(-1)[0]),
                                            "zero_point": int(consts[n.input[2]].reshape(-1)[0]),
                                            "dtype": str(consts[n.input[2]].dtype)}]
    if "npu_sim.quantization" in meta:
        try:
            q = json.loads(meta["npu_sim.quantization"])
            return QuantSettings(q.get("activation_type", "QInt8"), q.get("weight_type", "QInt8"),
                                 bool(q.get("per_channel", True)), bool(q.get("reduce_range", False)),
                                 q.get("calibrate_method", "MinMax"), dict(q.get("extra_options") or {}),
                                 "the model's npu_sim.quantization metadata")
        except (ValueError, AttributeError):
            pass
    groups = quant_groups(model)
    acts = [gr.dtype for gr in groups if not gr.graph_input] or [gr.dtype for gr in groups] or ["int8"]
    act = max(set(acts), key=acts.count)
    wtypes, per_channel = [], False
    for n in g.node:
        if is_op(n, DEQUANTIZE) and n.input[0] in consts and len(n.input) > 2 and n.input[2] in consts:
            zp = consts[n.input[2]]
            if zp.dtype != np.int32:
                wtypes.append(str(zp.dtype))
                per_channel |= consts[n.input[1]].size > 1
    wt = max(set(wtypes), key=wtypes.count) if wtypes else "int8"
    zps = [int(consts[gr.zero_point].reshape(-1)[0]) for gr in groups if not gr.graph_input]
    extra = {}
    if zps and all(z == 0 for z in zps) and act.startswith("int"):
        extra["ActivationSymmetric"] = True
    extra["WeightSymmetric"] = True
    if input_overrides:
        extra["TensorQuantOverrides"] = input_overrides
    return QuantSettings(QUANT_TYPES.get(act, "QInt8"), QUANT_TYPES.get(wt, "QInt8"), per_channel, False, "MinMax", extra)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.item() if obj.size == 1 else obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if hasattr(obj, "name") and type(obj).__name__ == "QuantType":
        return obj.name
    return obj


def merge_extra_options(base: dict, fix: dict) -> dict:
    """``base`` extra_options with ``fix`` on top; TensorQuantOverrides merged per tensor (the fix wins)."""
    out = {k: v for k, v in base.items() if k != "TensorQuantOverrides"}
    out.update({k: v for k, v in fix.items() if k != "TensorQuantOverrides"})
    tqo = dict(base.get("TensorQuantOverrides") or {})
    for name, lst in (fix.get("TensorQuantOverrides") or {}).items():
        tqo[name] = lst
    if tqo:
        out["TensorQuantOverrides"] = tqo
    return out


def to_ort_extra_options(opts: dict) -> dict:
    """JSON extra_options -> what quantize_static takes: quant type names become ``QuantType`` members, scale and
    zero point 0-d numpy arrays (zero point of the given ``dtype``, else of the quant type)."""
    from onnxruntime.quantization import QuantType
    dtypes = {"QInt8": np.int8, "QUInt8": np.uint8, "QInt16": np.int16, "QUInt16": np.uint16}
    out = dict(opts)
    tqo = {}
    for name, lst in (opts.get("TensorQuantOverrides") or {}).items():
        conv = []
        for d in lst:
            d = dict(d)
            dt = d.pop("dtype", None)
            if isinstance(d.get("quant_type"), str):
                qt = d["quant_type"]
                if qt not in QuantType.__members__:
                    raise InputError(f"TensorQuantOverrides[{name!r}]: unknown quant_type {qt!r} (one of "
                                     f"{', '.join(QuantType.__members__)})")
                d["quant_type"] = QuantType[qt]
                dt = dt or np.dtype(dtypes.get(qt, np.int8)).name
            if "scale" in d:
                d["scale"] = np.array(d["scale"], np.float32)
            if "zero_point" in d:
                d["zero_point"] = np.array(d["zero_point"], np.dtype(dt or "int8"))
            conv.append(d)
        tqo[name] = conv
    if tqo:
        out["TensorQuantOverrides"] = tqo
    return out


def load_extra_options(path) -> dict:
    """Read the advisor's ``--overrides`` JSON into quantize_static's ``extra_options``."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{p}: cannot read the overrides JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{p}: the overrides JSON must be an object (quantize_static extra_options)")
    return to_ort_extra_options(doc)


def requantize(float_model, name: str, out_path, calibration: list[dict], settings: QuantSettings,
               fix: dict | None = None):
    """Quantize ``float_model`` (a ModelProto, read by the front door: ``OpenModel.float_model``; ``name`` says
    which in messages) again with ``quantize_static`` (QDQ): ``settings`` plus the ``fix`` extra_options on top;
    MinMax calibration over ``calibration`` (feed dicts). Writes ``out_path``; returns the extra_options used
    (JSON form). onnxruntime is given a copy (it may rewrite the model it is given)."""
    import onnx
    try:
        from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                              quantize_static)
    except ImportError:
        raise InputError("re-quantization runs onnxruntime's quantize_static: pip install 'npu-sim[report]'") from None
    if not calibration:
        raise InputError("re-quantization needs calibration data (--requantize CALIB_DIR)")
    opts = merge_extra_options(settings.extra_options, fix or {})
    feeds = list(calibration)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    src, dst = onnx.ModelProto(), str(Path(out_path).resolve())
    src.CopyFrom(float_model)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="npu-sim-requant.") as tmp:
        os.chdir(tmp)  # calibration writes an augmented model and temporary files
        try:
            quantize_static(src, dst, Reader(),
                            quant_format=QuantFormat.QDQ, per_channel=settings.per_channel,
                            reduce_range=settings.reduce_range,
                            activation_type=QuantType[settings.activation_type],
                            weight_type=QuantType[settings.weight_type],
                            calibrate_method=getattr(CalibrationMethod, settings.calibrate_method,
                                                     CalibrationMethod.MinMax),
                            extra_options=to_ort_extra_options(opts))
        except InputError:
            raise
        except Exception as exc:
            raise InputError(f"onnxruntime quantize_static failed re-quantizing {name}: {exc}") from None
        finally:
            os.chdir(cwd)
    return _jsonable(opts)
