"""The registry of callable functions and the ``Call`` inliner."""

from __future__ import annotations

import threading
from dataclasses import replace
from collections.abc import Collection, Mapping

from .expr import Call, Expr, FunctionAdjoint, FunctionDef, Var, children
from .node import Node, node_exprs, walk_nodes
from .transform import map_expr, map_exprs

_lock = threading.Lock()
_registry: dict[str, FunctionDef] = {}


def register_function(fn: FunctionDef, *, adjoint: FunctionAdjoint | None = None) -> FunctionDef:
    """Make ``fn`` callable by ``Call(fn.op_id, ...)`` in programs built afterwards.

    ``adjoint`` (or ``fn.adjoint``) is the function's own reverse-mode rule, which
    ``vyre.autodiff.grad`` uses instead of differentiating the body (see
    :class:`~vyre.ir.expr.FunctionAdjoint`); it is checked here, with the body, and a bad one
    raises :class:`~vyre.errors.ValidationError` (code V067) naming what is wrong (the body is
    validated with the programs that call it).
    Re-registering the same definition is a no-op; a different definition under a taken name is
    an error (programs already built keep the definition they captured)."""
    if adjoint is not None:
        if fn.adjoint is not None and fn.adjoint != adjoint:
            raise ValueError(f"function {fn.op_id!r} already carries an adjoint. Fix: pass it once")
        fn = replace(fn, adjoint=adjoint)
    _check(fn)
    with _lock:
        old = _registry.get(fn.op_id)
        if old is not None and old != fn:
            raise ValueError(
                f"function {fn.op_id!r} is already registered with a different definition. "
                "Fix: choose a new op_id"
            )
        _registry[fn.op_id] = fn
    return fn


def _check(fn: FunctionDef) -> None:
    """Raise for a bad custom adjoint (V067) now, where the mistake is made; the body is
    validated with the programs that call it, as before."""
    if fn.adjoint is None:
        return
    from ..errors import ValidationError
    from .validate import validate_function

    roots = [fn.body, *(g for g in fn.adjoint.grads if g is not None)]
    callees: dict[str, FunctionDef] = {}
    pending = [name for e in roots for name in _calls_in(e)]
    while pending:
        name = pending.pop()
        f = registered(name)
        if f is None or name in callees:
            continue
        callees[name] = f
        pending += _calls_in(f.body)
    diags = [d for d in validate_function(fn, callees) if d.code == "V067" or ".adjoint" in d.path]
    if diags:
        raise ValidationError(diags)


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
        if fn.adjoint is not None:  # the backward inlines what its custom adjoint calls
            for g in fn.adjoint.grads:
                if g is not None:
                    pending += _calls_in(g)
    return tuple(found[k] for k in sorted(found))


def substitute(e: Expr, env: Mapping[str, Expr]) -> Expr:
    """Replace ``Var(name)`` by ``env[name]`` throughout ``e``."""
    return map_expr(e, lambda x: env.get(x.name, x) if isinstance(x, Var) else x)


def inline_expr(e: Expr, functions: Mapping[str, FunctionDef],
                keep: Collection[str] = ()) -> Expr:
    """``e`` with every ``Call`` replaced by its function body (arguments substituted); calls of
    the functions named in ``keep`` stay calls (their arguments are inlined)."""
    def inline(x: Expr) -> Expr:
        if not isinstance(x, Call) or x.op_id in keep:
            return x
        fn = functions[x.op_id]
        env = {p: a for (p, _), a in zip(fn.params, x.args, strict=True)}  # args are inlined already
        return inline_expr(substitute(fn.body, env), functions, keep)

    return map_expr(e, inline)


def inline_nodes(body: tuple[Node, ...], functions: Mapping[str, FunctionDef],
                 keep: Collection[str] = ()) -> tuple[Node, ...]:
    return map_exprs(body, lambda x: inline_expr(x, functions, keep) if isinstance(x, Call) else x)
