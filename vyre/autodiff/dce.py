"""Dead-code elimination for generated programs.

The backward program replays the whole forward computation and then drops what its adjoint
statements never read; this pass is what makes that cheap. A statement is kept when it has an
effect (a ``Store``, an atomic ``Let``) or defines a local that a kept statement reads; ``If`` and
``Loop`` are kept when they contain a kept statement. Liveness is flow-insensitive over names,
which is exact enough for generated code (every binding has a unique name) and always safe.
"""

from __future__ import annotations

from ..ir.expr import Atomic, Expr, Var, walk
from ..ir.node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store


def _vars(e: Expr) -> set[str]:
    return {x.name for x in walk(e) if isinstance(x, Var)}


def _mark(body: tuple[Node, ...], live: set[str]) -> bool:
    """Add the reads of kept statements to ``live``; return whether anything in ``body`` is kept."""
    kept = False
    for n in body:
        match n:
            case Store(_, i, v):
                live |= _vars(i) | _vars(v)
                kept = True
            case Let(_, Atomic() as a):
                live |= _vars(a)
                kept = True
            case Let(name, v) | Assign(name, v):
                if name in live:
                    live |= _vars(v)
                    kept = True
            case If(c, t, o):
                inner = _mark(t, live) | _mark(o, live)
                if inner:
                    live |= _vars(c)
                    kept = True
            case Loop(_, s, e, b):
                if _mark(b, live):
                    live |= _vars(s) | _vars(e)
                    kept = True
            case Block(b) | Region(_, b):
                kept |= _mark(b, live)
            case Barrier() | Return():
                kept = True
            case _:
                raise TypeError(f"not a vyre node: {n!r}")
    return kept


def _sweep(body: tuple[Node, ...], live: set[str]) -> tuple[Node, ...]:
    out: list[Node] = []
    for n in body:
        match n:
            case Store() | Barrier() | Return() | Let(_, Atomic()):
                out.append(n)
            case Let(name, _) | Assign(name, _):
                if name in live:
                    out.append(n)
            case If(c, t, o):
                t2, o2 = _sweep(t, live), _sweep(o, live)
                if t2 or o2:
                    out.append(If(c, t2, o2))
            case Loop(var, s, e, b):
                b2 = _sweep(b, live)
                if b2:
                    out.append(Loop(var, s, e, b2))
            case Block(b):
                b2 = _sweep(b, live)
                if b2:
                    out.append(Block(b2))
            case Region(g, b):
                b2 = _sweep(b, live)
                if b2:
                    out.append(Region(g, b2))
            case _:
                raise TypeError(f"not a vyre node: {n!r}")
    return tuple(out)


def eliminate_dead_code(body: tuple[Node, ...]) -> tuple[Node, ...]:
    """``body`` without the statements whose results nothing with an effect reads."""
    live: set[str] = set()
    while True:
        before = len(live)
        _mark(body, live)
        if len(live) == before:
            return _sweep(body, live)
