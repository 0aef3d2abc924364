"""layernorm == golden twin (tests/naive_norm.py), bit for bit; accuracy against a float LayerNorm; saturation,
extreme scales, constant rows, validation."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.fixedpoint import quantize_multiplier
from kernels.layernorm import layernorm, rsqrt_q30
from npu_sim.ops.layernorm import rsqrt_table, stats_params, var_params
from tests import naive, naive_norm


@st.composite
def ln_case(draw):
    dtype, lo, hi = draw(naive.value_ranges())
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 24)))
    x = draw(naive.int_arrays(shape, dtype, lo, hi))
    n = shape[1]
    x_zp = draw(naive.zero_points(lo, hi))
    mean_bits = draw(st.integers(0, 14))
    bits = np.dtype(dtype).itemsize * 8
    if draw(st.booleans()):
        scale = 2.0 ** draw(st.floats(-24, 4, allow_nan=False))
        eps = draw(st.sampled_from([0.0, 1e-12, 1e-5, 1e-2, 1.0]))
        mean_bits, var_shift, eps_n = stats_params(n, bits, scale, eps) if draw(st.booleans()) else (
            mean_bits, *var_params(n, bits, mean_bits, scale, eps))
    else:  # a larger pre-shift than needed, with a random eps
        var_shift, _ = var_params(n, bits, mean_bits, 1.0, 0.0)
        var_shift += draw(st.integers(0, 12))
        eps_n = draw(st.integers(0, 2 ** 40))
    rsqrt_lut = rsqrt_table(draw(st.integers(1, 10)))
    if draw(st.integers(0, 4)) == 0:  # any valid table
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        rsqrt_lut = np.sort(rng.integers(2 ** 29, 2 ** 30, size=rsqrt_lut.size, endpoint=True))[::-1].copy()
    g_bits = draw(st.integers(0, 17))
    norm_bits = draw(st.integers(0, min(30, 44 - g_bits)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    gamma = rng.integers(-(2 ** g_bits), 2 ** g_bits, size=n, endpoint=True)
    bias = rng.integers(-(2 ** 45), 2 ** 45, size=n, endpoint=True) >> draw(st.integers(0, 45))
    mult, shift = draw(naive.multiplier_arrays(n, allow_negative=True))
    dtype_out, out_zp, qmin, qmax = draw(naive.out_params(naive.out_ranges_like(x.dtype)))
    return (x, x_zp, mean_bits, var_shift, eps_n, rsqrt_lut, norm_bits, gamma, bias, mult, shift, out_zp, qmin,
            qmax, dtype_out)


@settings(deadline=None, max_examples=examples(250))
@given(ln_case())
def test_layernorm_matches_twin(case):
    *args, dtype = case
    expected = naive_norm.layernorm(*args, dtype)
    out = np.empty(args[0].shape, dtype)
    layernorm(*args, out)
    np.testing.assert_array_equal(out, expected)


@settings(deadline=None, max_examples=examples(200))
@given(st.integers(2 ** 28, 2 ** 30 - 1), st.integers(5, 10))
def test_rsqrt_accuracy(w, j):
    y = rsqrt_q30(w, rsqrt_table(j), j)
    assert y == naive_norm.rsqrt_q30(w, rsqrt_table(j))
    # interpolation error <= (2**-J)**2 * 3/32 (f'' = 3/4 u**-2.5), the Newton step leaves 1.5 * err**2,
    # plus a few roundings of 2**-30 (J = 7 on the default board: 5e-11 + 4e-9)
    interp = 2.0 ** (-2 * j) * 3 / 32
    assert abs(y / 2 ** 30 * math.sqrt(w / 2 ** 28) - 1) < 1.5 * interp ** 2 + 2 ** -28


def _int_ln(x, x_zp, s_x, gamma_q, s_g, beta, s_y, y_zp, dtype_out, eps=1e-5, lut_bits=9):
    """Prepare like npu_sim.ops.layernorm (per-tensor gamma) and run the kernel."""
    n = x.shape[1]
    bits = np.dtype(x.dtype).itemsize * 8
    mean_bits, vs, eps_n = stats_params(n, bits, s_x, eps)
    f = 30
    bias = np.rint(beta * 2.0 ** f / (math.sqrt(n) * s_g)).astype(np.int64)
    m, r = quantize_multiplier(math.sqrt(n) * s_g * 2.0 ** -f / s_y)
    info = np.iinfo(dtype_out)
    out = np.empty(x.shape, dtype_out)
    layernorm(x, x_zp, mean_bits, vs, eps_n, rsqrt_table(lut_bits - 2), f, gamma_q.astype(np.int64), bias,
              np.full(n, m), np.full(n, r), y_zp, info.min, info.max, out)
    return out


@pytest.mark.parametrize("dtype,s_x,n,s_y", [(np.int8, 0.05, 64, 0.03), (np.uint8, 2e-3, 7, 0.02),
                                             (np.int16, 1e-4, 96, 1.5e-4), (np.int16, 3e-6, 300, 1.2e-4),
                                             (np.int8, 40.0, 16, 0.04)])
def test_layernorm_accuracy_against_float(dtype, s_x, n, s_y):
    """Within 0.5 output LSB (+ 0.01) of float64 LayerNorm of the same integers. The 0.01 covers the mean's
    rounding (2**-(P+1) input LSB, i.e. 2**-(P+1) / sigma normalized) and z's (sqrt(n) 2**-25 normalized), times
    |gamma| / s_y."""
    rng = np.random.default_rng(n)
    info = np.iinfo(dtype)
    zp = int((int(info.min) + int(info.max) + 1) // 2) if info.min == 0 else 0
    x = np.clip(rng.normal(zp, (int(info.max) - int(info.min)) / 8, size=(32, n)), info.min, info.max).astype(dtype)
    x[0] = zp  # a constant row: W = n * eps only
    gamma_q = rng.integers(40, 127, size=n)
    s_g = 0.01
    beta = rng.normal(0, 0.2, size=n)
    out_dtype = np.int16 if np.dtype(dtype).itemsize == 2 else np.int8
    got = _int_ln(x, zp, s_x, gamma_q, s_g, beta, s_y, 0, out_dtype)
    xf = (x.astype(np.float64) - zp) * s_x
    mu = xf.mean(axis=1, keepdims=True)
    var = ((xf - mu) ** 2).mean(axis=1, keepdims=True)
    ref = (xf - mu) / np.sqrt(var + 1e-5) * (gamma_q * s_g) + beta
    ref_q = ref / s_y
    ok = np.abs(ref_q) < np.iinfo(out_dtype).max - 1
    err = np.abs(got.astype(np.float64) - ref_q)[ok]
    assert err.max() <= 0.5 + 0.01, err.max()


def test_layernorm_constant_row_gives_beta_and_saturates():
    x = np.full((2, 5), 17, np.int8)
    n = 5
    m, r = quantize_multiplier(1.0)
    gamma = np.full(n, 100, np.int64)
    bias = np.array([0, 3, -3, 1000, -1000], np.int64)
    out = np.empty(x.shape, np.int8)
    layernorm(x, 0, 8, 0, 0, rsqrt_table(7), 24, gamma, bias, np.full(n, m), np.full(n, r), 0, -128, 127, out)
    assert out.tolist() == [[0, 3, -3, 127, -128]] * 2
    layernorm(x, 0, 8, 0, 0, rsqrt_table(7), 24, gamma, bias, np.full(n, m), np.full(n, r), 0, -10, 10, out)
    assert out.tolist() == [[0, 3, -3, 10, -10]] * 2
    # an epsilon that dwarfs the variance (shift >= 63): every z rounds to 0 -> beta
    x2 = np.array([[89, 35, 2, -59, 0]] * 2, np.int8)
    layernorm(x2, 0, 9, 4, 2 ** 60, rsqrt_table(7), 0, gamma, bias, np.full(n, m), np.full(n, r), 0, -128, 127, out)
    assert out.tolist() == [[0, 3, -3, 127, -128]] * 2


def test_layernorm_two_values_extreme_scales():
    """Two distinct values: normalized to exactly -1 and +1 whatever the input scale (eps negligible)."""
    for dtype, lo, hi in ((np.int8, -128, 127), (np.int8, 0, 1), (np.int16, -32768, 32767), (np.uint16, 7, 8)):
        x = np.array([[lo, hi] * 4], dtype)
        n = 8
        s_y = 1 / 64
        m, r = quantize_multiplier(math.sqrt(n) * 1.0 * 2.0 ** -24 / s_y)
        out = np.empty(x.shape, np.int16)
        layernorm(x, 0, 4, 0, 0, rsqrt_table(7), 24, np.ones(n, np.int64), np.zeros(n, np.int64), np.full(n, m),
                  np.full(n, r), 0, -32768, 32767, out)
        assert out.tolist() == [[-64, 64] * 4], (dtype, out)


def test_layernorm_validation():
    x = np.zeros((2, 3), np.int8)
    out = np.empty((2, 3), np.int8)
    one = np.ones(3, np.int64)
    zero = np.zeros(3, np.int64)
    args = dict(x_zp=0, mean_bits=8, var_shift=0, eps_n=0, rsqrt_lut=rsqrt_table(7), norm_bits=24, gamma=one,
                bias=zero, mult=one, shift=zero, out_zp=0, qmin=-128, qmax=127)

    def call(**kw):
        a = dict(args, **kw)
        layernorm(kw.get("x", x), a["x_zp"], a["mean_bits"], a["var_shift"], a["eps_n"], a["rsqrt_lut"],
                  a["norm_bits"], a["gamma"], a["bias"], a["mult"], a["shift"], a["out_zp"], a["qmin"], a["qmax"],
                  kw.get("out", out))

    call()
    with pytest.raises(ValueError, match="mean_bits"):
        call(mean_bits=15)
    with pytest.raises(ValueError, match="3 \\* 2\\*\\*J"):
        call(rsqrt_lut=rsqrt_table(7)[:-1])
    with pytest.raises(ValueError, match="non-increasing"):
        call(rsqrt_lut=rsqrt_table(7)[::-1].copy())
    with pytest.raises(ValueError, match="variance"):
        call(x=np.zeros((1, 16), np.int16), out=np.empty((1, 16), np.int8), mean_bits=14)
    with pytest.raises(ValueError, match="norm_bits"):
        call(norm_bits=31)
    with pytest.raises(ValueError, match="gamma"):
        call(gamma=np.full(3, 2 ** 18))
    with pytest.raises(ValueError, match="shape"):
        call(bias=np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="eps_n"):
        call(eps_n=-1)
