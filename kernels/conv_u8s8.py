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

:data:`AVAILABLE` needs AVX-512 VNNI and AVX-512BW on the host (read from LLVM's host CPU features, as
:mod:`kernels.conv_int16` does) and Numba compiling for the host; elsewhere the int16 pairs run. Where the quads
beat the pairs is :func:`wins` (measured; docs/PERFORMANCE.md).
"""
import numba
import numpy as np
from llvmlite import binding as llvm_binding

from ._jit import njit
from .conv_int16 import INT32_LIMIT, Isa, KernelSet

ISA = Isa("avx512vnni", "llvm.x86.avx512.vpdpbusd.512", 16, 2, 12, 4, per_word=4, dot=True)
U_MAX = 255  # the largest activation byte u
X_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
MIN_TAPS = 8  # wins: fewer input taps per output than this stay on the int16 pairs (measured)


def _host_has_vnni() -> bool:
    if numba.config.CPU_NAME not in (None, "host") or numba.config.CPU_FEATURES:
        return False
    features = llvm_binding.get_host_cpu_features()
    return bool(features.get("avx512vnni", False) and features.get("avx512bw", False))


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


def wins(cin_g: int, kh: int, kw: int) -> bool:
    """Where the byte quads are faster than the int16 pairs (both exact, same integers): convolutions with at
    least :data:`MIN_TAPS` input taps per output (``cin_g * kh * kw``). Below that the word per pixel is mostly
    padding channels and the pairs' planes are as cheap. A rule by shape, not by model."""
    return cin_g * kh * kw >= MIN_TAPS


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
def _word(x, n, ca, nch, ih, iw, center):
    """The packed word of pixel ``(ih, iw)`` of channels ``ca + [0, nch)``: byte j = ``x[n, ca + j] - center``."""
    v = np.int64(0)
    for j in range(nch):
        v |= ((np.int64(x[n, ca + j, ih, iw]) - center) & 0xFF) << (8 * j)
    return np.int32(np.uint32(v))


@njit
def _quad_planes(x, n, c0, center, pad, top, left, sh, sw, wq, psz, xp):
    """Fill ``xp`` (quads, plane length) with the packed byte-quad planes of channels ``c0 + [0, 4*quads)`` of
    image ``n`` in the polyphase layout of :mod:`kernels.conv_int16` (every cell first the packed padding byte,
    then the input bytes ``x - center``). Channels past the input's are 0."""
    cin = x.shape[1]
    h = x.shape[2]
    wd = x.shape[3]
    n_quads, plane = xp.shape
    for q in range(n_quads):
        ca = c0 + 4 * q
        nch = min(4, cin - ca)
        pv = np.int64(0)
        for j in range(nch):
            pv |= (np.int64(pad) & 0xFF) << (8 * j)
        dst = xp[q]
        pw = np.int32(np.uint32(pv))
        for j in range(plane):
            dst[j] = pw
        for ih in range(h):
            r = top + ih
            row0 = ((r % sh) * sw) * psz + (r // sh) * wq
            if sw == 1 and nch == 4:
                d = dst[row0 + left:row0 + left + wd]
                s0, s1, s2, s3 = x[n, ca, ih], x[n, ca + 1, ih], x[n, ca + 2, ih], x[n, ca + 3, ih]
                for j in range(wd):
                    d[j] = (((np.int32(s0[j]) - center) & 0xFF) | (((np.int32(s1[j]) - center) & 0xFF) << 8)
                            | (((np.int32(s2[j]) - center) & 0xFF) << 16) | ((np.int32(s3[j]) - center) << 24))
                continue
            for iw in range(wd):
                c = left + iw
                dst[row0 + (c % sw) * psz + c // sw] = _word(x, n, ca, nch, ih, iw, center)


AVAILABLE = _host_has_vnni()
KERNELS = KernelSet(ISA, _quad_planes) if AVAILABLE else None
