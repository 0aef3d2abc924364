"""2-D transposed convolution accumulators (ONNX ConvTranspose, NCHW), exact in int64.

Two interchangeable paths:

* :func:`conv_transpose2d_direct` -- a numba scatter loop, one weight tap at a time;
* :func:`conv_transpose2d_gemm` -- per (image, group) an exact chunked float GEMM
  ``cols = w_g^T @ (x_g - x_zp)`` of shape [Cout_g*kh*kw, H*W] (the reduction runs over the group's input
  channels) followed by a numba col2im scatter-add in int64.

Both are checked bit for bit against ``tests/naive.py::conv_transpose2d_acc`` and against each other.
"""
import numpy as np

from ._jit import njit_noalloc
from .checks import as_int, as_int_tuple, check_int_array
from .conv2d_common import INT64_SAFE, W_DTYPES, X_DTYPES, check_geometry, sub_zero_point, valid_range
from .gemm import abs_max, float_dtype, matmul_float_chunked, matmul_loops, plan

COLS_BLOCK = 1 << 22  # max elements of one block of GEMM output (bounds the temporary memory)
MIN_GEMM_CIN = 4  # conv_transpose2d_acc uses the GEMM path from this many input channels per group


def _validate(x, x_zp, w, stride, pads, dilation, groups, out_hw):
    x_zp, (sh, sw), (top, left, bottom, right), (dh, dw), groups = check_geometry(x, x_zp, w, stride, pads,
                                                                                  dilation, groups)
    ho, wo = as_int_tuple(out_hw, 2, "out_hw")
    if ho < 1 or wo < 1:
        raise ValueError(f"out_hw must be >= 1, got {(ho, wo)}")
    n, cin, h, wd = x.shape
    cin_w, cout_g, kh, kw = w.shape
    if cin_w != cin:
        raise ValueError(f"w has {cin_w} input channels (ConvTranspose layout [Cin, Cout/groups, kh, kw]), "
                         f"x has {cin}")
    if groups < 1 or cin % groups:
        raise ValueError(f"groups={groups} must divide Cin={cin}")
    if kh < 1 or kw < 1 or cout_g < 1:
        raise ValueError(f"bad weight shape {w.shape}")
    x_dev = max(abs(int(x.max()) - x_zp), abs(int(x.min()) - x_zp)) if x.size else 0
    bound = x_dev * abs_max(w)
    if bound * (cin // groups) * kh * kw > INT64_SAFE:
        raise ValueError("conv_transpose2d accumulator could exceed int64")
    return x_zp, sh, sw, top, left, dh, dw, groups, (n, cout_g * groups, ho, wo), bound


@njit_noalloc
def _conv_transpose2d_direct(x, x_zp, w, sh, sw, top, left, dh, dw, groups, out):
    """Scatter loop: out[n, g*Cout_g + cl, ih*sh + ky*dh - top, iw*sw + kx*dw - left] += (x - x_zp) * w.

    Taps landing outside [0, Ho) x [0, Wo) are dropped; ``out`` (int64) is zeroed first.
    """
    n_img, cin, h, wd = x.shape
    cout_g = w.shape[1]
    kh = w.shape[2]
    kw = w.shape[3]
    ho = out.shape[2]
    wo = out.shape[3]
    cin_g = cin // groups
    for n in range(n_img):
        for co in range(out.shape[1]):
            for oh in range(ho):
                for ow in range(wo):
                    out[n, co, oh, ow] = np.int64(0)
        for ci in range(cin):
            g = ci // cin_g
            for cl in range(cout_g):
                co = g * cout_g + cl
                for ky in range(kh):
                    oy = ky * dh - top
                    ih0, ih1 = valid_range(h, ho, sh, oy)
                    for kx in range(kw):
                        wv = np.int64(w[ci, cl, ky, kx])
                        if wv == 0:
                            continue
                        ox = kx * dw - left
                        iw0, iw1 = valid_range(wd, wo, sw, ox)
                        cnt = iw1 - iw0
                        if cnt <= 0:
                            continue
                        o0 = iw0 * sw + ox  # >= 0 by construction of the valid range
                        for ih in range(ih0, ih1):
                            # row views indexed from 0 (no negative-index wraparound): vectorizable
                            dst = out[n, co, ih * sh + oy, o0:o0 + (cnt - 1) * sw + 1:sw]
                            src = x[n, ci, ih, iw0:iw1]
                            for j in range(cnt):
                                dst[j] += (np.int64(src[j]) - x_zp) * wv


def conv_transpose2d_direct(x, x_zp, w, stride, pads, dilation, groups, out_hw) -> np.ndarray:
    """:func:`conv_transpose2d_acc` by the direct scatter loop. Same arguments and result."""
    x_zp, sh, sw, top, left, dh, dw, groups, shape, _ = _validate(x, x_zp, w, stride, pads, dilation, groups,
                                                                  out_hw)
    out = np.empty(shape, dtype=np.int64)
    _conv_transpose2d_direct(x, x_zp, w.astype(np.int32, copy=False), sh, sw, top, left, dh, dw, groups, out)
    return out


@njit_noalloc
def _col2im_add(cols, c_lo, n, co0, kh, kw, sh, sw, top, left, dh, dw, h, wd, out):
    """out[n, co0 + cl, ih*sh + ky*dh - top, iw*sw + kx*dw - left] += cols[(cl - c_lo)*kh*kw + ky*kw + kx,
    ih*wd + iw] for the block of output channels cl in [c_lo, c_lo + cols.shape[0] // (kh*kw)), in int64.
    """
    ho = out.shape[2]
    wo = out.shape[3]
    n_cl = cols.shape[0] // (kh * kw)
    for b in range(n_cl):
        co = co0 + c_lo + b
        for ky in range(kh):
            oy = ky * dh - top
            ih0, ih1 = valid_range(h, ho, sh, oy)
            for kx in range(kw):
                row = (b * kh + ky) * kw + kx
                ox = kx * dw - left
                iw0, iw1 = valid_range(wd, wo, sw, ox)
                cnt = iw1 - iw0
                if cnt <= 0:
                    continue
                o0 = iw0 * sw + ox
                for ih in range(ih0, ih1):
                    dst = out[n, co, ih * sh + oy, o0:o0 + (cnt - 1) * sw + 1:sw]
                    src = cols[row, ih * wd + iw0:ih * wd + iw1]
                    for j in range(cnt):
                        dst[j] += np.int64(src[j])


def conv_transpose2d_gemm(x, x_zp, w, stride, pads, dilation, groups, out_hw) -> np.ndarray:
    """:func:`conv_transpose2d_acc` by exact GEMM + col2im. Same arguments and result."""
    x_zp, sh, sw, top, left, dh, dw, groups, shape, bound = _validate(x, x_zp, w, stride, pads, dilation,
                                                                      groups, out_hw)
    n_img, cin, h, wd = x.shape
    _, cout_g, kh, kw = w.shape
    cin_g = cin // groups
    out = np.zeros(shape, dtype=np.int64)
    method, kc = plan(bound, cin_g)
    if method == "zero":
        return out
    dt = np.int64 if method == "loops" else float_dtype(method)
    taps = kh * kw
    w3 = w.reshape(cin, cout_g * taps).astype(dt)
    w_t = [np.ascontiguousarray(w3[g * cin_g:(g + 1) * cin_g].T) for g in range(groups)]
    block = max(1, min(cout_g, COLS_BLOCK // max(1, taps * h * wd)))
    for n in range(n_img):
        xf = sub_zero_point(x[n].reshape(cin, h * wd), x_zp, np.empty((cin, h * wd), dtype=dt))
        for g in range(groups):
            xg = xf[g * cin_g:(g + 1) * cin_g]
            for c_lo in range(0, cout_g, block):
                c_hi = min(cout_g, c_lo + block)
                wt = w_t[g][c_lo * taps:c_hi * taps]
                if method == "loops":
                    cols = np.empty((wt.shape[0], h * wd), dtype=np.int64)
                    matmul_loops(wt, xg, cols)
                else:
                    cols = matmul_float_chunked(wt, xg, kc)
                _col2im_add(cols, c_lo, n, g * cout_g, kh, kw, sh, sw, top, left, dh, dw, h, wd, out)
    return out


def tiled(x_shape, w_shape, stride, pads, dilation, out_hw) -> bool:
    """True when every output pixel receives exactly one kernel tap: kernel == stride, no dilation, no padding
    and ``out_hw == (stride * H, stride * W)`` (the common 2x2 / stride 2 upsampling). The accumulator is then
    a plain GEMM result rearranged (:func:`conv_transpose2d_tiles`, :func:`untile`)."""
    kh, kw = int(w_shape[2]), int(w_shape[3])
    return (tuple(int(v) for v in dilation) == (1, 1) and tuple(int(v) for v in stride) == (kh, kw)
            and not any(int(v) for v in pads)
            and tuple(int(v) for v in out_hw) == (int(x_shape[2]) * kh, int(x_shape[3]) * kw))


def conv_transpose2d_tiles(x, x_zp, w, stride, pads, dilation, groups, out_hw, w_cache=None) -> np.ndarray:
    """The accumulator of a :func:`tiled` transposed convolution, in tap-major layout.

    Returns ``acc`` of shape [N, Cout, kh*kw*H*W] with ``acc[n, co, (ky*kw + kx)*H*W + ih*W + iw]`` =
    ``conv_transpose2d_acc(...)[n, co, ih*kh + ky, iw*kw + kx]`` (:func:`untile` rearranges it): the GEMM
    ``w_g^T @ (x_g - x_zp)`` per (image, group) without the col2im scatter, since no two taps meet. Exact
    float32/float64 (one chunk of the plan of :mod:`kernels.gemm`, a float array holding the integers) or int64.
    ``w_cache`` (a dict owned by the caller for a constant ``w``) keeps the float weights between calls.
    """
    x_zp, sh, sw, top, left, dh, dw, groups, shape, bound = _validate(x, x_zp, w, stride, pads, dilation,
                                                                      groups, out_hw)
    if not tiled(x.shape, w.shape, stride, pads, dilation, out_hw):
        raise ValueError("conv_transpose2d_tiles needs kernel == stride, no dilation, no padding and "
                         "out_hw == stride * input size")
    n_img, cin, h, wd = x.shape
    _, cout_g, kh, kw = w.shape
    cin_g = cin // groups
    taps = kh * kw
    cout = cout_g * groups
    method, kc = plan(bound, cin_g)
    if method == "zero":
        return np.zeros((n_img, cout, taps * h * wd), np.int64)
    dt = np.int64 if method == "loops" else float_dtype(method)
    single = method != "loops" and kc >= cin_g
    cache = w_cache if w_cache is not None else {}
    key = ("tiles", np.dtype(dt).str)
    if key not in cache:
        w3 = w.reshape(groups, cin_g, cout_g * taps).astype(dt)
        cache[key] = [np.ascontiguousarray(w3[g].T) for g in range(groups)]
    w_t = cache[key]
    acc = np.empty((n_img, cout, taps * h * wd), dtype=dt if single else np.int64)
    for n in range(n_img):
        xf = sub_zero_point(x[n].reshape(cin, h * wd), x_zp, np.empty((cin, h * wd), dtype=dt))
        if cin_g == 1 and single:  # one input channel per group: outer products, all groups at once
            wd3 = cache.setdefault(("tiles_dw", np.dtype(dt).str),
                                   np.ascontiguousarray(w.reshape(cin, cout_g * taps, 1).astype(dt)))
            np.multiply(wd3, xf[:, None, :], out=acc[n].reshape(cin, cout_g * taps, h * wd))
            continue
        for g in range(groups):
            xg = xf[g * cin_g:(g + 1) * cin_g]
            dst = acc[n, g * cout_g:(g + 1) * cout_g].reshape(cout_g * taps, h * wd)
            if method == "loops":
                matmul_loops(w_t[g], xg, dst)
            elif single:
                np.matmul(w_t[g], xg, out=dst)
            else:
                matmul_float_chunked(w_t[g], xg, kc, out=dst)
    return acc


@njit_noalloc
def _untile(y, kh, kw, h, wd, out):
    """out[n, c, ih*kh + ky, iw*kw + kx] = y[n, c, (ky*kw + kx)*h*wd + ih*wd + iw]."""
    n_img, n_c = y.shape[0], y.shape[1]
    for n in range(n_img):
        for c in range(n_c):
            src = y[n, c]
            for ih in range(h):
                for ky in range(kh):
                    row = out[n, c, ih * kh + ky]
                    for kx in range(kw):
                        base = (ky * kw + kx) * h * wd + ih * wd
                        for iw in range(wd):
                            row[iw * kw + kx] = src[base + iw]


def untile(y, kh: int, kw: int, h: int, wd: int) -> np.ndarray:
    """Rearrange a tap-major array [N, C, kh*kw*H*W] (:func:`conv_transpose2d_tiles`' layout, any dtype) into
    the image [N, C, H*kh, W*kw]."""
    if y.ndim != 3 or y.shape[2] != kh * kw * h * wd or not y.flags.c_contiguous:
        raise ValueError(f"untile: expected a C-contiguous [N, C, {kh * kw * h * wd}] array, got {y.shape}")
    out = np.empty((y.shape[0], y.shape[1], h * kh, wd * kw), y.dtype)
    _untile(y, kh, kw, h, wd, out)
    return out


def conv_transpose2d_acc(x, x_zp, w, stride, pads, dilation, groups, out_hw) -> np.ndarray:
    """Integer 2-D transposed convolution accumulator (ONNX ConvTranspose geometry, NCHW).

    Parameters
    ----------
    x : ndarray [N, Cin, H, W], int8/uint8/int16/uint16
        Raw quantized activations.
    x_zp : int
        Activation zero point.
    w : ndarray [Cin, Cout // groups, kh, kw], int8/int16/int32
        Weights in ONNX ConvTranspose layout, zero point already removed.
    stride : (sh, sw), pads : (top, left, bottom, right), dilation : (dh, dw)
        ONNX attributes (``bottom``/``right`` only matter through ``out_hw``).
    groups : int, divides Cin
    out_hw : (Ho, Wo)
        Output size, computed by the caller (output_shape / output_padding rules).

    Returns
    -------
    int64 ndarray [N, Cout, Ho, Wo]
        Zero-initialised, then for every n, input channel ci (group g = ci // Cin_g), ih, iw, co_local,
        ky, kx::

            oh = ih*sh + ky*dh - top,  ow = iw*sw + kx*dw - left
            if 0 <= oh < Ho and 0 <= ow < Wo:
                acc[n, g*Cout_g + co_local, oh, ow] += (x[n, ci, ih, iw] - x_zp) * w[ci, co_local, ky, kx]

        Exact: inputs whose sums could exceed int64 are rejected.

    Notes
    -----
    Uses :func:`conv_transpose2d_gemm` when Cin // groups >= 4, else :func:`conv_transpose2d_direct`.
    """
    check_int_array(x, "x", ndim=4, dtypes=X_DTYPES)
    check_int_array(w, "w", ndim=4, dtypes=W_DTYPES)
    groups_i = as_int(groups, "groups")
    if groups_i >= 1 and x.shape[1] // groups_i >= MIN_GEMM_CIN:
        return conv_transpose2d_gemm(x, x_zp, w, stride, pads, dilation, groups, out_hw)
    return conv_transpose2d_direct(x, x_zp, w, stride, pads, dilation, groups, out_hw)
