"""Depthwise convolutions at column stride 2 (column dilation 1) of 8/16-bit activations as exact int32 dot products
of int16 column pairs read straight from the centred plane: nothing is packed per channel.

Used by :func:`kernels.depthwise.bind` where :func:`takes` (column stride 2, column dilation 1, 8- or 16-bit
activations, a CPU with the tiles of ``kernels.conv_int16``) and :func:`prepare` and ``kernels.conv_int16.plan``
prove it exact; checked bit for bit against ``tests/naive.py`` (``tests/test_kernels_depthwise_s2.py``).

Layout. Each input plane, centred (``v = x - center``, int16, ``center`` from ``kernels.conv_int16.x_center``), is
written into its padded plane split by rows only: padded row ``r`` lives in row phase ``r % sh`` at row ``r // sh``,
each row ``2*wq`` int16 cells (at least one more than the padded width), padding cells holding ``pad = x_zp -
center``. Seen as int32 words, word ``k`` of a row holds the cells ``(2k, 2k+1)`` (low, high half). Output ``(oh,
ow)`` reads padded columns ``2*ow + kx``: the taps ``kx = 2i`` and ``2i + 1`` of a kernel row are the halves of word
``ow + i`` of the row of ``ky``, so the weight word ``(w[ky, 2i], w[ky, 2i+1])`` multiplies both in one
``vpmaddwd`` lane (an odd kernel width leaves the last word's high weight 0). On the "wide" output grid of pitch
``wq`` (columns ``>= Wo`` computed and discarded) every pair term of consecutive outputs is one unaligned vector
load at word ``offs[k] + oh*wq + ow``, and the tile of ``kernels.depthwise_int16`` (:func:`kernels.depthwise_int16.
make_tile`) sums a channel's pairs over ``NB`` outputs. Compared with the pair plane of ``kernels.depthwise_int16``
(columns split into phases, then each pair word packed from two cells) the plane is written once, with unit-stride
conversions only; compared with the float kernel of ``kernels.depthwise`` half the multiply-adds.

Exactness. ``sum_t w[t] * (x_t - x_zp) = sum_t w[t] * v_t - pad * sum_t w[t]`` (padding cells hold ``v = pad``), so
the kernel forms ``A = sum_t w[t] * v_t`` in int32 and subtracts ``corr = pad * sum_t w[t]`` in int64 (folded into
the bias when the requantization is fused). A zero high weight multiplies a cell that is not a tap of that output
(past the padded width, or the next row's first cell): its product is 0 whatever the cell holds. Every int32 value
of a lane is a sum of a subset of the terms ``w[c, t] * v`` with ``|v| <= 2**15``, at most ``S_c * 2**15`` with
``S_c = sum_t |w[c, t]|``; ``kernels.conv_int16.plan`` admits only ``max_c S_c * 2**15 <= 2**31 - 1`` and
:func:`prepare` only weights that fit int16, so no int32 operation wraps, whatever the vector width.
"""
import functools

import numpy as np

from ._jit import njit_noalloc
from .conv_int16 import AVAILABLE, ISA, ISAS, X_DTYPES, compile_template, weights_fit, x_center
from .depthwise_int16 import make_tile
from .requantize import requantize_row
from .rows16 import move_row

NB = 64        # outputs per tile (4 vectors of 16 int32 lanes on AVX-512BW, 8 of 8 on AVX2)
BLOCK = 4096   # wide accumulator elements per row block (16 KiB of int32)


def takes(x_dtype, stride, dilation) -> bool:
    """Whether this kernel can serve the convolution (before :func:`prepare`'s and the bound's proof): column stride
    2, column dilation 1, 8- or 16-bit activations, a CPU with the int16-pair tiles."""
    return AVAILABLE and np.dtype(x_dtype) in X_DTYPES and stride[1] == 2 and dilation[1] == 1


def prepare(wf, kh, kw):
    """Packed weights, or None where they do not fit int16. ``wf``: (Cout, kh*kw) integer-valued weights (any
    numeric dtype, exact). Returns ``(w32, sumw, s_max)``: ``w32`` (Cout, kh*ceil(kw/2)) int32 words
    ``(w[ky, 2i], w[ky, 2i+1])`` (high half 0 past the kernel width), ``sumw`` (Cout,) int64 ``sum_t w[c, t]`` and
    ``s_max`` the Python int ``max_c sum_t |w[c, t]|``."""
    wi = np.asarray(wf).astype(np.int64)
    if not np.array_equal(wi, wf) or not weights_fit(wi):
        return None
    npair = (kw + 1) // 2
    w3 = np.zeros((wi.shape[0], kh, 2 * npair), np.int64)
    w3[:, :, :kw] = wi.reshape(-1, kh, kw)
    lo, hi = w3[:, :, 0::2], w3[:, :, 1::2]
    w32 = ((lo & 0xFFFF) | (hi << 16)).reshape(wi.shape[0], -1).astype(np.uint32).view(np.int32)
    s_max = int(np.abs(wi).sum(axis=1).max()) if wi.size else 0
    return np.ascontiguousarray(w32), wi.sum(axis=1), s_max


def geometry(x_shape, kh, kw, sh, pads, dh, ho):
    """``(offs, rowoff, wq, plen)``: each pair's word offset (kernel row by kernel row), where each input row's first
    cell lands (int16 index), the row pitch in words and the length in words of the plane with the tiles' slack."""
    h, wd = x_shape[2], x_shape[3]
    top, left, bottom, right = pads
    wq = (left + wd + right) // 2 + 1  # 2*wq cells: more than the padded width
    psz = (top + h + bottom + sh - 1) // sh * wq
    ky = np.repeat(np.arange(kh, dtype=np.int64), (kw + 1) // 2)
    i = np.tile(np.arange((kw + 1) // 2, dtype=np.int64), kh)
    offs = ((ky * dh) % sh) * psz + ((ky * dh) // sh) * wq + i
    r = top + np.arange(h, dtype=np.int64)
    rowoff = 2 * ((r % sh) * psz + (r // sh) * wq) + left
    plen = max(sh * psz, int(offs.max(initial=0)) + ho * wq + NB)
    return offs, rowoff, wq, plen


def _depthwise_s2(x, center, pad, w32, offs, rowoff, wq, rows_blk, u, p, acc, yb, out, fuse, corr, bias, mult, shift,
                  bound, out_zp, qmin, qmax):
    """Depthwise convolution of 8/16-bit ``x`` (module docstring), geometry from :func:`geometry`. ``u``: int16
    plane scratch and ``p`` the same memory seen as int32 words; ``acc`` int32 and ``yb`` (``out``'s dtype, with
    ``fuse``) of at least ``rows_blk*wq + NB`` cells. ``corr[c]``: ``pad * sum_t w[c, t]``. Without
    ``fuse`` ``out`` receives the exact accumulators; with it their requantization. Allocates nothing.
    (A template: :func:`kernel_set` compiles it per instruction set, binding ``_tile``.)"""
    n_img, c_in, h, wd = x.shape
    cout = w32.shape[0]
    per = cout // c_in
    ho, wo = out.shape[2], out.shape[3]
    pad16 = np.int16(pad)
    for i in range(u.shape[0]):  # the padding cells keep it: the rows below write the input cells only
        u[i] = pad16
    for n in range(n_img):
        for ci in range(c_in):
            xc = x[n, ci]
            for ih in range(h if wd >= 16 else 0):  # 16 cells per vector (kernels.rows16)
                move_row(xc, ih * wd, u, rowoff[ih], wd, center)
            for ih in range(h if wd < 16 else 0):
                src = xc[ih]
                dst = u[rowoff[ih]:rowoff[ih] + wd]
                for j in range(wd):
                    dst[j] = np.int16(np.int32(src[j]) - center)
            for mm in range(per):
                co = ci * per + mm
                wrow = w32[co]
                cb = corr[co]
                for oh0 in range(0, ho, rows_blk):
                    oh1 = min(ho, oh0 + rows_blk)
                    npix = (oh1 - oh0 - 1) * wq + wo
                    col = 0
                    while col < npix:  # the last tile overruns npix: outputs past it are discarded
                        _tile(p, oh0 * wq + col, offs, wrow, acc, col)
                        col += NB
                    _finish(acc, col, yb, out[n, co, oh0:oh1], wq, fuse, cb, bias[co] if fuse else 0,
                            mult[co] if fuse else 0, shift[co] if fuse else 0, bound[co] if fuse else 0, out_zp,
                            qmin, qmax)


@njit_noalloc
def _finish(acc, n_acc, yb, dst, wq, fuse, cb, bias, mult, shift, bound, out_zp, qmin, qmax):
    """A row block's wide accumulators ``acc`` into its output rows ``dst`` (2-D): ``acc - cb`` (int64), or with
    ``fuse`` their requantization (bias ``bias - cb``)."""
    rows, wo = dst.shape
    if fuse:  # the whole wide block (one long loop), then its rows
        requantize_row(acc[:n_acc], yb[:n_acc], bias - cb, mult, shift, bound, out_zp, qmin, qmax)
        for i in range(rows if wo >= 16 else 0):  # 16 bytes per vector (kernels.rows16)
            move_row(yb, i * wq, dst, i * wo, wo, np.int64(0))
        for i in range(rows if wo < 16 else 0):
            d = dst[i]
            s = yb[i * wq:i * wq + wo]
            for j in range(wo):
                d[j] = s[j]
    else:
        for i in range(rows):
            d = dst[i]
            s = acc[i * wq:i * wq + wo]
            for j in range(wo):
                d[j] = np.int64(s[j]) - cb


class KernelSet:
    """:func:`_depthwise_s2` compiled for one ``kernels.conv_int16.Isa`` ``isa`` (``depthwise_s2``)."""

    def __init__(self, isa):
        self.isa = isa
        globs = dict(globals(), _tile=make_tile(isa, NB // isa.lanes))
        self.depthwise_s2 = compile_template(_depthwise_s2, isa.name, globs)


@functools.cache
def kernel_set(name: str) -> KernelSet:
    """The :class:`KernelSet` of instruction set ``name`` (a key of ``kernels.conv_int16.ISAS``), built once."""
    return KernelSet(ISAS[name])


KERNELS = kernel_set(ISA) if AVAILABLE else None  # what bind() runs


def bind(x_shape, x_dtype, x_zp, prep, kh, kw, stride, pads, dilation, out_shape, fuse=False, bias=None, mult=None,
         shift=None, bound=None, out_zp=0, qmin=0, qmax=0):
    """:func:`_depthwise_s2` of :data:`KERNELS` for inputs of ``x_shape``/``x_dtype`` and outputs of ``out_shape``,
    set up once: returns ``run(x, out)`` (scratch fresh per call). ``prep`` from :func:`prepare`, admitted by
    ``kernels.conv_int16.plan`` for this input with the same ``center`` (the caller checked it)."""
    w32, sumw, _ = prep
    center = x_center(x_dtype)
    pad = int(x_zp) - center
    offs, rowoff, wq, plen = geometry(x_shape, kh, kw, stride[0], pads, dilation[0], out_shape[2])
    rows_blk = max(1, BLOCK // wq)
    cells = min(rows_blk, out_shape[2]) * wq + NB
    none = np.zeros(0, np.int64)
    bias, mult, shift, bound = (np.asarray(bias, np.int64), mult, shift, bound) if fuse else (none,) * 4
    n_yb = cells if fuse else 0
    head = (center, pad, w32, offs, rowoff, wq, rows_blk)
    tail = (fuse, pad * sumw, bias, mult, shift, bound, out_zp, qmin, qmax)
    kernel = KERNELS.depthwise_s2

    def run(x, out):
        u = np.empty(2 * plen, np.int16)
        kernel(x, *head, u, u.view(np.int32), np.empty(cells, np.int32), np.empty(n_yb, out.dtype), out, *tail)
        return out

    return run
