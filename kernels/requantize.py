"""Requantization: int64 accumulators -> quantized outputs, per output channel.

Two flavours:

* ``requantize`` -- the board's integer pipeline: bias add, accumulator-width overflow handling (saturate or
  wrap, counted), fixed-point scale with :func:`kernels.fixedpoint.mul_round_shift`, output zero point,
  clamp.
* ``requantize_float`` -- onnxruntime's float32 requantization (QLinearConv / MLAS), used as the reference
  arithmetic of the ``onnx`` mode. It is the only kernel in this package that touches floats.

Its argument checks are those every kernel shares (:mod:`kernels.checks`). The module also holds the njit
helpers of the kernels that requantize as they go (:func:`requantize_row`, :func:`scale_row`, :func:`clamp`,
:func:`clamp_out`, :func:`mrs_checked`).
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from ._jit import njit, njit_noalloc
from .checks import as_int, check_int_array, check_multiplier, check_out, per_channel_int64
from .fixedpoint import mul_round_shift

# mul_round_shift is exact for x in [-2**48, 2**48) (see kernels/fixedpoint.py); kernels refuse anything
# outside rather than return a silently wrong number.
MRS_LIMIT = 1 << 48
# Accumulators and biases must stay in [-2**62, 2**62) so that acc + bias is exact in int64.
ACC_LIMIT = 1 << 62
INT32_LIMIT = 1 << 31  # saturation bounds below it keep the clamped accumulator in int32


# --------------------------------------------------------------------------------------------------------
# njit helpers
# --------------------------------------------------------------------------------------------------------
@njit
def mrs_checked(x, m, r):
    """``mul_round_shift(x, m, r)``, raising ValueError when x is outside its exact domain [-2**48, 2**48).

    ``m`` and ``r`` are validated by the Python wrappers (|m| < 2**31, 0 <= r <= 62).
    """
    if x < -MRS_LIMIT or x >= MRS_LIMIT:
        raise ValueError("mul_round_shift input outside [-2**48, 2**48): accumulator too wide for the "
                         "fixed-point multiplier")
    return mul_round_shift(x, m, r)


def _int32_values(src):
    """Whether every value of ``src`` is an int32 value by its type (8/16/32-bit integers) or by the callers'
    contract (float32 runs hold exact integers below 2**31 in magnitude: the exact float kernels' accumulators stay
    below 2**24). Resolved at compile time."""


@overload(_int32_values)
def _int32_values_impl(src):
    narrow = src.dtype in (types.int8, types.uint8, types.int16, types.uint16, types.int32, types.float32)
    return lambda src: narrow


@intrinsic
def high_shift(typingctx, v, s):
    """``floor(v / 2**(32 + s))`` as an int32 for an int64 ``v`` and ``0 <= s < 32``: the high half of ``v``
    (``floor(v / 2**32)``, an int32 value; the vector code takes it with a shuffle) shifted right as an int32 by
    ``s`` (two floor divisions by powers of two are one). An int64 arithmetic shift has no AVX2 vector
    instruction (LLVM emulates it in several), and Numba would widen an int32 shift to int64."""
    sig = types.int32(types.int64, types.int64)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        high = builder.trunc(builder.lshr(args[0], ir.Constant(ir.IntType(64), 32)), i32)
        return builder.ashr(high, builder.trunc(args[1], i32))
    return sig, codegen


@njit
def requantize_row(src, dst, bias, mult, shift, bound, out_zp, qmin, qmax):
    """The branch-free path of :func:`requantize` for one run of accumulators of one channel (used by kernels
    that requantize as they go): ``dst = clamp(((clamp(src + bias, -bound, bound)*mult + 2**(shift-1)) >> shift)
    + out_zp, qmin, qmax)``; ``bound`` from :func:`saturation_bounds` (> 0), no accumulator-width check. A float
    ``src`` holds exact integers (float32: of magnitude below 2**31).

    int32 accumulators (and exact float32 ones) into outputs of at most 32 bits, with ``shift >= 32`` (every
    multiplier below 1/2), take a shorter loop: ``floor((src*mult + c) / 2**shift)`` with the bias, the rounding
    constant and the zero point in ``c = bias*mult + 2**(shift-1) + out_zp*2**shift`` (a multiple of
    ``2**shift`` added before the floor division is added after it, exactly), without the clamp into
    ``[-bound, bound]``, which never changes the output (:func:`saturation_bounds`) and is there only to keep the
    product in int64: with ``|src| <= 2**31`` and ``|mult| < 2**31`` it is, and ``|c| < 2**61`` is checked. So
    ``floor((src*mult + c) / 2**32)`` is below ``1.5 * 2**30`` in magnitude: the rest of the shift
    (:func:`high_shift`) and the clamp run in int32."""
    b = np.int64(bias)
    m = np.int64(mult)
    r = np.int64(shift)
    lim = np.int64(bound)
    rnd = np.int64(0) if r == 0 else np.int64(1) << (r - 1)
    pow2 = float(np.int64(1) << r)  # exact (r <= 62); a float power would cost a libm exp2 call per row
    if (_int32_values(src) and _int32_values(dst) and r >= 32
            and abs(float(b)) * abs(float(m)) + float(rnd) + abs(float(out_zp)) * pow2 < 2.0 ** 61):
        c = b * m + rnd + (np.int64(out_zp) << r)
        m32 = np.int64(np.int32(m))
        lo, hi = np.int32(qmin), np.int32(qmax)  # within dst's range (the wrappers check), so within int32
        for j in range(src.shape[0]):
            dst[j] = min(max(high_shift(np.int64(np.int32(src[j])) * m32 + c, r - 32), lo), hi)
        return
    if not _int32_values(src) and lim < INT32_LIMIT:  # the clamped v and |mult| < 2**31 fit int32: pmuldq
        # (not compiled for int32-valued src, whose shifts below 32 are rare: one loop less in every caller)
        m32 = np.int64(np.int32(m))
        for j in range(src.shape[0]):
            v = np.int32(min(max(np.int64(src[j]) + b, -lim), lim))
            y = ((np.int64(v) * m32 + rnd) >> r) + out_zp
            dst[j] = min(max(y, qmin), qmax)
        return
    for j in range(src.shape[0]):
        v = min(max(np.int64(src[j]) + b, -lim), lim)
        y = ((v * m + rnd) >> r) + out_zp
        dst[j] = min(max(y, qmin), qmax)


def fits_int64(dtype, k_max: int, c_max: int) -> bool:
    """Whether ``x*k + c`` stays inside int64 for every value x of ``dtype`` when |k| <= k_max, |c| <= c_max
    (Python ints: exact). The precondition of :func:`scale_row`."""
    info = np.iinfo(dtype)
    return max(-int(info.min), int(info.max)) * k_max + c_max < 1 << 63


@njit
def clamp_out(y, full, qmin, qmax, dst):
    """``min(max(y, qmin), qmax)`` for a store into ``dst``. ``full`` (``qmin``/``qmax`` are dst's whole type
    range, a loop invariant: LLVM makes one loop per case) spells the bounds as the type's constants, so the
    vectorized store is one saturating narrowing (vpmovsqw) instead of a max, a min and a narrowing."""
    info = np.iinfo(dst.dtype)
    return min(max(y, info.min), info.max) if full else min(max(y, qmin), qmax)


@njit
def scale_row(src, k, c, shift, out_zp, qmin, qmax, dst):
    """``dst[i] = clamp(((src[i]*k + c) >> shift) + out_zp, qmin, qmax)`` in int64, branch-free (vectorizes): the
    direct row of the elementwise kernels (mul by a constant row, affine), whose callers fold the input zero point
    and the rounding term into ``c`` and prove with :func:`fits_int64` that ``src*k + c`` never leaves int64. They
    fold the output zero point too (``c + out_zp*2**shift``, passing ``out_zp`` = 0) when that still fits: the
    loop then has one addition less."""
    info = np.iinfo(dst.dtype)
    full = qmin == info.min and qmax == info.max
    small = -(1 << 31) < k < (1 << 31)  # 8/16-bit src times an int32 k: a 32x32->64-bit multiply (pmuldq)
    k32 = np.int64(np.int32(k))
    if out_zp == 0:
        for i in range(dst.shape[0]):
            xk = np.int64(np.int32(src[i])) * k32 if small else np.int64(src[i]) * k
            dst[i] = clamp_out((xk + c) >> shift, full, qmin, qmax, dst)
        return
    for i in range(dst.shape[0]):
        xk = np.int64(np.int32(src[i])) * k32 if small else np.int64(src[i]) * k
        dst[i] = clamp_out(((xk + c) >> shift) + out_zp, full, qmin, qmax, dst)


@njit_noalloc
def requantize_columns(acc, bias, mult, shift, bound, out_zp, qmin, qmax, out):
    """The branch-free path of :func:`requantize_loop` for (outer, C) arrays whose channel is the last axis (an
    accumulator with inner size 1, e.g. a Gemm's output columns): the loop runs along the channels with their
    parameters as arrays, so it vectorizes. Every ``bound[c] > 0``; no accumulator-width limit."""
    n_outer, n_c = acc.shape
    for o in range(n_outer):
        src = acc[o]
        dst = out[o]
        for c in range(n_c):
            r = shift[c]
            lim = bound[c]
            v = min(max(np.int64(src[c]) + bias[c], -lim), lim)
            y = ((v * mult[c] + ((np.int64(1) << r) >> 1)) >> r) + out_zp
            dst[c] = min(max(y, qmin), qmax)


@njit
def clamp(v, lo, hi):
    """``min(max(v, lo), hi)`` on integers."""
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


# --------------------------------------------------------------------------------------------------------
# requantize (integer, board arithmetic)
# --------------------------------------------------------------------------------------------------------
@njit_noalloc
def requantize_loop(acc, bias, mult, shift, bound, out_zp, qmin, qmax, limit_acc, acc_lo, acc_hi, sign_shift,
                    saturate_acc, out):
    """Integer requantization loop; see :func:`requantize`. Returns the accumulator overflow count.

    ``limit_acc[c]``: apply the acc_bits range ``[acc_lo, acc_hi]`` to channel c (a caller that proved a channel
    cannot leave it passes False there: the check would never fire); wrapping sign-extends the low
    ``64 - sign_shift`` bits (``(v << s) >> s`` with arithmetic right shift).
    ``bound[c]`` > 0 enables the fast path for channel c: ``v`` is first clamped to ``[-bound, bound]``, a
    no-op on the result because beyond it the output saturates anyway (see :func:`saturation_bounds`), which
    keeps ``v * mult`` inside int64 so the loop is branch-free and vectorizes. ``bound[c] == 0`` takes the
    general path through ``mrs_checked``.
    """
    n_outer, n_c, n_inner = acc.shape
    overflows = np.int64(0)
    for o in range(n_outer):
        for c in range(n_c):
            b = np.int64(bias[c])
            m = np.int64(mult[c])
            r = np.int64(shift[c])
            lim = np.int64(bound[c])
            src = acc[o, c]
            dst = out[o, c]
            check = limit_acc[c]
            if lim > 0 and not check:  # the common case, in its own small loop (vectorizes best)
                requantize_row(src, dst, b, m, r, lim, out_zp, qmin, qmax)
                continue
            if lim > 0:
                rnd = np.int64(0) if r == 0 else np.int64(1) << (r - 1)
                cnt = np.int64(0)
                for i in range(n_inner):
                    v = np.int64(src[i]) + b
                    if check:
                        if saturate_acc:
                            w = min(max(v, acc_lo), acc_hi)
                        else:
                            w = (v << sign_shift) >> sign_shift
                        cnt += np.int64(w != v)
                        v = w
                    v = min(max(v, -lim), lim)
                    y = ((v * m + rnd) >> r) + out_zp
                    dst[i] = min(max(y, qmin), qmax)
                overflows += cnt
                continue
            for i in range(n_inner):
                a = np.int64(src[i])
                if a < -ACC_LIMIT or a >= ACC_LIMIT:
                    raise ValueError("requantize: accumulator outside [-2**62, 2**62)")
                v = a + b
                if check and (v < acc_lo or v > acc_hi):
                    overflows += 1
                    if saturate_acc:
                        v = acc_hi if v > acc_hi else acc_lo
                    else:
                        v = (v << sign_shift) >> sign_shift
                y = mrs_checked(v, m, r) + out_zp
                dst[i] = clamp(y, qmin, qmax)
    return overflows


def _check_acc(acc) -> None:
    """Accumulators are integers (int64 down to 8-bit: a quantized tensor whose zero point the bias removes) or
    float32/float64 arrays holding exact integers (exact GEMM results)."""
    if isinstance(acc, np.ndarray) and acc.dtype in (np.float32, np.float64):
        if acc.ndim != 3 or not acc.flags.c_contiguous:
            raise ValueError(f"acc must be a C-contiguous 3-D array, got shape {acc.shape}")
        return
    check_int_array(acc, "acc", ndim=3, dtypes=(np.int64, np.int32, np.int16, np.uint16, np.int8, np.uint8))


def saturation_bounds(mult: np.ndarray, shift: np.ndarray, out_zp: int, qmin: int, qmax: int,
                      reach: int | None = None) -> np.ndarray:
    """Per channel, a bound ``L`` with ``L*|M| <= 2**62`` such that every |v| >= L saturates the output, or 0 if
    none. ``reach``: a bound the caller has proven on every |v| it will requantize (accumulator plus bias; one
    for all channels, or one per channel); a channel without a saturation bound then gets ``reach + 1`` where ``(reach + 1)*|M| <= 2**62``: no |v| reaches it,
    so clamping to it changes nothing, and ``v*M`` is exact (a dead channel of a trained model: a tiny multiplier
    with a large shift, whose ``(Q+1) << r`` does not fit int64).

    With ``Q = max(qmax - out_zp, out_zp - qmin) + 1`` and ``L = ((Q + 1) << r) // |M| + 1``: for v >= L,
    ``v*|M| >= (Q+1)*2**r`` so ``mul_round_shift(v, |M|, r) >= Q + 1`` (past either clamp bound), and
    symmetrically for v <= -L; clamping v into [-L, L] therefore never changes the output, and keeps
    ``|v*M| + 2**(r-1) <= 2**62 + 2**61 < 2**63``, so ``(v*M + 2**(r-1)) >> r`` is the exact
    ``mul_round_shift``. A zero multiplier maps everything to 0 (L = 2**31 is then harmless). A small
    multiplier with a large shift (an affine with many fraction bits and M = 1) gets a large L, which is fine
    as long as the product stays in range. Channels whose ``(Q+1) << r`` would not fit int64, or whose
    ``L*|M|`` would pass 2**62, get 0 (general path).
    """
    q1 = max(qmax - out_zp, out_zp - qmin) + 2
    m = np.abs(mult.astype(np.int64))
    r = shift.astype(np.int64)
    fits = r <= 62 - q1.bit_length()
    num = np.where(fits, np.left_shift(np.int64(q1), np.where(fits, r, 0)), 0)
    lim = np.where(m > 0, num // np.maximum(m, 1) + 1, 1 << 31)
    lim = np.where(fits & (lim <= (1 << 62) // np.maximum(m, 1)), lim, 0).astype(np.int64)
    if reach is not None:
        r1 = np.minimum(np.asarray(reach, np.int64), (1 << 62) - 1) + 1  # per channel, or one for all
        lim = np.where((lim == 0) & (r1 <= (1 << 62) // np.maximum(m, 1)), r1, lim).astype(np.int64)
    return lim


def requantize(acc, bias, mult, shift, out_zp, qmin, qmax, acc_bits, saturate_acc, out, bound=None) -> int:
    """Requantize int64 accumulators per channel with the board's fixed-point rule.

    Parameters
    ----------
    acc : int64 ndarray, shape (outer, C, inner)
        Accumulators; each must lie in [-2**62, 2**62). A float32/float64 array whose values are exact
        integers (an exact float GEMM result) is accepted too.
    bias, mult, shift : integer ndarrays, shape (C,)
        Per-channel bias (in accumulator units, |bias| < 2**62), multiplier (|mult| < 2**31) and right
        shift (0..62).
    out_zp, qmin, qmax : int
        Output zero point and clamp range (within the range of ``out.dtype``).
    acc_bits : int
        Accumulator width, 2..64. 64 means "no accumulator limit".
    saturate_acc : bool
        On accumulator overflow, saturate (True) or wrap in two's complement (False).
    out : ndarray, shape (outer, C, inner), dtype int8/uint8/int16/uint16/int32
        Preallocated output (may be a strided view), written in place.
    bound : int64 ndarray, shape (C,), optional
        ``saturation_bounds(mult, shift, out_zp, qmin, qmax)``, when the caller keeps it between calls with
        the same multipliers (it also vouches that mult/shift were validated then).

    Returns
    -------
    int
        Number of elements whose ``acc + bias`` overflowed ``acc_bits``.

    Notes
    -----
    Exact integer semantics, per element of channel ``c``::

        v = acc + bias[c]                                   (exact)
        if acc_bits < 64 and not -2**(acc_bits-1) <= v <= 2**(acc_bits-1) - 1:
            overflows += 1
            v = clamp(v, -2**(acc_bits-1), 2**(acc_bits-1) - 1)  if saturate_acc
                else the two's-complement wrap of v to acc_bits bits
        y = mul_round_shift(v, mult[c], shift[c]) + out_zp  # floor((v*M + 2**(r-1)) / 2**r)
        out = clamp(y, qmin, qmax)

    Raises ValueError (from inside the loop) if a ``v`` reaching ``mul_round_shift`` lies outside
    [-2**48, 2**48), where the fixed-point product is no longer exact (cannot happen for acc_bits <= 49).
    """
    _check_acc(acc)
    n_c = acc.shape[1]
    bias = per_channel_int64(bias, n_c, "bias")
    mult = per_channel_int64(mult, n_c, "mult")
    shift = per_channel_int64(shift, n_c, "shift")
    if bound is None:
        check_multiplier(mult, shift, "requantize")
    if bias.size and (int(bias.min()) < -ACC_LIMIT or int(bias.max()) >= ACC_LIMIT):
        raise ValueError("bias must lie in [-2**62, 2**62)")
    out_zp, qmin, qmax = check_out(out, acc.shape, out_zp, qmin, qmax, contiguous=False)
    acc_bits = as_int(acc_bits, "acc_bits")
    if not 2 <= acc_bits <= 64:
        raise ValueError(f"acc_bits must be in [2, 64], got {acc_bits}")
    if not isinstance(saturate_acc, (bool, np.bool_)):
        raise ValueError(f"saturate_acc must be a bool, got {saturate_acc!r}")
    limit_acc = acc_bits < 64
    acc_lo = -(1 << (acc_bits - 1)) if limit_acc else 0
    acc_hi = (1 << (acc_bits - 1)) - 1 if limit_acc else 0
    if bound is None:
        bound = saturation_bounds(mult, shift, out_zp, qmin, qmax)
    elif bound.shape != (n_c,) or bound.dtype != np.int64:
        raise ValueError(f"bound must be an int64 array of shape ({n_c},)")
    return run_validated(acc, bias, mult, shift, bound, out_zp, qmin, qmax, np.full(n_c, limit_acc), acc_lo, acc_hi,
                         64 - acc_bits, bool(saturate_acc), out)


def run_validated(acc, bias, mult, shift, bound, out_zp, qmin, qmax, limit_acc, acc_lo, acc_hi, sign_shift,
                  saturate_acc, out) -> int:
    """:func:`requantize_loop` on arguments already validated (by :func:`requantize`, or once by a caller that
    keeps them), through the kernel that computes the same integers at least cost; returns the overflow count.
    One row of one channel without an accumulator check is :func:`requantize_row`'s own case (the loop would call
    it once: no loop to compile for a per-tensor requantization); (rows, channels) accumulators are
    :func:`requantize_columns`' (:func:`by_columns`)."""
    check = bool(limit_acc.any())
    if (acc.shape[0] * acc.shape[1] == 1 and not check and int(bound[0]) > 0 and out.flags.c_contiguous
            and acc.flags.c_contiguous):
        requantize_row(acc.reshape(-1), out.reshape(-1), int(bias[0]), int(mult[0]), int(shift[0]), int(bound[0]),
                       out_zp, qmin, qmax)
        return 0
    if by_columns(acc, out, check, bound):
        n_c = acc.shape[1]
        requantize_columns(acc.reshape(acc.shape[0], n_c), bias, mult, shift, bound, out_zp, qmin, qmax,
                           out.reshape(acc.shape[0], n_c))
        return 0
    return int(requantize_loop(acc, bias, mult, shift, bound, out_zp, qmin, qmax, limit_acc, acc_lo, acc_hi,
                               sign_shift, saturate_acc, out))


def by_columns(acc, out, check, bound) -> bool:
    """True when :func:`requantize_columns` computes exactly what :func:`requantize_loop` would: inner size 1
    (more than one channel), contiguous arrays, no accumulator-width check on any channel and a saturation bound
    for every channel."""
    return (acc.shape[2] == 1 and acc.shape[1] > 1 and not check and out.flags.c_contiguous
            and acc.flags.c_contiguous and int(bound.min()) > 0)


# --------------------------------------------------------------------------------------------------------
# requantize_float (onnxruntime / MLAS float32 arithmetic)
# --------------------------------------------------------------------------------------------------------
@njit_noalloc
def _requantize_float(acc, bias, scale, out_zp, qmin, qmax, out):
    """Float32 requantization loop; see :func:`requantize_float`. Returns the int32 wrap count.

    Branch-free so that it vectorizes; the caller guarantees |acc|, |bias| < 2**62.
    """
    n_outer, n_c, n_inner = acc.shape
    wraps = np.int64(0)
    lo_f = np.float32(qmin - out_zp)
    hi_f = np.float32(qmax - out_zp)
    for o in range(n_outer):
        for c in range(n_c):
            b = np.int64(bias[c])
            s = np.float32(scale[c])
            src = acc[o, c]
            dst = out[o, c]
            cnt = np.int64(0)
            for i in range(n_inner):
                v = np.int64(src[i]) + b
                w = (v << 32) >> 32  # two's-complement wrap to int32
                cnt += np.int64(w != v)
                # product rounded to float32 (f32 * f32 is exact in f64, so one rounding either way)
                f = np.float32(np.float32(w) * s)
                f = min(max(f, lo_f), hi_f)
                y = np.int64(np.rint(f)) + out_zp
                dst[i] = min(max(y, qmin), qmax)
            wraps += cnt
    return wraps


def requantize_float(acc, bias, scale, out_zp, qmin, qmax, out) -> int:
    """Requantize like onnxruntime's QLinearConv / MLAS (float32 arithmetic), per channel.

    Parameters
    ----------
    acc : int64 ndarray, shape (outer, C, inner)
        Accumulators, each in [-2**62, 2**62).
    bias : integer ndarray, shape (C,)
        Per-channel int32 bias (any integer dtype, |bias| < 2**62).
    scale : float32 ndarray, shape (C,)
        Per-channel ``x_scale * w_scale / y_scale`` as computed (in float32) by the runtime.
    out_zp, qmin, qmax : int
        Output zero point and clamp range (within the range of ``out.dtype``).
    out : ndarray, shape (outer, C, inner), dtype int8/uint8/int16/uint16/int32
        Preallocated output, written in place.

    Returns
    -------
    int
        Number of elements whose ``acc + bias`` did not fit int32 and wrapped.

    Notes
    -----
    Per element of channel ``c``::

        v = wrap_to_int32(acc + bias[c])            # MLAS accumulates in int32
        f = float32(float32(v) * scale[c])          # IEEE float32 product, round to nearest even
        f = min(max(f, float32(qmin - out_zp)), float32(qmax - out_zp))
        out = clamp(int(rint(f)) + out_zp, qmin, qmax)   # rint: round half to even

    ``float32(.)`` of an integer is the correctly rounded conversion (cvtdq2ps). The final integer clamp
    is a no-op whenever ``qmin - out_zp`` and ``qmax - out_zp`` are exact in float32 (any 8/16-bit
    output); it only keeps wide (int32) outputs in range.
    """
    _check_acc(acc)
    n_c = acc.shape[1]
    bias = per_channel_int64(bias, n_c, "bias")
    if bias.size and (int(bias.min()) < -ACC_LIMIT or int(bias.max()) >= ACC_LIMIT):
        raise ValueError("bias must lie in [-2**62, 2**62)")
    if not isinstance(scale, np.ndarray) or scale.dtype != np.float32 or scale.shape != (n_c,):
        raise ValueError(f"scale must be a float32 array of shape ({n_c},)")
    if not np.all(np.isfinite(scale)):
        raise ValueError("scale must be finite")
    scale = np.ascontiguousarray(scale)
    out_zp, qmin, qmax = check_out(out, acc.shape, out_zp, qmin, qmax, contiguous=False)
    if acc.size and (int(acc.min()) < -ACC_LIMIT or int(acc.max()) >= ACC_LIMIT):
        raise ValueError("requantize_float: accumulator outside [-2**62, 2**62)")
    return int(_requantize_float(acc, bias, scale, out_zp, qmin, qmax, out))
