"""`npu-sim compare`: a tensor dump against the simulation, bit for bit, in execution order."""
from __future__ import annotations

from npu_sim.api import compare_dump
from npu_sim.analysis.compare import EXIT_EQUAL, EXIT_MISMATCH
from npu_sim.analysis import compare as compare_module
from npu_sim.cli.common import read_npy_feeds
from npu_sim.render.compare import format_comparison

DESCRIPTION = compare_module.__doc__.split("\n", 1)[1].strip()
POSITIONALS_FIRST = True  # compare DUMP_DIR MODEL


def add_arguments(p) -> None:
    p.add_argument("dump_dir", metavar="DUMP_DIR", help="folder with index.json and the dumped .npy tensors")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                   help="float .npy input to simulate (default: the input tensor stored in the dump)")
    p.add_argument("--all", action="store_true", help="name every differing tensor, not only the first few")


def main(args, shapes) -> int:
    inputs = read_npy_feeds(args.input)
    c = compare_dump(args.dump_dir, args.model, board=args.board, inputs=inputs, input_shapes=shapes or None)
    print(format_comparison(c, args.dump_dir, args.model, args.board, args.all))
    return EXIT_EQUAL if c.equal else EXIT_MISMATCH
