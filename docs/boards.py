"""Regenerate docs/BOARDS.md from the board schema (npu_sim/boards/schema.py): python docs/boards.py"""
from pathlib import Path

from npu_sim.boards.schema import boards_markdown

if __name__ == "__main__":
    out = Path(__file__).parent / "BOARDS.md"
    out.write_text(boards_markdown())
    print(f"wrote {out}")
