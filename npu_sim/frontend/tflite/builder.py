"""The ONNX graph being built from a .tflite (``npu_sim.frontend.tflite.translate`` drives it, op by op).

Every TFLite tensor keeps its name and its layout: an activation is the ONNX integer tensor of the same name,
NHWC as TFLite stores it (a board's dump matches by name, with no layout guess). Each operator becomes its QDQ
group -- ``DequantizeLinear`` of its inputs, the ONNX op, the fused activation (``Relu``/``Clip``), then
``QuantizeLinear`` into the output tensor -- which the ``tflite`` arithmetic (board ``requantize = "tflite"``)
lowers to TFLite's own integer kernels. ONNX convolutions and pools are NCHW: around them the integers are
transposed (``NAME@nchw``), and those ``Transpose`` nodes are listed in ``Translation.layout``: a change of
layout only, which the cost and memory models count as free (Vela keeps NHWC throughout).

Weights stay integers (OHWI becomes OIHW; FULLY_CONNECTED's [O, K] becomes Gemm's [K, O]); biases stay int32
(int64 for 16x8, narrowed to int32 where every value fits). An operator npu-sim does not translate is refused by
name (``UnsupportedModelError``).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from npu_sim.errors import UnsupportedModelError
from npu_sim.frontend.tflite.flatbuf import TflModel, TflTensor

ELEM = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int8": TensorProto.INT8,
        "uint8": TensorProto.UINT8, "int16": TensorProto.INT16, "uint16": TensorProto.UINT16,
        "int32": TensorProto.INT32, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}
TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)
_ACTS = {"NONE": None, "RELU": (0.0, None), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}


class Builder:
    def __init__(self, m: TflModel):
        self.m = m
        self.nodes: list = []
        self.inits: list = []
        self.layout: set[str] = set()
        self.names: dict[int, str] = {}
        self.nchw: dict[int, str] = {}
        self.dq: dict = {}  # DequantizeLinear outputs made, by integer tensor (or constant's key)
        self.folded: dict[int, np.ndarray] = {}  # int tensors computed from shapes and constants while translating
        self._used: set[str] = set()
        self._count = 0
        for t in m.tensors:
            base = t.name or f"tensor{t.index}"
            name = base if base not in self._used else f"{base}#{t.index}"
            self._used.add(name)
            self.names[t.index] = name

    # ---- names and constants --------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        self._count += 1
        name = f"{hint}#{self._count}"
        self._used.add(name)
        return name

    def const(self, array, hint: str) -> str:
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs, outputs, name: str | None = None, **attrs) -> None:
        self.nodes.append(helper.make_node(op, list(inputs), list(outputs), name=name or self.fresh(op), **attrs))

    def tensor(self, i: int) -> TflTensor:
        return self.m.tensors[i]

    def value(self, i: int) -> np.ndarray | None:
        """The constant value of tensor ``i`` (stored in the file, or folded), None for an activation."""
        if i < 0:
            return None
        t = self.m.tensors[i]
        return t.data if t.data is not None else self.folded.get(i)

    # ---- quantization -----------------------------------------------------------------------------------------
    def scale_zp(self, t: TflTensor, hint: str, axis_len: int | None = None):
        q = t.quant
        dtype = np.dtype(t.dtype) if t.dtype not in ("int32", "int64") else np.dtype(t.dtype)
        if q.scale.size == 1 and (axis_len is None or axis_len == 1 or q.scale.size == 1):
            return (self.const(np.float32(q.scale[0]), f"{hint}/scale"),
                    self.const(np.asarray(q.zero_point[0], dtype), f"{hint}/zero_point"), None)
        zp = np.broadcast_to(q.zero_point, q.scale.shape).astype(dtype)
        return self.const(q.scale.astype(np.float32), f"{hint}/scale"), self.const(zp, f"{hint}/zero_point"), True

    def activation_q(self, i: int):
        t = self.tensor(i)
        if t.quant is None or t.dtype not in ("int8", "uint8", "int16", "uint16"):
            return None
        if t.quant.scale.size != 1:
            raise self.refuse_tensor(i, "is quantized per channel; TFLite activations are quantized per tensor")
        return t

    def float_of(self, i: int, nchw: bool = False) -> str:
        """The float (dequantized) ONNX tensor of TFLite tensor ``i``, NCHW when asked."""
        t = self.tensor(i)
        if t.data is not None:
            return self.const_float(i, nchw)
        if nchw and i not in self.nchw:  # dequantized, then transposed (the walk moves the integers)
            if ("nchw", i) not in self.dq:
                out = self.dq[("nchw", i)] = f"{self.names[i]}@nchw"
                self.node("Transpose", [self.float_of(i)], [out], name=out, perm=list(TO_NCHW))
                self.layout.add(out)
            return self.dq[("nchw", i)]
        src = self.nchw[i] if nchw else self.names[i]
        if self.activation_q(i) is None:
            return src  # a float tensor (before QUANTIZE / after DEQUANTIZE)
        if src not in self.dq:
            s, z, _ = self.scale_zp(t, src)
            out = f"{src}/dq"
            self.node("DequantizeLinear", [src, s, z], [out], name=out)
            self.dq[src] = out
        return self.dq[src]

    def const_float(self, i: int, nchw: bool = False) -> str:
        """A constant operand (an ADD's or MUL's second input): its integers and their DequantizeLinear."""
        t = self.tensor(i)
        data = t.data if not nchw or t.data.ndim != 4 else t.data.transpose(TO_NCHW)
        if t.quant is None:
            return self.const(data.astype(np.float32), self.names[i])
        q = self.const(data, self.names[i])
        s, z, per_axis = self.scale_zp(t, self.names[i])
        out = self.fresh(f"{self.names[i]}/dq")
        self.node("DequantizeLinear", [q, s, z], [out], name=out, **({"axis": t.quant.axis} if per_axis else {}))
        return out

    def quantize(self, f: str, i: int, nchw: bool = False, act: str = "NONE") -> None:
        """Close the group: the fused activation on ``f``, then QuantizeLinear into TFLite tensor ``i``."""
        f = self.activation(f, act, self.names[i])
        t = self.activation_q(i)
        if t is None:
            raise self.refuse_tensor(i, "is not an int8/int16 quantized tensor; npu-sim simulates full-integer "
                                        "models (convert with the TFLite converter's full-integer quantization)")
        name = self.names[i]
        target = f"{name}@nchw" if nchw else name
        s, z, _ = self.scale_zp(t, name)
        self.node("QuantizeLinear", [f, s, z], [target], name=f"{name}/q")
        if nchw:
            self.nchw[i] = target
            self.node("Transpose", [target], [name], name=f"{name}@nhwc", perm=list(TO_NHWC))
            self.layout.add(f"{name}@nhwc")

    def activation(self, f: str, act: str, hint: str) -> str:
        if act not in _ACTS:
            raise UnsupportedModelError(f"{self.m.path}: {hint!r}: fused activation {act} is not supported "
                                        f"(supported: {', '.join(_ACTS)})")
        bounds = _ACTS[act]
        if bounds is None:
            return f
        out = self.fresh(f"{hint}/{act.lower()}")
        if bounds[1] is None:
            self.node("Relu", [f], [out], name=out)
        else:
            lo = self.const(np.float32(bounds[0]), f"{hint}/min")
            hi = self.const(np.float32(bounds[1]), f"{hint}/max")
            self.node("Clip", [f, lo, hi], [out], name=out)
        return out

    def refuse_tensor(self, i: int, what: str) -> UnsupportedModelError:
        return UnsupportedModelError(f"{self.m.path}: tensor {i} {self.names[i]!r} {what}")

    def weights(self, i: int, data: np.ndarray, axis: int) -> str:
        """Constant integer weights (already in ONNX's layout) and their DequantizeLinear; ``axis``: the ONNX
        axis of the per-channel scales."""
        if ("w", i, axis) in self.dq:
            return self.dq[("w", i, axis)]
        t = self.tensor(i)
        if t.data is None or t.quant is None:
            raise self.refuse_tensor(i, "(weights) is not a constant quantized tensor; npu-sim simulates "
                                        "full-integer models with constant weights")
        q = self.const(data, self.names[i])
        s, z, per_axis = self.scale_zp(t, self.names[i])
        out = self.dq[("w", i, axis)] = self.fresh(f"{self.names[i]}/dq")
        self.node("DequantizeLinear", [q, s, z], [out], name=out, **({"axis": axis} if per_axis else {}))
        return out

    def bias(self, i: int, n: int, x: int, w: int) -> str:
        """The int32 (16x8: int64, narrowed where it fits) bias of ``n`` channels and its DequantizeLinear
        at input scale x weight scale, as TFLite adds it)."""
        if ("b", i) in self.dq:
            return self.dq[("b", i)]
        t = self.tensor(i)
        if t.data is None or t.dtype not in ("int32", "int64"):
            raise self.refuse_tensor(i, f"(a bias) is {'not constant' if t.data is None else t.dtype}; TFLite's "
                                        f"integer kernels take a constant int32 or int64 bias")
        data = t.data.reshape(-1).astype(np.int64)
        if data.size != n:
            raise self.refuse_tensor(i, f"(a bias) has {data.size} values for {n} output channels")
        if self.activation_q(x) is None:
            raise self.refuse_tensor(x, "(the input of an op with an integer bias) is not an int8/int16 quantized "
                                        "tensor; npu-sim simulates full-integer models")
        product = np.broadcast_to(np.float64(self.tensor(x).quant.scale[0])
                                  * self.tensor(w).quant.scale.astype(np.float32).astype(np.float64), (n,))
        # TFLite's int8/int16 kernels add the bias integers at input scale x weight scale whatever scale the file
        # gives the bias (its Prepare checks that scale for uint8 models only): so does npu-sim
        scale = product.astype(np.float32)
        small = np.iinfo(np.int32)
        dtype = np.int32 if data.min(initial=0) >= small.min and data.max(initial=0) <= small.max else np.int64
        q = self.const(data.astype(dtype), self.names[i])
        s = self.const(np.ascontiguousarray(scale), f"{self.names[i]}/scale")
        z = self.const(np.zeros(n, dtype), f"{self.names[i]}/zero_point")
        out = self.dq[("b", i)] = self.fresh(f"{self.names[i]}/dq")
        self.node("DequantizeLinear", [q, s, z], [out], name=out, axis=0)
        return out

    # ---- integers moved as they are ---------------------------------------------------------------------------
    def move(self, op: str, x: int, y: int, *consts, **attrs) -> None:
        """An integer data-movement op (Reshape, Transpose, Pad, Slice) from TFLite tensor ``x`` to ``y``; on a graph
        input, which the walk knows only through its DequantizeLinear, as a QDQ group (the same integers)."""
        if x not in self.m.inputs:
            self.node(op, [self.names[x], *consts], [self.names[y]], name=self.names[y], **attrs)
            return
        self.node(op, [self.float_of(x), *consts], [self.moved(y)], name=self.names[y], **attrs)
        self.moved_done(y)

    def moved(self, y: int) -> str:
        """The name a data-movement op on a graph input's floats writes: ``y``'s own (the walk makes it the
        integer tensor of that name), or for a graph output a float one that ``moved_done`` quantizes."""
        return self.names[y] if y not in self.m.outputs else f"{self.names[y]}/moved"

    def moved_done(self, y: int) -> None:
        if y in self.m.outputs:
            self.quantize(f"{self.names[y]}/moved", y)
        else:
            self.dq[self.names[y]] = self.names[y]  # already the dequantized form its consumers read

