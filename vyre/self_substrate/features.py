"""Static per-invocation counts of a program's IR: the feature stalks of ``vyre analyze``.

Counts are estimates per invocation: statements inside a ``Loop`` with literal bounds count once
per iteration; a loop with bounds only known at run time counts :data:`DYNAMIC_TRIP` iterations
(and is reported in ``dynamic_loops``). ``Call`` expressions count their inlined bodies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

from ..ir import (
    Assign, Atomic, Barrier, BinOp, Block, Call, Cast, Expr, Fma, If, Let, LitU32, Load, Loop,
    Node, Program, Region, Return, Select, Store, SubgroupBallot, SubgroupReduce, SubgroupShuffle, UnOp,
    inline_expr, node_exprs, walk, walk_nodes,
)

DYNAMIC_TRIP = 16


@dataclass(frozen=True)
class StaticCounts:
    """Static IR counts of one program (per invocation, loop-weighted where noted)."""

    arith: float = 0.0  # BinOp/UnOp/Select/Cast (Fma counts 2), loop-weighted
    load_bytes: float = 0.0  # bytes read by Load, loop-weighted
    store_bytes: float = 0.0  # bytes written by Store, loop-weighted
    branches: int = 0  # If statements (static)
    loops: int = 0  # Loop statements (static)
    atomics: float = 0.0  # Atomic expressions, loop-weighted
    barriers: float = 0.0  # Barrier statements, loop-weighted
    subgroup_ops: float = 0.0  # ballot/shuffle/reduce, loop-weighted
    workgroup_invocations: int = 1
    dynamic_loops: int = 0  # loops whose trip count is unknown statically


@dataclass(frozen=True)
class Feature:
    """One stalk component: how it is read off the counts and how much disagreement in it
    matters for fusion (its restriction weight)."""

    name: str
    read: Callable[[StaticCounts], float]
    weight: float


def _log2p(v: float) -> float:
    return math.log2(1.0 + max(v, 0.0))


# The feature table. Values are log2(1 + count) so a doubling is one unit in any component; the
# weights say how strongly fusion requires agreement: synchronisation and launch shape (atomics,
# barriers, subgroup ops, loops, workgroup size) must match for a fused kernel to keep both
# programs' semantics, while arithmetic and traffic only change the fused kernel's balance.
FEATURES: tuple[Feature, ...] = (
    Feature("arith", lambda c: _log2p(c.arith), 0.25),
    Feature("load_bytes", lambda c: _log2p(c.load_bytes), 0.25),
    Feature("store_bytes", lambda c: _log2p(c.store_bytes), 0.25),
    Feature("branches", lambda c: _log2p(c.branches), 0.25),
    Feature("loops", lambda c: _log2p(c.loops), 1.0),
    Feature("atomics", lambda c: _log2p(c.atomics), 1.0),
    Feature("barriers", lambda c: _log2p(c.barriers), 1.0),
    Feature("subgroup_ops", lambda c: _log2p(c.subgroup_ops), 1.0),
    Feature("workgroup", lambda c: math.log2(max(c.workgroup_invocations, 1)), 0.5),
)
FEATURE_NAMES = tuple(f.name for f in FEATURES)


def stalk(counts: StaticCounts) -> list[float]:
    return [f.read(counts) for f in FEATURES]


class _Counter:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.functions = {f.op_id: f for f in program.functions}
        self.acc = {f.name: 0.0 for f in fields(StaticCounts)}

    def elem_size(self, buffer: str) -> int:
        try:
            return self.program.buffer(buffer).element.size_bytes
        except KeyError:
            return 4

    def expr(self, e: Expr, w: float) -> None:
        if any(isinstance(x, Call) for x in walk(e)):
            e = inline_expr(e, self.functions)
        for x in walk(e):
            match x:
                case Fma():
                    self.acc["arith"] += 2 * w
                case BinOp() | UnOp() | Select() | Cast():
                    self.acc["arith"] += w
                case Load(buf, _):
                    self.acc["load_bytes"] += self.elem_size(buf) * w
                case Atomic():
                    self.acc["atomics"] += w
                case SubgroupBallot() | SubgroupShuffle() | SubgroupReduce():
                    self.acc["subgroup_ops"] += w
                case _:
                    pass  # literals, ids, variables, BufLen: free

    def body(self, nodes: tuple[Node, ...], w: float) -> None:
        for n in nodes:
            self.node(n, w)

    def node(self, n: Node, w: float) -> None:
        match n:
            case Let(_, v) | Assign(_, v):
                self.expr(v, w)
            case Store(buf, i, v):
                self.expr(i, w)
                self.expr(v, w)
                self.acc["store_bytes"] += self.elem_size(buf) * w
            case If(c, then, otherwise):
                self.acc["branches"] += 1
                self.expr(c, w)
                self.body(then, w)
                self.body(otherwise, w)
            case Loop(_, start, end, body):
                self.acc["loops"] += 1
                self.expr(start, w)
                self.expr(end, w)
                if isinstance(start, LitU32) and isinstance(end, LitU32):
                    trip = float(max(0, end.value - start.value))
                else:
                    trip = float(DYNAMIC_TRIP)
                    self.acc["dynamic_loops"] += 1
                self.body(body, w * trip)
            case Block(body) | Region(_, body):
                self.body(body, w)
            case Barrier():
                self.acc["barriers"] += w
            case Return():
                pass
            case _:
                raise TypeError(f"not a vyre node: {n!r}")


def static_counts(program: Program) -> StaticCounts:
    """Count ``program``'s IR (see the module docs for the weighting)."""
    c = _Counter(program)
    c.body(program.entry, 1.0)
    a = c.acc
    return StaticCounts(
        arith=a["arith"], load_bytes=a["load_bytes"], store_bytes=a["store_bytes"],
        branches=int(a["branches"]), loops=int(a["loops"]), atomics=a["atomics"],
        barriers=a["barriers"], subgroup_ops=a["subgroup_ops"],
        workgroup_invocations=program.workgroup_invocations, dynamic_loops=int(a["dynamic_loops"]),
    )


def _touched(program: Program) -> tuple[set[str], set[str]]:
    """(buffers read, buffers written) by the body, storage buffers only."""
    storage = {b.name for b in program.buffers if not b.is_workgroup}
    reads: set[str] = set()
    writes: set[str] = set()
    for n in walk_nodes(program.entry):
        if isinstance(n, Store) and n.buffer in storage:
            writes.add(n.buffer)
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, Load) and x.buffer in storage:  # BufLen reads no contents
                    reads.add(x.buffer)
                elif isinstance(x, Atomic) and x.buffer in storage:
                    reads.add(x.buffer)
                    writes.add(x.buffer)
    return reads, writes


def buffers_read(program: Program) -> set[str]:
    """Storage buffers the program reads: read-only/uniform declarations, and any buffer it
    loads or atomically updates (asking a buffer's length is not a data dependence)."""
    declared = {b.name for b in program.buffers if not b.is_workgroup and not b.access.writable}
    return declared | _touched(program)[0]


def buffers_written(program: Program) -> set[str]:
    """Storage buffers the program writes: store and atomic targets, and declared outputs."""
    declared = {b.name for b in program.buffers if not b.is_workgroup and b.is_output}
    return declared | _touched(program)[1]
