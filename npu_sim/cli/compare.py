"""`npu-sim compare MODEL DUMP`: a board's tensor dump against the simulation, bit for bit, in execution order."""
from __future__ import annotations

from npu_sim.api import compare_dump
from npu_sim.analysis import compare as compare_module
from npu_sim.analysis.compare.dumpfile import read_input
from npu_sim.cli.common import parse_feed
from npu_sim.render.compare import comparison_json, format_comparison

DESCRIPTION = compare_module.__doc__.split("\n", 1)[1].strip()


def add_arguments(p) -> None:
    p.add_argument("dump", metavar="DUMP", help="the dump: a folder (manifest or .npy files), an .npz or an .npy "
                                                "(docs/DUMPS.md)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                   help="the input the board was fed: .npy, .npz or a dump folder; float or integers, NCHW or NHWC "
                        "(default: the dump's own tensor of that input)")
    p.add_argument("--layout", choices=("nhwc", "nchw"),
                   help="layout of dumped tensors whose shape fits both (e.g. C == H == W)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--all", action="store_true", help="list every differing tensor with examples")


def main(args, shapes) -> int:
    compare_module.refuse_old_order(args.model, args.dump)
    inputs = {}
    for spec in args.input:
        name, path = parse_feed(spec)
        inputs[name] = read_input(path, name)
    c = compare_dump(args.model, args.dump, board=args.board, inputs=inputs, input_shapes=shapes or None,
                     layout=args.layout)
    print(comparison_json(c) if args.json else format_comparison(c, args.dump, args.model, args.board, args.all))
    return c.exit_code
