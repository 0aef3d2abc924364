"""Deployability check: the board's [rules] section, numeric hazards, lint (work in progress)."""
from __future__ import annotations

CLI_DESCRIPTION = ""


def parse_rules(section: dict, path) -> dict:
    return dict(section)


def add_cli_arguments(parser) -> None:
    pass


def cli_main(args, shapes) -> int:
    from .errors import NpuSimError
    raise NpuSimError("npu-sim check is not available yet")


def placement(program) -> dict[str, str]:
    """Node name -> "NPU" or "CPU" (fallback) for every node of the program, by the board's rules."""
    return {node.name: "NPU" for node in program.nodes}
