"""Statement order for the backward program: loads first.

A GPU warp issues its instructions in order and waits at the first one that reads a value still
being loaded. The backward recomputes the forward's locals (the replay, and the body of every
reversed loop iteration) in the order the forward wrote them, so a load written after a long
computation (``sin(a) * x[i]``) is issued only when that computation is done, and its latency
adds to every iteration. :func:`loads_first` moves every load, with the bindings its index
needs, to the front of its run of bindings; the arithmetic after it then overlaps the load.

A run is a maximal sequence of pure bindings: stores, branches, loops, barriers, atomics and
subgroup operations end it, so no load moves past a write (of this invocation) or a barrier, and
no binding moves before one it reads. The result computes exactly the same values.
"""

from __future__ import annotations

from ..ir.expr import Atomic, Load, SubgroupBallot, SubgroupReduce, SubgroupShuffle
from .nf import NIf, NLet, NLoop, NStmt, expr_vars


def _movable(s: NStmt) -> bool:
    return isinstance(s, NLet) and not isinstance(
        s.value, Atomic | SubgroupBallot | SubgroupReduce | SubgroupShuffle)


def loads_first(stmts: tuple[NStmt, ...]) -> tuple[NStmt, ...]:
    """``stmts`` (and every nested body) with each run's loads and their index bindings first."""
    out: list[NStmt] = []
    run: list[NLet] = []
    for s in stmts:
        if _movable(s):
            assert isinstance(s, NLet)
            run.append(s)
            continue
        out += _reorder(run)
        run = []
        match s:
            case NIf(cond, then, other, phis):
                out.append(NIf(cond, loads_first(then), loads_first(other), phis))
            case NLoop(var, start, end, body, carried):
                out.append(NLoop(var, start, end, loads_first(body), carried))
            case _:
                out.append(s)
    out += _reorder(run)
    return tuple(out)


def _reorder(run: list[NLet]) -> list[NLet]:
    """The loads of ``run`` and everything they read from it (in their order), then the rest."""
    at = {s.name: k for k, s in enumerate(run)}
    cone: set[int] = set()
    stack = [k for k, s in enumerate(run) if isinstance(s.value, Load)]
    while stack:
        k = stack.pop()
        if k in cone:
            continue
        cone.add(k)
        stack += [at[v] for v in expr_vars(run[k].value) if v in at]
    if not cone or len(cone) == len(run):
        return run
    return [run[k] for k in sorted(cone)] + [s for k, s in enumerate(run) if k not in cone]


__all__ = ["loads_first"]
