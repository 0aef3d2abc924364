"""Integer LayerNormalization over the rows of a 2-D array.

Per row of ``n`` values (formats: ``Q.b`` = b fraction bits; ``>>`` is an arithmetic, i.e. floor, shift):

1. ``c = x - x_zp`` (17 bits signed); ``S1 = sum(c)`` (int64).
2. Mean with ``P = mean_bits`` fraction bits, rounded division: ``mu = floor((S1 * 2**(P+1) + n) / (2n))``.
3. Deviations ``dev = (c << P) - mu`` (``17 + P + 1`` bits), exact up to the rounding of ``mu``.
4. Variance sum ``V = sum(((dev + 2**(vs-1)) >> vs) ** 2)`` (``vs = var_shift``, chosen by the caller so that
   ``V`` fits int64), then ``W = V + eps_n`` (``eps_n`` = n * epsilon in the units of ``V``).
5. ``1/sqrt(W)`` by normalization: ``b = bit_length(W) - 1``, an even shift ``s = 2 * floor((b - 28) / 2)``
   brings ``w = W * 2**-s`` into [2**28, 2**30) (mantissa ``u = w / 2**28`` in [1, 4)); ``rsqrt_lut`` holds
   ``round(2**30 / sqrt(1 + j / 2**J))`` for j = 0 .. 3 * 2**J (step 2**-J over [1, 4]); linear interpolation
   on the low ``28 - J`` bits gives ``y0`` (Q.30 ~= 1/sqrt(u)), one Newton step
   ``y1 = y0 * (3 - u * y0**2) / 2`` in fixed point, clamped to [2**29, 2**30]. Then
   ``1/sqrt(W) = y1 * 2**-(44 + s/2)``.
6. Normalized values ``z = round(dev * y1 / 2**(44 + s/2 + vs - F))`` with ``F = norm_bits`` (``z / 2**F`` is
   ``(x - mean) / sqrt(n * (var + eps))``, in [-1, 1], so ``|z| <= 2**F`` up to rounding; ``|dev * y1| < 2**61``).
   ``W == 0`` gives 0, and so does a shift of 63 or more (an eps so large that every ``z`` rounds to 0).
7. ``acc = z * gamma[i] + bias[i]`` (int64), ``out = clamp(mul_round_shift(acc, mult[i], shift[i]) + out_zp)``.
"""
import numpy as np

from ._jit import njit
from .checks import as_int, check_int_array, check_multiplier, check_out, per_channel_int64
from .requantize import clamp, mrs_checked
from .softmax import bit_length

IN_DTYPES = (np.int8, np.uint8, np.int16, np.uint16)
ONE = 1 << 30
MAX_MEAN_BITS = 14
MAX_NORM_BITS = 30


@njit
def rsqrt_q30(w, rsqrt_lut, step_bits):
    """``round(2**30 / sqrt(w / 2**28))`` approximately, for ``w`` in [2**28, 2**30): see step 5 of the module
    docstring. ``f = w - 2**28``; ``j = f >> (28 - J)``, ``frac`` = the low ``28 - J`` bits;
    ``y0 = R[j] - ((R[j] - R[j+1]) * frac + 2**(27-J)) >> (28-J)``;
    ``t = (y0*y0 + 2**29) >> 30``; ``v = (w*t + 2**27) >> 28``; ``y1 = (y0 * (3*2**30 - v) + 2**30) >> 31``."""
    low = 28 - step_bits
    f = w - (np.int64(1) << 28)
    j = f >> low
    fr = f - (j << low)
    r0 = np.int64(rsqrt_lut[j])
    r1 = np.int64(rsqrt_lut[j + 1])
    y0 = r0 - (((r0 - r1) * fr + (np.int64(1) << (low - 1))) >> low)
    t = (y0 * y0 + (np.int64(1) << 29)) >> 30
    v = (w * t + (np.int64(1) << 27)) >> 28
    y1 = (y0 * (3 * ONE - v) + ONE) >> 31
    return clamp(y1, np.int64(1) << 29, np.int64(ONE))


@njit
def _layernorm(x, x_zp, mean_bits, var_shift, eps_n, rsqrt_lut, step_bits, norm_bits, gamma, bias, mult, shift,
               out_zp, qmin, qmax, out):
    """Steps 1-7 of the module docstring, row by row."""
    rows, n = x.shape
    dev = np.empty(n, np.int64)
    two_n = 2 * np.int64(n)
    vr = np.int64(0) if var_shift == 0 else np.int64(1) << (var_shift - 1)
    for r in range(rows):
        s1 = np.int64(0)
        for i in range(n):
            s1 += np.int64(x[r, i]) - x_zp
        mu = ((s1 << (mean_bits + 1)) + n) // two_n
        v = np.int64(0)
        for i in range(n):
            d = ((np.int64(x[r, i]) - x_zp) << mean_bits) - mu
            dev[i] = d
            ds = (d + vr) >> var_shift
            v += ds * ds
        w = v + eps_n
        if w == 0:
            y = np.int64(0)
            sh = np.int64(0)
        else:
            hs = (bit_length(w) - 1 - 28) >> 1           # s / 2, floor
            if hs >= 0:
                wn = w >> (2 * hs)
            else:
                wn = w << (-2 * hs)
            y = rsqrt_q30(wn, rsqrt_lut, step_bits)
            sh = 44 + hs + var_shift - norm_bits          # >= 0 since hs >= -14 and norm_bits <= 30
            if sh >= 63:                                  # |dev * y| < 2**61: every z rounds to 0
                y = np.int64(0)
                sh = np.int64(0)
        rnd = np.int64(0) if sh == 0 else np.int64(1) << (sh - 1)
        for i in range(n):
            z = (dev[i] * y + rnd) >> sh
            acc = z * gamma[i] + bias[i]
            out[r, i] = clamp(mrs_checked(acc, mult[i], shift[i]) + out_zp, qmin, qmax)


def layernorm(x, x_zp, mean_bits, var_shift, eps_n, rsqrt_lut, norm_bits, gamma, bias, mult, shift, out_zp, qmin,
              qmax, out) -> None:
    """Integer LayerNormalization of each row of ``x`` (see the module docstring for the exact steps).

    Parameters
    ----------
    x : ndarray (rows, n), int8/uint8/int16/uint16, C-contiguous, n >= 1
    x_zp : int
        Input zero point, |x_zp| <= 2**16.
    mean_bits : int
        ``P`` in [0, 14]: fraction bits of the mean.
    var_shift : int
        ``vs`` >= 0: deviations are shifted right (rounding half up) by ``vs`` before squaring. Together with
        ``eps_n`` it must keep ``W`` below 2**63 for every input of ``x``'s dtype (checked).
    eps_n : int
        ``n * epsilon`` in the units of ``V`` (``>= 0``).
    rsqrt_lut : integer ndarray, 3 * 2**J + 1 entries (1 <= J <= 27)
        ``round(2**30 / sqrt(1 + j / 2**J))``: non-increasing, values in [2**29, 2**30].
    norm_bits : int
        ``F`` in [0, 30]: fraction bits of the normalized value ``z``.
    gamma, bias, mult, shift : integer ndarrays (n,)
        Per position along the row: integer gamma (``gamma_q - gamma_zp``, |gamma| <= 2**17), bias in
        accumulator units (|bias| < 2**62), fixed-point output factor (|mult| < 2**31, shift 0..62).
    out_zp, qmin, qmax : int
    out : ndarray (rows, n), 8/16/32-bit integer dtype, written in place.

    Raises ValueError from inside the loop if an ``acc`` leaves [-2**48, 2**48) (the exact domain of
    ``mul_round_shift``); callers pick ``norm_bits`` and ``bias`` so that it cannot.
    """
    check_int_array(x, "x", ndim=2, dtypes=IN_DTYPES)
    rows, n = x.shape
    if n == 0:
        raise ValueError("layernorm rows must not be empty")
    if n >= 1 << 31:
        raise ValueError("layernorm rows must have fewer than 2**31 elements")
    x_zp = as_int(x_zp, "x_zp")
    if abs(x_zp) > 1 << 16:
        raise ValueError("x_zp must satisfy |x_zp| <= 2**16")
    mean_bits = as_int(mean_bits, "mean_bits")
    if not 0 <= mean_bits <= MAX_MEAN_BITS:
        raise ValueError(f"mean_bits must be in [0, {MAX_MEAN_BITS}], got {mean_bits}")
    var_shift = as_int(var_shift, "var_shift")
    if not 0 <= var_shift <= 40:
        raise ValueError(f"var_shift must be in [0, 40], got {var_shift}")
    eps_n = as_int(eps_n, "eps_n")
    if eps_n < 0:
        raise ValueError("eps_n must be >= 0")
    info = np.iinfo(x.dtype)
    c_max = max(abs(int(info.max) - x_zp), abs(int(info.min) - x_zp))
    if n * c_max << (mean_bits + 1) >= 1 << 63:
        raise ValueError("the row sum times 2**(mean_bits+1) can pass 2**63: rows too long")
    dev_max = ((int(info.max) - int(info.min)) << mean_bits) + 1
    term = (dev_max + (1 << var_shift >> 1)) >> var_shift
    if n * term * term + eps_n >= 1 << 63:
        raise ValueError("the variance sum can pass 2**63: raise var_shift or lower eps_n")
    if not isinstance(rsqrt_lut, np.ndarray) or rsqrt_lut.dtype.kind not in "iu" or rsqrt_lut.ndim != 1:
        raise ValueError("rsqrt_lut must be a 1-D integer numpy array")
    table = np.ascontiguousarray(rsqrt_lut, dtype=np.int64)
    steps = table.size - 1
    step_bits = (steps // 3).bit_length() - 1
    if steps < 6 or steps % 3 or (steps // 3) != 1 << step_bits or step_bits > 27:
        raise ValueError(f"rsqrt_lut must have 3 * 2**J + 1 entries (1 <= J <= 27), got {table.size}")
    if int(table.min()) < 1 << 29 or int(table.max()) > ONE or np.any(np.diff(table) > 0):
        raise ValueError("rsqrt_lut must be non-increasing with values in [2**29, 2**30]")
    norm_bits = as_int(norm_bits, "norm_bits")
    if not 0 <= norm_bits <= MAX_NORM_BITS:
        raise ValueError(f"norm_bits must be in [0, {MAX_NORM_BITS}], got {norm_bits}")
    gamma = per_channel_int64(gamma, n, "gamma")
    bias = per_channel_int64(bias, n, "bias")
    mult = per_channel_int64(mult, n, "mult")
    shift = per_channel_int64(shift, n, "shift")
    if np.any(np.abs(gamma) > 1 << 17):
        raise ValueError("gamma values must satisfy |gamma| <= 2**17")
    if np.any(bias < -(1 << 62)) or np.any(bias >= 1 << 62):
        raise ValueError("bias must lie in [-2**62, 2**62)")
    check_multiplier(mult, shift, "layernorm output")
    out_zp, qmin, qmax = check_out(out, x.shape, out_zp, qmin, qmax)
    _layernorm(x, x_zp, mean_bits, var_shift, eps_n, table, step_bits, norm_bits, gamma, bias, mult, shift, out_zp,
               qmin, qmax, out)
