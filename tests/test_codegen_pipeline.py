"""The pass pipeline (vyre/codegen/pipeline.py): every pass alone keeps generated programs valid
and their results unchanged (the reference interpreter before and after, exact), the pipeline is
the passes in order, and the emitters print its result."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.strategies import program_and_inputs
from vyre.codegen.cpu import emit_cpu
from vyre.codegen.pipeline import PIPELINE, lower, pass_named, trace
from vyre.errors import CodegenError
from vyre.examples import fused_chain
from vyre.interp import run
from vyre.ir import Call, Program, walk, walk_nodes
from vyre.ir.node import node_exprs

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _run(p: Program, arrays: dict[str, np.ndarray], grid: Any) -> dict[str, np.ndarray]:
    copies = {k: v.copy() for k, v in arrays.items()}
    run(p, copies, grid=grid)
    return copies


@SETTINGS
@given(program_and_inputs(allow_atomics=True, allow_barriers=True, allow_subgroups=True, exact_floats=True))
def test_each_pass_alone_keeps_programs_valid_and_results_unchanged(case: tuple[Program, dict, Any]) -> None:
    program, arrays, grid = case
    stages = trace(program)
    assert [name for name, _ in stages] == ["input", *(p.name for p in PIPELINE)]
    want = _run(program, arrays, grid)
    for (_, before), (name, after) in itertools.pairwise(stages):
        assert pass_named(name).run(before) == after  # a pass alone gives the pipeline's stage
        after.validate()
        got = _run(after, arrays, grid)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k} after {name}")
    assert lower(program) == stages[-1][1]


@SETTINGS
@given(program_and_inputs(max_stmts=4))
def test_inline_leaves_no_calls(case: tuple[Program, dict, Any]) -> None:
    out = pass_named("inline").run(case[0])
    assert out.functions == ()
    assert not any(isinstance(x, Call) for n in walk_nodes(out.entry) for e in node_exprs(n) for x in walk(e))


def test_emitters_print_the_lowered_program() -> None:
    p = fused_chain()
    assert emit_cpu(p) == emit_cpu(lower(p))


def test_unknown_pass_names_say_which_exist() -> None:
    with pytest.raises(CodegenError, match="inline"):
        pass_named("nope")
