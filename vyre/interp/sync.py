"""Compiling statements that contain synchronisation points into generators.

A sync point is a ``Barrier`` or a ``Let`` whose whole value is a subgroup op. A statement that
contains one compiles to a generator function ``run(r)`` that yields a request at each sync point
and finally returns whether the invocation executed ``Return``:

- ``(BARRIER, site, None, None)`` at a Barrier; resumed with None.
- ``(SUBGROUP, site, resolver, operand)`` at a subgroup op; resumed with this lane's result.

``site`` identifies the statement, so the scheduler (:mod:`vyre.interp.machine`) can check that
all lanes wait at the same point. Statements without sync points stay plain closures from
:class:`~vyre.interp.compile.Compiler`, so a program without sync points never makes a generator.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator
from typing import Any

from ..errors import InterpError
from ..ir.expr import Expr, SubgroupBallot, SubgroupReduce, SubgroupShuffle
from ..ir.node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store, walk_nodes
from ..ir.ops import SUBGROUP_REDUCE_OPS
from ..ir.types import DataType
from .compile import Compiler, Ev, Regs, Scope, is_subgroup
from .scalar import binop_fn, zero_of

BARRIER = "barrier"
SUBGROUP = "subgroup"
Resolver = Callable[[list[tuple[int, Any]]], list[Any]]
"""Answers a subgroup op: ``[(lane, operand), ...]`` of the live lanes -> one result per lane."""
Gen = Generator[Any, Any, bool]
SyncStmt = Callable[[Regs], Gen]


def has_sync(nodes: tuple[Node, ...]) -> bool:
    """Whether ``nodes`` contain a Barrier or a subgroup op (as the value of a Let)."""
    return any(isinstance(n, Barrier) or (isinstance(n, Let) and is_subgroup(n.value))
               for n in walk_nodes(nodes))


class SyncCompiler(Compiler):
    """:class:`Compiler` plus generator statements for sync points."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sites = itertools.count()

    def program(self, entry: tuple[Node, ...]) -> tuple[bool, Callable[[Regs], Any]]:
        """Compile the entry body: ``(is_generator, fn)``."""
        sc = Scope(None)
        if has_sync(entry):
            return True, self.seq_sync(entry, sc)
        return False, self.seq(entry, sc)

    def seq_sync(self, nodes: tuple[Node, ...], sc: Scope) -> SyncStmt:
        items: list[tuple[bool, Any]] = [
            (True, self.sync_stmt(n, sc)) if has_sync((n,)) else (False, self.stmt(n, sc))
            for n in nodes
        ]

        def seq(r: Regs) -> Gen:
            for is_gen, s in items:
                if (yield from s(r)) if is_gen else s(r):
                    return True
            return False
        return seq

    def sync_stmt(self, n: Node, sc: Scope) -> SyncStmt:
        tick1 = self.tick(1)
        site = next(self._sites)
        match n:
            case Barrier():
                def barrier(r: Regs) -> Gen:
                    tick1()
                    yield (BARRIER, site, None, None)
                    return False
                return barrier
            case Let(name, value) if is_subgroup(value):
                operand, t, resolver, cost = self._subgroup(value, sc)
                tick = self.tick(cost + 1)
                slot = self.slot()
                sc.vars[name] = (slot, t, False)

                def let_sub(r: Regs) -> Gen:
                    tick()
                    r[slot] = yield (SUBGROUP, site, resolver, operand(r))
                    return False
                return let_sub
            case If(cond, then, otherwise):
                # Validation keeps sync points out of If; run it anyway and let the scheduler
                # report lanes that stop at different points.
                fc, cost = self.cond(cond, sc)
                tick = self.tick(cost)
                ft, fo = self.seq_sync(then, Scope(sc)), self.seq_sync(otherwise, Scope(sc))

                def if_(r: Regs) -> Gen:
                    tick()
                    return (yield from (ft(r) if fc(r) else fo(r)))
                return if_
            case Loop():
                slot, fs, fe, cost, inner = self.loop_head(n, sc)
                tick = self.tick(cost)
                body = self.seq_sync(n.body, inner)

                def loop(r: Regs) -> Gen:
                    tick()
                    for v in range(fs(r), fe(r)):
                        tick1()
                        r[slot] = v
                        if (yield from body(r)):
                            return True
                    return False
                return loop
            case Block(body) | Region(_, body):
                return self.seq_sync(body, Scope(sc))
            case Let() | Assign() | Store() | Return():
                raise AssertionError(f"{type(n).__name__} without a sync point is compiled by stmt")
            case _:
                raise TypeError(f"not a vyre node: {n!r}")

    def _subgroup(self, e: Expr, sc: Scope) -> tuple[Ev, DataType, Resolver, int]:
        """``(operand closure, result type, resolver, cost)`` of a subgroup op."""
        match e:
            case SubgroupBallot(cond):
                fc, tc, cc = self.expr(cond, sc)
                if tc is not DataType.BOOL:
                    raise InterpError(f"SubgroupBallot condition is {tc.short}, expected bool. "
                                      "Fix: compare to build a bool")
                return fc, DataType.U32, _ballot, cc + 1
            case SubgroupShuffle(value, src):
                fv, tv, cv = self.expr(value, sc)
                fl, tl, cl = self.expr(src, sc)
                if not tl.is_int:
                    raise InterpError(f"SubgroupShuffle lane is {tl.short}, expected u32. "
                                      "Fix: cast it to u32")
                return (lambda r: (fv(r), fl(r))), tv, _shuffle(zero_of(tv)), cv + cl + 1
            case SubgroupReduce(op, value):
                fv, tv, cv = self.expr(value, sc)
                rule = SUBGROUP_REDUCE_OPS.get(op)
                if rule is None or tv not in rule.operands:
                    raise InterpError(f"SubgroupReduce {op.name} on {tv.short} is not supported; "
                                      f"ops: {[k.name for k in SUBGROUP_REDUCE_OPS]}. Fix: use a listed op")
                return fv, tv, _reduce(binop_fn(op, tv)), cv + 1
            case _:
                raise TypeError(f"not a subgroup op: {e!r}")


def _ballot(ops: list[tuple[int, Any]]) -> list[Any]:
    mask = 0
    for lane, c in ops:
        if c:
            mask |= 1 << lane
    return [mask] * len(ops)


def _shuffle(zero: Any) -> Resolver:
    def shuffle(ops: list[tuple[int, Any]]) -> list[Any]:
        vals = {lane: v for lane, (v, _) in ops}
        return [vals.get(src_lane & 31, zero) for _, (_, src_lane) in ops]  # a dead lane reads 0
    return shuffle


def _reduce(f: Callable[[Any, Any], Any]) -> Resolver:
    def reduce(ops: list[tuple[int, Any]]) -> list[Any]:
        acc = ops[0][1]
        for _, v in ops[1:]:  # in lane order
            acc = f(acc, v)
        return [acc] * len(ops)
    return reduce
