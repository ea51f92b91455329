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


_DISPATCH = ("import numpy as np, vyre\nfrom vyre.examples import fused_chain\n"
             "x = np.ones({n}, np.float32)\n"
             "vyre.dispatch(fused_chain(), {{'x': x, 'y': x, 'out': np.empty_like(x)}}, backend='cpu')\n"
             "import sys\nprint('TUNER', 'vyre.tuning' in sys.modules)\n")


def _tuner_loaded(tmp: Path, n: int, **env: str) -> bool:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "VYRE_CACHE_DIR": str(tmp), **env}
    out = subprocess.run([sys.executable, "-c", _DISPATCH.format(n=n)], cwd=ROOT, env=full, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return out.strip().splitlines()[-1] == "TUNER True"


def test_a_first_dispatch_the_tuner_could_not_change_does_not_import_it(tmp_path: Path) -> None:
    # the tuner off, or too few invocations to measure, and no decision on disk: the default
    # launch, without importing vyre.tuning (about 40 ms of a new process's first dispatch)
    assert not _tuner_loaded(tmp_path, 1000, VYRE_AUTOTUNER="off")
    assert not _tuner_loaded(tmp_path, 1000, VYRE_AUTOTUNER="on")
    assert not _tuner_loaded(tmp_path, 1 << 16, VYRE_AUTOTUNER="off")
    # enough invocations with the tuner on: it measures
    assert _tuner_loaded(tmp_path, 1 << 16, VYRE_AUTOTUNER="on")
    # a decision on disk (that run saved one) may apply in every mode: the tuner is asked
    assert list((tmp_path / "tuner").glob("*.toml"))
    assert _tuner_loaded(tmp_path, 1000, VYRE_AUTOTUNER="off")
