"""Source-level preparation shared by ``grad`` and ``jvp``.

* :func:`inline_and_rename` inlines every ``Call`` and gives every ``Let`` and loop variable a
  name unique in the program, keeping the statement tree's shape, so node paths such as
  ``entry[1].then[0]`` still point at the user's statements (checks run on this form).
* :func:`remove_returns` turns ``Return`` into a ``done`` flag that guards everything after it.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..ir.expr import Expr, LitBool, UnOp, Var
from ..ir.functions import inline_nodes
from ..ir.node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store, walk_nodes
from ..ir.ops import UnOpKind
from ..ir.program import Program
from ..ir.schema import map_expr
from .nf import Names


def source_names(program: Program) -> set[str]:
    """Every local name the program binds or reads."""
    out: set[str] = set()
    for n in walk_nodes(program.entry):
        match n:
            case Let(name, _) | Assign(name, _) | Loop(name, _, _, _):
                out.add(name)
            case _:
                pass
    return out


def _rename_expr(e: Expr, scope: list[dict[str, str]]) -> Expr:
    """``e`` with every variable renamed as the innermost scope binding it says (a generic
    rebuild: vyre/ir/schema.py)."""
    def rename(x: Expr) -> Expr:
        if isinstance(x, Var):
            for frame in reversed(scope):
                if x.name in frame:
                    return Var(frame[x.name])
        return x

    return map_expr(e, rename)


def _rename_body(body: tuple[Node, ...], scope: list[dict[str, str]], names: Names) -> tuple[Node, ...]:
    scope.append({})
    try:
        return tuple(_rename_node(n, scope, names) for n in body)
    finally:
        scope.pop()


def _lookup(name: str, scope: list[dict[str, str]]) -> str:
    for frame in reversed(scope):
        if name in frame:
            return frame[name]
    return name


def _rename_node(n: Node, scope: list[dict[str, str]], names: Names) -> Node:
    match n:
        case Let(name, v):
            v2 = _rename_expr(v, scope)
            new = names.fresh(name)
            scope[-1][name] = new
            return Let(new, v2)
        case Assign(name, v):
            return Assign(_lookup(name, scope), _rename_expr(v, scope))
        case Store(b, i, v):
            return Store(b, _rename_expr(i, scope), _rename_expr(v, scope))
        case If(c, t, o):
            return If(_rename_expr(c, scope), _rename_body(t, scope, names), _rename_body(o, scope, names))
        case Loop(var, s, e, body):
            s2, e2 = _rename_expr(s, scope), _rename_expr(e, scope)
            new = names.fresh(var)
            scope.append({var: new})
            try:
                body2 = _rename_body(body, scope, names)
            finally:
                scope.pop()
            return Loop(new, s2, e2, body2)
        case Block(body):
            return Block(_rename_body(body, scope, names))
        case Region(g, body):
            return Region(g, _rename_body(body, scope, names))
        case Barrier() | Return():
            return n
        case _:
            raise TypeError(f"not a vyre node: {n!r}")


def inline_and_rename(program: Program, names: Names, keep: frozenset[str] = frozenset()
                      ) -> tuple[Node, ...]:
    """``program.entry`` with calls inlined and every binding renamed uniquely (same tree shape);
    calls of the functions in ``keep`` (those with a custom adjoint, in reverse mode) stay calls."""
    fns = {f.op_id: f for f in program.functions}
    body = inline_nodes(program.entry, fns, keep) if fns else program.entry
    return _rename_body(body, [], names)


def iter_paths(body: tuple[Node, ...], prefix: str = "entry") -> Iterator[tuple[str, Node]]:
    """``(path, node)`` for every statement, pre-order; paths look like ``entry[1].then[0]``."""
    for i, n in enumerate(body):
        here = f"{prefix}[{i}]"
        yield here, n
        match n:
            case If(_, then, otherwise):
                yield from iter_paths(then, f"{here}.then")
                yield from iter_paths(otherwise, f"{here}.otherwise")
            case Loop(_, _, _, b) | Block(b) | Region(_, b):
                yield from iter_paths(b, f"{here}.body")
            case Let() | Assign() | Store() | Barrier() | Return():
                pass
            case _:
                raise TypeError(f"not a vyre node: {n!r}")


def has_return(nodes: tuple[Node, ...]) -> bool:
    return any(isinstance(n, Return) for n in walk_nodes(nodes))


def _guard(done: str, body: list[Node]) -> If:
    return If(UnOp(UnOpKind.LOGICAL_NOT, Var(done)), tuple(body))


def _elim(body: tuple[Node, ...], done: str) -> list[Node]:
    out: list[Node] = []
    for k, n in enumerate(body):
        match n:
            case Return():
                out.append(Assign(done, LitBool(True)))
                return out  # the rest of this list can never run
            case If(c, t, o):
                out.append(If(c, tuple(_elim(t, done)), tuple(_elim(o, done))))
            case Loop(var, s, e, b):
                inner = _elim(b, done)
                if has_return(b):
                    inner = [_guard(done, inner)]  # later iterations do nothing once done
                out.append(Loop(var, s, e, tuple(inner)))
            case Block(b) | Region(_, b):
                out.append(Block(tuple(_elim(b, done))))
            case Let() | Assign() | Store() | Barrier():
                out.append(n)
            case _:
                raise TypeError(f"not a vyre node: {n!r}")
        rest = body[k + 1:]
        if rest and has_return((n,)):
            out.append(_guard(done, _elim(rest, done)))
            return out
    return out


def remove_returns(body: tuple[Node, ...], names: Names) -> tuple[Node, ...]:
    """An equivalent body without ``Return``: a bool ``done`` flag is set where a ``Return`` was
    and guards every statement that could run after it."""
    if not has_return(body):
        return body
    done = names.fresh("done")
    return (Let(done, LitBool(False)), *_elim(body, done))


__all__ = ["has_return", "inline_and_rename", "iter_paths", "remove_returns", "source_names"]
