"""The ``bounds`` pass (CPU): drop ``If`` guards that vyre/codegen/ranges.py proves always true.

The op programs guard accesses whose index they cannot show the emitter to be in range
(``if p + k < len(x): lanes[k] += x[p + k]``); such a guard inside a vectorised loop costs a
masked load per element. Where loop bounds, definitions and enclosing conditions prove the
condition true on every execution, the ``If`` becomes a ``Block`` of its ``then`` (same scope,
same statements), and the emitter, which asks the same prover per access, emits the accesses
unguarded. Conditions the prover cannot decide stay as they are (nothing else changes).

:func:`audit` is the check of the prover's claims: the program with, before each statement, a
store of 1 into an extra buffer wherever an access the prover calls in range is out of range (or a
condition it calls true is false) at run time. The tests run it on generated programs under the
reference interpreter and require the buffer to stay 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from ..ir import (
    U32, Block, BufferDecl, BufLen, DataType, If, Let, Load, Loop, Node, Program, Region, Store, UnOp,
    UnOpKind, node_exprs, u32, walk,
)
from ..ir.typing import expr_type
from .emit import assigned_names
from .ranges import RangeCtx, Resolve

__all__ = ["AUDIT_BUFFER", "audit", "prune_guards"]

#: the buffer :func:`audit` adds (u32, one element: 1 once a claim failed)
AUDIT_BUFFER = "vyre_audit"

_Names = dict[str, tuple[str, DataType]]


class _Types(Mapping[str, DataType]):
    """Variable types of a scope (name -> (atom key, type)) as expr_type wants them."""

    def __init__(self, names: _Names) -> None:
        self.names = names

    def __getitem__(self, k: str) -> DataType:
        return self.names[k][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class _Walk:
    """One walk of a program's statements with a range context (both functions below)."""

    program: Program
    audit: bool
    mutable: set[str] = field(default_factory=set)
    counter: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.mutable = assigned_names(self.program.entry)

    def resolver(self, names: _Names) -> Resolve:
        def resolve(name: str) -> tuple[str, DataType, bool] | None:
            r = names.get(name)
            return None if r is None else (r[0], r[1], name not in self.mutable)
        return resolve

    def claims(self, n: Node, ctx: RangeCtx, resolve: Resolve) -> list[Node]:
        """Audit statements for the accesses of ``n`` (its own expressions) claimed in range."""
        out: list[Node] = []
        accesses = [(x.buffer, x.index) for e in node_exprs(n) for x in walk(e) if isinstance(x, Load)]
        if isinstance(n, Store):
            accesses.append((n.buffer, n.index))
        for buf, index in accesses:
            if ctx.proves_lt(index, BufLen(buf), resolve):
                out.append(If(index.ge(BufLen(buf)), (Store(AUDIT_BUFFER, u32(0), u32(1)),)))
        return out

    def body(self, nodes: tuple[Node, ...], ctx: RangeCtx, names: _Names) -> tuple[Node, ...]:
        out: list[Node] = []
        resolve = self.resolver(names)
        changed = False
        for n in nodes:
            m: Node = n
            if self.audit:
                checks = self.claims(n, ctx, resolve)
                out += checks
                changed = changed or bool(checks)
            match n:
                case Let(name, value):
                    t = expr_type(value, _Types(names), self.program)
                    key = f"{name}#{next(self.counter)}"
                    stable = name not in self.mutable
                    ctx.define(key, ctx.resolved(value, resolve, opaque=False) if stable else None, t)
                    names[name] = (key, t)
                case If(cond, then, otherwise):
                    tctx = ctx.child()
                    tctx.assume(cond, resolve)
                    new_then = self.body(then, tctx, dict(names))
                    ectx = ctx.child()
                    ectx.assume(cond, resolve, holds=False)
                    new_else = self.body(otherwise, ectx, dict(names))
                    if ctx.proves(cond, resolve):
                        if self.audit:
                            out.append(If(UnOp(UnOpKind.LOGICAL_NOT, cond), (Store(AUDIT_BUFFER, u32(0), u32(1)),)))
                            m = If(cond, new_then, new_else)
                        else:
                            m = Block(new_then)
                    elif new_then is not then or new_else is not otherwise:
                        m = If(cond, new_then, new_else)
                case Loop(var, start, end, lbody):
                    inner = dict(names)
                    key = f"{var}#{next(self.counter)}"
                    lctx = ctx.child()
                    lctx.loop(key, start, end, resolve)
                    inner[var] = (key, DataType.U32)
                    new = self.body(lbody, lctx, inner)
                    m = n if new is lbody else Loop(var, start, end, new)
                case Block(b):
                    new = self.body(b, ctx.child(), dict(names))
                    m = n if new is b else Block(new)
                case Region(g, b):
                    new = self.body(b, ctx.child(), dict(names))
                    m = n if new is b else Region(g, new)
            changed = changed or m is not n
            out.append(m)
        return tuple(out) if changed else nodes

    def run(self) -> tuple[Node, ...]:
        return self.body(self.program.entry, RangeCtx(self.program), {})


def prune_guards(program: Program) -> Program:
    """``program`` with every ``If`` whose condition is proven true replaced by its ``then``."""
    entry = _Walk(program, audit=False).run()
    return program if entry is program.entry else replace(program, entry=entry)


def audit(program: Program) -> Program:
    """``program`` plus a buffer :data:`AUDIT_BUFFER` (u32, 1 element) that becomes 1 when an access
    the range prover claims in range is not, or an ``If`` condition it claims true is false."""
    entry = _Walk(program, audit=True).run()
    flag = BufferDecl.read_write(AUDIT_BUFFER, max((b.binding for b in program.buffers), default=-1) + 1, U32)
    return replace(program, buffers=(*program.buffers, flag.with_count(1)), entry=entry)

