"""im2col + GEMM strategy of the 2-D convolution: the exact float GEMMs of :mod:`kernels.gemm`, in column blocks.

:func:`conv2d_gemm_blocks` yields the accumulator of :func:`kernels.conv2d.conv2d_acc` block by block (and
:func:`conv2d_gemm` assembles the blocks): on the byte-quad kernel of :mod:`kernels.conv_u8s8` or the
int16-pair kernel of :mod:`kernels.conv_int16` where one is proven exact (:func:`int_kernel`); for 16-bit
activations past the pairs' bound, on those kernels too, with the heavy channels' weights in pieces
(:func:`split_rows`) or the activations in byte planes (:func:`byte_planes`); for stride 1, where one float chunk
or the hi/lo byte split of 16-bit activations applies, by the
stacked-tap GEMMs of :mod:`kernels.conv2d_hilo`; else by im2col (zero point subtracted while converting to
float) and one GEMM per (image, group), 1x1 / stride 1 / no-pad convolutions skipping the gather and only
converting. :func:`conv2d_gemm_requantized` and :func:`bind_gemm_requantized` fuse the requantization in on the
exact integer kernels (:func:`int_kernel`: byte quads or int16 pairs) where that is proven the same.
"""
import numpy as np

from ._jit import njit
from . import conv_amx, conv_int16, conv_u8s8
from .checks import as_int
from .conv2d_common import requant_args, sub_zero_point, valid_range, validate_conv2d
from .conv2d_hilo import HILO_MIN_K, hilo_ok, pointwise_split, stacked_taps
from .gemm import abs_max, float_dtype, matmul_float_chunked, matmul_loops, plan
from .requantize import saturation_bounds


@njit
def _im2col(x, n, c0, x_zp, pad, kh, kw, sh, sw, top, left, dh, dw, ho, wo, cols):
    """cols[(cl*kh + ky)*kw + kx, oh*wo + ow] = x[n, c0+cl, ih, iw] - x_zp, or ``pad`` outside the input.

    ``cols`` is float32/float64/int64 of shape (cin_g*kh*kw, ho*wo); values are converted exactly (the
    caller's plan guarantees |x - x_zp| fits the float mantissa).
    """
    h = x.shape[2]
    wd = x.shape[3]
    cin_g = cols.shape[0] // (kh * kw)
    for cl in range(cin_g):
        for ky in range(kh):
            oy = ky * dh - top
            oh0, oh1 = valid_range(ho, h, sh, oy)
            for kx in range(kw):
                row = (cl * kh + ky) * kw + kx
                ox = kx * dw - left
                ow0, ow1 = valid_range(wo, wd, sw, ox)
                for oh in range(ho):
                    base = oh * wo
                    if oh < oh0 or oh >= oh1:
                        for ow in range(wo):
                            cols[row, base + ow] = pad
                        continue
                    for ow in range(ow0):
                        cols[row, base + ow] = pad
                    cnt = ow1 - ow0
                    if cnt > 0:
                        i0 = ow0 * sw + ox
                        dst = cols[row, base + ow0:base + ow1]
                        src = x[n, c0 + cl, oh * sh + oy, i0:i0 + (cnt - 1) * sw + 1:sw]
                        for j in range(cnt):
                            dst[j] = np.int64(src[j]) - x_zp
                    for ow in range(ow1, wo):
                        cols[row, base + ow] = pad
    return cols


def _gemm_plan(cache, x, x_zp, w, stride, pads, dilation, groups, block_cols) -> dict:
    """What :func:`conv2d_gemm_blocks` decides from the argument values and the input shape and dtype (not the
    data): validated geometry, centring, exactness plan and the int16-pair layout. Kept in ``cache`` (the caller's
    ``w_cache``, constant ``w``) for the last key seen: a call with the same key skips the validation."""
    try:
        key = (x.shape, x.dtype.str, x.flags.c_contiguous, x_zp, tuple(stride), tuple(pads), tuple(dilation),
               groups, block_cols)
        hash(key)
    except (AttributeError, TypeError):
        key = None  # not an array or not sequences: validate_conv2d raises the clear error
    if key is not None and cache.get("plan_key") == key:
        return cache["plan"]
    if "wmax" not in cache:
        cache["wmax"] = abs_max(w)
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, _ = validate_conv2d(
        x, x_zp, w, stride, pads, dilation, groups, cache["wmax"])
    cout, cin_g, kh, kw = w.shape
    k = cin_g * kh * kw
    center = conv_int16.x_center(x.dtype)
    pad = x_zp - center
    padded = bool(top or left or bottom or right)
    info = np.iinfo(x.dtype)
    x_dev = max(abs(int(info.min) - center), abs(int(info.max) - center), abs(pad) if padded else 0)
    if "wsum" not in cache:
        w64 = w.reshape(cout, k).astype(np.int64)
        cache["wsum"] = w64.sum(axis=1)
        cache["wabs"] = int(np.abs(w64).sum(axis=1).max(initial=0))
    layout = None
    mod = int_kernel(x.dtype, x_zp, padded, w, cache["wabs"], cache, groups)
    if mod is not None:
        if mod.__name__ not in cache:
            cache[mod.__name__] = mod.pack_weights(w, groups)
        layout = conv_int16.Layout(x.shape, w.shape, groups, (sh, sw), (top, left, bottom, right), (dh, dw),
                                   shape[2], shape[3], block_cols, cache[mod.__name__].shape[2], mod.KERNELS)
        int_center = mod.x_center(x.dtype)
    offset = (center - x_zp) * cache["wsum"]
    offset_split = offset + 128 * cache["wsum"]
    offset_int = offset if mod is None else (int_center - x_zp) * cache["wsum"]
    split = None
    if mod is None and groups == 1:  # a few rows past the int16 pairs' bound: those rows in pieces
        if "split_rows" not in cache:
            cache["split_rows"] = split_rows(w, x.dtype, x_zp, padded)
        if cache["split_rows"] is not None:
            w32, split_shape, levels, smod = cache["split_rows"]
            layout = conv_int16.Layout(x.shape, split_shape, groups, (sh, sw), (top, left, bottom, right), (dh, dw),
                                       shape[2], shape[3], block_cols, w32.shape[2], smod.KERNELS)
            scenter = smod.x_center(x.dtype)
            split = (w32, scenter, x_zp - scenter, (scenter - x_zp) * cache["wsum"], levels)
            split[3].flags.writeable = False
    planes = byte_planes(x.dtype, x_zp, padded, w, cache["wabs"], cache, groups) if mod is None and split is None \
        else None
    if planes is not None:
        kernels, offset_planes = [], 0
        for pmod, pdtype, pzp, weight in planes:
            if pmod.__name__ not in cache:
                cache[pmod.__name__] = pmod.pack_weights(w, groups)
            pcenter = pmod.x_center(pdtype)
            kernels.append((cache[pmod.__name__], pcenter, pzp - pcenter, conv_int16.Layout(
                x.shape, w.shape, groups, (sh, sw), (top, left, bottom, right), (dh, dw), shape[2], shape[3],
                block_cols, cache[pmod.__name__].shape[2], pmod.KERNELS)))
            offset_planes = offset_planes + weight * (pcenter - pzp) * cache["wsum"]
        planes = (kernels, offset_planes)
        offset_planes.flags.writeable = False
    for a in (offset, offset_split, offset_int):
        a.flags.writeable = False  # yielded to callers on every call
    gp = {"geo": (x_zp, sh, sw, top, left, bottom, right, dh, dw, groups), "out_hw": shape[2:], "center": center,
          "pad": pad, "padded": padded, "offset": offset, "offset_split": offset_split, "layout": layout,
          "method": plan(x_dev * cache["wmax"], k), "planes": planes, "split": split,
          "int": None if mod is None else (cache[mod.__name__], int_center, x_zp - int_center, offset_int)}
    if key is not None:
        cache["plan_key"], cache["plan"] = key, gp
    return gp


def split_rows(w, x_dtype, x_zp, padded):
    """For 16-bit activations where a few output channels pass the int16 pairs' bound (``sum|w[c]| * 2**15`` past
    int32; trained weights: 2 to 75 of 192 channels on YOLOX's heaviest layers): each such channel's weights cut
    into consecutive pieces of the flattened kernel (zero elsewhere), each piece within the bound, so that the
    pieces' convolutions add up, in int64, to the channel's. Returns ``(w32, shape, levels, module)``: the pieces
    (of weight shape ``shape``) packed for ``module``, the integer kernel that takes them (:func:`int_kernel`).
    Their first ``Cout`` rows are each channel's first piece, then for each further piece level ``(start,
    owners)``: row ``start + i`` belongs to channel ``owners[i]`` (one piece per channel per level, so the owners
    differ). None where no channel passes the bound, where no kernel takes the pieces, or where the pieces come to
    twice the channels or more (the byte planes of :func:`byte_planes`, two convolutions, cost no more).
    Ungrouped convolutions; arguments as :func:`int_kernel`'s."""
    cout = w.shape[0]
    a = np.abs(w.reshape(cout, -1).astype(np.int64))
    pad = x_zp - conv_int16.x_center(x_dtype) if padded else 0
    limit = conv_int16.INT32_LIMIT // max(1 << (8 * np.dtype(x_dtype).itemsize - 1), abs(pad))
    sums = a.sum(axis=1)
    if np.dtype(x_dtype).itemsize != 2 or int(sums.max(initial=0)) <= limit or int(a.max()) > limit:
        return None
    flat = w.reshape(cout, -1)
    rows, by_level = [flat.copy()], {}
    for c in np.flatnonzero(sums > limit):
        cs, start, level = np.cumsum(a[c]), 0, 0
        while start < cs.size:  # the longest run from ``start`` whose |w| sum stays within the limit
            end = int(np.searchsorted(cs, (cs[start - 1] if start else 0) + limit, side="right"))
            piece = np.zeros_like(flat[c])
            piece[start:end] = flat[c, start:end]
            if level == 0:
                rows[0][c] = piece
            else:
                by_level.setdefault(level, []).append((c, piece))
            start, level = end, level + 1
    levels, start = [], cout
    for level in sorted(by_level):
        owners = np.array([c for c, _ in by_level[level]], np.int64)
        rows.append(np.stack([piece for _, piece in by_level[level]]))
        levels.append((start, owners))
        start += owners.size
    if start >= 2 * cout:
        return None
    w_split = np.ascontiguousarray(np.concatenate(rows).reshape((start,) + w.shape[1:]))
    mod = int_kernel(x_dtype, x_zp, padded, w_split,
                     int(np.abs(w_split.reshape(start, -1).astype(np.int64)).sum(axis=1).max()))
    return None if mod is None else (mod.pack_weights(w_split, 1), w_split.shape, levels, mod)


def _split_blocks(x, gp, cout_g):
    """:func:`conv2d_gemm_blocks` on the row pieces of :func:`split_rows`: the pieces' int32 blocks added into
    their channels' int64 ones."""
    w32, center, pad, offset, levels = gp["split"]
    for n, g, c0, c1, acc in conv_int16.blocks(x, center, pad, w32, gp["layout"]):
        total = acc[:cout_g].astype(np.int64)
        for start, owners in levels:
            total[owners] += acc[start:start + owners.size]
        yield n, g, c0, c1, total, offset


def byte_planes(x_dtype, x_zp, padded, w, wabs_rowsum_max, cache=None, groups=1):
    """For 16-bit activations no integer kernel takes whole (``max_c sum|w[c]| * 2**15`` past int32): the two
    8-bit planes of the centred activations, ``v = x - center = 256 * hi + lo`` (``hi = v >> 8`` int8, ``lo = v &
    255`` uint8), each on the exact integer kernel :func:`int_kernel` finds for it, as ``(module, plane dtype,
    plane zero point, weight)`` for hi (weight 256) and lo (1); None where either has none. With ``z = x_zp -
    center = 256 * (z >> 8) + (z & 255)`` (padding cells hold ``x_zp``, their planes ``z >> 8`` and ``z & 255``),
    ``sum w (x - x_zp) = 256 sum w (hi - (z >> 8)) + sum w (lo - (z & 255))``: two convolutions of 8-bit values,
    each exact in int32 (``sum|w| * 2**7``), added in int64. Arguments as :func:`int_kernel`'s."""
    if np.dtype(x_dtype).itemsize != 2:
        return None
    z = int(x_zp) - conv_int16.x_center(x_dtype)
    out = []
    for dtype, zp, weight in ((np.dtype(np.int8), z >> 8, 256), (np.dtype(np.uint8), z & 255, 1)):
        mod = int_kernel(dtype, zp, padded, w, wabs_rowsum_max, cache, groups)
        if mod is None:
            return None
        out.append((mod, dtype, zp, weight))
    return out


def _int_blocks(x, gp, cout_g):
    """:func:`conv2d_gemm_blocks` on the exact integer kernel :func:`int_kernel` found (int32 blocks)."""
    w32, int_center, int_pad, offset = gp["int"]
    for n, g, c0, c1, acc in conv_int16.blocks(x, int_center, int_pad, w32, gp["layout"]):
        yield n, g, c0, c1, acc, offset[g * cout_g:(g + 1) * cout_g]


def _plane_blocks(x, gp, cout_g):
    """:func:`conv2d_gemm_blocks` on the byte planes of :func:`byte_planes`: the whole accumulator of each (image,
    group) as one block, int64."""
    kernels, offset = gp["planes"]
    ho, wo = gp["out_hw"]
    groups = gp["geo"][-1]
    v = x.astype(np.int32) - gp["center"]
    planes = ((v >> 8).astype(np.int8), (v & 255).astype(np.uint8))
    del v
    total = np.empty((x.shape[0], groups, cout_g, ho * wo), np.int64)
    for (w32, center, pad, layout), plane, high in zip(kernels, planes, (True, False)):
        for n, g, c0, c1, acc in conv_int16.blocks(plane, center, pad, w32, layout):
            if high:
                np.left_shift(acc, 8, out=total[n, g, :, c0:c1], dtype=np.int64)
            else:
                total[n, g, :, c0:c1] += acc
    for n in range(x.shape[0]):
        for g in range(groups):
            yield n, g, 0, ho * wo, total[n, g], offset[g * cout_g:(g + 1) * cout_g]


def int_kernel(x_dtype, x_zp, padded, w, wabs_rowsum_max, cache=None, groups=1):
    """The exact integer kernel module of a convolution, or None (the float paths): :mod:`kernels.conv_u8s8`
    (byte quads, VNNI) where its plan proves it exact and :func:`kernels.conv_u8s8.wins` says it is faster, else
    :mod:`kernels.conv_int16` (int16 pairs) where its plan holds; before both, the AMX tiles of
    :mod:`kernels.conv_amx` where they are available and win. ``cache`` (the caller's, per weight tensor) keeps
    the weights' fit tests; ``groups`` is the convolution's (the ``wins`` rules count channels per group)."""
    cache = {} if cache is None else cache
    for mod in (conv_amx, conv_u8s8, conv_int16):
        if mod is not conv_int16 and not (mod.AVAILABLE and mod.wins(w.shape, groups)):
            continue
        key = "fits_" + mod.__name__
        if key not in cache:
            cache[key] = mod.weights_fit(w)
        if cache[key] and mod.plan(x_dtype, x_zp - mod.x_center(x_dtype) if padded else None, wabs_rowsum_max):
            return mod
    return None


def conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups, block_cols=8192, w_cache=None):
    """:func:`kernels.conv2d.conv2d_acc` by im2col + exact GEMM, in column blocks (for a fused requantization).

    Yields ``(n, g, col0, col1, acc, offset)``: for image ``n`` and group ``g``, output pixels
    ``[col0, col1)`` (flattened ``oh*Wo + ow``) of the group's ``Cout // groups`` channels, with::

        true accumulator[c, j] = acc[c, j] + offset[c]       (acc: float32/float64 holding exact integers,
                                                              int64, or int32; offset: int64)

    The exact integer kernels of :func:`int_kernel` run (int32 ``acc``, whole output rows per block) wherever
    their ``plan`` proves them exact; the float paths below cover the rest.

    The exactness plan uses the activation dtype's range (not the data), so it is the same on every call.
    Activations enter the GEMM centred, ``x - center`` (center = 128 for uint8, 32768 for uint16, else 0;
    padded cells hold ``x_zp - center``), which halves the operand bound for asymmetric 8-bit activations,
    so most layers need one exact float32 chunk (K <= 1032 for 8-bit). Then
    ``sum((x - x_zp) * w) = sum((x - center) * w) + (center - x_zp) * sum(w)``, the second term being
    ``offset``. ``w_cache`` (a dict owned by the caller, one per weight tensor) keeps the packed or float
    weights and their row sums between calls."""
    cache = w_cache if w_cache is not None else {}
    gp = _gemm_plan(cache, x, x_zp, w, stride, pads, dilation, groups, block_cols)
    cout_g = w.shape[0] // gp["geo"][-1]
    if gp["layout"] is not None or gp["planes"] is not None:
        strategy = _split_blocks if gp["split"] is not None else _int_blocks if gp["int"] is not None else _plane_blocks
        yield from strategy(x, gp, cout_g)
        return
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups = gp["geo"]
    n_img, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    ho, wo = gp["out_hw"]
    k = cin_g * kh * kw
    p = ho * wo
    center, pad, padded, offset = gp["center"], gp["pad"], gp["padded"], gp["offset"]
    method, kc = gp["method"]
    key = ("w", method)
    if key not in cache:
        dt = np.int64 if method in ("loops", "zero") else float_dtype(method)
        cache[key] = np.ascontiguousarray(w.reshape(cout, k).astype(dt))
    w2 = cache[key]
    dt = w2.dtype
    pointwise = kh == 1 and kw == 1 and sh == 1 and sw == 1 and not padded
    if sh == 1 and sw == 1:
        single = method in ("f32", "f64") and kc >= k
        split = (not (method == "f32" and single) and (cin_g >= HILO_MIN_K or not single)
                 and hilo_ok(x.dtype, pad if padded else None, cache["wmax"], k))
        if split:
            dt = np.dtype(np.float32)
            offset = gp["offset_split"]
            if pointwise:
                yield from pointwise_split(x, center, w, cache, offset, groups, block_cols)
                return
        if (split or single) and not pointwise:
            yield from stacked_taps(x, center, pad, w, cache, dt, offset, split, groups, top, left, bottom, right,
                                     dh, dw, ho, wo, block_cols)
            return
    cols = None if pointwise else np.empty((k, p), dtype=dt)
    for n in range(n_img):
        if pointwise:
            xf = sub_zero_point(x[n].reshape(cin, h * wd), center, np.empty((cin, h * wd), dtype=dt))
        for g in range(groups):
            if pointwise:
                cols = xf[g * cin_g:(g + 1) * cin_g]
            else:
                _im2col(x, n, g * cin_g, center, pad, kh, kw, sh, sw, top, left, dh, dw, ho, wo, cols)
            wg = w2[g * cout_g:(g + 1) * cout_g]
            off = offset[g * cout_g:(g + 1) * cout_g]
            for c0 in range(0, p, block_cols):
                c1 = min(p, c0 + block_cols)
                cb = cols[:, c0:c1]
                if method == "zero":
                    acc = np.zeros((cout_g, c1 - c0), np.int64)
                elif method == "loops":
                    acc = np.empty((cout_g, c1 - c0), np.int64)
                    matmul_loops(wg, np.ascontiguousarray(cb), acc)
                elif kc >= k:
                    acc = wg @ cb
                else:
                    acc = matmul_float_chunked(wg, cb, kc)
                yield n, g, c0, c1, acc, off


def conv2d_gemm(x, x_zp, w, stride, pads, dilation, groups) -> np.ndarray:
    """:func:`kernels.conv2d.conv2d_acc` computed by im2col + exact GEMM (any groups), assembled from
    :func:`conv2d_gemm_blocks`. Same arguments and result."""
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, _ = validate_conv2d(
        x, x_zp, w, stride, pads, dilation, groups)
    out = np.empty((shape[0], shape[1], shape[2] * shape[3]), dtype=np.int64)
    cout_g = shape[1] // groups
    for n, g, c0, c1, acc, off in conv2d_gemm_blocks(x, x_zp, w, stride, pads, dilation, groups):
        out[n, g * cout_g:(g + 1) * cout_g, c0:c1] = acc.astype(np.int64) + off[:, None]
    return out.reshape(shape)


def conv2d_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                            acc_bits, out, block_cols=8192) -> bool:
    """Convolution with the requantization fused in, on an exact integer kernel (one kernel call for the whole
    convolution): ``out`` (N, Cout, Ho, Wo) receives exactly
    ``requantize(conv2d_acc(...), bias, mult, shift, out_zp, qmin, qmax, acc_bits, ...)``.

    Used only where that is proven: :func:`int_kernel` finds a kernel whose plan holds, no accumulator plus bias
    can reach the board's ``acc_bits`` (``|acc| <= max|x - x_zp| * max_c sum|w[c]|`` over the activation dtype;
    so no overflow can happen or need counting), and every channel has a saturation bound (the branch-free path of
    ``requantize``). Returns False, leaving ``out`` untouched, when that does not hold; the caller then runs
    :func:`conv2d_gemm_blocks` and requantizes separately.
    """
    run = bind_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                                acc_bits, out, block_cols)
    if run is None:
        return False
    run(x, out)
    return True


def bind_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                          acc_bits, out, block_cols=8192):
    """:func:`conv2d_gemm_requantized` set up for arrays shaped and typed like ``x`` and ``out`` (both validated
    here, C-contiguous): returns ``run(x, out)``, or None when fusion is not proven."""
    prep = _prepare_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin,
                                     qmax, acc_bits, out, block_cols)
    if prep is None:
        return None
    n_img, cout, ho, wo = out.shape
    flat = (n_img, cout, ho * wo)
    run3 = conv_int16.bind_requantized(*prep)

    def run(x, out):
        run3(x, out.reshape(flat))

    return run


def _prepare_gemm_requantized(x, x_zp, w, stride, pads, dilation, groups, bias, mult, shift, out_zp, qmin, qmax,
                              acc_bits, out, block_cols):
    """Validation and fusion decision of :func:`conv2d_gemm_requantized`: the arguments of
    :func:`kernels.conv_int16.bind_requantized`, or None when fusion is not proven."""
    x_zp, sh, sw, top, left, bottom, right, dh, dw, groups, shape, _ = validate_conv2d(
        x, x_zp, w, stride, pads, dilation, groups)
    cout = shape[1]
    bias, mult, shift, out_zp, qmin, qmax = requant_args(bias, mult, shift, out, shape, out_zp, qmin, qmax,
                                                         "conv2d_gemm_requantized")
    acc_bits = as_int(acc_bits, "acc_bits")
    if not 2 <= acc_bits <= 64:
        raise ValueError(f"acc_bits must be in [2, 64], got {acc_bits}")
    padded = bool(top or left or bottom or right)
    w64 = w.reshape(cout, -1).astype(np.int64)
    wsum_abs = np.abs(w64).sum(axis=1)  # per output channel
    mod = int_kernel(x.dtype, x_zp, padded, w, int(wsum_abs.max(initial=0)), groups=groups)
    if mod is None:
        return None
    center = mod.x_center(x.dtype)
    pad = x_zp - center
    info = np.iinfo(x.dtype)
    x_dev = max(abs(int(info.min) - x_zp), abs(int(info.max) - x_zp))  # padding contributes 0
    reach = x_dev * wsum_abs + np.abs(bias)  # per channel: |acc + bias| at most
    if reach.size and int(reach.max()) >= 1 << (acc_bits - 1):
        return None
    bound = saturation_bounds(mult, shift, out_zp, qmin, qmax, reach=reach)
    if bound.size and int(bound.min()) == 0:
        return None
    w32 = mod.pack_weights(w, groups)
    layout = conv_int16.Layout(x.shape, w.shape, groups, (sh, sw), (top, left, bottom, right), (dh, dw), shape[2],
                               shape[3], block_cols, w32.shape[2], mod.KERNELS)
    # the kernel sums (x - center) * w: the bias takes the rest, (center - x_zp) * sum(w)
    bias_c = bias + (center - x_zp) * w64.sum(axis=1)
    return (center, pad, w32, layout, bias_c, mult, shift, bound, out_zp, qmin, qmax)


def bind_matmul_requantized(a, x_zp, w, bias, mult, shift, out_zp, qmin, qmax, acc_bits, out, block_cols=8192):
    """``a @ (w)`` requantized per column, for rows ``a`` (M, K) of 8-bit activations and constant weights ``w``
    (K, N), as the 1x1 convolution of K channels over M pixels: ``run(a, out)`` writes ``out`` (M, N) exactly as
    :func:`conv2d_gemm_requantized` of that convolution would (``a`` transposed into channels, the result back
    into rows). Returns None unless :func:`int_kernel` picks the byte quads of :mod:`kernels.conv_u8s8` and the
    fused requantization is proven (then the caller's integer matmul runs)."""
    m, k = a.shape
    n = w.shape[1]
    w4 = np.ascontiguousarray(w.T).reshape(n, k, 1, 1)
    wabs = int(np.abs(w4.astype(np.int64)).reshape(n, k).sum(axis=1).max(initial=0))
    if int_kernel(a.dtype, x_zp, False, w4, wabs) not in (conv_amx, conv_u8s8):
        return None
    per_col = [np.ascontiguousarray(np.broadcast_to(v, (n,))) for v in (bias, mult, shift)]
    run4 = bind_gemm_requantized(np.empty((1, k, 1, m), a.dtype), x_zp, w4, (1, 1), (0, 0, 0, 0), (1, 1), 1,
                                 *per_col, out_zp, qmin, qmax, acc_bits, np.empty((1, n, 1, m), out.dtype), block_cols)
    if run4 is None:
        return None

    def run(a, out):
        y = np.empty((1, n, 1, m), out.dtype)
        run4(np.ascontiguousarray(a.T).reshape(1, k, 1, m), y)
        out[...] = y.reshape(n, m).T

    return run
