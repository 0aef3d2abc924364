"""Exact integer matrix multiplication, fast: float BLAS on provably exact chunks.

Why float BLAS is exact here
----------------------------
Let ``bound = max|a| * max|b|`` (Python ints, from the data) and split the reduction dimension K into chunks
of at most ``kc`` terms with ``kc * bound <= 2**p - 1`` (p = 24 for float32, 53 for float64).

1. Every input value is an integer with magnitude <= bound <= 2**p - 1 (when both operands are non-zero,
   max|a| <= bound because max|b| >= 1), so converting it to float is exact.
2. Every product a[i,k] * b[k,j] is an integer of magnitude <= bound < 2**p: exactly representable, so the
   multiplication is exact.
3. Whatever order and tree BLAS uses to add the terms of one chunk (blocking, vector lanes, fused
   multiply-add), every intermediate value is the sum of a subset of that chunk's products, hence an integer
   of magnitude <= kc * bound <= 2**p - 1, which is representable; an IEEE operation whose exact result is
   representable returns it exactly (FMA included). So each chunk result is the exact integer.
4. Each chunk result is converted to int64 exactly and the chunks are summed in int64.

The argument needs only that BLAS computes C = A @ B by the classical algorithm (each C entry a sum of
products of single entries, with alpha = 1, beta = 0) -- true of OpenBLAS/MKL/BLIS/Accelerate and of
numpy's own fallback loops; a Strassen-like scheme would break it. ``tests/test_kernels_gemm.py`` checks
the extreme case (all products at the bound, every chunk sum at the limit) against Python integers.

If not even one worthwhile float64 chunk fits (``bound`` close to 2**53; never for quantized tensors), an
int64 numba loop is used; it is exact because ``int_matmul`` rejects operands with ``K * bound >= 2**63``.
"""
import numpy as np

from ._jit import njit_noalloc
from .checks import check_int_array

F32_LIMIT = (1 << 24) - 1
F64_LIMIT = (1 << 53) - 1
INT64_MAX = (1 << 63) - 1
MIN_CHUNK = 32  # a float chunk must hold at least min(K, MIN_CHUNK) terms to be worth a BLAS call


def abs_max(arr) -> int:
    """max |arr| as a Python int (0 for an empty array)."""
    if arr.size == 0:
        return 0
    return max(abs(int(arr.max())), abs(int(arr.min())))


def plan(bound: int, k: int) -> tuple[str, int]:
    """Choose the exact method for a K-term reduction whose products are bounded by ``bound``.

    Returns ``("zero", 0)``, ``("f32", kc)``, ``("f64", kc)`` or ``("loops", 0)`` where ``kc`` is the chunk
    length (number of K terms per BLAS call), ``kc * bound <= 2**p - 1``.
    """
    if bound == 0 or k == 0:
        return "zero", 0
    worth = max(1, min(k, MIN_CHUNK))
    kc = F32_LIMIT // bound
    if kc >= worth:
        return "f32", min(kc, k)
    kc = F64_LIMIT // bound
    if kc >= worth:
        return "f64", min(kc, k)
    return "loops", 0


def float_dtype(method: str):
    """numpy float dtype of a ``plan`` method (``f32``/``f64``)."""
    return np.float32 if method == "f32" else np.float64


def matmul_float_chunked(af, bf, kc: int, out=None) -> np.ndarray:
    """``af @ bf`` in chunks of ``kc`` along K, each chunk result converted to int64 and summed.

    ``af`` [M, K] and ``bf`` [K, N] are float arrays holding integers that satisfy the exactness
    conditions of the module docstring for this ``kc`` (the caller chose it with :func:`plan`).
    ``out`` (int64 [M, N], may be a view) receives the result if given.
    """
    m, k = af.shape
    n = bf.shape[1]
    if out is None:
        out = np.empty((m, n), dtype=np.int64)
    if k == 0:
        out[...] = 0
        return out
    for k0 in range(0, k, kc):
        k1 = min(k, k0 + kc)
        if k0 == 0 and k1 == k:
            part = af @ bf
        else:
            part = af[:, k0:k1] @ bf[k0:k1]
        if k0 == 0:
            out[...] = part  # exact float -> int64 conversion of integer values
        else:
            out += part.astype(np.int64)
    return out


@njit_noalloc
def matmul_loops(a, b, out):
    """out[i, j] = sum_k int64(a[i, k]) * int64(b[k, j]), i-k-j loop order, int64 wrap-around arithmetic."""
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            out[i, j] = np.int64(0)
        for kk in range(k):
            aik = np.int64(a[i, kk])
            if aik == 0:
                continue
            for j in range(n):
                out[i, j] += aik * np.int64(b[kk, j])


@njit_noalloc
def _matmul_small(a, b, out):
    """out[i, j] = sum_k a[i, k] * b[k, j] accumulated in int32, i-k-j order (a few rows against narrow constant
    weights: a GEMV over 1-2 byte weights instead of float copies four or eight times larger). The caller proved
    ``K * max|a| * max|b| < 2**31``, so every product and partial sum is exact."""
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        row = out[i]
        for j in range(n):
            row[j] = 0
        for kk in range(k):
            aik = np.int32(a[i, kk])
            if aik == 0:
                continue
            brow = b[kk]
            for j in range(n):
                row[j] += aik * np.int32(brow[j])


SMALL_M = 4  # int_matmul with a constant b and at most this many rows: the int32 loop of _matmul_small
INT32_MAX = (1 << 31) - 1


def _check_operands(a, b):
    check_int_array(a, "a", ndim=2)
    check_int_array(b, "b", ndim=2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}")


def int_matmul_loops(a, b) -> np.ndarray:
    """Integer matrix product by a plain numba int64 loop (reference/fallback path of :func:`int_matmul`).

    Parameters
    ----------
    a : integer ndarray [M, K]
    b : integer ndarray [K, N]

    Returns
    -------
    int64 ndarray [M, N]
        ``out[i, j] = sum_k a[i, k] * b[k, j]`` accumulated in int64 (exact while every partial sum fits).
    """
    _check_operands(a, b)
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.int64)
    matmul_loops(a, b, out)
    return out


def int_matmul(a, b, compact=False, b_cache=None) -> np.ndarray:
    """Exact integer matrix product ``a @ b`` as int64, using float BLAS on exact chunks.

    Parameters
    ----------
    a : integer ndarray [M, K], any integer dtype, C-contiguous
    b : integer ndarray [K, N], any integer dtype, C-contiguous

    compact : bool
        Allow a float32/float64 result holding the exact integers (when K fits one exact chunk), or an int32
        one (the small-M path below).
    b_cache : dict, optional
        Owned by the caller for a constant ``b`` (weights): keeps its range and float/narrow copies between
        calls. With it, at most ``SMALL_M`` rows and ``K * max|a| * max|b| < 2**31`` (|b| <= 32767), the product
        is an int32-accumulating loop over int8/int16 weights (exact by that bound).

    Returns
    -------
    int64 ndarray [M, N]
        ``out[i, j] = sum_k a[i, k] * b[k, j]`` exactly. ValueError if ``K * max|a| * max|b|`` exceeds
        int64 (then not every partial sum is guaranteed to fit).

    Notes
    -----
    ``bound = max|a| * max|b|``; bound == 0 gives zeros. Otherwise K is split into chunks of
    ``kc = (2**24 - 1) // bound`` terms computed by float32 GEMM when ``kc >= min(K, 32)``, else
    ``kc = (2**53 - 1) // bound`` with float64 under the same condition, else an int64 loop. See the module
    docstring for the proof that every float chunk is exact. ``a`` and ``b`` are converted to float once.
    """
    _check_operands(a, b)
    m, k = a.shape
    n = b.shape[1]
    if b_cache is not None:
        if "bmax" not in b_cache:  # a constant b: its range once, not a pass over the weights per call
            b_cache["bmax"] = abs_max(b)
        bmax = b_cache["bmax"]
    else:
        bmax = abs_max(b)
    bound = abs_max(a) * bmax
    if bound * k > INT64_MAX:
        raise ValueError("int_matmul: K * max|a| * max|b| exceeds int64, the result might not fit")
    if b_cache is not None and m <= SMALL_M and bound * k <= INT32_MAX and bmax <= 32767:
        if "narrow" not in b_cache:  # constant weights as int8/int16 (exact: |b| <= bmax)
            b_cache["narrow"] = np.ascontiguousarray(b.astype(np.int8 if bmax <= 127 else np.int16))
        acc = np.empty((m, n), dtype=np.int32)
        _matmul_small(a, b_cache["narrow"], acc)
        return acc if compact else acc.astype(np.int64)
    method, kc = plan(bound, k)
    if method == "zero":
        return np.zeros((m, n), dtype=np.int64)
    if method == "loops":
        out = np.empty((m, n), dtype=np.int64)
        matmul_loops(a, b, out)
        return out
    dt = float_dtype(method)
    if b_cache is not None:
        if method not in b_cache:
            b_cache[method] = b.astype(dt)
        bf = b_cache[method]
    else:
        bf = b.astype(dt)
    if compact and kc >= k:  # one exact chunk: the float result holds the exact integers
        return a.astype(dt) @ bf
    return matmul_float_chunked(a.astype(dt), bf, kc)
