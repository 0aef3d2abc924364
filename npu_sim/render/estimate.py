"""The latency estimate as a table: per-layer rows, totals, the hotspots, and the memory section (what the
board's SRAM and flash must hold, the largest live sets; every layer's live set is in ``--json``)."""
from __future__ import annotations

from npu_sim.analysis.cost import Estimate
from npu_sim.render.text import NAME_CAP, column_width, cut_middle



def _fmt_int(v: float) -> str:
    v = float(v)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= 10 * div:
            return f"{v / div:.1f}{unit}" if abs(v) < 100 * div else f"{v / div:.0f}{unit}"
    return f"{v:.0f}"


def format_table(est: Estimate, top: int = 5) -> str:
    mems = est.memories()
    width = column_width([r.node for r in est.layers], 4, NAME_CAP)
    opw = column_width([r.op for r in est.layers], 2, 18)
    head = (f"{'node':{width}s} {'op':{opw}s} {'prec':6s} {'MACs':>7s} " + " ".join(f"{('B ' + m)[:8]:>8s}" for m in mems)
            + f" {'compute':>8s} {'memory':>8s} {'cycles':>8s} {'bound':8s} {'util%':>5s} {'%tot':>5s}")
    lines = [f"# {est.model} on board '{est.board}' ({est.macs_per_cycle} MACs/cycle at "
             f"{est.clock_hz / 1e6:g} MHz)", head, "-" * len(head)]
    for r in est.layers:
        bound = r.bound + ("*" if r.spill else "")
        lines.append(f"{cut_middle(r.node, width):{width}s} {cut_middle(r.op, opw):{opw}s} {r.precision:6s} {_fmt_int(r.macs):>7s} "
                     + " ".join(f"{_fmt_int(r.bytes.get(m, 0)):>8s}" for m in mems)
                     + f" {_fmt_int(r.compute_cycles):>8s} {_fmt_int(r.memory_cycles):>8s} {_fmt_int(r.cycles):>8s}"
                     f" {bound:8s} {r.utilization:5.1f} {r.share:5.1f}")
    s = est.summary
    lines.append("-" * len(head))
    lines.append(f"total: {s['total_cycles']:,.0f} cycles = {s['latency_ms']:.3f} ms at {est.clock_hz / 1e6:g} MHz "
                 f"({s['fps']:.1f} FPS); {s['total_macs']:,} MACs, MAC utilization {s['utilization_pct']:.1f}%")
    lines.append(f"NPU {s['npu_share_pct']:.1f}% ({s['npu_nodes']} nodes), CPU fallback {s['cpu_share_pct']:.1f}% "
                 f"({s['cpu_nodes']} nodes)" + (f"; feature maps too large for on-chip memory (bound marked *): "
                                                f"{', '.join(s['spilled_nodes'][:3])}"
                                                f"{' ...' if len(s['spilled_nodes']) > 3 else ''}"
                                                if s["spilled_nodes"] else ""))
    lines.append("by class: " + ", ".join(f"{k} {100 * v / s['total_cycles']:.1f}%"
                                          for k, v in s["cycles_by_class"].items() if v) if s["total_cycles"] else
                 "by class: -")
    hot = sorted(est.layers, key=lambda r: -r.cycles)[:max(top, 0)]
    if hot:
        lines.append("hotspots:")
        lines += [f"  {r.share:5.1f}%  {r.cycles:>12,.0f} cycles  {cut_middle(r.node, NAME_CAP)} ({r.op}, {r.bound})"
                  for r in hot if r.cycles]
    if any(len(r.node) > NAME_CAP for r in est.layers):
        lines.append(f"(names longer than {NAME_CAP} characters are cut in the middle at …; --json has them in full)")
    if est.memory:
        lines += memory_lines(est.memory)
    missing = est.summary.get("uncosted_nodes") or []
    if missing:
        lines.append(f"not costed ({len(missing)} node(s) npu-sim cannot lower; see `npu-sim check`): "
                     + ", ".join(f"{m['node']} ({m['op']})" for m in missing[:8])
                     + (" ..." if len(missing) > 8 else ""))
    return "\n".join(lines)


def _short(name: str, n: int = 40) -> str:
    return name if len(name) <= n else "…" + name[-(n - 1):]


def _limit(used: int, size: int, key: str) -> str:
    if not size:
        return f"board: not limited ({key} = 0)"
    return f"board: {size:,} ({key}): " + ("fits" if used <= size else f"DOES NOT FIT, {used - size:,} bytes over")


def memory_lines(m: dict, top: int = 3) -> list[str]:
    """The memory section: constants (flash), the peak live activations and the SRAM they need, the fit, and the
    largest live sets (bytes live while a node runs)."""
    in_sram = m["weight_memory"] == "sram"
    padding = m.get("padding_bytes", 0)
    luts = f"LUTs {m['lut_bytes']:,}"
    lines = [f"memory: flash {m['flash_used_bytes']:,} bytes = weights {m['weight_bytes']:,} + biases "
             f"{m['bias_bytes']:,} + scales {m['scale_bytes']:,} + other {m['other_constant_bytes']:,}"
             + ("" if padding else f" + {luts}")]
    if padding:
        lines.append(f"        + {luts} + padding {padding:,} (the board's weight layout and constant alignment)")
    lines += ["        " + ("board: stored in the SRAM (below)" if in_sram else
                            _limit(m["flash_used_bytes"], m["flash_bytes"], f"memory.{m['weight_memory']}.size_bytes")),
             f"        SRAM {m['sram_used_bytes']:,} bytes = peak live activations {m['peak_activation_bytes']:,}"
             + (" + constants (weight_memory = sram)" if in_sram else f" (constants in {m['weight_memory']})"),
             "        " + _limit(m["sram_used_bytes"], m["sram_bytes"], m["sram_key"])
             + ("; feature maps past it spill" if m["feature_map_spill"] else "")]
    peaks = sorted(m["layers"], key=lambda r: -r["live_bytes"])[:top]
    if peaks:
        lines.append("        largest live sets: " + ", ".join(f"{_short(r['node'], 28)} {r['live_bytes']:,}"
                                                              for r in peaks))
    return lines
