"""Row loops shared by the row-wise programs (vyre.ops.rowwise) and matvec (vyre.ops.linalg).

A *row loop* visits the elements of one row of ``cols`` elements starting at ``base``:

* GPU form (``RowLoop(gpu=True)``): the ``lanes`` invocations that share the row (a workgroup, or
  one subgroup for matvec) each take elements ``lane, lane + lanes, ...``; ``unroll`` of them per
  step (independent accumulators, loads in flight), then a guarded tail step.
* CPU form: one invocation walks the row with stride 1 in steps of ``unroll`` elements, then the
  remainder one by one.

``reduce`` folds a term per element into accumulators merged pairwise; ``each`` runs statements per
element (the write pass)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir import DataType, Expr, Node, assign, if_, let, loop, select, u32, var
from ._blocks import Combine, tree


@dataclass(frozen=True)
class RowLoop:
    """``lane``: this invocation's position among the ``lanes`` sharing a row (GPU form)."""

    gpu: bool
    lanes: int
    unroll: int
    lane: Expr
    base: Expr
    cols: Expr

    def _indices(self, prefix: str, body: Callable[[list[Expr], bool], list[Node]]) -> list[Node]:
        """Statements visiting every column index; ``body(indices, guarded)`` gets the column
        indices of one step (``guarded``: some may be past the end; check ``< cols``)."""
        u = self.unroll
        if self.gpu:
            span = self.lanes * u
            b, tb = var(f"{prefix}_b"), var(f"{prefix}_tb")
            return [
                loop(f"{prefix}_c", u32(0), self.cols / u32(span), [
                    let(f"{prefix}_b", var(f"{prefix}_c") * u32(span) + self.lane),
                    *body([b + u32(k * self.lanes) if k else b for k in range(u)], False),
                ]),
                let(f"{prefix}_tb", (self.cols / u32(span)) * u32(span) + self.lane),
                *body([tb + u32(k * self.lanes) if k else tb for k in range(u)], True),
            ]
        p = var(f"{prefix}_p")
        m = self.cols / u32(u)
        return [
            loop(f"{prefix}_j", u32(0), m, [
                let(f"{prefix}_p", var(f"{prefix}_j") * u32(u)),
                *body([p + u32(k) if k else p for k in range(u)], False),
            ]),
            loop(f"{prefix}_q", m * u32(u), self.cols, body([var(f"{prefix}_q")], False)),
        ]

    def reduce(self, prefix: str, comb: Combine, t: DataType,
               term: Callable[[Expr], Expr]) -> tuple[list[Node], Expr]:
        """Fold ``term(element index)`` over this invocation's share of the row; returns the
        statements and the merged value (this invocation's part: combine across lanes after)."""
        accs = [f"{prefix}_a{k}" for k in range(self.unroll)]

        def body(idx: list[Expr], guarded: bool) -> list[Node]:
            out: list[Node] = []
            for k, j in enumerate(idx):
                v = term(self.base + j)
                if guarded:
                    v = select(j.lt(self.cols), v, comb.identity(t))
                name = accs[k % len(accs)]
                out.append(assign(name, comb.step(var(name), v)))
            return out

        nodes: list[Node] = [let(a, comb.identity(t)) for a in accs]
        return nodes + self._indices(prefix, body), tree([var(a) for a in accs], comb)

    def each(self, prefix: str, stmts: Callable[[Expr], list[Node]]) -> list[Node]:
        """``stmts(element index)`` for every element of this invocation's share."""
        def body(idx: list[Expr], guarded: bool) -> list[Node]:
            out: list[Node] = []
            for j in idx:
                s = stmts(self.base + j)
                out += [if_(j.lt(self.cols), s)] if guarded else s
            return out

        return self._indices(prefix, body)
