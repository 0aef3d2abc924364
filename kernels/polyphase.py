"""Where the rows and column phases of an input plane land in its polyphase padded layout (shared by
:mod:`kernels.depthwise` and :mod:`kernels.depthwise_int16`).

The zero-bordered padded plane (``top``/``left`` border) is stored as ``sh*sw`` polyphase components, each
``hq x wq`` (``psz = hq*wq`` cells): padded cell ``(r, c)`` lives in component ``(r % sh, c % sw)`` at
``(r // sh) * wq + c // sw``.
"""
import numpy as np

from ._jit import njit


@njit
def phase_offsets(h, wd, top, left, sh, sw, psz, wq):
    """``(rowoff, col_q, col_iw0, col_cnt)``: input row ``ih`` starts at ``rowoff[ih] + col_q[px]`` in column
    phase ``px``, whose first input column is ``col_iw0[px]`` and which holds ``col_cnt[px]`` of the row's
    columns (every ``sw``-th). Divisions are hoisted here, out of the callers' per-channel loops (64-bit integer
    division costs tens of cycles)."""
    rowoff = np.empty(h, np.int64)
    for ih in range(h):
        r = top + ih
        rowoff[ih] = ((r % sh) * sw) * psz + (r // sh) * wq
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
