"""Matching a dump's tensors to the program's: by name, by layout, and from dequantized floats to integers.

Names: a dump tensor matches a program tensor by the ONNX float tensor name (``Tensor.float_name``), by the
QuantizeLinear output name (``Tensor.name``: what tf2onnx keeps from TFLite, e.g.
``model/block_1_expand_relu/Relu6;model/block_1_expand/Conv2D``), or by either with the characters outside
``[A-Za-z0-9._-]`` replaced by ``_`` (file names).

Layouts: the program is NCHW. A rank-3/4 dump tensor whose shape is the program's is NCHW; one whose shape is the
channels-last permutation is NHWC; a shape both fit (e.g. C == H == W) is ambiguous and takes the manifest's
``layout``, else ``--layout``, else the layout every unambiguous tensor of the same dump has; otherwise the dump is
refused with a request for ``--layout``. An ambiguous tensor that differs from the simulation while its other
reading equals it takes that reading (with a note): the data, not only the shape, then decides.

Values: integers are checked against the tensor's integer range; floats are a dequantized dump and are quantized
with the tensor's own scale and zero point (differences are then reported in LSB).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from npu_sim.errors import InputError
from npu_sim.ir import Program, Tensor

CHANNELS_LAST = {3: (0, 2, 1), 4: (0, 2, 3, 1)}  # NCHW -> NHWC axes, by rank


def sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


@dataclass
class Matched:
    key: str                 # the dump's name
    array: np.ndarray        # the program's integers, NCHW, of the tensor's dtype
    layout: str              # "nchw" | "nhwc" as read
    dequantized: bool        # the dump held floats
    source: str
    alt: np.ndarray | None = None  # the other layout's reading, for a shape both layouts fit
    dump_shape: tuple | None = None  # the dump's shape where it is matched by element order (unit dimensions)
    view: bool = False  # the same integers are compared at the layout change's input (``through_layout``)

    def memory_order(self) -> np.ndarray:
        """Each element's position in the dumped tensor's memory (row-major in its own layout), NCHW-shaped."""
        pos = np.arange(self.array.size)
        if self.layout == "nhwc" and self.array.ndim in CHANNELS_LAST and self.dump_shape is None:
            perm = CHANNELS_LAST[self.array.ndim]
            return np.transpose(pos.reshape([self.array.shape[a] for a in perm]), np.argsort(perm))
        return pos.reshape(self.array.shape)

    def dump_index(self, index: tuple[int, ...]) -> tuple[int, ...]:
        """An index of the NCHW array as an index of the tensor as dumped."""
        if self.dump_shape is not None:
            flat = np.ravel_multi_index(tuple(index), self.array.shape)
            return tuple(int(v) for v in np.unravel_index(int(flat), self.dump_shape))
        if self.layout == "nhwc" and len(index) in CHANNELS_LAST:
            return tuple(index[a] for a in CHANNELS_LAST[len(index)])
        return tuple(index)


def name_table(prog: Program, aliases: dict | None = None) -> dict[str, str]:
    """Every name a dump may use for a quantized activation tensor -> the program tensor; exact names first, so a
    sanitized name never shadows a real one. ``aliases``: QuantizeLinear output -> its input, for the
    QuantizeLinear nodes of the model that only re-label a tensor (the program keeps no tensor of that name)."""
    table: dict[str, str] = {}
    tensors = [t for t in prog.tensors.values() if t.q is not None and not t.is_const]
    for t in tensors:
        table.setdefault(t.name, t.name)
    for t in tensors:
        table.setdefault(t.float_name, t.name)
    for name, tname in prog.inputs.items():  # a float input stands for its Quantize stub's output
        stub = prog.input_stub(tname)
        if stub is not None:
            table.setdefault(name, stub.outputs[0])
    for out, src in (aliases or {}).items():
        if out not in table and src in table:
            table[out] = table[src]
    for name in list(table):
        table.setdefault(sanitize(name), table[name])
    return table


def lookup(table: dict, key: str) -> str | None:
    """The program tensor a dump name stands for: the name itself, else tf2onnx's re-created ``NAME_prequant``."""
    for k in (key, key + "_prequant", sanitize(key + "_prequant")):
        if k in table:
            return table[k]
    return None


def layout_of(shape, want, hint: str | None) -> str | None:
    """``nchw``/``nhwc`` as the dump shape ``shape`` shows against the program shape ``want``; ``hint`` decides
    an ambiguous shape; None: ambiguous without a hint, or a shape neither layout fits."""
    shape, want = tuple(shape), tuple(want)
    nhwc = tuple(want[a] for a in CHANNELS_LAST[len(want)]) if len(want) in CHANNELS_LAST else want
    if nhwc == want:  # both layouts have this shape (e.g. C == H == W)
        if shape != want:
            return None
        return "nchw" if all(d == 1 for d in want[1:]) else hint  # all ones: the same data order either way
    if shape == want:
        return "nchw"
    return "nhwc" if shape == nhwc else None


def dump_layout(entries: dict, table: dict, prog: Program) -> str | None:
    """The layout most unambiguous rank-3/4 tensors of the dump show (the model's inputs and outputs aside: an
    exporter may have left those channels-last in the model itself), or None (none, or a tie)."""
    votes = {"nchw": 0, "nhwc": 0}
    io = set(prog.inputs.values()) | set(prog.outputs.values())
    io |= {stub.outputs[0] for stub in map(prog.input_stub, set(prog.inputs.values())) if stub is not None}
    for key, e in entries.items():
        tname = lookup(table, key)
        if tname is None or tname in io or e.array.ndim not in CHANNELS_LAST:
            continue
        want = prog.tensors[tname].shape
        if len(want) != e.array.ndim:
            continue
        lay = layout_of(e.array.shape, want, None)
        if lay is not None and tuple(want[a] for a in CHANNELS_LAST[len(want)]) != tuple(want):
            votes[lay] += 1
    if votes["nchw"] == votes["nhwc"]:
        return None
    return "nchw" if votes["nchw"] > votes["nhwc"] else "nhwc"


def to_program(t: Tensor, e, layout_opt: str | None, dump_wide: str | None) -> Matched | str:
    """The dump entry ``e`` as the integers of ``t`` (NCHW); a string says why the shapes do not fit. A shape both
    layouts fit keeps the other reading in ``Matched.alt``."""
    arr, alt, by_order = e.array, None, None
    layout = "nchw"
    if arr.ndim in CHANNELS_LAST and len(t.shape) == arr.ndim:
        hint = e.layout or layout_opt or dump_wide
        layout = layout_of(arr.shape, t.shape, hint)
        if layout is None:
            if tuple(arr.shape) == tuple(t.shape):
                raise InputError(f"dump tensor {e.name!r}: shape {list(arr.shape)} reads as NCHW and as NHWC; say "
                                 f"which with --layout nhwc|nchw (or a \"layout\" in the manifest)")
            return f"dump shape {list(arr.shape)}, simulation {list(t.shape)} (neither NCHW nor NHWC)"
        inv = np.argsort(CHANNELS_LAST[arr.ndim])
        if layout_of(arr.shape, t.shape, None) is None:  # both fit: keep the other reading
            alt = _ints(t, arr if layout == "nhwc" else np.transpose(arr, inv), e)
        if layout == "nhwc":
            arr = np.transpose(arr, inv)
    elif tuple(arr.shape) != tuple(t.shape):
        if arr.size == int(np.prod(t.shape)) and (arr.ndim <= 1 or _units_only(arr.shape, t.shape)):
            by_order = tuple(arr.shape)  # flat, or other unit dimensions (TFLite's MEAN [1, C], ONNX [1, C, 1, 1])
            arr = arr.reshape(t.shape)
        else:
            return f"dump shape {list(e.array.shape)}, simulation {list(t.shape)}"
    return Matched(e.name, _ints(t, arr, e), layout, arr.dtype.kind == "f", e.source, alt, by_order)


def through_layout(prog: Program, matched: dict) -> None:
    """A dumped tensor a change of layout writes (a .tflite's NHWC tensor after an NCHW convolution) stands for the
    tensor that op computed: compared at the layout change's input (its integers transposed back, read as NHWC),
    so the convolution is judged and explained; the NHWC entry stays as a view (its consumers re-run on it)."""
    for node in prog.nodes:
        if not node.layout or not node.inputs:
            continue
        src, out = node.inputs[0], node.outputs[0]
        m = matched.get(out)
        perm = tuple(node.attrs.get("perm", ()))
        if m is None or src in matched or m.dump_shape is not None or len(perm) != m.array.ndim:
            continue
        if perm != CHANNELS_LAST.get(m.array.ndim):
            continue
        inv = tuple(int(a) for a in np.argsort(perm))
        alt = None if m.alt is None else np.transpose(m.alt, inv)
        matched[src] = Matched(m.key, np.ascontiguousarray(np.transpose(m.array, inv)), "nhwc", m.dequantized,
                               m.source, alt)
        m.view = True


def _units_only(shape, want) -> bool:
    """The two shapes differ only by dimensions of 1 (the same elements in the same order)."""
    return [d for d in shape if d != 1] == [d for d in want if d != 1]


def _ints(t: Tensor, arr: np.ndarray, e) -> np.ndarray:
    """``arr`` as integers of ``t``: floats (a dequantized dump) quantized with its scale and zero point."""
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise InputError(f"dump tensor {e.name!r} ({e.source}): holds NaN or infinity")
        return np.ascontiguousarray(t.q.quantize(arr))
    lo, hi = int(arr.min(initial=0)), int(arr.max(initial=0))
    if lo < t.q.qmin or hi > t.q.qmax:
        raise InputError(f"dump tensor {e.name!r} ({e.source}): values [{lo}, {hi}] lie outside the {t.q.dtype} "
                         f"range of tensor {t.float_name!r}; is it the right tensor, or a dequantized dump "
                         f"stored as integers?")
    return np.ascontiguousarray(arr.astype(t.q.np_dtype))


def scale_note(t: Tensor, e) -> str | None:
    """A note when the dump's own scale or zero point disagrees with the model's."""
    if not t.q.per_tensor:
        return None
    parts = []
    try:
        if "scale" in e.meta and not np.isclose(float(e.meta["scale"]), float(t.q.scale), rtol=1e-6, atol=0):
            parts.append(f"scale {e.meta['scale']} (the model's {float(t.q.scale):.9g})")
        if "zero_point" in e.meta and int(float(e.meta["zero_point"])) != int(t.q.zero_point):
            parts.append(f"zero point {e.meta['zero_point']} (the model's {int(t.q.zero_point)})")
    except (TypeError, ValueError):
        return f"{e.name}: the dump's scale/zero point are not numbers"
    return f"{e.name}: dump " + " and ".join(parts) + " (is the dump from this model?)" if parts else None
