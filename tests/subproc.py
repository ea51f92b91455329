"""Run tests.backend_runner in a child process and collect its JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_checks(mode: str, *args: str, env: dict[str, str] | None = None, timeout: int = 900) -> list[dict]:
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "tests.backend_runner", mode, *args], cwd=ROOT,
                          env=full_env, capture_output=True, text=True, timeout=timeout)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not rows:
        raise AssertionError(f"backend runner {mode} failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    return rows
