"""Row loops of the row-wise programs (vyre.ops.rowwise).

A *row loop* visits the elements of one row of ``cols`` elements starting at ``base``. Callbacks
get an accessor ``ld(buffer)`` giving the element's value in that buffer, and the element's index
into the matrix (``base + j``, for stores).

* GPU form, looping (``resident == 0``): the ``lanes`` invocations that share the row (a
  workgroup) each take columns ``lane, lane + lanes, ...``, ``unroll``
  of them per step (independent accumulators, loads in flight), then a guarded tail step.
* GPU form, resident (``resident == R``, for rows of at most ``lanes * R`` elements): each
  invocation loads its ``R`` elements once, into locals, the first time a buffer is used; every
  later pass (max, sum, write) works on those locals, so the row is read from memory once.
* CPU form: one invocation walks the row with stride 1. Reductions fold into a *lane array* of
  :data:`~vyre.ops.reduce.CPU_LANES` accumulators in workgroup memory (one invocation per
  workgroup, so it is private), as the whole-array reductions' CPU form does
  (vyre.ops._blocks.lane_fold: an elementwise loop LLVM vectorises, guard-free, then the lanes
  merge by halving); elementwise passes take one element per iteration.

In the looping forms a whole step of the main loop runs inside one ``If`` that every index of the
step is below the length of the buffers it touches. It always holds there, but it lets the
emitters drop the per-access bounds check (docs/codegen.md, "Bounds guards"), so a step's loads
issue together instead of each behind a branch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir import (
    BufferDecl, DataType, Expr, Node, assign, buflen, if_, let, load, loop, minimum, select, u32, var,
    workgroup,
)
from ..ir.expr import lit
from ._blocks import CPU_LANES, CPU_PAIR, Combine, all_of, bounded_span, lane_reduce, tree

#: CPU form: rows this long or longer reduce through a lane array, shorter ones into ``unroll``
#: scalar accumulators (measured, BENCHMARKS.md: 16-column rows ran 2x slower through lanes). 64
#: since the lanes stay in vector registers (codegen v18): 1000x100 f32 row_sum 55 -> 24 us, row_max
#: 74 -> 31, layer_norm 100 -> 49; 32 made 4000x32 slower (row_max 60 -> 80 us)
LANES_MIN_COLS = 64
#: the same for a reduction whose term is costly (an ``exp``: logsumexp's sum): into scalar
#: accumulators the term stays scalar, through a lane array it is vectorised, which pays from far
#: shorter rows (logsumexp of 1000x100 f32: 0.34x numpy with accumulators, 1.01x through lanes)
LANES_MIN_COLS_COSTLY = 16

Access = Callable[[str], Expr]


@dataclass
class RowLoop:
    """``lane``: this invocation's position among the ``lanes`` sharing a row (GPU form).
    Buffers are indexed by ``base + j``."""

    gpu: bool
    lanes: int
    unroll: int
    lane: Expr
    base: Expr
    cols: Expr
    resident: int = 0
    elements: dict[str, DataType] = field(default_factory=dict)  # element types (resident form)
    #: CPU form: reduce rows of at least LANES_MIN_COLS elements through lane arrays (not
    #: differentiable: reverse mode refuses workgroup memory written in a loop)
    lane_reduce: bool = False
    #: CPU form: the lane arrays the reductions use by name, one per accumulator type and the NaN
    #: flags of max/min (add them to the program)
    lane_arrays: dict[str, BufferDecl] = field(default_factory=dict)
    _cached: set[str] = field(default_factory=set)

    @staticmethod
    def _access(i: Expr) -> Access:
        return lambda b: load(b, i)

    def in_range(self, cols: list[Expr], bufs: tuple[str, ...]) -> Expr:
        """Every ``base + j`` below the length of every buffer."""
        return all_of([(self.base + j).lt(buflen(b)) for j in cols for b in bufs])

    # -- resident form ---------------------------------------------------------------------------

    def _col(self, k: int) -> Expr:
        return self.lane + u32(k * self.lanes) if k else self.lane

    def _cache(self, prefix: str, bufs: tuple[str, ...]) -> list[Node]:
        out: list[Node] = []
        if not self._cached:
            out += [let(f"rc_ok{k}", self._col(k).lt(self.cols)) for k in range(self.resident)]
        new = [b for b in bufs if b not in self._cached]
        if not new:
            return out
        self._cached.update(new)
        # A column past the row's end reads the next row (or zeros past the buffer): the value is
        # masked by rc_ok wherever it is used. Every row but the last is wholly inside the buffer,
        # so the loads run under one If that says so (the emitters then drop their bounds checks
        # and the loads issue together); the last row takes the checked loads.
        cols = [self._col(k) for k in range(self.resident)]
        out += [let(f"rc_{b}_{k}", lit(0, self.elements[b])) for b in new for k in range(self.resident)]
        loads = [assign(f"rc_{b}_{k}", load(b, self.base + c)) for b in new for k, c in enumerate(cols)]
        out.append(if_(self.in_range(cols, tuple(new)), loads, loads))
        return out

    def _resident_access(self, k: int) -> Access:
        return lambda b: var(f"rc_{b}_{k}")

    # -- passes ----------------------------------------------------------------------------------

    def _indices(self, prefix: str, body: Callable[[list[Expr], bool], list[Node]],
                 bufs: tuple[str, ...]) -> list[Node]:
        """Statements visiting every column; ``body(columns, guarded)`` gets the columns of one
        step (``guarded``: some may be past the end; check ``< cols``)."""
        u = self.unroll

        def step(idx: list[Expr]) -> list[Node]:
            return [if_(self.in_range(idx, bufs), body(idx, False))]

        if self.gpu:
            span = self.lanes * u
            b, tb = var(f"{prefix}_b"), var(f"{prefix}_tb")
            return [
                loop(f"{prefix}_c", u32(0), self.cols / u32(span), [
                    let(f"{prefix}_b", var(f"{prefix}_c") * u32(span) + self.lane),
                    *step([b + u32(k * self.lanes) if k else b for k in range(u)]),
                ]),
                let(f"{prefix}_tb", (self.cols / u32(span)) * u32(span) + self.lane),
                *body([tb + u32(k * self.lanes) if k else tb for k in range(u)], True),
            ]
        p = var(f"{prefix}_p")
        m = self.cols / u32(u)
        return [
            loop(f"{prefix}_j", u32(0), m, [
                let(f"{prefix}_p", var(f"{prefix}_j") * u32(u)),
                *step([p + u32(k) if k else p for k in range(u)]),
            ]),
            loop(f"{prefix}_q", m * u32(u), self.cols, step([var(f"{prefix}_q")])),
        ]

    def reduce(self, prefix: str, comb: Combine, t: DataType, term: Callable[[Access], Expr],
               bufs: tuple[str, ...], lanes_from: int = LANES_MIN_COLS) -> tuple[list[Node], Expr]:
        """Fold ``term(ld)`` over this invocation's share of the row (``bufs``: the buffers it
        reads); returns the statements and the merged value (this invocation's part: combine
        across lanes after). ``lanes_from``: CPU form, the shortest row that takes the lane array
        (:data:`LANES_MIN_COLS`, or :data:`LANES_MIN_COLS_COSTLY` for a costly term)."""
        if self.resident:
            nodes = self._cache(prefix, bufs)
            vals: list[Expr] = []
            for k in range(self.resident):
                nodes.append(let(f"{prefix}_v{k}", select(var(f"rc_ok{k}"), term(self._resident_access(k)),
                                                          comb.identity(t))))
                vals.append(var(f"{prefix}_v{k}"))
            more, total = tree(f"{prefix}_m", vals, comb)
            return nodes + more, total
        accs = [f"{prefix}_a{k}" for k in range(self.unroll)]

        def body(idx: list[Expr], guarded: bool) -> list[Node]:
            out: list[Node] = []
            for k, j in enumerate(idx):
                v = term(self._access(self.base + j))
                if guarded:
                    v = select(j.lt(self.cols), v, comb.identity(t))
                # bound once: max/min read their operand twice
                out.append(let(f"{prefix}_v{k}", v))
                name = accs[k % len(accs)]
                out.append(assign(name, comb.step(var(name), var(f"{prefix}_v{k}"))))
            return out

        nodes = [let(a, comb.identity(t)) for a in accs]
        more, total = tree(f"{prefix}_m", [var(a) for a in accs], comb)
        nodes += self._indices(prefix, body, bufs) + more
        if self.gpu or not self.lane_reduce:
            return nodes, total
        # CPU form: rows of at least ``lanes_from`` elements fold into a lane array (vectorised);
        # shorter ones keep the accumulators (a lane array's set-up and merge would dominate)
        res = f"{prefix}_res"
        lane_nodes, lane_total = self._lane_reduce(f"{prefix}_L", comb, t, term, bufs)
        return [let(res, comb.identity(t)),
                if_(self.cols.ge(u32(lanes_from)), [*lane_nodes, assign(res, lane_total)],
                    [*nodes, assign(res, total)])], var(res)

    def _lane_reduce(self, prefix: str, comb: Combine, t: DataType, term: Callable[[Access], Expr],
                     bufs: tuple[str, ...]) -> tuple[list[Node], Expr]:
        """CPU form of :meth:`reduce`: the row's span ``[base, base + cols)``, clipped to the
        buffers read (:func:`bounded_span`; a no-op for every row the program is dispatched over,
        but it lets the range analysis drop every guard), folded into this type's lane array."""
        lanes = workgroup(f"lanes_{t.name.lower()}", CPU_LANES, t)
        n: Expr = buflen(bufs[0])
        for b in bufs[1:]:
            n = minimum(n, buflen(b))
        p = f"{prefix}_"
        fold, total, more = lane_reduce(lanes, comb, lambda i: term(self._access(i)), CPU_PAIR, p)
        for decl in (lanes, *more):
            self.lane_arrays.setdefault(decl.name, decl)
        nodes: list[Node] = [
            let(f"{p}n", n),
            *bounded_span(var(f"{p}n"), self.base, self.cols, p),
            *fold,
            let(f"{p}tot", total),
        ]
        return nodes, var(f"{p}tot")

    def each(self, prefix: str, stmts: Callable[[Access, Expr], list[Node]], reads: tuple[str, ...],
             writes: tuple[str, ...]) -> list[Node]:
        """``stmts(ld, base + j)`` for every element of this invocation's share."""
        if self.resident:
            nodes = self._cache(prefix, reads)
            for k in range(self.resident):
                nodes.append(if_(var(f"rc_ok{k}"), stmts(self._resident_access(k), self.base + self._col(k))))
            return nodes

        def body(idx: list[Expr], guarded: bool) -> list[Node]:
            out: list[Node] = []
            for j in idx:
                s = stmts(self._access(self.base + j), self.base + j)
                out += [if_(j.lt(self.cols), s)] if guarded else s
            return out

        if not self.gpu:
            # one element per iteration: a loop LLVM vectorises (exp, stores), where the unrolled
            # steps' chains of conditions keep it scalar (measured 5x on a softmax's exp pass)
            j = var(f"{prefix}_q")
            return [loop(f"{prefix}_q", u32(0), self.cols, [
                if_(self.in_range([j], reads + writes), stmts(self._access(self.base + j), self.base + j))])]
        return self._indices(prefix, body, reads + writes)
