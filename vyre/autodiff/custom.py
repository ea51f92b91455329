"""Custom adjoints: functions that carry their own reverse-mode rule.

A function registered with a :class:`~vyre.ir.expr.FunctionAdjoint` (``register_function(fn,
adjoint=...)``, like ``jax.custom_vjp`` or Warp's ``func_grad``) is not inlined before reverse
mode: its calls stay one binding of the normal form, with atom arguments, and the reverse pass
gives argument ``k`` the adjoint's ``grads[k]`` with the parameters bound to the arguments, the
result to the call's value and the cotangent to the call's adjoint. The backward program inlines
every call at the end, so the kernel it compiles has none. Forward mode (``jvp``) differentiates
the body; second order (``hvp``) differentiates the custom adjoint.
"""

from __future__ import annotations

from ..ir.expr import Expr, FunctionDef
from ..ir.functions import inline_nodes, substitute
from ..ir.node import Node
from ..ir.program import Program


def custom_ids(program: Program) -> frozenset[str]:
    """op_ids of the program's functions that carry a custom adjoint."""
    return frozenset(f.op_id for f in program.functions if f.adjoint is not None)


def call_contribs(fn: FunctionDef, args: tuple[Expr, ...], result: Expr, d: Expr
                  ) -> list[tuple[Expr, Expr]]:
    """``(argument, contribution)`` for every parameter the adjoint of ``fn`` gives a gradient."""
    adj = fn.adjoint
    assert adj is not None, f"{fn.op_id} has no custom adjoint"
    env = {p: a for (p, _), a in zip(fn.params, args, strict=True)}
    env[adj.result] = result
    env[adj.cotangent] = d
    return [(a, substitute(g, env)) for a, g in zip(args, adj.grads, strict=True) if g is not None]


def inline_calls(body: tuple[Node, ...], program: Program) -> tuple[Node, ...]:
    """``body`` with every call inlined (the kept calls and those the adjoints make)."""
    fns = {f.op_id: f for f in program.functions}
    return inline_nodes(body, fns) if fns else body


__all__ = ["call_contribs", "custom_ids", "inline_calls"]
