"""Convolutions of 8-bit activations and int8 weights as exact int32 dot products of byte quads (AVX-512 VNNI
``vpdpbusd``: each int32 lane adds four uint8 x int8 products to its accumulator, twice the products per
instruction of the int16 pairs of :mod:`kernels.conv_int16`).

The same register tiles, plane layout and fused requantization as :mod:`kernels.conv_int16` (its
:class:`~kernels.conv_int16.KernelSet`, :class:`~kernels.conv_int16.Layout`, ``blocks`` and ``bind_requantized``
run these tiles when given :data:`KERNELS`), with four input channels per int32 word instead of two:

* activations enter as ``u = x - center`` with ``center`` = 0 for uint8 and -128 for int8 (:func:`x_center`:
  ``u = x + 128``), so every ``u`` is an unsigned byte; padding cells hold ``pad = x_zp - center``, which must be a
  byte too (:func:`plan`). The byte ``4q + j`` of a pixel's word is channel ``4q + j`` (missing channels of the
  last quad are 0, against zero weights);
* weights (after their zero point is removed) must be int8 values (:func:`weights_fit`), packed four to a word
  the same way (:func:`pack_weights`);
* the kernel sums ``u * w``; ``sum((x - x_zp) * w) = sum(u * w) + (center - x_zp) * sum(w)``, the second term
  the per-output-channel weight-sum correction the callers add (the offset, or the fused bias), exactly as for
  the int16 pairs.

Exactness. ``vpdpbusd`` does not saturate: it adds the four exact products (each ``|u*w| <= 255*128``) to the
int32 lane with wrap-around. Every int32 value the tile forms is a sum of a subset of the terms ``u[k]*w[c, k]``
of one output ``c``, so its magnitude is at most ``255 * S_c`` (``S_c = sum_k |w[c, k]|``). :func:`plan` admits a
convolution only when ``255 * max_c S_c <= 2**31 - 1``; then nothing wraps, whatever the order. With int8
weights ``S_c <= 128 K``, so every convolution of ``K <= 65,793`` taps (``K * 255 * 128 <= 2**31 - 1``) is
admitted, and larger ones are when their weights are small enough; the rest run on the int16 pairs or the float
paths. The junk columns of the wide grid read padding or in-range slack bytes: bounded the same way.

:data:`AVAILABLE` needs AVX-512 VNNI and AVX-512BW (16 lanes, :data:`ISAS` ``avx512vnni``) or AVX-VNNI and
AVX2 (8 lanes, ``avxvnni``: the VEX-encoded instruction of CPUs without AVX-512) in :func:`kernels.cpu.features`
(:func:`select`); elsewhere the int16 pairs run. Where the quads beat the pairs is :func:`wins` (measured; docs/PERFORMANCE.md). The compiled tiles are
:mod:`kernels.conv_int16`'s templates; :mod:`kernels._jit` keys the on-disk cache by every kernel source, so an
edit here recompiles them.
"""
import functools

import numpy as np

from . import cpu
from ._jit import njit
from .conv_int16 import INT32_LIMIT, Isa, KernelSet

ISAS = {  # the widest first
    "avx512vnni": Isa("avx512vnni", "llvm.x86.avx512.vpdpbusd.512", 16, 2, 12, 4, per_word=4, dot=True),
    # AVX-VNNI (VEX-encoded vpdpbusd on 256-bit vectors: CPUs with AVX2 and no AVX-512, e.g. Alder Lake), the
    # register tile of the AVX2 pairs
    "avxvnni": Isa("avxvnni", "llvm.x86.avx512.vpdpbusd.256", 8, 2, 6, 2, per_word=4, dot=True),
}
# The features (kernels.cpu) a CPU needs to be given each set; and the ones on which it runs: the 256-bit intrinsic
# compiles to the VEX instruction of AVX-VNNI, or to the EVEX one of AVX-512 VNNI with AVX-512VL where the compile
# target has no AVX-VNNI (Zen 4) -- never the VEX code on a CPU without AVX-VNNI.
NEEDS = {"avx512vnni": (("avx512vnni", "avx512bw"),), "avxvnni": (("avxvnni", "avx2"),)}
RUNS = {"avx512vnni": NEEDS["avx512vnni"], "avxvnni": (("avxvnni", "avx2"), ("avx512vnni", "avx512vl"))}
U_MAX = 255  # the largest activation byte u
X_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
MIN_CHANNELS = 3  # wins: from 3 input channels per group a pixel takes fewer quad words than pair words


def select(feats) -> str | None:
    """The widest of :data:`ISAS` a CPU with features ``feats`` (:mod:`kernels.cpu`) is given, or None."""
    return next((name for name in ISAS if any(cpu.has(feats, *need) for need in NEEDS[name])), None)


def runs(name: str, feats) -> bool:
    """True when the tiles of set ``name`` run on a CPU with features ``feats`` (:data:`RUNS`)."""
    return any(cpu.has(feats, *need) for need in RUNS[name])


@functools.cache
def kernel_set(name: str) -> KernelSet:
    """The byte-quad tiles of instruction set ``name`` (a key of :data:`ISAS`), built once. Any set runs on a CPU
    with its instructions: tests run the AVX-VNNI set on AVX-512 VNNI hosts too."""
    return KernelSet(ISAS[name], quad_planes)


def x_center(dtype) -> int:
    """The value subtracted from activations of ``dtype`` to make them unsigned bytes: -128 for int8, 0 for uint8."""
    return -128 if np.dtype(dtype) == np.dtype(np.int8) else 0


def plan(dtype, pad, wabs_rowsum_max: int) -> bool:
    """True when the byte-quad kernel computes the convolution exactly (module docstring): 8-bit activations, the
    padding byte ``pad`` (``x_zp - x_center``; None without padding) in [0, 255], and
    ``255 * max_c sum_k |w[c, k]| <= 2**31 - 1``."""
    if not AVAILABLE or np.dtype(dtype) not in X_DTYPES:
        return False
    if pad is not None and not 0 <= pad <= U_MAX:
        return False
    return U_MAX * wabs_rowsum_max <= INT32_LIMIT


def weights_fit(w) -> bool:
    """True when every weight is an int8 value (what :func:`pack_weights` packs)."""
    return w.size == 0 or (int(w.min()) >= -128 and int(w.max()) <= 127)


def wins(w_shape, groups: int = 1) -> bool:
    """Where the byte quads run instead of the int16 pairs (both exact, same integers), for weights shaped
    ``w_shape`` (Cout, Cin/groups, kh, kw): from :data:`MIN_CHANNELS` input channels per group, where a pixel's
    channels take fewer quad words than pair words (``ceil(cin_g / 4) < ceil(cin_g / 2)``). Measured on an
    AVX-512 VNNI machine: equal time at 2-4 channels, 12-50% faster on MobileNetV2's convolutions (16-960
    channels), and on 3-channel stems; with 1-2 channels the pairs are as fast or faster (the whole-model gain:
    docs/PERFORMANCE.md). A rule by shape, not by model."""
    return w_shape[1] >= MIN_CHANNELS


def pack_weights(w, groups: int) -> np.ndarray:
    """int32 [groups, quads*taps, Cout_g rounded up to PACK_ROWS]: byte ``j`` (little-endian) of row
    ``q*taps + t``, column ``c`` is ``w[c, 4q + j, t]``; zero for padded channels and missing inputs."""
    cout, cin_g, kh, kw = w.shape
    cout_g = cout // groups
    n_quads = -(-cin_g // 4)
    mp = -(-cout_g // 4) * 4
    w8 = np.zeros((groups, mp, 4 * n_quads, kh * kw), np.int8)
    w8[:, :cout_g, :cin_g] = w.reshape(groups, cout_g, cin_g, kh * kw)
    quads = w8.reshape(groups, mp, n_quads, 4, kh * kw).transpose(0, 2, 4, 1, 3)  # (g, quad, tap, c, byte)
    return np.ascontiguousarray(quads).view(np.int32).reshape(groups, n_quads * kh * kw, mp)


@njit
def quad_planes(x, n, c0, center, pad, top, left, sh, sw, wq, psz, xp):
    """Fill ``xp`` (quads, plane length) with the packed byte-quad planes of channels ``c0 + [0, 4*quads)`` of
    image ``n`` in the polyphase layout of :mod:`kernels.conv_int16` (every cell first the packed padding byte,
    then the input bytes ``x - center``; channels past the input's are 0). Each column phase of an input row is
    one unit-stride run of words; without padding at the top and left, stride 1 and rows of pitch ``wq`` equal to
    the input's (most 1x1 convolutions), each plane is one run (:func:`_flat_planes`)."""
    cin = x.shape[1]
    h = x.shape[2]
    wd = x.shape[3]
    n_quads, plane = xp.shape
    c32 = np.int32(center)
    if top == 0 and left == 0 and sh == 1 and sw == 1 and wq == wd:
        _flat_planes(x[n].reshape(cin, h * wd), c0, c32, pad, xp)
        return
    for q in range(n_quads):
        ca = c0 + 4 * q
        nch, mask, pw = _quad_words(cin, ca, pad)
        dst = xp[q]
        for j in range(plane):
            dst[j] = pw
        for ih in range(h):
            r = top + ih
            row0 = ((r % sh) * sw) * psz + (r // sh) * wq
            s0 = x[n, ca, ih]
            s1 = x[n, ca + min(1, nch - 1), ih]  # a missing channel repeats the last one, masked off below
            s2 = x[n, ca + min(2, nch - 1), ih]
            s3 = x[n, ca + min(3, nch - 1), ih]
            for px in range(sw):
                iw0 = (px - left) % sw  # the first input column landing in column phase px
                if iw0 >= wd:
                    continue
                cnt = (wd - 1 - iw0) // sw + 1
                d = dst[row0 + px * psz + (left + iw0) // sw:]
                t0, t1, t2, t3 = s0[iw0:], s1[iw0:], s2[iw0:], s3[iw0:]
                if sw == 1:  # literal steps: LLVM vectorizes the runs
                    for j in range(cnt):
                        d[j] = _word(t0[j], t1[j], t2[j], t3[j], c32, mask)
                elif sw == 2:
                    for j in range(cnt):
                        d[j] = _word(t0[2 * j], t1[2 * j], t2[2 * j], t3[2 * j], c32, mask)
                else:
                    for j in range(cnt):
                        k = j * sw
                        d[j] = _word(t0[k], t1[k], t2[k], t3[k], c32, mask)


@njit
def _flat_planes(xc, c0, c32, pad, xp):
    """:func:`quad_planes` where the padded plane is the input plane followed by padding cells: ``xc`` the
    image's channels as rows (C, H*W); each quad's words in one loop, then the packed padding byte."""
    cin, npix = xc.shape
    n_quads, plane = xp.shape
    for q in range(n_quads):
        ca = c0 + 4 * q
        nch, mask, pw = _quad_words(cin, ca, pad)
        dst = xp[q]
        t0, t1 = xc[ca], xc[ca + min(1, nch - 1)]
        t2, t3 = xc[ca + min(2, nch - 1)], xc[ca + min(3, nch - 1)]
        for j in range(npix):
            dst[j] = _word(t0[j], t1[j], t2[j], t3[j], c32, mask)
        for j in range(npix, plane):
            dst[j] = pw


@njit
def _quad_words(cin, ca, pad):
    """For the quad of channels from ``ca`` of ``cin``: the number of real channels, the mask of their bytes and the
    packed padding word (``pad``'s byte in each real channel's byte)."""
    nch = min(4, cin - ca)
    mask = np.int32(np.uint32((np.int64(1) << (8 * nch)) - 1))
    pb = np.int32(pad) & 0xFF
    return nch, mask, (pb | (pb << 8) | (pb << 16) | (pb << 24)) & mask


@njit
def _word(a, b, c, d, c32, mask):
    """The little-endian word of the bytes ``a - c32, b - c32, c - c32, d - c32``, masked."""
    return (((np.int32(a) - c32) & 0xFF) | (((np.int32(b) - c32) & 0xFF) << 8) | (((np.int32(c) - c32) & 0xFF) << 16)
            | ((np.int32(d) - c32) << 24)) & mask


ISA = select(cpu.features())
AVAILABLE = ISA is not None
KERNELS = kernel_set(ISA) if AVAILABLE else None
