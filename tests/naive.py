"""Golden twins of the kernels: plainly written, obviously correct, slow.

Every function here restates one kernel's specification with Python integers (numpy float32 scalars for
``requantize_float``), one output element at a time, directly from the formula. They never call the
kernels nor ``kernels.fixedpoint.mul_round_shift``: the rounding rule is written again below.

The second half of the file holds hypothesis strategies shared by the ``tests/test_kernels_*.py`` files.
"""
import itertools
import math
import os
import zlib
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

from tests.budget import FULL

# ========================================================================================================
# fixed-point rounding, written again
# ========================================================================================================
SAT = 2 ** 62
MRS_DOMAIN = 2 ** 48  # the kernels' mul_round_shift is exact (and accepted) for x in [-2**48, 2**48)


def mrs(x: int, m: int, r: int) -> int:
    """floor((x*m + 2**(r-1)) / 2**r) (x*m when r == 0), clamped to [-2**62, 2**62]; Python ints."""
    x, m, r = int(x), int(m), int(r)
    if r == 0:
        y = x * m
    else:
        y = (x * m + 2 ** (r - 1)) // 2 ** r
    return min(max(y, -SAT), SAT)


def mrs_domain(x: int) -> int:
    """The kernels refuse mul_round_shift inputs outside [-2**48, 2**48): mirror that with ValueError."""
    if not -MRS_DOMAIN <= int(x) < MRS_DOMAIN:
        raise ValueError("mul_round_shift input outside its exact domain")
    return int(x)


def quantize_multiplier(real: float, bits: int = 31) -> tuple[int, int]:
    """(M, r) with M * 2**-r the factor rounded to ``bits`` significant bits, in exact Fractions: r is the shift
    with 2**(bits-1) <= |real| * 2**r < 2**bits and |M| = floor(|real| * 2**r + 1/2) (half away from zero); if
    that reaches 2**bits, M = 2**(bits-1) with one shift less. M carries the sign of the factor. (0, 0) for zero
    or when r > 62 (too small: flushed); ValueError for r < 0 (needs a left shift) and non-finite factors."""
    if not math.isfinite(real):
        raise ValueError("non-finite factor")
    a = abs(Fraction(real))
    if a == 0:
        return 0, 0
    r = bits - (a.numerator.bit_length() - a.denominator.bit_length())  # off by at most one
    while a * Fraction(2) ** r >= 2 ** bits:
        r -= 1
    while a * Fraction(2) ** r < 2 ** (bits - 1):
        r += 1
    m = math.floor(a * Fraction(2) ** r + Fraction(1, 2))
    if m == 2 ** bits:
        m, r = 2 ** (bits - 1), r - 1
    if r > 62:
        return 0, 0
    if r < 0:
        raise ValueError("factor needs a left shift")
    return (-m if real < 0 else m), r


def fusable_shifts(shift, out_zp: int, qmin: int, qmax: int):
    """``shift`` capped where kernels.requantize.saturation_bounds still has a bound for every channel
    (``r <= 62 - bits(max(qmax - out_zp, out_zp - qmin) + 2)``): fused-requantization strategies cap most draws so
    that most examples compare instead of taking the unfused path."""
    return np.minimum(shift, 62 - (max(qmax - out_zp, out_zp - qmin) + 2).bit_length())


def clamp(v: int, lo: int, hi: int) -> int:
    return min(max(int(v), int(lo)), int(hi))


def wrap(v: int, bits: int) -> int:
    """Two's-complement wrap of the integer v to ``bits`` bits."""
    half = 2 ** (bits - 1)
    return (int(v) + half) % 2 ** bits - half


# ========================================================================================================
# requantize
# ========================================================================================================
def requantize(acc, bias, mult, shift, out_zp, qmin, qmax, acc_bits, saturate_acc, out_dtype):
    """Returns (out array of out_dtype, overflow count)."""
    outer, n_c, inner = acc.shape
    out = np.zeros(acc.shape, dtype=out_dtype)
    overflows = 0
    lo, hi = -(2 ** (acc_bits - 1)), 2 ** (acc_bits - 1) - 1
    for o, c, i in itertools.product(range(outer), range(n_c), range(inner)):
        v = int(acc[o, c, i]) + int(bias[c])
        if acc_bits < 64 and not lo <= v <= hi:
            overflows += 1
            v = clamp(v, lo, hi) if saturate_acc else wrap(v, acc_bits)
        y = mrs(v, mult[c], shift[c]) + out_zp  # exact: the kernel may only refuse, never differ
        out[o, c, i] = clamp(y, qmin, qmax)
    return out, overflows


def requantize_float(acc, bias, scale, out_zp, qmin, qmax, out_dtype):
    """Returns (out array of out_dtype, int32 wrap count). numpy float32 scalars do IEEE float32."""
    outer, n_c, inner = acc.shape
    out = np.zeros(acc.shape, dtype=out_dtype)
    wraps = 0
    lo = np.float32(qmin - out_zp)
    hi = np.float32(qmax - out_zp)
    for o, c, i in itertools.product(range(outer), range(n_c), range(inner)):
        v = int(acc[o, c, i]) + int(bias[c])
        w = wrap(v, 32)
        if w != v:
            wraps += 1
        f = np.float32(w) * np.float32(scale[c])  # float32 * float32 -> float32
        assert f.dtype == np.float32
        f = min(max(f, lo), hi)
        out[o, c, i] = clamp(int(np.rint(f)) + out_zp, qmin, qmax)
    return out, wraps


# ========================================================================================================
# gemm
# ========================================================================================================
def int_matmul(a, b):
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.int64)
    for i, j in itertools.product(range(m), range(n)):
        out[i, j] = sum(int(a[i, kk]) * int(b[kk, j]) for kk in range(k))
    return out


# ========================================================================================================
# convolutions
# ========================================================================================================
def conv_out_size(size, lo, hi, k, s, d):
    return (size + lo + hi - d * (k - 1) - 1) // s + 1


def conv2d_acc(x, x_zp, w, stride, pads, dilation, groups):
    n_img, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    sh, sw = stride
    top, left, bottom, right = pads
    dh, dw = dilation
    ho = conv_out_size(h, top, bottom, kh, sh, dh)
    wo = conv_out_size(wd, left, right, kw, sw, dw)
    cout_g = cout // groups
    out = np.zeros((n_img, cout, ho, wo), dtype=np.int64)
    for n, co, oh, ow in itertools.product(range(n_img), range(cout), range(ho), range(wo)):
        g = co // cout_g
        acc = 0
        for cl, ky, kx in itertools.product(range(cin_g), range(kh), range(kw)):
            ih = oh * sh + ky * dh - top
            iw = ow * sw + kx * dw - left
            if 0 <= ih < h and 0 <= iw < wd:
                acc += (int(x[n, g * cin_g + cl, ih, iw]) - x_zp) * int(w[co, cl, ky, kx])
        out[n, co, oh, ow] = acc
    return out


def dpbusd(acc, a, b):
    """One int32 lane of x86 VNNI ``vpdpbusd``: ``acc`` plus the four products of ``a``'s unsigned bytes and ``b``'s
    signed bytes (little-endian words), wrapped to int32 (the instruction does not saturate)."""
    total = int(acc)
    for j in range(4):
        ua = (int(a) >> (8 * j)) & 0xFF
        sb = (int(b) >> (8 * j)) & 0xFF
        total += ua * (sb - 256 if sb >= 128 else sb)
    return wrap(total, 32)


def tdpbsud_element(acc, a_row, b_words):
    """One int32 element of the AMX ``tdpbsud`` tile product: ``acc`` plus, for each of the ``len(a_row) // 4``
    words, the four products of ``a_row``'s signed bytes (int8 values, 4 per word) and the unsigned bytes of
    ``b_words[q]`` (little-endian int32 words), each word's sum added with int32 wrap-around (no saturation)."""
    total = int(acc)
    for q, word in enumerate(b_words):
        s = 0
        for j in range(4):
            s += int(a_row[4 * q + j]) * ((int(word) >> (8 * j)) & 0xFF)
        total = wrap(total + s, 32)
    return total


def conv2d_acc_u8s8(x, x_zp, w, stride, pads, dilation, groups):
    """``conv2d_acc`` the way the byte-quad kernel (kernels/conv_u8s8.py) computes it: bytes ``u = x - center``
    (center -128 for int8, 0 for uint8; padding ``u = x_zp - center``), for each output one int32 lane that
    ``dpbusd`` adds the quads of channels (4q..4q+3, missing ones 0) of every tap to, wrapping, then the weight-sum
    correction ``(center - x_zp) * sum(w)`` in int64."""
    n_img, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    sh, sw = stride
    top, left, bottom, right = pads
    dh, dw = dilation
    center = -128 if x.dtype == np.int8 else 0
    ho = conv_out_size(h, top, bottom, kh, sh, dh)
    wo = conv_out_size(wd, left, right, kw, sw, dw)
    cout_g = cout // groups
    out = np.zeros((n_img, cout, ho, wo), dtype=np.int64)
    for n, co, oh, ow in itertools.product(range(n_img), range(cout), range(ho), range(wo)):
        g = co // cout_g
        lane = 0
        for q, ky, kx in itertools.product(range(-(-cin_g // 4)), range(kh), range(kw)):
            ih = oh * sh + ky * dh - top
            iw = ow * sw + kx * dw - left
            a = b = 0
            for j in range(min(4, cin_g - 4 * q)):
                cl = 4 * q + j
                u = int(x[n, g * cin_g + cl, ih, iw]) - center if 0 <= ih < h and 0 <= iw < wd else x_zp - center
                a |= (u & 0xFF) << (8 * j)
                b |= (int(w[co, cl, ky, kx]) & 0xFF) << (8 * j)
            lane = dpbusd(lane, a, b)
        out[n, co, oh, ow] = lane + (center - x_zp) * int(w[co].astype(np.int64).sum())
    return out


def conv_transpose2d_acc(x, x_zp, w, stride, pads, dilation, groups, out_hw):
    n_img, cin, h, wd = x.shape
    _, cout_g, kh, kw = w.shape
    sh, sw = stride
    top, left, _, _ = pads
    dh, dw = dilation
    ho, wo = out_hw
    cin_g = cin // groups
    acc = [[[[0] * wo for _ in range(ho)] for _ in range(cout_g * groups)] for _ in range(n_img)]
    for n, ci, ih, iw, cl, ky, kx in itertools.product(range(n_img), range(cin), range(h), range(wd),
                                                       range(cout_g), range(kh), range(kw)):
        g = ci // cin_g
        oh = ih * sh + ky * dh - top
        ow = iw * sw + kx * dw - left
        if 0 <= oh < ho and 0 <= ow < wo:
            acc[n][g * cout_g + cl][oh][ow] += (int(x[n, ci, ih, iw]) - x_zp) * int(w[ci, cl, ky, kx])
    return np.array(acc, dtype=np.int64).reshape(n_img, cout_g * groups, ho, wo)


# ========================================================================================================
# pooling
# ========================================================================================================
def maxpool_window_ok(h, wd, kernel, stride, pads, dilation, out_hw):
    """True iff every max-pool window has at least one in-bounds cell."""
    kh, kw = kernel
    sh, sw = stride
    top, left = pads[0], pads[1]
    dh, dw = dilation
    ho, wo = out_hw
    rows_ok = all(any(0 <= oh * sh + ky * dh - top < h for ky in range(kh)) for oh in range(ho))
    cols_ok = all(any(0 <= ow * sw + kx * dw - left < wd for kx in range(kw)) for ow in range(wo))
    return rows_ok and cols_ok


def maxpool2d(x, kernel, stride, pads, dilation, out_hw):
    n_img, n_c, h, wd = x.shape
    kh, kw = kernel
    sh, sw = stride
    top, left = pads[0], pads[1]
    dh, dw = dilation
    ho, wo = out_hw
    out = np.zeros((n_img, n_c, ho, wo), dtype=x.dtype)
    for n, c, oh, ow in itertools.product(range(n_img), range(n_c), range(ho), range(wo)):
        vals = []
        for ky, kx in itertools.product(range(kh), range(kw)):
            ih = oh * sh + ky * dh - top
            iw = ow * sw + kx * dw - left
            if 0 <= ih < h and 0 <= iw < wd:
                vals.append(int(x[n, c, ih, iw]))
        out[n, c, oh, ow] = max(vals)
    return out


def avgpool2d(x, x_zp, kernel, stride, pads, count_include_pad, mult_by_count, shift_by_count, out_zp, qmin,
              qmax, out_shape, out_dtype):
    n_img, n_c, h, wd = x.shape
    kh, kw = kernel
    sh, sw = stride
    top, left, bottom, right = pads
    ho, wo = out_shape[2], out_shape[3]
    out = np.zeros((n_img, n_c, ho, wo), dtype=out_dtype)
    for n, c, oh, ow in itertools.product(range(n_img), range(n_c), range(ho), range(wo)):
        s = 0
        n_in = 0
        n_pad = 0
        for ky, kx in itertools.product(range(kh), range(kw)):
            ih = oh * sh + ky - top
            iw = ow * sw + kx - left
            if 0 <= ih < h and 0 <= iw < wd:
                s += int(x[n, c, ih, iw]) - x_zp
                n_in += 1
            if -top <= ih < h + bottom and -left <= iw < wd + right:
                n_pad += 1
        cnt = n_pad if count_include_pad else n_in
        y = mrs(mrs_domain(s), mult_by_count[cnt], shift_by_count[cnt]) + out_zp
        out[n, c, oh, ow] = clamp(y, qmin, qmax)
    return out


# ========================================================================================================
# elementwise
# ========================================================================================================
def add_rescaled(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, left_shift, sign_b, out_mult, out_shift,
                 out_zp, qmin, qmax, out_dtype):
    out = np.zeros(a.shape, dtype=out_dtype)
    for i in range(a.shape[0]):
        va = mrs(mrs_domain((int(a[i]) - a_zp) * 2 ** left_shift), a_mult, a_shift)
        vb = mrs(mrs_domain((int(b[i]) - b_zp) * 2 ** left_shift), b_mult, b_shift)
        s = va + sign_b * vb
        out[i] = clamp(mrs(mrs_domain(s), out_mult, out_shift) + out_zp, qmin, qmax)
    return out


def mul(a, a_zp, b, b_zp, mult, shift, out_zp, qmin, qmax, out_dtype):
    out = np.zeros(a.shape, dtype=out_dtype)
    for i in range(a.shape[0]):
        p = (int(a[i]) - a_zp) * (int(b[i]) - b_zp)
        out[i] = clamp(mrs(mrs_domain(p), mult, shift) + out_zp, qmin, qmax)
    return out


def leaky_relu(x, x_zp, pos_mult, pos_shift, neg_mult, neg_shift, out_zp, qmin, qmax, out_dtype):
    outer, n_c, inner = x.shape
    out = np.zeros(x.shape, dtype=out_dtype)
    for o, c, i in itertools.product(range(outer), range(n_c), range(inner)):
        d = int(x[o, c, i]) - x_zp
        if d >= 0:
            y = mrs(d, pos_mult, pos_shift)
        else:
            y = mrs(d, neg_mult[c], neg_shift[c])
        out[o, c, i] = clamp(y + out_zp, qmin, qmax)
    return out


def affine(x, x_zp, w, b, f_bits, out_zp, qmin, qmax, out_dtype):
    """Per-channel affine with one rounding, in Python ints: floor(((x - zx) w[c] + b[c]) / 2^F + 1/2)."""
    outer, n_c, inner = x.shape
    out = np.zeros(x.shape, dtype=out_dtype)
    for o, c, i in itertools.product(range(outer), range(n_c), range(inner)):
        acc = (int(x[o, c, i]) - x_zp) * int(w[c]) + int(b[c])
        y = (acc + (1 << (f_bits - 1))) // (1 << f_bits)  # floor division: ties toward +infinity
        out[o, c, i] = clamp(y + out_zp, qmin, qmax)
    return out


def row_sums(x):
    """Python-int sum of every row of a 2-D array."""
    return np.array([sum(int(v) for v in row) for row in x], dtype=np.int64)


def quantize_linear(x, scale, zp, qmin, qmax, out_dtype):
    """ONNX QuantizeLinear per element with numpy float32 scalars: rint(x / scale) (IEEE float32 division, half to
    even) + zp in float32; NaN -> 0; then clamped to [qmin, qmax]."""
    out = np.zeros(x.shape, dtype=out_dtype)
    for i, v in enumerate(x):
        q = np.float32(np.rint(np.float32(v) / np.float32(scale))) + np.float32(zp)
        out[i] = int(min(max(0.0 if np.isnan(q) else float(q), qmin), qmax))
    return out


def resize_nearest(x, rows, cols):
    """out[n, c, o, p] = x[n, c, rows[o], cols[p]], element by element."""
    n_img, n_c = x.shape[:2]
    out = np.zeros((n_img, n_c, len(rows), len(cols)), dtype=x.dtype)
    for n, c, o, p in itertools.product(range(n_img), range(n_c), range(len(rows)), range(len(cols))):
        out[n, c, o, p] = x[n, c, rows[o], cols[p]]
    return out


def resize_linear_acc(x, x_zp, y0, y1, wy, x0, x1, wx, frac_bits):
    n_img, n_c = x.shape[:2]
    one = 2 ** frac_bits
    out = np.zeros((n_img, n_c, len(y0), len(x0)), dtype=np.int64)
    for n, c, o, p in itertools.product(range(n_img), range(n_c), range(len(y0)), range(len(x0))):
        def d(i, j):
            return int(x[n, c, i, j]) - x_zp
        a, b = one - int(wy[o]), int(wy[o])
        u, v = one - int(wx[p]), int(wx[p])
        out[n, c, o, p] = (a * (u * d(y0[o], x0[p]) + v * d(y0[o], x1[p]))
                           + b * (u * d(y1[o], x0[p]) + v * d(y1[o], x1[p])))
    return out


# ========================================================================================================
# hypothesis strategies shared by the kernel tests
# ========================================================================================================
# (dtype, lo, hi): full 8/16-bit ranges plus int4/uint4 values stored in 8-bit arrays. Each dtype combination a
# kernel test draws is one more Numba compile (about 0.75 s): ``make test`` (tests/budget.py) leaves uint16 arrays
# to ``make test-full``, which draws every range (the model tests run uint16 activations end to end in both).
VALUE_RANGES = [
    (np.int8, -128, 127), (np.uint8, 0, 255), (np.int16, -32768, 32767),
    *([(np.uint16, 0, 65535)] if FULL else []),
    (np.int8, -8, 7), (np.uint8, 0, 15),
]
INT32_RANGE = (np.int32, -2 ** 31, 2 ** 31 - 1)  # an accumulator-wide output
OUT_RANGES = VALUE_RANGES + [INT32_RANGE]


def this_tests(ranges):
    """The (dtype, lo, hi) ranges the running test draws its arrays from: all of ``ranges`` in ``make test-full``;
    in ``make test`` those of one dtype, picked by a stable hash of the test's file and name (parameters left
    out), so each test compiles one dtype's kernels and the dtypes spread over the tests (each dtype combination
    is one more Numba compile, 1-3 s). Outside a pytest run: all of them."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].split("[")[0]
    if FULL or not test:
        return list(ranges)
    dtypes = list(dict.fromkeys(np.dtype(r[0]) for r in ranges))
    pick = dtypes[zlib.crc32(test.encode()) % len(dtypes)]
    return [r for r in ranges if np.dtype(r[0]) == pick]


@st.composite
def value_ranges(draw, ranges=VALUE_RANGES):
    """A (dtype, lo, hi) triple: array dtype and the range of values it holds (of :func:`this_tests` ranges)."""
    return draw(st.sampled_from(this_tests(ranges)))


@st.composite
def int_arrays(draw, shape, dtype, lo, hi):
    """An integer array of ``shape``/``dtype`` with values in [lo, hi]: uniform, edge values, small, or
    constant (seeded numpy generation keeps large arrays cheap)."""
    shape = tuple(shape)
    mode = draw(st.sampled_from(["uniform", "uniform", "edges", "small", "const"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if mode == "uniform":
        arr = rng.integers(lo, hi, size=shape, endpoint=True)
    elif mode == "edges":
        edges = np.array(sorted({lo, lo + 1, hi - 1, hi, max(lo, min(hi, 0))}), dtype=np.int64)
        arr = rng.choice(edges, size=shape)
    elif mode == "small":
        arr = rng.integers(max(lo, -3), min(hi, 3), size=shape, endpoint=True)
    else:
        arr = np.full(shape, draw(st.integers(lo, hi)), dtype=np.int64)
    return np.ascontiguousarray(arr.astype(dtype))


@st.composite
def zero_points(draw, lo, hi):
    """A zero point in [lo, hi], biased to the edges and the middle."""
    mid = (lo + hi + 1) // 2
    return draw(st.one_of(st.sampled_from(sorted({lo, hi, mid, max(lo, min(hi, 0))})), st.integers(lo, hi)))


@st.composite
def multipliers(draw, allow_negative=False):
    """(M, r) from quantize_multiplier (the twin) of a log-uniform real in [2**-40, 2**6] or of an edge real, exact 0,
    or a raw pair (random, or an edge: |M| = 2**31 - 1 with r = 0, 1, 62; M = 1 or 2**30 with r = 62)."""
    kind = draw(st.sampled_from(["log", "log", "log", "zero", "raw", "edge"]))
    if kind == "zero":
        return 0, 0
    if kind == "raw":
        lim = 2 ** 31 - 1
        m = draw(st.integers(-lim if allow_negative else 0, lim))
        return m, draw(st.integers(0, 62))
    if kind == "edge":  # ends of the log range, or raw pairs at the ends of |M| and r
        edge = draw(st.sampled_from([2.0 ** -40, 2.0 ** -31, 0.5, 1.0, 2.0 ** 6, 2.0 ** 6 - 2.0 ** -20,
                                     (2 ** 31 - 1, 0), (2 ** 31 - 1, 62), (2 ** 31 - 1, 1), (1, 62), (2 ** 30, 62)]))
        if isinstance(edge, tuple):
            m, r = edge
            return (-m if allow_negative and draw(st.booleans()) else m), r
        real = edge
    else:
        real = 2.0 ** draw(st.floats(-40.0, 6.0, allow_nan=False))
    if allow_negative and draw(st.booleans()):
        real = -real
    return quantize_multiplier(real)


@st.composite
def multiplier_arrays(draw, n, allow_negative=False):
    """Two int64 arrays (mult, shift) of length n."""
    pairs = [draw(multipliers(allow_negative)) for _ in range(n)]
    return (np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64))


def second_range(first, ranges=VALUE_RANGES):
    """The (dtype, lo, hi) of a kernel's second operand: any of ``ranges`` in ``make test-full``; in ``make test``
    the first operand's (each dtype combination a kernel test draws is one more Numba compile, ~1-2 s)."""
    return st.sampled_from(ranges) if FULL else st.just(first)


def out_ranges_like(first):
    """The output ranges a kernel test draws from: all of them in ``make test-full``; in ``make test`` the first
    operand's (its (dtype, lo, hi), or a dtype: its whole range) and int32 (the accumulator-wide output)."""
    if FULL:
        return OUT_RANGES
    if not isinstance(first, tuple):
        info = np.iinfo(first)
        first = (np.dtype(first).type, int(info.min), int(info.max))
    return [first, INT32_RANGE]


@st.composite
def out_params(draw, ranges=OUT_RANGES):
    """(out dtype, out_zp, qmin, qmax) with qmin <= qmax inside the dtype; sometimes a narrowed range."""
    dtype, lo, hi = draw(st.sampled_from(ranges))
    if draw(st.booleans()):
        a, b = sorted((draw(st.integers(lo, hi)), draw(st.integers(lo, hi))))
        lo, hi = a, b
    zp = draw(zero_points(lo, hi))
    return dtype, zp, lo, hi


@st.composite
def broadcast_case(draw):
    """(outer, mid, inner) output with each operand broadcast along a random subset of the axes."""
    shape = tuple(draw(st.integers(1, 4)) for _ in range(3))
    dt, lo, hi = draw(value_ranges())

    def operand():
        keep = [draw(st.booleans()) for _ in range(3)]
        return draw(int_arrays(tuple(d if k else 1 for d, k in zip(shape, keep)), dt, lo, hi))
    return shape, operand(), operand(), draw(zero_points(lo, hi)), draw(zero_points(lo, hi))
