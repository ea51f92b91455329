"""``import vyre`` stays light: no numba, llvmlite or CUDA module until a backend needs one (checked
in a fresh interpreter; the timing itself lives in bench/startup_bench.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numba", "llvmlite", "numba_cuda", "cuda", "cupy", "torch", "filelock", "importlib.metadata")


def _loaded_after(code: str) -> list[str]:
    probe = code + f"\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}"
    probe += " or m in " + repr(HEAVY) + ")))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def test_import_vyre_imports_no_backend() -> None:
    assert _loaded_after("import vyre, vyre.ir") == []


def test_building_and_validating_a_program_imports_no_backend() -> None:
    code = ("import vyre\nfrom vyre.ir import F32, Program, gid, output, read, store\n"
            "x, out = read('x', 0, F32), output('out', 1, F32)\n"
            "Program.wrapped([x, out], 64, [store(out, gid(), x[gid()] * 2.0)]).validate().fingerprint()")
    assert _loaded_after(code) == []


def test_toolchain_versions_are_read_without_importlib_metadata() -> None:
    code = ("from vyre.driver.dispatch import dist_version\n"
            "for d, p in [('numba', None), ('numpy', None), ('numba-cuda', 'numba_cuda'), ('nvidia-nvvm', 'nvidia'),"
            " ('no-such-distribution', None)]:\n    dist_version(d, p)")
    assert _loaded_after(code) == []


def test_toolchain_versions_agree_with_importlib_metadata() -> None:
    from importlib.metadata import PackageNotFoundError, version

    from vyre.driver.dispatch import dist_version

    for dist, package in [("numba", None), ("numpy", None), ("blake3", None), ("numba-cuda", "numba_cuda"),
                          ("nvidia-nvvm", "nvidia"), ("no-such-distribution", None)]:
        try:
            want = version(dist)
        except PackageNotFoundError:
            want = "?"
        assert dist_version(dist, package) == want, dist
