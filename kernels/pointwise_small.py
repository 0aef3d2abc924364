"""Pointwise (1x1) convolution -- or a fully connected layer -- over a few pixels, requantization fused: per pixel,
the exact int64 dot product of every output channel's weights with the input column, requantized on the spot.

For input ``x`` (N, Cin, P) and weights ``w`` (Cout, Cin)::

    acc[n, co, p] = sum_ci w[co, ci] * (x[n, ci, p] - x_zp)                                  (int64, exact)
    v             = clamp(acc[n, co, p] + bias[co], -L[co], L[co])
    out[n, co, p] = clamp(((v * mult[co] + 2**(shift[co]-1)) >> shift[co]) + out_zp, qmin, qmax)

the branch-free requantization of ``kernels.requantize.requantize_row`` (``L`` from ``saturation_bounds``: the
clamp of ``v`` never changes the output and keeps ``v * mult`` inside int64). Meant for the planes too
small for the GEMM kernels (squeeze-excitation convolutions on a 1x1 plane, a classifier's Gemm): there the
call overhead of a GEMM and a separate requantization dominates. :func:`prepare` validates everything once and
proves the fusion exact; ``tests/test_kernels_pointwise_small.py`` checks it bit for bit against
``tests/naive.py`` (``int_matmul`` + ``requantize``).
"""
import numpy as np

from ._jit import njit_noalloc
from .checks import check_int_array
from .requantize import ACC_LIMIT, saturation_bounds

X_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)
MAX_PIXELS = 4  # planes up to this many pixels (a GEMM's M rows) take this kernel: beyond, the GEMM paths win


@njit_noalloc
def _pointwise_small(x, x_zp, wt, bias, mult, shift, rnd, bound, out_zp, qmin, qmax, acc, out):
    """out[n, :, p] from the column x[n, :, p] (module docstring), ``wt`` the weights transposed (Cin, Cout), in
    the narrowest integer type that holds them (the weight matrix is what this kernel streams from memory):
    the accumulators of all output channels grow together (vectorized over Cout), then each is requantized
    exactly as ``requantize_row`` does (``rnd[c] = 2**(shift[c]-1)``, 0 for shift 0). ``acc`` (Cout,) is int32
    where :func:`prepare` proved every partial sum fits, else int64; each step is written as the truncation of
    the exact int64 value to ``acc``'s type (no change where it fits)."""
    n_img, cin, npix = x.shape
    cout = wt.shape[1]
    for n in range(n_img):
        for p in range(npix):
            for co in range(cout):
                acc[co] = 0
            for ci in range(cin):
                xv = np.int64(x[n, ci, p]) - x_zp
                if xv == 0:
                    continue
                wr = wt[ci]
                for co in range(cout):
                    acc[co] = acc[co] + xv * wr[co]
            for co in range(cout):
                v = min(max(np.int64(acc[co]) + bias[co], -bound[co]), bound[co])
                y = ((v * mult[co] + rnd[co]) >> shift[co]) + out_zp
                out[n, co, p] = min(max(y, qmin), qmax)


def prepare(x_dtype, x_zp, w, bias, mult, shift, out_zp, qmin, qmax, acc_bits):
    """The constant arguments of :func:`run` for inputs of ``x_dtype``, or None where the fused requantization is
    not proven the same as accumulate-then-:func:`kernels.requantize.requantize`: some channel has no saturation
    bound, or ``max|x - x_zp| * max_c sum|w[c]| + max|bias|`` could reach the board's ``acc_bits`` (then an
    overflow would have to be handled and counted).

    ``w`` (Cout, Cin) integers; ``bias``, ``mult``, ``shift`` (Cout,) integers as validated by the caller's
    requantization (|mult| < 2**31, 0 <= shift <= 62); ``acc_bits`` in [2, 64]."""
    x_dtype = np.dtype(x_dtype)
    if x_dtype not in [np.dtype(d) for d in X_DTYPES]:
        return None
    w64 = np.asarray(w).astype(np.int64)
    info = np.iinfo(x_dtype)
    x_dev = max(abs(int(info.min) - int(x_zp)), abs(int(info.max) - int(x_zp)))
    wsum_abs = np.abs(w64).sum(axis=1)  # per output channel
    wabs = int(wsum_abs.max(initial=0))
    bias = np.ascontiguousarray(bias, np.int64)
    reach = x_dev * wsum_abs + np.abs(bias)  # per channel: |acc + bias| at most
    if reach.size and int(reach.max()) >= min(1 << (acc_bits - 1), ACC_LIMIT):
        return None
    mult = np.ascontiguousarray(mult, np.int64)
    shift = np.ascontiguousarray(shift, np.int64)
    bound = saturation_bounds(mult, shift, int(out_zp), int(qmin), int(qmax), reach=reach)
    if bound.size and int(bound.min()) == 0:
        return None
    rnd = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0).astype(np.int64)
    w_max = int(np.abs(w64).max(initial=0))
    w_dtype = next(d for d in (np.int8, np.int16, np.int32, np.int64) if w_max <= np.iinfo(d).max)
    acc_dtype = np.int32 if x_dev * wabs < 1 << 31 else np.int64  # every partial sum is bounded by x_dev * wabs
    return (int(x_zp), np.ascontiguousarray(w64.T.astype(w_dtype)), bias, mult, shift, rnd, bound, int(out_zp),
            int(qmin), int(qmax), acc_dtype)


def run(x, prep, out) -> np.ndarray:
    """``out`` (N, Cout, P) receives the requantized pointwise convolution of ``x`` (N, Cin, P), C-contiguous
    (module docstring); ``prep`` from :func:`prepare` for ``x``'s dtype."""
    bind(x, prep, out)(x, out)
    return out


def bind(x, prep, out):
    """:func:`run` validated once for arrays shaped, typed and laid out like ``x`` and ``out``: returns
    ``run(x, out)`` for such arrays."""
    check_int_array(x, "x", ndim=3, dtypes=X_DTYPES)
    check_int_array(out, "out", ndim=3)
    cin, cout = prep[1].shape
    if x.shape[1] != cin or out.shape != (x.shape[0], cout, x.shape[2]):
        raise ValueError(f"shapes do not match: x {x.shape}, weights ({cout}, {cin}), out {out.shape}")

    args, acc_dtype = prep[:-1], prep[-1]

    def run(x, out):
        _pointwise_small(x, *args, np.empty(cout, acc_dtype), out)

    return run
