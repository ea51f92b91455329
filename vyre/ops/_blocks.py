"""IR building blocks shared by the op programs: how two partial results combine (with the NaN rule
of each reduction), identities, and the workgroup-wide reduction (subgroup reduce, one slot per
subgroup in workgroup memory, a barrier, a second subgroup reduce).

Every helper returns plain IR (statements and expressions); nothing here emits text."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable

from ..ir import (
    U32, BinOpKind, BufferDecl, DataType, Expr, Node, UnOpKind, barrier, cast, if_, lane, let,
    lid, loop, select, store, subgroup_reduce, u32, unop, var, workgroup,
)
from ..ir.expr import Var, lit

SUBGROUP = 32


class Combine(enum.Enum):
    """How partial results combine.

    ``ADD``: IEEE sum (NaN and inf propagate as in any sum). ``MAX``/``MIN``: NaN-propagating
    (``numpy.max`` semantics): once a NaN is seen the result is NaN. The IR's ``Max``/``Min`` are
    IEEE maxNum/minNum, which drop NaNs, so these are built from a comparison and a select, and the
    cross-lane step ORs a NaN flag beside the subgroup max/min."""

    ADD = "add"
    MAX = "max"
    MIN = "min"

    @property
    def binop(self) -> BinOpKind:
        return {Combine.ADD: BinOpKind.ADD, Combine.MAX: BinOpKind.MAX, Combine.MIN: BinOpKind.MIN}[self]

    def identity(self, t: DataType) -> Expr:
        return lit({Combine.ADD: 0.0, Combine.MAX: -math.inf, Combine.MIN: math.inf}[self], t)

    def step(self, acc: Expr, x: Expr) -> Expr:
        """``acc`` combined with one more value ``x`` (same float type)."""
        match self:
            case Combine.ADD:
                return acc + x
            case Combine.MAX:
                return select(x.gt(acc).or_(isnan(x)), x, acc)
            case Combine.MIN:
                return select(x.lt(acc).or_(isnan(x)), x, acc)


def isnan(e: Expr) -> Expr:
    return unop(UnOpKind.IS_NAN, e)


def nan(t: DataType) -> Expr:
    return lit(math.nan, t)


def tree(prefix: str, values: list[Expr], comb: Combine) -> tuple[list[Node], Expr]:
    """Pairwise combination ``((v0 . v1) . (v2 . v3)) ...``: the order every program uses to merge
    its accumulators (documented in docs/ops.md). Returns the statements and the result: every
    value and partial result is bound to a local first, since ``max``/``min`` read each operand
    twice (a nested expression would grow 4x per level: 16 values gave 3000 lines of PTX)."""
    nodes: list[Node] = []
    names = []
    for i, v in enumerate(values):
        if isinstance(v, Var):
            names.append(v.name)
        else:
            nodes.append(let(f"{prefix}_{i}", v))
            names.append(f"{prefix}_{i}")
    level = 0
    while len(names) > 1:
        nxt = []
        for i in range(0, len(names) - 1, 2):
            name = f"{prefix}_l{level}_{i // 2}"
            nodes.append(let(name, comb.step(var(names[i]), var(names[i + 1]))))
            nxt.append(name)
        if len(names) % 2:
            nxt.append(names[-1])
        names, level = nxt, level + 1
    return nodes, var(names[0])


def halving(lanes: BufferDecl, count: int, step: Callable[[Expr, Expr], Expr], prefix: str, base: int = 0
            ) -> list[Node]:
    """Merge the ``count`` (a power of two) slots of ``lanes`` pairwise into slot 0: level by level,
    slot ``k`` takes ``step(lanes[k], lanes[k + half])`` for ``half = count / 2, ..., 1`` (a loop per
    level, which LLVM vectorises; a tree of ``log2(count)`` levels). ``base``: the slots start there."""
    out: list[Node] = []
    half = count // 2
    while half >= 1:
        k: Expr = var(f"{prefix}{half}")
        a, b = var(f"{prefix}{half}_a"), var(f"{prefix}{half}_b")
        name = f"{prefix}{half}"
        if base:
            k = k + u32(base)
        out.append(loop(name, u32(0), u32(half), [
            let(a.name, lanes[k]), let(b.name, lanes[k + u32(half)]), store(lanes, k, step(a, b)),
        ]))
        half //= 2
    return out


def subgroup_combine(prefix: str, value: Expr, comb: Combine, t: DataType) -> tuple[list[Node], Expr]:
    """Statements reducing ``value`` over the 32 lanes of the subgroup; every lane gets the result.
    Must be placed at a uniform point."""
    s = f"{prefix}_s"
    nodes: list[Node] = [let(s, subgroup_reduce(comb.binop, value))]
    if comb is Combine.ADD:
        return nodes, var(s)
    f = f"{prefix}_nan"
    nodes.append(let(f, subgroup_reduce(BinOpKind.BIT_OR, cast(U32, isnan(value)))))
    return nodes, select(var(f).ne(u32(0)), nan(t), var(s))


def workgroup_combine(prefix: str, value: Expr, comb: Combine, t: DataType, wg: int
                      ) -> tuple[list[Node], Expr, list[BufferDecl]]:
    """Statements reducing ``value`` over a 1-D workgroup of ``wg`` invocations (a multiple of 32);
    every invocation gets the result. Uses one workgroup buffer (returned) of one slot per subgroup
    and one barrier; must be placed at a uniform point. Distinct prefixes give distinct buffers, so
    several reductions in one program need no barrier between reading one and writing the next."""
    nodes, warp = subgroup_combine(f"{prefix}_w", value, comb, t)
    nw = wg // SUBGROUP
    if nw == 1:
        return nodes, warp, []
    tile = workgroup(f"{prefix}_tile", nw, t)
    nodes += [
        let(f"{prefix}_wv", warp),
        if_(lane().eq(u32(0)), [store(tile, lid() / u32(SUBGROUP), var(f"{prefix}_wv"))]),
        barrier(),
        # every subgroup reads all nw slots, so every invocation ends up with the total
        let(f"{prefix}_part", select(lane().lt(u32(nw)), tile[lane()], comb.identity(t))),
    ]
    more, total = subgroup_combine(f"{prefix}_g", var(f"{prefix}_part"), comb, t)
    return nodes + more, total, [tile]
