"""2-D pooling (NCHW): max pooling on raw quantized values, average pooling with fixed-point division.

The caller computes the output size (ONNX ``ceil_mode`` etc.) and, for average pooling, the fixed-point
reciprocal ``(mult, shift)`` of every possible divisor ``n`` (``mult_by_count[n]``, ``shift_by_count[n]``).
"""
import numpy as np

from ._jit import njit, njit_noalloc
from .checks import array_key, as_int, as_int_tuple, cached_bind, check_int_array, check_multiplier, check_out
from .conv2d_common import valid_range
from .requantize import clamp, mrs_checked

X_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)


def _window_axis_hits(n_out, size, k, stride, dil, pad_lo):
    """For each output index along one axis, the number of window taps inside [0, size)."""
    pos = np.arange(n_out)[:, None] * stride + np.arange(k)[None, :] * dil - pad_lo
    return ((pos >= 0) & (pos < size)).sum(axis=1)


def _geometry(x, kernel, stride, pads, dilation, out_hw):
    check_int_array(x, "x", ndim=4, dtypes=X_DTYPES)
    kh, kw = as_int_tuple(kernel, 2, "kernel")
    sh, sw = as_int_tuple(stride, 2, "stride")
    top, left, bottom, right = as_int_tuple(pads, 4, "pads")
    dh, dw = as_int_tuple(dilation, 2, "dilation")
    ho, wo = as_int_tuple(out_hw, 2, "out_hw")
    if kh < 1 or kw < 1:
        raise ValueError(f"kernel must be at least 1x1, got {(kh, kw)}")
    if sh < 1 or sw < 1:
        raise ValueError(f"stride must be >= 1, got {(sh, sw)}")
    if dh < 1 or dw < 1:
        raise ValueError(f"dilation must be >= 1, got {(dh, dw)}")
    if min(top, left, bottom, right) < 0:
        raise ValueError(f"pads must be >= 0, got {pads}")
    if ho < 1 or wo < 1:
        raise ValueError(f"out_hw must be >= 1, got {(ho, wo)}")
    return kh, kw, sh, sw, top, left, bottom, right, dh, dw, ho, wo


# --------------------------------------------------------------------------------------------------------
# max pooling
# --------------------------------------------------------------------------------------------------------
@njit_noalloc
def _maxpool2d(x, kh, kw, sh, sw, top, left, dh, dw, col_lo, col_hi, out):
    """out[n, c, oh, ow] = max of x[n, c, ih, iw] over the window cells inside the input.

    Row by row: an output row starts at the dtype's minimum and takes the maximum with every tap's in-bounds
    columns (output columns ``col_lo[kx] <= ow < col_hi[kx]`` of tap column ``kx``: ``valid_range``, worked out
    by the caller once -- two integer divisions per row and tap cost more than a short row's maxima), branch-free (a data-dependent branch mispredicts on half of all random inputs),
    unit and 2-strided columns as their own loops so they vectorize. The caller guarantees every window has at
    least one in-bounds cell, so padding never contributes and the minimum never survives unless it is the data's.
    """
    n_img, n_c, h, wd = x.shape
    ho = out.shape[2]
    wo = out.shape[3]
    lowest = np.iinfo(out.dtype).min
    for n in range(n_img):
        for c in range(n_c):
            for oh in range(ho):
                dst = out[n, c, oh]
                for ow in range(wo):
                    dst[ow] = lowest
                for ky in range(kh):
                    ih = oh * sh + ky * dh - top
                    if ih < 0 or ih >= h:
                        continue
                    row = x[n, c, ih]
                    for kx in range(kw):
                        off = kx * dw - left
                        lo, hi = col_lo[kx], col_hi[kx]
                        d = dst[lo:hi]
                        s = row[lo * sw + off:]  # a slice: the indices below stay provably non-negative
                        if sw == 1:
                            for j in range(hi - lo):
                                d[j] = max(d[j], s[j])
                        elif sw == 2:
                            for j in range(hi - lo):
                                d[j] = max(d[j], s[2 * j])
                        else:
                            for j in range(hi - lo):
                                d[j] = max(d[j], s[j * sw])


@njit_noalloc
def _maxpool2d_separable(x, kh, sh, dh, kw, sw, dw, top, left, xp, vb, hb, out):
    """:func:`_maxpool2d` for large windows: the max over a window is the max over its rows of each row's max over
    its columns, kh + kw maxima an output instead of kh * kw, in long loops over whole planes.

    Scratch from the caller, of x's dtype, flat: ``xp`` (Hp*Wp) the plane at (top, left) in a border of the
    dtype's minimum, wide and tall enough for every tap (Wp > (Wo-1)*sw + (kw-1)*dw, Hp > (Ho-1)*sh +
    (kh-1)*dh); ``vb`` (Ho*Wp) each output row's max over its kh rows of ``xp``; ``hb`` (Ho*Wp - (kw-1)*dw, unit
    column stride only) the max over kw columns of ``vb``. The caller guarantees every window has at least one
    in-bounds cell, so the border's minimum never wins over the data.
    """
    n_img, n_c, h, wd = x.shape
    ho = out.shape[2]
    wo = out.shape[3]
    wp = vb.shape[0] // ho
    lowest = np.iinfo(out.dtype).min
    for i in range(xp.shape[0]):
        xp[i] = lowest
    for n in range(n_img):
        for c in range(n_c):
            for ih in range(h):
                src = x[n, c, ih]
                d = xp[(top + ih) * wp + left:]
                for j in range(wd):
                    d[j] = src[j]
            if sh == 1:
                m = ho * wp
                for i in range(m):
                    vb[i] = xp[i]
                for ky in range(1, kh):
                    s = xp[ky * dh * wp:]
                    for i in range(m):
                        vb[i] = max(vb[i], s[i])
            else:
                for oh in range(ho):
                    d = vb[oh * wp:]
                    s0 = xp[oh * sh * wp:]
                    for j in range(wp):
                        d[j] = s0[j]
                    for ky in range(1, kh):
                        s = xp[(oh * sh + ky * dh) * wp:]
                        for j in range(wp):
                            d[j] = max(d[j], s[j])
            if sw == 1:
                m = hb.shape[0]
                for i in range(m):
                    hb[i] = vb[i]
                for kx in range(1, kw):
                    s = vb[kx * dw:]
                    for i in range(m):
                        hb[i] = max(hb[i], s[i])
                for oh in range(ho):
                    dst = out[n, c, oh]
                    s = hb[oh * wp:]
                    for ow in range(wo):
                        dst[ow] = s[ow]
            else:
                for oh in range(ho):
                    dst = out[n, c, oh]
                    s0 = vb[oh * wp:]
                    for ow in range(wo):
                        dst[ow] = s0[ow * sw]
                    for kx in range(1, kw):
                        s = vb[oh * wp + kx * dw:]
                        for ow in range(wo):
                            dst[ow] = max(dst[ow], s[ow * sw])


def maxpool2d(x, kernel, stride, pads, dilation, out_hw, cache=None) -> np.ndarray:
    """Max pooling over raw quantized values (ONNX MaxPool geometry, NCHW).

    Parameters
    ----------
    x : ndarray [N, C, H, W], int8/uint8/int16/uint16/int32
    kernel : (kh, kw), stride : (sh, sw), pads : (top, left, bottom, right), dilation : (dh, dw)
    out_hw : (Ho, Wo)
        Output size computed by the caller (ceil_mode etc.).
    cache : dict, optional
        Owned by the caller for a constant geometry (one per graph node): keeps the validated geometry, so a
        later call with the same input shape and dtype goes straight to the loop.

    Returns
    -------
    ndarray [N, C, Ho, Wo] of x.dtype
        ``out[n, c, oh, ow] = max x[n, c, oh*sh + ky*dh - top, ow*sw + kx*dw - left]`` over the (ky, kx)
        whose position is inside the input; padding never wins. ValueError if some window has no
        in-bounds cell.
    """
    return cached_bind(cache, array_key(x), lambda: _bind_maxpool(x, kernel, stride, pads, dilation, out_hw))(x)


def _bind_maxpool(x, kernel, stride, pads, dilation, out_hw, separable=None):
    """:func:`maxpool2d` validated for inputs like ``x``: returns ``run(x) -> out``.

    The separable kernel where it takes fewer maxima an output (kh*kw > kh + kw: 3x3 and up, 2x3), unless
    ``separable`` (tests) says which: its long loops over whole planes beat the direct kernel's short rows
    even at 3x3 (1x256x26x26 int8, one core: 87 against 684 us at stride 1, 255 against 485 us at stride 2).
    """
    kh, kw, sh, sw, top, left, _, _, dh, dw, ho, wo = _geometry(x, kernel, stride, pads, dilation, out_hw)
    n, c, h, wd = x.shape
    rows = _window_axis_hits(ho, h, kh, sh, dh, top)
    cols = _window_axis_hits(wo, wd, kw, sw, dw, left)
    if (rows == 0).any() or (cols == 0).any():
        raise ValueError("maxpool2d: some pooling window lies entirely in the padding")
    shape = (n, c, ho, wo)
    if separable is None:
        separable = kh * kw > kh + kw
    if separable:
        wp = max(left + wd, (wo - 1) * sw + (kw - 1) * dw + 1)
        hp = max(top + h, (ho - 1) * sh + (kh - 1) * dh + 1)
        n_hb = ho * wp - (kw - 1) * dw if sw == 1 else 0

        def run(x):  # scratch fresh per call: concurrent users never share it
            out = np.empty(shape, dtype=x.dtype)
            _maxpool2d_separable(x, kh, sh, dh, kw, sw, dw, top, left, np.empty(hp * wp, x.dtype),
                                 np.empty(ho * wp, x.dtype), np.empty(n_hb, x.dtype), out)
            return out
        return run
    ranges = np.array([valid_range(wo, wd, sw, kx * dw - left) for kx in range(kw)], np.int64).reshape(kw, 2)
    args = (kh, kw, sh, sw, top, left, dh, dw, ranges[:, 0].copy(), ranges[:, 1].copy())

    def run(x):
        out = np.empty(shape, dtype=x.dtype)
        _maxpool2d(x, *args, out)
        return out
    return run


# --------------------------------------------------------------------------------------------------------
# average pooling
# --------------------------------------------------------------------------------------------------------
@njit
def _window_cells(start, k, size, pad_lo, pad_hi):
    """Cells of the window [start, start + k) inside the input [0, size) and inside the padded extent
    [-pad_lo, size + pad_hi), as (in_bounds, in_padded)."""
    inside = np.int64(0)
    padded = np.int64(0)
    for i in range(start, start + k):
        if 0 <= i < size:
            inside += 1
        if -pad_lo <= i < size + pad_hi:
            padded += 1
    return inside, padded


@njit_noalloc
def _avgpool2d(x, x_zp, kh, kw, sh, sw, top, left, bottom, right, count_include_pad, mult_by_count,
               shift_by_count, out_zp, qmin, qmax, out):
    """out = clamp(mrs(sum (x - x_zp) over in-bounds cells, mult[n], shift[n]) + out_zp), n = divisor.

    n counts the window cells inside [-top, H + bottom) x [-left, W + right) when count_include_pad, else
    the in-bounds cells. The sum accumulates in int64.
    """
    n_img, n_c, h, wd = x.shape
    ho = out.shape[2]
    wo = out.shape[3]
    for n in range(n_img):
        for c in range(n_c):
            for oh in range(ho):
                ih0 = oh * sh - top
                # window rows [ih0, ih0 + kh): rows in the input and in the padded extent
                rows_in, rows_pad = _window_cells(ih0, kh, h, top, bottom)
                for ow in range(wo):
                    iw0 = ow * sw - left
                    cols_in, cols_pad = _window_cells(iw0, kw, wd, left, right)
                    s = np.int64(0)
                    for ky in range(kh):
                        ih = ih0 + ky
                        if ih < 0 or ih >= h:
                            continue
                        for kx in range(kw):
                            iw = iw0 + kx
                            if iw < 0 or iw >= wd:
                                continue
                            s += np.int64(x[n, c, ih, iw]) - x_zp
                    cnt = rows_pad * cols_pad if count_include_pad else rows_in * cols_in
                    y = mrs_checked(s, mult_by_count[cnt], shift_by_count[cnt]) + out_zp
                    out[n, c, oh, ow] = clamp(y, qmin, qmax)


def avgpool2d(x, x_zp, kernel, stride, pads, count_include_pad, mult_by_count, shift_by_count, out_zp, qmin,
              qmax, out) -> None:
    """Quantized average pooling with a per-divisor fixed-point reciprocal (ONNX AveragePool geometry).

    Parameters
    ----------
    x : ndarray [N, C, H, W], int8/uint8/int16/uint16/int32
    x_zp : int
        Input zero point.
    kernel : (kh, kw), stride : (sh, sw), pads : (top, left, bottom, right)
    count_include_pad : bool
    mult_by_count, shift_by_count : integer ndarrays of length kh*kw + 1
        Fixed-point factor to apply to a window sum of ``n`` cells (typically ``x_scale / (n * y_scale)``);
        entry 0 is used only by windows without in-bounds cells.
    out_zp, qmin, qmax : int
    out : ndarray [N, C, Ho, Wo], int8/uint8/int16/uint16/int32
        Preallocated; (Ho, Wo) is taken from its shape.

    Notes
    -----
    Exact integer semantics per output cell::

        s = sum over in-bounds window cells of (x - x_zp)                     (int64)
        n = #window cells inside [-top, H+bottom) x [-left, W+right)  if count_include_pad
            else #window cells inside the input
        out = clamp(mul_round_shift(s, mult_by_count[n], shift_by_count[n]) + out_zp, qmin, qmax)

    with window cells (oh*sh + ky - top, ow*sw + kx - left), 0 <= ky < kh, 0 <= kx < kw.
    """
    check_int_array(out, "out", ndim=4)
    kh, kw, sh, sw, top, left, bottom, right, _, _, _, _ = _geometry(x, kernel, stride, pads, (1, 1),
                                                                     out.shape[2:])
    x_zp = as_int(x_zp, "x_zp")
    if abs(x_zp) >= 1 << 32:
        raise ValueError(f"x_zp {x_zp} out of range")
    if not isinstance(count_include_pad, (bool, np.bool_)):
        raise ValueError(f"count_include_pad must be a bool, got {count_include_pad!r}")
    n_tab = kh * kw + 1
    for name, arr in (("mult_by_count", mult_by_count), ("shift_by_count", shift_by_count)):
        if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.shape != (n_tab,):
            raise ValueError(f"{name} must be an integer array of shape ({n_tab},) (kh*kw + 1)")
    mult = np.ascontiguousarray(mult_by_count, dtype=np.int64)
    shift = np.ascontiguousarray(shift_by_count, dtype=np.int64)
    check_multiplier(mult, shift, "avgpool2d")
    n, c = x.shape[:2]
    out_zp, qmin, qmax = check_out(out, (n, c) + tuple(out.shape[2:]), out_zp, qmin, qmax)
    _avgpool2d(x, x_zp, kh, kw, sh, sw, top, left, bottom, right, bool(count_include_pad), mult, shift,
               out_zp, qmin, qmax, out)
