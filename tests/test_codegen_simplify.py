"""The pre-emission rewrites (vyre.codegen.simplify) never change results: the interpreter runs each
program as written and as simplified, on generated programs (atomics, barriers, subgroup operations,
returns) and on generated reverse-mode programs (where If fusion and CSE fire), and the outputs must
be identical. Hand-written cases pin what must not be fused or shared."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.autodiff_strategies import N, WG, Case
from tests.autodiff_strategies import programs as diff_programs
from tests.strategies import program_and_inputs
from vyre.autodiff import grad
from vyre.codegen.inline import inline_calls
from vyre.codegen.simplify import cse, fuse_ifs, simplify
from vyre.examples import fused_chain
from vyre.interp import run
from vyre.ir import (
    I32, Assign, Barrier, Block, Expr, If, Let, Loop, Node, Program, Region, Store, UnOp, UnOpKind, Var,
    assign, atomic_add, barrier, block, gid, i32, if_, let, lid, load, loop, output, read, read_write,
    store, u32,
    var, walk_nodes, workgroup,
)
from vyre.ir.transform import map_expr

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def _run(p: Program, arrays: dict[str, np.ndarray], grid: Any) -> dict[str, np.ndarray]:
    copies = {k: v.copy() for k, v in arrays.items()}
    run(p, copies, grid=grid)
    return copies


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # NaNs compare equal here


@SETTINGS
@given(program_and_inputs(allow_atomics=True, allow_barriers=True, allow_subgroups=True, exact_floats=True))
def test_simplified_generated_programs_compute_the_same(case: tuple[Program, dict[str, np.ndarray], Any]) -> None:
    prog, arrays, grid = case
    p = inline_calls(prog)
    s = simplify(p)
    s.validate()
    _same(_run(p, arrays, grid), _run(s, arrays, grid))


@SETTINGS
@given(program_and_inputs(exact_floats=True))
def test_simplified_generated_flat_programs_compute_the_same(case: tuple[Program, dict[str, np.ndarray], Any]) -> None:
    prog, arrays, grid = case
    p = inline_calls(prog)
    _same(_run(p, arrays, grid), _run(simplify(p).validate(), arrays, grid))


def _renamed(body: tuple[Node, ...], suffix: str = "_d") -> tuple[Node, ...]:
    """``body`` with every name it binds renamed (generated names are unique program-wide)."""
    bound = {n.name for n in walk_nodes(body) if isinstance(n, Let)}
    bound |= {n.var for n in walk_nodes(body) if isinstance(n, Loop)}

    def nm(name: str) -> str:
        return name + suffix if name in bound else name

    def ex(e: Expr) -> Expr:
        return map_expr(e, lambda x: Var(nm(x.name)) if isinstance(x, Var) else x)

    def node(n: Node) -> Node:
        match n:
            case Let(name, v):
                return Let(nm(name), ex(v))
            case Assign(name, v):
                return Assign(nm(name), ex(v))
            case Store(b, i, v):
                return Store(b, ex(i), ex(v))
            case If(c, t, o):
                return If(ex(c), tuple(map(node, t)), tuple(map(node, o)))
            case Loop(var, lo, hi, b):
                return Loop(nm(var), ex(lo), ex(hi), tuple(map(node, b)))
            case Block(b):
                return Block(tuple(map(node, b)))
            case Region(g, b):
                return Region(g, tuple(map(node, b)))
        return n

    return tuple(map(node, body))


def _doubled(prog: Program) -> Program:
    """Each top-level ``if c { A }`` followed by ``if c { A' }``, then the whole body again (renamed
    copies): fusion fires on the Ifs, and CSE on the second body, which recomputes the first's
    values after its stores and atomics."""
    entry: list[Node] = []
    for n in prog.entry:
        entry.append(n)
        if isinstance(n, If) and not n.otherwise and not any(isinstance(m, Barrier) for m in walk_nodes(n.then)):
            entry.append(If(n.cond, _renamed(n.then)))
    return replace(prog, entry=(*entry, *_renamed(tuple(entry), "_e"))).validate()


@SETTINGS
@given(program_and_inputs(allow_atomics=True, exact_floats=True))
def test_simplified_doubled_programs_compute_the_same(case: tuple[Program, dict[str, np.ndarray], Any]) -> None:
    prog, arrays, grid = case
    p = _doubled(inline_calls(prog))
    _same(_run(p, arrays, grid), _run(simplify(p).validate(), arrays, grid))


def test_doubled_programs_do_get_fused_and_shared() -> None:
    fused = shared = 0

    @settings(max_examples=60, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(program_and_inputs(allow_atomics=True, exact_floats=True))
    def collect(case: tuple[Program, dict[str, np.ndarray], Any]) -> None:
        nonlocal fused, shared
        p = _doubled(inline_calls(case[0]))
        s = simplify(p)
        fused += _count(s.entry, If) < _count(p.entry, If)
        shared += any(isinstance(n, Let) and isinstance(n.value, Var) for n in walk_nodes(s.entry))

    collect()
    assert fused >= 5 and shared >= 5, (fused, shared)


def _grad_arrays(case: Case, back: Program) -> dict[str, np.ndarray]:
    arrays = {k: v.copy() for k, v in case.inputs.items()}
    for b in back.buffers:
        if b.name not in arrays:
            base = b.name.split("_", 1)[1]
            arrays[b.name] = np.zeros(case.inputs[base].size, b.element.np_dtype)
    return arrays


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(diff_programs())
def test_simplified_reverse_mode_programs_compute_the_same(case: Case) -> None:
    for kw in ({"with_value": True, "unit_cotangent": True}, {"accumulate": False}, {}):
        back = grad(case.program, ["out"], case.wrt, **kw)  # type: ignore[arg-type]
        arrays = _grad_arrays(case, back)
        s = simplify(back).validate()
        _same(_run(back, arrays, (N // WG,)), _run(s, arrays, (N // WG,)))


def _count(body: tuple[Node, ...], kind: type) -> int:
    return sum(1 for n in walk_nodes(body) if isinstance(n, kind))


def _transcendentals(body: tuple[Node, ...]) -> int:
    from vyre.ir import node_exprs, walk

    return sum(1 for n in walk_nodes(body) for e in node_exprs(n) for x in walk(e)
               if isinstance(x, UnOp) and x.op in (UnOpKind.EXP, UnOpKind.SIN, UnOpKind.COS))


def test_the_fused_value_and_gradient_program_runs_the_forward_once() -> None:
    back = grad(fused_chain(), ["out"], ["x", "y"], accumulate=False, with_value=True, unit_cotangent=True)
    s = simplify(back)
    assert _count(back.entry, If) == 2 and _count(s.entry, If) == 1
    assert _transcendentals(back.entry) == 5 and _transcendentals(s.entry) == 3  # exp, sin, cos
    loads = [x for n in walk_nodes(s.entry) if isinstance(n, Let) for x in [n.value]
             if type(x).__name__ == "Load"]
    assert len(loads) == 2  # x[i] and y[i], once each


# ---- what must not be fused ---------------------------------------------------------------------------
X, OUT, OUT2 = read("x", 0, I32), output("out", 1, I32), output("out2", 2, I32)
I = var("i")


def _prog(body: list[Node], extra: tuple = ()) -> Program:
    return Program.wrapped([X, OUT, OUT2, *extra], 8, [let("i", gid()), *body]).validate()


def _check_unfused(p: Program) -> None:
    s = simplify(p)
    assert _count(s.entry, If) == _count(p.entry, If), s
    arrays = {"x": np.arange(16, dtype=np.int32) - 5, "out": np.zeros(16, np.int32),
              "out2": np.zeros(16, np.int32), "flag": np.zeros(16, np.int32)}
    arrays = {b.name: arrays[b.name] for b in p.buffers if not b.is_workgroup}
    _same(_run(p, arrays, (2,)), _run(s, arrays, (2,)))


def test_no_fusion_when_the_first_if_changes_its_condition_variable() -> None:
    _check_unfused(_prog([let("k", i32(0)), if_(var("k").eq(i32(0)), [assign("k", i32(1)), store(OUT, I, 1)]),
                          if_(var("k").eq(i32(0)), [store(OUT2, I, 2)])]))


def test_no_fusion_when_the_first_if_writes_what_the_condition_loads() -> None:
    flag = read_write("flag", 3, I32)
    c = load(flag, I).eq(i32(0))
    _check_unfused(_prog([if_(c, [store(flag, I, i32(1))]), if_(c, [store(OUT, I, i32(3))])], (flag,)))


def test_no_fusion_when_a_let_between_would_shadow_what_the_first_if_reads() -> None:
    _check_unfused(_prog([let("v", i32(1)), block([
        if_(I.lt(u32(5)), [store(OUT, I, var("v"))]), let("v", i32(2)),
        if_(I.lt(u32(5)), [store(OUT2, I, var("v"))])])]))


def test_no_fusion_when_the_second_if_would_capture_a_name_of_the_first() -> None:
    _check_unfused(_prog([let("t", i32(1)), if_(I.lt(u32(5)), [let("t", i32(2)), store(OUT, I, var("t"))]),
                          if_(I.lt(u32(5)), [store(OUT2, I, var("t"))])]))


def test_no_fusion_across_an_else_branch_or_a_store_between() -> None:
    c = I.lt(u32(5))
    _check_unfused(_prog([if_(c, [store(OUT, I, i32(1))], [store(OUT, I, i32(2))]), if_(c, [store(OUT2, I, i32(3))])]))
    _check_unfused(_prog([if_(c, [store(OUT, I, i32(1))]), store(OUT2, I, i32(4)), if_(c, [store(OUT2, I, i32(3))])]))


def test_fusion_keeps_lets_between_and_chains() -> None:
    c = I.lt(u32(5))
    p = _prog([if_(c, [store(OUT, I, load(X, I))]), let("k", i32(7)), if_(c, [store(OUT2, I, var("k"))]),
               if_(c, [store(OUT2, I + u32(8), var("k"))])])
    s = simplify(p)
    assert [type(n).__name__ for n in s.entry] == ["Let", "Let", "If"]
    _check_same(p, s)


def _check_same(p: Program, s: Program) -> None:
    arrays = {"x": np.arange(16, dtype=np.int32) - 5, "out": np.zeros(16, np.int32), "out2": np.zeros(16, np.int32)}
    _same(_run(p, arrays, (2,)), _run(s.validate(), arrays, (2,)))


# ---- what must not be shared --------------------------------------------------------------------------
def _lets(s: Program) -> list[Let]:
    return [n for n in walk_nodes(s.entry) if isinstance(n, Let)]


def test_a_load_after_a_store_to_its_buffer_is_not_shared() -> None:
    buf = read_write("flag", 3, I32)
    p = _prog([let("a", load(buf, I)), store(buf, I, var("a") + i32(1)), let("b", load(buf, I)),
               store(OUT, I, var("b"))], (buf,))
    s = simplify(p)
    assert not any(isinstance(n.value, Var) for n in _lets(s))
    arrays = {"x": np.zeros(16, np.int32), "out": np.zeros(16, np.int32), "out2": np.zeros(16, np.int32),
              "flag": np.arange(16, dtype=np.int32)}
    _same(_run(p, arrays, (2,)), _run(s, arrays, (2,)))


def test_a_load_of_another_buffer_is_shared_across_a_store() -> None:
    p = _prog([let("a", load(X, I)), store(OUT, I, var("a")), let("b", load(X, I)), store(OUT2, I, var("b"))])
    s = simplify(p)
    assert Let("b", Var("a")) in s.entry
    _check_same(p, s)


def test_loads_a_loop_writes_are_not_shared_into_it() -> None:
    buf = read_write("flag", 3, I32)
    p = _prog([let("a", load(buf, u32(0))), loop("j", u32(0), u32(3), [
        let("b", load(buf, u32(0))), store(buf, u32(0), var("b") + i32(1))]), store(OUT, I, var("a"))], (buf,))
    s = simplify(p)
    body = next(n for n in s.entry if isinstance(n, Loop)).body
    assert body[0] == Let("b", load(buf, u32(0)))


def test_workgroup_loads_are_not_shared_across_a_barrier() -> None:
    tile = workgroup("tile", 8, I32)
    p = Program.wrapped([X, OUT, OUT2, tile], 8, [
        store(tile, lid(), load(X, gid())), barrier(), let("a", load(tile, u32(0))),
        if_(lid().eq(u32(0)), [store(tile, u32(0), i32(9))]), barrier(), let("b", load(tile, u32(0))),
        store(OUT, gid(), var("a") + var("b"))]).validate()
    s = simplify(p)
    assert Let("b", load(tile, u32(0))) in s.entry
    assert _count(s.entry, Barrier) == 2


def test_a_shadowed_name_is_not_shared() -> None:
    p = _prog([let("a", load(X, I)), block([let("i", u32(3)), let("b", load(X, I)), store(OUT, var("i"), var("b"))]),
               store(OUT2, I, var("a"))])
    s = simplify(p)
    inner = next(n for n in s.entry if isinstance(n, Block)).body
    assert Let("b", load(X, I)) in inner
    _check_same(p, s)


def test_assigned_variables_never_take_part() -> None:
    p = _prog([let("a", load(X, I)), assign("a", var("a") + i32(1)), let("b", load(X, I)),
               store(OUT, I, var("a") + var("b"))])
    s = simplify(p)
    assert Let("b", load(X, I)) in s.entry
    _check_same(p, s)


@pytest.mark.parametrize("fn", [fuse_ifs])
def test_fusion_is_idempotent(fn: Any) -> None:
    back = grad(fused_chain(), ["out"], ["x", "y"], accumulate=False, with_value=True, unit_cotangent=True)
    once = fn(back.entry)
    assert fn(once) == once
    assert cse(once, set()) == cse(cse(once, set()), set())


def test_a_program_with_nothing_to_do_comes_back_as_the_same_object() -> None:
    p = _prog([store(OUT, I, load(X, I))])
    assert simplify(p) is p


def test_a_load_after_an_atomic_on_its_buffer_is_not_shared() -> None:
    acc = read_write("acc", 0, I32).with_count(1)
    out = output("o", 1, I32).with_count(2)
    p = Program.wrapped([acc, out], 1, [
        let("a", load(acc, u32(0))), let("old", atomic_add(acc, u32(0), i32(1))), let("b", load(acc, u32(0))),
        store(out, u32(0), var("a")), store(out, u32(1), var("b"))]).validate()
    s = simplify(p)
    assert Let("b", load(acc, u32(0))) in s.entry
    arrays = {"acc": np.array([5], np.int32), "o": np.zeros(2, np.int32)}
    _same(_run(p, arrays, (1,)), _run(s, arrays, (1,)))


def test_a_load_after_a_store_inside_an_if_is_not_shared() -> None:
    buf = read_write("flag", 3, I32)
    p = _prog([let("a", load(buf, I)), if_(I.lt(u32(4)), [store(buf, I, i32(7))]), let("b", load(buf, I)),
               store(OUT, I, var("a") + var("b"))], (buf,))
    s = simplify(p)
    assert Let("b", load(buf, I)) in s.entry
