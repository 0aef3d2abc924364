"""`npu-sim run` and `npu-sim lower`: the board's integers for one input or a dataset; the integer program as text."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from npu_sim.analysis.compare.match import sanitize
from npu_sim.api import check, load, open_model, run_dataset
from npu_sim.cli.common import (EXIT_OK, add_job_arguments, engine_options, fixed_shapes, no_repeats, parse_feed,
                                read_npy, refuse_empty, take_model)
from npu_sim.cli.progress import progress
from npu_sim.errors import InputError
from npu_sim.frontend.dataset import read_image
from npu_sim.lowering.partial import not_run_lines
from npu_sim.render.check import fit_line
from npu_sim.render.dataset_out import DatasetWriter, summary_lines
from npu_sim.render.files import replace_folder, save_npy
from npu_sim.render.golden import FORMATS, write_golden
from npu_sim.runtime.stop import Stopped, on_signals


RUN_DESCRIPTION = """\
Run the model as the board computes it.

One sample: --input [NAME=]FILE (or a seeded random input); writes each output as NAME.int.npy (integers) and
NAME.npy (dequantized) into --out (default ./npu_sim_out), --dump-all every intermediate tensor too.

A dataset: --data DIR|FILE ... --out OUT runs every sample (images, .npy, .npz, read as `report --data` reads
them) and writes OUT/shard-00000.npz ... (per output NAME.int and NAME, stacked over the shard's samples),
OUT/manifest.json (each sample's source, shard and row; the failed ones by name) and, with --float, OUT/metrics.csv
(per sample cosine, SQNR, top-1 agreement, label accuracy). Ctrl-C or SIGTERM stops the workers and keeps every
shard written; --resume goes on with a stopped run in the same OUT; the files do not depend on --engine or
--workers. See docs/DATASETS.md.

A model with a node the board does not run: everything up to it and around it is simulated and written, the
node (with the board's reason) and the outputs it leaves uncomputed are named on stderr (and, with --data, in
manifest.json's not_computed and refused; those outputs are in no shard), exit 1. With --data, a model none of
whose outputs can be computed is refused (exit 2): --input FILE --dump-all dumps every tensor up to the node.

Exit codes: 0 done; 1 the board does not run the whole model (see above), or with --data some samples failed
(named on stderr and in manifest.json; the others are written); 2 bad input; 3 internal error; 130 / 143 with
--data, stopped by SIGINT / SIGTERM (--resume goes on).
"""
MODEL_AFTER_LISTS = True  # `run --data DIR MODEL`: an .onnx file that ends --data is the model
DATA_ONLY = (("resume", "--resume"), ("float_model", "--float"), ("shard_size", "--shard-size"),
             ("workers", "--workers"), ("ray_address", "--ray-address"), ("quiet", "--quiet"))


def add_arguments(run) -> None:
    run.description = RUN_DESCRIPTION  # here, not as the module's DESCRIPTION: `lower` shares this module
    run.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE",
                     help="feed: .npy file, .npz (the array named like the input, or its only array), or an image "
                          "(.png/.jpg; needs Pillow) resized to the input, scaled to [0,1] then (x-mean)/std; NAME= "
                          "may be left out for a model with one input. Without --input: seeded random values in the "
                          "calibrated range")
    run.add_argument("--mean", default="0", help="image normalization mean, per channel, comma separated")
    run.add_argument("--std", default="1", help="image normalization std, per channel, comma separated")
    run.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    run.add_argument("--out", default=None, help="output folder (default ./npu_sim_out; required with --data)")
    run.add_argument("--dump-all", action="store_true",
                     help="also write every intermediate integer tensor and index.json")
    run.add_argument("--format", choices=("npy",) + FORMATS, default="npy",
                     help="with --dump-all, also write the tensors as golden vectors for firmware: c (one C header "
                          "per tensor and golden.h, in OUT/c) or bin (raw bytes and manifest.json, in OUT/bin)")
    run.add_argument("--layout", choices=("nchw", "nhwc"), default="nchw", help="layout of the --format c/bin tensors")
    d = run.add_argument_group("dataset runs (--data; exit code 1 when some samples failed or the board refuses a "
                               "node, the rest written)")
    d.add_argument("--data", nargs="+", action="extend", default=[], metavar="DIR|FILE",
                   help="run every sample of these folders or files (images, .npy, .npz; a leading batch dimension "
                        "is split into samples) and write shards and manifest.json into --out")
    d.add_argument("--resume", action="store_true",
                   help="go on with the run already in --out (same model, board, data, --float and --shard-size): "
                        "its written shards are kept")
    d.add_argument("--float", dest="float_model", metavar="FLOAT.onnx", default=None,
                   help="also write OUT/metrics.csv: per sample cosine, SQNR and top-1 agreement against this float "
                        "model (and accuracy with labels); needs onnxruntime (pip install 'npu-sim[report]')")
    d.add_argument("--shard-size", type=int, default=None, metavar="N", help="samples per shard (default 64)")
    add_job_arguments(d, "the dataset run")


def lower_main(args, shapes) -> int:
    take_model(args, (), "npu-sim lower MODEL.qdq.onnx")
    model = open_model(args.model)
    shapes = fixed_shapes(model, shapes)
    sim = load(model, board=args.board, input_shapes=shapes, partial=True)
    refuse_empty(sim.program, shapes)
    print(sim.program.format())
    return _partial_exit(sim.program)


def _partial_exit(program) -> int:
    """Exit 0, or 1 after naming what a partial program leaves out (the nodes the board refuses)."""
    if not program.refusals:
        return EXIT_OK
    for line in not_run_lines(program):
        print(line, file=sys.stderr)
    return 1


def main(args, shapes) -> int:
    take_model(args, ("data",), "npu-sim run MODEL.qdq.onnx ...")
    if args.data:
        return data_main(args, shapes)
    given = [flag for attr, flag in DATA_ONLY if getattr(args, attr) not in (None, False)] + (["--engine"] if args.engine != "local" else [])
    if given:
        raise InputError(f"{given[0]} is for dataset runs: add --data DIR|FILE ... (and --out OUT)")
    args.out = args.out or "npu_sim_out"
    if args.format != "npy" and not args.dump_all:
        raise InputError(f"--format {args.format} writes the tensors of --dump-all: add --dump-all")
    model = open_model(args.model)
    raw_feeds = no_repeats([parse_feed(spec, list(model.inputs)) for spec in args.input])
    arrays = {name: read_npy(path, name) for name, path in raw_feeds if path.suffix.lower() in (".npy", ".npz")}
    for name, arr in arrays.items():
        _refuse_transposed(model.inputs.get(name), arr.shape)
    shapes = fixed_shapes(model, shapes, arrays)  # every input's, the arrays' shapes included
    sim = load(model, board=args.board, input_shapes=shapes, partial=True)
    refuse_empty(sim.program, shapes)
    for name, path in raw_feeds:
        if name not in arrays:
            arrays[name] = _read_image(path, name, sim, args.mean, args.std)
    feeds = arrays if arrays else sim.random_inputs(args.seed)
    if not arrays:
        print(f"no --input given: using seeded random input (seed {args.seed}) in the calibrated range")
    result = sim.run_batch(feeds, keep_all=args.dump_all)  # one sample, or N stacked on a batch dimension of 1
    if sim.batch_note:
        print(f"note: {sim.batch_note}", file=sys.stderr)
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out {args.out!r} is a file; give a folder (it is created if missing)")
    prog = sim.program
    for node, count in result.overflows.items():
        print(f"warning: node {node!r}: {count} accumulator value(s) overflowed the board's accumulator "
              f"(see `npu-sim lower` for its width)", file=sys.stderr)
    if args.dump_all:
        _write_dump(prog, result, out_dir, golden=None if args.format == "npy" else (args.format, args.layout))
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_dump(out_dir)
        _write_outputs(prog, result, out_dir, out_dir)
    note = fit_line(check(sim), args.model, args.board)  # after the outputs: a bad input is said first
    if note:
        print(note, file=sys.stderr)
    return _partial_exit(prog)


def data_main(args, shapes) -> int:
    """``run --data``: every sample, in shards, into --out; exit 1 when some failed (the others are written) or
    when the board refuses nodes (the outputs computed without them are written, the refused nodes named)."""
    if args.input:
        raise InputError("--input and --data: give one (--input feeds one sample, --data runs a dataset)")
    if args.dump_all or args.format != "npy":
        raise InputError("--dump-all and --format are for one sample (--input), not for --data")
    if not args.out:
        raise InputError("--data needs --out OUT: the folder the shards and manifest.json are written to")
    bar = progress("run", "samples", args.quiet)
    writer = DatasetWriter(args.out, resume=args.resume)
    try:
        with on_signals():
            summary = run_dataset(args.model, args.data, writer,
                                  float_model=args.float_model, board=args.board, input_shapes=shapes,
                                  shard_size=64 if args.shard_size is None else args.shard_size,
                                  engine=engine_options(args), mean=args.mean, std=args.std, progress=bar,
                                  notify=lambda m: print(f"npu-sim: failed: {m}", file=sys.stderr))
    except Stopped as stop:
        bar.close()
        print(f"npu-sim: stopped by {stop.name}: {_kept(writer, args.out)}", file=sys.stderr)
        return stop.exit_code
    finally:
        bar.close()
    for line in summary_lines(summary, args.out):
        print(line)
    if summary.failed:
        print(f"npu-sim: {len(summary.failed)} sample(s) failed (named above and in "
              f"{Path(args.out) / 'manifest.json'}); the other samples are written", file=sys.stderr)
    for line in summary.not_run_lines:  # a partial program: what `run` says of it
        print(line, file=sys.stderr)
    return EXIT_OK if summary.ok else 1


def _kept(writer: DatasetWriter, out) -> str:
    """What a stopped dataset run leaves in ``out`` and how to go on with it."""
    if writer.saved is None:
        return f"no shard written in {out} yet; run the same command again"
    kept, shards = writer.saved
    return (f"{kept} of {shards} shard(s) kept in {out} (manifest.json); run the same command with --resume to "
            f"write the other {shards - kept}")


# ---- writing: every file atomically; a dump built in a temporary folder beside --out and renamed into place ----
DUMP_ENTRIES = ("index.json", "tensors", "c", "bin")  # c/, bin/: golden vectors (--format)


def _unique(stem: str, suffixes: tuple[str, ...], used: set[str]) -> str:
    """``stem`` (made safe), numbered ``_2``, ``_3``... until none of its file names is taken (case-insensitively:
    ``out:0`` and ``out_0`` both sanitize to ``out_0``)."""
    base = _safe(stem)
    name, i = base, 1
    while any(f"{name}{s}".lower() in used for s in suffixes):
        i += 1
        name = f"{base}_{i}"
    used.update(f"{name}{s}".lower() for s in suffixes)
    return name


def _write_outputs(prog, result, folder: Path, shown: Path) -> dict[str, list[str]]:
    """Each output as NAME.int.npy and NAME.npy in ``folder`` (messages name ``shown``); tensor -> its files."""
    used = {e.lower() for e in DUMP_ENTRIES}
    files: dict[str, list[str]] = {}
    for name, tname in prog.outputs.items():
        stem = _unique(name, (".int.npy", ".npy"), used)
        files.setdefault(tname, []).extend([f"{stem}.int.npy", f"{stem}.npy"])
        _write_output(name, prog.tensors[tname], result.values[tname], folder, shown, stem)
    for name, tname in prog.passthrough.items():  # a float graph input that is also an output
        stem = _unique(name, (".npy",), used)
        value = result.values[tname]
        save_npy(folder / f"{stem}.npy", value)
        files.setdefault(tname, []).append(f"{stem}.npy")
        print(f"output {name}: float32{list(value.shape)}, the model input {name!r} itself (a graph input that is "
              f"also an output) -> {shown / (stem + '.npy')}")
    return files


def _remove_stale_dump(out_dir: Path) -> None:
    """A previous dump's index (first) and tensors: new outputs never sit beside an index they do not match."""
    if (out_dir / "index.json").is_file():
        (out_dir / "index.json").unlink()
        if (out_dir / "tensors").is_dir():
            shutil.rmtree(out_dir / "tensors")


def _write_dump(prog, result, out_dir: Path, golden: tuple[str, str] | None = None) -> None:
    """Outputs, every integer tensor, the golden vectors (``golden`` = (format, layout)) and index.json (last) in
    a temporary folder beside ``out_dir``, which then replaces ``out_dir``: a dump is complete or absent, never
    mixed with an older one."""
    if out_dir.is_dir():
        foreign = sorted(p.name for p in out_dir.iterdir() if not (p.name in DUMP_ENTRIES or p.name.endswith(".npy")))
        if foreign:
            raise InputError(f"--out {str(out_dir)!r} holds other files ({', '.join(foreign[:3])}); --dump-all "
                             f"replaces the whole folder, so give a new folder, an empty one or a previous dump")
    def fill(tmp: Path) -> None:
        files = _write_outputs(prog, result, tmp, out_dir)
        if golden is not None:
            write_golden(tmp, prog, result.values, *golden)
        counted.append(_dump_all(prog, result, tmp, files))

    counted: list[int] = []
    replace_folder(out_dir, fill)
    print(f"dumped {counted[0]} integer tensors -> "
          f"{out_dir / 'index.json'}")
    if golden is not None:
        print(f"golden vectors ({golden[0]}, {golden[1].upper()}) -> {out_dir / golden[0]}")


def _write_output(name: str, t, q: np.ndarray, folder: Path, shown: Path, stem: str) -> None:
    deq = t.q.dequantize(q)
    save_npy(folder / f"{stem}.int.npy", q)
    save_npy(folder / f"{stem}.npy", deq)
    print(f"output {name}: {t.q.dtype}{list(q.shape)} scale={float(t.q.scale):.6g} zp={int(t.q.zero_point)} "
          f"int range [{int(q.min())}, {int(q.max())}] -> {shown / (stem + '.int.npy')}, "
          f"dequantized -> {shown / (stem + '.npy')}")
    if q.size > 1 and int(q.min()) == int(q.max()):  # a top-5 of equal scores would say nothing
        v = int(q.min())
        bound = " (saturated)" if v in (t.q.qmin, t.q.qmax) else ""
        print(f"  output is constant {v}{bound}: every value dequantizes to {float(deq.reshape(-1)[0]):.6g}")
    elif deq.ndim == 2 and deq.shape[1] > 1 and deq.shape[0] <= 8:
        for row, scores in enumerate(deq):
            top = np.argsort(-scores, kind="stable")[:5]
            print(f"  [{row}] top-5: " + ", ".join(f"{int(c)} ({scores[c]:.3f})" for c in top))


# (the model's layout, what the array looks like, the transpose that makes the one from the other)
_TRANSPOSES = (("NCHW", "NHWC (channels last)", (0, 3, 1, 2)), ("NHWC", "NCHW (channels first)", (0, 2, 3, 1)))


def _fits(shape: tuple, dims: tuple) -> bool:
    """``shape`` is ``dims`` (None: any size; a first dimension of 1 takes N samples stacked)."""
    return len(shape) == len(dims) and all(d is None or d == v or (i == 0 and d == 1)
                                           for i, (d, v) in enumerate(zip(dims, shape)))


def _refuse_transposed(inp, shape: tuple) -> None:
    """A 4-D array that does not fit the model input but would with its channels moved: say so, and the
    transpose that feeds it."""
    if inp is None or inp.dims is None or len(inp.dims) != 4 or len(shape) != 4 or _fits(shape, inp.dims):
        return
    for model_layout, looks, perm in _TRANSPOSES:
        back = tuple(shape[i] for i in perm)  # the array as the model would take it
        if _fits(back, inp.dims):
            fed = "x".join(map(str, shape))
            raise InputError(f"--input {inp.name}: the array is {fed}, the model's input {inp.shown} with the "
                             f"layout {looks}; the model takes {model_layout}: save np.transpose(a, {perm}) "
                             f"({'x'.join(map(str, back))}) and feed that")


def _read_image(path: Path, name: str, sim, mean: str, std: str) -> np.ndarray:
    if name not in sim.inputs:
        raise InputError(f"--input {name}: the model has no input {name!r}; its inputs are {sorted(sim.inputs)}")
    shape, dtype = sim.inputs[name]
    x = np.broadcast_to(read_image(path, shape, mean, std, label=f"--input {name}"), shape).astype(np.float32)
    if dtype == "float32":
        return x
    q = sim.program.tensors[sim.program.inputs[name]].q
    if q is None or not q.per_tensor:
        raise InputError(f"--input {name}: the input is {dtype} without one scale to quantize an image with; pass "
                         f"a .npy of that type")
    print(f"--input {name}: the image quantized to {dtype} with the input's scale {float(q.scale):.6g} and zero "
          f"point {int(q.zero_point)} (round half to even)", file=sys.stderr)
    return q.quantize(x)


def _safe(name: str) -> str:
    return sanitize(name)[:150] or "tensor"


def _dump_all(prog, result, folder: Path, output_files: dict) -> int:
    """Every quantized, non-constant tensor in ``folder``/tensors (unique file names, each one's source name in
    index.json), then index.json; an output's entry also lists its top-level files (``output_files``). ``folder``
    is the dump's temporary folder (``replace_folder`` swaps it in whole). Returns the count."""
    tdir = folder / "tensors"
    tdir.mkdir()
    producer = {o: n.name for n in prog.nodes for o in n.outputs}
    copies = prog.layout_copies()  # a .tflite's NCHW copies: its NHWC tensors are dumped
    index, used = {}, set()
    for tname, arr in result.values.items():
        t = prog.tensors[tname]
        if t.q is None or t.is_const or t.float_name in index or tname in copies:
            continue
        fname = _unique(t.float_name, (".npy",), used)
        save_npy(tdir / f"{fname}.npy", arr)
        index[t.float_name] = {"file": f"tensors/{fname}.npy", "tensor": tname, "dtype": t.q.dtype,
                               "shape": list(arr.shape), "scale": float(t.q.scale),
                               "zero_point": int(t.q.zero_point), "producer": producer.get(tname, "input")}
        if tname in output_files:
            index[t.float_name]["output_files"] = list(output_files[tname])
    (folder / "index.json").write_text(json.dumps(index, indent=1))
    return len(index)
