"""The board schema (npu_sim/boards/schema.py): one declaration per key gives the parser, every message and
docs/BOARDS.md; each fact has one section, and the presets agree with themselves."""
from __future__ import annotations

import copy
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from npu_sim.boards import PRESET_DIR, load_board, presets
from npu_sim.boards.board import Arithmetic
from npu_sim.boards.cost_config import CostConfig
from npu_sim.boards.fields import specs
from npu_sim.boards.memory_config import Memory, MemoryConfig
from npu_sim.boards.rules import Rules
from npu_sim.boards.schema import SECTIONS, board_from_dict, boards_markdown
from npu_sim.errors import BoardError

ROOT = Path(__file__).resolve().parent.parent
MEMORY_SECTIONS = ("memory", "memory.NAME")
# a concrete table for each section whose last part is a name
CONCRETE = {"rules.kinds.KIND": "rules.kinds.mac", "rules.ops.OP": "rules.ops.Conv", "memory.NAME": "memory.sram"}
# a value of the wrong type for each kind of key
WRONG = {"str": 5, "memory": 5, "bool": 1, "choice": "nonsense", "int": "x", "float": "x", "dtypes": ["int7"],
         "zero_points": "x", "ints": [0], "hwc": [1, 2]}


def _preset_data(name: str) -> dict:
    return tomllib.loads((PRESET_DIR / f"{name}.toml").read_text())


def test_boards_doc_is_current():
    assert (ROOT / "docs" / "BOARDS.md").read_text() == boards_markdown(), \
        "docs/BOARDS.md is stale: run python docs/boards.py"


def test_every_key_of_the_schema_is_in_the_doc():
    doc = boards_markdown()
    for s in SECTIONS:
        for key, spec in specs(s.record).items():
            assert f"| `{key}` | {spec.allowed()} |" in doc, (s.path, key)


def _put(data: dict, where: str, key: str, value) -> dict:
    data = copy.deepcopy(data)
    table = data
    for part in [p for p in where.split(".") if p]:
        table = table.setdefault(part, {})
    table[key] = value
    return data


@pytest.mark.parametrize("section", [s.path for s in SECTIONS])
def test_every_key_refuses_a_wrong_value_naming_file_key_and_what_is_allowed(tmp_path, section):
    """Generated from the schema: each key of each section, given a value of the wrong type, is refused with a
    message that names the board file, the section and key, and what is allowed."""
    s = next(s for s in SECTIONS if s.path == section)
    where = CONCRETE.get(section, section)
    path = tmp_path / "board.toml"
    for key, spec in specs(s.record).items():
        data = _put(_preset_data("ethos-u55-128"), where, key, WRONG[spec.kind])
        with pytest.raises(BoardError) as err:
            board_from_dict(data, path)
        name = f"{where}.{key}" if where else key
        assert str(path) in str(err.value) and f"{name} = " in str(err.value), str(err.value)
        assert spec.allowed() in str(err.value), str(err.value)


def test_unknown_keys_name_the_known_ones(tmp_path):
    for s in SECTIONS:
        where = CONCRETE.get(s.path, s.path)
        data = _put(_preset_data("default"), where, "frobnicate", 1)
        with pytest.raises(BoardError, match=f"unknown key {where + '.' if where else ''}frobnicate") as err:
            board_from_dict(data, tmp_path / "b.toml")
        assert all(key in str(err.value) for key in specs(s.record))


def test_required_keys_are_named(tmp_path):
    data = _preset_data("default")
    del data["cost"]["clock_hz"]
    with pytest.raises(BoardError, match="cost lacks clock_hz"):
        board_from_dict(data, tmp_path / "b.toml")


def test_an_empty_file_is_the_schema_defaults(tmp_path):
    board = board_from_dict({}, tmp_path / "empty.toml")
    assert board.name == "empty" and board.arithmetic == Arithmetic() and board.rules == Rules()
    assert board.cost is None and board.memory == MemoryConfig()


def test_memory_facts_belong_to_memory_only():
    """A schema-level guarantee: a memory fact (a key of [memory] or [memory.NAME]) is a key of no other section,
    so a board file cannot state it twice; [cost] reads the board's one MemoryConfig."""
    memory_keys = {k for s in SECTIONS if s.path in MEMORY_SECTIONS for k in specs(s.record)}
    for s in SECTIONS:
        if s.path not in MEMORY_SECTIONS:
            assert not memory_keys & set(specs(s.record)), s.path
    assert not {f.name for f in fields(CostConfig)} & (set(specs(MemoryConfig)) | set(specs(Memory)))


def test_a_memory_fact_written_in_cost_is_refused_and_pointed_home(tmp_path):
    for key, value, home in (("scale_bytes_per_channel", 10, "memory.scale_bytes_per_channel"),
                             ("weight_memory", "sram", "memory.weight_memory"), ("bias_bytes", 4, r"\[memory\]"),
                             ("size_bytes", 4, r"\[memory.NAME\]")):
        data = _put(_preset_data("default"), "cost", key, value)
        with pytest.raises(BoardError, match=rf"unknown key cost\.{key} .*; .*{home}"):
            board_from_dict(data, tmp_path / "b.toml")


@pytest.mark.parametrize("where, key, value, now", [
    ("cost.memory.sram", "bytes_per_cycle", 8, "[memory.NAME] tables"),
    ("cost", "feature_map_memory", "sram", "[memory.sram]"),
    ("memory", "sram_bytes", 1024, "memory.sram.size_bytes"),
    ("memory", "feature_map_spill", True, "memory.spill_memory")])
def test_a_board_file_of_the_old_format_is_told_where_the_key_went(tmp_path, where, key, value, now):
    data = _put(_preset_data("ethos-u55-128"), where, key, value)
    with pytest.raises(BoardError) as err:
        board_from_dict(data, tmp_path / "old.toml")
    assert "unknown key" in str(err.value) and now in str(err.value), str(err.value)


@pytest.mark.parametrize("name", presets())
def test_each_preset_states_each_fact_once(name):
    """Every key a preset writes is a schema key of the section it is written in (load_board refuses the rest),
    no memory fact is written outside [memory], and estimate and check read the same memory record."""
    board = load_board(name)
    data = _preset_data(name)
    memory_keys = {k for s in SECTIONS if s.path in MEMORY_SECTIONS for k in specs(s.record)}

    def walk(table, where):
        for key, value in table.items():
            here = f"{where}.{key}" if where else key
            if isinstance(value, dict):
                yield from walk(value, here)
            else:
                yield where, key
    for where, key in walk(data, ""):
        assert key not in memory_keys or where.split(".")[0] == "memory", f"{name}: {where}.{key}"
    if board.cost is not None:
        assert board.cost.memory is board.memory


def test_the_ethos_preset_agrees_with_itself():
    """One SRAM (Vela's 4 MiB arena) for check and estimate, the constants in Vela's on-chip flash for both, and
    one 10-byte record per output channel (40-bit bias + 32-bit scale + 6-bit shift)."""
    board = load_board("ethos-u55-128")
    mem = board.memory
    assert mem.sram_bytes == 4 * 1024 * 1024 and board.cost.memory.sram_bytes == mem.sram_bytes
    assert mem.weight_memory == "flash" and not mem.constants_in_sram and not mem.feature_map_spill
    assert mem.memories["flash"].bytes_per_cycle == mem.sram.bytes_per_cycle  # the SRAM's timing
    assert mem.bias_bytes + mem.scale_bytes_per_channel == 10


def test_the_default_preset_agrees_with_itself():
    mem = load_board("default").memory
    assert mem.sram_bytes == 2 * 1024 * 1024 and mem.weight_memory == "ddr" and mem.spill_memory == "ddr"
    assert 4 + mem.scale_bytes_per_channel == 10  # with the int32 bias at its own width (bias_bytes = 0)


@pytest.mark.parametrize("where, key, value, words", [
    ("rules", "shift_min", 63, "rules.shift_min = 63: must not exceed rules.shift_max = 62"),
    ("arithmetic", "lut_entries_16", 500, "must be 2**k + 1"),
    ("cost", "ifm_depth_block", 33, "must be a multiple of cost.int16_factor"),
    ("memory", "weight_memory", "rom", "memory.weight_memory = 'rom'; must be the name of a [memory.NAME] table"),
    ("memory.flash", "bytes_per_cycle", 0, "memory.flash.bytes_per_cycle: the [cost] latency model needs")])
def test_checks_across_keys_name_them(tmp_path, where, key, value, words):
    data = _put(_preset_data("ethos-u55-128"), where, key, value)
    with pytest.raises(BoardError) as err:
        board_from_dict(data, tmp_path / "b.toml")
    assert words in str(err.value), str(err.value)
