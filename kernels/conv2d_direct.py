"""Direct strategy of the 2-D convolution: a numba loop over output planes (used for depthwise convolutions,
where a GEMM per group would be tiny; depthwise kernels go to :mod:`kernels.depthwise` where it applies).

:func:`conv2d_direct` and :func:`bind_direct` compute the accumulator of
:func:`kernels.conv2d.conv2d_acc`; :func:`conv2d_direct_requantized` and :func:`bind_direct_requantized` fuse
the requantization in where that is proven the same.
"""
import numpy as np

from ._jit import njit
from . import depthwise, depthwise_cl, depthwise_nhwc
from .conv2d_common import requant_args, validate_conv2d
from .requantize import requantize_row, saturation_bounds


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
    """:func:`kernels.conv2d.conv2d_acc` computed by the direct numba loop (any groups). Same arguments and result.

    The loop accumulates in int32 when every partial sum provably fits; ``compact`` returns that int32
    array as is instead of widening it to int64."""
    return bind_direct(x, x_zp, w, stride, pads, dilation, groups, compact)(x)


def bind_direct(x, x_zp, w, stride, pads, dilation, groups, compact=False):
    """:func:`conv2d_direct` validated and set up once for inputs shaped and typed like ``x``: returns
    ``run(x) -> acc`` (a fresh accumulator array per call)."""
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, bound = validate_conv2d(
        x, x_zp, w, stride, pads, dilation, groups)
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
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, bound = validate_conv2d(
        x, x_zp, w, stride, pads, dilation, groups)
    bias, mult, shift, out_zp, qmin, qmax = requant_args(bias, mult, shift, out, shape, out_zp, qmin, qmax,
                                                         "conv2d_direct_requantized")
    # per output channel c, every partial sum is at most x_dev * sum_t |w[c, t]| (acc_max) in magnitude, and
    # acc + bias at most that plus |bias[c]| (reach): both must fit, the first int32, the second the board's width
    info = np.iinfo(x.dtype)
    x_dev = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp))
    acc_max = x_dev * np.abs(w.reshape(w.shape[0], -1).astype(np.int64)).sum(axis=1)
    reach = acc_max + np.abs(bias)  # bias: one per output channel (requant_args)
    if acc_max.size and (int(acc_max.max()) >= (1 << 31) - 1 or int(reach.max()) >= 1 << (min(acc_bits, 64) - 1)):
        return None
    lims = saturation_bounds(mult, shift, out_zp, qmin, qmax, reach=reach)
    if lims.size and int(lims.min()) == 0:
        return None
    fdt = depthwise.plan(w.shape[2] * w.shape[3], bound) if w.shape[1] == 1 else None
    run = None
    wf = np.ascontiguousarray(w.reshape(w.shape[0], -1).astype(fdt)) if fdt is not None else None
    if w.shape[1] == 1 and depthwise_nhwc.wins(x.dtype, out.dtype, w, x.shape[1], w.shape[0] // x.shape[1],
                                                x.shape[2], x.shape[3], shape[2], shape[3], sw):
        run = depthwise_nhwc.bind(x.shape, x_zp, w, (sh, sw), (top, left, bottom, right), (dh, dw), shape, out.dtype,
                                  bias, mult, shift, lims, out_zp, qmin, qmax)  # channels last in channel blocks
    elif (w.shape[1] == 1 and depthwise_cl.wins(x.shape[1], shape[2], shape[3], w.shape[0] // x.shape[1])
          and (wf is None or depthwise.column_pairs(x.dtype, x_zp, wf, w.shape[2], w.shape[3], (sh, sw), (dh, dw),
                                                    True, bias) is None)):
        run = depthwise_cl.bind(x.shape, x_zp, w, (sh, sw), (top, left, bottom, right), (dh, dw), shape, bias, mult,
                                shift, lims, out_zp, qmin, qmax)  # small planes: channels last (int32, exact)
    elif fdt is not None:  # per channel; column stride 2 there too on small planes (depthwise_s2: measured faster)
        run = depthwise.bind(x.shape, x.dtype, x_zp, wf, w.shape[2], w.shape[3], (sh, sw), (top, left, bottom, right),
                             (dh, dw), out.shape, True, bias, mult, shift, lims, out_zp, qmin, qmax)
    return {"shape": tuple(shape), "geo": (x_zp, sh, sw, top, left, bottom, right, dh, dw, groups),
            "rq": (bias, mult, shift, lims, out_zp, qmin, qmax), "run": run,
            "w32": None if run is not None else w.astype(np.int32, copy=False)}
