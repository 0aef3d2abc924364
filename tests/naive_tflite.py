"""Golden twins of the ``kernels/tflite_*.py`` kernels: TFLite's integer arithmetic written again with Python
ints, straight from the C++ formulas (C truncating division written out), one element at a time.
They never call the kernels."""
import math

import numpy as np

I32_MIN, I32_MAX = -2 ** 31, 2 ** 31 - 1


def c_div(a: int, b: int) -> int:
    """C/C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def to_i32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - 2 ** 32 if x >= 2 ** 31 else x


def srdhm(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul, as written there (nudge, then truncating division)."""
    if a == b == I32_MIN:
        return I32_MAX
    ab = a * b
    nudge = 2 ** 30 if ab >= 0 else 1 - 2 ** 30
    return c_div(ab + nudge, 2 ** 31)


def rdbpot(x: int, e: int) -> int:
    """gemmlowp RoundingDivideByPOT: ties away from zero."""
    mask = 2 ** e - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


def mbqm32(x: int, m: int, s: int) -> int:
    left, right = max(s, 0), max(-s, 0)
    return rdbpot(srdhm(to_i32(x * 2 ** left), m), right)


def mbqm64(x: int, m: int, s: int) -> int:
    rm = (m + 2 ** 15) >> 16 if m < 0x7FFF0000 else 0x7FFF
    total = 15 - s
    return to_i32((x * rm + 2 ** (total - 1)) >> total)


def quantize_multiplier(d: float):
    if d == 0:
        return 0, 0
    q, e = math.frexp(d)
    m = int(math.copysign(math.floor(abs(q) * 2 ** 31 + 0.5), q))
    if m == 2 ** 31:
        m //= 2
        e += 1
    if e < -31:
        return 0, 0
    return m, e


def requantize(acc, bias, mult, shift, wide, zp, qmin, qmax, dtype):
    out = np.empty(acc.shape, dtype)
    for (o, c, i), a in np.ndenumerate(acc):
        v = int(a) + int(bias[c])
        r = mbqm64(v, int(mult[c]), int(shift[c])) if wide else mbqm32(to_i32(v), int(mult[c]), int(shift[c]))
        out[o, c, i] = min(max(r + zp, qmin), qmax)
    return out


def clampi(v, lo, hi):
    return min(max(int(v), int(lo)), int(hi))


def rescale(x, in_zp, m, s, out_zp, qmin, qmax):
    return [clampi(mbqm32(int(v) - in_zp, m, s) + out_zp, qmin, qmax) for v in x]


def add(a, b, zp1, zp2, m1, s1, m2, s2, mo, so, ls, subtract, out_zp, qmin, qmax):
    out = []
    for x, y in zip(a, b):
        v1 = mbqm32(to_i32((int(x) - zp1) * 2 ** ls), m1, s1)
        v2 = mbqm32(to_i32((int(y) - zp2) * 2 ** ls), m2, s2)
        r = to_i32(v1 - v2 if subtract else v1 + v2)
        out.append(clampi(mbqm32(r, mo, so) + out_zp, qmin, qmax))
    return out


def mul(a, b, zp1, zp2, m, s, out_zp, qmin, qmax):
    return [clampi(mbqm32(to_i32((int(x) - zp1) * (int(y) - zp2)), m, s) + out_zp, qmin, qmax) for x, y in zip(a, b)]


def avgpool(x, kernel, stride, pads, qmin, qmax):
    n, c, h, w = x.shape
    kh, kw = kernel
    top, left, bottom, right = pads
    ho = (h + top + bottom - kh) // stride[0] + 1
    wo = (w + left + right - kw) // stride[1] + 1
    out = np.empty((n, c, ho, wo), x.dtype)
    for b in range(n):
        for ch in range(c):
            for oy in range(ho):
                for ox in range(wo):
                    cells = [int(x[b, ch, yy, xx]) for yy in range(oy * stride[0] - top, oy * stride[0] - top + kh)
                             for xx in range(ox * stride[1] - left, ox * stride[1] - left + kw)
                             if 0 <= yy < h and 0 <= xx < w]
                    acc, cnt = sum(cells), len(cells)
                    r = c_div(acc + cnt // 2, cnt) if acc > 0 else c_div(acc - cnt // 2, cnt)
                    out[b, ch, oy, ox] = clampi(r, qmin, qmax)
    return out


def mean(rows, in_zp, m, s, out_zp, qmin, qmax):
    n = rows.shape[1]
    k = min(int(math.floor(math.log2(n))), 32, 31 + s)
    m2, s2 = c_div(m * 2 ** k, n), s - k
    return [clampi(mbqm32(to_i32(sum(int(v) for v in r) - n * in_zp), m2, s2) + out_zp, qmin, qmax) for r in rows]


def lut8(fn, s_in, zp_in, s_out, zp_out, qmin, qmax):
    """TFLite PopulateLookupTable in float32 (numpy float32 scalars), half away from zero."""
    f32 = np.float32
    table = np.empty(256, np.int8)
    inv = f32(1) / f32(s_out)
    for v in range(-128, 128):
        x = f32(s_in) * f32(v - zp_in)
        y = f32(1) / (f32(1) + f32(math.exp(-float(x)))) if fn == "Sigmoid" else f32(math.tanh(float(x)))
        t = float(f32(y * inv))
        r = math.floor(abs(t) + 0.5) * (1 if t >= 0 else -1)
        table[v & 0xFF] = clampi(r + zp_out, qmin, qmax)
    return table
