"""Regenerate docs/SUPPORTED_OPS.md from the rule table and the board presets: python docs/supported_ops.py"""
from pathlib import Path

from npu_sim.analysis.check import supported_ops_markdown

if __name__ == "__main__":
    out = Path(__file__).parent / "SUPPORTED_OPS.md"
    out.write_text(supported_ops_markdown())
    print(f"wrote {out}")
