"""Where the rows and column phases of an input plane land in its polyphase padded layout, and where each kernel
tap reads it (shared by :mod:`kernels.depthwise`, :mod:`kernels.depthwise_int16` and :mod:`kernels.conv_int16`).

The zero-bordered padded plane (``top``/``left`` border) is stored as ``sh*sw`` polyphase components, each
``hq x wq`` (``psz = hq*wq`` cells): padded cell ``(r, c)`` lives in component ``(r % sh, c % sw)`` at
``(r // sh) * wq + c // sw``.
"""
import numpy as np


def plane_geometry(h, wd, top, left, bottom, right, sh, sw):
    """``(wq, psz)``: the row pitch of the polyphase components of an ``h x wd`` plane with those borders and
    strides, and the size of one component."""
    hq = (top + h + bottom + sh - 1) // sh
    wq = (left + wd + right + sw - 1) // sw
    return wq, hq * wq


def tap_offsets(kh, kw, sh, sw, dh, dw, psz, wq) -> np.ndarray:
    """int64 ``(kh*kw,)``: where tap ``(ky, kx)`` (index ``ky*kw + kx``) reads output ``(oh, ow)``'s input,
    ``offset + oh*wq + ow``: padded cell ``(oh*sh + ky*dh, ow*sw + kx*dw)`` lies in component ``((ky*dh) % sh,
    (kx*dw) % sw)``, ``(ky*dh) // sh`` rows and ``(kx*dw) // sw`` columns from the output's cell."""
    ky, kx = np.divmod(np.arange(kh * kw, dtype=np.int64), kw)
    return (((ky * dh) % sh) * sw + (kx * dw) % sw) * psz + ((ky * dh) // sh) * wq + (kx * dw) // sw


def phase_offsets(h, wd, top, left, sh, sw, psz, wq):
    """``(rowoff, col_q, col_iw0, col_cnt)``, int64 arrays: input row ``ih`` starts at ``rowoff[ih] + col_q[px]``
    in column phase ``px``, whose first input column is ``col_iw0[px]`` and which holds ``col_cnt[px]`` of the
    row's columns (every ``sw``-th). Worked out once per bind, out of the kernels' per-channel loops."""
    r = top + np.arange(h, dtype=np.int64)
    rowoff = ((r % sh) * sw) * psz + (r // sh) * wq
    col_q = np.zeros(sw, np.int64)
    col_iw0 = np.zeros(sw, np.int64)
    col_cnt = np.zeros(sw, np.int64)
    for px in range(sw):
        iw0 = (px - left) % sw  # first input column landing in phase px
        if iw0 < wd:
            col_iw0[px] = iw0
            col_cnt[px] = (wd - 1 - iw0) // sw + 1
            col_q[px] = px * psz + (left + iw0) // sw
    return rowoff, col_q, col_iw0, col_cnt
