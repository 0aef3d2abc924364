"""`npu-sim estimate`: cycles per layer and in total on the board."""
from __future__ import annotations

import sys

from npu_sim.api import check, estimate, load_board, open_model, program_for
from npu_sim.cli.common import fixed_shapes, refuse_empty
from npu_sim.render.check import fit_line
from npu_sim.render.estimate import format_table

DESCRIPTION = """\
Estimate the latency of a QDQ model on the board's accelerator, layer by layer (board section [cost]).

Columns: node, op, prec (activation x weight bits), MACs, bytes read+written per memory, compute cycles
(MAC array / output pipeline with tiling), memory cycles (bytes / bandwidth, largest memory), cycles =
max(compute, memory) + exposed transfers + per-op overhead, bound (compute / memory name / cpu), util
(MACs / (cycles * MACs per cycle)), % of the network total. CPU-fallback nodes are costed separately,
with their NPU<->CPU transfers. The summary gives total cycles, latency at the board clock, FPS,
NPU/CPU share and the hotspots. Nodes npu-sim cannot lower are named and left out: the total is then a lower
bound (JSON: summary.lower_bound). Invalid models are refused (exit 2), as by every command.
The formulas are documented in npu_sim/analysis/cost/.
The memory section (board section [memory]) gives the flash the constants take (weights, biases, scales,
lookup tables), the peak of live activation bytes in the program's order and the SRAM it needs, whether they
fit, and the largest live sets; --json has every layer's live set (memory.layers).
"""


def add_arguments(parser) -> None:
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print the estimate as JSON (layers + summary)")
    g.add_argument("--csv", action="store_true", help="print the per-layer rows as CSV")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="hotspots listed in the summary (default 5)")


def main(args, shapes) -> int:
    board = load_board(args.board)
    if board.cost is None:  # refuse before the (slower) load
        estimate(args.model, board=board, input_shapes=shapes)
    model = open_model(args.model)
    shapes = fixed_shapes(model, shapes)
    program = program_for(model, board, shapes)  # lowered once, for the estimate and the check
    refuse_empty(program, shapes)
    est = estimate(program, board=board)
    note = fit_line(check(program, board=board), args.model, args.board)
    if note:
        print(note, file=sys.stderr)
    if args.json:
        print(est.to_json())
    elif args.csv:
        print(est.to_csv(), end="")
    else:
        print(format_table(est, args.top))
        missing = est.summary["uncosted_nodes"]
        if missing:
            print(f"the total is a lower bound: it leaves out {len(missing)} node(s) npu-sim cannot lower: "
                  + "; ".join(f"{m['node']!r} ({m['op']}): {m['reason']}" for m in missing[:4])
                  + (f"; and {len(missing) - 4} more" if len(missing) > 4 else ""))
    return 0
