"""Bad input files (issue 17, item 5): every broken ``--input`` of ``run``/``check`` and ``--data`` of ``report``
gets exit 1 or 2 and one clear sentence naming what is wrong; never a traceback, never exit 3 (a bug), never a
hang, never exit 0.

The files are made here, from the demo's own sample: wrong dtypes, pickled objects, truncated and disguised
files, NaN and infinity, wrong shapes, unknown and repeated names, corrupt images, folders, FIFOs.
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from npu_sim.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "models" / "demo"
MODEL = DEMO / "digits_cnn.qdq.onnx"
SAMPLE = DEMO / "digits_sample.npy"


def _sample() -> np.ndarray:
    return np.load(SAMPLE)


def _npy_bytes(arr: np.ndarray, tmp: Path) -> bytes:
    np.save(tmp / "_scratch.npy", arr)
    return (tmp / "_scratch.npy").read_bytes()


def _make(kind: str, tmp: Path) -> Path:
    """One bad input file (or folder) of the given kind, in ``tmp``."""
    x = _sample()
    path = tmp / f"{kind}.npy"
    if kind == "object_pickle":
        np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    elif kind == "truncated":
        path.write_bytes(_npy_bytes(x, tmp)[:-40])
    elif kind == "header_only":
        path.write_bytes(_npy_bytes(x, tmp)[:60])
    elif kind == "empty_file":
        path.write_bytes(b"")
    elif kind == "zip_named_npy":
        np.savez(tmp / "real.npz", input=x)
        path.write_bytes((tmp / "real.npz").read_bytes())
    elif kind == "png_named_npy":
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    elif kind == "text_named_npy":
        path.write_text("1, 2, 3\n")
    elif kind == "nan":
        y = x.copy()
        y.reshape(-1)[5] = np.nan
        np.save(path, y)
    elif kind == "inf":
        y = x.copy()
        y.reshape(-1)[3] = np.inf
        np.save(path, y)
    elif kind == "wrong_shape":
        np.save(path, np.zeros((1, 3, 8, 8), np.float32))
    elif kind == "wrong_rank":
        np.save(path, np.zeros((8, 8), np.float32))
    elif kind == "string_dtype":
        np.save(path, np.array(["a", "b"]))
    elif kind == "complex_dtype":
        np.save(path, x.astype(np.complex64))
    elif kind == "structured_dtype":
        np.save(path, np.zeros(4, dtype=[("a", "f4"), ("b", "i4")]))
    elif kind == "npz_two_unnamed":
        path = tmp / "two.npz"
        np.savez(path, a=x, b=x)
    elif kind == "npz_empty":
        path = tmp / "empty.npz"
        with zipfile.ZipFile(path, "w"):
            pass
    elif kind == "npz_corrupt_member":
        path = tmp / "corrupt.npz"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("input.npy", b"\x93NUMPY garbage")
    elif kind == "corrupt_png":
        path = tmp / "corrupt.png"
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(50))
    elif kind == "folder":
        path = tmp / "a_folder.npy"
        path.mkdir()
    elif kind == "missing":
        path = tmp / "missing.npy"
    else:
        raise AssertionError(kind)
    return path


FILE_KINDS = ["object_pickle", "truncated", "header_only", "empty_file", "png_named_npy",
              "text_named_npy", "nan", "inf", "wrong_shape", "wrong_rank", "string_dtype", "complex_dtype",
              "structured_dtype", "npz_two_unnamed", "npz_empty", "npz_corrupt_member", "corrupt_png", "folder",
              "missing"]


def _assert_clean(code: int, err: str, what: str) -> None:
    assert code in (1, 2), (what, code, err)
    assert "Traceback" not in err and "internal error" not in err, (what, err)
    message = err.strip().splitlines()[-1] if err.strip() else ""
    assert message.startswith("npu-sim: error:") and len(message.split()) >= 6, (what, err)


@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize("command", ["run", "check"])
def test_bad_input_file(command, kind, tmp_path, capsys):
    path = _make(kind, tmp_path)
    extra = ["--out", str(tmp_path / "out")] if command == "run" else []
    code = main([command, str(MODEL), "--input", f"input={path}", *extra])
    err = capsys.readouterr().err
    _assert_clean(code, err, f"{command} {kind}")
    assert not (tmp_path / "out" / "logits.int.npy").exists(), "no output is written for a refused input"


def test_npz_named_npy_is_read_as_what_it_holds(tmp_path, capsys):
    """A .npz saved under a .npy name is read by its content (it was an internal error: 'NpzFile' has no shape)."""
    path = _make("zip_named_npy", tmp_path)
    assert main(["run", str(MODEL), "--input", str(path), "--out", str(tmp_path / "a")]) == 0
    assert main(["run", str(MODEL), "--input", str(SAMPLE), "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert np.array_equal(np.load(tmp_path / "a" / "logits.int.npy"), np.load(tmp_path / "b" / "logits.int.npy"))


@pytest.mark.parametrize("spec", ["nosuchinput={sample}", "input={sample}|input={sample}", "={sample}",
                                  "input="])
def test_bad_input_names(spec, tmp_path, capsys):
    args = []
    for part in spec.split("|"):
        args += ["--input", part.format(sample=SAMPLE)]
    code = main(["run", str(MODEL), *args, "--out", str(tmp_path / "out")])
    _assert_clean(code, capsys.readouterr().err, spec)


@pytest.mark.parametrize("kind", ["object_pickle", "truncated", "nan", "wrong_shape",
                                  "string_dtype", "npz_empty", "corrupt_png", "missing"])
def test_bad_report_data(kind, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    path = _make(kind, tmp_path)
    if kind == "corrupt_png":  # a folder of images with one broken among good ones is named by that file
        folder = tmp_path / "images"
        folder.mkdir()
        path.rename(folder / "broken.png")
        path = folder
    code = main(["report", str(MODEL), "--data", str(path), "--samples", "4"])
    _assert_clean(code, capsys.readouterr().err, f"report {kind}")


@pytest.mark.parametrize("kind,needle", [("png_named_npy", "is a PNG image"), ("empty_file", "is an empty file"),
                                         ("object_pickle", "holds Python objects"), ("missing", "not found"),
                                         ("folder", "not a regular file")])
def test_bad_input_file_messages_say_what_it_is(kind, needle, tmp_path, capsys):
    """The message says what the file is, not numpy's advice to unpickle it or a wrong 'write NAME=FILE'."""
    path = _make(kind, tmp_path)
    assert main(["run", str(MODEL), "--input", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "allow_pickle" not in err, err


@pytest.mark.parametrize("mean,std", [("0", "nan"), ("inf", "1"), ("0", "0")])
def test_bad_image_normalization(mean, std, tmp_path, capsys):
    pytest.importorskip("PIL")
    from PIL import Image
    img = tmp_path / "digit.png"
    Image.fromarray((np.arange(64).reshape(8, 8) * 4).astype(np.uint8)).save(img)
    assert main(["run", str(MODEL), "--input", str(img), "--mean", mean, "--std", std,
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--std" in err and "contains NaN" not in err, err


def test_fifo_input_does_not_hang(tmp_path):
    """A FIFO given as the input file is refused at once (opening it would wait for a writer forever)."""
    fifo = tmp_path / "feed.npy"
    os.mkfifo(fifo)
    for command in (["run", str(MODEL), "--input", f"input={fifo}", "--out", str(tmp_path / "o")],
                    ["check", str(MODEL), "--input", str(fifo)]):
        out = subprocess.run([sys.executable, "-m", "npu_sim.cli", *command], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, stdin=subprocess.DEVNULL)
        _assert_clean(out.returncode, out.stderr, f"fifo {command[0]}")
