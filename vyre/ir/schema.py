"""The IR's schema: every expression and statement class, its fields in constructor order and
what each field holds, and the generic walks derived from it.

:data:`EXPR_FIELDS` and :data:`NODE_FIELDS` are the one description of the IR's shape: validation
checks field values against them (``V001``), and :func:`expr_children`, :func:`node_exprs`,
:func:`node_bodies`, :func:`rebuild_expr`, :func:`rebuild_node`, :func:`map_expr` and
:func:`map_exprs` walk and rebuild any node through them, so a pass that only needs "the
sub-expressions" or "the same node with new sub-expressions" needs no ``match`` over 23 classes.
tests/test_ir_schema.py checks the tables against the dataclasses, so a field added to a class
without a row here fails there.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, InvocationId, LitBool, LitF32, LitF64, LitI32, LitU32,
    Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce, SubgroupShuffle, SubgroupSize,
    UnOp, Var, WorkgroupId,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store

__all__ = [
    "EXPR_FIELDS", "NODE_FIELDS", "F", "expr_children", "map_expr", "map_exprs", "node_bodies", "node_exprs",
    "rebuild_expr", "rebuild_node",
]


class F(enum.Enum):
    """Field kinds; the value is the "expected ..." text of a V001 message."""

    EXPR = "an expression"
    OPT_EXPR = "an expression or None"
    EXPRS = "a tuple of expressions"
    NODES = "a tuple of statements"
    NAME = "a str"
    LABEL = "a str label"
    AXIS = "an int (0, 1 or 2)"
    INT = "an int"
    BOOL = "a bool"
    BINOP = "a BinOpKind"
    UNOP = "a UnOpKind"
    ATOMIC = "an AtomicOp"
    DTYPE = "a DataType"
    ACCESS = "a BufferAccess"
    I32 = "an int in [-2^31, 2^31)"
    U32 = "an int in [0, 2^32)"
    BITS32 = "an int bit pattern in [0, 2^32)"
    BITS64 = "an int bit pattern in [0, 2^64)"


_E = F.EXPR
#: Every expression class: its fields in constructor order and their kinds.
EXPR_FIELDS: dict[type, tuple[tuple[str, F], ...]] = {
    LitBool: (("value", F.BOOL),),
    LitI32: (("value", F.I32),),
    LitU32: (("value", F.U32),),
    LitF32: (("bits", F.BITS32),),
    LitF64: (("bits", F.BITS64),),
    Var: (("name", F.NAME),),
    Load: (("buffer", F.NAME), ("index", _E)),
    BufLen: (("buffer", F.NAME),),
    InvocationId: (("axis", F.AXIS),),
    WorkgroupId: (("axis", F.AXIS),),
    LocalId: (("axis", F.AXIS),),
    SubgroupLocalId: (),
    SubgroupSize: (),
    BinOp: (("op", F.BINOP), ("left", _E), ("right", _E)),
    UnOp: (("op", F.UNOP), ("operand", _E)),
    Select: (("cond", _E), ("true_val", _E), ("false_val", _E)),
    Cast: (("target", F.DTYPE), ("value", _E)),
    Fma: (("a", _E), ("b", _E), ("c", _E)),
    Atomic: (("op", F.ATOMIC), ("buffer", F.NAME), ("index", _E), ("value", _E),
             ("expected", F.OPT_EXPR)),
    SubgroupBallot: (("cond", _E),),
    SubgroupShuffle: (("value", _E), ("lane", _E)),
    SubgroupReduce: (("op", F.BINOP), ("value", _E)),
    Call: (("op_id", F.NAME), ("args", F.EXPRS)),
}

#: Every statement class: its fields in constructor order and their kinds.
NODE_FIELDS: dict[type, tuple[tuple[str, F], ...]] = {
    Let: (("name", F.NAME), ("value", _E)),
    Assign: (("name", F.NAME), ("value", _E)),
    Store: (("buffer", F.NAME), ("index", _E), ("value", _E)),
    If: (("cond", _E), ("then", F.NODES), ("otherwise", F.NODES)),
    Loop: (("var", F.NAME), ("start", _E), ("end", _E), ("body", F.NODES)),
    Block: (("body", F.NODES),),
    Barrier: (),
    Return: (),
    Region: (("generator", F.LABEL), ("body", F.NODES)),
}

_EXPR_KINDS = (F.EXPR, F.OPT_EXPR, F.EXPRS)
# Per class, only the fields holding expressions / statement lists (the walks' hot tables).
_SUB_EXPRS: dict[type, tuple[tuple[str, F], ...]] = {
    cls: tuple(f for f in spec if f[1] in _EXPR_KINDS) for cls, spec in (*EXPR_FIELDS.items(), *NODE_FIELDS.items())
}
_BODIES: dict[type, tuple[str, ...]] = {
    cls: tuple(name for name, kind in spec if kind is F.NODES) for cls, spec in NODE_FIELDS.items()
}


def _spec(x: object, table: dict[type, Any], what: str) -> Any:
    spec = table.get(type(x))
    if spec is None:
        raise TypeError(f"not a vyre {what}: {x!r}")
    return spec


def _held_exprs(x: Expr | Node) -> Iterator[Expr]:
    """The expressions in ``x``'s own fields, in field order (an optional one when present)."""
    for name, kind in _SUB_EXPRS[type(x)]:
        v = getattr(x, name)
        if kind is F.EXPR:
            yield v
        elif kind is F.EXPRS:
            yield from v
        elif v is not None:
            yield v


def expr_children(e: Expr) -> Iterator[Expr]:
    """Direct sub-expressions of ``e``, in evaluation (field) order."""
    if type(e) not in EXPR_FIELDS:
        raise TypeError(f"not a vyre expression: {e!r}")
    return _held_exprs(e)


def node_exprs(n: Node) -> Iterator[Expr]:
    """Expressions held directly by statement ``n`` (not those of nested statements)."""
    if type(n) not in NODE_FIELDS:
        raise TypeError(f"not a vyre node: {n!r}")
    return _held_exprs(n)


def node_bodies(n: Node) -> Iterator[tuple[Node, ...]]:
    """Nested statement lists of ``n``, in field order."""
    for name in _spec(n, _BODIES, "node"):
        yield getattr(n, name)


def _rebuilt(x: Any, spec: tuple[tuple[str, F], ...], exprs: Sequence[Expr | None],
             bodies: Sequence[tuple[Node, ...]]) -> Any:
    values: list[Any] = []
    ei = bi = 0
    for name, kind in spec:
        if kind is F.EXPR or (kind is F.OPT_EXPR and getattr(x, name) is not None):
            values.append(exprs[ei])
            ei += 1
        elif kind is F.OPT_EXPR:  # absent: stays absent (expr_children listed nothing for it)
            values.append(None)
        elif kind is F.EXPRS:
            v = getattr(x, name)
            values.append(tuple(exprs[ei:ei + len(v)]))
            ei += len(v)
        elif kind is F.NODES:
            values.append(bodies[bi])
            bi += 1
        else:
            values.append(getattr(x, name))
    if ei != len(exprs) or bi != len(bodies):
        raise ValueError(f"rebuilding a {type(x).__name__}: {len(exprs)} expressions and {len(bodies)} bodies "
                         f"given, it holds {ei} and {bi}")
    return type(x)(*values)


def rebuild_expr(e: Expr, children: Sequence[Expr | None]) -> Expr:
    """``e`` with its sub-expressions replaced by ``children``, exactly as :func:`expr_children`
    lists them (an absent optional one is not listed and stays absent)."""
    spec = _spec(e, EXPR_FIELDS, "expression")
    if not any(k in _EXPR_KINDS for _, k in spec):
        if children:
            raise ValueError(f"a {type(e).__name__} has no sub-expressions, {len(children)} given")
        return e
    out: Expr = _rebuilt(e, spec, children, ())
    return out


def rebuild_node(n: Node, exprs: Sequence[Expr | None], bodies: Sequence[tuple[Node, ...]]) -> Node:
    """Statement ``n`` with new expressions (as :func:`node_exprs` lists them) and statement lists
    (as :func:`node_bodies` lists them)."""
    spec = _spec(n, NODE_FIELDS, "node")
    if not spec:
        if exprs or bodies:
            raise ValueError(f"a {type(n).__name__} holds nothing, {len(exprs)} + {len(bodies)} given")
        return n
    out: Node = _rebuilt(n, spec, exprs, bodies)
    return out


Rewrite = Callable[[Expr], Expr]


def _map_subs(x: Any, spec: tuple[tuple[str, F], ...], fn: Rewrite) -> list[Expr | None]:
    out: list[Expr | None] = []
    for name, kind in spec:
        v = getattr(x, name)
        if kind is F.EXPRS:
            out.extend(map_expr(a, fn) for a in v)
        elif v is not None:
            out.append(map_expr(v, fn))
    return out


def map_expr(e: Expr, fn: Rewrite) -> Expr:
    """Rebuild ``e`` bottom-up, applying ``fn`` to every node after its children."""
    subs = _SUB_EXPRS.get(type(e))
    if subs is None or type(e) not in EXPR_FIELDS:
        raise TypeError(f"not a vyre expression: {e!r}")
    if not subs:
        return fn(e)
    return fn(_rebuilt(e, EXPR_FIELDS[type(e)], _map_subs(e, subs, fn), ()))


def map_exprs(body: tuple[Node, ...], fn: Rewrite) -> tuple[Node, ...]:
    """``body`` with :func:`map_expr` applied to every expression of every statement."""
    out: list[Node] = []
    for n in body:
        spec = _spec(n, NODE_FIELDS, "node")
        if not spec:
            out.append(n)
            continue
        exprs = _map_subs(n, _SUB_EXPRS[type(n)], fn)
        bodies = [map_exprs(b, fn) for b in node_bodies(n)]
        out.append(_rebuilt(n, spec, exprs, bodies))
    return tuple(out)
