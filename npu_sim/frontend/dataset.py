"""Datasets for the accuracy report: folders of images, .npy and .npz files, split into one feed per sample.

A *sample* is one feed dict at the model's (fixed) input shapes. A batch dimension in the data is split into
samples when the model's input has batch 1 (or a dynamic batch, which the report fixes to 1).

* image (.png/.jpg/.jpeg/.bmp): single-input NCHW models with 1 or 3 channels; resized to the input, scaled to
  [0, 1], then ``(x - mean) / std`` per channel — the same preprocessing as ``npu-sim run --input``.
* .npy: one array for the single input; ``[N, ...]`` with the input's rank is split into N samples, an array
  without the batch dimension is one sample.
* .npz: arrays named like the model inputs (several inputs), else the array ``x``, else every array in turn;
  an array ``y`` (or ``labels``) next to ``x`` holds integer class labels, one per sample.
"""
from __future__ import annotations

import importlib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npu_sim.errors import InputError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
ARRAY_SUFFIXES = (".npy", ".npz")


@dataclass
class Dataset:
    samples: list[dict[str, np.ndarray]]          # one feed per sample, at the model's input shapes
    labels: np.ndarray | None = None              # int64 [len(samples) * batch], when the data had them
    description: str = ""
    sources: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.samples)


_NOT_ARRAYS = ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"BM", "a BMP image"),
               (b"\x08\x01\x12", "an ONNX model"), (b"", "an empty file"))


def read_arrays(path: Path, what: str) -> dict[str, np.ndarray]:
    """The arrays of a .npy (one, named "") or .npz file, read by what the file holds, not by its name (a .npz
    named .npy is read as the .npz it is); never unpickles. ``what`` names the option in the message."""
    path = Path(path)
    _array_magic(path, what)
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return {"": loaded}
        with loaded as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:
        raise _unreadable(path, what, exc) from None


def _array_magic(path: Path, what: str) -> bytes:
    """The magic string of an array file (a .npy's, or a zip archive's for a .npz); an InputError for another file."""
    if not path.is_file():
        kind = "missing" if not path.exists() else "not a regular file (a folder, a FIFO or a device)"
        raise InputError(f"{what}: {str(path)!r} is {kind}; give a .npy or .npz file")
    with open(path, "rb") as f:
        head = f.read(8)
    if not head.startswith((b"\x93NUMPY", b"PK")):  # a .npy's magic string; a .npz is a zip archive
        kind = next((k for magic, k in _NOT_ARRAYS if head.startswith(magic)), "neither a .npy nor a .npz file")
        raise InputError(f"{what}: {str(path)!r} is {kind}, not a numpy array file; save the array with numpy.save "
                         f"(.npy) or numpy.savez (.npz), or give an image with its own suffix (.png, .jpg, .bmp)")
    return head[:6] if head.startswith(b"\x93NUMPY") else head[:2]


def _unreadable(path: Path, what: str, exc: Exception) -> InputError:
    if "pickle" in str(exc):
        return InputError(f"{what}: {str(path)!r} holds Python objects (pickled data), which npu-sim never "
                          f"loads; save a numeric array (numpy.save of a float or integer array)")
    return InputError(f"{what}: cannot read {str(path)!r} as a .npy/.npz array file ({exc})")


def data_files(paths) -> list[Path]:
    """The files of ``--data`` in reading order: each folder's images and arrays by name, then each file."""
    files = []
    for spec in paths:
        p = Path(spec)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES + ARRAY_SUFFIXES)
            if not found:
                raise InputError(f"--data: folder {str(p)!r} holds no .png/.jpg/.bmp/.npy/.npz file")
            files.extend(found)
        elif p.is_file():
            if p.suffix.lower() not in IMAGE_SUFFIXES + ARRAY_SUFFIXES:
                raise InputError(f"--data: {str(p)!r} is not an image (.png/.jpg/.bmp) or a .npy/.npz file")
            files.append(p)
        else:
            raise InputError(f"--data: {str(p)!r} does not exist; give a folder of images or .npy/.npz files")
    return files


def _assign(arrays: dict[str, np.ndarray], input_names, path: Path) -> dict[str, np.ndarray]:
    names = list(input_names)
    if set(names) <= set(arrays) and names:
        return {n: arrays[n] for n in names}
    if len(names) != 1:
        raise InputError(f"--data {str(path)!r}: the model has inputs {names}; a .npz must hold one array per "
                         f"input, named like them")
    if "x" in arrays:
        return {names[0]: arrays["x"]}
    if "" in arrays:
        return {names[0]: arrays[""]}
    return {}


def _check_rows(arr, shape: tuple[int, ...], dtype: str, path: Path, name: str) -> int:
    """How many samples ``arr`` (an array, or an :class:`ArrayHeader`: only its shape and dtype are read) splits
    into at ``shape``; an ``InputError`` naming the file when it does not fit the input."""
    dims = tuple(arr.shape)
    if len(dims) == len(shape) - 1:
        dims = (1,) + dims
    if len(dims) != len(shape) or dims[1:] != tuple(shape[1:]):
        raise InputError(f"--data {str(path)!r}: array of shape {list(dims)} does not fit input {name!r} of "
                         f"shape {list(shape)} (give [N, {', '.join(map(str, shape[1:]))}] or one sample)")
    batch = shape[0]
    if dims[0] % batch:
        raise InputError(f"--data {str(path)!r}: {dims[0]} rows do not split into batches of {batch} for "
                         f"input {name!r}")
    if dtype.startswith("float"):
        if arr.dtype.kind not in "fiu":
            raise InputError(f"--data {str(path)!r}: input {name!r} needs numbers, got {arr.dtype}")
    elif arr.dtype != np.dtype(dtype):
        raise InputError(f"--data {str(path)!r}: input {name!r} is already quantized ({dtype}); give {dtype} "
                         f"arrays, got {arr.dtype}")
    return dims[0] // batch


def read_image(path: Path, shape: tuple[int, ...], mean: str = "0", std: str = "1", label: str = "--data"
               ) -> np.ndarray:
    """One image as a float32 [1, C, H, W] feed (or [1, H, W, C] for an NHWC input, a .tflite's: the layout the
    shape shows, NCHW where both fit): resized, scaled to [0, 1], then (x - mean) / std. ``label`` names the
    option in error messages (``--data``, ``--input x``)."""
    if len(shape) == 4 and shape[1] not in (1, 3) and shape[3] in (1, 3):
        nchw = read_image(path, (shape[0], shape[3], shape[1], shape[2]), mean, std, label)
        return np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))
    if len(shape) != 4 or shape[1] not in (1, 3):
        raise InputError(f"{label} {str(path)!r}: an image can feed an NCHW or NHWC input with 1 or 3 channels; "
                         f"the input has shape {list(shape)}. Convert the data to .npy yourself")
    try:
        from PIL import Image
    except ImportError:
        raise InputError("reading images needs Pillow: pip install pillow (or give .npy files)") from None
    try:
        img = Image.open(path).convert("RGB" if shape[1] == 3 else "L").resize((shape[3], shape[2]))
    except Exception as exc:
        raise InputError(f"{label}: cannot read image {str(path)!r} ({exc})") from None
    x = np.asarray(img, dtype=np.float32) / 255.0
    x = x[None, None] if x.ndim == 2 else x.transpose(2, 0, 1)[None]
    m, s = _normalization(mean, std, shape[1])
    return np.ascontiguousarray(np.broadcast_to((x - m) / s, (1,) + tuple(shape[1:])).astype(np.float32))


def _normalization(mean: str, std: str, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """``--mean`` and ``--std`` as float32 [C, 1, 1] arrays (1 or ``channels`` values each)."""
    try:
        m = np.array([float(v) for v in str(mean).split(",")], np.float32).reshape(-1, 1, 1)
        s = np.array([float(v) for v in str(std).split(",")], np.float32).reshape(-1, 1, 1)
    except ValueError:
        raise InputError(f"--mean/--std must be comma-separated numbers, got {mean!r} / {std!r}") from None
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(s))):
        raise InputError(f"--mean/--std must be finite numbers, got {mean!r} / {std!r}")
    if np.any(s == 0):
        raise InputError("--std must not contain zero")
    if m.shape[0] not in (1, channels) or s.shape[0] not in (1, channels):
        raise InputError(f"--mean/--std need 1 or {channels} values")
    return m, s


def _check_image_input(f: Path, shapes: dict, dtypes: dict) -> None:
    names = list(shapes)
    if len(names) != 1:
        raise InputError(f"--data {str(f)!r}: images can only feed a single-input model; the model has "
                         f"inputs {names} (give a .npz with one array per input)")
    if shapes[names[0]][0] != 1:
        raise InputError(f"--data {str(f)!r}: images feed inputs of batch 1; give --input-shape with batch 1")
    if not dtypes[names[0]].startswith("float"):
        raise InputError(f"--data {str(f)!r}: input {names[0]!r} is already quantized; give .npy arrays")


def load_dataset(paths, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str], mean: str = "0",
                 std: str = "1", limit: int | None = None) -> Dataset:
    """Every file of ``paths`` (folders are listed in name order) read into samples at ``shapes``: each file
    checked by :func:`scan_file`, its samples read by :func:`read_sample` (the one way a dataset is read; a
    dataset run reads the same samples one shard at a time). Labels when every file has them."""
    samples: list[dict[str, np.ndarray]] = []
    labels: list[np.ndarray] = []
    have_labels = True
    files = data_files(paths)
    for f in files:
        if limit is not None and len(samples) >= limit:
            break
        source, lab = scan_file(f, shapes, dtypes, mean, std)
        arrays = None if source.image else open_arrays(f)
        count = source.samples if limit is None else min(source.samples, limit - len(samples))
        samples.extend(read_sample(source, i, shapes, dtypes, mean, std, arrays) for i in range(count))
        if lab is None:
            have_labels = False
        else:
            labels.append(lab)
    if not samples:
        raise InputError("--data: no samples found")
    batch = next(iter(shapes.values()))[0]
    lab = np.concatenate(labels)[: len(samples) * batch] if have_labels and labels else None
    desc = f"{len(samples)} sample(s) from {len(files)} file(s)" if len(files) != 1 else \
        f"{len(samples)} sample(s) from {files[0]}"
    return Dataset(samples, lab, desc, [str(f) for f in files])


# A dataset run (``npu-sim run --data``) keeps each sample by reference: ``scan_file`` counts and checks a file's
# samples from its headers, ``read_sample`` reads one of them when its shard is built; ``load_dataset`` is both.

@dataclass(frozen=True)
class ArrayHeader:
    """An array of a .npy/.npz file as its header describes it (its data not read)."""
    key: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class SourceFile:
    """A file of ``--data`` as :func:`scan_file` found it: ``samples`` samples, and for an array file the runs of
    them in reading order (input name -> the file's array key, and the run's length)."""
    path: Path
    samples: int
    parts: tuple = ()

    @property
    def image(self) -> bool:
        return self.path.suffix.lower() in IMAGE_SUFFIXES


def _header(f, key: str) -> ArrayHeader:
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(f)
    if dtype.hasobject:
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
    return ArrayHeader(key, tuple(int(d) for d in shape), dtype)


def read_headers(path: Path, what: str) -> dict[str, ArrayHeader]:
    """:func:`read_arrays` reading only the arrays' headers: same checks and messages, no array data read."""
    path = Path(path)
    magic = _array_magic(path, what)
    try:
        if magic == b"\x93NUMPY":
            with open(path, "rb") as f:
                return {"": _header(f, "")}
        with zipfile.ZipFile(path) as z:
            out = {}
            for member in z.namelist():
                key = member[:-4] if member.endswith(".npy") else member
                with z.open(member) as f:
                    out[key] = _header(f, key)
            return out
    except Exception as exc:
        raise _unreadable(path, what, exc) from None


def scan_file(path: Path, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str], mean: str = "0",
              std: str = "1") -> tuple[SourceFile, np.ndarray | None]:
    """A file of ``--data`` checked as :func:`load_dataset` checks it, from its headers only (an image's header,
    an array's shape and dtype; no pixel or array data read): its :class:`SourceFile` and its labels (int64, one
    per batch row, when a .npz holds them). An ``InputError`` names what does not fit."""
    path = Path(path)
    names = list(shapes)
    if path.suffix.lower() in IMAGE_SUFFIXES:
        _check_image_input(path, shapes, dtypes)
        check_image(path, shapes[names[0]], mean, std)
        return SourceFile(path, 1), None
    headers = read_headers(path, "--data")
    assigned = _assign(headers, names, path)
    if not assigned:  # an .npz without x or input names: every array is a sample batch of the single input
        parts = tuple(({names[0]: h.key}, _check_rows(h, shapes[names[0]], dtypes[names[0]], path, names[0]))
                      for h in headers.values())
        return SourceFile(path, sum(n for _, n in parts), parts), None
    counts = {_check_rows(h, shapes[n], dtypes[n], path, n) for n, h in assigned.items()}
    if len(counts) != 1:
        raise InputError(f"--data {str(path)!r}: the inputs' arrays hold different numbers of samples")
    n = counts.pop()
    labels = None
    lab = headers.get("y", headers.get("labels"))
    if lab is not None and lab.ndim == 1 and lab.dtype.kind in "iu" and lab.shape[0] == n * shapes[names[0]][0]:
        try:
            with np.load(path, allow_pickle=False) as z:  # the labels' member only
                labels = z[lab.key].astype(np.int64)
        except Exception as exc:
            raise _unreadable(path, "--data", exc) from None
    return SourceFile(path, n, (({name: h.key for name, h in assigned.items()}, n),)), labels


def check_image(path: Path, shape: tuple[int, ...], mean: str = "0", std: str = "1", label: str = "--data") -> None:
    """What :func:`read_image` checks before it decodes: the input's shape, ``--mean``/``--std``, and the file's
    image header (a file that is no image, or one of a format Pillow does not know)."""
    if len(shape) != 4 or shape[1] not in (1, 3):
        raise InputError(f"{label} {str(path)!r}: an image can feed an NCHW input with 1 or 3 channels; the input "
                         f"has shape {list(shape)}. Convert the data to .npy yourself")
    _normalization(mean, std, shape[1])
    try:
        image = importlib.import_module("PIL.Image")
    except ImportError:
        raise InputError("reading images needs Pillow: pip install pillow (or give .npy files)") from None
    try:
        with image.open(path):
            pass
    except Exception as exc:
        raise InputError(f"{label}: cannot read image {str(path)!r} ({exc})") from None


def open_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a .npy/.npz file for :func:`read_sample`: a .npy memory-mapped (only the rows read are
    loaded), a .npz's arrays read whole."""
    path = Path(path)
    if _array_magic(path, "--data") != b"\x93NUMPY":
        return read_arrays(path, "--data")
    try:
        return {"": np.load(path, mmap_mode="r", allow_pickle=False)}
    except Exception as exc:
        raise _unreadable(path, "--data", exc) from None


def read_sample(source: SourceFile, item: int, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str],
                mean: str = "0", std: str = "1", arrays: dict[str, np.ndarray] | None = None
                ) -> dict[str, np.ndarray]:
    """Sample ``item`` of ``source`` (0 for an image), exactly as :func:`load_dataset` reads it: decoded and
    preprocessed, or sliced from the file's ``arrays`` (:func:`open_arrays`) and converted."""
    names = list(shapes)
    if source.image:
        return {names[0]: read_image(source.path, shapes[names[0]], mean, std)}
    arrays = open_arrays(source.path) if arrays is None else arrays
    for keys, count in source.parts:
        if item < count:
            return {name: _row(arrays[key], item, shapes[name], dtypes[name], source.path)
                    for name, key in keys.items()}
        item -= count
    raise IndexError(f"{source.path} holds {source.samples} sample(s)")


def _row(arr: np.ndarray, r: int, shape: tuple[int, ...], dtype: str, path: Path) -> np.ndarray:
    """Sample ``r`` of an array :func:`_check_rows` accepted, as :func:`_split` gives it."""
    if arr.ndim == len(shape) - 1:
        arr = arr[None]
    batch = shape[0]
    x = np.array(arr[r * batch:(r + 1) * batch], order="C")
    if dtype.startswith("float"):
        x = x.astype(np.float32, copy=False)
        if not np.all(np.isfinite(x)):
            raise InputError(f"--data {str(path)!r}: contains NaN or infinity")
    return x


def first_headers(files, input_names) -> dict[str, ArrayHeader]:
    """The first array header of each input in the array files of ``files`` (its shape fixes dynamic dimensions
    before the model is lowered), skipping files that cannot be read (they fail by name when read)."""
    first: dict[str, ArrayHeader] = {}
    names = list(input_names)
    for f in files:
        if Path(f).suffix.lower() in ARRAY_SUFFIXES:
            try:
                for name, header in _assign(read_headers(f, "--data"), names, Path(f)).items():
                    first.setdefault(name, header)
            except InputError:
                continue
        if len(first) == len(names):
            break
    return first
