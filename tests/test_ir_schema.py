"""The IR schema (vyre/ir/schema.py): complete against the dataclasses, and its generic walks agree
with hand-written ones (kept here as the oracle) on arbitrary programs."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable

from hypothesis import given

from tests.strategies import arbitrary_programs
from vyre.ir import expr as expr_mod
from vyre.ir.expr import (
    Atomic, BinOp, Call, Cast, Expr, Fma, LitU32, Load, Select, SubgroupBallot, SubgroupReduce, SubgroupShuffle,
    UnOp, walk,
)
from vyre.ir.node import NODE_TYPES, Node, walk_nodes
from vyre.ir.program import Program
from vyre.ir.schema import (
    EXPR_FIELDS, NODE_FIELDS, F, expr_children, map_expr, map_exprs, node_bodies, node_exprs, rebuild_expr,
    rebuild_node,
)


def test_the_tables_name_every_class_and_every_field() -> None:
    assert set(EXPR_FIELDS) == set(typing.get_args(expr_mod.Expr))
    assert set(NODE_FIELDS) == set(NODE_TYPES)
    for cls, spec in (*EXPR_FIELDS.items(), *NODE_FIELDS.items()):
        assert tuple(name for name, _ in spec) == tuple(f.name for f in dataclasses.fields(cls)), cls
    # every field holding IR is marked as such
    assert {k for spec in EXPR_FIELDS.values() for _, k in spec} >= {F.EXPR, F.OPT_EXPR, F.EXPRS}
    assert {k for spec in NODE_FIELDS.values() for _, k in spec} >= {F.EXPR, F.NODES}


def _oracle_map(e: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """The hand-written rewrite the schema replaced (vyre/ir/transform.py before)."""
    def m(x: Expr) -> Expr:
        return _oracle_map(x, fn)

    match e:
        case Load(b, i):
            out: Expr = Load(b, m(i))
        case BinOp(op, a, b):
            out = BinOp(op, m(a), m(b))
        case UnOp(op, a):
            out = UnOp(op, m(a))
        case Select(c, a, b):
            out = Select(m(c), m(a), m(b))
        case Cast(t, v):
            out = Cast(t, m(v))
        case Fma(a, b, c):
            out = Fma(m(a), m(b), m(c))
        case Atomic(op, buf, i, v, ex):
            out = Atomic(op, buf, m(i), m(v), None if ex is None else m(ex))
        case SubgroupBallot(c):
            out = SubgroupBallot(m(c))
        case SubgroupShuffle(v, lane):
            out = SubgroupShuffle(m(v), m(lane))
        case SubgroupReduce(op, v):
            out = SubgroupReduce(op, m(v))
        case Call(op_id, args):
            out = Call(op_id, tuple(m(a) for a in args))
        case _:
            out = e
    return fn(out)


def _bump(e: Expr) -> Expr:
    return LitU32((e.value + 1) % 2**32) if isinstance(e, LitU32) else e


def _all_exprs(p: Program) -> list[Expr]:
    roots = [x for n in walk_nodes(p.entry) for x in node_exprs(n)] + [f.body for f in p.functions]
    return [x for r in roots for x in walk(r)]


@given(arbitrary_programs())
def test_rebuilding_from_the_children_gives_the_same_node(p: Program) -> None:
    for e in _all_exprs(p):
        assert rebuild_expr(e, list(expr_children(e))) == e
    for n in walk_nodes(p.entry):
        assert rebuild_node(n, list(node_exprs(n)), list(node_bodies(n))) == n


@given(arbitrary_programs())
def test_map_expr_agrees_with_the_hand_written_rewrite(p: Program) -> None:
    seen: list[Expr] = []

    def spy(e: Expr) -> Expr:
        seen.append(e)
        return _bump(e)

    for e in _all_exprs(p):
        seen.clear()
        assert map_expr(e, spy) == _oracle_map(e, _bump)
        assert len(seen) == sum(1 for _ in walk(e))  # once per node, children first


@given(arbitrary_programs())
def test_map_exprs_rewrites_every_statement_and_keeps_the_shape(p: Program) -> None:
    body: tuple[Node, ...] = p.entry
    assert map_exprs(body, lambda e: e) == body
    bumped = map_exprs(body, _bump)
    assert [type(n) for n in walk_nodes(bumped)] == [type(n) for n in walk_nodes(body)]
    want = [_oracle_map(x, _bump) for n in walk_nodes(body) for x in node_exprs(n)]
    assert [x for n in walk_nodes(bumped) for x in node_exprs(n)] == want
