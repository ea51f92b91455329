"""CPU backend parity with the reference interpreter: op tables, examples, generated programs."""

from __future__ import annotations

import pytest

from tests import optable
from vyre.driver.dispatch import compile as vcompile

TABLES = dict(optable.all_tables())


def run(prog, arrays, backend, **kw):
    k = vcompile(prog, backend, **kw)
    return k({name: a.copy() for name, a in arrays.items()})


@pytest.mark.parametrize("name", sorted(TABLES))
def test_op_table_cpu_matches_interpreter(name: str) -> None:
    prog, arrays, layout = TABLES[name]
    n = len(next(iter(arrays.values())))
    ref = run(prog, arrays, "interp")
    got = run(prog, arrays, "cpu", parallel=False)
    assert optable.compare(name, got, ref, layout, n) == []


# ---- generated programs --------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402

from tests.example_inputs import example_cases  # noqa: E402
from tests.parity import differences  # noqa: E402
from tests.strategies import program_and_inputs  # noqa: E402


def _parity(prog, arrays, grid, exact: bool, **kw) -> list[str]:
    ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
    got = vcompile(prog, "cpu", **kw)({k: v.copy() for k, v in arrays.items()}, grid=grid)
    return differences(got, ref, exact)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program_and_inputs(allow_atomics=True, allow_barriers=True, allow_subgroups=True, exact_floats=True))
def test_generated_programs_cpu_bit_exact(case) -> None:
    prog, arrays, grid = case
    assert _parity(prog, arrays, grid, exact=True, parallel=False) == []


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program_and_inputs(dtypes=(optable.DataType.F32, optable.DataType.F64, optable.DataType.U32)))
def test_generated_float_programs_cpu_within_tolerance(case) -> None:
    prog, arrays, grid = case
    assert _parity(prog, arrays, grid, exact=False, parallel=False) == []


@pytest.mark.parametrize("case", list(example_cases(small=False)), ids=lambda c: c[0])
def test_examples_cpu_parallel_matches_interpreter(case) -> None:
    name, prog, arrays, grid = case
    assert _parity(prog, arrays, grid, exact=name != "fused_chain") == []
