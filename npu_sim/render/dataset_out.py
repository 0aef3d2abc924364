"""The files of a dataset run (``npu-sim run --data``): shards, manifest.json, metrics.csv, and its summary text.

OUT holds ``shard-00000.npz``... (per model output ``NAME.int`` and ``NAME`` stacked over the shard's samples),
``manifest.json`` and, with ``--float``, ``metrics.csv`` (see docs/DATASETS.md). Every file is written under a
temporary name and renamed, and its bytes depend only on its content: the .npz entries carry a fixed date, so a
killed run, resumed, ends with the same bytes as a run that was never stopped.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import time
import zipfile
from pathlib import Path

import numpy as np

from npu_sim.analysis.dataset.run import Plan, Progress, Summary, resume_state, shard_file
from npu_sim.errors import InputError
from npu_sim.render.files import write_bytes

MANIFEST = "manifest.json"
METRICS = "metrics.csv"
SHARD_NAME = re.compile(r"shard-\d{5,}\.npz")
TEMP_NAME = re.compile(r"\..+\.\d+\.tmp")
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry holds: no clock in the bytes
MANIFEST_SHARE = 0.1  # the most of a run's time that rewriting the manifest as shards finish may take


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """``arrays`` as a .npz (``numpy.load`` reads it; one ``KEY.npy`` entry per array, stored uncompressed, as
    ``numpy.savez`` writes them) whose bytes depend only on the arrays and their order."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for key, arr in arrays.items():
            data = io.BytesIO()
            np.lib.format.write_array(data, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=ZIP_DATE)
            info.create_system = 3
            info.external_attr = 0o644 << 16
            z.writestr(info, data.getvalue())
    return buf.getvalue()


def cell(v) -> str:
    """A CSV cell: text as it is (a resumed run's rows), integers in decimal, floats as Python's shortest exact
    form (``inf`` for an exact SQNR), nothing for a missing value."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_, int, np.integer)):
        return str(int(v))
    return repr(float(v))


def metrics_text(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow([cell(row.get(c)) for c in columns])
    return buf.getvalue()


def read_metrics(path: Path, columns: list[str] | None) -> dict[int, dict]:
    """A previous run's metrics rows by sample index, as text; nothing when the file is missing or its columns
    differ (its shards then run again)."""
    if columns is None or not path.is_file():
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != columns:
                return {}
            return {int(r["index"]): dict(r) for r in reader}
    except (ValueError, csv.Error, UnicodeDecodeError):
        return {}


class DatasetWriter:
    """Writes a dataset run into the folder ``out`` (created if missing). ``resume``: keep the shards a previous
    run of the same job already wrote there; without it, a folder holding a previous run is refused.
    ``saved``: once a manifest is written (or kept by ``--resume``), (the shards it lists, the shards of the run)."""

    def __init__(self, out, resume: bool = False):
        self.out = Path(out)
        self.resume = resume
        self.last: float | None = None  # when the last rewrite of the manifest ended (time.monotonic)
        self.cost = 0.0                 # and how long it took
        self.shards = 0
        self.saved: tuple[int, int] | None = None

    def start(self, plan: Plan) -> Progress:
        self.shards = plan.shards
        out = self.out
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {str(out)!r} is a file; give a folder (it is created if missing)")
        out.mkdir(parents=True, exist_ok=True)
        names = sorted(p.name for p in out.iterdir())
        for name in names:
            if TEMP_NAME.fullmatch(name):  # left by a killed run
                (out / name).unlink(missing_ok=True)
        names = [n for n in names if not TEMP_NAME.fullmatch(n)]
        foreign = [n for n in names if not (n in (MANIFEST, METRICS) or SHARD_NAME.fullmatch(n))]
        if foreign:
            raise InputError(f"--out {str(out)!r} holds other files ({', '.join(foreign[:3])}); give a new or empty "
                             f"folder for the dataset run")
        if not names:
            return Progress()
        if not self.resume:
            raise InputError(f"--out {str(out)!r} holds a previous dataset run ({', '.join(names[:3])}); add "
                             f"--resume to go on with it, or give a new or empty folder")
        if not (out / MANIFEST).is_file():
            return Progress()  # killed before its first manifest: its shards are written again
        try:
            previous = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"--resume: {str(out / MANIFEST)!r} cannot be read ({exc}); give a new --out") from None
        if not isinstance(previous, dict):
            raise InputError(f"--resume: {str(out / MANIFEST)!r} is not a dataset run's manifest; give a new --out")
        hashes = {n: hashlib.sha256((out / n).read_bytes()).hexdigest() for n in names if SHARD_NAME.fullmatch(n)}
        state = resume_state(plan, previous, hashes, read_metrics(out / METRICS, plan.columns()))
        self.saved = (len(state.shards), plan.shards)
        return state

    def shard(self, k: int, arrays: dict[str, np.ndarray]) -> dict:
        data = npz_bytes(arrays)
        name = shard_file(k)
        write_bytes(self.out / name, data)
        return {"file": name, "sha256": hashlib.sha256(data).hexdigest()}

    def due(self) -> bool:
        """Whether to rewrite the manifest as a shard finishes: after every shard, unless that would spend more
        than ``MANIFEST_SHARE`` of the run's time on it (its size grows with the dataset); then as often as that
        share allows. A run that stops saves it anyway (``dataset.run.execute``)."""
        return self.last is None or time.monotonic() - self.last >= self.cost * (1 / MANIFEST_SHARE - 1)

    def update(self, manifest: dict, rows: list[dict], columns: list[str] | None) -> None:
        """The metrics CSV, then the manifest (which names the shards written: it goes last)."""
        began = time.monotonic()
        if columns is not None:
            write_bytes(self.out / METRICS, metrics_text(rows, columns).encode("utf-8"))
        write_bytes(self.out / MANIFEST, manifest_text(manifest).encode("utf-8"))
        self.last = time.monotonic()
        self.cost = self.last - began
        self.saved = (len(manifest["shards"]), self.shards)


def manifest_text(manifest: dict) -> str:
    """The manifest as JSON: one key per line, and one line per sample, failure and shard."""
    lines = []
    for key, value in manifest.items():
        if isinstance(value, list) and value:
            items = ",\n".join("  " + json.dumps(v) for v in value)
            lines.append(f" {json.dumps(key)}: [\n{items}\n ]")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _pct(v) -> str:
    return "-" if v is None else f"{100.0 * v:.2f}%"


def summary_lines(summary: Summary, out) -> list[str]:
    """The run's summary for the terminal."""
    lines = [f"wrote {summary.samples} of {summary.planned} sample(s) in {summary.shards} shard(s) -> {out} "
             f"(manifest.json)" + (f"; {summary.reused_shards} shard(s) kept from the previous run (--resume)"
                                   if summary.reused_shards else "")]
    for name, m in summary.metrics.items():
        parts = [f"mean cosine {m['cosine']:.6f}" if m["cosine"] is not None else "mean cosine -"]
        if m["top1_agree"] is not None:
            parts.append(f"top-1 agreement {_pct(m['top1_agree'])}")
        if m["accuracy"] is not None:
            parts.append(f"accuracy {_pct(m['accuracy'])} (float {_pct(m['float_accuracy'])})")
        lines.append(f"output {name}: " + ", ".join(parts) + f" -> {Path(out) / METRICS}")
    for name, reason in summary.not_computed:  # a partial program (the board refuses a node it depends on)
        lines.append(f"output {name}: {reason}; in no shard (manifest.json: not_computed)")
    return lines
