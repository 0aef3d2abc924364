"""A board's ``[cost]`` section: the accelerator's latency model as data (evaluated by ``npu_sim.analysis.cost``).

Parsed when the board is loaded, so a bad file fails at once with the key at fault."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from npu_sim.errors import BoardError


# ----------------------------------------------------------------------------------------------------------------
# the [cost] section
# ----------------------------------------------------------------------------------------------------------------
OUTPUT_CLASSES = ("mac", "mac_wide", "add", "mul", "maxpool", "pool", "lut", "relu", "elementwise",
                  "requantize", "resize", "normalization")


@dataclass(frozen=True)
class Memory:
    name: str
    bytes_per_cycle: float          # sustained bandwidth, bytes per NPU cycle
    read_latency: int = 0           # cycles
    write_latency: int = 0
    burst_bytes: int = 32           # longest burst; shorter bursts waste bandwidth
    size_bytes: int = 0             # 0 = no limit


@dataclass(frozen=True)
class Cpu:
    macs_per_cycle: float = 1.0         # per NPU clock cycle
    elements_per_cycle: float = 1.0
    transfer_latency_cycles: int = 0    # per tensor crossing NPU<->CPU
    transfer_bytes_per_cycle: float = 8.0


@dataclass(frozen=True)
class CostConfig:
    clock_hz: float
    ublock: tuple[int, int, int]
    ofm_block: tuple[int, int, int]
    ifm_depth_block: int
    int16_factor: int
    ublock_step_cycles: int
    weight_step_cycles: int
    depthwise_kernel_step: int
    part_kernel_step: int
    brick_layout: bool
    pool_min_kernel: int
    pool_ublock_cycles: float
    scale_bytes_per_channel: int
    write_burst_elements: int
    op_overhead_cycles: int
    movement_cycles_per_element: float
    feature_map_memory: str
    weight_memory: str
    spill_memory: str
    lut_bytes_8: int
    lut_bytes_16: int
    lut_load_bytes_per_cycle: float
    output_cycles_per_element: dict
    memories: dict
    cpu: Cpu
    source: str = ""

    @property
    def macs_per_cycle(self) -> int:
        """Peak: micro-block outputs x input channels per cycle (ifm_depth_block / ublock_step_cycles)."""
        h, w, c = self.ublock
        return h * w * c * self.ifm_depth_block // self.ublock_step_cycles


_SCALARS = {  # key: (type, minimum, required)
    "clock_hz": (float, 1.0, True),
    "ifm_depth_block": (int, 1, True),
    "int16_factor": (int, 1, True),
    "ublock_step_cycles": (int, 1, True),
    "weight_step_cycles": (int, 0, True),
    "depthwise_kernel_step": (int, 1, True),
    "part_kernel_step": (int, 0, False),
    "pool_min_kernel": (int, 1, False),
    "pool_ublock_cycles": (float, 0.0, False),
    "scale_bytes_per_channel": (int, 0, False),
    "write_burst_elements": (int, 1, False),
    "op_overhead_cycles": (int, 0, False),
    "movement_cycles_per_element": (float, 0.0, False),
}
_DEFAULTS = {"part_kernel_step": 0, "brick_layout": False, "pool_min_kernel": 4, "pool_ublock_cycles": 4.0, "scale_bytes_per_channel": 0,
             "write_burst_elements": 16, "op_overhead_cycles": 0, "movement_cycles_per_element": 0.0}
_TOP = set(_SCALARS) | {"brick_layout", "ublock", "ofm_block", "feature_map_memory", "weight_memory", "spill_memory", "lut",
                        "output_cycles_per_element", "memory", "cpu"}


def _num(value, typ, lo, where: str, path) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and typ is int and float(value) != int(value):
        ok = False
    if not ok or value < lo:
        kind = "an integer" if typ is int else "a number"
        raise BoardError(f"board file {path}: {where} = {value!r}; must be {kind} >= {lo}")
    return typ(value)


def _table(section, key, path) -> dict:
    value = section.get(key, {})
    if not isinstance(value, dict):
        raise BoardError(f"board file {path}: cost.{key} must be a table")
    return value


def _known(table: dict, known, prefix: str, path) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise BoardError(f"board file {path}: unknown key {prefix}{unknown[0]} (known: {', '.join(sorted(known))})")


def parse_cost(section: dict, path) -> CostConfig | None:
    """Validate the board's ``[cost]`` table; None when the board has none (``estimate`` then refuses)."""
    if not section:
        return None
    _known(section, _TOP, "cost.", path)
    missing = [k for k, (_, _, req) in _SCALARS.items() if req and k not in section]
    missing += [k for k in ("ublock", "ofm_block", "memory") if k not in section]
    if missing:
        raise BoardError(f"board file {path}: [cost] lacks cost.{missing[0]} (see npu_sim/boards/default.toml)")
    vals: dict[str, Any] = dict(_DEFAULTS)
    for key, (typ, lo, _) in _SCALARS.items():
        if key in section:
            vals[key] = _num(section[key], typ, lo, f"cost.{key}", path)
    if "brick_layout" in section:
        if not isinstance(section["brick_layout"], bool):
            raise BoardError(f"board file {path}: cost.brick_layout = {section['brick_layout']!r}; must be true or false")
        vals["brick_layout"] = section["brick_layout"]
    for key in ("ublock", "ofm_block"):
        v = section[key]
        if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                           and x >= 1 for x in v)):
            raise BoardError(f"board file {path}: cost.{key} = {v!r}; must be [H, W, C], positive integers")
        vals[key] = tuple(v)
    if vals["ifm_depth_block"] % vals["int16_factor"]:
        raise BoardError(f"board file {path}: cost.ifm_depth_block = {vals['ifm_depth_block']} must be a multiple "
                         f"of cost.int16_factor = {vals['int16_factor']}")
    mem_section = _table(section, "memory", path)
    if not mem_section:
        raise BoardError(f"board file {path}: cost.memory must name at least one memory, e.g. [cost.memory.sram]")
    memories = {}
    for name, m in mem_section.items():
        if not isinstance(m, dict):
            raise BoardError(f"board file {path}: cost.memory.{name} must be a table")
        _known(m, ("bytes_per_cycle", "read_latency", "write_latency", "burst_bytes", "size_bytes"),
               f"cost.memory.{name}.", path)
        if "bytes_per_cycle" not in m:
            raise BoardError(f"board file {path}: cost.memory.{name} lacks bytes_per_cycle")
        bpc = _num(m["bytes_per_cycle"], float, 0.0, f"cost.memory.{name}.bytes_per_cycle", path)
        if bpc <= 0:
            raise BoardError(f"board file {path}: cost.memory.{name}.bytes_per_cycle must be > 0")
        memories[name] = Memory(name, bpc, *(_num(m.get(k, d), int, lo, f"cost.memory.{name}.{k}", path)
                                             for k, d, lo in (("read_latency", 0, 0), ("write_latency", 0, 0),
                                                              ("burst_bytes", 32, 1), ("size_bytes", 0, 0))))
    for key in ("feature_map_memory", "weight_memory", "spill_memory"):
        name = section.get(key, next(iter(memories)))
        if name not in memories:
            raise BoardError(f"board file {path}: cost.{key} = {name!r}; not one of the memories "
                             f"({', '.join(memories)})")
        vals[key] = name
    lut = _table(section, "lut", path)
    _known(lut, ("bytes_8", "bytes_16", "load_bytes_per_cycle"), "cost.lut.", path)
    vals["lut_bytes_8"] = _num(lut.get("bytes_8", 256), int, 0, "cost.lut.bytes_8", path)
    vals["lut_bytes_16"] = _num(lut.get("bytes_16", 2048), int, 0, "cost.lut.bytes_16", path)
    vals["lut_load_bytes_per_cycle"] = _num(lut.get("load_bytes_per_cycle", 1.0), float, 0.0,
                                            "cost.lut.load_bytes_per_cycle", path)
    if vals["lut_load_bytes_per_cycle"] <= 0:
        raise BoardError(f"board file {path}: cost.lut.load_bytes_per_cycle must be > 0")
    ao = _table(section, "output_cycles_per_element", path)
    _known(ao, OUTPUT_CLASSES, "cost.output_cycles_per_element.", path)
    missing = [k for k in OUTPUT_CLASSES if k not in ao]
    if missing:
        raise BoardError(f"board file {path}: cost.output_cycles_per_element lacks {missing[0]} "
                         f"(needs {', '.join(OUTPUT_CLASSES)})")
    vals["output_cycles_per_element"] = {k: _num(v, float, 0.0, f"cost.output_cycles_per_element.{k}", path)
                                         for k, v in ao.items()}
    cpu = _table(section, "cpu", path)
    _known(cpu, ("macs_per_cycle", "elements_per_cycle", "transfer_latency_cycles", "transfer_bytes_per_cycle"),
           "cost.cpu.", path)
    cpu_vals = {}
    for k, typ in (("macs_per_cycle", float), ("elements_per_cycle", float), ("transfer_latency_cycles", int),
                   ("transfer_bytes_per_cycle", float)):
        if k in cpu:
            cpu_vals[k] = _num(cpu[k], typ, 0, f"cost.cpu.{k}", path)
            if typ is float and cpu_vals[k] <= 0:
                raise BoardError(f"board file {path}: cost.cpu.{k} must be > 0")
    return CostConfig(memories=memories, cpu=Cpu(**cpu_vals), source=str(path), **vals)
