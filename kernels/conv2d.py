"""2-D convolution accumulators (NCHW), exact in int64.

``conv2d_acc`` returns the raw accumulator; bias, scaling and clamping are ``kernels.requantize``'s job.
Two interchangeable paths compute it:

* :func:`conv2d_direct` -- a numba loop over output planes (used for depthwise convolutions, where a GEMM
  per group would be tiny);
* :func:`conv2d_gemm` -- im2col (numba, zero point subtracted while converting to float) followed by the
  exact chunked float GEMM of :mod:`kernels.gemm`, one GEMM per (image, group); 1x1 / stride 1 / no-pad
  convolutions skip the im2col gather and only convert; 16-bit activations use the int16-pair kernel of
  :mod:`kernels.conv_int16` where it is proven exact and the CPU has it.

Both are checked bit for bit against ``tests/naive.py::conv2d_acc`` and against each other.
"""
import numpy as np

from ._jit import njit
from . import conv_int16, depthwise
from .gemm import F32_LIMIT, _matmul_loops, abs_max, float_dtype, matmul_float_chunked, plan
from .requantize import as_int, as_int_tuple, check_int_array, requantize_row

X_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)
W_DTYPES = (np.int8, np.int16, np.int32)
INT64_SAFE = (1 << 63) - 1


def out_size(size: int, pad_lo: int, pad_hi: int, k: int, stride: int, dil: int) -> int:
    """Output length of a convolution along one axis: ``(size + lo + hi - dil*(k-1) - 1) // stride + 1``."""
    return (size + pad_lo + pad_hi - dil * (k - 1) - 1) // stride + 1


def check_geometry(x, x_zp, w, stride, pads, dilation, groups):
    """Shared argument checks of the convolution kernels (also used by conv_transpose2d): dtypes, zero point,
    and positive strides/dilations, non-negative pads; returns them as Python ints."""
    check_int_array(x, "x", ndim=4, dtypes=X_DTYPES)
    check_int_array(w, "w", ndim=4, dtypes=W_DTYPES)
    x_zp = as_int(x_zp, "x_zp")
    if abs(x_zp) > 1 << 16:
        raise ValueError(f"x_zp {x_zp} out of range for 8/16-bit activations")
    stride = as_int_tuple(stride, 2, "stride")
    pads = as_int_tuple(pads, 4, "pads")
    dilation = as_int_tuple(dilation, 2, "dilation")
    groups = as_int(groups, "groups")
    if min(stride) < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if min(dilation) < 1:
        raise ValueError(f"dilation must be >= 1, got {dilation}")
    if min(pads) < 0:
        raise ValueError(f"pads must be >= 0, got {pads}")
    return x_zp, stride, pads, dilation, groups


def _validate(x, x_zp, w, stride, pads, dilation, groups, wmax=None):
    """Check the arguments of conv2d_acc; return normalized Python ints and the output shape."""
    x_zp, (sh, sw), (top, left, bottom, right), (dh, dw), groups = check_geometry(x, x_zp, w, stride, pads,
                                                                                  dilation, groups)
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    if groups < 1 or cin % groups or cout % groups:
        raise ValueError(f"groups={groups} must divide Cin={cin} and Cout={cout}")
    if cin_g != cin // groups:
        raise ValueError(f"w has {cin_g} input channels per group, expected Cin/groups = {cin // groups}")
    if kh < 1 or kw < 1:
        raise ValueError(f"kernel must be at least 1x1, got {kh}x{kw}")
    ho = out_size(h, top, bottom, kh, sh, dh)
    wo = out_size(wd, left, right, kw, sw, dw)
    if ho < 1 or wo < 1:
        raise ValueError(f"empty output {ho}x{wo}: input {h}x{wd}, pads {pads}, kernel {kh}x{kw}, "
                         f"dilation {(dh, dw)}")
    # exactness of the int64 accumulation: every |partial sum| <= K * max|x - zp| * max|w|
    info = np.iinfo(x.dtype)  # bounds from the dtype: no pass over the data, same plan every call
    x_dev = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp))
    bound = x_dev * (abs_max(w) if wmax is None else wmax)
    if bound * cin_g * kh * kw > INT64_SAFE:
        raise ValueError("conv2d accumulator could exceed int64")
    return (x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, (n, cout, ho, wo), bound)


# --------------------------------------------------------------------------------------------------------
# direct path
# --------------------------------------------------------------------------------------------------------
def _requant_args(bias, mult, shift, out, shape, out_zp, qmin, qmax, name):
    """Validated per-output-channel requantization arguments of a fused convolution: ``bias``, ``mult``,
    ``shift`` as int64 arrays of ``shape[1]`` entries, and the output's ``out_zp, qmin, qmax``."""
    from .requantize import check_multiplier, check_out, per_channel_int64
    cout = shape[1]
    bias = per_channel_int64(bias, cout, "bias")
    mult = per_channel_int64(mult, cout, "mult")
    shift = per_channel_int64(shift, cout, "shift")
    check_multiplier(mult, shift, name)
    return (bias, mult, shift) + tuple(check_out(out, shape, out_zp, qmin, qmax))


@njit
def _valid_range(n_out, n_in, stride, offset):
    """Output indices o in [0, n_out) with 0 <= o*stride + offset < n_in, as (lo, hi), 0 <= lo <= hi <= n_out."""
    # o >= ceil(-offset / stride) and o <= floor((n_in - 1 - offset) / stride)
    lo = -((offset) // stride)  # ceil(-offset / stride)
    hi = (n_in - 1 - offset) // stride + 1
    if lo < 0:
        lo = 0
    if lo > n_out:
        lo = n_out
    if hi > n_out:
        hi = n_out
    if hi < lo:
        hi = lo
    return lo, hi


@njit
def _conv2d_direct(x, x_zp, w, sh, sw, top, left, bottom, right, dh, dw, groups, out, ext, fuse, bias, mult,
                   shift, bound, out_zp, qmin, qmax):
    """Direct convolution: out[n, co] = sum_{ci in group, ky, kx} (x - x_zp) * w, in ``ext``'s integer width.

    With ``fuse``, each finished output plane is requantized on the spot instead of stored (the fast path of
    :func:`kernels.requantize.requantize`; :func:`conv2d_direct_requantized` checks it applies).

    Each input plane, with x_zp subtracted (exact in int32: |x - x_zp| < 2**17), is laid out as the sh*sw
    polyphase components of the zero-bordered padded plane P (shape (top + H + bottom, left + W + right)): plane
    (py, px) holds P[r*sh + py, c*sw + px] at [r, c], row pitch wq. The border holds 0 = x_zp - x_zp, exactly
    what padding contributes. Output (oh, ow) of tap (ky, kx) reads P[oh*sh + ky*dh, ow*sw + kx*dw], i.e.
    plane ((ky*dh) % sh, (kx*dw) % sw) at [oh + (ky*dh)//sh, ow + (kx*dw)//sw]: with an accumulator of row
    pitch wq (columns >= Wo are discarded), every tap is one flat, unit-stride loop indexed from 0, which
    vectorizes. All valid reads lie inside the plane because (Ho-1)*sh + (kh-1)*dh < top + H + bottom (same
    for W).
    """
    n_img, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    ho = out.shape[2]
    wo = out.shape[3]
    cout_g = cout // groups
    hq = (top + h + bottom + sh - 1) // sh
    wq = (left + wd + right + sw - 1) // sw
    xq = np.zeros((sh * sw, hq * wq), dtype=ext.dtype)  # |x - x_zp| < 2**17 (validated)
    n_flat = (ho - 1) * wq + wo
    for n in range(n_img):
        for co in range(cout):
            g = co // cout_g
            for j in range(n_flat):
                ext[j] = 0
            for cl in range(cin_g):
                xc = x[n, g * cin_g + cl]
                for ih in range(h):
                    r = top + ih
                    row0 = (r // sh) * wq
                    for px in range(sw):
                        iw0 = (px - left) % sw  # first input column landing in phase px
                        if iw0 >= wd:
                            continue
                        cnt = (wd - 1 - iw0) // sw + 1
                        q0 = row0 + (left + iw0) // sw
                        dst = xq[(r % sh) * sw + px, q0:q0 + cnt]
                        if sw == 1:  # unit-stride source: keeps the conversion loop vectorized
                            src1 = xc[ih, iw0:iw0 + cnt]
                            for j in range(cnt):
                                dst[j] = np.int64(src1[j]) - x_zp
                        else:
                            src = xc[ih, iw0:iw0 + (cnt - 1) * sw + 1:sw]
                            for j in range(cnt):
                                dst[j] = np.int64(src[j]) - x_zp
                for ky in range(kh):
                    for kx in range(kw):
                        wv = w[co, cl, ky, kx]
                        if wv == 0:
                            continue
                        off = ((ky * dh) // sh) * wq + (kx * dw) // sw
                        src = xq[((ky * dh) % sh) * sw + (kx * dw) % sw, off:off + n_flat]
                        for j in range(n_flat):
                            ext[j] += src[j] * wv  # exact in ext's width (int32 when the wrapper proved it)
            plane = out[n, co]
            if fuse:
                for oh in range(ho):
                    requantize_row(ext[oh * wq:oh * wq + wo], plane[oh], bias[co], mult[co], shift[co], bound[co],
                                   out_zp, qmin, qmax)
                continue
            for oh in range(ho):
                dst = plane[oh]
                src = ext[oh * wq:oh * wq + wo]
                for j in range(wo):
                    dst[j] = src[j]
    return out


def conv2d_direct(x, x_zp, w, stride, pads, dilation, groups, compact=False) -> np.ndarray:
    """:func:`conv2d_acc` computed by the direct numba loop (any groups). Same arguments and result.

    The loop accumulates in int32 when every partial sum provably fits; ``compact`` returns that int32
    array as is instead of widening it to int64."""
    return bind_direct(x, x_zp, w, stride, pads, dilation, groups, compact)(x)


def bind_direct(x, x_zp, w, stride, pads, dilation, groups, compact=False):
    """:func:`conv2d_direct` validated and set up once for inputs shaped and typed like ``x``: returns
    ``run(x) -> acc`` (a fresh accumulator array per call)."""
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, bound = _validate(x, x_zp, w, stride, pads,
                                                                                     dilation, groups)
    # every partial sum is bounded by taps * max|x - zp| * max|w|: accumulate in int32 when that fits
    acc_t = np.int32 if bound * w.shape[1] * w.shape[2] * w.shape[3] < (1 << 31) - 1 else np.int64
    widen = not compact and acc_t is np.int32
    fdt = depthwise.plan(w.shape[2] * w.shape[3], bound) if w.shape[1] == 1 else None
    if fdt is not None:
        wf = w.reshape(w.shape[0], -1).astype(fdt)
        dw_run = depthwise.bind(x.shape, x.dtype, x_zp, wf, w.shape[2], w.shape[3], (sh, sw),
                                (top, left, bottom, right), (dh, dw), shape)

        def run(x):
            out = np.empty(shape, dtype=acc_t)
            dw_run(x, out)
            return out.astype(np.int64) if widen else out
        return run
    n_ext = (shape[2] - 1) * ((left + x.shape[3] + right + sw - 1) // sw) + shape[3]
    w_acc = w.astype(acc_t, copy=False)
    none = np.zeros(0, np.int64)

    def run(x):
        out = np.empty(shape, dtype=acc_t)
        _conv2d_direct(x, x_zp, w_acc, sh, sw, top, left, bottom, right, dh, dw, groups, out,
                       np.empty(n_ext, dtype=acc_t), False, none, none, none, none, 0, 0, 0)
        return out.astype(np.int64) if widen else out
    return run


def conv2d_direct_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                              acc_bits, out) -> bool:
    """Direct convolution with the requantization fused in: ``out`` receives exactly
    ``requantize(conv2d_acc(...), bias, mult, shift, out_zp, qmin, qmax, acc_bits, ...)``.

    Fusion is used only where it is provably the same: every partial sum fits int32, no accumulator plus
    bias can reach the board's ``acc_bits`` (so no overflow can happen or need counting), and every channel
    has a saturation bound (the branch-free path of ``requantize``). Returns False, leaving ``out`` untouched,
    when that does not hold; the caller then requantizes separately.
    """
    run = bind_direct_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                                  acc_bits, out)
    if run is None:
        return False
    run(x, out)
    return True


def bind_direct_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                            acc_bits, out):
    """:func:`conv2d_direct_requantized` set up for arrays shaped and typed like ``x`` and ``out`` (both
    validated here, C-contiguous): returns ``run(x, out)``, or None when fusion is not proven."""
    prep = _prepare_direct_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin,
                                       qmax, acc_bits, out)
    if prep is None or prep["run"] is not None:  # None, or the depthwise kernels already bound
        return None if prep is None else prep["run"]
    (x_zp, sh, sw, top, left, bottom, right, dh, dw, groups) = prep["geo"]
    bias, mult, shift, lims, out_zp, qmin, qmax = prep["rq"]
    shape = prep["shape"]
    n_ext = (shape[2] - 1) * ((left + x.shape[3] + right + sw - 1) // sw) + shape[3]
    w32 = prep["w32"]

    def run(x, out):
        _conv2d_direct(x, x_zp, w32, sh, sw, top, left, bottom, right, dh, dw, groups, out,
                       np.empty(n_ext, dtype=np.int32), True, bias, mult, shift, lims, out_zp, qmin, qmax)

    return run


def _prepare_direct_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                                acc_bits, out):
    """Validation and fusion decision of :func:`conv2d_direct_requantized`; None when fusion is not proven."""
    from .requantize import saturation_bounds
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, bound = _validate(x, x_zp, w, stride, pads,
                                                                                     dilation, groups)
    taps = w.shape[1] * w.shape[2] * w.shape[3]
    bias, mult, shift, out_zp, qmin, qmax = _requant_args(bias, mult, shift, out, shape, out_zp, qmin, qmax,
                                                          "conv2d_direct_requantized")
    acc_max = bound * taps
    max_bias = int(np.abs(bias).max()) if bias.size else 0
    if acc_max >= (1 << 31) - 1 or acc_max + max_bias >= 1 << (min(acc_bits, 64) - 1):
        return None
    lims = saturation_bounds(mult, shift, out_zp, qmin, qmax)
    if lims.size and int(lims.min()) == 0:
        return None
    fdt = depthwise.plan(w.shape[2] * w.shape[3], bound) if w.shape[1] == 1 else None
    run = None
    if fdt is not None:
        wf = np.ascontiguousarray(w.reshape(w.shape[0], -1).astype(fdt))
        run = depthwise.bind(x.shape, x.dtype, x_zp, wf, w.shape[2], w.shape[3], (sh, sw), (top, left, bottom, right),
                             (dh, dw), out.shape, True, bias, mult, shift, lims, out_zp, qmin, qmax)
    return {"shape": tuple(shape), "geo": (x_zp, sh, sw, top, left, bottom, right, dh, dw, groups),
            "rq": (bias, mult, shift, lims, out_zp, qmin, qmax), "run": run,
            "w32": None if fdt is not None else w.astype(np.int32, copy=False)}


# --------------------------------------------------------------------------------------------------------
# im2col + GEMM path
# --------------------------------------------------------------------------------------------------------
@njit
def _im2col(x, n, c0, x_zp, pad, kh, kw, sh, sw, top, left, dh, dw, ho, wo, cols):
    """cols[(cl*kh + ky)*kw + kx, oh*wo + ow] = x[n, c0+cl, ih, iw] - x_zp, or ``pad`` outside the input.

    ``cols`` is float32/float64/int64 of shape (cin_g*kh*kw, ho*wo); values are converted exactly (the
    caller's plan guarantees |x - x_zp| fits the float mantissa).
    """
    h = x.shape[2]
    wd = x.shape[3]
    cin_g = cols.shape[0] // (kh * kw)
    for cl in range(cin_g):
        for ky in range(kh):
            oy = ky * dh - top
            oh0, oh1 = _valid_range(ho, h, sh, oy)
            for kx in range(kw):
                row = (cl * kh + ky) * kw + kx
                ox = kx * dw - left
                ow0, ow1 = _valid_range(wo, wd, sw, ox)
                for oh in range(ho):
                    base = oh * wo
                    if oh < oh0 or oh >= oh1:
                        for ow in range(wo):
                            cols[row, base + ow] = pad
                        continue
                    for ow in range(ow0):
                        cols[row, base + ow] = pad
                    cnt = ow1 - ow0
                    if cnt > 0:
                        i0 = ow0 * sw + ox
                        dst = cols[row, base + ow0:base + ow1]
                        src = x[n, c0 + cl, oh * sh + oy, i0:i0 + (cnt - 1) * sw + 1:sw]
                        for j in range(cnt):
                            dst[j] = np.int64(src[j]) - x_zp
                    for ow in range(ow1, wo):
                        cols[row, base + ow] = pad
    return cols


@njit
def _sub_zp(x2d, x_zp, out):
    """out[i, j] = x2d[i, j] - x_zp, converted (exactly) to out's dtype."""
    rows, cols = x2d.shape
    for i in range(rows):
        for j in range(cols):
            out[i, j] = np.int64(x2d[i, j]) - x_zp
    return out


def _gemm_plan(cache, x, x_zp, w, stride, pads, dilation, groups, block_cols) -> dict:
    """What :func:`conv2d_gemm_blocks` decides from the argument values and the input shape and dtype (not the
    data): validated geometry, centring, exactness plan and the int16-pair layout. Kept in ``cache`` (the caller's
    ``w_cache``, constant ``w``) for the last key seen: a call with the same key skips the validation."""
    try:
        key = (x.shape, x.dtype.str, x.flags.c_contiguous, x_zp, tuple(stride), tuple(pads), tuple(dilation),
               groups, block_cols)
        hash(key)
    except (AttributeError, TypeError):
        key = None  # not an array or not sequences: _validate raises the clear error
    if key is not None and cache.get("plan_key") == key:
        return cache["plan"]
    if "wmax" not in cache:
        cache["wmax"] = abs_max(w)
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, _ = _validate(
        x, x_zp, w, stride, pads, dilation, groups, cache["wmax"])
    cout, cin_g, kh, kw = w.shape
    k = cin_g * kh * kw
    center = conv_int16.x_center(x.dtype)
    pad = x_zp - center
    padded = bool(top or left or bottom or right)
    info = np.iinfo(x.dtype)
    x_dev = max(abs(int(info.min) - center), abs(int(info.max) - center), abs(pad) if padded else 0)
    if "wsum" not in cache:
        w64 = w.reshape(cout, k).astype(np.int64)
        cache["wsum"] = w64.sum(axis=1)
        cache["wabs"] = int(np.abs(w64).sum(axis=1).max(initial=0))
    layout = None
    if "w16" not in cache:
        cache["w16"] = conv_int16.weights_fit(w)
    if cache["w16"] and conv_int16.plan(x.dtype, pad if padded else None, cache["wabs"]):
        if "int16" not in cache:
            cache["int16"] = conv_int16.pack_weights(w, groups)
        layout = conv_int16.Layout(x.shape, w.shape, groups, (sh, sw), (top, left, bottom, right), (dh, dw),
                                   shape[2], shape[3], block_cols, cache["int16"].shape[2])
    offset = (center - x_zp) * cache["wsum"]
    offset_split = offset + 128 * cache["wsum"]
    for a in (offset, offset_split):
        a.flags.writeable = False  # yielded to callers on every call
    gp = {"geo": (x_zp, sh, sw, top, left, bottom, right, dh, dw, groups), "out_hw": shape[2:], "center": center,
          "pad": pad, "padded": padded, "offset": offset, "offset_split": offset_split, "layout": layout,
          "method": plan(x_dev * cache["wmax"], k)}
    if key is not None:
        cache["plan_key"], cache["plan"] = key, gp
    return gp


def conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups, block_cols=8192, w_cache=None):
    """:func:`conv2d_acc` by im2col + exact GEMM, produced in column blocks (for a fused requantization).

    Yields ``(n, g, col0, col1, acc, offset)``: for image ``n`` and group ``g``, output pixels
    ``[col0, col1)`` (flattened ``oh*Wo + ow``) of the group's ``Cout // groups`` channels, with::

        true accumulator[c, j] = acc[c, j] + offset[c]       (acc: float32/float64 holding exact integers,
                                                              int64, or int32; offset: int64)

    16-bit activations run on the exact int16-pair kernel of :mod:`kernels.conv_int16` (int32 ``acc``, whole
    output rows per block) wherever its ``plan`` proves it exact; the float paths below cover the rest.

    The exactness plan uses the activation dtype's range (not the data), so it is the same on every call.
    Activations enter the GEMM centred, ``x - center`` (center = 128 for uint8, 32768 for uint16, else 0;
    padded cells hold ``x_zp - center``), which halves the operand bound for asymmetric 8-bit activations,
    so most layers need one exact float32 chunk (K <= 1032 for 8-bit). Then
    ``sum((x - x_zp) * w) = sum((x - center) * w) + (center - x_zp) * sum(w)``, the second term being
    ``offset``. ``w_cache`` (a dict owned by the caller, one per weight tensor) keeps the float weights and
    their row sums between calls.
    """
    cache = w_cache if w_cache is not None else {}
    gp = _gemm_plan(cache, x, x_zp, w, stride, pads, dilation, groups, block_cols)
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups = gp["geo"]
    n_img, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    ho, wo = gp["out_hw"]
    cout_g = cout // groups
    k = cin_g * kh * kw
    p = ho * wo
    center, pad, padded, offset = gp["center"], gp["pad"], gp["padded"], gp["offset"]
    if gp["layout"] is not None:
        for n, g, c0, c1, acc in conv_int16.blocks(x, center, pad, cache["int16"], gp["layout"]):
            yield n, g, c0, c1, acc, offset[g * cout_g:(g + 1) * cout_g]
        return
    method, kc = gp["method"]
    key = ("w", method)
    if key not in cache:
        dt = np.int64 if method in ("loops", "zero") else float_dtype(method)
        cache[key] = np.ascontiguousarray(w.reshape(cout, k).astype(dt))
    w2 = cache[key]
    dt = w2.dtype
    pointwise = kh == 1 and kw == 1 and sh == 1 and sw == 1 and not padded
    if sh == 1 and sw == 1:
        single = method in ("f32", "f64") and kc >= k
        split = (not (method == "f32" and single) and (cin_g >= HILO_MIN_K or not single)
                 and hilo_ok(x.dtype, pad if padded else None, cache["wmax"], k))
        if split:
            dt = np.dtype(np.float32)
            offset = gp["offset_split"]
            if pointwise:
                yield from _pointwise_split(x, center, w, cache, offset, groups, block_cols)
                return
        if (split or single) and not pointwise:
            yield from _stacked_taps(x, center, pad, w, cache, dt, offset, split, groups, top, left, bottom, right,
                                     dh, dw, ho, wo, block_cols)
            return
    cols = None if pointwise else np.empty((k, p), dtype=dt)
    for n in range(n_img):
        if pointwise:
            xf = _sub_zp(x[n].reshape(cin, h * wd), center, np.empty((cin, h * wd), dtype=dt))
        for g in range(groups):
            if pointwise:
                cols = xf[g * cin_g:(g + 1) * cin_g]
            else:
                _im2col(x, n, g * cin_g, center, pad, kh, kw, sh, sw, top, left, dh, dw, ho, wo, cols)
            wg = w2[g * cout_g:(g + 1) * cout_g]
            off = offset[g * cout_g:(g + 1) * cout_g]
            for c0 in range(0, p, block_cols):
                c1 = min(p, c0 + block_cols)
                cb = cols[:, c0:c1]
                if method == "zero":
                    acc = np.zeros((cout_g, c1 - c0), np.int64)
                elif method == "loops":
                    acc = np.empty((cout_g, c1 - c0), np.int64)
                    _matmul_loops(wg, np.ascontiguousarray(cb), acc)
                elif kc >= k:
                    acc = wg @ cb
                else:
                    acc = matmul_float_chunked(wg, cb, kc)
                yield n, g, c0, c1, acc, off


def conv2d_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                            acc_bits, out, block_cols=8192) -> bool:
    """Convolution with the requantization fused in, on the int16-pair kernel (one kernel call for the whole
    convolution): ``out`` (N, Cout, Ho, Wo) receives exactly
    ``requantize(conv2d_acc(...), bias, mult, shift, out_zp, qmin, qmax, acc_bits, ...)``.

    Used only where that is proven: :func:`kernels.conv_int16.plan` holds, no accumulator plus bias can reach
    the board's ``acc_bits`` (``|acc| <= max|x - x_zp| * max_c sum|w[c]|`` over the activation dtype; so no
    overflow can happen or need counting), and every channel has a saturation bound (the branch-free path of
    ``requantize``). Returns False, leaving ``out`` untouched, when that does not hold; the caller then runs
    :func:`conv2d_gemm_blocks` and requantizes separately.
    """
    run = bind_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                                acc_bits, out, block_cols)
    if run is None:
        return False
    run(x, out)
    return True


def bind_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                          acc_bits, out, block_cols=8192):
    """:func:`conv2d_gemm_requantized` set up for arrays shaped and typed like ``x`` and ``out`` (both validated
    here, C-contiguous): returns ``run(x, out)``, or None when fusion is not proven."""
    prep = _prepare_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin,
                                     qmax, acc_bits, out, block_cols)
    if prep is None:
        return None
    n_img, cout, ho, wo = out.shape
    flat = (n_img, cout, ho * wo)
    run3 = conv_int16.bind_requantized(*prep)

    def run(x, out):
        run3(x, out.reshape(flat))

    return run


def _prepare_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                              acc_bits, out, block_cols):
    """Validation and fusion decision of :func:`conv2d_gemm_requantized`: the arguments of
    :func:`kernels.conv_int16.bind_requantized`, or None when fusion is not proven."""
    from .requantize import saturation_bounds
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, _ = _validate(x, x_zp, w, stride, pads,
                                                                                 dilation, groups)
    cout = shape[1]
    bias, mult, shift, out_zp, qmin, qmax = _requant_args(bias, mult, shift, out, shape, out_zp, qmin, qmax,
                                                          "conv2d_gemm_requantized")
    acc_bits = as_int(acc_bits, "acc_bits")
    if not 2 <= acc_bits <= 64:
        raise ValueError(f"acc_bits must be in [2, 64], got {acc_bits}")
    center = conv_int16.x_center(x.dtype)
    pad = x_zp - center
    padded = top or left or bottom or right
    w64 = w.reshape(cout, -1).astype(np.int64)
    wabs = int(np.abs(w64).sum(axis=1).max(initial=0))
    if not (conv_int16.weights_fit(w) and conv_int16.plan(x.dtype, pad if padded else None, wabs)):
        return None
    info = np.iinfo(x.dtype)
    x_dev = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp))  # padding contributes 0
    max_bias = int(np.abs(bias).max()) if bias.size else 0
    if x_dev * wabs + max_bias >= 1 << (acc_bits - 1):
        return None
    bound = saturation_bounds(mult, shift, out_zp, qmin, qmax)
    if bound.size and int(bound.min()) == 0:
        return None
    w32 = conv_int16.pack_weights(w, groups)
    layout = conv_int16.Layout(x.shape, w.shape, groups, (sh, sw), (top, left, bottom, right), (dh, dw), shape[2],
                               shape[3], block_cols, w32.shape[2])
    # the kernel sums (x - center) * w: the bias takes the rest, (center - x_zp) * sum(w)
    bias_c = bias + (center - x_zp) * w64.sum(axis=1)
    return (center, pad, w32, layout, bias_c, mult, shift, bound, out_zp, qmin, qmax)


HILO_PAD_RANGE = (-(1 << 15), (1 << 15) - 1)  # centred 16-bit values: what the byte split covers
# the byte split doubles the GEMM's input and output bytes: it pays off only where the GEMM is compute bound,
# i.e. reduces over many channels (measured on this machine: 2x slower at K = 12..96, par at 192, 10-17% faster
# at 384 than one float64 GEMM)
HILO_MIN_K = 256
STACK_BUDGET = 1 << 19  # elements of one stacked-tap GEMM result (2 MiB of float32: stays in L2)


def hilo_ok(dtype, pad, wmax: int, k: int) -> bool:
    """True when a 16-bit activation GEMM can run as two exact float32 GEMMs on its bytes.

    The centred value ``v = x - center`` (int16 range for int16/uint16 activations) is split as
    ``v = 256*hi + lo + 128`` with ``hi = v >> 8`` and ``lo = (v & 255) - 128``, both in [-128, 127]. Each
    of the two GEMMs then has products bounded by ``128 * wmax`` and is one exact float32 chunk when
    ``k * 128 * wmax <= 2**24 - 1`` (the argument of :mod:`kernels.gemm`). ``pad`` (the centred padding value,
    or None without padding) must be a centred 16-bit value too."""
    if np.dtype(dtype) not in (np.dtype(np.int16), np.dtype(np.uint16)) or wmax == 0:
        return False
    if pad is not None and not HILO_PAD_RANGE[0] <= pad <= HILO_PAD_RANGE[1]:
        return False
    return k * 128 * wmax <= F32_LIMIT


@njit
def split_hilo(x2d, center, hi, lo):
    """hi = v >> 8, lo = (v & 255) - 128 for v = x2d - center (so v = 256*hi + lo + 128), as floats; the
    caller guarantees v is in the int16 range (both parts are then in [-128, 127])."""
    rows, cols = x2d.shape
    for i in range(rows):
        src = x2d[i]
        dh = hi[i]
        dl = lo[i]
        for j in range(cols):
            v = np.int32(src[j]) - center
            dh[j] = v >> 8
            dl[j] = (v & 255) - 128
    return hi


@njit
def combine_hilo(hi, lo, out):
    """out = 256*hi + lo in float64 (exact: |hi|, |lo| < 2**24 hold integers)."""
    rows, cols = out.shape
    for i in range(rows):
        sh = hi[i]
        sl = lo[i]
        d = out[i]
        for j in range(cols):
            d[j] = np.float64(sh[j]) * 256.0 + np.float64(sl[j])
    return out


@njit
def _pad_planes(x, n, center, pad, top, left, hi, lo):
    """Padded, centred planes of image ``n``: ``hi[c, top + ih, left + iw] = x[n, c, ih, iw] - center`` and the
    border ``pad``; with a non-empty ``lo`` the values are split into bytes as in :func:`split_hilo`."""
    cin, hp, wp = hi.shape
    h = x.shape[2]
    wd = x.shape[3]
    split = lo.shape[0] > 0
    ph = pad >> 8 if split else pad
    pl = (pad & 255) - 128 if split else 0
    for c in range(cin):
        for r in range(hp):
            ih = r - top
            dh = hi[c, r]
            if ih < 0 or ih >= h:
                for j in range(wp):
                    dh[j] = ph
                if split:
                    dl = lo[c, r]
                    for j in range(wp):
                        dl[j] = pl
                continue
            for j in range(left):
                dh[j] = ph
            for j in range(left + wd, wp):
                dh[j] = ph
            src = x[n, c, ih]
            inner = dh[left:left + wd]
            if split:
                dl = lo[c, r]
                for j in range(left):
                    dl[j] = pl
                for j in range(left + wd, wp):
                    dl[j] = pl
                inl = dl[left:left + wd]
                for j in range(wd):
                    v = np.int32(src[j]) - center
                    inner[j] = v >> 8
                    inl[j] = (v & 255) - 128
            else:
                for j in range(wd):
                    inner[j] = np.int64(src[j]) - center
    return hi


@njit
def _row_taps(y, offs, cout, co, base, wo, acc):
    """acc[j] = sum_t y[t*cout + co, base + offs[t] + j] for j < wo (one output row of the stacked taps)."""
    o = base + offs[0]
    src = y[co, o:o + wo]
    for j in range(wo):
        acc[j] = src[j]
    for t in range(1, offs.shape[0]):
        o = base + offs[t]
        src = y[t * cout + co, o:o + wo]
        for j in range(wo):
            acc[j] += src[j]


@njit
def _tap_sum(yh, yl, cout, offs, wp, wo, n_rows, out):
    """out[co, r*wo + ow] = sum_t yh[t*cout + co, r*wp + ow + offs[t]] (the stacked taps' GEMM results on
    the wide grid of pitch ``wp``), in yh's float type; with a non-empty ``yl`` (byte split),
    ``256 * (sum over yh) + (sum over yl)`` in float64. Every partial sum is a sub-sum of one output's exact
    K-term dot product, so every addition is exact (see :func:`_stacked_taps`)."""
    split = yl.shape[0] > 0
    th = np.empty(wo, yh.dtype)
    tl = np.empty(wo, yh.dtype)
    for co in range(cout):
        for r in range(n_rows):
            _row_taps(yh, offs, cout, co, r * wp, wo, th)
            dst = out[co, r * wo:(r + 1) * wo]
            if split:
                _row_taps(yl, offs, cout, co, r * wp, wo, tl)
                for j in range(wo):
                    dst[j] = np.float64(th[j]) * 256.0 + np.float64(tl[j])
            else:
                for j in range(wo):
                    dst[j] = th[j]
    return out


def _pointwise_split(x, center, w, cache, offset, groups, block_cols):
    """1x1 / stride 1 / unpadded convolution of 16-bit activations as exact float32 GEMMs on the bytes of the
    centred activations (:func:`hilo_ok`), combined in float64 (the blocks of conv2d_gemm_blocks; ``offset``
    includes the ``128 * sum(w)`` of the split)."""
    n_img, cin, h, wd = x.shape
    cout, cin_g = w.shape[:2]
    cout_g = cout // groups
    p = h * wd
    key = ("w", "f32")
    if key not in cache:
        cache[key] = np.ascontiguousarray(w.reshape(cout, cin_g).astype(np.float32))
    w2 = cache[key]
    xs = np.empty((cin, 2 * p), np.float32)
    for n in range(n_img):
        split_hilo(x[n].reshape(cin, p), center, xs[:, :p], xs[:, p:])
        for g in range(groups):
            rows = slice(g * cin_g, (g + 1) * cin_g)
            wg = w2[g * cout_g:(g + 1) * cout_g]
            off = offset[g * cout_g:(g + 1) * cout_g]
            for c0 in range(0, p, block_cols):
                c1 = min(p, c0 + block_cols)
                acc = combine_hilo(wg @ xs[rows, c0:c1], wg @ xs[rows, p + c0:p + c1],
                                   np.empty((cout_g, c1 - c0), np.float64))
                yield n, g, c0, c1, acc, off


def _stacked_taps(x, center, pad, w, cache, dt, offset, split, groups, top, left, bottom, right, dh, dw, ho, wo,
                  block_cols):
    """Stride-1 convolution as one GEMM per block of output rows, all kernel taps stacked along M (the blocks
    of conv2d_gemm_blocks), without im2col.

    The centred input is padded once and flattened per channel with row pitch ``wp``; output (oh, ow) of tap
    t = (ky, kx) is row ``t*Cout_g + co`` of ``W_stacked @ X`` at flat column ``oh*wp + ow + ky*dh*wp + kx*dw``,
    so one GEMM (M = taps*Cout_g: a far better shape than one skinny GEMM per tap) covers a block of rows and
    :func:`_tap_sum` adds the taps' shifted results. The float partial sums are exact: each is a sub-sum of
    the same K terms whose total bound the caller's single-chunk plan keeps below the float mantissa.

    ``split`` (16-bit activations, :func:`hilo_ok`): the planes hold the bytes ``hi``/``lo`` of the centred
    values, two float32 GEMMs per block, combined as ``256*hi + lo`` in float64; ``offset`` then includes the
    ``+128`` of the split (the caller's ``128 * sum(w)``).
    """
    n_img, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    cout_g = cout // groups
    n_taps = kh * kw
    hp, wp = top + h + bottom, left + wd + right
    key = ("stacked", np.dtype(dt).str)
    if key not in cache:  # row t*cout_g + co of group g: w[g*cout_g + co, :, ky, kx]
        w5 = w.reshape(groups, cout_g, cin_g, n_taps).transpose(0, 3, 1, 2).reshape(groups, n_taps * cout_g, cin_g)
        cache[key] = np.ascontiguousarray(w5.astype(dt))
    ws = cache[key]
    offs = np.array([(t // kw) * dh * wp + (t % kw) * dw for t in range(n_taps)], np.int64)
    max_off = int(offs[-1])
    # rows per block: the GEMM result within the budget, but at least 4 rows per halo row (the block's GEMM
    # also computes the (kh-1)*dh rows below it, discarded)
    budget = max(4 * (kh - 1) * dh, (STACK_BUDGET // (n_taps * cout_g) - max_off) // wp)
    rows = max(1, min(ho, budget, block_cols // wo))
    xh = np.empty((cin, hp, wp), dtype=dt)
    xl = np.empty((cin, hp, wp) if split else (0, 0, 0), dtype=dt)
    empty = np.empty((0, 0), dtype=dt)
    out_dt = np.float64 if split else dt
    fh, fl = xh.reshape(cin, hp * wp), xl.reshape(xl.shape[0], hp * wp)
    for n in range(n_img):
        _pad_planes(x, n, center, pad, top, left, xh, xl)
        for g in range(groups):
            cr = slice(g * cin_g, (g + 1) * cin_g)
            wg = ws[g]
            off = offset[g * cout_g:(g + 1) * cout_g]
            for r0 in range(0, ho, rows):
                r1 = min(ho, r0 + rows)
                s0, s1 = r0 * wp, (r1 - 1) * wp + wo + max_off
                yh = wg @ fh[cr, s0:s1]
                yl = wg @ fl[cr, s0:s1] if split else empty
                acc = np.empty((cout_g, (r1 - r0) * wo), dtype=out_dt)
                _tap_sum(yh, yl, cout_g, offs, wp, wo, r1 - r0, acc)
                yield n, g, r0 * wo, r1 * wo, acc, off


def conv2d_gemm(x, x_zp, w, stride, pads, dilation, groups) -> np.ndarray:
    """:func:`conv2d_acc` computed by im2col + exact GEMM (any groups), assembled from
    :func:`conv2d_gemm_blocks`. Same arguments and result."""
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, _ = _validate(
        x, x_zp, w, stride, pads, dilation, groups)
    out = np.empty((shape[0], shape[1], shape[2] * shape[3]), dtype=np.int64)
    cout_g = shape[1] // groups
    for n, g, c0, c1, acc, off in conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups):
        out[n, g * cout_g:(g + 1) * cout_g, c0:c1] = acc.astype(np.int64) + off[:, None]
    return out.reshape(shape)


# --------------------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------------------
def conv2d_acc(x, x_zp, w, stride, pads, dilation, groups, compact=False) -> np.ndarray:
    """Integer 2-D convolution accumulator (ONNX Conv / ConvInteger geometry, NCHW).

    Parameters
    ----------
    x : ndarray [N, Cin, H, W], int8/uint8/int16/uint16
        Raw quantized activations.
    x_zp : int
        Activation zero point (subtracted from every input value; padding equals x_zp, i.e. contributes 0).
    w : ndarray [Cout, Cin // groups, kh, kw], int8/int16/int32
        Weights with their zero point already removed.
    stride : (sh, sw), each >= 1
    pads : (top, left, bottom, right), each >= 0
    dilation : (dh, dw), each >= 1
    groups : int, divides Cin and Cout
    compact : bool
        Allow an int32 result where the direct (depthwise) loop proved it exact.

    Returns
    -------
    int64 ndarray [N, Cout, Ho, Wo]
        ``Ho = (H + top + bottom - dh*(kh-1) - 1) // sh + 1`` (same for Wo) and::

            acc[n, co, oh, ow] = sum_{ci_local, ky, kx} (x[n, g*Cin_g + ci_local, ih, iw] - x_zp)
                                                         * w[co, ci_local, ky, kx]
            ih = oh*sh + ky*dh - top,  iw = ow*sw + kx*dw - left,  g = co // (Cout // groups)

        with out-of-bounds (ih, iw) terms equal to 0. Exact: the wrapper rejects inputs whose sums could
        exceed int64.

    Notes
    -----
    Depthwise convolutions (Cin // groups == 1) use :func:`conv2d_direct`, all others :func:`conv2d_gemm`.
    """
    check_int_array(w, "w", ndim=4, dtypes=W_DTYPES)
    if w.shape[1] == 1:
        return conv2d_direct(x, x_zp, w, stride, pads, dilation, groups, compact)
    return conv2d_gemm(x, x_zp, w, stride, pads, dilation, groups)
