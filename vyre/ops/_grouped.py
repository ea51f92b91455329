"""Rows in groups: the CPU form of ``matvec`` (vyre.ops.linalg), of the sums of short rows
(vyre.ops.rowwise: ``sum``, ``mean`` and ``norm`` along the last axis of rows of 8-255 columns)
and of their argmax (vyre.ops.argreduce, 24-255 columns).

One invocation per workgroup, a block of consecutive rows per workgroup (about ``CPU_BLOCK``
elements, a multiple of ``CPU_GROUP`` rows; blocks run on every core), ``CPU_GROUP`` rows at a
time. Row ``i`` of the group accumulates into its ``CPU_LANES`` slots ``[i L, (i + 1) L)`` of one
lane array in workgroup memory, all rows of the group in one elementwise loop over the step's
columns (``lanes[i L + k] += term(row i, column p + k)``), which LLVM vectorises: a loop-carried
scalar sum stays scalar without fast-math (docs/ops.md), and one array rather than one per row
keeps the vectoriser's run-time alias checks to two. The lane array lives in the kernel's stack
frame, and with 16 slots a row a group's 64 accumulators stay in vector registers for the whole
row. A row's last ``< CPU_LANES`` columns go one per lane, then each row's lanes merge pairwise
(vyre.ops._blocks.halving). A group's rows past the block's end read the block's last row and
store nothing.

Every index is proven in range (vyre/codegen/ranges.py), so no loop has a guard: rows read the
matrix's row ``min(r, mlast)`` (``mlast``: the last row it holds) over ``min(cols, len)``
columns, in bounds whatever the lengths (rows the matrix does not hold get another row's sum).

Against one row per invocation through 64 lanes (vyre.ops._rows), which pays a lane array's set-up
and merge per row: 2-3x faster for rows of 16-48 columns, 1.2-1.7x for 64-128, about even at
256 and past it (row sums on the 2-core VM, BENCHMARKS.md)."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import (
    BufferDecl, DataType, Expr, Node, Program, buflen, if_, let, loop, maximum, minimum, store, u32, var, wgid,
    workgroup,
)
from ..ir.expr import lit
from ._blocks import CPU_BLOCK, bounded_span, halving

__all__ = ["CPU_GROUP", "CPU_LANES", "cpu_rows_per_block", "cpu_workgroups", "grouped_program", "grouped_rows"]

#: rows that share each step's loop (matvec: its load of ``v``): 1.4-2x over one row at a time; 8
#: rows measured another 10% at twice the compile time, 6 s cold
CPU_GROUP = 4
#: accumulators per row. With 16 a group's 64 accumulators fit the vector registers, so the loop
#: keeps them there (no load and store per step): matvec serial kernel 4096x4096 f32 2.77 ->
#: 2.28 ms, 256x256 16.8 -> 8.5 us; 32 lanes 2.47 ms, 64 3.34 ms (spills), 8 lanes with 4 rows
#: 7.6 ms (BENCHMARKS.md)
CPU_LANES = 16

#: (row i of the group, the element's index into the matrix, its column, its lane slot, the step's
#: shared value or None, a name for a temporary) -> the statements adding the element into its slot
Add = Callable[[int, Expr, Expr, Expr, Expr | None, str], list[Node]]


def cpu_rows_per_block(cols: int) -> int:
    """Rows per workgroup (block), a multiple of CPU_GROUP, about CPU_BLOCK elements; the program
    computes the same number from its column count, so the host launches :func:`cpu_workgroups`."""
    return CPU_GROUP * ((CPU_BLOCK // CPU_GROUP + cols) // (cols + 1))


def cpu_workgroups(rows: int, cols: int) -> int:
    """Workgroups a grouped-rows program is launched over for ``rows`` rows of ``cols`` columns:
    one per block of :func:`cpu_rows_per_block` rows."""
    return -(-rows // cpu_rows_per_block(cols))


def grouped_rows(bufs: list[BufferDecl], a: DataType, *, matrix: str, out: str, cols: Expr, add: Add,
                 shared: Callable[[Expr], Expr] | None, total: Callable[[Expr], Expr]) -> Program:
    """The grouped-rows sum over ``bufs`` (a lane array ``lanes`` of accumulator type ``a`` is
    added): ``out[r] = total(the sum of add's terms over row r)`` for rows of ``cols`` elements of
    the flat ``matrix``. ``shared(j)``: a value of column ``j`` that every row of the group uses
    (matvec's widened ``v[j]``), bound once per column and handed to ``add``."""
    lanes = workgroup("lanes", CPU_GROUP * CPU_LANES, a)
    k = var("k")

    def finish() -> list[Node]:  # per row of the group: merge its lanes, store its total
        nodes: list[Node] = []
        for i in range(CPU_GROUP):
            row = var("r") + u32(i) if i else var("r")
            nodes += [*halving(lanes, CPU_LANES, lambda x, y: x + y, f"rm{i}", i * CPU_LANES),
                      if_(row.lt(var("hi")), [store(out, row, total(lanes[u32(i * CPU_LANES)]))])]
        return nodes

    return grouped_program(bufs, [lanes], matrix=matrix, out=out, cols=cols, add=add, shared=shared,
                           init=[loop("k", u32(0), buflen(lanes), [store(lanes, k, lit(0.0, a))])], finish=finish)


def grouped_program(bufs: list[BufferDecl], lanes: list[BufferDecl], *, matrix: str, out: str, cols: Expr,
                    add: Add, shared: Callable[[Expr], Expr] | None, init: list[Node],
                    finish: Callable[[], list[Node]]) -> Program:
    """The grouped-rows loop nest over ``bufs`` and the lane arrays ``lanes`` (CPU_GROUP *
    CPU_LANES slots each, slot ``i L + k`` for row ``i`` of the group): per group ``init``, then
    ``add`` for every element of the group's rows (columns in increasing order per slot: slot ``k``
    of a row sees columns ``k, k + L, ...`` and then its tail column ``t0 + k``), then
    ``finish()``: the group's answers, for rows ``var("r") + i`` that are below the block's end
    ``var("hi")`` (the group's rows past it store nothing). ``var("b<i>")`` is row ``i``'s first
    element in ``matrix`` and ``var("cols")`` / ``var("ce")`` the columns and those ``matrix``
    holds, for ``finish``."""
    k, p, r = var("k"), var("p"), var("r")
    bases = [var(f"b{i}") for i in range(CPU_GROUP)]

    def column(j: Expr, slot: Expr, tmp: str) -> list[Node]:
        w = None
        nodes: list[Node] = []
        if shared is not None:
            nodes.append(let("w", shared(j)))
            w = var("w")
        for i in range(CPU_GROUP):
            nodes += add(i, bases[i] + j, j, slot + u32(i * CPU_LANES) if i else slot, w, f"{tmp}{i}")
        return nodes

    group: list[Node] = [
        let("r", var("lo") + var("gi") * u32(CPU_GROUP)),
        *(let(f"b{i}", minimum(minimum(r + u32(i), var("hi") - u32(1)), var("mlast")) * var("cols"))
          for i in range(CPU_GROUP)),
        *init,
        loop("j", u32(0), var("steps"), [
            let("p", var("j") * u32(CPU_LANES)),
            loop("k", u32(0), u32(CPU_LANES), column(p + k, k, "x")),
        ]),
        loop("q", var("t0"), var("ce"), column(var("q"), var("q") - var("t0"), "y")),
    ]
    group += finish()
    c = var("cols")
    body: list[Node] = [
        let("cols", cols),
        let("ce", minimum(c, buflen(matrix))),
        let("c1", maximum(c, u32(1))),
        let("mlast", maximum(buflen(matrix) / var("c1"), u32(1)) - u32(1)),
        let("per", u32(CPU_GROUP) * ((u32(CPU_BLOCK // CPU_GROUP) + c) / (c + u32(1)))),
        *bounded_span(buflen(out), wgid() * var("per"), var("per")),  # this block's rows [lo, hi)
        let("steps", var("ce") / u32(CPU_LANES)),
        let("t0", var("steps") * u32(CPU_LANES)),
        loop("gi", u32(0), (var("len") + u32(CPU_GROUP - 1)) / u32(CPU_GROUP), group),
    ]
    return Program.wrapped([*bufs, *lanes], 1, body)
