"""A board whose every node LiteRT prepares: the ethos-u55-128 board file with ``npu_compiler = "none"``.

On ethos-u55-128 Vela compiles the NPU nodes, so LiteRT's prepare-time refusals apply to its CPU nodes only; this
board keeps LiteRT's arithmetic and makes its prepare judge every node, as a CPU running LiteRT would."""
from __future__ import annotations

from pathlib import Path

from npu_sim.boards import PRESET_DIR


def litert_host_board(directory: Path) -> Path:
    """Write the board file into ``directory`` and return its path (for ``--board`` and the API alike)."""
    text = (PRESET_DIR / "ethos-u55-128.toml").read_text()
    assert 'npu_compiler = "vela"' in text
    path = Path(directory) / "litert-host.toml"
    path.write_text(text.replace('npu_compiler = "vela"', 'npu_compiler = "none"')
                    .replace('name = "ethos-u55-128"', 'name = "litert-host"'))
    return path
