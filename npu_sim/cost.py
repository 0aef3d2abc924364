"""Latency estimate: the board's [cost] section and the per-op cost model (work in progress)."""
from __future__ import annotations

CLI_DESCRIPTION = ""


def parse_cost(section: dict, path) -> dict:
    return dict(section)


def add_cli_arguments(parser) -> None:
    pass


def cli_main(args, shapes) -> int:
    from .errors import NpuSimError
    raise NpuSimError("npu-sim estimate is not available yet")
