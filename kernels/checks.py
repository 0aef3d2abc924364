"""Argument checks shared by the kernels (plain Python, run once per call).

Integer arguments (:func:`as_int`, :func:`as_int_tuple`), arrays (:func:`check_int_array`, :func:`as_3d`,
:func:`per_channel_int64`), the output side of a requantizing kernel (:func:`check_out`: output dtype,
``qmin``/``qmax``; :func:`check_multiplier`: multiplier/shift pairs), so that every kernel validates them the
same way; and the cache of kernels bound to constant arguments (:func:`array_key`, :func:`cached_bind`).
"""
import functools

import numpy as np

from .fixedpoint import MAX_SHIFT, MULTIPLIER_BITS

OUT_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)


def array_key(*arrays) -> tuple:
    """What a kernel bound to its arguments depends on in its arrays: the shape, dtype and C-contiguity of each."""
    return tuple((a.shape, a.dtype, a.flags.c_contiguous) for a in arrays)


def cached_bind(cache, key, make):
    """``make()`` (a kernel bound to its arguments -- a run function, or None where it does not apply -- or those
    validated arguments themselves), kept in ``cache`` (a dict the caller owns for constant arguments, one per
    graph node; or None) while ``key`` repeats."""
    if cache is None:
        return make()
    if cache.get("key") != key:
        cache["key"], cache["run"] = key, make()
    return cache["run"]


def as_int(value, name: str) -> int:
    """Return ``value`` as a Python int; accept Python/numpy integers only (not bool, not float)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    return int(value)


def as_int_tuple(value, n: int, name: str) -> tuple:
    """Return ``value`` as a tuple of ``n`` Python ints."""
    try:
        items = tuple(value)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of {n} integers, got {value!r}") from None
    if len(items) != n:
        raise ValueError(f"{name} must have {n} entries, got {len(items)}: {value!r}")
    return tuple(as_int(v, f"{name}[{i}]") for i, v in enumerate(items))


@functools.cache
def _dtype_set(dtypes) -> frozenset:
    return frozenset(np.dtype(d) for d in dtypes)


def check_int_array(arr, name: str, ndim: int | None = None, dtypes=None) -> None:
    """Raise ValueError unless ``arr`` is a C-contiguous integer numpy array (of ``dtypes`` / ``ndim``)."""
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(arr).__name__}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must have an integer dtype, got {arr.dtype}")
    if dtypes is not None and arr.dtype not in _dtype_set(dtypes):
        allowed = ", ".join(np.dtype(d).name for d in dtypes)
        raise ValueError(f"{name} must have dtype in ({allowed}), got {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")


def as_3d(x, out_shape3):
    """View a 1-D/3-D operand as (outer, mid, inner), checking it broadcasts against ``out_shape3``."""
    if x.ndim == 1:
        x = x.reshape(1, 1, -1)
    if x.ndim != 3 or any(d not in (1, o) for d, o in zip(x.shape, out_shape3)):
        raise ValueError(f"operand of shape {x.shape} does not broadcast to {tuple(out_shape3)}")
    return x


def check_multiplier(mult, shift, name: str) -> None:
    """Raise ValueError unless every (mult, shift) pair is in the domain of ``mul_round_shift``.

    ``mult``/``shift`` are Python ints or int64 arrays of equal shape: |mult| < 2**31, 0 <= shift <= 62.
    """
    m = np.asarray(mult)
    r = np.asarray(shift)
    if m.shape != r.shape:
        raise ValueError(f"{name}: multiplier shape {m.shape} != shift shape {r.shape}")
    if m.size == 0:
        return
    lim = 1 << MULTIPLIER_BITS
    if int(m.min()) <= -lim or int(m.max()) >= lim:
        raise ValueError(f"{name}: multipliers must satisfy |mult| < 2**{MULTIPLIER_BITS}")
    if int(r.min()) < 0 or int(r.max()) > MAX_SHIFT:
        raise ValueError(f"{name}: shifts must be in [0, {MAX_SHIFT}]")


def check_out(out, shape, out_zp, qmin, qmax, contiguous=True) -> tuple[int, int, int]:
    """Validate a preallocated output array and its quantization range; return ints (out_zp, qmin, qmax).

    ``contiguous=False`` accepts a strided view (e.g. a block of a larger output)."""
    if contiguous:
        check_int_array(out, "out", dtypes=OUT_DTYPES)
    elif not isinstance(out, np.ndarray) or out.dtype not in _dtype_set(OUT_DTYPES):
        raise ValueError("out must be a numpy array of an 8/16/32-bit integer dtype")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out must have shape {tuple(shape)}, got {out.shape}")
    out_zp = as_int(out_zp, "out_zp")
    qmin = as_int(qmin, "qmin")
    qmax = as_int(qmax, "qmax")
    info = np.iinfo(out.dtype)
    if not (info.min <= qmin <= qmax <= info.max):
        raise ValueError(f"need {info.min} <= qmin <= qmax <= {info.max} for out dtype {out.dtype}, "
                         f"got qmin={qmin}, qmax={qmax}")
    if abs(out_zp) >= 1 << 32:
        raise ValueError(f"out_zp {out_zp} out of range")
    return out_zp, qmin, qmax


def per_channel_int64(arr, c: int, name: str) -> np.ndarray:
    """Return ``arr`` as a C-contiguous int64 array of shape (c,), checking its shape and dtype."""
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer numpy array of shape ({c},)")
    if arr.shape != (c,):
        raise ValueError(f"{name} must have shape ({c},), got {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)
