"""A dump comparison as text: the first differing tensors and a summary."""
from __future__ import annotations

from npu_sim.analysis.compare import Comparison


def format_comparison(c: Comparison, dump_dir, model, board, show_all: bool = False) -> str:
    lines = [f"compare: {len(c.tensors)} dumped tensor(s) of {dump_dir} against {model} on board {board}"]
    bad = [t for t in c.tensors if t.status != "equal"]
    if not bad:
        lines.append("all equal, bit for bit")
    else:
        f = bad[0]
        if f.status == "shape":
            lines.append(f"first mismatch: tensor {f.tensor!r} (produced by node {f.producer!r} [{f.op}]): dump shape "
                         f"{f.dump_shape}, simulation {f.sim_shape}")
        else:
            lines.append(f"first mismatch: tensor {f.tensor!r} (produced by node {f.producer!r} [{f.op}], program "
                         f"tensor {f.ir_tensor}): {f.differing} of {f.total} elements differ, max |diff| "
                         f"{f.max_diff}, first at index {list(f.first_index)}: dump {f.dump_value}, simulation "
                         f"{f.sim_value}")
        rest = bad[1:]
        if rest:
            lines.append(f"{len(rest)} later tensor(s) differ too (may follow from the first): "
                         + ", ".join(t.tensor for t in (rest if show_all else rest[:8]))
                         + ("" if show_all or len(rest) <= 8 else " ..."))
        lines.append(f"{len(c.tensors) - len(bad)} of {len(c.tensors)} tensors equal")
    if c.not_in_dump:
        lines.append(f"not in the dump (not compared): {len(c.not_in_dump)}")
    if c.not_in_model:
        lines.append(f"dump entries the model does not produce (ignored): {', '.join(c.not_in_model[:8])}")
    lines.extend(f"note: {n}" for n in c.notes)
    return "\n".join(lines)
