"""Multiply-accumulate ops: Conv, ConvTranspose, Gemm, MatMul.

Integer semantics (every board)::

    acc[c] = sum((x - zx) * (w - zw[c])) + bias[c]      exact, then modelled at the board's accumulator width
    y      = clamp(requantize(acc, sx*sw[c]/sy) + zy, qmin', qmax')

``qmin'/qmax'`` fold a Relu/Clip that followed the op. The bias is the int32 tensor onnxruntime stored behind
its DequantizeLinear; when its scale is not ``sx*sw[c]`` (or it was left float) it is re-expressed in
accumulator units once, here. ``requantize`` is the board's: fixed-point multiplier/shift, or onnxruntime's
float32 formula for the ``onnx`` arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.conv2d_direct import bind_direct, bind_direct_requantized
from kernels.conv2d_gemm import bind_gemm_requantized, bind_matmul_requantized, conv2d_gemm_blocks
from kernels.gemm import abs_max, int_matmul, plan as gemm_plan
from kernels import conv_amx, pointwise_small
from kernels.conv_transpose2d import conv_transpose2d_acc, conv_transpose2d_tiles, tiled, untile

from npu_sim.ir import Geometry, Node, QParams, Tensor, Weights
from npu_sim.lowering.problem import Problem
from npu_sim.ops import records
from npu_sim.ops.common import (attrs, bound_closure, check_per_tensor, layout_memo, mac_bound, output_params,
                                record_params, requant_record, requant_scales, requantize_acc)
from npu_sim.ops.mac_pointwise import PAIR_BLOCK, POINTWISE_BLOCK, is_pointwise, prepare_pointwise, run_pointwise


@dataclass
class Accumulation:
    """The accumulator side of a MAC node, the same under every arithmetic: ``params`` hold what the
    accumulation reads besides its records (zero points, geometry; the centred integer weights are the
    ``weights`` record's); the requantization is the arithmetic's to add (``requantized`` below;
    ``ops.tflite.mac`` has TFLite's)."""
    op: str
    params: dict
    inputs: list[str]
    shown: dict
    x_q: QParams
    w_q: QParams
    w_scale: np.ndarray               # weight scale, one or per output channel
    n_channels: int                   # requantization channels
    bias: np.ndarray | None = None    # int64 per channel in accumulator units (sx * sw[c] * alpha)
    alpha: float = 1.0
    acc_bound: int | None = None      # a proven bound on |acc| before the bias (``common.mac_bound``)
    in_zp: int = 0                    # the input's zero point subtracted before the multiply
    weights: Weights | None = None    # the node's records: its constant weights, its window
    geometry: Geometry | None = None


def requantized(lowering, onode, acc: Accumulation, out: Tensor, act, run) -> Node:
    """The node of ``acc`` with the board's requantization to ``out`` (``common.requant_scales``): fixed-point
    multiplier/shift, or onnxruntime's float32 ratio under the ``onnx`` arithmetic. The requantization, the
    accumulator width and the weights live in the node's records only (its run functions read them there);
    ``params`` keep the accumulation's own arguments, the channels to check and the output dtype."""
    r = requant_scales(lowering, float(acc.x_q.scale), acc.w_scale, float(out.q.scale), acc.n_channels,
                       (acc.x_q.bits, acc.w_q.bits), acc.bias, acc.alpha, acc_bound=acc.acc_bound)
    o = output_params(lowering, out, act)
    params = dict(acc.params, _acc_check=r.acc_check, _out_dtype=o["_out_dtype"])
    listed = ("bias", "acc_bits") + (("mult", "shift") if r.mult is not None else ("scale",)) + (
        "out_zp", "qmin", "qmax")
    return Node(lowering.node_name(onode), acc.op, acc.inputs, [out.name], run, params, acc.shown,
                requant=requant_record(lowering, r, o, r.bias, acc.in_zp), weights=acc.weights,
                geometry=acc.geometry, accumulator=records.accumulator(r.acc_bits, o["_saturate"]),
                clamp=records.clamp(o["qmin"], o["qmax"]), listed=listed)


def _weights(w, axis_expected: int, what: str):
    if not (isinstance(w, Tensor) and w.is_const):
        raise Problem(f"{what} must be a quantized constant (DequantizeLinear of an integer initializer)")
    if not w.q.per_tensor and w.q.axis != axis_expected:
        raise Problem(f"{what} is quantized along axis {w.q.axis}; expected per-tensor or axis {axis_expected}")
    s, z = w.q.broadcast(w.data.ndim)
    return (w.data.astype(np.int64) - z).astype(np.int32), w.q


def _bias(lowering, b, sx, sw, n: int, what: str):
    """Bias in accumulator units (scale sx*sw[c]), int64[n]."""
    if b is None:
        return None
    acc_scale = np.float64(sx) * np.broadcast_to(np.asarray(sw, np.float64), (n,))
    if isinstance(b, Tensor) and b.is_const:
        data = b.data.astype(np.int64).reshape(-1)
        if data.size == 1:
            data = np.broadcast_to(data, (n,))
        if b.q.symmetric and np.allclose(np.broadcast_to(b.q.scale, (n,)), acc_scale.astype(np.float32), rtol=1e-6,
                                         atol=0):
            return data.copy()
        real = (data - np.broadcast_to(b.q.zero_point, (n,))).astype(np.float64) * np.broadcast_to(b.q.scale, (n,))
    elif isinstance(b, np.ndarray):
        real = np.broadcast_to(b.astype(np.float64).reshape(-1), (n,))
    else:
        raise Problem(f"{what} bias must be a constant")
    return np.rint(real / acc_scale).astype(np.int64)


def _pads_2d(a, in_hw, k, s, d):
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for i in range(2):
            out = -(-in_hw[i] // s[i])
            total = max((out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_hw[i], 0)
            small = total // 2
            pads_b.append(small if auto == "SAME_UPPER" else total - small)
            pads_e.append(total - pads_b[-1])
        return (pads_b[0], pads_b[1], pads_e[0], pads_e[1])
    if auto == "VALID":
        return (0, 0, 0, 0)
    p = list(a.get("pads", [0] * 4))
    return (p[0], p[1], p[2], p[3])


def _spatial_2d(x: Tensor, what: str):
    """Conv1d runs as Conv2d with H=1; only 1-D and 2-D spatial convolutions are supported."""
    rank = len(x.shape)
    if rank not in (3, 4):
        raise Problem(f"{what} with {rank - 2} spatial dims is not supported (1-D and 2-D are)")
    return rank == 3


def _expand1d(a: dict, key: str, default):
    v = list(a.get(key, default))
    return v


def lower_conv(lowering, onode, args, out: Tensor, act) -> Node:
    return requantized(lowering, onode, accumulate_conv(lowering, onode, args), out, act, _run_conv)


def accumulate_conv(lowering, onode, args) -> Accumulation:
    x, w, b = (args + [None, None])[:3]
    check_per_tensor(x, "Conv input")
    is1d = _spatial_2d(x, "Conv")
    wi, wq = _weights(w, 0, f"Conv weight {onode.input[1]!r}")
    a = attrs(onode)
    if is1d:
        wi = wi[:, :, None, :]
        k = (1, wi.shape[3])
        s = (1, _expand1d(a, "strides", [1])[0])
        d = (1, _expand1d(a, "dilations", [1])[0])
        p1 = list(a.get("pads", [0, 0]))
        a2 = dict(a)
        a2["pads"] = [0, p1[0], 0, p1[1]]
        pads = _pads_2d(a2, (1, x.shape[2]), k, s, d)
    else:
        k = (wi.shape[2], wi.shape[3])
        s = tuple(a.get("strides", [1, 1]))
        d = tuple(a.get("dilations", [1, 1]))
        pads = _pads_2d(a, x.shape[2:], k, s, d)
    cout = wi.shape[0]
    params = {"x_zp": int(x.q.zero_point), "stride": s, "pads": pads, "dilation": d, "groups": int(a.get("group", 1)),
              "_is1d": is1d}
    return Accumulation("Conv", params, [x.name, w.name] + ([b.name] if isinstance(b, Tensor) else []),
                        {"kernel": k, "stride": s, "pads": pads, "dilation": d, "group": params["groups"]},
                        x.q, wq, wq.scale, cout, _bias(lowering, b, float(x.q.scale), wq.scale, cout, "Conv"),
                        acc_bound=mac_bound(x.q, wi), in_zp=params["x_zp"],
                        weights=Weights(np.ascontiguousarray(wi), 0, True, is1d),
                        geometry=Geometry(k, s, pads, d, params["groups"]))


def _run_conv(node, inputs, ctx):
    p, m = node.params, node.memo
    x = np.ascontiguousarray(inputs[0])
    fused = layout_memo(m, "fused", (x.shape, x.dtype),
                        lambda: _bind_fused(node, x, ctx.shape_of(node.outputs[0])))
    if fused is not None:
        return [fused(x)]
    if p["_is1d"]:
        x = x[:, :, None, :]
    w = node.weights.data
    out_shape = ctx.shape_of(node.outputs[0])
    n_img, cout = x.shape[0], w.shape[0]
    if w.shape[1] == 1:  # depthwise: direct loop, int32 accumulator (set up once per input layout)
        acc = layout_memo(m, "direct", (x.shape, x.dtype), lambda: bind_direct(
            x, p["x_zp"], w, p["stride"], p["pads"], p["dilation"], p["groups"], compact=True))(x)
        return [requantize_acc(node, ctx, acc, n_img, cout, acc.size // (n_img * cout)).reshape(out_shape)]
    pw = m.get("pw")
    if pw and pw["key"] == (x.dtype, x.shape[1:]):
        return [run_pointwise(node, ctx, x, pw).reshape(out_shape)]
    y = np.empty((n_img, cout, 1 if p["_is1d"] else out_shape[2], out_shape[-1]), p["_out_dtype"])
    cg = cout // p["groups"]
    # GEMM path: requantize each block of columns while it is still in cache
    y = y.reshape(n_img, cout, -1)
    for n, g, c0, c1, acc, off in conv2d_gemm_blocks(x, p["x_zp"], w, p["stride"], p["pads"], p["dilation"],
                                                     p["groups"], block_cols=_block_cols(cg),
                                                     w_cache=m.setdefault("w_cache", {})):
        rows = slice(g * cg, (g + 1) * cg)
        requantize_acc(node, ctx, acc, 1, cg, c1 - c0, out=y[n:n + 1, rows, c0:c1], channel_slice=rows, offset=off)
    return [y.reshape(out_shape)]


def _block_cols(cout_g: int) -> int:
    """Column blocks as wide as the memory budget allows: a block spanning whole rows keeps acc and y
    contiguous."""
    return max(8192, POINTWISE_BLOCK // max(1, cout_g))


def _fixed_point(node):
    """The node's requantization as the fused kernels take it: ``(bias, mult, shift, out_zp, qmin, qmax,
    acc_bits)`` from its records, or None under onnxruntime's float32 ratio (no fused kernel)."""
    rq = node.requant
    if rq.mult is None:
        return None
    return rq.bias, rq.mult, rq.shift, rq.out_zp, rq.qmin, rq.qmax, node.accumulator.bits


def _bind_fused(node, x, out_shape):
    """The node's convolution with its requantization fused into one kernel, set up once for inputs shaped and
    typed like ``x``: ``conv(x) -> y`` (shaped ``out_shape``), or None where no fused kernel is proven exact
    (then ``_run_conv`` accumulates and requantizes separately; for 1x1 convolutions that take the float GEMM,
    the node's memo ``m["pw"]`` is set here)."""
    p, m, rq = node.params, node.memo, _fixed_point(node)
    if rq is None:
        return None
    w = node.weights.data
    is1d = p["_is1d"]
    x4 = x[:, :, None, :] if is1d else x
    n_img, cout = x4.shape[0], w.shape[0]
    shape4 = (n_img, cout, 1 if is1d else out_shape[2], out_shape[-1])
    dt = p["_out_dtype"]
    args = (p["x_zp"], w, p["stride"], p["pads"], p["dilation"], p["groups"]) + rq
    hw = shape4[2] * shape4[3]
    if w.shape[1] == 1:  # depthwise (or one input channel): the direct loop, int32 accumulator
        run = bind_direct_requantized(x4, *args, np.empty(shape4, dt))
    elif is_pointwise(p, w) and hw <= pointwise_small.MAX_PIXELS:
        small = _small_prep(node, p["x_zp"], x.dtype, w.reshape(cout, -1))
        run = None
        if small is not None:
            run3 = pointwise_small.bind(x4.reshape(n_img, -1, hw), small, np.empty((n_img, cout, hw), dt))
            run = lambda x4, y: run3(x4.reshape(n_img, -1, hw), y.reshape(n_img, cout, hw))  # noqa: E731
    else:
        if is_pointwise(p, w) and "pw" not in m:
            # {}: not this path (decided once: dtype and weights)
            m["pw"] = prepare_pointwise(p, w, record_params(node), x4) or {}
        if is_pointwise(p, w) and m["pw"]:
            return None  # the exact float GEMM, requantized separately
        run = bind_gemm_requantized(x4, *args, np.empty(shape4, dt), max(1, PAIR_BLOCK // (cout // p["groups"])))
    return None if run is None else bound_closure(run, x4.shape, shape4, out_shape, dt)


def _small_prep(node, x_zp, x_dtype, w2):
    """``kernels.pointwise_small.prepare`` for this node and input dtype (None: not proven), kept in the node's
    memo."""
    key = "small_" + x_dtype.str
    if key not in node.memo:
        node.memo[key] = pointwise_small.prepare(x_dtype, x_zp, w2, *_fixed_point(node))
    return node.memo[key]


def _bind_small_gemm(node, a, zp):
    """``f(a) -> y`` of a Gemm/MatMul with few rows ``a`` (M, K) on ``kernels.pointwise_small`` (M pixels of K
    channels), set up once for such inputs; None where its fused requantization is not proven exact."""
    w, dt = node.weights.data, node.params["_out_dtype"]
    small = _small_prep(node, zp, a.dtype, w.T)
    if small is None:
        return None
    m, n = a.shape[0], w.shape[1]
    run = pointwise_small.bind(np.ascontiguousarray(a).reshape(m, -1, 1), small, np.empty((m, n, 1), dt))
    return bound_closure(run, (m, -1, 1), (m, n, 1), (m, n), dt)


def _bind_quads(node, a, zp):
    """``f(a) -> y`` of a Gemm/MatMul with constant weights on ``kernels.conv2d_gemm.bind_matmul_requantized``
    (None: not that kernel)."""
    w = node.weights.data
    out = np.empty((a.shape[0], w.shape[1]), node.params["_out_dtype"])
    run = bind_matmul_requantized(a, zp, w, *_fixed_point(node), out, max(1, PAIR_BLOCK // out.shape[1]))
    return None if run is None else bound_closure(run, a.shape, out.shape, out.shape, out.dtype)


def lower_conv_transpose(lowering, onode, args, out: Tensor, act) -> Node:
    return requantized(lowering, onode, accumulate_conv_transpose(lowering, onode, args, out.shape), out, act,
                       _run_conv_transpose)


def accumulate_conv_transpose(lowering, onode, args, out_shape) -> Accumulation:
    x, w, b = (args + [None, None])[:3]
    check_per_tensor(x, "ConvTranspose input")
    if len(x.shape) != 4:
        raise Problem("ConvTranspose is supported for 2-D spatial inputs only")
    wi, wq = _weights(w, 1, f"ConvTranspose weight {onode.input[1]!r}")
    a = attrs(onode)
    groups = int(a.get("group", 1))
    k = (wi.shape[2], wi.shape[3])
    s = tuple(a.get("strides", [1, 1]))
    d = tuple(a.get("dilations", [1, 1]))
    out_hw = out_shape[2:]
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if "output_shape" in a or auto in ("SAME_UPPER", "SAME_LOWER"):
        opad = list(a.get("output_padding", [0, 0]))
        pb, pe = [], []
        for i in range(2):
            total = s[i] * (x.shape[2 + i] - 1) + opad[i] + (k[i] - 1) * d[i] + 1 - out_hw[i]
            head = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pb.append(head)
            pe.append(total - head)
        pads = (pb[0], pb[1], pe[0], pe[1])
    else:
        p = list(a.get("pads", [0, 0, 0, 0]))
        pads = (p[0], p[1], p[2], p[3])
    cout = out_shape[1]
    sw = np.asarray(wq.scale, np.float32)
    if sw.ndim == 1:  # per output channel within a group: repeat for every group
        sw = np.tile(sw, groups)
    params = {"x_zp": int(x.q.zero_point), "stride": s, "pads": pads, "dilation": d, "groups": groups,
              "out_hw": tuple(out_hw)}
    return Accumulation("ConvTranspose", params, [x.name, w.name] + ([b.name] if isinstance(b, Tensor) else []),
                        {"kernel": k, "stride": s, "pads": pads, "dilation": d, "group": groups}, x.q, wq, sw, cout,
                        _bias(lowering, b, float(x.q.scale), sw, cout, "ConvTranspose"), in_zp=params["x_zp"],
                        weights=Weights(np.ascontiguousarray(wi), 1, True),
                        geometry=Geometry(k, s, pads, d, groups, params["out_hw"]))


def _run_conv_transpose(node, inputs, ctx):
    p, m = node.params, node.memo
    x = np.ascontiguousarray(inputs[0])
    w = node.weights.data
    if m.setdefault("tiled", tiled(x.shape, w.shape, p["stride"], p["pads"], p["dilation"], p["out_hw"])):
        # every output pixel gets exactly one tap: the GEMM result is the accumulator, requantized in its
        # tap-major layout (per channel, element by element: the same results and overflow count) and rearranged
        acc = conv_transpose2d_tiles(x, p["x_zp"], w, p["stride"], p["pads"], p["dilation"], p["groups"],
                                     p["out_hw"], w_cache=m.setdefault("w_cache", {}))
        n, c, cols = acc.shape
        y = requantize_acc(node, ctx, acc, n, c, cols).reshape(n, c, cols)
        return [untile(y, w.shape[2], w.shape[3], x.shape[2], x.shape[3])]
    acc = conv_transpose2d_acc(np.ascontiguousarray(inputs[0]), p["x_zp"], w, p["stride"], p["pads"],
                               p["dilation"], p["groups"], p["out_hw"])
    n, c, h, w = acc.shape
    return [requantize_acc(node, ctx, acc, n, c, h * w).reshape(acc.shape)]


def lower_gemm(lowering, onode, args, out: Tensor, act) -> Node:
    return requantized(lowering, onode, accumulate_gemm(lowering, onode, args), out, act, _run_gemm)


def accumulate_gemm(lowering, onode, args) -> Accumulation:
    a_t, b_t, c_t = (args + [None, None])[:3]
    check_per_tensor(a_t, "Gemm input A")
    at = attrs(onode)
    trans_a, trans_b = int(at.get("transA", 0)), int(at.get("transB", 0))
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    if not (isinstance(b_t, Tensor) and b_t.is_const):
        raise Problem("Gemm with a non-constant B is not supported; use MatMul for two activations")
    wi, wq = _weights(b_t, 0 if trans_b else 1, f"Gemm weight {onode.input[1]!r}")
    if trans_b:
        wi = wi.T
    n = wi.shape[1]
    sx = float(a_t.q.scale)
    params = {"x_zp": int(a_t.q.zero_point), "trans_a": trans_a}
    bias = None
    if c_t is not None:
        if isinstance(c_t, Tensor) and not c_t.is_const:
            raise Problem("Gemm with a non-constant C is not supported")
        if beta != 1.0:
            c_t = (c_t.q.dequantize(c_t.data) if isinstance(c_t, Tensor) else c_t).astype(np.float64) * beta
        # Y = alpha*sx*sw*acc + beta*C: the bias joins the accumulator in units of alpha*sx*sw
        bias = _bias(lowering, c_t, sx, np.asarray(wq.scale, np.float64) * alpha, n, "Gemm")
    return Accumulation("Gemm", params, [a_t.name, b_t.name] + ([c_t.name] if isinstance(c_t, Tensor) else []),
                        {"transA": trans_a, "transB": trans_b, "alpha": alpha}, a_t.q, wq, wq.scale, n, bias, alpha,
                        mac_bound(a_t.q, wi.T), params["x_zp"], Weights(np.ascontiguousarray(wi), 1, True),
                        Geometry(transpose_a=bool(trans_a)))


def _run_gemm(node, inputs, ctx):
    p, m = node.params, node.memo
    a = inputs[0].T if p["trans_a"] else inputs[0]
    fixed = node.requant.mult is not None
    if fixed and a.shape[0] <= pointwise_small.MAX_PIXELS and not _tiles_first(node):  # the fused small kernel
        small = layout_memo(m, "small_run", (a.shape, a.dtype), lambda: _bind_small_gemm(node, a, p["x_zp"]))
        if small is not None:
            return [small(a)]
    if fixed:  # 8-bit rows on the byte quads, as a 1x1 convolution
        quads = layout_memo(m, "quads", (a.shape, a.dtype), lambda: _bind_quads(node, a, p["x_zp"]))
        if quads is not None:
            return [quads(a)]
    a = a.astype(np.int32) - p["x_zp"]
    acc = int_matmul(np.ascontiguousarray(a), node.weights.data, compact=True, b_cache=m.setdefault("w_cache", {}))
    return [requantize_acc(node, ctx, acc, acc.shape[0], acc.shape[1], 1).reshape(acc.shape)]


def _tiles_first(node) -> bool:
    """A Gemm of a few rows goes to the AMX tiles before the small kernel where the CPU has them and the weights
    hold 2**17+ values (measured: 0.7x at 1280 x 1000, 0.6x at 960 x 240; below, the tiles' fixed cost wins)."""
    return conv_amx.AVAILABLE and node.weights.data.size >= 1 << 17


def lower_matmul(lowering, onode, args, out: Tensor, act) -> Node:
    return requantized(lowering, onode, accumulate_matmul(lowering, onode, args), out, act, _run_matmul)


def accumulate_matmul(lowering, onode, args) -> Accumulation:
    a_t, b_t = args[:2]
    for t, which in ((a_t, "A"), (b_t, "B")):
        if not isinstance(t, Tensor):
            raise Problem(f"MatMul input {which} must be quantized (DequantizeLinear)")
    params = {"a_zp": int(a_t.q.zero_point) if a_t.q.per_tensor else 0,
              "b_zp": int(b_t.q.zero_point) if b_t.q.per_tensor else 0, "_a": None}
    if b_t.is_const and not a_t.is_const and b_t.data.ndim == 2:
        check_per_tensor(a_t, "MatMul input A")
        wi, wq = _weights(b_t, 1, f"MatMul weight {onode.input[1]!r}")
        n = 1 if wq.per_tensor else wi.shape[1]
        return Accumulation("MatMul", params, [a_t.name, b_t.name], {}, a_t.q, wq, wq.scale, n, in_zp=params["a_zp"],
                            weights=Weights(np.ascontiguousarray(wi), 1, not wq.per_tensor))
    for t, which in ((a_t, "A"), (b_t, "B")):
        check_per_tensor(t, f"MatMul input {which}")
    if a_t.is_const and b_t.is_const:
        raise Problem("MatMul of two constants should be folded before quantization")
    devs = []  # each operand's largest |value - zero point|: the constant's own, an activation's over its range
    for key, t in (("_a", a_t), ("_b", b_t)):
        if t.is_const:  # a constant operand held here: W @ x, or x @ W[1, K, N] (not 2-D)
            params[key] = t.data.astype(np.int32) - params[key[1] + "_zp"]
            devs.append(int(np.abs(params[key]).max(initial=0)))
        else:
            devs.append(t.q.reach)
    k = a_t.shape[-1] if a_t.shape else None
    bound = k * devs[0] * devs[1] if isinstance(k, (int, np.integer)) and k > 0 else None  # |sum of K products|
    return Accumulation("MatMul", params, [a_t.name, b_t.name], {}, a_t.q, b_t.q, b_t.q.scale, 1, in_zp=params["a_zp"],
                        acc_bound=bound)


def _batched_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer matmul with numpy's batching/broadcasting rules (1-D operands promoted): one batched float32
    (float64) matmul where ``K * max|a| * max|b|`` is below 2**24 (2**53) -- every product and partial sum is then
    an integer the float holds exactly, in any order (attention's small matrices: one call for all heads) --
    else the exact integer matmul per batch."""
    squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
    if squeeze_a:
        a = a[None, :]
    if squeeze_b:
        b = b[:, None]
    method, kc = gemm_plan(abs_max(a) * abs_max(b), a.shape[-1])
    if method in ("f32", "f64") and kc >= a.shape[-1]:
        dt = np.float32 if method == "f32" else np.float64
        acc = np.matmul(a.astype(dt), b.astype(dt)).astype(np.int64)
    else:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a_b = np.broadcast_to(a, batch + a.shape[-2:]).reshape(-1, *a.shape[-2:])
        b_b = np.broadcast_to(b, batch + b.shape[-2:]).reshape(-1, *b.shape[-2:])
        acc = np.empty((a_b.shape[0], a.shape[-2], b.shape[-1]), np.int64)
        for i in range(a_b.shape[0]):
            acc[i] = int_matmul(np.ascontiguousarray(a_b[i]), np.ascontiguousarray(b_b[i]))
        acc = acc.reshape(batch + (a.shape[-2], b.shape[-1]))
    if squeeze_a:
        acc = acc[..., 0, :]
    if squeeze_b:
        acc = acc[..., 0]
    return acc


def _run_matmul(node, inputs, ctx):
    p, wt = node.params, node.weights
    out_shape = tuple(ctx.shape_of(node.outputs[0]))
    if wt is not None:  # activation @ constant weights
        if node.requant.mult is not None:  # 8-bit rows on the byte quads, as a 1x1 convolution
            a = inputs[0].reshape(-1, wt.data.shape[0])
            quads = layout_memo(node.memo, "quads", (a.shape, a.dtype), lambda: _bind_quads(node, a, p["a_zp"]))
            if quads is not None:
                return [quads(a).reshape(out_shape)]
        a = inputs[0].astype(np.int32) - p["a_zp"]
        acc = int_matmul(np.ascontiguousarray(a.reshape(-1, a.shape[-1])), wt.data, compact=True,
                         b_cache=node.memo.setdefault("w_cache", {}))
        if wt.per_channel:
            return [requantize_acc(node, ctx, acc, acc.shape[0], acc.shape[1], 1).reshape(out_shape)]
        return [requantize_acc(node, ctx, acc, 1, 1, acc.size).reshape(out_shape)]
    fed = iter(inputs)  # the activations, in order: a constant operand is held in the node (``_a`` or ``_b``)
    a, b = (p[k] if p.get(k) is not None else next(fed).astype(np.int32) - p[f"{k[1]}_zp"] for k in ("_a", "_b"))
    acc = _batched_matmul(a, b)
    return [requantize_acc(node, ctx, acc, 1, 1, acc.size).reshape(out_shape)]
