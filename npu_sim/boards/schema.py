"""The board file's schema: its sections, in order, each filled by one record whose ``entry`` fields are the
section's keys (type, range or choices, default, doc: ``npu_sim.boards.fields``). From it come the parsing of a
board file (``board_from_dict``), every validation message, and docs/BOARDS.md (``boards_markdown``, written by
``python docs/boards.py``; ``tests/test_board_schema.py`` fails when the document is stale). A fact is a key of one
section only: the memory facts are ``[memory]``'s, and ``[cost]`` reads them there (``CostConfig.memory``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from npu_sim.boards.board import Arithmetic, Board
from npu_sim.boards.cost_config import CostConfig, Cpu, Lut, OutputCycles
from npu_sim.boards.fields import REQUIRED, bad, default_of, parse_table, specs
from npu_sim.boards.memory_config import SRAM, Memory, MemoryConfig
from npu_sim.boards.rules import Lint, OpLimits, Rules
from npu_sim.opset import CONVERT_OPS, OPS

KINDS = tuple(sorted({info.kind for info in OPS.values()}))  # the op kinds a [rules.kinds.KIND] table may name

@dataclass(frozen=True)
class Section:
    path: str       # "cost.lut"; an upper-case last part is a name: "memory.NAME" is any [memory.<name>]
    record: type
    doc: str


SECTIONS = (
    Section("", Board, "Top-level keys."),
    Section("arithmetic", Arithmetic, "How the board computes its integers; `npu-sim run` is bit-exact to it."),
    Section("rules", Rules, "What the NPU accepts, for `npu-sim check` (docs/CHECK.md, docs/SUPPORTED_OPS.md). "
            "A board without `[rules]` has no hardware rules (numeric hazards and lint still apply)."),
    Section("rules.kinds.KIND", OpLimits, "Every op of this kind runs on the NPU, with these limits. KIND: "
            + ", ".join(KINDS) + " (`npu_sim/opset.py`)."),
    Section("rules.ops.OP", OpLimits, "This op runs on the NPU with these limits (refining its kind's; "
            "`npu = false`: on the CPU). Also `Quantize` and `Requantize`, the program's own conversions."),
    Section("rules.lint", Lint, "Thresholds of the quantization-friendliness lint and the hazard warnings."),
    Section("memory", MemoryConfig, "The board's memory facts, for the fit (`estimate`'s memory section, "
            "`check`'s `memory.*` rules) and the latency model alike. The feature maps (the tensor arena) live in "
            "`[memory.sram]`."),
    Section("memory.NAME", Memory, "One memory: `[memory.sram]` (the feature maps), and any other the constants "
            "or the spills go to (`[memory.flash]`, `[memory.ddr]`, ...). A board with `[cost]` gives every "
            "memory it uses a `bytes_per_cycle`."),
    Section("cost", CostConfig, "The latency model, for `npu-sim estimate` (docs/ESTIMATE.md; formulas in "
            "`npu_sim/analysis/cost/`). A board without `[cost]` has no latency model. It reads the memories, "
            "their sizes and the per-channel bytes from `[memory]`."),
    Section("cost.lut", Lut, "Lookup tables."),
    Section("cost.output_cycles_per_element", OutputCycles, "The output pipeline, cycles per output element "
            "(every key required)."),
    Section("cost.cpu", Cpu, "The host CPU that runs fallback ops."),
)


# Keys of the board files before [memory] became the one source of the memory facts: where they are now.
MOVED = {
    "cost.memory": "the memories are [memory.NAME] tables now (size_bytes, bytes_per_cycle, latencies, burst_bytes)",
    "cost.feature_map_memory": "the feature maps live in [memory.sram] now",
    "cost.weight_memory": "it is memory.weight_memory now",
    "cost.spill_memory": "it is memory.spill_memory now",
    "cost.scale_bytes_per_channel": "it is memory.scale_bytes_per_channel (+ memory.bias_bytes) now",
    "memory.sram_bytes": "it is memory.sram.size_bytes now",
    "memory.flash_bytes": "it is the size_bytes of the constants' memory now ([memory.NAME] of memory.weight_memory)",
    "memory.feature_map_spill": "it is memory.spill_memory now (the name of a slower memory; sram: no spill)",
}


@cache
def _hints(where: str) -> dict:
    """Where an unknown key of section ``where`` belongs: a key that moved, or a key of another section (made once
    per section: read-only)."""
    out: dict[str, str] = {}
    for s in SECTIONS:
        if s.path != where and s.path:
            for key in specs(s.record):
                out.setdefault(key, f"it belongs in [{s.path}]")
    out.update({k.rpartition(".")[2]: v for k, v in MOVED.items() if k.rpartition(".")[0] == where})
    return out


def _table(record, data: dict, where: str, path, subtables: tuple = ()) -> dict:
    return parse_table(record, data, where, path, subtables, _hints(where))


def _arithmetic(data: dict, path) -> Arithmetic:
    a = Arithmetic(**_table(Arithmetic, data, "arithmetic", path))
    e = a.lut_entries_16 - 1
    if e & (e - 1):
        raise bad(path, f"arithmetic.lut_entries_16 = {e + 1}; must be 2**k + 1 (e.g. 257, 513)")
    if a.requantize == "fixedpoint" and a.rounding != "half_up":
        raise bad(path, "fixedpoint requantization rounds half_up (see kernels/fixedpoint.py)")
    return a


def _limits(data: dict, key: str, known, what: str, path) -> dict[str, dict]:
    out = {}
    for name, table in data.get(key, {}).items():
        if name not in known:
            raise bad(path, f"rules.{key}.{name}: {what}")
        out[name] = _table(OpLimits, table, f"rules.{key}.{name}", path)
    return out


def _rules(data: dict, path) -> Rules:
    if not data:
        return Rules()
    vals = _table(Rules, data, "rules", path, ("kinds", "ops", "lint"))
    by_kind = _limits(data, "kinds", KINDS, f"unknown op kind (known: {', '.join(KINDS)})", path)
    by_op = _limits(data, "ops", set(OPS) | set(CONVERT_OPS), "npu-sim has no such op (see docs/SUPPORTED_OPS.md)",
                    path)
    # every op of a listed kind runs on the NPU with the kind's limits; an ops entry refines (or removes) one op
    merged = {op: OpLimits(**{**by_kind.get(info.kind, {}), **by_op.get(op, {})})
              for op, info in OPS.items() if info.kind in by_kind or op in by_op}
    merged.update({op: OpLimits(**by_op[op]) for op in CONVERT_OPS if op in by_op})
    lint = Lint(**_table(Lint, data.get("lint", {}), "rules.lint", path))
    rules = Rules(constrained=True, ops=merged, lint=lint, **vals)
    if rules.shift_min > rules.shift_max:
        raise bad(path, f"rules.shift_min = {rules.shift_min}: must not exceed rules.shift_max = {rules.shift_max}")
    return rules


def _memory(data: dict, path) -> MemoryConfig:
    names = tuple(k for k, v in data.items() if isinstance(v, dict) and k not in specs(MemoryConfig))
    vals = _table(MemoryConfig, data, "memory", path, names)
    memories = {SRAM: Memory()}
    memories.update({n: Memory(name=n, **_table(Memory, data[n], f"memory.{n}", path)) for n in names})
    for key in ("weight_memory", "spill_memory"):
        if vals.get(key, SRAM) not in memories:
            raise bad(path, f"memory.{key} = {vals[key]!r}; must be the name of a [memory.NAME] table "
                            f"({', '.join(memories)})")
    return MemoryConfig(memories=memories, **vals)


def _cost(data: dict, memory: MemoryConfig, path) -> CostConfig | None:
    if not data:
        return None
    vals = _table(CostConfig, data, "cost", path, ("lut", "output_cycles_per_element", "cpu"))
    if vals["ifm_depth_block"] % vals["int16_factor"]:
        raise bad(path, f"cost.ifm_depth_block = {vals['ifm_depth_block']} must be a multiple of "
                        f"cost.int16_factor = {vals['int16_factor']}")
    for name in dict.fromkeys((SRAM, memory.weight_memory, memory.spill_memory)):
        if memory.memories[name].bytes_per_cycle <= 0:
            raise bad(path, f"memory.{name}.bytes_per_cycle: the [cost] latency model needs the bandwidth of "
                            f"every memory it uses (a number > 0, bytes per cycle) in [memory.{name}]")
    parts = {"lut": Lut, "output_cycles_per_element": OutputCycles, "cpu": Cpu}
    sub = {k: rec(**_table(rec, data.get(k, {}), f"cost.{k}", path)) for k, rec in parts.items()}
    return CostConfig(memory=memory, source=str(path), **sub, **vals)


def board_from_dict(data: dict, path: Path) -> Board:
    """Validate and parse a board file's TOML (every key of every section against the schema)."""
    top = _table(Board, data, "", path, ("arithmetic", "rules", "cost", "memory"))
    memory = _memory(data.get("memory", {}), path)
    return Board(name=top.get("name", path.stem), description=top.get("description", ""),
                 arithmetic=_arithmetic(data.get("arithmetic", {}), path), rules=_rules(data.get("rules", {}), path),
                 cost=_cost(data.get("cost", {}), memory, path), memory=memory, source=str(path))


# ---------------------------------------------------------------------------------------------------------------
# docs/BOARDS.md
# ---------------------------------------------------------------------------------------------------------------
_HEADER = """# Board files

Generated by `python docs/boards.py` from the board schema in `npu_sim/boards/`
(`tests/test_board_schema.py` fails when it is stale).

A board is a TOML file: a preset name (`--board default`, a file in `npu_sim/boards/`) or the path of your own
file (`--board my_soc.toml`). Every key below is optional unless marked *required*; a key left out takes its
default. A key that is not in the schema, or a value outside what is allowed, is refused when the board is
loaded, with the file, the key and what is allowed. The presets (`npu_sim/boards/*.toml`) comment every key
they set.

Who reads what: `npu-sim run` (and every command that simulates) the `[arithmetic]`; `npu-sim check` the
`[rules]` and `[memory]`; `npu-sim estimate` the `[cost]` and `[memory]`. Each fact is written in one section
only: the memories, their sizes and bandwidths, where the constants live and what is stored per output channel
are `[memory]`'s, so the fit that `check` enforces and the latency that `estimate` reports use the same numbers.
A board file written before that (with `[cost.memory.NAME]` tables, `memory.sram_bytes`, ...) is refused with the
key that moved and where it is now.
"""


def _shown(value) -> str:
    if value is REQUIRED:
        return "*required*"
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]`"
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""`'
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def boards_markdown() -> str:
    """docs/BOARDS.md: every section and key of the schema, with what it allows, its default and its meaning."""
    out = [_HEADER]
    for s in SECTIONS:
        out += [f"## {'`[' + s.path + ']`' if s.path else 'Top level'}", "", s.doc, "",
                "| key | allowed | default | meaning |", "|---|---|---|---|"]
        for key, spec in specs(s.record).items():
            doc = spec.doc.replace("|", "\\|")
            out.append(f"| `{key}` | {spec.allowed()} | {_shown(default_of(s.record, key))} | {doc} |")
        out.append("")
    return "\n".join(out)

