"""The documentation: the README stays short, every relative link in README.md and docs/*.md points to a file
that exists, and the README keeps the two set-up commands in one fenced block."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 200

# [text](target) or [text](target "title"); an image ![alt](src) matches too, and its target is checked alike.
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _documents() -> list[Path]:
    return [README] + sorted((ROOT / "docs").glob("*.md"))


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans, where a bracket is not a link."""
    out, fence = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            out.append("")
            continue
        out.append("" if fence else line)
    return re.sub(r"`[^`\n]*`", "", "\n".join(out))


def relative_links(text: str) -> list[str]:
    """Targets of the relative Markdown links in ``text``: no http(s)/mailto, no pure #anchors, #fragment cut."""
    targets = []
    for target in _LINK.findall(_prose(text)):
        if re.match(r"(?i)^(https?:|mailto:)", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path:
            targets.append(path)
    return targets


def fenced_blocks(text: str) -> list[str]:
    blocks, fence, current = [], None, []
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m and fence is None:
            fence, current = m.group(1), []
        elif m and m.group(1) == fence:
            blocks.append("\n".join(current))
            fence = None
        elif fence is not None:
            current.append(line)
    return blocks


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}); move text to docs/"


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path):
    missing = [t for t in relative_links(doc.read_text(encoding="utf-8")) if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)}: links to missing files: {missing}"


def test_readme_setup_commands_in_one_block():
    blocks = [b for b in fenced_blocks(README.read_text(encoding="utf-8")) if "make demo" in b and "make test" in b]
    assert len(blocks) == 1, (f"README.md must have exactly one fenced block with both `make demo` and "
                              f"`make test`; found {len(blocks)}")


def test_link_finder():
    text = ("[a](docs/A.md) [b](B.md#part) [c](https://x.org/y.md) [d](#anchor) [e](mailto:x@y.z) "
            "`[f](code.md)`\n```\n[g](fenced.md)\n```\n[h](<spaced.md> \"title\")")
    assert relative_links(text) == ["docs/A.md", "B.md", "spaced.md"]
    assert fenced_blocks("x\n```\nmake demo\nmake test\n```\n") == ["make demo\nmake test"]
