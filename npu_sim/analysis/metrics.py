"""Error metrics of an integer result against a float reference: cosine, SQNR, MAE, max |error|, in LSBs.

The accuracy report and the advisor both sum ``pair_stats`` rows over samples (float64, in sample order, so a sum
is the same however the samples were split) and turn the sums into ``ErrorMetrics`` with ``finish``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class ErrorMetrics:
    cosine: float
    sqnr_db: float          # 10·log10(Σx² / Σ(x−y)²); +inf when the error is exactly zero
    mae: float
    max_abs: float
    mean_lsb: float | None  # mean |x−y| / scale (layers only)
    max_lsb: float | None
    max_lsb_in_range: float | None  # max |x−y| / scale where the float value lies inside the quantized range
    exact: bool             # every value equal


# The entries of a ``pair_stats`` row, in order (sums, except the maxima ``max_ae``, ``max_lsb``, ``max_lsb_in_range``).
PAIR_FIELDS = ("sxx", "syy", "sxy", "see", "sae", "max_ae", "s_lsb", "max_lsb", "max_lsb_in_range")
PAIR_SIZE = len(PAIR_FIELDS)
# Where the maxima sit in a row: summing rows must take the maximum of these instead.
MAX_AE, MAX_LSB, MAX_LSB_IN_RANGE = 5, 7, 8


def pair_stats(x: np.ndarray, y: np.ndarray, inv_scale=None, in_range=None) -> np.ndarray:
    """One ``PAIR_FIELDS`` row of reference ``x`` against ``y``; the LSB entries with ``inv_scale`` (1/scale,
    broadcast against ``x``), the in-range maximum over the elements ``in_range`` selects."""
    x = np.asarray(x, np.float64).reshape(-1) if inv_scale is None else np.asarray(x, np.float64)
    y = np.asarray(y, np.float64).reshape(x.shape)
    d = x - y
    ad = np.abs(d)
    out = np.empty(PAIR_SIZE)
    out[0] = np.dot(x.reshape(-1), x.reshape(-1))
    out[1] = np.dot(y.reshape(-1), y.reshape(-1))
    out[2] = np.dot(x.reshape(-1), y.reshape(-1))
    out[3] = np.dot(d.reshape(-1), d.reshape(-1))
    out[4] = ad.sum()
    out[5] = ad.max() if ad.size else 0.0
    if inv_scale is not None:
        lsb = ad * inv_scale
        out[6] = lsb.sum()
        out[7] = lsb.max() if lsb.size else 0.0
        if in_range is not None:
            sel = lsb[in_range]
            out[8] = sel.max() if sel.size else 0.0
        else:
            out[8] = out[7]
    else:
        out[6] = out[7] = out[8] = 0.0
    return out


def cosine(sxx, syy, sxy) -> float:
    """Cosine similarity from Σx², Σy², Σxy (1.0 when both are zero, 0.0 when one is)."""
    if sxx == 0.0 and syy == 0.0:
        return 1.0
    if sxx == 0.0 or syy == 0.0:
        return 0.0
    return float(max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy))))


def finish(p: np.ndarray, n: float, lsb: bool) -> ErrorMetrics:
    """``ErrorMetrics`` of a (summed) ``pair_stats`` row over ``n`` values; the LSB fields only with ``lsb``."""
    sxx, syy, sxy, see, sae, max_ae, s_lsb, max_lsb, max_in = (float(v) for v in p)
    exact = see == 0.0
    sqnr = math.inf if exact else (10.0 * math.log10(sxx / see) if sxx > 0 else -math.inf)
    n = max(n, 1.0)
    return ErrorMetrics(cosine=cosine(sxx, syy, sxy), sqnr_db=sqnr, mae=float(sae / n), max_abs=max_ae,
                        mean_lsb=float(s_lsb / n) if lsb else None, max_lsb=max_lsb if lsb else None,
                        max_lsb_in_range=max_in if lsb else None, exact=exact)


def error_metrics(reference, actual, scale=None) -> ErrorMetrics:
    """Cosine, SQNR (dB), MAE, max |error| of ``actual`` against ``reference`` (and in LSBs when ``scale``)."""
    x = np.asarray(reference, np.float64)
    y = np.asarray(actual, np.float64)
    if x.shape != y.shape:
        raise ValueError(f"shapes differ: {x.shape} vs {y.shape}")
    inv = None if scale is None else 1.0 / np.asarray(scale, np.float64)
    return finish(pair_stats(x, y, inv), float(x.size), scale is not None)


def json_number(v):
    """``v`` as JSON can hold it: None for None and for a non-finite float (JSON has no inf/NaN), else ``v``."""
    if v is None:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
