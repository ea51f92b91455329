"""The backward's statement order (vyre/autodiff/schedule.py): loads, with the bindings their
indices need, first in each run of pure bindings; every binding after the ones it reads; nothing
moved past a store, branch, loop, barrier, atomic or subgroup operation."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings

from tests.autodiff_classes import Case, carried_loops
from tests.autodiff_strategies import programs
from vyre.autodiff import grad
from vyre.autodiff.custom import custom_ids
from vyre.autodiff.nf import NIf, NLet, NLoop, NStmt, Names, expr_vars
from vyre.autodiff.prepare import inline_and_rename, remove_returns, source_names
from vyre.autodiff.schedule import loads_first
from vyre.autodiff.ssa import to_normal_form
from vyre.ir import F32, U32, Loop, Program, assign, buflen, f32, gid, if_, let, loop, output, read, sin, store, var
from vyre.ir.expr import Atomic, Load, SubgroupBallot, SubgroupReduce, SubgroupShuffle, UnOp
from vyre.ir.node import Let, walk_nodes

FIXED = (Atomic, SubgroupBallot, SubgroupReduce, SubgroupShuffle)


def normal_form(program: Program) -> tuple[NStmt, ...]:
    names = Names(source_names(program))
    body = remove_returns(inline_and_rename(program, names, custom_ids(program)), names)
    return to_normal_form(program, body, names)[0]


def runs(stmts: tuple[NStmt, ...]) -> tuple[list[list[NLet]], list[NStmt]]:
    """The runs of movable bindings and, in order, the statements between them."""
    out: list[list[NLet]] = [[]]
    fixed: list[NStmt] = []
    for s in stmts:
        if isinstance(s, NLet) and not isinstance(s.value, FIXED):
            out[-1].append(s)
        else:
            fixed.append(s)
            out.append([])
    return out, fixed


def check_order(before: tuple[NStmt, ...], after: tuple[NStmt, ...]) -> None:
    runs0, fixed0 = runs(before)
    runs1, fixed1 = runs(after)
    assert len(fixed0) == len(fixed1)
    for r0, r1 in zip(runs0, runs1, strict=True):
        assert Counter(map(repr, r0)) == Counter(map(repr, r1))  # the same bindings, in place
        at = {s.name: k for k, s in enumerate(r1)}
        for k, s in enumerate(r1):  # every binding after what it reads
            assert all(at[v] < k for v in expr_vars(s.value) if v in at), s
        cone: set[int] = set()
        stack = [k for k, s in enumerate(r1) if isinstance(s.value, Load)]
        while stack:
            k = stack.pop()
            if k not in cone:
                cone.add(k)
                stack += [at[v] for v in expr_vars(r1[k].value) if v in at]
        assert cone == set(range(len(cone)))  # loads and their index bindings first
    for s0, s1 in zip(fixed0, fixed1, strict=True):
        match s0, s1:
            case NIf(c0, t0, o0, p0), NIf(c1, t1, o1, p1):
                assert (c0, p0) == (c1, p1)
                check_order(t0, t1)
                check_order(o0, o1)
            case NLoop(v0, a0, e0, b0, k0), NLoop(v1, a1, e1, b1, k1):
                assert (v0, a0, e0, k0) == (v1, a1, e1, k1)
                check_order(b0, b1)
            case _:
                assert s0 == s1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_loads_first_keeps_every_binding_after_what_it_reads(case: Case) -> None:
    stmts = normal_form(case.program)
    check_order(stmts, loads_first(stmts))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(carried_loops(max_trips=6))
def test_loads_first_in_carried_loops(case: Case) -> None:
    stmts = normal_form(case.program)
    check_order(stmts, loads_first(stmts))


def test_the_replayed_loop_loads_before_its_arithmetic() -> None:
    """``acc = sin(acc) * x[(i + j) % n]``: the backward's replay of the loop loads x[...] first,
    so the load's latency overlaps sin instead of following it."""
    x, nb, out = read("x", 0, F32), read("n", 1, U32), output("out", 2, F32)
    i, j = gid(), var("j")
    prog = Program.wrapped([x, nb, out], 64, [if_(i.lt(buflen(out)), [
        let("acc", x[i]),
        loop("j", 0, nb[0], [assign("acc", sin(var("acc")) * x[(i + j) % buflen(x)] + f32(0.25))]),
        store(out, i, var("acc"))])])
    back = grad(prog, ["out"], ["x"])
    replay = next(n for n in walk_nodes(back.entry) if isinstance(n, Loop))
    lets = [n for n in replay.body if isinstance(n, Let)]
    first_load = next(k for k, n in enumerate(lets) if isinstance(n.value, Load) and n.value.buffer == "x")
    first_sin = next(k for k, n in enumerate(lets) if isinstance(n.value, UnOp))
    assert first_load < first_sin
