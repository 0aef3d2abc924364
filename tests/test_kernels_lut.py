"""lut8 / lut16 == golden twins (tests/naive_lut.py), bit for bit; table builders == their plain twins;
saturation and extreme scales."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from kernels.lut16 import lut16
from kernels import lut8 as lut8_module
from kernels.lut8 import lut8, lut_codes
from npu_sim.ir import QParams
from npu_sim.ops import lut
from tests import naive, naive_lut

IN8 = [(np.int8, -128, 127), (np.uint8, 0, 255)]
IN16 = [(np.int16, -32768, 32767), (np.uint16, 0, 65535)]
TABLE8_DTYPES = [(np.int8, -128, 127), (np.uint8, 0, 255), (np.int16, -32768, 32767), (np.uint16, 0, 65535)]


def _table(draw, n, dtype, lo, hi):
    kind = draw(st.sampled_from(["uniform", "monotone", "extremes", "const"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if kind == "uniform":
        t = rng.integers(lo, hi, size=n, endpoint=True)
    elif kind == "monotone":
        t = np.sort(rng.integers(lo, hi, size=n, endpoint=True))
        if draw(st.booleans()):
            t = t[::-1]
    elif kind == "extremes":  # steepest possible segments: every difference is +-(hi - lo)
        t = rng.choice(np.array([lo, hi]), size=n)
    else:
        t = np.full(n, draw(st.integers(lo, hi)))
    return np.ascontiguousarray(t.astype(dtype))


@st.composite
def lut8_case(draw):
    xd, xlo, xhi = draw(st.sampled_from(IN8))
    x = draw(naive.int_arrays((draw(st.integers(1, 300)),), xd, xlo, xhi))
    td, tlo, thi = draw(st.sampled_from(TABLE8_DTYPES))
    return x, _table(draw, 256, td, tlo, thi)


@settings(deadline=None, max_examples=examples(150))
@given(lut8_case())
def test_lut8_matches_twin(case):
    x, table = case
    out = np.empty(x.shape, table.dtype)
    lut8(x, table, out)
    np.testing.assert_array_equal(out, naive_lut.lut8(x, table, table.dtype))
    cache = {}  # a node's cache: other data of the same shape reuses it, another shape is validated again
    for data in (x, x[::-1].copy(), np.concatenate([x, x[:1]])):
        out = np.empty(data.shape, table.dtype)
        lut8(data, table, out, cache=cache)
        np.testing.assert_array_equal(out, naive_lut.lut8(data, table, table.dtype))


@pytest.mark.parametrize("isa", [None] + ([lut8_module.ISA] if lut8_module.ISA else []), ids=lambda i: i or "scalar")
@settings(deadline=None, max_examples=examples(100))
@given(st.sampled_from(IN8), st.sampled_from(TABLE8_DTYPES[:2]), st.integers(0, 200), st.data())
def test_byte_tables_on_both_paths_match_twin(isa, xr, tr, n, data):
    """A byte table indexed by bytes: 32 elements at a time by ``vpshufb`` where the CPU has AVX2, the tail and
    other CPUs one by one (forced here both ways); the twin's bytes, at every length around the 32-element steps
    and for every code."""
    xd, xlo, xhi = xr
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    x = rng.integers(xlo, xhi + 1, n).astype(xd)
    if n >= 256:  # every code once, in a shuffled order
        x[:256] = rng.permutation(np.arange(xlo, xhi + 1)).astype(xd)
    table = _table(data.draw, 256, *tr)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lut8_module, "ISA", isa)
        for fn in (lut8, lut_codes):
            out = np.empty(n, table.dtype)
            fn(x, table, out)
            np.testing.assert_array_equal(out, naive_lut.lut8(x, table, table.dtype), err_msg=fn.__name__)


@pytest.mark.skipif(lut8_module.ISA is None, reason="the vector kernel needs AVX2, which this CPU lacks")
def test_byte_tables_on_strided_arrays_match_twin():
    """The vector path reads and writes 32 bytes in a row: strided arrays given to the kernel go one by one."""
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, 200).astype(np.int8)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    raw, rows = lut8_module.raw_order(table, np.int8), lut8_module.byte_rows(lut8_module.raw_order(table, np.int8))
    out = np.zeros(200, np.int8)
    lut8_module._gather_bytes(x[::2].view(np.uint8), rows, raw, out[::2].view(np.uint8))
    np.testing.assert_array_equal(out[::2], naive_lut.lut8(x[::2], table, np.int8))
    assert not out[1::2].any()  # nothing written between the strided elements


def test_lut8_every_code():
    for xd in (np.int8, np.uint8):
        x = np.arange(np.iinfo(xd).min, np.iinfo(xd).max + 1).astype(xd)
        table = np.arange(256, dtype=np.int16)[::-1].copy() * 100
        out = np.empty(256, np.int16)
        lut8(x, table, out)
        np.testing.assert_array_equal(out, table)  # code qmin + j reads entry j


@st.composite
def lut_codes_case(draw):
    xd, xlo, xhi = draw(st.sampled_from(IN8 + IN16))
    x = draw(naive.int_arrays((draw(st.integers(1, 300)),), xd, xlo, xhi))
    td, tlo, thi = draw(st.sampled_from(TABLE8_DTYPES))
    return x, _table(draw, 1 << (8 * np.dtype(xd).itemsize), td, tlo, thi)


@settings(deadline=None, max_examples=examples(100))
@given(lut_codes_case())
def test_lut_codes_matches_twin(case):
    x, table = case
    out = np.empty(x.shape, table.dtype)
    lut_codes(x, table, out, cache={})
    np.testing.assert_array_equal(out, naive_lut.lut_codes(x, table, table.dtype))


def test_lut_codes_every_code_and_refusals():
    for xd in (np.int8, np.uint8, np.int16, np.uint16):
        x = np.arange(np.iinfo(xd).min, np.iinfo(xd).max + 1).astype(xd)
        table = (np.arange(x.size, dtype=np.int64) * 7919 % 65536 - 32768).astype(np.int16)
        out = np.empty(x.size, np.int16)
        lut_codes(x, table, out)
        np.testing.assert_array_equal(out, table)  # code qmin + j reads entry j, the lowest and highest included
    with pytest.raises(ValueError, match="65536 entries"):
        lut_codes(np.zeros(3, np.int16), np.zeros(256, np.int8), np.zeros(3, np.int8))
    with pytest.raises(ValueError, match="dtype in"):
        lut8(np.zeros(3, np.int16), np.zeros(256, np.int8), np.zeros(3, np.int8))


@st.composite
def lut16_case(draw):
    xd, xlo, xhi = draw(st.sampled_from(IN16))
    x = draw(naive.int_arrays((draw(st.integers(1, 300)),), xd, xlo, xhi))
    k = draw(st.sampled_from([1, 2, 4, 8, 9, 10, 12, 16]))
    td, tlo, thi = draw(st.sampled_from([(np.int16, -32768, 32767), (np.uint16, 0, 65535)]))
    table = _table(draw, 2 ** k + 1, td, tlo, thi)
    od, olo, ohi = draw(st.sampled_from([(np.int16, -32768, 32767), (np.uint16, 0, 65535), (np.int8, -128, 127),
                                         (np.uint8, 0, 255), (np.int32, -2 ** 31, 2 ** 31 - 1)]))
    if draw(st.booleans()):
        olo, ohi = sorted((draw(st.integers(olo, ohi)), draw(st.integers(olo, ohi))))
    return x, table, olo, ohi, od


@settings(deadline=None, max_examples=examples(200))
@given(lut16_case())
def test_lut16_matches_twin(case):
    x, table, qmin, qmax, od = case
    out = np.empty(x.shape, od)
    lut16(x, table, qmin, qmax, out)
    expected = naive_lut.lut16(x, table, qmin, qmax, od)
    np.testing.assert_array_equal(out, expected)
    assert out.min() >= qmin and out.max() <= qmax  # saturation holds for any table
    cache = {}  # a node's cache: other data of the same shape reuses it, another shape is validated again
    for data in (x, x[::-1].copy(), np.concatenate([x, x[:1]])):
        out = np.empty(data.shape, od)
        lut16(data, table, qmin, qmax, out, cache=cache)
        np.testing.assert_array_equal(out, naive_lut.lut16(data, table, qmin, qmax, od))


def test_lut16_grid_points_and_ties():
    x = np.array([-32768, -32768 + 128, -32768 + 64, -32768 + 63, -32768 + 65, 32767], np.int16)
    table = np.zeros(513, np.int16)
    table[1] = 1        # segment 0 rises by 1 over 128 codes: half-way (frac 64) is a tie, rounded up
    table[511], table[512] = -32768, 32767  # steepest last segment: 65535 * 127 / 128 fits the int64 product
    out = np.empty(6, np.int16)
    lut16(x, table, -32768, 32767, out)
    assert out.tolist() == [0, 1, 1, 0, 1, -32768 + (65535 * 127 + 64) // 128]
    assert naive_lut.lut16(x, table, -32768, 32767, np.int16).tolist() == out.tolist()  # the twin, by hand too
    neg = np.zeros(513, np.int16)
    neg[1] = -1         # falling segment: -0.5 rounds toward +infinity (floor shift), -0.51 to -1
    out2 = np.empty(3, np.int16)
    lut16(np.array([-32768 + 64, -32768 + 65, -32768 + 63], np.int16), neg, -32768, 32767, out2)
    assert out2.tolist() == [0, -1, 0]
    assert naive_lut.lut16(np.array([-32768 + 64, -32768 + 65, -32768 + 63], np.int16), neg, -32768, 32767,
                           np.int16).tolist() == [0, -1, 0]


def test_lut16_full_table_is_a_gather():
    rng = np.random.default_rng(5)
    table = rng.integers(0, 65535, 65537, endpoint=True).astype(np.uint16)
    x = np.arange(65536).astype(np.uint16)
    out = np.empty(65536, np.uint16)
    lut16(x, table, 0, 65535, out)
    np.testing.assert_array_equal(out, table[:-1])


def test_kernel_validation():
    with pytest.raises(ValueError, match="256"):
        lut8(np.zeros(3, np.int8), np.zeros(255, np.int8), np.empty(3, np.int8))
    with pytest.raises(ValueError, match="dtype"):
        lut8(np.zeros(3, np.int16), np.zeros(256, np.int8), np.empty(3, np.int8))
    with pytest.raises(ValueError, match="table dtype"):
        lut8(np.zeros(3, np.int8), np.zeros(256, np.int8), np.empty(3, np.int16))
    with pytest.raises(ValueError, match=r"2\*\*k \+ 1"):
        lut16(np.zeros(3, np.int16), np.zeros(512, np.int16), -32768, 32767, np.empty(3, np.int16))
    with pytest.raises(ValueError, match="dtype"):
        lut16(np.zeros(3, np.int8), np.zeros(513, np.int16), -32768, 32767, np.empty(3, np.int16))
    with pytest.raises(ValueError, match="qmin"):
        lut16(np.zeros(3, np.int16), np.zeros(513, np.int16), -40000, 32767, np.empty(3, np.int16))


# ---- table builders against their plain twins ---------------------------------------------------------------
# Arithmetic-only functions (IEEE-exact per operation, so numpy's vectorized and one-element evaluations agree):
# the builders' rounding, clamping, grid and correction are what is tested here.
FUNCS = {
    "cube": lambda x: x * x * x,
    "rational": lambda x: 1.0 / (1.0 + x * x),
    "recip": lambda x: 1.0 / x,               # +-inf at the zero point: saturates
    "hard": lambda x: np.clip(0.2 * x + 0.5, 0.0, 1.0) * x,
}


@st.composite
def quant(draw, dtypes):
    dtype = draw(st.sampled_from(dtypes))
    lo, hi = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535)}[dtype]
    scale = np.float32(2.0 ** draw(st.floats(-30, 20)))  # extreme scales included
    zp = draw(naive.zero_points(lo, hi))
    return QParams(dtype, np.array(scale, np.float32), np.array(zp, np.int64))


@settings(deadline=None, max_examples=examples(60))
@given(st.sampled_from(sorted(FUNCS)), quant(["int8", "uint8"]), quant(["int8", "uint8", "int16", "uint16"]))
def test_table8_matches_twin(fname, in_q, out_q):
    f = FUNCS[fname]
    table = lut.build_table8(f, in_q, out_q, out_q.qmin, out_q.qmax, out_q.np_dtype)
    expected = naive_lut.table8(f, in_q.np_dtype, float(in_q.scale), int(in_q.zero_point), float(out_q.scale),
                                int(out_q.zero_point), out_q.qmin, out_q.qmax)
    assert table.tolist() == expected


@settings(deadline=None, max_examples=examples(40))
@given(st.sampled_from(sorted(FUNCS)), quant(["int16", "uint16"]), quant(["int8", "uint8", "int16", "uint16"]),
       st.sampled_from([17, 129, 513, 4097]), st.sampled_from(lut.CORRECTIONS))
def test_table16_matches_twin(fname, in_q, out_q, entries, correction):
    f = FUNCS[fname]
    table = lut.build_table16(f, in_q, out_q, out_q.qmin, out_q.qmax, entries, correction)
    expected = naive_lut.table16(f, in_q.np_dtype, float(in_q.scale), int(in_q.zero_point), float(out_q.scale),
                                 int(out_q.zero_point), out_q.qmin, out_q.qmax, entries, correction)
    assert table.tolist() == expected


@settings(deadline=None, max_examples=examples(40))
@given(st.sampled_from(["Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Softplus"]),
       quant(["int8", "uint8", "int16", "uint16"]), quant(["int8", "uint8", "int16", "uint16"]))
def test_extreme_scales_saturate_without_nan(op, in_q, out_q):
    """Any scales: tables are finite codes inside the output range; monotone functions give monotone outputs
    over the input codes (the interpolation cannot overshoot); 8-bit tables are within 0.5 LSB of exact."""
    f = lut.function_for(op)
    p = lut.table_params(f, in_q, out_q, out_q.qmin, out_q.qmax, 513)
    codes = lut.all_codes(in_q)
    y = lut.apply_table(p, codes, out_q.np_dtype).astype(np.int64)
    assert y.min() >= out_q.qmin and y.max() <= out_q.qmax
    if op not in ("Reciprocal",):  # Reciprocal jumps from -inf to +inf at the zero point
        assert np.all(np.diff(y) >= 0), op
    if in_q.bits == 8:
        assert lut.table_errors(p).max() <= 0.5 + 1e-9
