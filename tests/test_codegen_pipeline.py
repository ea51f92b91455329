"""The pass pipeline (vyre/codegen/pipeline.py): every pass alone keeps generated programs valid
and their results unchanged (the reference interpreter before and after, exact), the pipeline is
the passes in order, and the emitters print its result."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.example_inputs import example_inputs
from tests.interleave_cases import CASES
from tests.strategies import program_and_inputs
from vyre.codegen.cpu import emit_cpu
from vyre.codegen.cuda import emit_cuda
from vyre.codegen.flat import is_tunable
from vyre.codegen.interleave import (
    INTERLEAVE, AllIf, Finish, Guard, Interleaved, IStep, Scope, Solo, as_body, print_interleaved,
)
from vyre.codegen.lockstep import (
    Exchange, Lockstep, Segment, Step, UniformLoop, UniformScope, as_program, is_sync, needs_lockstep,
    print_lockstep,
)
from vyre.codegen.pipeline import (
    LOWERINGS, PIPELINE, interleaved_form, lockstep_form, lower, lowering_named, pass_named, trace,
)
from vyre.codegen.simplify import written
from vyre.errors import CodegenError
from vyre.examples import EXAMPLES, fused_chain
from vyre.interp import run
from vyre.ir import Call, Let, Program, Var, walk, walk_nodes
from vyre.ir.node import node_exprs
from vyre.ir.schema import expr_children

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


# ---- target lowerings: each alone --------------------------------------------------------------------
def _wrote_checked(steps: tuple[IStep, ...], wrote: bool) -> None:
    """The hand-over rules: the group goes solo only where nothing before wrote memory (it reruns
    from the start), each invocation finishes alone only after a write; a guard's fallback holds
    the guarded If and everything after it."""
    for s in steps:
        match s:
            case Solo():
                assert not wrote
            case Finish():
                assert wrote
            case AllIf(_, then, otherwise, solo):
                assert solo == (not wrote)
                _wrote_checked(then, wrote)
                _wrote_checked(otherwise, wrote)
            case Scope(_, body):
                _wrote_checked(body, wrote)
            case Guard(node, _, branch, rest, fallback):
                assert fallback.rest == (node, *as_body(rest))
                _wrote_checked(branch, wrote)
                _wrote_checked(rest, wrote or bool(written((node,))))
                _wrote_checked((fallback,), wrote)
        if isinstance(s, (Solo, Finish, Guard)):
            assert s is steps[-1]  # a hand-over ends its list
        wrote = wrote or bool(written(as_body((s,))))


def _check_interleave(p: Program) -> None:
    plan = lowering_named("interleave").run(p)
    assert isinstance(plan, Interleaved) and plan.k == INTERLEAVE
    assert as_body(plan.steps) == p.entry
    assert ("_vy_interleaved_py" in emit_cuda(p)) == lowering_named("interleave").applies(p)
    _wrote_checked(plan.steps, False)
    print_interleaved(plan)  # every form prints


@SETTINGS
@given(program_and_inputs(allow_atomics=True))
def test_interleave_alone_loses_no_statement_and_hands_over_safely(case: tuple[Program, dict, Any]) -> None:
    p = lower(case[0])
    if is_tunable(p):
        _check_interleave(p)


@pytest.mark.parametrize("name", sorted(CASES))
def test_interleave_alone_on_every_hand_over_shape(name: str) -> None:
    _check_interleave(lower(CASES[name]()))


def _segments(steps: tuple[Step, ...]) -> list[Segment]:
    out: list[Segment] = []
    for s in steps:
        if isinstance(s, Segment):
            out.append(s)
        elif isinstance(s, (UniformLoop, UniformScope)):
            out += _segments(s.body)
    return out


def _exchanges_read_lane_arrays(steps: tuple[Step, ...], bound: set[str]) -> None:
    for s in steps:
        match s:
            case Segment(body):
                bound |= {n.name for n in body if isinstance(n, Let)}
            case Exchange(name, op):
                assert all(isinstance(x, Var) and x.name in bound for x in expr_children(op))
                bound.add(name)
            case UniformLoop(_, _, _, body) | UniformScope(body):
                _exchanges_read_lane_arrays(body, set(bound))


def _check_lockstep(program: Program, arrays: dict[str, np.ndarray], grid: Any) -> None:
    ls = lowering_named("lockstep").run(lower(program))
    assert isinstance(ls, Lockstep)
    assert not any(is_sync(n) for seg in _segments(ls.steps) for n in seg.body)
    _exchanges_read_lane_arrays(ls.steps, set())
    assert emit_cpu(program).count("def _vy_seg") == len(_segments(ls.steps))  # one function per segment
    back = as_program(ls)  # a barrier after every segment, an exchange as its Let
    back.validate()
    want, got = _run(program, arrays, grid), _run(back, arrays, grid)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    print_lockstep(ls)


@SETTINGS
@given(program_and_inputs(allow_atomics=True, allow_barriers=True, allow_subgroups=True, exact_floats=True))
def test_lockstep_alone_keeps_results_and_leaves_no_sync_in_a_segment(case: tuple[Program, dict, Any]) -> None:
    if needs_lockstep(lower(case[0])):
        _check_lockstep(*case)


@pytest.mark.parametrize("name", ["block_sum", "subgroup_sum"])  # a uniform loop; an exchange
def test_lockstep_alone_on_the_examples(name: str) -> None:
    program = EXAMPLES[name]()
    arrays, grid = example_inputs(name, np.random.default_rng(0), small=True)
    for b in program.buffers:  # outputs the inputs leave out start at zero (they are compared too)
        if not b.is_workgroup and b.name not in arrays:
            arrays[b.name] = np.zeros(b.count, b.element.np_dtype)
    _check_lockstep(program, arrays, grid)


def test_lowerings_apply_to_their_forms_only() -> None:
    assert lowering_named("lockstep").applies(lower(EXAMPLES["block_sum"]()))
    assert not lowering_named("lockstep").applies(lower(EXAMPLES["saxpy"]()))
    assert lowering_named("interleave").applies(lower(EXAMPLES["saxpy"]()))
    assert not lowering_named("interleave").applies(lower(EXAMPLES["subgroup_sum"]()))
    for name, make in EXAMPLES.items():  # what the emitters ask for is what the lowerings say
        p = lower(make())
        assert (lockstep_form(p) is not None) == lowering_named("lockstep").applies(p), name
        assert (interleaved_form(p) is not None) == lowering_named("interleave").applies(p), name
    with pytest.raises(CodegenError, match="lockstep"):
        lowering_named("nope")


# ---- golden snapshots of the lowered forms --------------------------------------------------------------
LOWERED = Path(__file__).resolve().parent / "golden" / "lowered"
LOWERED_SNAPSHOTS: dict[str, Callable[[], Program]] = {
    "fused_chain": EXAMPLES["fused_chain"], "matvec": EXAMPLES["matvec"], "histogram": EXAMPLES["histogram"],
    "block_sum": EXAMPLES["block_sum"], "subgroup_sum": EXAMPLES["subgroup_sum"],
    **{f"interleave_{k}": CASES[k] for k in ("return_in_else", "divergent_branches", "shadowing", "return_chain")},
}


def lowered_text(program: Program) -> str:
    """Every stage of the pipeline that changes the program, then each lowering that applies."""
    out: list[str] = []
    prev = None
    for name, p in trace(program):
        out.append(f"## {name}" + (" (unchanged)" if p == prev else ""))
        if p != prev:
            out.append(str(p))
        prev = p
    assert prev is not None
    for x in LOWERINGS:
        if x.applies(prev):
            out += [f"## {x.name} ({x.target})", x.text(x.run(prev))]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("name", sorted(LOWERED_SNAPSHOTS))
def test_lowered_forms_match_snapshots(name: str) -> None:
    path = LOWERED / f"{name}.txt"
    text = lowered_text(LOWERED_SNAPSHOTS[name]())
    if os.environ.get("VYRE_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing. Fix: run with VYRE_UPDATE_GOLDEN=1 and review the new file"
    assert path.read_text() == text, f"lowered form differs from {path.name}; rerun with VYRE_UPDATE_GOLDEN=1"
