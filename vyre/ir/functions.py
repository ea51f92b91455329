"""The registry of callable functions and the ``Call`` inliner."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, FunctionDef, InvocationId, LitBool, LitF32,
    LitF64, LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId,
    SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId, children,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store, node_exprs, walk_nodes

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
    match e:
        case Var(name):
            return env.get(name, e)
        case (LitBool() | LitI32() | LitU32() | LitF32() | LitF64() | BufLen() | InvocationId()
              | WorkgroupId() | LocalId() | SubgroupLocalId() | SubgroupSize()):
            return e
        case Load(b, i):
            return Load(b, substitute(i, env))
        case BinOp(op, a, b):
            return BinOp(op, substitute(a, env), substitute(b, env))
        case UnOp(op, a):
            return UnOp(op, substitute(a, env))
        case Select(c, a, b):
            return Select(substitute(c, env), substitute(a, env), substitute(b, env))
        case Cast(t, v):
            return Cast(t, substitute(v, env))
        case Fma(a, b, c):
            return Fma(substitute(a, env), substitute(b, env), substitute(c, env))
        case Atomic(op, buf, i, v, ex):
            return Atomic(op, buf, substitute(i, env), substitute(v, env),
                          None if ex is None else substitute(ex, env))
        case SubgroupBallot(c):
            return SubgroupBallot(substitute(c, env))
        case SubgroupShuffle(v, lane):
            return SubgroupShuffle(substitute(v, env), substitute(lane, env))
        case SubgroupReduce(op, v):
            return SubgroupReduce(op, substitute(v, env))
        case Call(op_id, args):
            return Call(op_id, tuple(substitute(a, env) for a in args))
        case _:
            raise TypeError(f"not a vyre expression: {e!r}")


def inline_expr(e: Expr, functions: Mapping[str, FunctionDef]) -> Expr:
    """``e`` with every ``Call`` replaced by its function body (arguments substituted)."""
    match e:
        case Call(op_id, args):
            fn = functions[op_id]
            new_args = [inline_expr(a, functions) for a in args]
            env = {p: a for (p, _), a in zip(fn.params, new_args, strict=True)}
            return inline_expr(substitute(fn.body, env), functions)
        case (Var() | LitBool() | LitI32() | LitU32() | LitF32() | LitF64() | BufLen()
              | InvocationId() | WorkgroupId() | LocalId() | SubgroupLocalId() | SubgroupSize()):
            return e
        case Load(b, i):
            return Load(b, inline_expr(i, functions))
        case BinOp(op, a, b):
            return BinOp(op, inline_expr(a, functions), inline_expr(b, functions))
        case UnOp(op, a):
            return UnOp(op, inline_expr(a, functions))
        case Select(c, a, b):
            return Select(inline_expr(c, functions), inline_expr(a, functions), inline_expr(b, functions))
        case Cast(t, v):
            return Cast(t, inline_expr(v, functions))
        case Fma(a, b, c):
            return Fma(inline_expr(a, functions), inline_expr(b, functions), inline_expr(c, functions))
        case Atomic(op, buf, i, v, ex):
            return Atomic(op, buf, inline_expr(i, functions), inline_expr(v, functions),
                          None if ex is None else inline_expr(ex, functions))
        case SubgroupBallot(c):
            return SubgroupBallot(inline_expr(c, functions))
        case SubgroupShuffle(v, lane):
            return SubgroupShuffle(inline_expr(v, functions), inline_expr(lane, functions))
        case SubgroupReduce(op, v):
            return SubgroupReduce(op, inline_expr(v, functions))
        case _:
            raise TypeError(f"not a vyre expression: {e!r}")


def inline_nodes(body: tuple[Node, ...], functions: Mapping[str, FunctionDef]) -> tuple[Node, ...]:
    def ie(e: Expr) -> Expr:
        return inline_expr(e, functions)

    out: list[Node] = []
    for n in body:
        match n:
            case Let(name, v):
                out.append(Let(name, ie(v)))
            case Assign(name, v):
                out.append(Assign(name, ie(v)))
            case Store(b, i, v):
                out.append(Store(b, ie(i), ie(v)))
            case If(c, t, o):
                out.append(If(ie(c), inline_nodes(t, functions), inline_nodes(o, functions)))
            case Loop(var, s, e, body2):
                out.append(Loop(var, ie(s), ie(e), inline_nodes(body2, functions)))
            case Block(b2):
                out.append(Block(inline_nodes(b2, functions)))
            case Region(g, b2):
                out.append(Region(g, inline_nodes(b2, functions)))
            case Barrier() | Return():
                out.append(n)
            case _:
                raise TypeError(f"not a vyre node: {n!r}")
    return tuple(out)
