"""The first-compile self-check of the CPU backend (vyre/driver/cpu_selfcheck.py): it passes on this
machine, and when it is forced to fail vyre warns and compiles CPU kernels in safe mode (loop
vectoriser off), which computes the report's reproducer right."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from numba.core import config

from vyre.codegen.cpu_runtime import loop_vectorizer_off
from vyre.driver import cpu_selfcheck
from vyre.driver.dispatch import compile as vcompile
from vyre.ir import U32, Program, gid, output, read, store, u32


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A cache root of its own and no remembered result; the real result is restored after."""
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    cpu_selfcheck.reset()
    yield tmp_path
    cpu_selfcheck.reset()


def _repro() -> Program:
    x, out = read("x", 0, U32), output("out", 1, U32)
    return Program.wrapped([x, out], 64, [store(out, gid(), x[gid() % u32(4)])])


def test_vyre_kernels_pass_the_check_here(fresh: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", cpu_selfcheck.CpuMiscompileWarning)
        result = cpu_selfcheck.cpu_selfcheck()
    assert result.vectorize, result.detail
    assert "loop_vectorizer_off" not in vcompile(_repro(), "cpu", disk_cache=False).source
    assert list((fresh / "selfcheck").glob("cpu-*.json"))  # remembered for the next process


def test_a_failed_check_warns_and_compiles_in_safe_mode(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_selfcheck, "_vyre_kernels", lambda: [("x[gid % 4]", False), ("x[gid & 7]", True)])
    with pytest.warns(cpu_selfcheck.CpuMiscompileWarning, match=r"x\[gid % 4\].*loop vectoriser off.*Fix:"):
        k = vcompile(_repro(), "cpu", disk_cache=False)
    assert k.source is not None and "with _vy_novec():" in k.source
    assert "@numba.njit(_SIG, parallel=True" in k.source  # compiled inside the block, not lazily
    assert config.LOOP_VECTORIZE  # restored after the import
    x = np.array([10, 11, 12, 13], np.uint32)
    for fn in (k._fn, k._fn_parallel):
        out = np.zeros(256, np.uint32)
        fn(x, out, 256, 64)
        assert np.array_equal(out, np.tile(x, 64))
    # the next process reads the result instead of compiling the checks again, and warns too
    cpu_selfcheck.reset()
    monkeypatch.setattr(cpu_selfcheck, "run_checks", lambda: pytest.fail("checked again"))
    with pytest.warns(cpu_selfcheck.CpuMiscompileWarning):
        assert not cpu_selfcheck.vectorize_ok()


def test_an_unreadable_record_is_checked_again(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = cpu_selfcheck._record_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"vectorize": [[[')
    monkeypatch.setattr(cpu_selfcheck, "run_checks", lambda: cpu_selfcheck.SelfCheck(True, True, "fine"))
    assert cpu_selfcheck.cpu_selfcheck().detail == "fine"
    assert json.loads(path.read_text())["detail"] == "fine"


def test_safe_mode_compiles_the_plain_reproducer_right() -> None:
    """What safe mode relies on: with the vectoriser off, even the report's plain numba loop is right."""
    ns: dict[str, object] = {}
    with loop_vectorizer_off():
        exec(cpu_selfcheck.RAW_REPRODUCER, ns)
        x, out = np.array([10, 11, 12, 13], np.uint32), np.zeros(128, np.uint32)
        ns["repro"](x, out, 128)  # type: ignore[operator]
    assert np.array_equal(out, np.tile(x, 32))
