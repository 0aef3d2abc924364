"""Reading tensor dumps as boards and vendor runtimes write them (the format is in docs/DUMPS.md).

A dump is one of:

* a folder with a manifest -- ``index.json`` (what ``npu-sim run --dump-all`` writes), ``manifest.json`` or
  ``manifest.csv`` -- listing each tensor's file (``.npy``, or raw little-endian bytes with ``shape`` and
  ``dtype``), optionally its ``layout`` (``nhwc``/``nchw``), ``scale`` and ``zero_point``;
* a folder of ``.npy`` files without a manifest: each named by its file name without ``.npy``;
* an ``.npz`` archive (or a single ``.npy``, named by its file name).

Every file a manifest lists must lie inside the dump folder once links are resolved; an entry pointing outside
(``../elsewhere.npy``, a symbolic link out) is refused. Reading returns ``DumpEntry`` records; matching them to the
program's tensors is ``match``'s job.
"""
from __future__ import annotations

import csv
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npu_sim.analysis.compare.match import sanitize
from npu_sim.errors import InputError

MANIFESTS = ("index.json", "manifest.json", "manifest.csv")
LAYOUTS = ("nhwc", "nchw")
# dtypes a raw binary file may hold (little-endian); float16 for dequantized dumps written by half-precision tools
RAW_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "float16", "float32", "float64")


@dataclass
class DumpEntry:
    name: str                       # the name the dump gives the tensor
    array: np.ndarray
    source: str                     # where it was read from (for messages)
    layout: str | None = None       # "nhwc" | "nchw" when the manifest says so
    meta: dict = field(default_factory=dict)  # scale, zero_point (and run --dump-all's program "tensor") as given


def read_dump(path) -> dict[str, DumpEntry]:
    """Every tensor of the dump at ``path`` (folder, .npz or .npy), by the dump's own name."""
    p = Path(path)
    if p.is_dir():
        for m in MANIFESTS:
            if (p / m).is_file():
                return _read_manifest(p, p / m)
        return _read_npy_folder(p)
    if not p.exists():
        raise InputError(f"dump {str(p)!r} does not exist: give a folder, an .npz or an .npy (write one with "
                         f"npu-sim run --dump-all --out DIR)")
    if p.suffix.lower() == ".npz":
        return _read_npz(p)
    if p.suffix.lower() == ".npy":
        return {p.stem: DumpEntry(p.stem, load_npy(p, p.stem), str(p))}
    raise InputError(f"dump {str(p)!r}: not a folder, an .npz or an .npy (see docs/DUMPS.md for the formats)")


def load_npy(path: Path, name: str) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise InputError(f"dump tensor {name!r}: cannot read {str(path)!r} as a .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray):
        raise InputError(f"dump tensor {name!r}: {str(path)!r} is an .npz archive, not an .npy array")
    _check_kind(arr, name, path)
    return arr


def _check_kind(arr: np.ndarray, name: str, path) -> None:
    if arr.dtype.kind not in "iuf":
        raise InputError(f"dump tensor {name!r}: {str(path)!r} holds {arr.dtype} values; a dump holds integers "
                         f"or dequantized floats")


def _read_npz(p: Path) -> dict[str, DumpEntry]:
    try:
        with np.load(p, allow_pickle=False) as z:
            out = {}
            for k in z.files:
                arr = z[k]
                _check_kind(arr, k, p)
                out[k] = DumpEntry(k, arr, f"{p}[{k}]")
            return out
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"dump {str(p)!r}: cannot read it as an .npz archive ({exc})") from None


def _read_npy_folder(d: Path) -> dict[str, DumpEntry]:
    files = sorted(f for f in d.iterdir() if f.suffix.lower() == ".npy")
    if not files:
        raise InputError(f"dump folder {str(d)!r} holds neither a manifest ({', '.join(MANIFESTS)}) nor .npy "
                         f"files; see docs/DUMPS.md")
    out = {}
    for f in files:
        inside(d, f.name, f.stem)
        out[f.stem] = DumpEntry(f.stem, load_npy(f, f.stem), str(f))
    return out


def inside(d: Path, rel: str, name: str) -> Path:
    """``d / rel``, refused (bad input) when it resolves outside the dump folder ``d`` (``..``, absolute paths,
    symbolic links out)."""
    root = d.resolve()
    target = (d / rel).resolve()
    if target != root and root not in target.parents:
        raise InputError(f"dump tensor {name!r}: file {rel!r} lies outside the dump folder {str(d)!r}; a dump's "
                         f"files must be inside its folder")
    return target


def _read_manifest(d: Path, mpath: Path) -> dict[str, DumpEntry]:
    rows = _manifest_rows(mpath)
    out = {}
    for i, row in enumerate(rows):
        name = row.get("name")
        if not isinstance(name, str) or not name or not isinstance(row.get("file"), str):
            raise InputError(f"{mpath}: entry {i + 1} needs a \"name\" and a \"file\" (see docs/DUMPS.md)")
        layout = row.get("layout") or None
        if layout is not None and str(layout).lower() not in LAYOUTS:
            raise InputError(f"{mpath}: tensor {name!r}: layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        f = inside(d, row["file"], name)
        if not f.is_file():
            raise InputError(f"dump tensor {name!r}: file {str(d / row['file'])!r} listed in {mpath.name} is "
                             f"missing")
        arr = load_npy(f, name) if f.suffix.lower() == ".npy" else _read_raw(f, name, row, mpath)
        meta = {k: row[k] for k in ("scale", "zero_point", "tensor") if row.get(k) not in (None, "")}
        out[name] = DumpEntry(name, arr, str(f), layout.lower() if layout else None, meta)
    return out


def _manifest_rows(mpath: Path) -> list[dict]:
    """The manifest's entries as dicts with at least name and file."""
    try:
        text = mpath.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{mpath}: cannot read it ({exc})") from None
    if mpath.suffix.lower() == ".csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        if not rows or "name" not in rows[0] or "file" not in rows[0]:
            raise InputError(f"{mpath}: a CSV manifest needs a header line with at least name,file (and shape, "
                             f"dtype for raw files; layout optional)")
        return [{k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in r.items() if k} for r in rows]
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{mpath}: not valid JSON ({exc})") from None
    if isinstance(doc, dict) and isinstance(doc.get("tensors"), list):
        doc = doc["tensors"]
    if isinstance(doc, list) and all(isinstance(r, dict) for r in doc):
        return doc
    if isinstance(doc, dict) and all(isinstance(v, dict) for v in doc.values()):  # index.json: name -> entry
        return [{**v, "name": k} for k, v in doc.items()]
    raise InputError(f"{mpath}: expected {{\"tensors\": [{{\"name\": ..., \"file\": ...}}, ...]}} or an object "
                     f"mapping tensor names to {{\"file\": ...}} (see docs/DUMPS.md)")


def parse_shape(value, name: str, where) -> tuple[int, ...]:
    if isinstance(value, str):
        text = value.strip().strip("[]()").replace(",", "x").replace(" ", "")
        parts = [s for s in text.split("x") if s]
        value = parts
    try:
        shape = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        shape = None
    if shape is None or any(s < 0 for s in shape):
        raise InputError(f"{where}: tensor {name!r}: shape {value!r} is not a list of sizes (write 1x8x8x16 in "
                         f"CSV, [1, 8, 8, 16] in JSON)")
    return shape


def _read_raw(f: Path, name: str, row: dict, mpath: Path) -> np.ndarray:
    dtype = str(row.get("dtype") or "").strip().lower()
    if dtype not in RAW_DTYPES:
        raise InputError(f"{mpath}: tensor {name!r}: a raw file needs \"dtype\", one of {', '.join(RAW_DTYPES)} "
                         f"(got {row.get('dtype')!r})")
    if row.get("shape") in (None, ""):
        raise InputError(f"{mpath}: tensor {name!r}: a raw file needs \"shape\"")
    shape = parse_shape(row["shape"], name, mpath)
    dt = np.dtype(dtype).newbyteorder("<")
    want = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    size = f.stat().st_size
    if size != want:
        raise InputError(f"dump tensor {name!r}: {str(f)!r} holds {size} bytes; shape {list(shape)} of {dtype} "
                         f"needs {want}")
    return np.fromfile(f, dtype=dt).astype(dtype).reshape(shape)


def read_input(path, name: str) -> np.ndarray:
    """The array fed to input ``name`` from ``path``: an .npy; an .npz or a dump folder holding ``name`` (or its
    sanitized name, or a single array)."""
    entries = read_dump(path)
    if len(entries) == 1:
        return next(iter(entries.values())).array
    for key in (name, sanitize(name)):
        if key in entries:
            return entries[key].array
    raise InputError(f"--input {name}: {str(path)!r} holds {len(entries)} arrays and none is named {name!r}")
