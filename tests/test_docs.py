"""Every Python block of docs/guide.md runs (in order, sharing names), and so does the README's."""

from __future__ import annotations

import importlib.util
import re
import runpy
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line of the block's first code line, code) for every ```python block."""
    text = path.read_text()
    return [(text[:m.start(1)].count("\n") + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def run_blocks(path: Path, tmp_path: Path, blocks: list[tuple[int, str]]) -> dict[str, Any]:
    """Each block is written to a file (the frontend reads kernel source from files), padded so
    its line numbers are the document's, and run with the names the earlier blocks defined."""
    ns: dict[str, Any] = {}
    for k, (line, code) in enumerate(blocks):
        f = tmp_path / f"{path.stem}_block{k}.py"
        f.write_text("\n" * (line - 1) + code)
        try:
            ns = runpy.run_path(str(f), init_globals=ns)
        except Exception as e:
            raise AssertionError(f"{path.name}: the block at line {line} failed: {type(e).__name__}: {e}") from e
    return ns


def test_guide_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VYRE_BACKEND", "interp")  # small data; the same results on every backend
    blocks = python_blocks(ROOT / "docs" / "guide.md")
    assert len(blocks) >= 15
    run_blocks(ROOT / "docs" / "guide.md", tmp_path, blocks)


def test_readme_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VYRE_BACKEND", "interp")  # the same code; the interpreter is the spec
    blocks = [(line, code.replace("1 << 20", "1 << 8")) for line, code in python_blocks(ROOT / "README.md")
              if "import torch" not in code or importlib.util.find_spec("torch") is not None]
    ns = run_blocks(ROOT / "README.md", tmp_path, blocks)
    assert "chain" in ns
