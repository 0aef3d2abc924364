"""Golden twins of the ``kernels/ort_*`` kernels (onnxruntime's fused 8-bit QLinearAdd / QLinearMul /
QLinearGlobalAveragePool on x86-64): plainly written, obviously correct, slow.

Each function restates a kernel's specification one output element at a time. float32 operations use numpy
float32 scalars (IEEE float32); the fused multiply-add is computed with exact rationals (``fractions``) and
rounded to float32 by comparing the candidates around the float64 estimate. Nothing here calls the kernels.

The second half of the file holds hypothesis strategies shared by the ``tests/test_kernels_ort_*.py`` files.
"""
from fractions import Fraction

import itertools

import numpy as np
from hypothesis import strategies as st

F32 = np.float32
INT32_MIN = -2 ** 31
FLT_MAX = float(np.finfo(np.float32).max)  # 2**128 - 2**104
OVERFLOW_MIDPOINT = Fraction(2 ** 128 - 2 ** 103)  # (FLT_MAX + 2**128) / 2


# ========================================================================================================
# float32 helpers, written again
# ========================================================================================================
def round_f32(q: Fraction) -> np.float32:
    """The float32 nearest to the rational ``q``, ties to the even significand (IEEE round half to even).

    As IEEE rounds with an unbounded exponent and then overflows, ``|q|`` from the midpoint between FLT_MAX and
    2**128 on (a tie goes to the even 2**128) gives an infinity of its sign.
    """
    if abs(q) >= OVERFLOW_MIDPOINT:
        return F32(np.inf) if q > 0 else F32(-np.inf)
    guess = F32(min(max(float(q), -FLT_MAX), FLT_MAX))  # within one float32 step of the answer
    with np.errstate(over="ignore"):  # the step past FLT_MAX is infinite: dropped below
        cands = {guess, np.nextafter(guess, F32(np.inf)), np.nextafter(guess, F32(-np.inf))}
    cands = [c for c in cands if np.isfinite(c)]
    best = min(abs(Fraction(float(c)) - q) for c in cands)
    near = [c for c in cands if abs(Fraction(float(c)) - q) == best]
    if len(near) == 1:
        return near[0]
    return next(c for c in near if int(np.array(c, np.float32).view(np.uint32)) % 2 == 0)


def fma(x, y, z) -> np.float32:
    """float32 fused multiply-add: x*y + z computed exactly, rounded once."""
    return round_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))


def cvt_ps2dq(u) -> int:
    """x86 cvtps2dq: round half to even, -2**31 for NaN and anything outside [-2**31, 2**31)."""
    u = float(u)
    if not (-2.0 ** 31 <= u < 2.0 ** 31):
        return INT32_MIN
    return round(u)  # Python rounds floats half to even, exactly


def clamp(v: int, lo: int, hi: int) -> int:
    return min(max(int(v), int(lo)), int(hi))


def wrap32(v: int) -> int:
    return (int(v) + 2 ** 31) % 2 ** 32 - 2 ** 31


# ========================================================================================================
# QLinearAdd (MLAS AVX2 kernel)
# ========================================================================================================
def qladd(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp, out_dtype):
    """u = fma(a, ra, fma(b, rb, zc - fma(ra, za, rb*zb))) in float32, cvtps2dq, saturate."""
    info = np.iinfo(out_dtype)
    ra = F32(a_scale) / F32(out_scale)
    rb = F32(b_scale) / F32(out_scale)
    fixed = F32(out_zp) - fma(ra, F32(a_zp), rb * F32(b_zp))
    assert ra.dtype == rb.dtype == fixed.dtype == np.float32
    out = np.zeros(len(a), dtype=out_dtype)
    for i in range(len(a)):
        u = fma(F32(int(a[i])), ra, fma(F32(int(b[i])), rb, fixed))
        out[i] = clamp(cvt_ps2dq(u), info.min, info.max)
    return out


# ========================================================================================================
# QLinearMul (MLAS SSE2 kernel)
# ========================================================================================================
def qlmul(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp, out_dtype):
    """u = f32(f32(p * ratio) + zc), p = (a - za)(b - zb) exact, ratio = f32(f32(sa*sb)/sc); cvtps2dq; saturate."""
    info = np.iinfo(out_dtype)
    ratio = (F32(a_scale) * F32(b_scale)) / F32(out_scale)
    out = np.zeros(len(a), dtype=out_dtype)
    for i in range(len(a)):
        p = (int(a[i]) - int(a_zp)) * (int(b[i]) - int(b_zp))
        u = F32(p) * ratio + F32(out_zp)
        assert u.dtype == np.float32
        out[i] = clamp(cvt_ps2dq(u), info.min, info.max)
    return out


# ========================================================================================================
# QLinearGlobalAveragePool (MLAS + MlasRequantizeOutput)
# ========================================================================================================
def qlgavgpool(x, x_scale, x_zp, out_scale, out_zp, out_dtype):
    """Per row: acc = wrap32(sum - zx*n); f = f32(acc) * f32(sx / f32(sy*n)); clamp; rint; + zy.

    Raises ValueError where onnxruntime throws (n >= 2**24, factor outside [2**-32, 256)).
    """
    info = np.iinfo(out_dtype)
    rows, n = x.shape
    if not 1 <= n < 2 ** 24:
        raise ValueError("image size out of range")
    scale = F32(x_scale) / (F32(out_scale) * F32(n))
    if not 2.0 ** -32 <= float(scale) < 256.0:
        raise ValueError("factor out of range")
    lo, hi = F32(info.min - out_zp), F32(info.max - out_zp)
    out = np.zeros(rows, dtype=out_dtype)
    for r in range(rows):
        acc = wrap32(int(x[r].sum(dtype=np.int64)) - int(x_zp) * n)  # exact: |sum| <= 255 * n < 2**32
        f = F32(acc) * scale
        assert f.dtype == np.float32
        f = min(max(f, lo), hi)
        out[r] = int(np.rint(f)) + int(out_zp)
    return out


# ========================================================================================================
# QLinearAveragePool (contrib op, float32 loops)
# ========================================================================================================
def qlavgpool(x, x_scale, x_zp, y_scale, y_zp, kernel, stride, pads, count_include_pad, out_hw, qmin, qmax, out_dtype):
    """Window sums of f32(sx * f32(q - zx)) in row-major order, / f32(count), then rint(f32(y/sy) + zy)."""
    n_img, n_c, h, w = x.shape
    (kh, kw), (sh, sw), (top, left) = kernel, stride, pads[:2]
    out = np.zeros((n_img, n_c) + tuple(out_hw), dtype=out_dtype)
    for n, c, oh, ow in itertools.product(range(n_img), range(n_c), range(out_hw[0]), range(out_hw[1])):
        hs, ws = oh * sh - top, ow * sw - left
        he, we = min(hs + kh, h), min(ws + kw, w)
        hs, ws = max(hs, 0), max(ws, 0)
        acc = F32(0)
        for i in range(hs, he):
            for j in range(ws, we):
                acc = F32(acc + F32(F32(x_scale) * F32(int(x[n, c, i, j]) - int(x_zp))))
        count = kh * kw if count_include_pad else (he - hs) * (we - ws)
        v = F32(F32(F32(acc / F32(count)) / F32(y_scale)) + F32(y_zp))
        out[n, c, oh, ow] = min(max(int(np.rint(v)), qmin), qmax)
    return out


# ========================================================================================================
# QLinearSoftmax (contrib op, float table + float32 division)
# ========================================================================================================
def qlsoftmax(x, x_scale, y_scale, y_zp, out_dtype):
    """Per row: float32 table of exp((k - 255 + b) s), float32 sum in row order, rint(f32(E*Y)/sum) + zy."""
    import math
    rows, d = x.shape
    s = float(F32(x_scale))
    b = max(0.0, math.log(float(np.finfo(np.float32).max) / d) - 5.0) / s
    table = [F32(math.exp((k - 255 + b) * s)) for k in range(256)]
    y_mul = F32(math.floor(F32(1.0) / F32(y_scale)))
    out = np.zeros(x.shape, dtype=out_dtype)
    q_max = 127 if out_dtype == np.int8 else 255  # int8: onnxruntime 1.32 saturates at 127 (#29728)
    for r in range(rows):
        m = max(int(v) for v in x[r])
        total = F32(0)
        for v in x[r]:
            total = F32(total + table[255 - m + int(v)])
        for j, v in enumerate(x[r]):
            out[r, j] = min(int(np.rint(F32(F32(table[255 - m + int(v)] * y_mul) / total))) + int(y_zp), q_max)
    return out


# ========================================================================================================
# hypothesis strategies
# ========================================================================================================
DTYPES_8 = [np.int8, np.uint8]


@st.composite
def scales(draw, lo=-30.0, hi=12.0):
    """A positive float32 scale: log-uniform in [2**lo, 2**hi], or a power of two (tie-prone)."""
    if draw(st.booleans()):
        return float(F32(2.0 ** draw(st.floats(lo, hi))))
    return float(2.0 ** draw(st.integers(int(lo), int(hi))))


@st.composite
def related_scales(draw, n):
    """``n`` scales whose ratios are small dyadic or decimal fractions (many exact ties), or free ones."""
    base = draw(scales(-20.0, 4.0))
    kind = draw(st.sampled_from(["free", "dyadic", "decimal"]))
    out = []
    for _ in range(n):
        if kind == "free":
            out.append(draw(scales()))
        elif kind == "dyadic":
            out.append(float(F32(base * draw(st.sampled_from([0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0])))))
        else:
            out.append(float(F32(base * draw(st.sampled_from([0.1, 0.2, 0.3, 0.7, 1.1, 2.5, 10.0])))))
    return out


@st.composite
def int8_arrays(draw, n, dtype):
    """A 1-D array of ``n`` values of ``dtype``: uniform, edges, near zero point, or constant."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    mode = draw(st.sampled_from(["uniform", "uniform", "edges", "const"]))
    if mode == "uniform":
        arr = rng.integers(info.min, info.max, size=n, endpoint=True)
    elif mode == "edges":
        arr = rng.choice(np.array([info.min, info.min + 1, 0 if info.min < 0 else 128, info.max - 1, info.max]),
                         size=n)
    else:
        arr = np.full(n, draw(st.integers(int(info.min), int(info.max))))
    return arr.astype(dtype)


@st.composite
def zero_point(draw, dtype):
    info = np.iinfo(dtype)
    mid = 0 if info.min < 0 else 128
    return draw(st.one_of(st.sampled_from([int(info.min), int(info.max), mid]),
                          st.integers(int(info.min), int(info.max))))
