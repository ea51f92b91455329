"""Every CUDA kernel the tests generate really compiles: sm_90 PTX through NVVM, no GPU needed."""

from __future__ import annotations

import importlib.util

import pytest

from tests.subproc import run_checks

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba.cuda") is None,
                                reason="numba-cuda is not installed (pip install 'vyre[cuda]')")


def test_all_kernels_compile_to_sm90_ptx() -> None:
    rows = run_checks("ptx", "20", env={"NUMBA_ENABLE_CUDASIM": "0"})
    assert len(rows) >= 30
    problems = [f"{r['case']}: {p}" for r in rows for p in r["problems"]]
    assert problems == []
