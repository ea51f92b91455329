"""``argmax``: the flat index of the first maximum (numpy's rule: the first NaN if there is one).

Like the whole-array reductions (vyre.ops.reduce, whose forms, blocks and partials it shares) it
runs in passes, carrying (value, index) pairs: a first pass over the elements, whose index is
their position, then passes over the partials with their indices (``indexed``), until one pair is
left. The GPU form keeps unrolled pairs per invocation, then combines across the subgroup and the
workgroup; the CPU form folds a block into a lane array one segment at a time and scans one
segment of each lane that holds the maximum (docs/ops.md).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any


from ..ir import (
    U32, BinOpKind, BufferDecl, DataType, Expr, Node, Program, assign, barrier, buflen, gid, if_, lane, let,
    lid, load, loop, maximum, minimum, output, read, select, store, subgroup_reduce, u32, var, wgid, workgroup,
)
from ..ir.expr import lit
from ._axes import Along, along, matrix_axis, per_row, to_rows, whole_keepdims
from ._blocks import (
    NO_INDEX, SUBGROUP, Combine, all_of, beats, bounded_span, halving, isnan, lane_fold, merge_argmax, nan,
    nan_flags, subgroup_combine, takes,
)
from ._grouped import CPU_GROUP, cpu_workgroups, grouped_program
from ._grouped import CPU_LANES as GROUP_LANES
from ._rows import LANES_MIN_COLS, Access
from ._plans import planned
from ._sites import Site
from ._runtime import OpsError, host_indices, prepare
from .colwise import MIN_INNER, column_block, reduce_columns, reduce_matrix_columns
from .rowwise import RowBuilder, prepare_rows
from .reduce import (
    CPU_BLOCK_EXACT, CPU_LANES, CPU_PAIR, GPU_UNROLL, GPU_WG, _block_bounds, _cap, _gpu_form, _partials,
)

__all__ = ["ARGMAX_SNAPSHOT_BYTES", "NO_INDEX", "argmax", "argmax_program", "grouped_row_argmax_program", "row_argmax",
           "row_argmax_program"]

#: CPU argmax: bytes of the lanes' snapshots, one per segment of the block (its stack share,
#: vyre/codegen/cpu.py STACK_BYTES): 16 segments of 8192 f32 or 8 of 16384 f64 elements cover a
#: block of CPU_BLOCK_EXACT. The lowest index holding a block's maximum is searched in one segment
#: of each lane holding it, 128 or 256 strided loads instead of the block's 2048. Serial kernel,
#: 2^16 elements: f32 5.5 -> 4.5 us, f64 9.1 -> 8.4 (max: 3.9, 7.4); a heap snapshot (more segments)
#: cost 0.1-0.3 us more at 2^12
ARGMAX_SNAPSHOT_BYTES = 4096


@functools.lru_cache(maxsize=64)
def argmax_program(t: DataType, *, gpu: bool, indexed: bool) -> Program:
    """One argmax pass: ``val[g], idx[g]`` = the maximum of workgroup/block ``g``'s share of ``x``
    and the lowest index holding it (the first NaN's index if there is a NaN; ``0xFFFFFFFF`` for an
    empty share). ``indexed``: the input is a previous pass's partials, whose indices are in
    ``xi``; otherwise an element's index is its position."""
    bufs = [read("x", 0, t)]
    if indexed:
        bufs.append(read("xi", 1, U32))
    val, idx = output("val", len(bufs), t), output("idx", len(bufs) + 1, U32)
    bufs += [val, idx]
    if not gpu:
        return _argmax_lanes(t, bufs, indexed)
    n = var("n")
    body: list[Node] = [let("n", buflen("x"))]

    s = var("stride")
    body += [let("t", gid()), let("stride", buflen(val) * u32(GPU_WG))]
    if indexed:
        # the partials of a first pass: their indices follow no order, every pair is compared
        i = var("i")
        body += [
            let("m", lit(-math.inf, t)), let("mi", u32(NO_INDEX)),
            let("steps", (n + s - u32(1)) / s),
            loop("c", u32(0), var("steps"), [
                let("i", var("c") * s + var("t")),
                if_(i.lt(n).and_(beats(load("x", i), load("xi", i), var("m"), var("mi"))),
                    [assign("m", load("x", i)), assign("mi", load("xi", i))]),
            ]),
        ]
    else:
        body += _argmax_strided(t, n, s)
    nodes, gm, gi, tiles = _workgroup_argmax(t, var("m"), var("mi"), GPU_WG)
    bufs += tiles
    body += nodes
    body.append(if_(lid().eq(u32(0)), [store(val, wgid(), gm), store(idx, wgid(), gi)]))
    return Program.wrapped(bufs, GPU_WG, body)


def _workgroup_argmax(t: DataType, m: Expr, mi: Expr, wg: int) -> tuple[list[Node], Expr, Expr, list[BufferDecl]]:
    """The (maximum, lowest index holding it) over a workgroup of ``wg`` invocations, each holding
    its candidate ``(m, mi)``: across each subgroup the maximum (NaN flagged separately), then the
    lowest index among the lanes holding it; one slot pair per subgroup in workgroup memory, a
    barrier, and the same over the slots. Every invocation gets the result. Returns the
    statements, the maximum, its index and the workgroup buffers used."""
    nodes, wmax = subgroup_combine("w", m, Combine.MAX, t)
    body: list[Node] = [*nodes, let("wm", wmax), *_lowest_index("w", m, mi, var("wm"))]
    nw = wg // SUBGROUP
    if nw == 1:
        return body, var("wm"), var("w_i"), []
    tv, ti = workgroup("tv", nw, t), workgroup("ti", nw, U32)
    body += [
        if_(lane().eq(u32(0)), [store(tv, lid() / u32(SUBGROUP), var("wm")),
                                store(ti, lid() / u32(SUBGROUP), var("w_i"))]),
        barrier(),
        let("pm", select(lane().lt(u32(nw)), tv[lane()], lit(-math.inf, t))),
        let("pi", select(lane().lt(u32(nw)), ti[lane()], u32(NO_INDEX))),
    ]
    nodes, gmax = subgroup_combine("g", var("pm"), Combine.MAX, t)
    body += [*nodes, let("gm", gmax), *_lowest_index("g", var("pm"), var("pi"), var("gm"))]
    return body, var("gm"), var("g_i"), [tv, ti]


def _argmax_strided(t: DataType, n: Expr, s: Expr) -> list[Node]:
    """GPU argmax, first pass: invocation ``t`` visits ``t, t + s, ...`` into :data:`GPU_UNROLL`
    independent (maximum, index) pairs, as the sums' GPU form does (that many loads in flight per
    invocation; one pair took 0.15 ms for 2^26 f32 on an H200, `max` 0.066), then merges them
    into ``m``, ``mi``. Pair ``k`` sees its elements in increasing index order, so it takes an
    element while it holds none yet, or when the element is NaN or larger, until it holds a NaN:
    the first NaN, else the first maximum, without comparing indices."""
    unroll = GPU_UNROLL
    su = var("span")

    def take(k: int, i: Expr, v: str) -> list[Node]:
        m, mi = var(f"m{k}"), var(f"mi{k}")
        x = var(v)
        return [let(v, load("x", i)),
                if_(takes(x, m, mi), [assign(m.name, x), assign(mi.name, i)])]

    body: list[Node] = []
    for k in range(unroll):
        body += [let(f"m{k}", lit(-math.inf, t)), let(f"mi{k}", u32(NO_INDEX))]
    idx = [var("b") + s * u32(k) if k else var("b") for k in range(unroll)]
    tail = [var("tb") + s * u32(k) if k else var("tb") for k in range(unroll)]
    body += [
        let("span", s * u32(unroll)),
        let("full", n / su),
        loop("c", u32(0), var("full"), [
            let("b", var("c") * su + var("t")),
            # one If that the whole step is in range lets the emitters drop each load's check
            if_(all_of([i.lt(buflen("x")) for i in idx]),
                [x for k, i in enumerate(idx) for x in take(k, i, f"v{k}")]),
        ]),
        let("tb", var("full") * su + var("t")),
        *(if_(i.lt(n), take(k, i, f"w{k}")) for k, i in enumerate(tail)),
    ]
    # merge the pairs (indices now in any order: the full comparison)
    nodes, m, mi = merge_argmax("p", [(var(f"m{k}"), var(f"mi{k}")) for k in range(unroll)])
    return [*body, *nodes, let("m", m), let("mi", mi)]


def _argmax_lanes(t: DataType, bufs: list[BufferDecl], indexed: bool) -> Program:
    """The CPU form of :func:`argmax_program`, one invocation per workgroup and a block per
    workgroup. The block is folded into a lane array of maxima (NaN flags beside) as in
    :func:`_lane_program`, one *segment* at a time (:data:`ARGMAX_SNAPSHOT_BYTES`);
    after each segment the lanes are copied to a snapshot (a lane with a NaN as NaN). Lane ``k``
    holds the elements ``lo + k + j L``; its maximum first appears in the first segment whose
    snapshot of lane ``k`` already holds the block's maximum (the snapshots only grow), so the
    lowest index holding it is found by scanning that segment's elements of the lane only (a
    64th of a segment), for every lane that holds the maximum and could still beat the best
    index so far. An element's index is its position, or ``xi`` of it after the first pass
    (empty shares, ``0xFFFFFFFF``, come last in position, so the first hit of a lane is never
    one unless the lane has no other)."""
    lm = workgroup("lanes_m", CPU_LANES, t)
    lf = nan_flags(lm)
    segments = ARGMAX_SNAPSHOT_BYTES // (CPU_LANES * t.size_bytes)
    snap = workgroup("lanes_snap", segments * CPU_LANES, t)
    least = CPU_BLOCK_EXACT // segments  # elements per segment, at least
    val, idx = bufs[-2], bufs[-1]
    bufs = [*bufs, lm, lf, snap]
    g, k, mx, best = var("g"), var("k"), var("mx"), var("best")
    lanes = u32(CPU_LANES)

    def hit(v: Expr) -> Expr:
        """Is ``v`` (an element or a snapshot) the block's maximum (a NaN: any NaN)?"""
        return select(isnan(mx), isnan(v), v.eq(mx))

    def visit(i: Expr, tmp: str) -> list[Node]:
        """``best = min(best, index of i)`` where element ``i`` holds the maximum."""
        gi = var(f"{tmp}_i")
        if not indexed:
            # the index is the position, known before the load: a lane's elements come in order,
            # so once one holds the maximum the rest of the lane is skipped without loading it
            return [if_(i.lt(best), [let(f"{tmp}_v", load("x", i)),
                                     if_(hit(var(f"{tmp}_v")), [assign("best", i)])])]
        return [let(f"{tmp}_v", load("x", i)), let(gi.name, load("xi", i)),
                if_(hit(var(f"{tmp}_v")).and_(gi.lt(best)), [assign("best", gi)])]

    seg, ns, s = var("seg"), var("ns"), var("s")

    def slot(segment: Expr) -> Expr:
        """Lane k's snapshot after ``segment`` (``< ns <= segments``; the clamp lets the range
        analysis prove it, so the kernel has no guard)."""
        return minimum(segment, u32(segments - 1)) * lanes + k

    # lane k's elements of the segment: whole steps, then the one in the last partial step
    scan: list[Node] = [
        let("f_m", var("f_len") / lanes),
        loop("b_j", u32(0), var("f_m"), visit(var("f_lo") + var("b_j") * lanes + k, "b")),
        let("f_t", var("f_lo") + var("f_m") * lanes + k),
        if_(var("f_t").lt(var("f_hi")), visit(var("f_t"), "c")),
    ]
    if not indexed:
        # a lane whose first element there is past the best index so far cannot beat it (after
        # the first pass an index is xi's, not the position)
        scan = [if_((var("f_lo") + k).lt(best), scan)]
    body: list[Node] = [
        *_block_bounds(["x", "xi"] if indexed else ["x"], buflen(val)),
        let("g", wgid()),
        loop("k", u32(0), buflen(lm), [store(lm, k, lit(-math.inf, t)), store(lf, k, u32(0))]),
        # segments: ``least`` elements, longer where the block needs more than the snapshots
        # hold (a multiple of the pair step, so every segment but the last has whole steps);
        # ``len / (S * 2L) + 1`` first: nothing wraps near 2^32
        let("seg", maximum(u32(least), (var("len") / u32(segments * CPU_LANES * CPU_PAIR) + u32(1))
                           * u32(CPU_LANES * CPU_PAIR))),
        let("ns", select(var("len").eq(u32(0)), u32(0), (var("len") - u32(1)) / seg + u32(1))),
        loop("s", u32(0), ns, [
            *bounded_span(var("hi"), var("lo") + s * seg, seg, "s_"),
            # lane k of every segment holds the elements lo + k + j L: segments start at multiples
            # of the pair step from lo
            *lane_fold(lm, Combine.MAX, lambda i: load("x", i), CPU_PAIR, "s_", flags=lf),
            if_(ns.gt(u32(1)), [loop("k", u32(0), buflen(lm), [
                store(snap, slot(s), select(lf[k].ne(u32(0)), nan(t), lm[k]))])]),
        ]),
        let("mx", lit(-math.inf, t)),
        let("nf", u32(0)),
        loop("k", u32(0), buflen(lm), [let("c", lm[k]), assign("mx", Combine.MAX.ordered_step(mx, var("c"))),
                                       assign("nf", var("nf") | lf[k])]),
        assign("mx", select(var("nf").ne(u32(0)), nan(t), mx)),
        let("best", u32(NO_INDEX)),
        loop("k", u32(0), buflen(lm), [
            if_(select(isnan(mx), lf[k].ne(u32(0)), lm[k].eq(mx)), [
                # the first segment whose snapshot of lane k holds the maximum (of one: that one,
                # without snapshots: a short block's work is mostly this bookkeeping)
                let("fs", u32(0)),
                if_(ns.gt(u32(1)), [
                    assign("fs", ns),
                    loop("f_s", u32(0), ns, [
                        if_(var("fs").eq(ns).and_(hit(snap[slot(var("f_s"))])), [assign("fs", var("f_s"))]),
                    ]),
                ]),
                let("f_at", var("fs")),  # never assigned: the range analysis reads its definition's users
                *bounded_span(var("hi"), var("lo") + var("f_at") * seg, seg, "f_"),
                *scan,
            ]),
        ]),
        if_(g.lt(buflen(val)), [store(val, g, mx), store(idx, g, best)]),
    ]
    return Program.wrapped(bufs, 1, body)


def _lowest_index(prefix: str, m: Expr, mi: Expr, best: Expr) -> list[Node]:
    """``<prefix>_i``: the lowest index among lanes whose value is ``best`` (NaN matches NaN)."""
    hit = select(isnan(best), isnan(m), m.eq(best))
    return [
        let(f"{prefix}_c", select(hit, mi, u32(NO_INDEX))),
        let(f"{prefix}_i", subgroup_reduce(BinOpKind.MIN, var(f"{prefix}_c"))),
    ]


def argmax(x: Any, axis: Any = None, *, keepdims: bool = False, backend: str | None = None,
           deterministic: bool = False) -> Any:
    """Flat index of the first maximum (numpy's rule: the first NaN if there is one), as an int64
    scalar (numpy) or 0-d uint32 device array (device input). An empty array is an error. With
    ``axis`` (an int or a tuple of ints, as numpy reads them) the index along those axes of each
    position of the others (:func:`row_argmax`, or the column forms: int64 for numpy, uint32 on the device; a
    tuple's axes count as one, flattened in order, as if moved last); every axis named is the
    whole-array index. ``keepdims``: each reduced axis stays, of length 1 (numpy's ``keepdims``)."""
    return _ARGMAX_SITE.one(x, axis, keepdims, backend, deterministic)


def _argmax_route(x: Any, axis: Any, keepdims: Any, backend: str | None, deterministic: Any) -> Any:
    if axis is not None and not keepdims:
        m = matrix_axis(x, axis)  # a matrix's rows or columns, without reading the axes
        if m == 1:
            return host_indices(planned(("row_argmax", None), (x,), backend, _row_argmax_checked))
        if m == 0 and x.shape[1] >= MIN_INNER:
            return reduce_matrix_columns("argmax", x, backend)
    if axis is not None or keepdims:
        al = along(x, axis)
        if al.whole:
            whole = planned(("argmax", deterministic, None), (x,), backend, _argmax_checked)
            return whole_keepdims(whole, al) if keepdims else whole
        block = column_block(al)
        if block is not None:
            return reduce_columns("argmax", x, al, block, keepdims, backend)
        return row_argmax(x, al, backend, keepdims)
    return planned(("argmax", deterministic, None), (x,), backend, _argmax_checked)


_ARGMAX_SITE = Site(_argmax_route)


def _argmax(x: Any, backend: str | None, gpu_form: bool | None = None, deterministic: bool = False) -> Any:
    return planned(("argmax", deterministic, gpu_form), (x,), backend, _argmax_checked)


@functools.lru_cache(maxsize=1024)
def _argmax_passes(t: DataType, n: int, gpu: bool, cap: int) -> tuple[tuple[Program, int], ...]:
    """argmax's passes over ``n`` elements of ``t``: per pass its program and workgroups / blocks;
    every pass after the first reads the partials with their indices."""
    out: list[tuple[Program, int]] = []
    g = _partials(n, gpu, cap, exact=True)
    while True:
        out.append((argmax_program(t, gpu=gpu, indexed=bool(out)), g))
        if g == 1:
            return tuple(out)
        g = _partials(g, gpu, cap, exact=True)


def _argmax_checked(op: tuple[str, bool, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    _, deterministic, gpu_form = op
    (x,) = inputs
    ctx, arrs = prepare({"x": x}, backend)
    if gpu_form is not None:
        ctx.gpu_form = gpu_form
    n = arrs["x"].size
    if n == 0:
        raise OpsError("argmax of an empty array has no answer. Fix: check x.size > 0 before calling")
    t = arrs["x"].dtype
    gpu = _gpu_form(ctx)
    reads: dict[str, Any] = {"x": arrs["x"].data}
    cap = _cap(ctx, argmax_program(t, gpu=True, indexed=False), deterministic) if gpu else 0
    for prog, g in _argmax_passes(t, n, gpu, cap):
        val, idx = ctx.empty(g, t), ctx.empty(g, U32)
        ctx.run(prog, {**reads, "val": val, "idx": idx}, g)
        reads = {"x": val, "xi": idx}
    return ctx.index(idx)


# ---------------------------------------------------------------------------------------------
# Along axes: an index per row (vyre.ops.rowwise's row programs and rows)


@functools.lru_cache(maxsize=32)
def row_argmax_program(t: DataType, *, gpu: bool, wg: int = 256, resident: int = 0, lanes: bool = False
                       ) -> Program:
    """``idx[r]`` (u32): the column of row ``r``'s first maximum, numpy's rule (the first NaN if
    the row has one; ties to the lowest column); ``NO_INDEX`` for an empty row. GPU form: each
    invocation keeps the first maximum of its share, which it visits in increasing order, and
    the workgroup combines the (value, column) pairs once (:func:`_workgroup_argmax`). The CPU
    form makes one pass through lane slots (:func:`_row_argmax_cpu`)."""
    b = RowBuilder(gpu, wg, "idx", resident, lanes)
    b.buf(read("x", 0, t))
    b.buf(output("idx", 1, U32))
    rl = b.begin("x")
    if not gpu:
        b.stmts += _row_argmax_cpu(b, t)
        b.store_stat("idx", var("best"))
        return b.program()
    # each invocation visits its columns in increasing order (resident: lane + k * wg; looping:
    # the steps in order), so it keeps its first maximum without comparing columns; then one
    # combine of (value, column) pairs over the workgroup
    b.stmts += [let("m", lit(-math.inf, t)), let("mi", u32(NO_INDEX))]

    names = itertools.count()

    def visit(ld: Access, i: Expr) -> list[Node]:
        v = var(f"v{next(names)}")  # one name per element: an unrolled step visits several in one scope
        return [let(v.name, ld("x")),
                if_(takes(v, var("m"), var("mi")), [assign("m", v), assign("mi", i - var("base"))])]

    b.stmts += rl.each("f", visit, ("x",), ())
    nodes, _, gi, tiles = _workgroup_argmax(t, var("m"), var("mi"), wg)
    b.stmts += nodes
    b.bufs += tiles
    b.store_stat("idx", gi)
    return b.program()


def _row_argmax_cpu(b: RowBuilder, t: DataType) -> list[Node]:
    """The CPU form of :func:`row_argmax_program`: one pass over the row into ``best``. Each slot
    of a lane array keeps the largest value it has seen and its column (it sees its columns in
    increasing order and takes only a larger value: the first of ties), with a NaN flag beside
    (NaNs are never taken); rows shorter than :data:`~vyre.ops._rows.LANES_MIN_COLS` use one slot.
    The row's maximum is the lanes' (halved in a copy), its column the lowest of the lanes holding
    it. Only a row with a NaN is read again, for its first NaN; an all ``-inf`` row (no slot took
    anything) answers 0. Compare, select, select per element, vectorised: against a maximum pass
    and a search pass, serial kernels, f32: 16x100000 404 -> 230 us, 2048x2048 963 -> 634,
    1000x100 62 -> 37, 64x64 3.3 -> 2.3, 10000x5 329 -> 84 (BENCHMARKS.md)."""
    lm = workgroup("am_lanes", CPU_LANES, t)
    li = workgroup("am_cols", CPU_LANES, U32)
    lf = nan_flags(lm)
    lt = workgroup("am_merge", CPU_LANES, t)
    b.bufs += [lm, li, lf, lt]
    k = var("k")

    Place = tuple[Expr, Callable[[Expr], Node]]  # a slot's value and how to set it

    def take(m: Place, mi: Place, f: Place, col: Expr, tmp: str) -> list[Node]:
        """Element at column ``col`` into a slot (value, column, NaN flag)."""
        v = var(tmp)
        return [let(tmp, load("x", var("a_lo") + col)), mi[1](select(v.gt(m[0]), col, mi[0])),
                m[1](select(v.gt(m[0]), v, m[0])), f[1](select(isnan(v), u32(1), f[0]))]

    def lane(arr: BufferDecl, at: Expr) -> Place:
        return arr[at], lambda e: store(arr, at, e)

    def local(name: str) -> Place:
        return var(name), lambda e: assign(name, e)

    lanes_form: list[Node] = [
        loop("k", u32(0), buflen(lm), [store(lm, k, lit(-math.inf, t)), store(li, k, u32(NO_INDEX)),
                                       store(lf, k, u32(0))]),
        let("a_m", var("a_len") / u32(CPU_LANES)),
        loop("a_j", u32(0), var("a_m"), [
            let("a_s", var("a_j") * u32(CPU_LANES)),
            loop("k", u32(0), buflen(lm), take(lane(lm, k), lane(li, k), lane(lf, k), var("a_s") + k, "a_v")),
        ]),
        # the last partial step as a whole one ending at the row's end: lane k's element there
        # comes after every element it has seen, so visiting some elements twice changes nothing
        if_(var("a_len").ge(u32(CPU_LANES)), [  # always (cols >= L); lets the range analysis drop guards
            let("a_t", var("a_len") - u32(CPU_LANES)),
            if_(var("a_t").gt((var("a_m") - u32(1)) * u32(CPU_LANES)), [
                loop("k", u32(0), buflen(lm), take(lane(lm, k), lane(li, k), lane(lf, k), var("a_t") + k, "a_w"))]),
        ]),
        # the maximum (a copy of the lanes halved), then the lowest column holding it and the
        # flags' OR as integer reductions, which LLVM vectorises
        loop("k", u32(0), buflen(lm), [store(lt, k, lm[k])]),
        *halving(lt, CPU_LANES, Combine.MAX.ordered_step, "a_r"),
        let("a_mx", lt[u32(0)]),
        loop("k", u32(0), buflen(lm), [
            assign("best", minimum(var("best"), select(lm[k].eq(var("a_mx")), li[k], u32(NO_INDEX)))),
            assign("a_nan", var("a_nan") | lf[k]),
        ]),
    ]
    # short rows: one slot in locals (more slots, whose merge costs per row, measured slower)
    short_form: list[Node] = [
        let("s_m", lit(-math.inf, t)), let("s_i", u32(NO_INDEX)),
        loop("a_q", u32(0), var("a_len"), take(local("s_m"), local("s_i"), local("a_nan"), var("a_q"), "a_w")),
        assign("best", var("s_i")),
    ]
    c = var("a_c")
    return [
        *bounded_span(buflen("x"), var("base"), var("cols"), "a_"),
        let("best", u32(NO_INDEX)), let("a_nan", u32(0)),
        if_(var("cols").ge(u32(LANES_MIN_COLS)), lanes_form, short_form),
        if_(var("a_nan").ne(u32(0)), [
            # a NaN: the lowest column holding one, as a u32 min (no branch, vectorised)
            assign("best", u32(NO_INDEX)),
            loop("a_c", u32(0), var("a_len"), [
                assign("best", minimum(var("best"), select(isnan(load("x", var("a_lo") + c)), c, u32(NO_INDEX))))]),
        ]),
        # nothing taken in a row that has elements: all -inf, the first is the answer
        if_(var("best").eq(u32(NO_INDEX)).and_(var("a_len").gt(u32(0))), [assign("best", u32(0))]),
    ]


#: the row argmax takes the grouped-rows CPU form (vyre.ops._grouped) for rows of at least this many
#: and fewer than GROUPED_MAX_COLS columns. Against the one-row forms, 1000 rows of f32 (checked
#: path, 2-core VM): 24-48 columns 1.2-2.4x faster (the one-slot loop of shorter rows was scalar),
#: 64-255 1.05-1.2x; 8-16 columns 0.56-0.78x (a row's 16 slots cost more to merge than it reads)
GROUPED_MIN_COLS = 24
GROUPED_MAX_COLS = 256


@functools.lru_cache(maxsize=4)
def grouped_row_argmax_program(t: DataType) -> Program:
    """The CPU form of :func:`row_argmax_program` in groups of rows (vyre.ops._grouped; launch
    ``cpu_workgroups(rows, cols)`` workgroups), the same answers: each of a row's 16
    slots keeps the largest value it has seen, its column and a NaN flag (a slot sees its
    columns in increasing order and takes only a larger value: the first of its ties; NaNs are
    flagged, never taken). Per row: the slots' maximum, the lowest column holding it; a row with
    a NaN is read again for its first NaN; an all ``-inf`` row answers 0."""
    lv = workgroup("am_v", CPU_GROUP * GROUP_LANES, t)
    lc = workgroup("am_c", CPU_GROUP * GROUP_LANES, U32)
    lf = workgroup("am_f", CPU_GROUP * GROUP_LANES, U32)
    k = var("k")

    def add(i: int, at: Expr, j: Expr, slot: Expr, w: Expr | None, tmp: str) -> list[Node]:
        v = var(tmp)
        return [let(tmp, load("x", at)), store(lc, slot, select(v.gt(lv[slot]), j, lc[slot])),
                store(lv, slot, select(v.gt(lv[slot]), v, lv[slot])),
                store(lf, slot, select(isnan(v), u32(1), lf[slot]))]

    def finish() -> list[Node]:  # one loop over the group's rows: unrolled per row, 12 s to compile
        g, sl = var("gr"), var("gs")
        at = g * u32(GROUP_LANES) + sl
        best, seen, mx, c = var("g_best"), var("g_nan"), var("g_max"), var("g_c")
        base = minimum(var("r") + g, var("mlast")) * var("cols")
        return [loop(g.name, u32(0), u32(CPU_GROUP), [if_((var("r") + g).lt(var("hi")), [
            let(mx.name, lit(-math.inf, t)), let(best.name, u32(NO_INDEX)), let(seen.name, u32(0)),
            loop(sl.name, u32(0), u32(GROUP_LANES), [assign(mx.name, Combine.MAX.ordered_step(mx, lv[at]))]),
            loop(sl.name, u32(0), u32(GROUP_LANES), [
                assign(best.name, minimum(best, select(lv[at].eq(mx), lc[at], u32(NO_INDEX)))),
                assign(seen.name, seen | lf[at])]),
            if_(seen.ne(u32(0)), [  # a NaN: the lowest column holding one (a u32 min, vectorised)
                assign(best.name, u32(NO_INDEX)),
                loop(c.name, u32(0), var("ce"), [
                    assign(best.name, minimum(best, select(isnan(load("x", base + c)), c, u32(NO_INDEX))))]),
            ]),
            # nothing taken in a row that has elements: all -inf, the first is the answer
            if_(best.eq(u32(NO_INDEX)).and_(var("ce").gt(u32(0))), [assign(best.name, u32(0))]),
            store("idx", var("r") + g, best),
        ])])]

    init: list[Node] = [loop("k", u32(0), buflen(lv), [store(lv, k, lit(-math.inf, t)), store(lc, k, u32(NO_INDEX)),
                                           store(lf, k, u32(0))])]
    return grouped_program([read("x", 0, t), output("idx", 1, U32)], [lv, lc, lf], matrix="x", out="idx",
                           cols=buflen("x") / buflen("idx"), add=add, shared=None, init=init, finish=finish)


def row_argmax(x: Any, al: Along, backend: str | None, keepdims: bool = False) -> Any:
    """The column of each row's first maximum along ``al``'s axes (vyre.ops.argmax with an axis):
    int64 for numpy callers, uint32 on the device (as the whole-array index)."""
    r = planned(("row_argmax", None), (to_rows(x, al),), backend, _row_argmax_checked)
    return per_row(host_indices(r), al, keepdims)


def _row_argmax(x: Any, backend: str | None, gpu_form: bool | None = None) -> Any:
    """row_argmax of a 2-D array in a forced program form (tests): the u32 indices as they are."""
    return planned(("row_argmax", gpu_form), (x,), backend, _row_argmax_checked)


def _row_argmax_checked(op: tuple[str, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    _, gpu_form = op
    (x,) = inputs
    ctx, arrs, rows, cols, kw = prepare_rows({"x": x}, backend, gpu_form)
    if rows and not cols:
        raise OpsError("argmax along an axis of length 0 has no answer. Fix: check that the axis is not empty")
    out = ctx.empty(rows, U32)
    if rows:
        t = arrs["x"].dtype
        if not kw["gpu"] and GROUPED_MIN_COLS <= cols < GROUPED_MAX_COLS:
            prog, grid = grouped_row_argmax_program(t), cpu_workgroups(rows, cols)
        else:
            prog, grid = row_argmax_program(t, **kw), rows
        ctx.run(prog, {"x": arrs["x"].data, "idx": out}, grid)
    return ctx.result(out, (rows,))
