"""The value-range prover (vyre/codegen/ranges.py), the ``bounds`` pass and the CPU emitter's use of
it: an access is emitted unguarded only when its index is proven in range.

Soundness is tested on generated programs full of u32 index arithmetic (wrapping sums and
differences, divisions and remainders, masks, shifts, min/max/select, loads used as indices,
variables that are reassigned, loops and guards): ``bounds.audit`` turns every claim the prover
makes into a run-time check under the reference interpreter (the claim-failed flag must stay 0), and
the CPU kernel, run on arrays with canary-filled tails, must give the interpreter's results without
touching a canary. Completeness is checked on the patterns the ops rely on.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from vyre.codegen.bounds import AUDIT_BUFFER, audit, prune_guards
from vyre.codegen.cpu import emit_cpu
from vyre.codegen.pipeline import lower, lower_cpu, pass_named
from vyre import dispatch
from vyre.interp import run
from vyre.ir import (
    U32, BinOp, BinOpKind, BufferDecl, Expr, If, Node, Program, Select, assign, buflen, gid, if_, let, lid,
    load, loop, maximum, minimum, output, read, store, u32, var, walk_nodes, wgid,
)
from vyre.ops import argreduce, linalg, reduce, rowwise
from tests.cpu_source import serial_source
from tests.strategies import program_and_inputs

CANARY = 0xDEADBEEF
LITS = [0, 1, 2, 3, 5, 7, 8, 31, 32, 33, 100, 2**31, 2**32 - 8, 2**32 - 1]
ARITH = [BinOpKind.ADD, BinOpKind.SUB, BinOpKind.MUL, BinOpKind.DIV, BinOpKind.MOD, BinOpKind.BIT_AND,
         BinOpKind.SHR, BinOpKind.SHL, BinOpKind.MIN, BinOpKind.MAX, BinOpKind.BIT_OR]
CMPS = [BinOpKind.LT, BinOpKind.LE, BinOpKind.GT, BinOpKind.GE, BinOpKind.EQ, BinOpKind.NE]


@st.composite
def index_programs(draw: st.DrawFn) -> Program:
    """One invocation (so stores never race) of nested loops, guards, lets and reassignments over
    u32 index arithmetic, loading ``x`` and storing ``out`` at computed indices."""
    counter = iter(range(10_000))
    x, out = read("x", 0, U32), BufferDecl.read_write("out", 1, U32)

    def expr(scope: list[str], depth: int) -> Expr:
        kind = draw(st.integers(0, 9 if depth < 3 else 3))
        if kind == 0:
            return u32(draw(st.sampled_from(LITS)))
        if kind == 1:
            return buflen(draw(st.sampled_from(["x", "out"])))
        if kind == 2:
            return draw(st.sampled_from([gid(), lid(), wgid()]))
        if kind == 3:
            return var(draw(st.sampled_from(scope))) if scope else u32(draw(st.sampled_from(LITS)))
        if kind == 4:
            return load("x", expr(scope, depth + 1))
        if kind == 5:
            return Select(compare(scope, depth + 1), expr(scope, depth + 1), expr(scope, depth + 1))
        if kind == 6 and scope:  # the shapes the ops use: v + k, v * c + k, v - k
            v = var(draw(st.sampled_from(scope)))
            return draw(st.sampled_from([v + expr(scope, depth + 1), v * u32(draw(st.sampled_from([2, 32]))),
                                         v - expr(scope, depth + 1)]))
        op = draw(st.sampled_from(ARITH))
        return BinOp(op, expr(scope, depth + 1), expr(scope, depth + 1))

    def compare(scope: list[str], depth: int) -> Expr:
        c: Expr = BinOp(draw(st.sampled_from(CMPS)), expr(scope, depth), expr(scope, depth))
        if draw(st.booleans()):
            c = c.and_(BinOp(draw(st.sampled_from(CMPS)), expr(scope, depth), expr(scope, depth)))
        return c

    def body(scope: list[str], mutable: list[str], depth: int) -> list[Node]:
        scope = list(scope)
        out_nodes: list[Node] = []
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.integers(0, 6 if depth < 3 else 2))
            if kind == 6 and scope:  # accesses at a recent local plus a little: what loops and guards prove
                v = var(draw(st.sampled_from(scope[-3:])))
                c = u32(draw(st.integers(0, 2)))
                access = store("out", v, load("x", v + c) + load("out", v - c))
                if draw(st.booleans()):  # the guard an op writes around such an access
                    access = if_((v + c).lt(buflen("x")).and_(v.lt(buflen("out"))), [access])
                out_nodes.append(access)
            elif kind == 0:
                name = f"v{next(counter)}"
                out_nodes.append(let(name, expr(scope, 0)))
                scope.append(name)
            elif kind == 1:
                idx = expr(scope, 0)
                out_nodes.append(store("out", idx, load("x", expr(scope, 1)) + idx))
            elif kind == 2 and mutable:
                out_nodes.append(assign(draw(st.sampled_from(mutable)), expr(scope, 0)))
            elif kind == 3:
                name = f"k{next(counter)}"
                start = expr(scope, 1)
                end = minimum(expr(scope, 1), start + u32(draw(st.integers(0, 6))))
                out_nodes.append(loop(name, start, end, body([*scope, name], mutable, depth + 1)))
            elif kind == 4:
                name = f"k{next(counter)}"  # the ops' form: a loop up to a length or a local
                end = draw(st.sampled_from([buflen("x"), buflen("out"), *(var(s) for s in scope[-2:])]))
                bound = f"e{next(counter)}"  # bound by a let, as the ops bind their loop ends
                out_nodes.append(let(bound, minimum(end, u32(9))))
                out_nodes.append(loop(name, u32(0), var(bound), body([*scope, bound, name], mutable, depth + 1)))
            else:
                cond = compare(scope, 0)
                if draw(st.booleans()):  # a guard of the form the ops write
                    cond = expr(scope, 0).lt(buflen(draw(st.sampled_from(["x", "out"]))))
                other = body(scope, mutable, depth + 1) if draw(st.booleans()) else []
                out_nodes.append(if_(cond, body(scope, mutable, depth + 1), other))
        return out_nodes

    entry: list[Node] = [let("acc", u32(draw(st.sampled_from(LITS))))]
    entry += body(["acc"], ["acc"], 0)
    return Program.wrapped([x, out], 1, entry).validate()


@st.composite
def cases(draw: st.DrawFn) -> tuple[Program, np.ndarray, np.ndarray]:
    p = draw(index_programs())
    nx, no = draw(st.integers(0, 12)), draw(st.integers(0, 12))
    small = st.integers(0, 14)
    big = st.sampled_from(LITS)
    xs = np.array(draw(st.lists(st.one_of(small, big), min_size=nx, max_size=nx)), np.uint32)
    return p, xs, np.arange(no, dtype=np.uint32) * 3 + 1


def _interp(p: Program, xs: np.ndarray, outs: np.ndarray, **extra: np.ndarray) -> dict[str, np.ndarray]:
    arrays = {"x": xs.copy(), "out": outs.copy(), **extra}
    run(p, arrays, grid=(1, 1, 1))
    return arrays


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(cases())
def test_every_claim_of_the_prover_holds_at_run_time(case: tuple[Program, np.ndarray, np.ndarray]) -> None:
    """Every access the prover calls in range is in range, and every ``If`` it calls true is true,
    on the reference interpreter; the pass alone keeps the results."""
    p, xs, outs = case
    checked = audit(p)
    claims = sum(isinstance(n, If) and any(getattr(s, "buffer", "") == AUDIT_BUFFER for s in n.then)
                 for n in walk_nodes(checked.entry))
    event(f"claims: {min(claims, 3)}")
    flag = np.zeros(1, np.uint32)
    got = _interp(checked, xs, outs, **{AUDIT_BUFFER: flag})
    assert flag[0] == 0, "the range prover claimed an access in range that is not"
    pruned = pass_named("bounds").run(p)
    pruned.validate()
    np.testing.assert_array_equal(_interp(pruned, xs, outs)["out"], got["out"])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(program_and_inputs(allow_atomics=True, allow_barriers=True, allow_subgroups=True, exact_floats=True))
def test_the_pass_keeps_generated_programs_valid_and_their_results(case: tuple[Program, dict, object]) -> None:
    """The ``bounds`` pass alone on the general program generator (barriers, subgroup operations,
    atomics, returns): still valid, same results on the interpreter, and what ``lower_cpu`` gives."""
    program, arrays, grid = case
    before = lower(program)
    after = pass_named("bounds").run(before)
    after.validate()
    assert lower_cpu(program) == after
    want = {k: v.copy() for k, v in arrays.items()}
    run(before, want, grid=grid)
    got = {k: v.copy() for k, v in arrays.items()}
    run(after, got, grid=grid)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


#: each example is a new kernel for numba (1-8 s on a 2-core machine); the prover's claims are
#: checked on 200 programs above, on the interpreter
KERNEL_EXAMPLES = 12 if os.environ.get("VYRE_HYPOTHESIS_PROFILE", "ci") == "ci" else 300


@settings(max_examples=KERNEL_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases())
def test_cpu_kernels_match_the_interpreter_without_touching_a_canary(case: tuple[Program, np.ndarray, np.ndarray]
                                                                     ) -> None:
    p, xs, outs = case
    want = _interp(p, xs, outs)["out"]
    wx = np.full(len(xs) + 16, CANARY, np.uint32)
    wx[:len(xs)] = xs
    wo = np.full(len(outs) + 16, CANARY, np.uint32)
    wo[:len(outs)] = outs
    got = dispatch(p, {"x": wx[:len(xs)], "out": wo[:len(outs)]}, backend="cpu", grid=(1, 1, 1))
    np.testing.assert_array_equal(got["out"], want)
    assert (wo[len(outs):] == CANARY).all() and (wx[len(xs):] == CANARY).all()


def _kernel(src: str) -> str:
    return serial_source(src)


def test_the_ops_lane_loops_are_proven_in_range() -> None:
    """The CPU forms of the reductions, argmax, matvec and the grouped row sums have no guard left
    in their kernels."""
    progs = [reduce.full_program(k, t, reduce.accumulator_type(k.combine, t), gpu=False)
             for k in reduce.Reduce for t in (reduce.DataType.F32, reduce.DataType.F64)]
    progs += [argreduce.argmax_program(t, gpu=False, indexed=ix)
              for t in (reduce.DataType.F32,) for ix in (False, True)]
    progs.append(linalg.matvec_program(reduce.DataType.F32, gpu=False))
    progs += [rowwise.grouped_row_program(k, t) for k in rowwise.GROUPED_KINDS
              for t in (reduce.DataType.F32, reduce.DataType.F64)]
    progs.append(argreduce.grouped_row_argmax_program(reduce.DataType.F32))
    for p in progs:
        body = _kernel(emit_cpu(p))
        assert "_vy_ld(" not in body
        loads = [ln for ln in body.splitlines() if "shape[0]:" in ln and "_i" in ln]
        assert len(loads) <= 2, loads  # at most the final stores of matvec's last rows


def test_the_row_ops_lane_loops_are_proven_in_range() -> None:
    """The CPU form of the row-wise ops (lanes=True, what vyre.ops runs): the branch that folds a
    row into a lane array has no guard (every row's span is clipped with bounded_span)."""
    t = reduce.DataType.F32
    kw = {"gpu": False, "wg": 1, "lanes": True}
    progs = [rowwise.row_program(k, t, **kw) for k in ("sum", "max")]
    progs += [rowwise.logsumexp_program(t, **kw), rowwise.softmax_program(t, **kw),
              rowwise.layer_norm_program(t, 1e-5, **kw), rowwise.softmax_grad_program(t, **kw),
              rowwise.layer_norm_grad_program(t, **kw)]
    for p in progs:
        lines = _kernel(emit_cpu(p)).splitlines()
        starts = [i for i, ln in enumerate(lines) if "_cols >= uint32(" in ln]
        assert starts, p.body
        for s in starts:
            indent = len(lines[s]) - len(lines[s].lstrip())
            branch = []
            for ln in lines[s + 1:]:
                if len(ln) - len(ln.lstrip()) <= indent:
                    break
                branch.append(ln)
            assert any("lanes_" in ln for ln in branch)
            assert not [ln for ln in branch if "_vy_ld(" in ln or (ln.lstrip().startswith("if") and "shape[0]" in ln)]


def _prog(body: list[Node]) -> Program:
    return Program.wrapped([read("x", 0, U32), output("out", 1, U32)], 1, body).validate()


@pytest.mark.parametrize("body", [
    [loop("i", u32(0), buflen("x"), [store("out", u32(0), load("x", var("i")))])],
    [let("n", buflen("x")), loop("j", u32(0), var("n") / u32(32), [
        let("p", var("j") * u32(32)),
        loop("k", u32(0), u32(32), [store("out", u32(0), load("x", var("p") + var("k")))])])],
    [let("i", gid() & u32(7)), if_(u32(8).le(buflen("x")), [store("out", u32(0), load("x", var("i")))])],
    [let("i", gid() % u32(16)),
     if_(var("i") + u32(16) < buflen("x"), [store("out", u32(0), load("x", var("i") + u32(16)))])],
    [let("n", minimum(buflen("x"), buflen("out"))),
     loop("i", u32(0), var("n"), [store("out", var("i"), load("x", var("i")))])],
])
def test_proven_patterns_emit_no_guard(body: list[Node]) -> None:
    assert "_vy_ld(" not in _kernel(emit_cpu(_prog(body)))


@pytest.mark.parametrize("body", [
    # hi = min(lo + len, n) wraps when lo + len does: p + k can pass n, so the guard must stay
    [let("n", buflen("x")), let("lo", gid()), let("hi", minimum(var("lo") + buflen("out"), var("n"))),
     loop("j", u32(0), (var("hi") - var("lo")) / u32(4), [
         loop("k", u32(0), u32(4), [store("out", u32(0), load("x", var("lo") + var("j") * u32(4) + var("k")))])])],
    [loop("i", u32(0), buflen("x") + u32(1), [store("out", u32(0), load("x", var("i")))])],
    [let("i", u32(0)), loop("k", u32(0), buflen("x"), [assign("i", var("k") + u32(1)),
                                                       store("out", u32(0), load("x", var("i")))])],
    [let("i", gid() % buflen("x")), store("out", u32(0), load("x", var("i")))],  # len(x) == 0: i == 0
    [if_(maximum(gid(), u32(1)).lt(buflen("x")), [store("out", u32(0), load("x", gid() + u32(1)))])],
])
def test_unprovable_accesses_keep_their_guard(body: list[Node]) -> None:
    assert "_vy_ld(" in _kernel(emit_cpu(_prog(body)))
    assert prune_guards(_prog(body)) == _prog(body)


def test_a_wrapping_block_bound_really_goes_out_of_range() -> None:
    """The first unprovable case above reads past the end when ``lo + len(out)`` wraps: the guard
    it keeps is what makes the CPU agree with the interpreter there."""
    lo = var("lo")
    body = [let("n", buflen("x")), let("lo", u32(2**32 - 2)), let("hi", minimum(lo + buflen("out"), var("n"))),
            loop("j", u32(0), minimum((var("hi") - lo) / u32(4), u32(3)), [
                loop("k", u32(0), u32(4), [store("out", var("k"), load("x", lo + var("j") * u32(4) + var("k")))])])]
    p = _prog(body)
    xs, outs = np.arange(1, 9, dtype=np.uint32), np.full(4, 5, np.uint32)
    arrays = {"x": xs.copy(), "out": outs.copy()}
    stats = run(p, arrays, grid=(1, 1, 1))
    assert stats.oob_loads > 0
    wx = np.full(24, CANARY, np.uint32)
    wx[:8] = xs
    got = dispatch(p, {"x": wx[:8], "out": outs.copy()}, backend="cpu", grid=(1, 1, 1))
    np.testing.assert_array_equal(got["out"], arrays["out"])
