"""The code stays ruff- and mypy-clean (configuration in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
                    reason="ruff is not installed (pip install 'vyre[test]')")
def test_ruff_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    res = _run(ruff, "check", "--output-format", "concise", "vyre", "tests", "bench")
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_clean() -> None:
    pytest.importorskip("mypy")
    res = _run(sys.executable, "-m", "mypy", "vyre")
    assert res.returncode == 0, res.stdout + res.stderr
