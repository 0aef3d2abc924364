"""onnxruntime's 8-bit QLinearAdd, bit for bit as its CPU kernel computes it on x86-64 with AVX2.

onnxruntime fuses an 8-bit QDQ ``Add`` group into ``com.microsoft.QLinearAdd``; MLAS runs it (x86-64 with AVX2,
``MlasQLinearAdd{S8,U8}KernelAvx2``) in float32 with fused multiply-adds, adding the output zero point *before*
rounding, so it differs from ONNX's DequantizeLinear -> Add -> QuantizeLinear on ties and near-ties.

This module also holds the float32 primitives the other ``ort_*`` kernels share: an exactly rounded float32
fused multiply-add (:func:`fma_f32`) and the ``cvtps2dq`` float32 -> int32 conversion (:func:`cvt_ps2dq`).
Every float32 value is carried in a float64 that holds it exactly; a single float32 operation (``+ - * /``) is
computed in float64 and rounded once to float32, which is exact IEEE float32 arithmetic because float64 has
more than twice float32's precision plus two bits.
"""
import math

import numpy as np

from ._jit import njit
from .checks import as_int, check_int_array
from .requantize import clamp

DTYPES = (np.int8, np.uint8)
INT32_MIN = -(1 << 31)
TWO_POW_31 = 2147483648.0
TWO_POW_52 = 4503599627370496
TWO_POW_53 = 9007199254740992.0


# --------------------------------------------------------------------------------------------------------
# float32 primitives (njit)
# --------------------------------------------------------------------------------------------------------
@njit
def fma_f32(x, y, z):
    """``float32(x*y + z)`` with a single rounding (round half to even), as the FMA3 ``vfmadd`` instruction.

    ``x``, ``y``, ``z`` are float32 values (held in float64). ``x*y`` is exact in float64 (24 + 24 significant
    bits). The sum is computed in float64 with *round to odd* (TwoSum gives the exact error; an inexact sum
    with an even significand is moved one unit towards the exact value), and round-to-odd at 53 bits followed
    by one rounding to 24 bits equals the correctly rounded result. Returns the float32 result as float64.
    """
    p = np.float64(x) * np.float64(y)
    c = np.float64(z)
    s = p + c
    if math.isfinite(s):
        bb = s - p
        err = (p - (s - bb)) + (c - bb)
        if err != 0.0:
            m, ex = math.frexp(s)
            sig = np.int64(abs(m) * TWO_POW_53)
            if sig % 2 == 0:
                away = (err > 0.0) == (s > 0.0)
                if away or sig != TWO_POW_52:
                    step = math.ldexp(1.0, ex - 53)
                else:
                    step = math.ldexp(1.0, ex - 54)
                if err > 0.0:
                    s = s + step
                else:
                    s = s - step
    return np.float64(np.float32(s))


@njit
def cvt_ps2dq(u):
    """``cvtps2dq``: float32 ``u`` (held in float64) -> integer, rounding half to even (MXCSR default).

    Values outside [-2**31, 2**31) and NaN give the "integer indefinite" -2**31, as the instruction does.
    """
    if u >= -TWO_POW_31 and u < TWO_POW_31:
        return np.int64(np.rint(u))
    return np.int64(INT32_MIN)


@njit
def f32(v):
    """Round a float64 to float32 (round half to even) and return it as float64."""
    return np.float64(np.float32(v))


# --------------------------------------------------------------------------------------------------------
# shared validation (plain Python)
# --------------------------------------------------------------------------------------------------------
def as_scale(value, name: str) -> float:
    """A positive finite scale as the float32 value onnxruntime reads from the model (returned as float)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    s = np.float32(value)
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"{name} must be a positive finite float32, got {value!r}")
    return float(s)


def as_zero_point(value, dtype, name: str) -> int:
    """A zero point inside the range of ``dtype``."""
    zp = as_int(value, name)
    info = np.iinfo(dtype)
    if not info.min <= zp <= info.max:
        raise ValueError(f"{name} must lie in [{info.min}, {info.max}] for {np.dtype(dtype).name}, got {zp}")
    return zp


def binary_args(a, a_scale, a_zp, b, b_scale, b_zp, out, out_scale, out_zp) -> tuple:
    """Validate the operands and quantization of an 8-bit binary kernel; return
    ``(a_scale, a_zp, b_scale, b_zp, out_scale, out_zp)`` as Python floats/ints."""
    check_8bit_operands(a, b, out)
    return (as_scale(a_scale, "a_scale"), as_zero_point(a_zp, a.dtype, "a_zp"), as_scale(b_scale, "b_scale"),
            as_zero_point(b_zp, a.dtype, "b_zp"), as_scale(out_scale, "out_scale"),
            as_zero_point(out_zp, a.dtype, "out_zp"))


def check_8bit_operands(a, b, out) -> None:
    """``a``, ``b``, ``out``: 1-D C-contiguous int8/uint8 arrays of one dtype and one length."""
    check_int_array(a, "a", ndim=1, dtypes=DTYPES)
    check_int_array(b, "b", ndim=1, dtypes=DTYPES)
    check_int_array(out, "out", ndim=1, dtypes=DTYPES)
    if not a.dtype == b.dtype == out.dtype:
        raise ValueError(f"a, b and out must have one dtype, got {a.dtype}, {b.dtype}, {out.dtype}")
    if not a.shape == b.shape == out.shape:
        raise ValueError(f"a, b and out must have one length, got {a.shape}, {b.shape}, {out.shape}")


# --------------------------------------------------------------------------------------------------------
# QLinearAdd
# --------------------------------------------------------------------------------------------------------
@njit
def qladd_constants(a_scale, a_zp, b_scale, b_zp, out_scale, out_zp):
    """The three float32 constants of the kernel, as MLAS computes them once per call.

    ``ra = f32(a_scale / out_scale)``, ``rb = f32(b_scale / out_scale)``,
    ``fixed = f32(f32(out_zp) - fma(ra, a_zp, f32(rb * b_zp)))`` (the C++ expression
    ``zc - (ra*za + rb*zb)`` as GCC contracts it: the first product is fused). Returned as float64 values.
    """
    ra = f32(np.float64(a_scale) / np.float64(out_scale))
    rb = f32(np.float64(b_scale) / np.float64(out_scale))
    tb = f32(rb * np.float64(b_zp))
    s = fma_f32(ra, np.float64(a_zp), tb)
    fixed = f32(np.float64(out_zp) - s)
    return ra, rb, fixed


@njit
def _qladd(a, b, ra, rb, fixed, qmin, qmax, out):
    """out[i] = clamp(cvt_ps2dq(fma(a[i], ra, fma(b[i], rb, fixed))), qmin, qmax); see :func:`ort_qladd`."""
    for i in range(a.shape[0]):
        t = fma_f32(np.float64(b[i]), rb, fixed)
        u = fma_f32(np.float64(a[i]), ra, t)
        out[i] = clamp(cvt_ps2dq(u), qmin, qmax)
    return out


def ort_qladd(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp, out) -> None:
    """onnxruntime's ``QLinearAdd`` on 8-bit data (MLAS, x86-64 AVX2 kernel), on 1-D arrays of equal length.

    Parameters
    ----------
    a, b : 1-D ndarrays, both int8 or both uint8
        MLAS's ``InputA`` and ``InputB``. The caller broadcasts; note that onnxruntime hands MLAS the operand
        that is broadcast along the innermost dimension as ``InputB`` (the other one as ``InputA``), so for an
        ONNX ``Add(A, B)`` whose A is the broadcast one, pass ``a = B`` and ``b = A``.
    a_scale, b_scale, out_scale : float
        Positive finite scales, taken as float32 (as onnxruntime reads them).
    a_zp, b_zp, out_zp : int
        Zero points inside the dtype range.
    out : 1-D ndarray of the same dtype and length, written in place.

    Notes
    -----
    Exact semantics per element (``f32`` = round to float32 half to even, ``fma`` = float32 fused multiply-add
    with one rounding, a/b/zero points converted to float32 exactly)::

        ra = f32(a_scale / out_scale);  rb = f32(b_scale / out_scale)
        fixed = f32(out_zp - fma(ra, a_zp, f32(rb * b_zp)))
        u = fma(a, ra, fma(b, rb, fixed))            # raw a, b: the zero points live in `fixed`
        r = cvtps2dq(u)                              # round half to even; -2**31 if |u| >= 2**31
        out = clamp(r, qmin, qmax)                   # int32 -> int16 -> 8 bit saturating packs

    The output zero point is added before the rounding, so ties round to the even *output code*, not the even
    offset from the zero point as in ONNX's QuantizeLinear; ``a_scale/out_scale`` is rounded to float32 first.
    """
    a_scale, a_zp, b_scale, b_zp, out_scale, out_zp = binary_args(a, a_scale, a_zp, b, b_scale, b_zp, out,
                                                                  out_scale, out_zp)
    info = np.iinfo(a.dtype)
    ra, rb, fixed = qladd_constants(a_scale, float(a_zp), b_scale, float(b_zp), out_scale, float(out_zp))
    _qladd(a, b, ra, rb, fixed, info.min, info.max, out)
