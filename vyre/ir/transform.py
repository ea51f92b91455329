"""Generic rewriting of expressions inside statements (a pass helper)."""

from __future__ import annotations

from collections.abc import Callable

from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, InvocationId, LitBool, LitF32, LitF64, LitI32,
    LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce, SubgroupShuffle,
    SubgroupSize, UnOp, Var, WorkgroupId,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store

Rewrite = Callable[[Expr], Expr]


def map_expr(e: Expr, fn: Rewrite) -> Expr:
    """Rebuild ``e`` bottom-up, applying ``fn`` to every node after its children."""
    def m(x: Expr) -> Expr:
        return map_expr(x, fn)

    match e:
        case (LitBool() | LitI32() | LitU32() | LitF32() | LitF64() | Var() | BufLen() | InvocationId()
              | WorkgroupId() | LocalId() | SubgroupLocalId() | SubgroupSize()):
            out: Expr = e
        case Load(b, i):
            out = Load(b, m(i))
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
            raise TypeError(f"not a vyre expression: {e!r}")
    return fn(out)


def map_exprs(body: tuple[Node, ...], fn: Rewrite) -> tuple[Node, ...]:
    """``body`` with :func:`map_expr` applied to every expression of every statement."""
    def me(e: Expr) -> Expr:
        return map_expr(e, fn)

    out: list[Node] = []
    for n in body:
        match n:
            case Let(name, v):
                out.append(Let(name, me(v)))
            case Assign(name, v):
                out.append(Assign(name, me(v)))
            case Store(b, i, v):
                out.append(Store(b, me(i), me(v)))
            case If(c, t, o):
                out.append(If(me(c), map_exprs(t, fn), map_exprs(o, fn)))
            case Loop(var, s, e, b):
                out.append(Loop(var, me(s), me(e), map_exprs(b, fn)))
            case Block(b):
                out.append(Block(map_exprs(b, fn)))
            case Region(g, b):
                out.append(Region(g, map_exprs(b, fn)))
            case Barrier() | Return():
                out.append(n)
            case _:
                raise TypeError(f"not a vyre node: {n!r}")
    return tuple(out)
