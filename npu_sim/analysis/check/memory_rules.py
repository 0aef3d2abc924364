"""Does the model fit the board's memories: the ``memory.*`` rules, on the figures of the memory model
(``npu_sim.analysis.cost.memory``, made once per check: ``Context.memory``; constants as the board stores them, the
peak live activation bytes under the executor's schedule) against the board's ``[memory]`` section
(``npu_sim/boards/memory_config.py``, docs/BOARDS.md). A board that sets no size (0) is not checked."""
from __future__ import annotations

from npu_sim.analysis.check.findings import rule


def size_text(n: int) -> str:
    """Bytes for a message: exact, and in KiB or MiB."""
    if n >= 1 << 20:
        return f"{n:,} bytes ({n / (1 << 20):.2f} MiB)"
    return f"{n:,} bytes ({n / 1024:.1f} KiB)"


def _largest(rep: dict) -> str:
    return ", ".join(f"{t['tensor']} {t['bytes']:,}" for t in rep["peak_tensors"])


@rule("memory.sram", "error", "board", scope="model")
def _sram(ctx):
    """The model does not fit the board's SRAM: it needs {needed} ({parts}) and the board has {size} ({key}). The
    largest live set is while {node} runs: {tensors} bytes.

    {fix}"""
    rep = ctx.memory
    size = rep["sram_bytes"]
    if not size:
        return None
    peak, consts = rep["peak_activation_bytes"], rep["flash_used_bytes"]
    in_sram = rep["weight_memory"] == "sram"
    common = {"size": size_text(size), "key": rep["sram_key"], "node": rep["peak_node"], "tensors": _largest(rep)}
    if rep["feature_map_spill"]:
        if peak <= size:
            return None  # constants past the SRAM stay in the slower memory: nothing lost but bandwidth
        return {**common, "severity": "warning", "needed": size_text(peak), "parts": "peak live feature maps",
                "fix": "The board places what does not fit in its slower memory: it runs, slower (see npu-sim "
                       "estimate's spill marks). Reduce the input resolution"
                       + (", or use int8 instead of int16 activations," if _wide_activations(ctx.program) else "")
                       + " to keep the feature maps in SRAM."}
    if rep["sram_used_bytes"] <= size:
        return None
    parts = f"peak live feature maps {peak:,}" + (f" + constants {consts:,}" if in_sram else "")
    fixes = []
    if in_sram and peak <= size:
        fixes.append('keep the constants in a memory of their own (memory.weight_memory = "flash" and a '
                     "[memory.flash] table, as Vela's Shared_Sram mode): the feature maps alone need "
                     f"{peak:,} bytes")
    fixes.append("reduce the input resolution (the feature maps scale with it)")
    if _wide_activations(ctx.program):
        fixes.append("use int8 instead of int16 activations (half the bytes)")
    text = "; or ".join(fixes) + "."
    return {**common, "needed": size_text(rep["sram_used_bytes"]), "parts": parts, "fix": text[0].upper() + text[1:]}


def _wide_activations(program) -> bool:
    return any(t.q is not None and not t.is_const and t.q.bits > 8 for t in program.tensors.values())


@rule("memory.weights", "error", "board", scope="model")
def _weights(ctx):
    """The model's constants do not fit the memory the board stores them in: they take {needed} (weights
    {weights:,}, biases {biases:,}, scales {scales:,}, other constants {other:,}, lookup tables {luts:,}, padding
    {padding:,} bytes) and the board has {size} ({key}).

    Use int8 instead of int16 weights (half the bytes), or a smaller model (fewer or narrower layers, pruned
    channels)."""
    rep = ctx.memory
    size = rep["flash_bytes"]
    if not size or rep["flash_used_bytes"] <= size:
        return None
    return {"needed": size_text(rep["flash_used_bytes"]), "weights": rep["weight_bytes"], "biases": rep["bias_bytes"],
            "scales": rep["scale_bytes"], "other": rep["other_constant_bytes"], "luts": rep["lut_bytes"],
            "padding": rep["padding_bytes"],
            "size": size_text(size), "key": f"memory.{rep['weight_memory']}.size_bytes"}
