"""A node's requantization recovered from the dump's inputs, for ``explain``: its exact accumulator (``acc + bias``,
int64) for the multiply-accumulate ops (Conv, ConvTranspose, Gemm, MatMul by constant weights), the one-multiplier
rescales (Requantize, Clip/Relu) and the per-channel affines (``acc`` in output units with ``f_bits`` fraction
bits), with the real factor ``sx * sw[c] / sy`` from the tensors' scales and the fixed-point pairs of the board
(its ``Requant`` record, made at the board's ``multiplier_bits``) and of TFLite (``QuantizeMultiplier``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.conv2d import conv2d_acc
from kernels.conv_transpose2d import conv_transpose2d_acc
from kernels.fixedpoint import quantize_multiplier
from kernels.gemm import int_matmul
from kernels.tflite_fixedpoint import tfl_quantize_multiplier

from npu_sim.ir import Affine, Node, Program

RESCALES = ("Requantize", "Clip", "Relu")  # one multiplier from the input's scale to the output's


@dataclass
class Requant:
    """A node's requantization, recovered: ``y = clamp(rule(acc, c) + out_zp, qmin, qmax)``."""
    acc: np.ndarray          # acc + bias, int64, output-shaped
    channel: np.ndarray      # the multiplier's channel of each output element (int64, output-shaped)
    mult: np.ndarray         # fixed-point pair per channel: factor ~= mult / 2**shift
    shift: np.ndarray
    tfl: tuple               # TFLite's (M, s) per channel
    f32: np.ndarray          # onnxruntime's float32 ratio per channel
    out_zp: int
    qmin: int
    qmax: int
    acc_bits: int
    saturate: bool
    own: str                 # the node's own rule: "single" | "double" | "float32"
    out_bits: int = 8        # the output's integer width and range (the clamp may be narrower: a fused activation)
    out_min: int = -128
    out_max: int = 127
    real: np.ndarray | None = None  # the real factor per channel (float64), from the tensors' scales


# -- recovering the requantization of a node --------------------------------------------------------------------

def _mac_acc(node: Node, x: np.ndarray, out_shape) -> tuple[np.ndarray, int] | None:
    """The node's exact accumulator (without bias), output-shaped, and its channel axis (-1: none)."""
    w, g, rq = node.weights, node.geometry, node.requant
    if w is None or rq is None or rq.in_zp is None:
        return None
    zx = rq.in_zp
    if node.op == "Conv":
        x4 = x[:, :, None, :] if w.spatial_1d else x
        acc = conv2d_acc(np.ascontiguousarray(x4), zx, w.data, g.stride, g.pads, g.dilation, g.groups)
        return acc.reshape(out_shape), 1
    if node.op == "ConvTranspose":
        return conv_transpose2d_acc(np.ascontiguousarray(x), zx, w.data, g.stride, g.pads, g.dilation, g.groups,
                                    g.out_hw).reshape(out_shape), 1
    if node.op == "Gemm":
        a = x.T if g.transpose_a else x
        return int_matmul(np.ascontiguousarray(a.astype(np.int64) - zx), w.data).reshape(out_shape), -1
    if node.op == "MatMul":
        a = (x.astype(np.int64) - zx).reshape(-1, x.shape[-1])
        acc = int_matmul(np.ascontiguousarray(a), w.data).reshape(out_shape)
        return acc, (-1 if w.per_channel or rq.channels > 1 else None)  # (TFLite: a multiplier per column)
    return None


def _factors(prog: Program, node: Node, n_channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(real factor float64, onnxruntime's float32 ratio) per channel, from the tensors' scales."""
    sx = np.float32(prog.tensors[node.inputs[0]].q.scale)
    sy = np.float32(prog.tensors[node.outputs[0]].q.scale)
    alpha = float(node.attrs.get("alpha", 1.0)) if node.op == "Gemm" else 1.0
    if len(node.inputs) > 1 and prog.tensors[node.inputs[1]].is_const and node.op != "Requantize":
        sw = prog.tensors[node.inputs[1]].q.scale
        if node.op == "ConvTranspose" and np.ndim(sw) == 1 and sw.size != n_channels:
            sw = np.tile(sw, n_channels // sw.size)
    else:
        sw = np.float32(1.0)
    sw = np.broadcast_to(np.asarray(sw, np.float32), (n_channels,))
    real = np.float64(sx) * sw.astype(np.float64) * alpha / np.float64(sy)
    ratio = (sx * sw).astype(np.float32)
    if alpha != 1.0:
        ratio = (ratio * np.float32(alpha)).astype(np.float32)
    return real, (ratio / sy).astype(np.float32)


def requant_of(prog: Program, node: Node, inputs: list) -> Requant | None:
    """The node's requantization on these inputs (its activation inputs, as the executor passes them); None for
    ops without one multiplier per channel (then no variation is tried)."""
    rec = node.requant
    out_shape = tuple(prog.tensors[node.outputs[0]].shape)
    if inputs and node.affine is not None and tuple(inputs[0].shape) == out_shape:
        return _affine(node.affine, inputs[0], prog.tensors[node.outputs[0]].q)
    if not inputs or rec is None:
        return None
    got = _mac_acc(node, inputs[0], out_shape)
    if got is None:
        if not (node.op in RESCALES and rec.in_zp is not None and len(inputs) == 1 and rec.channels == 1
                and tuple(inputs[0].shape) == out_shape):
            return None
        acc, axis = inputs[0].astype(np.int64) - rec.in_zp, None
    else:
        acc, axis = got
    n_c = rec.channels if axis is not None else 1
    if axis is None:
        channel = np.zeros(out_shape, np.int64)
    else:
        shape = [1] * len(out_shape)
        shape[axis] = -1
        channel = np.broadcast_to(np.arange(out_shape[axis]).reshape(shape), out_shape)
        n_c = out_shape[axis]
    acc = acc + np.broadcast_to(rec.bias, (n_c,))[channel]
    real, f32 = _factors(prog, node, n_c)
    if rec.rounding == "half_up":  # the board's own pairs, at its multiplier_bits
        mult, shift = (np.broadcast_to(v, (n_c,)) for v in (rec.mult, rec.shift))
    else:  # what a fixed-point pair of this factor would be on this board
        pairs = [quantize_multiplier(float(v), rec.bits) for v in real]
        mult, shift = np.array([m for m, _ in pairs], np.int64), np.array([r for _, r in pairs], np.int64)
    if rec.rounding == "double":
        tfl = tuple(np.broadcast_to(v, (n_c,)) for v in (rec.mult, rec.shift))
    else:
        pairs = [tfl_quantize_multiplier(float(max(v, 0.0))) for v in real]
        tfl = (np.array([m for m, _ in pairs], np.int64), np.array([s for _, s in pairs], np.int64))
    own = {"half_up": "single", "double": "double"}.get(rec.rounding, "float32")
    acc_rec = node.accumulator
    q = prog.tensors[node.outputs[0]].q
    return Requant(acc, channel, mult, shift, tfl, f32, rec.out_zp, rec.qmin, rec.qmax,
                   acc_rec.bits if acc_rec else 64, bool(acc_rec and acc_rec.saturate), own, q.bits, q.qmin, q.qmax,
                   real)


def _affine(af: Affine, x: np.ndarray, q) -> Requant:
    """A per-channel affine (BatchNormalization, Add/Sub of a constant): ``acc = (x - zx) w[c] + b[c]`` in output
    units with ``f_bits`` fraction bits, i.e. the factor ``2**-f_bits`` (channels along axis 1)."""
    w, b = af.scale, af.offset
    n_c = w.size
    if n_c == 1 or x.ndim < 2:
        channel = np.zeros(x.shape, np.int64)
    else:
        channel = np.broadcast_to(np.arange(n_c).reshape([1, -1] + [1] * (x.ndim - 2)), x.shape)
    acc = (x.astype(np.int64) - af.in_zp) * w[channel] + np.broadcast_to(b, (n_c,))[channel]
    f = af.fraction_bits
    tm, ts = tfl_quantize_multiplier(2.0 ** -f)
    return Requant(acc, channel, np.ones(n_c, np.int64), np.full(n_c, f, np.int64),
                   (np.full(n_c, tm, np.int64), np.full(n_c, ts, np.int64)), np.full(n_c, 2.0 ** -f, np.float32),
                   af.out_zp, af.qmin, af.qmax, 64, False, "single", q.bits, q.qmin, q.qmax)
