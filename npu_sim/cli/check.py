"""`npu-sim check`: will the model deploy on the board?"""
from __future__ import annotations

import json

from npu_sim.api import check, open_model, program_for
from npu_sim.cli.common import fixed_shapes, read_npy_feeds, refuse_empty
from npu_sim.render.check import format_result

DESCRIPTION = """\
A summary grouped by rule, the most consequential first (errors before warnings; numeric hazards, which change
the results, before board rules and lint): each rule with its severity, how many nodes it hits, the first of
them, one example and the fix; then the nodes with errors: where each runs (NPU, or CPU fallback), its precision
(a8w8 = 8-bit activations, 8-bit weights) and its error rules. --verbose lists every node with every finding.
Severities: error = cannot deploy as is; warning = runs but hurts accuracy or speed; info.
Exit code: 0 deployable, 1 not deployable (an error was found) or deployable with nodes npu-sim cannot simulate
(`npu-sim run` refuses the model then; the last line names them), 2 bad input.
The rules come from the board description ([rules] in its .toml); docs/SUPPORTED_OPS.md lists them."""


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON (docs/CHECK_SCHEMA.md; always every finding)")
    parser.add_argument("--run", action="store_true",
                        help="also run the model on seeded random input and report observed accumulator overflow")
    parser.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE",
                        help="run on this .npy/.npz input instead (implies --run; repeatable; NAME= may be left "
                             "out for a model with one input)")
    parser.add_argument("--verbose", action="store_true",
                        help="list every node with each finding, its message and fix (the summary otherwise)")
    parser.add_argument("--severity", choices=("error", "warning", "info"), default="info",
                        help="show only findings of this severity or worse (text output; default info: all)")
    parser.add_argument("--quiet", action="store_true",
                        help="shorter: only the rule lines (with --verbose: only nodes with findings)")


def main(args, shapes) -> int:
    model = open_model(args.model)
    feeds = read_npy_feeds(args.input, list(model.inputs)) if args.input else ("random" if args.run else None)
    fed = feeds if isinstance(feeds, dict) else {}
    shapes = fixed_shapes(model, shapes, fed)  # every input's, the feeds' shapes included
    program = program_for(model, args.board, shapes)
    refuse_empty(program, shapes)
    result = check(program, feeds=feeds)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        observed = None
        if feeds == "random":
            observed = "seeded random input in the calibrated range, 1 sample"
        elif feeds:
            observed = ", ".join(f"{name} {list(a.shape)}" for name, a in feeds.items())
        print(format_result(result, quiet=args.quiet, verbose=args.verbose, severity=args.severity,
                            observed=observed))
        if result.deployable and not result.simulated:
            names = result.not_simulated
            shown = ", ".join(map(repr, names[:4])) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            print(f"npu-sim cannot simulate {len(names)} node(s) on board '{result.board}' ({shown}), so "
                  f"`npu-sim run` refuses this model: exit 1 (see the findings above)")
    return 0 if result.deployable and result.simulated else 1
