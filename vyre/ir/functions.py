"""The registry of callable functions and the ``Call`` inliner."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from .expr import Call, Expr, FunctionDef, Var, children
from .node import Node, node_exprs, walk_nodes
from .transform import map_expr, map_exprs

_lock = threading.Lock()
_registry: dict[str, FunctionDef] = {}


def register_function(fn: FunctionDef) -> FunctionDef:
    """Make ``fn`` callable by ``Call(fn.op_id, ...)`` in programs built afterwards.

    Re-registering the same definition is a no-op; a different definition under a taken name is
    an error (programs already built keep the definition they captured)."""
    with _lock:
        old = _registry.get(fn.op_id)
        if old is not None and old != fn:
            raise ValueError(
                f"function {fn.op_id!r} is already registered with a different definition. "
                "Fix: choose a new op_id"
            )
        _registry[fn.op_id] = fn
    return fn


def registered(op_id: str) -> FunctionDef | None:
    with _lock:
        return _registry.get(op_id)


def _calls_in(e: Expr, seen: set[int] | None = None) -> list[str]:
    """op_ids of the calls in ``e``; shared sub-expressions are visited once (a DAG built by
    reusing a Python object would otherwise be walked exponentially often)."""
    seen = set() if seen is None else seen
    out: list[str] = []
    stack: list[Expr] = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Call):
            out.append(x.op_id)
        try:
            stack.extend(children(x))
        except TypeError:
            continue  # not an expression: validation reports it
    return out


def functions_for(body: tuple[Node, ...]) -> tuple[FunctionDef, ...]:
    """Registered functions the calls in ``body`` name, transitively, sorted by op_id.

    Unregistered names and malformed statements are left out; validation then reports them."""
    pending: list[str] = []
    seen: set[int] = set()
    try:
        for n in walk_nodes(body):
            for e in node_exprs(n):
                pending += _calls_in(e, seen)
    except TypeError:
        return ()  # a non-statement in the body: validation reports it
    found: dict[str, FunctionDef] = {}
    while pending:
        name = pending.pop()
        if name in found:
            continue
        fn = registered(name)
        if fn is None:
            continue
        found[name] = fn
        pending += _calls_in(fn.body)
    return tuple(found[k] for k in sorted(found))


def substitute(e: Expr, env: Mapping[str, Expr]) -> Expr:
    """Replace ``Var(name)`` by ``env[name]`` throughout ``e``."""
    return map_expr(e, lambda x: env.get(x.name, x) if isinstance(x, Var) else x)


def inline_expr(e: Expr, functions: Mapping[str, FunctionDef]) -> Expr:
    """``e`` with every ``Call`` replaced by its function body (arguments substituted)."""
    def inline(x: Expr) -> Expr:
        if not isinstance(x, Call):
            return x
        fn = functions[x.op_id]
        env = {p: a for (p, _), a in zip(fn.params, x.args, strict=True)}  # args are inlined already
        return inline_expr(substitute(fn.body, env), functions)

    return map_expr(e, inline)


def inline_nodes(body: tuple[Node, ...], functions: Mapping[str, FunctionDef]) -> tuple[Node, ...]:
    return map_exprs(body, lambda x: inline_expr(x, functions) if isinstance(x, Call) else x)
