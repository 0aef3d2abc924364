"""`npu-sim check`: will the model deploy on the board?"""
from __future__ import annotations

import json

from npu_sim.api import check
from npu_sim.cli.common import read_npy_feeds
from npu_sim.render.check import format_result

DESCRIPTION = """\
One line per node: where it runs (NPU, or CPU fallback), its precision (a8w8 = 8-bit activations, 8-bit
weights) and every finding under it: severity, rule id, measured values, and the fix. A summary ends the report.
Severities: error = cannot deploy as is; warning = runs but hurts accuracy or speed; info.
Exit code: 0 deployable, 1 not deployable (an error was found) or deployable with nodes npu-sim cannot simulate
(`npu-sim run` refuses the model then; the last line names them), 2 bad input.
The rules come from the board description ([rules] in its .toml); docs/SUPPORTED_OPS.md lists them."""


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON (docs/CHECK_SCHEMA.md)")
    parser.add_argument("--run", action="store_true",
                        help="also run the model on seeded random input and report observed accumulator overflow")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                        help="run on this .npy input instead (implies --run; repeatable)")
    parser.add_argument("--quiet", action="store_true", help="print only nodes with findings, and the summary")


def main(args, shapes) -> int:
    feeds = read_npy_feeds(args.input) if args.input else ("random" if args.run else None)
    result = check(args.model, board=args.board, input_shapes=shapes, feeds=feeds)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(format_result(result, quiet=args.quiet))
        if result.deployable and not result.simulated:
            names = result.not_simulated
            shown = ", ".join(map(repr, names[:4])) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            print(f"npu-sim cannot simulate {len(names)} node(s) on board '{result.board}' ({shown}), so "
                  f"`npu-sim run` refuses this model: exit 1 (see the findings above)")
    return 0 if result.deployable and result.simulated else 1
