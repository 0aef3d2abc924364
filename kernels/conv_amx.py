"""Convolutions of 8-bit activations and int8 weights on AMX tiles (``tdpbsud``: a 16 x 16 int32 tile accumulates
the products of a 16-row int8 tile of weights and a tile of unsigned activation bytes, four per int32 word).

The input side is :mod:`kernels.conv_u8s8`'s: the same byte-quad planes (``u = x - center``, four input channels
per int32 word, polyphase layout of :mod:`kernels.conv_int16`), the same weight-sum correction, the same fused
requantization (:class:`~kernels.conv_int16.KernelSet`'s templates with :func:`_tiles` as their tile loop).
Only the products change hands: where the register tiles broadcast one packed weight word per output channel and
multiply it against a vector of pixels, a ``tdpbsud`` multiplies a weight tile A (16 output channels x ``4 kb``
bytes: ``kb`` quads of one tap) by an activation tile B (``kb`` quad rows x 16 pixels) into C (16 channels x 16
pixels), and 2 x 2 C tiles (32 channels x 32 pixels, tiles 0-3; A in tiles 4-5, B in 6-7) accumulate every
(tap, quad block) of a block of outputs before they are stored to the wide grid the requantization reads. Where
there is one (tap, quad block) only (1x1 convolutions of up to 64 channels), the channel blocks are the outer
loop and the two A tiles stay loaded while the pixel blocks pass (:func:`_tiles_one_step`).

* B's rows are the quad planes themselves: row ``q`` of the tile for tap ``t`` and pixels ``[col, col + 16)``
  is ``xp[q, off_t + col:][:16]``, so a tile is one strided load (stride = the plane length).
* The quads are cut into ``ceil(quads / 16)`` blocks of ``kb`` (at most 16, as even as possible; :func:`words`);
  the missing quads of the last block are zero planes against zero weights (:func:`pack_weights`).
* A's rows are output channels: :func:`pack_weights` lays the weights out as int8 [groups, taps, channels rounded
  up to 16, 4 x quads], the bytes of one channel and tap contiguous, quad ``q`` byte ``j`` = input channel
  ``4q + j``.

Exactness: ``tdpbsud`` adds each group of four exact products (``|u * w| <= 255 * 128``) to its int32 element
with wrap-around and no saturation; every value an element takes is a sum of a subset of the terms of one output,
so :func:`kernels.conv_u8s8.plan`'s bound (``255 * max_c sum_k |w[c, k]| <= 2**31 - 1``) keeps every one exact,
whatever the order, as for ``vpdpbusd`` (docs/ARITHMETIC.md). Checked bit for bit against the golden convolution
(``tests/test_kernels_conv_amx.py``, run wherever the CPU has AMX; ``tests/test_conv_paths_models.py``: whole models
on the tiles, the quads and the int16 pairs).

:data:`AVAILABLE` needs AMX-INT8 and AMX-TILE in :func:`kernels.cpu.features` (:func:`select`) and the
operating system's permission to use the tile registers: on Linux, asked once per process at import
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); refused or elsewhere, the byte quads of
:mod:`kernels.conv_u8s8` run. ``NPU_SIM_CPU=avx512vnni`` in the environment turns
the tiles off (:mod:`kernels.cpu`). Where the tiles beat the byte quads is :func:`wins` (measured; docs/PERFORMANCE.md).
"""
import ctypes
import platform

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import conv_u8s8, cpu
from ._jit import njit, njit_noalloc
from .conv_int16 import Isa, KernelSet
from .conv_u8s8 import quad_planes

ISA = Isa("amx", "llvm.x86.tdpbsud", 16, 2, 32, 16, per_word=4, dot=True)  # nb = 32 pixels per block
MR = 16  # output channels per C tile: packed weights round the channels up to this
KB_MAX = 16  # quads per A row (64 bytes)
MIN_CHANNELS = 16  # wins: below this the quads' register tiles are as fast (measured)
MIN_DOT, MIN_OUTPUTS = 96, 64  # wins: a long dot product or many output channels (measured)

x_center = conv_u8s8.x_center
plan = conv_u8s8.plan
weights_fit = conv_u8s8.weights_fit

_SYS_ARCH_PRCTL = 158  # x86-64 Linux
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def _os_permits() -> bool:
    """Ask Linux for the tile data state (once per process); False where that is refused or not Linux x86-64."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


def select(feats) -> bool:
    """True when a CPU with features ``feats`` (:mod:`kernels.cpu`) is given the tiles: AMX-INT8 and AMX-TILE,
    and the byte quads they share their planes with (AVX-512 VNNI)."""
    return cpu.has(feats, "amx-int8", "amx-tile") and conv_u8s8.select(feats) == "avx512vnni"


def words(cin_g: int) -> int:
    """Quad planes per group: ``ceil(cin_g / 4)`` rounded up to whole blocks of :func:`block_quads`."""
    nq = -(-cin_g // 4)
    nkb = -(-nq // KB_MAX)
    return nkb * -(-nq // nkb)


@njit
def block_quads(nq_padded: int) -> int:
    """The quads per block of ``nq_padded`` (= :func:`words`) quad planes: at most 16, equal blocks."""
    return nq_padded // -(-nq_padded // KB_MAX)


def wins(w_shape, groups: int = 1) -> bool:
    """Where the tiles run instead of the byte quads (both exact, same integers), for weights shaped ``w_shape``
    (Cout, Cin/groups, kh, kw): from :data:`MIN_CHANNELS` input channels per group, and then where a group's
    dot products are long (``Cin/groups * kh * kw >= 96``) or its output channels many (``>= 64``). Measured
    (docs/PERFORMANCE.md): 0.6-0.85x the quads' time on MobileNetV2's and EfficientNet's 1x1 and 3x3
    convolutions; on 1x1 convolutions of 24-64 input and 16-24 output channels the quads are as fast or faster
    (the tiles' fixed cost per block of 32 x 32 outputs). A rule by shape, not by model."""
    cout, cin_g, kh, kw = w_shape
    return cin_g >= MIN_CHANNELS and (cin_g * kh * kw >= MIN_DOT or cout // groups >= MIN_OUTPUTS)


def pack_weights(w, groups: int) -> np.ndarray:
    """int8 [groups, taps, Cout_g rounded up to 16, 4 * words(cin_g)]: ``[g, t, c, 4q + j] = w[g*Cout_g + c, 4q + j,
    t]``, zero for padded channels and quads."""
    cout, cin_g, kh, kw = w.shape
    cout_g = cout // groups
    mp = -(-cout_g // MR) * MR
    a = np.zeros((groups, kh * kw, mp, 4 * words(cin_g)), np.int8)
    a[:, :, :cout_g, :cin_g] = w.reshape(groups, cout_g, cin_g, kh * kw).transpose(0, 3, 1, 2)
    return a


_I8, _I16, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(64)
_P8 = _I8.as_pointer()


def _declare(builder, name, args):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), args), name)


@intrinsic
def _configure(typingctx, kb):
    """Load the tile configuration for blocks of ``kb`` quads: C tiles 0-3 16 x 16 int32, A tiles 4-5 16 rows of
    ``4 kb`` bytes, B tiles 6-7 ``kb`` rows of 64 bytes."""
    sig = types.void(kb)

    def codegen(context, builder, sig, args):
        cfg = cgutils.alloca_once(builder, ir.ArrayType(_I8, 64))
        p = builder.bitcast(cfg, _P8)
        cgutils.memset(builder, p, ir.Constant(_I64, 64), 0)
        builder.store(ir.Constant(_I8, 1), p)  # palette 1
        kb4 = builder.trunc(builder.mul(args[0], ir.Constant(args[0].type, 4)), _I16)
        kb8 = builder.trunc(args[0], _I8)
        for tile in range(8):
            colsb = builder.bitcast(builder.gep(p, [ir.Constant(_I64, 16 + 2 * tile)]), _I16.as_pointer())
            rows = builder.gep(p, [ir.Constant(_I64, 48 + tile)])
            builder.store(kb4 if tile in (4, 5) else ir.Constant(_I16, 64), colsb)
            builder.store(kb8 if tile in (6, 7) else ir.Constant(_I8, 16), rows)
        builder.call(_declare(builder, "llvm.x86.ldtilecfg", [_P8]), [p])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _release(typingctx):
    sig = types.void()

    def codegen(context, builder, sig, args):
        builder.call(_declare(builder, "llvm.x86.tilerelease", []), [])
        return context.get_dummy_value()

    return sig, codegen


def _make_memory_op(name, tile):
    """Intrinsic ``op(arr, byte_offset, byte_stride)``: tile load or store ``name`` of tile register ``tile``."""

    @intrinsic
    def op(typingctx, arr, off, stride):
        sig = types.void(arr, off, stride)

        def codegen(context, builder, sig, args):
            a = cgutils.create_struct_proxy(sig.args[0])(context, builder, value=args[0])
            p = builder.gep(builder.bitcast(a.data, _P8), [args[1]])
            builder.call(_declare(builder, name, [_I8, _P8, _I64]), [ir.Constant(_I8, tile), p, args[2]])
            return context.get_dummy_value()

        return sig, codegen

    return op


def _make_op(name, *tiles):
    """Intrinsic ``op()`` of tile registers ``tiles`` (immediates): ``tilezero`` or ``tdpbsud``."""

    @intrinsic
    def op(typingctx):
        sig = types.void()

        def codegen(context, builder, sig, args):
            builder.call(_declare(builder, name, [_I8] * len(tiles)), [ir.Constant(_I8, t) for t in tiles])
            return context.get_dummy_value()

        return sig, codegen

    return op


_load_a0, _load_a1 = _make_memory_op("llvm.x86.tileloadd64", 4), _make_memory_op("llvm.x86.tileloadd64", 5)
_load_b0, _load_b1 = _make_memory_op("llvm.x86.tileloadd64", 6), _make_memory_op("llvm.x86.tileloadd64", 7)
_store_c0, _store_c1 = _make_memory_op("llvm.x86.tilestored64", 0), _make_memory_op("llvm.x86.tilestored64", 1)
_store_c2, _store_c3 = _make_memory_op("llvm.x86.tilestored64", 2), _make_memory_op("llvm.x86.tilestored64", 3)
_zero_c0, _zero_c1 = _make_op("llvm.x86.tilezero", 0), _make_op("llvm.x86.tilezero", 1)
_zero_c2, _zero_c3 = _make_op("llvm.x86.tilezero", 2), _make_op("llvm.x86.tilezero", 3)
_dp_00, _dp_01 = _make_op("llvm.x86.tdpbsud", 0, 4, 6), _make_op("llvm.x86.tdpbsud", 1, 4, 7)
_dp_10, _dp_11 = _make_op("llvm.x86.tdpbsud", 2, 5, 6), _make_op("llvm.x86.tdpbsud", 3, 5, 7)


@njit_noalloc
def _tiles(xp, offs, wa, npix, wide):
    """``wide[m, j] = sum over (tap t, quad q, byte b) of wa[t, m, 4q + b] * byte b of xp[offs[q*taps + t] + j]``
    for j < npix rounded up to 32 and every (padded) output channel m; ``xp`` flat (the quad planes), with at
    least 31 readable cells past the last valid read, ``offs`` the (quad, tap) read offsets of
    :class:`kernels.conv_int16.Layout`, ``wa`` one group of :func:`pack_weights`."""
    taps, mp, kbytes = wa.shape
    nq = kbytes // 4
    kb = block_quads(nq)
    plane4 = (offs[taps] - offs[0]) * 4 if nq > 1 else np.int64(64)  # bytes between quad planes
    astride = np.int64(kbytes)
    wstride = np.int64(wide.strides[0])
    flat_a = wa.reshape(-1)
    _configure(np.int64(kb))
    if taps == 1 and kb == nq:  # one (tap, quad block): each weight tile loaded once, kept over the pixels
        _tiles_one_step(xp, offs[0] * 4, flat_a, mp, kbytes, plane4, npix, wide, wstride)
        _release()
        return
    for col in range(0, npix, 32):
        for m0 in range(0, mp, 32):
            two = m0 + 16 < mp
            _zero_c0()
            _zero_c1()
            _zero_c2()
            _zero_c3()
            for t in range(taps):
                for q0 in range(0, nq, kb):
                    xoff = (offs[q0 * taps + t] + col) * 4
                    _load_b0(xp, xoff, plane4)
                    _load_b1(xp, xoff + 64, plane4)
                    aoff = np.int64((t * mp + m0) * kbytes + 4 * q0)
                    _load_a0(flat_a, aoff, astride)
                    _dp_00()
                    _dp_01()
                    if two:
                        _load_a1(flat_a, aoff + 16 * kbytes, astride)
                        _dp_10()
                        _dp_11()
            woff = m0 * wstride + col * 4
            _store_c0(wide, woff, wstride)
            _store_c1(wide, woff + 64, wstride)
            if two:
                _store_c2(wide, woff + 16 * wstride, wstride)
                _store_c3(wide, woff + 16 * wstride + 64, wstride)
    _release()


@njit_noalloc
def _tiles_one_step(xp, x0, flat_a, mp, kbytes, plane4, npix, wide, wstride):
    """:func:`_tiles` of one tap and one block of quads (1x1 convolutions of up to 64 channels per group), channel
    blocks outside: the weight tiles stay in their registers while the pixel blocks pass."""
    for m0 in range(0, mp, 32):
        two = m0 + 16 < mp
        aoff = np.int64(m0 * kbytes)
        _load_a0(flat_a, aoff, np.int64(kbytes))
        if two:
            _load_a1(flat_a, aoff + 16 * kbytes, np.int64(kbytes))
        for col in range(0, npix, 32):
            xoff = x0 + col * 4
            _zero_c0()
            _zero_c1()
            _load_b0(xp, xoff, plane4)
            _load_b1(xp, xoff + 64, plane4)
            _dp_00()
            _dp_01()
            woff = m0 * wstride + col * 4
            _store_c0(wide, woff, wstride)
            _store_c1(wide, woff + 64, wstride)
            if two:
                _zero_c2()
                _zero_c3()
                _dp_10()
                _dp_11()
                _store_c2(wide, woff + 16 * wstride, wstride)
                _store_c3(wide, woff + 16 * wstride + 64, wstride)


@njit_noalloc
def _planes(x, n, c0, center, pad, top, left, sh, sw, wq, psz, xp):
    """:func:`kernels.conv_u8s8`'s quad planes for the real quads of channels ``c0 + [0, 4 * rows)`` (those below
    the input's channel count), zero planes for the rest (the padding quads of :func:`words`)."""
    real = min(xp.shape[0], (x.shape[1] - c0 + 3) // 4)
    quad_planes(x, n, c0, center, pad, top, left, sh, sw, wq, psz, xp[:real])
    for q in range(real, xp.shape[0]):
        row = xp[q]
        for j in range(row.size):
            row[j] = 0


AVAILABLE = select(cpu.features()) and _os_permits()
KERNELS = KernelSet(ISA, _planes, tiles=_tiles, words=words) if AVAILABLE else None
