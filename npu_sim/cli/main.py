"""The `npu-sim` entry point: the parser, dispatch to one command module, and the exit codes.

Only the chosen command's module is imported (by name, with importlib): `npu-sim --help` and `--version` load
neither numba nor onnx."""
from __future__ import annotations

import argparse
import atexit
import difflib
import importlib
import os
import sys
import threading

from npu_sim import __version__
from npu_sim.boards import load_board, presets
from npu_sim.cli.common import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, add_model_arguments, default_board, parse_shape
from npu_sim.errors import NpuSimError

# command -> (module, its main function, its add_arguments function, help); the module is imported when chosen
COMMANDS = {
    "run": ("npu_sim.cli.run", "main", "add_arguments", "run the model as the board computes it; write outputs as .npy"),
    "lower": ("npu_sim.cli.run", "lower_main", None, "print the integer program, one line per op"),
    "check": ("npu_sim.cli.check", "main", "add_arguments",
              "will the model deploy on the board? rules, numeric hazards, lint"),
    "estimate": ("npu_sim.cli.estimate", "main", "add_arguments", "cycles per layer and in total on the board"),
    "report": ("npu_sim.cli.report", "main", "add_arguments", "accuracy report: where the integer model loses accuracy"),
    "compare": ("npu_sim.cli.compare", "main", "add_arguments",
                "compare a tensor dump (board or run --dump-all), bit for bit"),
    "inspect": ("npu_sim.cli.inspect", "main", "add_arguments",
                "what the model is: inputs, outputs, shapes, quantization, ops"),
}


def _chosen(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser; the arguments of the command named in ``argv`` (only) are filled in from its module."""
    p = argparse.ArgumentParser(prog="npu-sim", description="Bit-exact integer simulation of QDQ ONNX models on "
                                "int8/int16 NPUs.", allow_abbrev=False)
    p.add_argument("--version", action="version", version=f"npu-sim {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen(argv)
    boards = presets()
    for name, (module_name, _, add, text) in COMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=text, allow_abbrev=False)
            continue
        module = importlib.import_module(module_name)
        sp = sub.add_parser(name, help=text, description=getattr(module, "DESCRIPTION", None) or text,
                            formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
        p.set_defaults(command_parser=sp)  # its usage, not the top-level one, on an argument it does not know
        if getattr(module, "MODEL_ONLY", False):  # inspect: the model, nothing to lower it with
            sp.add_argument("model", help="QDQ ONNX model")
            getattr(module, add)(sp)
        elif getattr(module, "POSITIONALS_FIRST", False):  # e.g. compare DUMP_DIR MODEL
            getattr(module, add)(sp)
            add_model_arguments(sp, boards)
        else:
            # a command's list options (run --data) may end in the model; `lower` (run's module) has none
            add_model_arguments(sp, boards, bool(add) and getattr(module, "MODEL_AFTER_LISTS", False))
            if add:
                getattr(module, add)(sp)
    listing = sub.add_parser("boards", help="list the board presets", allow_abbrev=False)
    if chosen == "boards":
        p.set_defaults(command_parser=listing)
    return p


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; an argument the chosen command does not take is refused with that command's usage (exit 2),
    naming the options it may have meant (``--dump`` -> ``--dump-all``)."""
    args, extra = parser.parse_known_args(argv)
    command = vars(args).pop("command_parser", None) or parser
    if extra:
        options = [o for action in command._actions for o in action.option_strings]
        hints = sorted({m for e in extra if e.startswith("-")
                        for m in [o for o in options if o.startswith(e.split("=")[0])]
                        + difflib.get_close_matches(e.split("=")[0], options, n=2, cutoff=0.75)})
        command.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {' or '.join(hints)}?)"
                                                                      if hints else ""))
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parse(build_parser(argv), argv)
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
    if args.command == "boards":
        for name in presets():
            print(f"{name:12s} {load_board(name).description}")
        return EXIT_OK
    shapes = dict(parse_shape(s) for s in getattr(args, "input_shape", []))
    if hasattr(args, "board") and args.board is None:
        args.board = default_board(getattr(args, "model", None))
    module_name, func, _, _ = COMMANDS[args.command]
    command = getattr(importlib.import_module(module_name), func)
    runs = args.command in ("run", "report", "compare") or getattr(args, "run", False) or getattr(args, "input", None)
    with importlib.import_module("npu_sim.cli.firstuse").watch(bool(runs)):  # imports numba: model commands only
        return command(args, shapes)


def entry() -> None:
    """The ``npu-sim`` command: :func:`main`, then the end of the process without the interpreter's teardown, which
    frees every module and every compiled kernel one by one (0.15-0.3 s after a model command) for the operating
    system to free anyway. Only where nothing else is left to run: the exit handlers run first (``atexit``: logging,
    temporary folders' clean-up, ...) and the streams are flushed; with another thread alive (a pool, Ray, a
    progress bar's monitor) the ordinary exit joins it. Outputs are whole by then: every file is written and closed
    (renamed into place) before :func:`main` returns."""
    code = main()
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a reader gone (main already said so) or a stream closed: nothing to keep
        pass
    os._exit(code)


if __name__ == "__main__":
    entry()
