"""Every vyre.ops function on numba's CUDA simulator (the GPU-form programs: grid-stride loops,
subgroup and workgroup combines, device arrays between passes), in a child process because the
simulator is chosen when numba.cuda is first imported (tests/subproc.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.subproc import ROOT


def test_ops_on_the_cuda_simulator() -> None:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-m", "tests.ops_sim_runner"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and rows, proc.stderr[-4000:]
    bad = [r for r in rows if not r["ok"]]
    assert not bad, "\n\n".join(f"{r['name']}:\n{r['error']}" for r in bad)
    assert len(rows) >= 10
