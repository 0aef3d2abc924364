"""The one shape resolver: a fixed shape for every model input, and the one message when nothing fixes one.

A model input may have dynamic dimensions (a name or nothing where the file has no size). Every command and the API
fix them here, in this order: ``--input-shape`` (``given``) wins, checked against the model's fixed dimensions; else
the shape of what feeds the input (``fed``: the feed of one run, or data split into samples: an array or its header,
with or without its batch dimension) fixes the dynamic ones; else a free leading (batch) dimension is 1 where the
caller allows it (``free_batch``). Whatever is still dynamic is an ``InputError`` naming the input, its dimensions
and what to pass (:func:`dynamic_message`). No numpy, no onnx here: the CLI imports it before it knows a command.
"""
from __future__ import annotations

from dataclasses import dataclass

from npu_sim.errors import InputError


@dataclass(frozen=True)
class ModelInput:
    """A graph input as the file declares it: ``dims`` (None where dynamic; ``None`` as a whole: no shape at
    all), each dimension's text (its size, its name, or "?") and the element type a feed must have."""
    name: str
    dims: tuple[int | None, ...] | None
    labels: tuple[str, ...]
    dtype: str

    @property
    def dynamic(self) -> bool:
        return self.dims is None or None in self.dims

    @property
    def shown(self) -> str:
        return "[" + ", ".join(self.labels) + "]" if self.dims is not None else "unknown"


def shape_text(dims) -> str:
    return "x".join(str(d) for d in dims)


def example(inp: ModelInput) -> str:
    """A shape to write for ``inp``: its fixed dimensions, 1 for a free batch, a free spatial dimension of an NCHW
    input as its fixed neighbour (a square), else the dimension's own name in capitals."""
    if inp.dims is None:
        return "1x3x224x224"
    dims = inp.dims
    spatial = [d for d in dims[2:] if d is not None] if len(dims) == 4 else []
    out = []
    for i, (d, label) in enumerate(zip(dims, inp.labels)):
        if d is not None:
            out.append(str(d))
        elif i == 0:
            out.append("1")
        elif i >= 2 and spatial:
            out.append(str(spatial[0]))
        else:
            out.append(label.upper() if label != "?" else f"D{i}")
    return "x".join(out)


def dynamic_message(inp: ModelInput, where: str = "") -> str:
    """The one message for an input whose shape nothing fixed."""
    lead = f"{where}: " if where else ""
    return (f"{lead}input {inp.name!r} has a dynamic shape {inp.shown}; give a fixed one with --input-shape "
            f"{inp.name}={example(inp)} (input_shapes= in Python), or feed data whose shape fixes it")


def _given(inp: ModelInput, shape, source: str) -> tuple[int, ...]:
    """``shape`` (from ``source``) checked against ``inp``: every dimension at least 1, its rank, its fixed sizes."""
    shape = tuple(int(v) for v in shape)
    given = f"input {inp.name!r}: shape {shape_text(shape)} (from {source})"
    if any(v < 1 for v in shape):
        raise InputError(f"{given}: every dimension must be at least 1")
    if inp.dims is not None and len(inp.dims) != len(shape):
        raise InputError(f"{given}: the model input has rank {len(inp.dims)} {inp.shown}")
    for d, want in zip(inp.dims or (), shape):
        if d is not None and d != want:
            raise InputError(f"{given} conflicts with the model's fixed shape {inp.shown}")
    return shape


def _from_feed(inp: ModelInput, shape, samples: bool, free_batch: int | None) -> tuple[int, ...] | None:
    """The input's shape from what feeds it. One run on the feed: the feed's own shape (checked against the
    model's). Data split into ``samples``: the feed's dimensions fill the dynamic ones only, a free batch is
    ``free_batch`` (or 1), and a feed one rank short (a sample without its batch) fits too; whether the data fits
    is the data reader's to say."""
    shape = tuple(int(v) for v in shape)
    if not samples or inp.dims is None:
        return shape
    rank, batch = len(inp.dims), free_batch or 1
    if rank and len(shape) == rank - 1:
        shape = (batch,) + shape
    if len(shape) != rank:
        return None
    return tuple(batch if i == 0 and d is None else (v if d is None else d)
                 for i, (d, v) in enumerate(zip(inp.dims, shape)))


def resolve_shapes(inputs: dict[str, ModelInput], given: dict | None = None, fed: dict | None = None,
                   free_batch: int | None = None, samples: bool = False, where: str = ""
                   ) -> dict[str, tuple[int, ...]]:
    """A fixed shape for every input of ``inputs`` (see the module docstring). ``given``: ``--input-shape``
    (input name -> shape); ``fed``: the shapes of what feeds the inputs (arrays, array headers or shapes), used
    only where the model's shape is dynamic; ``samples``: ``fed`` is data to be split into samples (a dataset),
    not the feed of one run; ``free_batch``: the size of a free leading dimension nothing else fixes (None: it
    must be fixed too). ``where`` (the model) begins the messages."""
    given = dict(given or {})
    unknown = set(given) - set(inputs)
    if unknown:
        raise InputError(f"--input-shape names {sorted(unknown)}, but the model's inputs are {list(inputs)}")
    shapes: dict[str, tuple[int, ...]] = {}
    for name, inp in inputs.items():
        if name in given:
            shapes[name] = _given(inp, given[name], "--input-shape")
            continue
        if not inp.dynamic:
            shapes[name] = tuple(inp.dims)
            continue
        feed = (fed or {}).get(name)
        shape = None if feed is None else _from_feed(inp, getattr(feed, "shape", feed), samples, free_batch)
        if shape is not None:
            shapes[name] = _given(inp, shape, "the data fed to it")
            continue
        dims = list(inp.dims or ())
        if dims and dims[0] is None and free_batch is not None:
            dims[0] = free_batch
        if inp.dims is None or None in dims:
            raise InputError(dynamic_message(inp, where))
        shapes[name] = tuple(dims)
    return shapes


def free_batch_only(inp: ModelInput) -> bool:
    """The input's only dynamic dimension is its leading (batch) one."""
    return inp.dims is not None and bool(inp.dims) and inp.dims[0] is None and None not in inp.dims[1:]
