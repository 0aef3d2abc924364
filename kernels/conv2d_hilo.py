"""Stride-1 strategies of the GEMM convolution path (:func:`kernels.conv2d_gemm.conv2d_gemm_blocks`).

* :func:`stacked_taps` -- one GEMM per block of output rows with all kernel taps stacked along M, no im2col;
* the hi/lo byte split of 16-bit activations (:func:`hilo_ok`, :func:`split_hilo`, :func:`combine_hilo`): two
  exact float32 GEMMs on the bytes of the centred activations instead of one float64 GEMM, for the stacked taps
  and for 1x1 convolutions (:func:`pointwise_split`).
"""
import numpy as np

from ._jit import njit
from .gemm import F32_LIMIT

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
    K-term dot product, so every addition is exact (see :func:`stacked_taps`)."""
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


def pointwise_split(x, center, w, cache, offset, groups, block_cols):
    """1x1 / stride 1 / unpadded convolution of 16-bit activations as exact float32 GEMMs on the bytes of the
    centred activations (:func:`hilo_ok`), combined in float64 (the blocks of
    :func:`kernels.conv2d_gemm.conv2d_gemm_blocks`; ``offset`` includes the ``128 * sum(w)`` of the split)."""
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


def stacked_taps(x, center, pad, w, cache, dt, offset, split, groups, top, left, bottom, right, dh, dw, ho, wo,
                 block_cols):
    """Stride-1 convolution as one GEMM per block of output rows, all kernel taps stacked along M (the blocks
    of :func:`kernels.conv2d_gemm.conv2d_gemm_blocks`), without im2col.

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
