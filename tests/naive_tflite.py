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
        if fn == "Sigmoid":
            e = math.inf if -float(x) > 709 else math.exp(-float(x))  # float64's own overflow
            with np.errstate(over="ignore"):  # beyond float32's range: inf, as a float32 exp returns
                y = f32(1) / (f32(1) + f32(e))
        else:
            y = f32(math.tanh(float(x)))
        t = float(f32(y * inv))
        r = math.floor(abs(t) + 0.5) * (1 if t >= 0 else -1)
        table[v & 0xFF] = clampi(r + zp_out, qmin, qmax)
    return table


# ---- resize ---------------------------------------------------------------------------------------------------
def _round_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def nearest_index(o, n_in, n_out, align_corners, half_pixel):
    f32 = np.float32
    scale = f32(n_in - 1) / f32(n_out - 1) if (align_corners and n_out > 1) else f32(n_in) / f32(n_out)
    v = float(f32(f32(o) + f32(0.5 if half_pixel else 0.0)) * f32(scale))
    src = min(_round_away(v) if align_corners else math.floor(v), n_in - 1)
    return max(0, src) if half_pixel else src


def resize_nearest(x, hw, align_corners, half_pixel):
    n, c, h, w = x.shape
    out = np.empty((n, c) + tuple(hw), x.dtype)
    for oy in range(hw[0]):
        for ox in range(hw[1]):
            out[:, :, oy, ox] = x[:, :, nearest_index(oy, h, hw[0], align_corners, half_pixel),
                                  nearest_index(ox, w, hw[1], align_corners, half_pixel)]
    return out


def _interp(o, n_in, n_out, align_corners, half_pixel):
    if align_corners and n_out > 1:
        scale = c_div(1024 * (n_in - 1) + (n_out - 1) // 2, n_out - 1)
    else:
        scale = c_div(1024 * n_in + n_out // 2, n_out)
    p = o * scale + (c_div(scale, 2) - 512 if half_pixel else 0)
    return p, max(c_div(p, 1024), 0), min(c_div(p + 1023, 1024), n_in - 1)


def resize_bilinear(x, hw, align_corners, half_pixel):
    n, c, h, w = x.shape
    out = np.empty((n, c) + tuple(hw), x.dtype)
    for b in range(n):
        for ch in range(c):
            for oy in range(hw[0]):
                py, y0, y1 = _interp(oy, h, hw[0], align_corners, half_pixel)
                for ox in range(hw[1]):
                    px, x0, x1 = _interp(ox, w, hw[1], align_corners, half_pixel)
                    dy, dx = py - 1024 * y0, px - 1024 * x0
                    s = (int(x[b, ch, y0, x0]) * (1024 - dy) * (1024 - dx) + int(x[b, ch, y1, x0]) * dy * (1024 - dx)
                         + int(x[b, ch, y0, x1]) * (1024 - dy) * dx + int(x[b, ch, y1, x1]) * dy * dx)
                    out[b, ch, oy, ox] = c_div(s + (2 ** 19 if s > 0 else -2 ** 19), 2 ** 20)
    return out


# ---- hard swish (int16 fixed point as gemmlowp writes it) ---------------------------------------------------------
def srdhm16(a, b):
    if a == b == -32768:
        return 32767
    ab = a * b
    return c_div(ab + (2 ** 14 if ab >= 0 else 1 - 2 ** 14), 2 ** 15)


def sdhm16(a, b):
    return 32767 if a == b == -32768 else c_div(a * b, 2 ** 15)


def sat16(v):
    return min(max(v, -32768), 32767)


def hardswish(x, in_zp, out_zp, m_out, e_out, m_relu, e_relu):
    out = []
    for q in x:
        h = (int(q) - in_zp) * 128
        pre = srdhm16(h, m_out)
        r = h
        if e_relu > 0:
            r = sat16(r * 2 ** (e_relu - 1))
        r = srdhm16(r, m_relu)
        if e_relu > 0:
            r = sat16(r * 2)
        elif e_relu < 0:
            r = rdbpot(r, -e_relu)
        r = (r + 32768) // 2
        out.append(clampi(rdbpot(sdhm16(r, pre), -e_out) + out_zp, -128, 127))
    return out


# ---- int16 logistic / tanh --------------------------------------------------------------------------------------
def sigmoid_table(plus_one):
    return [min(math.floor(65536 / (1 + math.exp(-i / 24)) + 0.5), 65535) + (i in plus_one) for i in range(256)]


def sigmoid16(x, fn, mult, ls, table):
    out = []
    for q in x:
        v = (int(q) * mult + (2 ** (ls - 1) if ls else 0)) // 2 ** ls
        a = abs(v)
        if fn == "Sigmoid":
            u, frac = a // 512, a % 512
            r = 0x7FFF * 1024 if u >= 255 else table[u] * 512 + frac * (table[u + 1] - table[u])
            r = r + 512 if v >= 0 else 2 ** 25 - r + 511
            out.append(r // 1024)
        else:
            u, frac = a // 256, a % 256
            r = 0xFFFF * 256 if u >= 255 else table[u] * 256 + frac * (table[u + 1] - table[u])
            r = r - 2 ** 23 + 128 if v >= 0 else 2 ** 23 - r + 127
            out.append(r // 256)
    return out


# ---- softmax ----------------------------------------------------------------------------------------------------
def _sat_left(x, e):
    thr = 2 ** (31 - e) - 1
    return I32_MAX if x > thr else (I32_MIN if x < -thr else x * 2 ** e)


def exp_on_negative_values(a):
    """gemmlowp exp for a Q5.26 input a <= 0, Q0.31 result, as written there."""
    c = lambda v: math.floor(v * 2 ** 31 + 0.5)  # noqa: E731  (a Q0.31 constant)
    quarter = 2 ** 24
    amq = (a & (quarter - 1)) - quarter
    x = to_i32(_sat_left(amq, 5) + 2 ** 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    t = rdbpot(to_i32(srdhm(to_i32(rdbpot(x4, 2) + x3), c(1 / 3)) + x2), 1)
    result = to_i32(c(math.exp(-1 / 8)) + srdhm(c(math.exp(-1 / 8)), to_i32(x + t)))
    rem = to_i32(amq - a)
    for k in range(-2, 5):
        if rem & 2 ** (26 + k):
            result = srdhm(result, c(math.exp(-2.0 ** k)))
    return I32_MAX if a == 0 else result


def one_over_one_plus_x(a):
    s = a + I32_MAX
    half = c_div(s + (1 if s >= 0 else -1), 2)
    x = to_i32(math.floor(48 / 17 * 2 ** 29 + 0.5) + srdhm(half, -math.floor(32 / 17 * 2 ** 29 + 0.5)))
    for _ in range(3):
        x = to_i32(x + _sat_left(srdhm(x, to_i32(2 ** 29 - srdhm(half, x))), 2))
    return _sat_left(x, 1)


def _rdbpot_x86(x, e):
    """gemmlowp's RoundingDivideByPOT on int32 as x86 computes it: for e >= 32 (undefined in C++) the mask
    (1 << e) - 1 truncates to -1 and the shift count is taken mod 32."""
    if e < 32:
        return rdbpot(x, e)
    remainder, threshold = x, -1 + (1 if x < 0 else 0)
    return (x >> (e % 32)) + (1 if remainder > threshold else 0)


def softmax8(rows, m, ls, diff_min):
    out = []
    for row in rows:
        row = [int(v) for v in row]
        mx = max(row)
        exps = [exp_on_negative_values(srdhm(to_i32((v - mx) * 2 ** ls), m)) if v - mx >= diff_min else None
                for v in row]
        total = sum(rdbpot(e, 12) for e in exps if e is not None)
        h = 32 - total.bit_length()
        recip = one_over_one_plus_x(to_i32((total * 2 ** h) % 2 ** 32 - 2 ** 31))
        out.append([-128 if e is None else clampi(_rdbpot_x86(srdhm(recip, e), 12 - h + 23) - 128, -128, 127)
                    for e in exps])
    return out


def lut16(v, lut):
    i = 256 + (v >> 7)
    return int(lut[i]) + (((int(lut[i + 1]) - int(lut[i])) * (v & 127) + 64) >> 7)


def softmax16(rows, m, s, exp_lut, recip_lut):
    out = []
    for row in rows:
        row = [int(v) for v in row]
        mx = max(row)
        exps = [lut16(clampi(mbqm32(v - mx, m, s) + 32767, -32768, 32767), exp_lut) for v in row]
        total = sum(exps)
        h = 32 - total.bit_length()
        t = clampi(((total * 2 ** (h - 1)) + 2 ** 13) // 2 ** 14 - 98304, -32768, 32767)
        r = lut16(t, recip_lut)
        out.append([clampi((e * r + 2 ** (30 - h)) // 2 ** (31 - h), 0, 32767) for e in exps])
    return out


def int16_lut(fn, in_min, in_max, out_min, out_max):
    """TFLite's int16 gen_lut in float64 (the build LiteRT 2.15 runs): fn sampled on the 513-point grid
    x_k = in_min + k * step, step = (in_max - in_min) / 512, in output units of (out_max - out_min) / 65536. Entry
    k < 512 is round(f(x_k)) minus half the midpoint error of the linear interpolation, i.e. of
    round((f(x_k+1) + round(f(x_k))) / 2) against round(f(x_k + step / 2)); entry 512 is round(f(in_max)).
    Every round is half away from zero; entries saturate to int16."""
    step = (in_max - in_min) / 512
    unit = 65536 / (out_max - out_min)
    grid = [in_min + k * step for k in range(513)]
    f = [fn(x) * unit for x in grid]
    table = []
    for k in range(512):
        sample = _round_away(f[k])
        interpolated = _round_away((f[k + 1] + sample) / 2)
        exact = _round_away(fn(grid[k] + step / 2) * unit)
        table.append(sat16(sample - _round_away((interpolated - exact) / 2)))
    return table + [sat16(_round_away(fn(in_max) * unit))]


def softmax16_tables():
    """SoftmaxInt16's two tables: exp on [-10, 0] and 1/(1+x) on [0, 1], both with outputs on [-1, 1]."""
    return int16_lut(math.exp, -10.0, 0.0, -1.0, 1.0), int16_lut(lambda x: 1 / (1 + x), 0.0, 1.0, -1.0, 1.0)


# ---- leaky relu, prelu, maximum / minimum ---------------------------------------------------------------------------
def slope(x, alpha, in_zp, alpha_zp, m1, s1, m2, s2, out_zp, qmin, qmax):
    """TFLite's QuantizeLeakyRelu / BroadcastPrelu4DSlow, one element at a time (``alpha``: one integer per
    element of ``x``, already broadcast)."""
    out = []
    for v, a in zip(np.asarray(x).reshape(-1).tolist(), np.asarray(alpha).reshape(-1).tolist()):
        v -= in_zp
        r = mbqm32(v, m1, s1) if v >= 0 else mbqm32(to_i32(v * (a - alpha_zp)), m2, s2)
        out.append(clampi(r + out_zp, qmin, qmax))
    return out


def maxmin(a, b, maximum, qmin, qmax):
    return [clampi(max(int(x), int(y)) if maximum else min(int(x), int(y)), qmin, qmax)
            for x, y in zip(np.asarray(a).reshape(-1).tolist(), np.asarray(b).reshape(-1).tolist())]


def abs_(x, in_zp, m, s, out_zp, qmin, qmax, rescale=True):
    """TFLite's ABS: |x - zp_in| (rescaled where the scales differ) + zp_out, clamped."""
    return [clampi((mbqm32(abs(int(v) - in_zp), m, s) if rescale else abs(int(v) - in_zp)) + out_zp, qmin, qmax)
            for v in np.asarray(x).reshape(-1).tolist()]


def lut16_float32(fn, s_in, s_out):
    """LUTPopulateInt16 in float32 (zero points 0), every step rounded to float32 as the C++ float code does."""
    f = np.float32
    in_min, in_max = f(s_in) * f(-32768), f(s_in) * f(32767)
    inv = f(65536) / (f(s_out) * f(32767) - f(s_out) * f(-32768))
    step = (in_max - in_min) / f(512)

    def r(v):  # an infinity (a float32 sum past its range, as in C++) stays one
        return v if not math.isfinite(float(v)) else f(math.copysign(math.floor(abs(float(v)) + 0.5), float(v)))
    table = []
    for i in range(512):
        x = in_min + f(i) * step
        sample = r(fn(x) * inv)
        interp = r((fn(in_min + f(i + 1) * step) * inv + sample) / f(2))
        table.append(int(sat16(float(sample - r((interp - r(fn(x + step / f(2)) * inv)) / f(2))))))
    return table + [int(sat16(float(r(fn(in_max) * inv))))]
