"""Depthwise convolutions of 8/16-bit activations as exact int32 dot products of int16 tap pairs (x86
``vpmaddwd``, fused by LLVM with the accumulation into the VNNI ``vpdpwssd`` where the CPU has it).

Used by :func:`kernels.depthwise.bind` where ``kernels.depthwise.takes_pairs`` (16-bit activations; 8-bit ones
from 3x3 at column stride 1), where :func:`prepare` and
``kernels.conv_int16.plan`` prove it exact and the CPU has AVX-512BW or AVX2 (the instruction set
``kernels.conv_int16`` chose; :data:`KERNELS` its tiles, :func:`kernel_set`); elsewhere the float path of
:mod:`kernels.depthwise` runs. Checked bit for bit against ``tests/naive.py::conv2d_acc`` for both instruction
sets (``tests/test_kernels_depthwise_int16.py``).

Layout. As in :mod:`kernels.depthwise`, each input plane is written, centred (``v = x - center``: int16, with
``center`` from ``kernels.conv_int16.x_center``), into the ``sh*sw`` polyphase components of its padded plane
(row pitch ``wq``, component size ``psz``; the border holds ``pad = x_zp - center``), a flat int16 array ``U``:
output ``(oh, ow)`` of tap ``t = (ky, kx)`` reads ``U[toff[t] + oh*wq + ow]``. Taps ``kx`` and ``kx + s`` of one
kernel row, ``s = sw / gcd(dw, sw)``, lie in the same component ``D = s*dw/sw`` cells apart, so the int32 plane
``P[q] = (U[q], U[q + D])`` (low half, high half) holds both operands of the pair at ``P[toff[kx] + ...]``; the
weight word ``(w[kx], w[kx + s])`` multiplies them in one ``vpmaddwd`` lane. Each row's taps are paired greedily
(``kx`` with ``kx + s`` when both are free; a tap left alone gets a zero high weight): 5 taps make 3 pairs. On the
"wide" output grid of pitch ``wq`` (columns ``>= Wo`` computed and discarded) every pair term of ``LANES``
consecutive outputs is one unaligned int32 vector load (AVX-512BW: 16 lanes, AVX2: 8); a register tile of
``NB = 64`` outputs (4 vectors, resp. 8) accumulates all pairs of a channel. The last tile of a row block is a full
one too, its extra outputs discarded (the planes carry ``NB`` cells of slack): one tile of independent
accumulators costs about what a single vector's chain of dependent multiply-adds does.

Padding rows. An output row's kernel rows that fall on padding rows read only ``pad``: the output rows are
grouped into blocks (:func:`row_blocks`), and a block's tiles run only the pairs of the kernel rows that fall on
input rows for at least one of its rows (all of them inside the plane; for the block's other rows they read
``pad``, which cancels). The blocks are the cheapest partition by a cost model (tiles times pairs, plus a fixed
cost per block): on PP-OCR's 5x5 depthwise layers over planes of 2-3 rows that leaves out 2-3 of the 5 kernel
rows; on 14x14 planes one block per 64 rows (measured 0.65-0.75x the time of a block per set of kernel rows on
5x5, 0.75-0.85x on 3x3). Stride-1 planes then repack only their input rows per channel (with a padding column on
each side and rows of more than 16, their pair words straight from the input rows: :mod:`kernels.rows16`).

Exactness. ``sum_t w[t] * (x_t - x_zp) = sum_t w[t] * v_t - pad * sum_t w[t]`` over a block's taps ``t``
(padding cells hold ``v = pad``; a left-out tap contributes ``w[t] * (pad - pad) = 0`` to both sides), so the
kernel forms ``A = sum_t w[t] * v_t`` in int32 and subtracts ``corr = pad * sum_t w[t]`` in int64 (folded into the
bias when the requantization is fused: the same integer ``A - corr + bias``). Every int32 value
of a lane -- a product, a pair sum, a partial sum in any order -- is a sum of a subset of the terms
``w[c, t] * v`` with ``|v| <= 2**15`` (any int16 half, junk columns included), so its magnitude is at most
``S_c * 2**15`` with ``S_c = sum_t |w[c, t]|``; ``kernels.conv_int16.plan`` admits only
``max_c S_c * 2**15 <= 2**31 - 1`` and :func:`prepare` only weights that fit int16, so no int32 operation wraps,
whatever the vector width or tile (both instruction sets give identical results).
"""
import bisect
import functools
import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit import njit, njit_noalloc
from .conv_int16 import ISA, ISAS, X_DTYPES, compile_template, plan, weights_fit, x_center  # noqa: F401
from .polyphase import phase_offsets, plane_geometry, tap_offsets
from .requantize import requantize_row
from .rows16 import move_row, pair_row

NB = 64             # outputs per main tile: 4 vectors of 16 int32 lanes (AVX-512BW), 8 of 8 (AVX2: 8 accumulators,
                    # 1 weight and a product of the 16 ymm registers)
BLOCK = 4096        # wide accumulator elements per row block (16 KiB of int32)
BLOCK_COST = 12     # the fixed cost of a row block, in tiles of one pair (measured: ~45 ns, a tile of a pair ~3.5 ns)

_I16, _I32, _I64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)


def make_tile(isa, nv):
    """Intrinsic ``tile(p, base, offs, wrow, acc, col)`` of ``kernels.conv_int16.Isa`` ``isa``: for
    j < nv*isa.lanes, ``acc[col + j] = sum_k pmaddwd(p[base + offs[k] + j], wrow[k])`` (int32 pairs, module
    docstring). The caller guarantees every index is in bounds (no checks here)."""

    @intrinsic
    def tile(typingctx, p, base, offs, wrow, acc, col):
        sig = types.void(p, base, offs, wrow, acc, col)

        def codegen(context, builder, sig, args):
            _, base, _, _, _, col = args
            lanes = isa.lanes
            vec, v16 = ir.VectorType(_I32, lanes), ir.VectorType(_I16, 2 * lanes)
            madd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [v16, v16]), isa.madd)
            ps, os_, ws, accs_ = [cgutils.create_struct_proxy(sig.args[i])(context, builder, value=args[i])
                                  for i in (0, 2, 3, 4)]
            n_k = builder.extract_value(os_.shape, 0)
            zero = ir.Constant(vec, None)
            accs = [cgutils.alloca_once_value(builder, zero) for _ in range(nv)]
            splat_mask = ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes)
            with cgutils.for_range(builder, n_k) as loop:
                k = loop.index
                src = builder.gep(ps.data, [builder.add(base, builder.load(builder.gep(os_.data, [k])))])
                wv = builder.load(builder.gep(ws.data, [k]))
                wsp = builder.insert_element(zero, wv, ir.Constant(_I32, 0))
                wsp = builder.bitcast(builder.shuffle_vector(wsp, wsp, splat_mask), v16)
                for v in range(nv):
                    xv = builder.load(builder.bitcast(builder.gep(src, [ir.Constant(_I64, v * lanes)]),
                                                      vec.as_pointer()), align=4)
                    a = accs[v]
                    builder.store(builder.add(builder.load(a), builder.call(madd, [builder.bitcast(xv, v16), wsp])),
                                  a)
            dst = builder.gep(accs_.data, [col])
            for v in range(nv):
                d = builder.bitcast(builder.gep(dst, [ir.Constant(_I64, v * lanes)]), vec.as_pointer())
                builder.store(builder.load(accs[v]), d, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile


def prepare(wf, kh, kw, sw, dw):
    """Pairing and packed weights of a depthwise convolution, or None where they do not fit int16.

    ``wf``: (Cout, kh*kw) integer-valued weights (any numeric dtype, exact). Returns ``(pa, w32, sumw, s_max, d)``:
    ``pa`` the tap index of the low member of each pair (int64), ``w32`` (Cout, pairs) int32 packed weight words,
    ``sumw`` (Cout,) int64 ``sum_t w[c, t]``, ``s_max`` the Python int ``max_c sum_t |w[c, t]|`` and ``d`` the
    cell distance ``D`` of the pairs (module docstring)."""
    wi = np.asarray(wf).astype(np.int64)
    if not np.array_equal(wi, wf) or not weights_fit(wi):
        return None
    s = sw // math.gcd(dw, sw)
    d = s * dw // sw
    lo, hi = [], []
    for ky in range(kh):
        used = [False] * kw
        for kx in range(kw):
            if used[kx]:
                continue
            used[kx] = True
            lo.append(ky * kw + kx)
            if kx + s < kw and not used[kx + s]:
                used[kx + s] = True
                hi.append(ky * kw + kx + s)
            else:
                hi.append(-1)
    lo_w = wi[:, lo]
    hi_w = np.where(np.array(hi) >= 0, wi[:, np.maximum(hi, 0)], 0)
    w32 = np.ascontiguousarray(((lo_w & 0xFFFF) | (hi_w << 16)).astype(np.int64).astype(np.uint32).view(np.int32))
    s_max = int(np.abs(wi).sum(axis=1).max()) if wi.size else 0
    return np.array(lo, np.int64), w32, wi.sum(axis=1), s_max, d


@njit
def _fill_rows(xc, u, rowoff, col_q, col_iw0, col_cnt, sw, left, center):
    """Write the centred plane ``xc - center`` (int16) into its polyphase cells of ``u``: input column
    ``col_iw0[px] + j*sw`` of row ``ih`` at ``u[rowoff[ih] + col_q[px] + j]``. (Indices are kept provably
    non-negative -- slices, ``2*j`` -- so the loops vectorize without Numba's negative-index wraparound.)"""
    h, wd = xc.shape
    for ih in range(h):
        src = xc[ih]
        if sw == 1 and wd >= 16:  # 16 cells per vector (kernels.rows16)
            move_row(xc, ih * wd, u, rowoff[ih] + col_q[0], wd, np.int64(center))
        elif sw == 1:
            q0 = rowoff[ih] + col_q[0]
            dst = u[q0:q0 + wd]
            for j in range(wd):
                dst[j] = np.int16(np.int32(src[j]) - center)
        elif sw == 2:  # even input columns land in phase left % 2 (first column 0), odd ones in the other
            qe = rowoff[ih] + col_q[left % 2]
            qo = rowoff[ih] + col_q[(left + 1) % 2]
            no = wd // 2
            de = u[qe:qe + no]
            do = u[qo:qo + no]
            for j in range(no):
                de[j] = np.int16(np.int32(src[2 * j]) - center)
                do[j] = np.int16(np.int32(src[2 * j + 1]) - center)
            if wd > 2 * no:
                u[qe + no] = np.int16(np.int32(src[2 * no]) - center)
        else:
            for px in range(sw):
                cnt = col_cnt[px]
                q0 = rowoff[ih] + col_q[px]
                s = src[col_iw0[px]:]
                dst = u[q0:q0 + cnt]
                for j in range(cnt):
                    dst[j] = np.int16(np.int32(s[j * sw]) - center)


@njit_noalloc
def _pair_rows(xc, p, rowoff, q_col, pad, center):
    """Stride 1, ``d`` 1, at least one padding column left and right: the words of ``_pack(_fill_rows(xc))`` that
    hold input cells, straight from ``xc`` -- per row (starting at ``rowoff[ih] + q_col``) ``(pad, v[0])`` before it,
    ``(v[j], v[j+1])`` (:func:`kernels.rows16.pair_row`) and ``(v[wd-1], pad)``, ``v = xc - center``; every other
    word of the plane is ``(pad, pad)`` as packed at the start."""
    h, wd = xc.shape
    padw = np.int64(pad)
    for ih in range(h):
        q = rowoff[ih] + q_col
        p[q - 1] = (padw & 0xFFFF) | ((np.int64(xc[ih, 0]) - center) << 16)
        pair_row(xc, ih * wd, p, q, wd - 1, np.int64(center))
        p[q + wd - 1] = ((np.int64(xc[ih, wd - 1]) - center) & 0xFFFF) | (padw << 16)


@njit
def _pack(u, p, d, q0, q1):
    """p[q] = (u[q] & 0xFFFF) | (u[q + d] << 16) for q0 <= q < q1 (the operands slices: no wraparound)."""
    lo = u[q0:q1]
    hi = u[q0 + d:q1 + d]
    dst = p[q0:q1]
    for q in range(q1 - q0):
        dst[q] = (np.int32(lo[q]) & 0xFFFF) | (np.int32(hi[q]) << 16)


def _row_ranges(ho, h, kh, kw, sh, top, dh, pa):
    """int64 ``(ho, 2)``: the pairs ``k0 <= k < k1`` of output row ``oh``'s kernel rows over input rows (not
    padding), ``(0, 0)`` where there is none (:func:`prepare` lists the pairs by kernel row)."""
    first = np.searchsorted(np.asarray(pa) // kw, np.arange(kh + 1))  # first pair of kernel row ky or later
    out = np.zeros((ho, 2), np.int64)
    for oh in range(ho):
        rows = [ky for ky in range(kh) if 0 <= oh * sh - top + ky * dh < h]
        if rows:
            out[oh] = first[rows[0]], first[rows[-1] + 1]
    return out


def row_blocks(ho, h, kh, kw, sh, top, dh, pa, rows_blk, wq, wo):
    """Output row blocks ``(oh0, oh1, k0, k1)``: consecutive rows (at most ``rows_blk``) and the pairs
    ``k0 <= k < k1`` their tiles compute, the union of the rows' ranges of :func:`_row_ranges` (a row's kernel
    rows inside that range but over padding read ``pad`` and cancel: module docstring). The partition is the
    cheapest by :data:`BLOCK_COST` (tiles times pairs, plus a fixed cost per block) among those whose blocks start
    where a block per set of kernel rows would (``starts``) or ``rows_blk`` rows before their end: that one is
    among them, and costs more than one block on 14x14 planes, less on PP-OCR's 2-3 row planes."""
    rng = _row_ranges(ho, h, kh, kw, sh, top, dh, pa)
    change = [0] + [oh for oh in range(1, ho) if (rng[oh] != rng[oh - 1]).any()]
    segs = [(a, b, int(rng[a, 0]), int(rng[a, 1])) for a, b in zip(change, change[1:] + [ho])]
    starts = sorted({j for a, b, _, _ in segs for j in range(a, b, rows_blk)})
    best = [(0, 0, (0, 0))] + [None] * ho  # best[i]: (cost, start of the last block, its pairs) of rows < i
    for i in range(1, ho + 1):
        lo = max(0, i - rows_blk)
        for j in {lo, *starts[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, i)]}:  # last block j..i-1
            ks = [(k0, k1) for a, b, k0, k1 in segs if a < i and j < b and k1 > k0]
            k0, k1 = (min(k[0] for k in ks), max(k[1] for k in ks)) if ks else (0, 0)
            cost = best[j][0] + -(-((i - j - 1) * wq + wo) // NB) * (k1 - k0) + BLOCK_COST
            if best[i] is None or cost < best[i][0]:
                best[i] = (cost, j, (k0, k1))
    blocks, i = [], ho
    while i:
        _, j, (k0, k1) = best[i]
        blocks.append([j, i, k0, k1])
        i = j
    return np.array(blocks[::-1], np.int64).reshape(-1, 4)


@njit
def _copy_rows(src, dst, pitch):
    """dst[i, j] = src[i*pitch + j] for the rows of dst (2-D; rows shorter than a kernels.rows16 chunk)."""
    rows, cols = dst.shape
    for i in range(rows):
        d = dst[i]
        s = src[i * pitch:i * pitch + cols]
        for j in range(cols):
            d[j] = s[j]


@njit
def _store_rows(src, dst, pitch, corr):
    """dst[i, j] = src[i*pitch + j] - corr (int64) for the rows of dst (2-D)."""
    rows, cols = dst.shape
    for i in range(rows):
        d = dst[i]
        s = src[i * pitch:i * pitch + cols]
        for j in range(cols):
            d[j] = np.int64(s[j]) - corr


def _geometry(x_shape, pa, kh, kw, sh, sw, top, left, bottom, right, dh, dw, ho):
    """Everything of :func:`_depthwise16` that depends on shapes only, worked out once per bind: ``(offs, rowoff,
    col_q, col_iw0, col_cnt, blocks, spans, wq)`` -- the read offset of each pair, where the input rows land
    (:func:`kernels.polyphase.phase_offsets`), the row blocks (:func:`row_blocks`), the plane spans repacked per
    channel and the row pitch."""
    h, wd = x_shape[2], x_shape[3]
    wq, psz = plane_geometry(h, wd, top, left, bottom, right, sh, sw)
    offs = tap_offsets(kh, kw, sh, sw, dh, dw, psz, wq)[pa]
    rowoff, col_q, col_iw0, col_cnt = phase_offsets(h, wd, top, left, sh, sw, psz, wq)
    wo = (left + wd + right - dw * (kw - 1) - 1) // sw + 1
    blocks = row_blocks(ho, h, kh, kw, sh, top, dh, pa, max(1, BLOCK // wq), wq, wo)
    # Stride 1: the tiles read input rows only (their kernel rows, by block), so only those cells (of each column
    # phase) are repacked per channel; the padding rows' pairs stay as packed at the start. Other strides repack
    # the whole plane.
    if sh == 1:
        spans = np.array([[px * psz + top * wq, px * psz + (top + h) * wq] for px in range(sw)], np.int64)
    else:
        spans = np.array([[0, sh * sw * psz]], np.int64)
    return offs, rowoff, col_q, col_iw0, col_cnt, blocks, spans, wq


def _block_corrections(w32, blocks, pad):
    """int64 ``(Cout, blocks)``: ``pad`` times the weights of the pairs each row block computes (the kernel rows
    over padding rows are left out of both the tiles and this sum: module docstring)."""
    lo = (w32 << 16) >> 16  # the pair words' halves, sign-extended: w[low tap], w[high tap]
    psum = lo.astype(np.int64) + (w32 >> 16)
    csum = np.concatenate([np.zeros((w32.shape[0], 1), np.int64), np.cumsum(psum, axis=1)], axis=1)
    return np.ascontiguousarray(pad * (csum[:, blocks[:, 3]] - csum[:, blocks[:, 2]]))


def _depthwise16(x, center, pad, w32, d, offs, rowoff, col_q, col_iw0, col_cnt, blocks, spans, wq, sw, left, direct, u,
                 p, acc, yb, out, fuse, corr, bias, mult, shift, bound, out_zp, qmin, qmax):
    """Depthwise convolution of 8/16-bit ``x`` (module docstring), geometry from :func:`_geometry`. ``u``: int16
    scratch, at least ``len(p) + d`` long; ``p`` int32 of length :func:`plane_len`; ``acc`` int32 and ``yb``
    (``out``'s dtype, with ``fuse``) of at least ``rows_blk*wq + NB`` cells. ``corr[c, b]``: channel
    ``c``'s padding correction in row block ``b`` (:func:`_block_corrections`). Without ``fuse`` ``out`` receives
    the exact accumulators; with it their requantization with ``bias``. Allocates nothing (compiled without
    reference counting: :func:`kernels._jit.njit_noalloc`). ``direct`` (stride 1, ``d`` 1, padding columns on both
    sides): each row's pair words straight from the input (:func:`_pair_rows`), not through ``u``.
    (A template: :func:`kernel_set` compiles it per instruction set, binding ``_tile`` (NB outputs) to the
    instruction set's tile.)"""
    n_img, c_in = x.shape[0], x.shape[1]
    cout = w32.shape[0]
    per = cout // c_in
    wo = out.shape[3]
    pad16 = np.int16(pad)
    for i in range(u.shape[0]):  # the padding cells keep it: _fill_rows writes the input cells only
        u[i] = pad16
    _pack(u, p, d, np.int64(0), p.shape[0])
    for n in range(n_img):
        for ci in range(c_in):
            if direct:
                _pair_rows(x[n, ci], p, rowoff, col_q[0], pad, center)
            else:
                _fill_rows(x[n, ci], u, rowoff, col_q, col_iw0, col_cnt, sw, left, center)
                for px in range(spans.shape[0]):
                    _pack(u, p, d, spans[px, 0], spans[px, 1])
            for mm in range(per):
                co = ci * per + mm
                for b in range(blocks.shape[0]):
                    oh0, oh1, k0, k1 = blocks[b, 0], blocks[b, 1], blocks[b, 2], blocks[b, 3]
                    base = oh0 * wq
                    npix = (oh1 - oh0 - 1) * wq + wo
                    cb = corr[co, b]
                    offs_b = offs[k0:k1]
                    wrow = w32[co, k0:k1]
                    col = 0
                    while col < npix:  # the last tile overruns npix: outputs past it are discarded
                        if k1 > k0:
                            _tile(p, base + col, offs_b, wrow, acc, col)
                        else:  # every kernel row over padding: A = 0
                            acc[col:col + NB] = 0
                        col += NB
                    if fuse:  # the whole wide block (one long loop), then its rows (16 bytes per vector)
                        requantize_row(acc[:col], yb[:col], bias[co] - cb, mult[co], shift[co], bound[co], out_zp,
                                       qmin, qmax)
                        dst = out[n, co, oh0:oh1]
                        if wo < 16:
                            _copy_rows(yb, dst, wq)
                        for i in range(oh1 - oh0 if wo >= 16 else 0):
                            move_row(yb, i * wq, dst, i * wo, wo, np.int64(0))
                    else:
                        _store_rows(acc, out[n, co, oh0:oh1], wq, cb)


class KernelSet:
    """The depthwise tiles of one ``kernels.conv_int16.Isa`` ``isa``: ``depthwise16`` (the template
    :func:`_depthwise16` compiled for it)."""

    def __init__(self, isa):
        self.isa = isa
        globs = dict(globals(), _tile=make_tile(isa, NB // isa.lanes))
        self.depthwise16 = compile_template(_depthwise16, isa.name, globs)


@functools.cache
def kernel_set(name: str) -> KernelSet:
    """The :class:`KernelSet` of instruction set ``name`` (a key of ``kernels.conv_int16.ISAS``), built once. Any
    set runs on a CPU with its instructions: tests run the AVX2 set on AVX-512 hosts too."""
    return KernelSet(ISAS[name])


AVAILABLE = ISA is not None
KERNELS = kernel_set(ISA) if AVAILABLE else None  # what bind() runs


def plane_len(x_shape, kh, kw, stride, pads, dilation, ho):
    """Length of the packed plane ``p``: every polyphase cell, and every read of the tiles (the last row block's
    wide range rounded up to ``NB``, at the largest tap offset)."""
    sh, sw = stride
    dh, dw = dilation
    wq, psz = plane_geometry(*x_shape[2:], *pads, sh, sw)
    ky, kx = kh - 1, kw - 1
    max_off = (sh * sw - 1) * psz + ((ky * dh) // sh) * wq + (kx * dw) // sw  # bounds every tap offset
    return max(sh * sw * psz, max_off + ho * wq + NB), wq


def bind(x_shape, x_dtype, x_zp, prep, kh, kw, stride, pads, dilation, out_shape, fuse=False, bias=None, mult=None,
         shift=None, bound=None, out_zp=0, qmin=0, qmax=0):
    """:func:`_depthwise16` of :data:`KERNELS` for inputs of ``x_shape``/``x_dtype`` and outputs of ``out_shape``,
    everything that does not depend on the values worked out once: returns ``run(x, out)`` (scratch planes fresh per
    call, so concurrent runs never share them). ``prep`` from :func:`prepare`, admitted by ``plan`` for this input
    (the caller checked it, with the same ``center`` as here: ``x_center``)."""
    pa, w32, _, _, d = prep
    kernel = KERNELS.depthwise16
    center = x_center(x_dtype)
    pad = int(x_zp) - center
    plen, wq = plane_len(x_shape, kh, kw, stride, pads, dilation, out_shape[2])
    rows_blk = max(1, BLOCK // wq)
    cells = min(rows_blk, out_shape[2]) * wq + NB
    none = np.zeros(0, np.int64)
    if fuse:
        bias = np.asarray(bias, np.int64)
    else:
        bias = mult = shift = bound = none
    n_yb = cells if fuse else 0
    sh, sw = stride
    geo = _geometry(x_shape, pa, kh, kw, sh, sw, *pads, *dilation, out_shape[2])
    direct = sh == 1 and sw == 1 and d == 1 and pads[1] >= 1 and pads[3] >= 1 and x_shape[3] > 16  # rows16 chunks
    head = (center, pad, w32, d) + geo + (sw, pads[1], direct)
    tail = (fuse, _block_corrections(w32, geo[5], pad), bias, mult, shift, bound, out_zp, qmin, qmax)

    def run(x, out):
        kernel(x, *head, np.empty(plen + d, np.int16), np.empty(plen, np.int32), np.empty(cells, np.int32),
               np.empty(n_yb, out.dtype), out, *tail)
        return out

    return run
