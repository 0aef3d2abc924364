"""`npu-sim estimate`: cycles per layer and in total on the board."""
from __future__ import annotations

from npu_sim.api import estimate
from npu_sim.render.estimate import format_table

DESCRIPTION = """\
Estimate the latency of a QDQ model on the board's accelerator, layer by layer (board section [cost]).

Columns: node, op, prec (activation x weight bits), MACs, bytes read+written per memory, compute cycles
(MAC array / output pipeline with tiling), memory cycles (bytes / bandwidth, largest memory), cycles =
max(compute, memory) + exposed transfers + per-op overhead, bound (compute / memory name / cpu), util
(MACs / (cycles * MACs per cycle)), % of the network total. CPU-fallback nodes are costed separately,
with their NPU<->CPU transfers. The summary gives total cycles, latency at the board clock, FPS,
NPU/CPU share and the hotspots. The formulas are documented in npu_sim/analysis/cost/.
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
    est = estimate(args.model, board=args.board, input_shapes=shapes)
    if args.json:
        print(est.to_json())
    elif args.csv:
        print(est.to_csv(), end="")
    else:
        print(format_table(est, args.top))
    return 0
