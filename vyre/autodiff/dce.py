"""Dead-code elimination for generated programs.

The backward program replays the whole forward computation and then drops what its adjoint
statements never read; this pass is what makes that cheap. A statement is kept when it has an
effect (a ``Store``, an atomic ``Let``) or defines a local that a kept statement reads; ``If`` and
``Loop`` are kept when they contain a kept statement. Liveness is flow-insensitive over names,
which is exact enough for generated code (every binding has a unique name) and always safe.
"""

from __future__ import annotations

from ..ir.expr import Atomic, BinOp, BufLen, Cast, Expr, Fma, Load, Select, UnOp, Var, walk
from ..ir.node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store


def _buf(name: str) -> str:
    return "\0" + name  # a loaded buffer's entry in the live set (never a variable name)


def _len(name: str) -> str:
    return "\1" + name  # a buffer whose length is read (does not keep scratch stores alive)


def _vars(e: Expr) -> set[str]:
    """Variables read by ``e``, and the buffers it loads (as :func:`_buf` entries)."""
    out: set[str] = set()
    _collect(e, out)
    return out


def _collect(e: Expr, out: set[str]) -> None:
    # Direct recursion over the common shapes (expressions here are shallow: validation bounds
    # depth); this runs for every statement of every pass, so it avoids the generic walk.
    match e:
        case Var(name):
            out.add(name)
        case Load(b, i):
            out.add(_buf(b))
            _collect(i, out)
        case BufLen(b):
            out.add(_len(b))
        case BinOp(_, a, b):
            _collect(a, out)
            _collect(b, out)
        case UnOp(_, a) | Cast(_, a):
            _collect(a, out)
        case Select(c, a, b) | Fma(c, a, b):
            _collect(c, out)
            _collect(a, out)
            _collect(b, out)
        case _:
            for x in walk(e):
                if isinstance(x, Var):
                    out.add(x.name)
                elif isinstance(x, Load):
                    out.add(_buf(x.buffer))
                elif isinstance(x, BufLen):
                    out.add(_len(x.buffer))


def _mark(body: tuple[Node, ...], live: set[str], scratch: frozenset[str]) -> bool:
    """Add the reads of kept statements to ``live``; return whether anything in ``body`` is kept."""
    kept = False
    for n in reversed(body):  # backwards, so a straight chain of definitions is found in one pass
        match n:
            case Store(b, i, v) if b in scratch:
                if _buf(b) in live:
                    live |= _vars(i) | _vars(v)
                    kept = True
            case Store(_, i, v):
                live |= _vars(i) | _vars(v)
                kept = True
            case Let(_, Atomic() as a) if a.buffer in scratch:
                if _buf(a.buffer) in live:
                    live |= _vars(a)
                    kept = True
            case Let(_, Atomic() as a):
                live |= _vars(a)
                kept = True
            case Let(name, v) | Assign(name, v):
                if name in live:
                    live |= _vars(v)
                    kept = True
            case If(c, t, o):
                inner = _mark(t, live, scratch) | _mark(o, live, scratch)
                if inner:
                    live |= _vars(c)
                    kept = True
            case Loop(_, s, e, b):
                if _mark(b, live, scratch):
                    live |= _vars(s) | _vars(e)
                    kept = True
            case Block(b) | Region(_, b):
                kept |= _mark(b, live, scratch)
            case Barrier() | Return():
                kept = True
            case _:
                raise TypeError(f"not a vyre node: {n!r}")
    return kept


def _sweep(body: tuple[Node, ...], live: set[str], scratch: frozenset[str]) -> tuple[Node, ...]:
    out: list[Node] = []
    for n in body:
        match n:
            case Store(b, _, _) | Let(_, Atomic(_, b, _, _, _)) if b in scratch:
                if _buf(b) in live:
                    out.append(n)
            case Store() | Barrier() | Return() | Let(_, Atomic()):
                out.append(n)
            case Let(name, _) | Assign(name, _):
                if name in live:
                    out.append(n)
            case If(c, t, o):
                t2, o2 = _sweep(t, live, scratch), _sweep(o, live, scratch)
                if t2 or o2:
                    out.append(If(c, t2, o2))
            case Loop(var, s, e, b):
                b2 = _sweep(b, live, scratch)
                if b2:
                    out.append(Loop(var, s, e, b2))
            case Block(b):
                b2 = _sweep(b, live, scratch)
                if b2:
                    out.append(Block(b2))
            case Region(g, b):
                b2 = _sweep(b, live, scratch)
                if b2:
                    out.append(Region(g, b2))
            case _:
                raise TypeError(f"not a vyre node: {n!r}")
    return tuple(out)


def eliminate_dead_code(body: tuple[Node, ...], scratch: frozenset[str] = frozenset(),
                        loaded: set[str] | None = None) -> tuple[Node, ...]:
    """``body`` without the statements whose results nothing with an effect reads.

    Stores to a ``scratch`` buffer (a tape the program writes for itself) count as effects only
    while a kept statement loads that buffer. ``loaded``, if given, receives the names of the
    buffers the kept statements load or take the length of."""
    live: set[str] = set()
    while True:
        before = len(live)
        _mark(body, live, scratch)
        if len(live) == before:
            if loaded is not None:
                loaded.update(x[1:] for x in live if x[:1] in ("\0", "\1"))
            return _sweep(body, live, scratch)
