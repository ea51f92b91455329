"""The CUDA kernels vyre generates, run on numba's CUDA simulator, agree with the interpreter.

The simulator runs in a child process (NUMBA_ENABLE_CUDASIM is read when numba.cuda is imported)."""

from __future__ import annotations

import pytest

from tests.subproc import run_checks


@pytest.fixture(scope="module")
def sim_rows() -> list[dict]:
    return run_checks("sim", env={"NUMBA_ENABLE_CUDASIM": "1"})


def test_simulator_runs_every_table_and_example(sim_rows: list[dict]) -> None:
    names = {r["case"] for r in sim_rows}
    assert {"binop_u32", "unop_f32", "cast_f64", "example_block_sum", "example_subgroup_sum"} <= names


def test_simulator_matches_interpreter(sim_rows: list[dict]) -> None:
    problems = [p for r in sim_rows for p in r["problems"]]
    assert problems == []
