"""Golden twins of the normalization kernels (``kernels/softmax.py``, ``kernels/layernorm.py``): plain Python
integers, one element at a time, written from the kernels' documented formulas. They never call the kernels
(the rounding rule comes from ``tests/naive.py``, itself written independently of ``kernels.fixedpoint``).
"""
import numpy as np

from tests.naive import clamp, mrs, mrs_domain

ONE = 2 ** 30


def _lut_bits(table) -> int:
    """K of a 2**K + 1 entry table."""
    return (len(table) - 1).bit_length() - 1


# ========================================================================================================
# softmax
# ========================================================================================================
def recip_q30(s: int, recip_lut) -> tuple[int, int]:
    """(y, h): y / 2**30 ~= 2**h / s; s >= 2**30."""
    k = _lut_bits(recip_lut)
    h = s.bit_length() - 1
    x = s // 2 ** (h - 30)
    f = x - ONE
    low = 30 - k
    i, fr = divmod(f, 2 ** low)
    r0, r1 = int(recip_lut[i]), int(recip_lut[i + 1])
    y0 = r0 - ((r0 - r1) * fr + 2 ** (low - 1)) // 2 ** low
    t = (x * y0 + 2 ** 29) // ONE
    y1 = (y0 * (2 ** 31 - t) + 2 ** 29) // ONE
    return clamp(y1, 2 ** 29, ONE), h


def _normalize(e: list[int], recip_lut, out_mult, out_shift, out_zp, qmin, qmax) -> list[int]:
    s = sum(e)
    y, h = recip_q30(s, recip_lut)
    out = []
    for v in e:
        p = (v * y + 2 ** (h - 2)) // 2 ** (h - 1)
        out.append(clamp(mrs(mrs_domain(p), out_mult, out_shift) + out_zp, qmin, qmax))
    return out


def softmax_lut8(x, exp_lut, recip_lut, out_mult, out_shift, out_zp, qmin, qmax, out_dtype):
    out = np.zeros(x.shape, dtype=out_dtype)
    for r in range(x.shape[0]):
        row = [int(v) for v in x[r]]
        m = max(row)
        e = [int(exp_lut[m - v]) for v in row]
        out[r] = _normalize(e, recip_lut, out_mult, out_shift, out_zp, qmin, qmax)
    return out


def exp2_q30(d: int, pos_mult, pos_shift, frac_bits, exp2_lut) -> int:
    k_lut = _lut_bits(exp2_lut)
    pos = mrs(mrs_domain(d), pos_mult, pos_shift)
    k, rem = divmod(pos, 2 ** frac_bits)
    if k >= 31:
        return 0
    g = frac_bits - k_lut
    i, fr = divmod(rem, 2 ** g)
    v = int(exp2_lut[i])
    if g > 0:
        v -= ((v - int(exp2_lut[i + 1])) * fr + 2 ** (g - 1)) // 2 ** g
    if k > 0:
        v = (v + 2 ** (k - 1)) // 2 ** k
    return v


def softmax_lut16(x, pos_mult, pos_shift, frac_bits, exp2_lut, recip_lut, out_mult, out_shift, out_zp, qmin, qmax,
                  out_dtype):
    out = np.zeros(x.shape, dtype=out_dtype)
    for r in range(x.shape[0]):
        row = [int(v) for v in x[r]]
        m = max(row)
        e = [exp2_q30(m - v, pos_mult, pos_shift, frac_bits, exp2_lut) for v in row]
        out[r] = _normalize(e, recip_lut, out_mult, out_shift, out_zp, qmin, qmax)
    return out


# ========================================================================================================
# layernorm
# ========================================================================================================
def rsqrt_q30(w: int, rsqrt_lut) -> int:
    """~ 2**30 / sqrt(w / 2**28) for w in [2**28, 2**30)."""
    j_bits = ((len(rsqrt_lut) - 1) // 3).bit_length() - 1
    low = 28 - j_bits
    j, fr = divmod(w - 2 ** 28, 2 ** low)
    r0, r1 = int(rsqrt_lut[j]), int(rsqrt_lut[j + 1])
    y0 = r0 - ((r0 - r1) * fr + 2 ** (low - 1)) // 2 ** low
    t = (y0 * y0 + 2 ** 29) // ONE
    v = (w * t + 2 ** 27) // 2 ** 28
    y1 = (y0 * (3 * ONE - v) + ONE) // 2 ** 31
    return clamp(y1, 2 ** 29, ONE)


def layernorm(x, x_zp, mean_bits, var_shift, eps_n, rsqrt_lut, norm_bits, gamma, bias, mult, shift, out_zp, qmin,
              qmax, out_dtype):
    rows, n = x.shape
    out = np.zeros(x.shape, dtype=out_dtype)
    for r in range(rows):
        c = [int(v) - x_zp for v in x[r]]
        s1 = sum(c)
        mu = (s1 * 2 ** (mean_bits + 1) + n) // (2 * n)          # round half up of s1 * 2**P / n
        dev = [v * 2 ** mean_bits - mu for v in c]
        if var_shift:
            v_sum = sum(((d + 2 ** (var_shift - 1)) // 2 ** var_shift) ** 2 for d in dev)
        else:
            v_sum = sum(d * d for d in dev)
        w = v_sum + eps_n
        if w == 0:
            y, sh = 0, 0
        else:
            hs = (w.bit_length() - 1 - 28) // 2
            wn = w // 2 ** (2 * hs) if hs >= 0 else w * 2 ** (-2 * hs)
            assert 2 ** 28 <= wn < 2 ** 30
            y = rsqrt_q30(wn, rsqrt_lut)
            sh = 44 + hs + var_shift - norm_bits
        for i in range(n):
            z = (dev[i] * y + (2 ** (sh - 1) if sh else 0)) // 2 ** sh
            acc = z * int(gamma[i]) + int(bias[i])
            out[r, i] = clamp(mrs(mrs_domain(acc), mult[i], shift[i]) + out_zp, qmin, qmax)
    return out
