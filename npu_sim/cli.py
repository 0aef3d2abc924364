"""npu-sim command line: parse, call the API, print. Exit codes: 0 ok, 1 not deployable (check), 2 bad input,
3 internal error."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import numpy as np

from .board import presets
from .errors import InputError, NpuSimError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 2, 3


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.rpartition("=")
    if not sep or not name or not re.fullmatch(r"\d+(x\d+)*", dims):
        raise InputError(f"--input-shape {text!r}: write NAME=DxDxD, e.g. x=1x3x48x192")
    return name, tuple(int(d) for d in dims.split("x"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="npu-sim", description="Bit-exact integer simulation of QDQ ONNX models on "
                                "int8/int16 NPUs.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sp):
        sp.add_argument("model", help="QDQ ONNX model (as written by onnxruntime quantize_static)")
        sp.add_argument("--board", default="default",
                        help=f"board preset ({', '.join(presets())}) or path to a board .toml (default: default)")
        sp.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                        help="fix a dynamic input shape, e.g. x=1x3x48x192 (repeatable)")

    run = sub.add_parser("run", help="run the model as the board computes it; write outputs as .npy")
    common(run)
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                     help="feed: .npy file, or an image (.png/.jpg; needs Pillow) resized to the input, scaled to "
                          "[0,1] then (x-mean)/std. Without --input: seeded random values in the calibrated range")
    run.add_argument("--mean", default="0", help="image normalization mean, per channel, comma separated")
    run.add_argument("--std", default="1", help="image normalization std, per channel, comma separated")
    run.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    run.add_argument("--out", default="npu_sim_out", help="output folder (default ./npu_sim_out)")
    run.add_argument("--dump-all", action="store_true",
                     help="also write every intermediate integer tensor and index.json")

    low = sub.add_parser("lower", help="print the integer program, one line per op")
    common(low)

    # Feature commands: each module declares its own arguments and runs its own command.
    from . import checks, compare, cost, report
    for name, module, text in (("check", checks, "will the model deploy on the board? rules, numeric hazards, lint"),
                                ("estimate", cost, "cycles per layer and in total on the board"),
                                ("report", report, "accuracy report: where the integer model loses accuracy"),
                                ("compare", compare, "compare a tensor dump (board or run --dump-all), bit for bit")):
        sp = sub.add_parser(name, help=text, description=(module.CLI_DESCRIPTION or text),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        if getattr(module, "CLI_POSITIONALS_FIRST", False):  # e.g. compare DUMP_DIR MODEL
            module.add_cli_arguments(sp)
            common(sp)
        else:
            common(sp)
            module.add_cli_arguments(sp)

    sub.add_parser("boards", help="list the board presets")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except NpuSimError as exc:
        print(f"npu-sim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # the reader of our output went away (`npu-sim check ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 128 + 13  # as if killed by SIGPIPE, like other command-line tools
    except OSError as exc:  # the file system refused a read or a write: the path is the user's to fix
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"npu-sim: error: {where}{exc.strerror or exc}; check the path and its permissions", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # never a traceback for users; NPU_SIM_DEBUG=1 shows it
        if os.environ.get("NPU_SIM_DEBUG"):
            raise
        print(f"npu-sim: internal error: {type(exc).__name__}: {exc}\n"
              f"(this is a bug in npu-sim; rerun with NPU_SIM_DEBUG=1 for the traceback and report it)",
              file=sys.stderr)
        return EXIT_INTERNAL


def _dispatch(args) -> int:
    from . import load
    if args.command == "boards":
        from .board import load_board
        for name in presets():
            b = load_board(name)
            print(f"{name:12s} {b.description}")
        return EXIT_OK
    shapes = dict(_shape(s) for s in args.input_shape)
    if args.command in ("check", "estimate", "report", "compare"):
        from . import checks, compare, cost, report
        return {"check": checks, "estimate": cost, "report": report,
                "compare": compare}[args.command].cli_main(args, shapes)
    if args.command == "lower":
        sim = load(args.model, board=args.board, input_shapes=shapes)
        print(sim.program.format())
        return EXIT_OK
    raw_feeds = [_parse_feed(spec) for spec in args.input]
    arrays = {name: _read_npy(path, name) for name, path in raw_feeds if path.suffix.lower() == ".npy"}
    sim = load(args.model, board=args.board, input_shapes=shapes,
               feed_shapes={name: a.shape for name, a in arrays.items()})
    for name, path in raw_feeds:
        if name not in arrays:
            arrays[name] = _read_image(path, name, sim, args.mean, args.std)
    feeds = arrays if arrays else sim.random_inputs(args.seed)
    if not arrays:
        print(f"no --input given: using seeded random input (seed {args.seed}) in the calibrated range")
    result = sim.execute(feeds, keep_all=args.dump_all)
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out {args.out!r} is a file; give a folder (it is created if missing)")
    out_dir.mkdir(parents=True, exist_ok=True)
    prog = sim.program
    for name, tname in prog.outputs.items():
        t = prog.tensors[tname]
        q = result.values[tname]
        deq = t.q.dequantize(q)
        np.save(out_dir / f"{_safe(name)}.int.npy", q)
        np.save(out_dir / f"{_safe(name)}.npy", deq)
        print(f"output {name}: {t.q.dtype}{list(q.shape)} scale={float(t.q.scale):.6g} zp={int(t.q.zero_point)} "
              f"int range [{int(q.min())}, {int(q.max())}] -> {out_dir / (_safe(name) + '.int.npy')}, "
              f"dequantized -> {out_dir / (_safe(name) + '.npy')}")
        if deq.ndim == 2 and deq.shape[1] > 1 and deq.shape[0] <= 8:
            for row, scores in enumerate(deq):
                top = np.argsort(-scores, kind="stable")[:5]
                print(f"  [{row}] top-5: " + ", ".join(f"{int(c)} ({scores[c]:.3f})" for c in top))
    for node, count in result.overflows.items():
        print(f"warning: node {node!r}: {count} accumulator value(s) overflowed the board's accumulator "
              f"(see `npu-sim lower` for its width)", file=sys.stderr)
    if args.dump_all:
        _dump_all(prog, result, out_dir)
    return EXIT_OK


def _parse_feed(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise InputError(f"--input {spec!r}: write NAME=FILE (a .npy file or an image)")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--input {name}: file {path!r} not found")
    return name, p


def _read_npy(path: Path, name: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:
        raise InputError(f"--input {name}: cannot read {str(path)!r} as a .npy array ({exc})") from None


def _read_image(path: Path, name: str, sim, mean: str, std: str) -> np.ndarray:
    from .dataset import read_image
    if name not in sim.inputs:
        raise InputError(f"--input {name}: the model has no input {name!r}; its inputs are {sorted(sim.inputs)}")
    shape, dtype = sim.inputs[name]
    if dtype != "float32":
        raise InputError(f"--input {name}: the input is already quantized ({dtype}); pass a .npy of that type")
    return np.broadcast_to(read_image(path, shape, mean, std, label=f"--input {name}"), shape).astype(np.float32)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:150] or "tensor"


def _dump_all(prog, result, out_dir: Path) -> None:
    tdir = out_dir / "tensors"
    tdir.mkdir(exist_ok=True)
    producer = {o: n.name for n in prog.nodes for o in n.outputs}
    index, used = {}, set()
    for tname, arr in result.values.items():
        t = prog.tensors[tname]
        if t.q is None or t.is_const or t.float_name in index:
            continue
        fname = _safe(t.float_name)
        while fname in used:
            fname += "_"
        used.add(fname)
        np.save(tdir / f"{fname}.npy", arr)
        index[t.float_name] = {"file": f"tensors/{fname}.npy", "tensor": tname, "dtype": t.q.dtype,
                               "shape": list(arr.shape), "scale": float(t.q.scale),
                               "zero_point": int(t.q.zero_point), "producer": producer.get(tname, "input")}
    (out_dir / "index.json").write_text(json.dumps(index, indent=1))
    print(f"dumped {len(index)} integer tensors -> {out_dir / 'index.json'}")


if __name__ == "__main__":
    sys.exit(main())
