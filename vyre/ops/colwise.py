"""Reductions over a block of axes that is not last, without moving it: the array seen as
``(outer, red, inner)``, ``out[o * inner + i] = reduce over r of x[(o * red + r) * inner + i]``
(``sum(a, axis=0)`` of a matrix: column sums; ``axis=1`` of a 3-D array: ``outer`` batches).

The row-wise programs need the reduced axes last, which for these takes a transposed copy of the
whole array (its strided reads cost more than the reduction: vyre.ops._axes). Here the reduction
walks ``red`` with the ``inner`` consecutive elements side by side, which is how the data lies:

* CPU form: one invocation per ``(o, block of columns)`` (:func:`cpu_block`: 128 columns for
  the sums; 64, 128 or 256 for max, min and argmax, as wide as leaves two blocks); the block's
  accumulators are a lane array (workgroup memory in the kernel's stack frame, as the whole-array
  reductions' CPU form), and each step over ``r`` combines the block's segments of a few rows
  (``COL_ROWS_SUM`` for the sums, one for max, min and argmax) into them elementwise: a stride-1
  loop LLVM vectorises.
* GPU form (:func:`tiled_program`): a workgroup per tile of 32 consecutive columns (16 or 8
  where the inner extent is no wider) and a split of the rows; its 8 (16, 32) row slices walk the
  split's rows (a subgroup reads 32 consecutive elements: coalesced; 8 loads in flight per
  invocation, 4 for argmax) and merge pairwise in workgroup memory. The row splits, enough to give
  a GPU about 1024 workgroups (a count of the shape alone: the bits do not depend on the device),
  write partials that one more pass merges the same way. Every GPU caller takes it: CuPy arrays,
  CUDA tensors and numba device arrays (BENCHMARKS.md: on an H100 ``sum(a, 0)`` of 4096x4096
  f32 in 0.86x PyTorch's GPU time).

The programs take the inner extent as the *length* of a buffer, ``inner`` (its contents are never
read: a program has no scalar parameters, and a length is what a replayed call keeps; the op
allocates it uninitialised, and a device plan allocates it once for all its calls), and the GPU
form its row splits likewise (``splits``). Kinds: ``sum``, ``mean``, ``norm`` (f32 accumulated in f64),
``max``, ``min`` (NaN-propagating), ``argmax`` (u32 index along ``red``: the first NaN, else the
first maximum).
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any


from ..ir import (
    U32, DataType, Expr, Node, Program, assign, barrier, buflen, cast, gid, if_, let, lid, load, loop,
    maximum, minimum, output, read, select, store, u32, var, wgid, workgroup,
)
from ._axes import Along
from ._blocks import (
    NO_INDEX, Combine, accumulator_type, all_of, bounded_span, kind_combine, kind_term, kind_total, merge_argmax,
    takes, tree,
)
from ._plans import planned
from ._runtime import OpsError, host_indices, prepare

__all__ = ["COL_BLOCKS", "COL_BLOCK_SUM", "COL_KINDS", "COL_ROWS_SUM", "col_program", "column_block",
           "cpu_block", "gpu_passes", "gpu_splits", "reduce_columns", "reduce_matrix_columns", "tile_cols",
           "tiled_program"]

COL_KINDS = ("sum", "mean", "norm", "max", "min", "argmax")
#: CPU form: columns per invocation (its lane array of accumulators) and rows combined per step,
#: for the sums (sum, mean, norm) and for max, min and argmax. Measured (serial and parallel, f32
#: 2048x2048, 256x4096, 4096x256 and 1000x100, axis 0; BENCHMARKS.md): sums 128 columns of 4 rows
#: 547/122/182/32 us against 64 of 1 row 734/164/266/41 (numpy 598/136/212/29); max 64 columns of
#: one row 574/135/175/35 against 64 of 4 rows 805/166/234/37. Rows lie a whole row apart, which the
#: prefetchers do not follow: several rows' loads per step keep more in flight.
COL_BLOCK_SUM, COL_ROWS_SUM = 128, 4
#: CPU form of max, min and argmax: the widths a block may take, the widest that leaves at least
#: two blocks per outer index (both cores busy) chosen per call. Each row pays a segment's set-up
#: again, so wide blocks pay where rows are long: same process, alternating (bench/colwise_width_ab.py,
#: BENCHMARKS.md), f32 axis 0, 64 -> 256 columns: max 2048x2048 1156 -> 849 us, 256x4096 231 ->
#: 177; argmax 2048x2048 1378 -> 1165 (128: 1055); 4096x256 takes 128: max 262 -> 234. Where
#: a wider block would leave one (1000x100), 64 (argmax 46.8 against 71.2 at 128). Sums: 256 was
#: mixed against 128
COL_BLOCKS = (64, 128, 256)
#: GPU form (:func:`tiled_program`): a workgroup of COL_TILE_WG invocations is a tile of
#: TILE_COLS consecutive columns (fewer for a narrower inner extent: :func:`tile_cols`) by
#: COL_TILE_WG / TILE_COLS row slices; GPU_COL_UNROLL accumulators (loads in flight) per
#: invocation; row splits of at least SPLIT_MIN_ROWS rows, as many as take
#: the grid to GPU_TARGET_WORKGROUPS (about eight 256-invocation workgroups per SM of an H100),
#: at most MAX_SPLITS (one more pass merges them). Measured on an H100 and an H200
#: (bench/colwise_gpu_tune.py, BENCHMARKS.md)
COL_TILE_WG, TILE_COLS = 256, 32
GPU_COL_UNROLL, GPU_COL_UNROLL_ARGMAX = 8, 4
SPLIT_MIN_ROWS = 64
GPU_TARGET_WORKGROUPS = 1024
MAX_SPLITS = 256
#: the column forms take blocks whose inner extent is at least this (CPU: a vectorised step; GPU:
#: eight consecutive elements per load sector); narrower ones go through the rows (a transposed
#: copy, then rows)
MIN_INNER = 8


def cpu_block(kind: str, inner: int = 0) -> int:
    """Columns per invocation of ``kind``'s CPU form over an inner extent of ``inner`` (the host
    launches ``outer * ceil(inner / cpu_block(kind, inner))`` invocations of ``col_program(kind,
    t, cpu_block(kind, inner))``)."""
    if kind_combine(kind) is Combine.ADD:
        return COL_BLOCK_SUM
    return builtins.max([COL_BLOCKS[0], *(w for w in COL_BLOCKS if inner >= 2 * w)])


@functools.lru_cache(maxsize=64)
def col_program(kind: str, t: DataType, block: int = 0) -> Program:
    """The CPU form: ``out[o * inner + i]`` = ``kind`` over ``r < red`` of ``x[(o * red + r) *
    inner + i]``, with ``inner = len(inner)`` and ``red = len(x) / len(out)`` (module docstring),
    in blocks of ``block`` columns (0: ``cpu_block(kind)``; the sums take only that). Launch
    ``outer * ceil(inner / block)`` workgroups."""
    if kind not in COL_KINDS:
        raise ValueError(f"col_program kind {kind!r} is not a column reduction. Fix: pass one of {COL_KINDS}")
    sums = kind_combine(kind) is Combine.ADD
    block = block or cpu_block(kind)
    if block not in ((COL_BLOCK_SUM,) if sums else COL_BLOCKS):
        raise ValueError(f"col_program block {block} is no width of {kind}'s CPU form. "
                         "Fix: pass cpu_block(kind, inner)")
    a = accumulator_type(kind_combine(kind), t)
    out_t = U32 if kind == "argmax" else t
    bufs = [read("x", 0, t), output("out", 1, out_t), read("inner", 2, U32)]
    body: list[Node] = [
        let("inner", buflen("inner")),
        let("red", buflen("x") / maximum(buflen("out"), u32(1))),
    ]
    lanes = workgroup("lanes", block, a)
    extra = [workgroup("lanes_i", block, U32)] if kind == "argmax" else []
    return Program.wrapped([*bufs, lanes, *extra], 1, body + _cpu_body(kind, t, a, block))


def _cpu_body(kind: str, t: DataType, a: DataType, block: int) -> list[Node]:
    comb = kind_combine(kind)
    k, r = var("k"), var("r")
    lanes = "lanes"
    nrows = COL_ROWS_SUM if comb is Combine.ADD else 1
    init: list[Node] = [store(lanes, k, comb.identity(a))]
    if kind == "argmax":
        init.append(store("lanes_i", k, u32(0)))

        def fold(v: Expr) -> list[Node]:
            take = takes(var("v"), var("cur"))
            return [let("v", v), let("cur", load(lanes, k)),
                    let("tk", take),
                    store(lanes, k, select(var("tk"), var("v"), var("cur"))),
                    store("lanes_i", k, select(var("tk"), r, load("lanes_i", k)))]
    else:
        def fold(v: Expr) -> list[Node]:
            return [let("v", kind_term(kind, a, v)), store(lanes, k, comb.step(load(lanes, k), var("v")))]

    def result(kk: Expr) -> Expr:
        if kind == "argmax":
            return load("lanes_i", kk)
        return cast(t, kind_total(kind, load(lanes, kk), a, var("red")))

    def span(row: Expr, prefix: str) -> list[Node]:
        # the block's segment of a row, clipped to x (a no-op for every launched invocation; it
        # lets the range analysis prove each load in range: no guard)
        return bounded_span(buflen("x"), (var("o") * var("red") + row) * var("inner") + var("i0"), var("w"), prefix)

    rows: list[Node] = []
    first_single: Expr = u32(0)
    if nrows > 1:
        # nrows rows per step, combined first: that many row segments' loads in flight, fewer
        # lane updates
        rp = [var("rq") * u32(nrows) + u32(q) if q else var("rq") * u32(nrows) for q in range(nrows)]
        spans = [x for q in range(nrows) for x in span(rp[q], f"s{q}")]
        common: Expr = var("s0len")
        for q in range(1, nrows):
            common = minimum(common, var(f"s{q}len"))

        def step(at: Expr) -> list[Node]:
            terms = [kind_term(kind, a, load("x", var(f"s{q}lo") + at)) for q in range(nrows)]
            step_nodes, part = tree("rv", terms, comb)
            return [*step_nodes, store(lanes, k, comb.step(load(lanes, k), part))]

        rows.append(loop("rq", u32(0), var("red") / u32(nrows),
                         [*spans, let("sl", common), *_whole_block("sl", block, step)]))
        first_single = (var("red") / u32(nrows)) * u32(nrows)
    # one row per step (max, min, argmax; the sums' last rows). A whole block (w, the same for every
    # row) as loops of constant trip count: the variable loop re-derived its vector trip count every
    # step (f32 max(a, 0) 2048x2048 1064 -> 627 us, argmax 1525 -> 1008; bench/colwise_width_ab.py);
    # a narrower one (the last block, or an inner extent below the width) as a loop to the segment's
    # length, chosen once for all rows (chosen per row, argmax(a, 0) of 10000x40 took 18% longer)
    whole_rows = [*span(r, "s"), *_whole_block("slen", block, lambda at: fold(load("x", var("slo") + at)))]
    part_rows = [*span(r, "t"), loop("k", u32(0), var("tlen"), fold(load("x", var("tlo") + k)))]
    rows.append(if_(var("w").eq(u32(block)), [loop("r", first_single, var("red"), whole_rows)],
                    [loop("r", first_single, var("red"), part_rows)]))

    nb = (var("inner") + u32(block - 1)) / u32(block)
    return [
        let("nb", maximum(nb, u32(1))),
        let("g", gid()),
        let("o", var("g") / var("nb")),
        let("i0", (var("g") % var("nb")) * u32(block)),
        let("w", minimum(u32(block), var("inner") - minimum(var("i0"), var("inner")))),
        if_(var("o").lt(buflen("out") / maximum(var("inner"), u32(1))), [
            loop("k", u32(0), u32(block), init),
            *rows,
            *bounded_span(buflen("out"), var("o") * var("inner") + var("i0"), var("w"), "d"),
            loop("k", u32(0), var("dlen"), [store("out", var("dlo") + k, result(k))]),
        ]),
    ]


def _whole_block(length: str, block: int, step: Callable[[Expr], list[Node]]) -> list[Node]:
    """``step(k)`` for lane ``k`` of a row segment of ``length`` (a local: at most ``block``)
    elements: a whole block as a loop of constant trip count (vectorised with no remainder), a
    partial one (the last columns) as a loop from 0 to its length. The whole block is written as
    the lane folds' steps are (``len / block`` of them), which the range analysis proves in range. The
    sums' 4-row steps (blocks of 128): kernels of f32 ``sum(a, 0)`` 16x1024 2.9 -> 2.4 us, 256x256
    9.5 -> 7.0, 2048x2048 977 -> 950."""
    k, whole = var("k"), var(f"{length}_w")
    at = var(f"{length}_j") * u32(block) + k
    return [
        let(whole.name, var(length) / u32(block)),  # 1 or 0
        if_(whole.gt(u32(0)), [loop(f"{length}_j", u32(0), whole, [loop("k", u32(0), u32(block), step(at))])],
            [loop("k", u32(0), var(length), step(k))]),
    ]


def tile_cols(inner: int) -> int:
    """Columns of a GPU tile over an inner extent of ``inner``: 32, or 16 or 8 where the extent
    is no wider (a subgroup then reads two or four rows' segments, still consecutive, instead of
    leaving half or three quarters of its lanes idle)."""
    return 8 if inner <= 8 else 16 if inner <= 16 else TILE_COLS


@functools.lru_cache(maxsize=64)
def tiled_program(kind: str, t: DataType, *, first: bool, final: bool, cols: int = TILE_COLS) -> Program:
    """One pass of the GPU form over ``x`` seen as ``(outer, red, inner)``: a workgroup of
    ``cols x rows`` invocations (``rows = COL_TILE_WG / cols``) per (row split, outer index, tile of
    ``cols`` consecutive columns). Invocation ``(ty, tx)`` (``lid = ty * cols + tx``) combines
    column ``tx`` of the split's rows ``ty, ty + rows, ...`` into ``GPU_COL_UNROLL`` accumulators
    (that many loads in flight; a subgroup reads one row's 32 consecutive elements: coalesced),
    merges them pairwise, and the tile's row slices merge pairwise in workgroup memory.

    Lengths say the shape (a program has no scalar parameters): ``inner = len(inner)``, the row
    splits ``S = len(splits)``, ``outer * inner = len(out) / S`` and ``red = len(x) / (outer *
    inner)``. Without ``final`` the pass writes each split's partial at ``(s * outer + o) * inner +
    i`` (in the accumulator type; argmax: the value, and its row in ``outi``), which the next pass
    reads as ``(1, S, outer * inner)`` (``first`` off: the input is partials, argmax's rows in
    ``xi``). ``mean`` divides in the first pass, ``norm`` takes its root in the final one. Launch
    ``S * outer * ceil(inner / cols)`` workgroups."""
    if kind not in COL_KINDS:
        raise ValueError(f"tiled_program kind {kind!r} is not a column reduction. Fix: pass one of {COL_KINDS}")
    if cols not in (8, 16, 32):
        raise ValueError(f"tiled_program cols {cols} is no tile width. Fix: pass tile_cols(inner): 8, 16 or 32")
    nrows = COL_TILE_WG // cols
    a = accumulator_type(kind_combine(kind), t)
    arg = kind == "argmax"
    comb = kind_combine(kind)
    t_in = t if first else a
    bufs = [read("x", 0, t_in)]
    if arg and not first:
        bufs.append(read("xi", len(bufs), U32))
    out_t = U32 if arg and final else (t if final else a)
    bufs.append(output("out", len(bufs), out_t))
    if arg and not final:
        bufs.append(output("outi", len(bufs), U32))
    bufs.append(read("inner", len(bufs), U32))
    bufs.append(read("splits", len(bufs), U32))
    tv = workgroup("tv", COL_TILE_WG, a)
    bufs.append(tv)
    if arg:
        bufs.append(workgroup("ti", COL_TILE_WG, U32))
    one = u32(1)
    w = wgid()
    body: list[Node] = [
        let("inner", maximum(buflen("inner"), one)),
        let("ns", maximum(buflen("splits"), one)),
        let("m", buflen("out") / var("ns")),
        let("outer", var("m") / var("inner")),
        let("red", buflen("x") / maximum(var("m"), one)),
        let("nt", (var("inner") + u32(cols - 1)) / u32(cols)),
        let("tile", w % var("nt")),
        let("q", w / var("nt")),
        let("o", var("q") % maximum(var("outer"), one)),
        let("s", var("q") / maximum(var("outer"), one)),
        let("tx", lid() % u32(cols)),
        let("ty", lid() / u32(cols)),
        let("c", var("tile") * u32(cols) + var("tx")),
        let("rps", (var("red") + var("ns") - one) / var("ns")),
        let("rlo", minimum(var("s") * var("rps"), var("red"))),
        let("span", minimum(var("rps"), var("red") - var("rlo"))),
        # rows of this invocation: rlo + ty + nrows * k for k < cnt
        let("cnt", select(var("span").gt(var("ty")),
                          (var("span") - var("ty") + u32(nrows - 1)) / u32(nrows), u32(0))),
        let("live", var("c").lt(var("inner")).and_(var("s").lt(var("ns"))).and_(var("o").lt(var("outer")))),
        let("base", (var("o") * var("red") + var("rlo") + var("ty")) * var("inner") + var("c")),
    ]
    u = GPU_COL_UNROLL_ARGMAX if arg else GPU_COL_UNROLL
    accs = [f"a{q}" for q in range(u)]
    ident = comb.identity(a)
    body += [let(n, ident) for n in accs]
    if arg:
        body += [let(f"{n}i", u32(NO_INDEX)) for n in accs]

    def at(k: Expr) -> Expr:
        return var("base") + k * u32(nrows) * var("inner")

    def visit(name: str, k: Expr, tmp: str) -> list[Node]:
        # accumulator ``name`` takes row k of this invocation (rows visited in order per accumulator)
        if not arg:
            v = kind_term(kind, a, load("x", at(k))) if first else load("x", at(k))
            return [let(tmp, v), assign(name, comb.step(var(name), var(tmp)))]
        row = var("rlo") + var("ty") + k * u32(nrows)
        idx = row if first else load("xi", at(k))
        # the first row visited is always taken (an all -inf column's answer is its first row)
        take = takes(var(tmp), var(name), var(f"{name}i"))
        return [let(tmp, load("x", at(k))), let(f"{tmp}i", idx),
                if_(take, [assign(name, var(tmp)), assign(f"{name}i", var(f"{tmp}i"))])]

    ks = [var("j") * u32(u) + u32(q) if q else var("j") * u32(u) for q in range(u)]
    # one If that the whole step is in range lets the emitters drop each load's bounds check
    step_in = all_of([at(k).lt(buflen(b)) for k in ks for b in (("x", "xi") if arg and not first else ("x",))])
    steps = [x for q, k in enumerate(ks) for x in visit(accs[q], k, f"v{q}")]
    body.append(if_(var("live"), [
        loop("j", u32(0), var("cnt") / u32(u), [if_(step_in, steps)]),
        loop("k", (var("cnt") / u32(u)) * u32(u), var("cnt"), visit(accs[0], var("k"), "vt")),
    ]))
    nodes, part, parti = _merge_pairs(kind, comb, [(var(n), var(f"{n}i")) for n in accs], "am")
    body += nodes
    body.append(store("tv", lid(), part))
    if arg:
        body.append(store("ti", lid(), parti))
    body.append(barrier())
    slices = [(load("tv", var("tx") + u32(r * cols)), load("ti", var("tx") + u32(r * cols)) if arg else None)
              for r in range(nrows)]
    nodes, total, totali = _merge_pairs(kind, comb, slices, "sl")
    out_row = var("o") if final else var("s") * var("outer") + var("o")  # of the output seen as (rows, inner)
    spot = out_row * var("inner") + var("c")
    if arg:
        writes = [store("out", spot, totali)] if final else [store("out", spot, total), store("outi", spot, totali)]
    else:
        value = total
        if (kind == "mean" and first) or (kind == "norm" and final):
            value = kind_total(kind, total, a, var("red"))  # mean divides once, norm's root at the end
        writes = [store("out", spot, cast(t, value) if final else value)]
    body.append(if_(var("ty").eq(u32(0)).and_(var("live")), [*nodes, *writes]))
    return Program.wrapped(bufs, COL_TILE_WG, body)


def _merge_pairs(kind: str, comb: Combine, values: Sequence[tuple[Expr, Expr | None]], prefix: str
                 ) -> tuple[list[Node], Expr, Expr]:
    """Pairwise merge of accumulators (argmax: with their rows), the fixed order of :func:`tree`."""
    if kind != "argmax":
        merged, total = tree(prefix, [v for v, _ in values], comb)
        return merged, total, u32(0)
    pairs = [(v, i) for v, i in values if i is not None]
    assert len(pairs) == len(values), "argmax's accumulators carry their rows"
    return merge_argmax(prefix, pairs)


def gpu_splits(outer: int, red: int, inner: int, min_rows: int = SPLIT_MIN_ROWS) -> int:
    """Row splits of a pass of the GPU form over ``(outer, red, inner)``: enough workgroups to
    fill a GPU (GPU_TARGET_WORKGROUPS, a count fixed by the shape alone, so the bits do not depend
    on the device), at most ``ceil(red / min_rows)`` and MAX_SPLITS of them."""
    tiles = builtins.max(1, outer * -(-inner // tile_cols(inner)))
    want = -(-GPU_TARGET_WORKGROUPS // tiles)
    return builtins.max(1, builtins.min(want, -(-red // min_rows), MAX_SPLITS))


def gpu_passes(outer: int, red: int, inner: int, min_rows: int = SPLIT_MIN_ROWS) -> list[tuple[int, int, int, int]]:
    """The passes of the GPU form, per pass ``(outer, red, inner, splits)``: the row splits (of
    :func:`gpu_splits`), then, where there are several, one pass that merges them, reading their
    partials as ``(1, splits, outer * inner)`` (at most MAX_SPLITS rows: a third pass would cost
    more host time than the merge takes on the GPU)."""
    splits = gpu_splits(outer, red, inner, min_rows)
    return [(outer, red, inner, splits)] + ([(1, splits, outer * inner, 1)] if splits > 1 else [])


@functools.lru_cache(maxsize=1024)
def column_block(al: Along) -> tuple[int, int, int] | None:
    """``(outer, red, inner)`` when ``al``'s reduced axes are one run of consecutive axes followed
    by an inner extent of at least MIN_INNER elements; else None (the rows take it)."""
    axes = al.axes
    if al.whole or al.last or axes != tuple(range(axes[0], axes[-1] + 1)):
        return None
    shape = al.shape
    outer = math.prod(shape[:axes[0]])
    red = math.prod(shape[axes[0]:axes[-1] + 1])
    inner = math.prod(shape[axes[-1] + 1:])
    return (outer, red, inner) if inner >= MIN_INNER else None


def reduce_columns(kind: str, x: Any, al: Along, block: tuple[int, int, int], keepdims: bool,
                   backend: str | None) -> Any:
    """``kind`` of ``x`` along ``al``'s axes through the column forms (``block``: what
    :func:`column_block` returned), shaped as the kept axes (or keepdims)."""
    r = _columns(kind, x, block, backend, shape=al.keepdims_shape if keepdims else al.kept_shape)
    return host_indices(r) if kind == "argmax" else r


def reduce_matrix_columns(kind: str, x: Any, backend: str | None) -> Any:
    """``kind`` of each column of 2-D ``x`` (at least MIN_INNER columns): :func:`reduce_columns`
    along axis 0 of a matrix, without reading the axes (the common call: about 1 us less)."""
    # one key per kind: the block and the result's shape follow from x's shape (in the plan key)
    r = planned(_MATRIX_KEYS[kind], (x,), backend, _col_checked)
    return host_indices(r) if kind == "argmax" else r


def _columns(kind: str, x: Any, block: tuple[int, int, int], backend: str | None,
             gpu_form: bool | None = None, split_rows: int | None = None, shape: tuple[int, ...] | None = None
             ) -> Any:
    """The result of ``kind`` over ``x`` seen as ``block``, flat or shaped ``shape`` (``gpu_form``:
    force a program form, ``split_rows``: the GPU form's least rows per split; for tests;
    argmax's indices as u32)."""
    return planned(("col_" + kind, block, gpu_form, split_rows, shape), (x,), backend, _col_checked)


_MATRIX_KEYS = {kind: ("col_" + kind, None, None, None, None) for kind in COL_KINDS}


def _col_checked(op: tuple[str, tuple[int, int, int] | None, bool | None, int | None, tuple[int, ...] | None],
                 inputs: tuple[Any, ...], backend: str | None) -> Any:
    name, block, gpu_form, split_rows, shape = op
    if block is None:  # a matrix along axis 0 (reduce_matrix_columns)
        rows, cols = inputs[0].shape
        block, shape = (1, rows, cols), (cols,)
    outer, red, inner = block
    shape = shape or (outer * inner,)
    kind = name[4:]
    ctx, arrs = prepare({"x": inputs[0]}, backend)
    if gpu_form is not None:
        ctx.gpu_form = gpu_form
    if arrs["x"].size != outer * red * inner:
        raise OpsError(f"x has {arrs['x'].size} elements, but the block {(outer, red, inner)} holds "
                       f"{outer * red * inner}. Fix: pass the block column_block gives for x's shape")
    if kind == "argmax" and red == 0 and outer * inner:
        raise OpsError("argmax along an axis of length 0 has no answer. Fix: check that the axis is not empty")
    t = arrs["x"].dtype
    if not outer * inner:
        return ctx.result(ctx.empty(0, U32 if kind == "argmax" else t), shape)
    if not ctx.gpu_form:
        out = ctx.empty(outer * inner, U32 if kind == "argmax" else t)
        carrier = ctx.empty(inner, U32)  # its length is the inner extent (never read)
        width = cpu_block(kind, inner)
        ctx.run(col_program(kind, t, width), {"x": arrs["x"].data, "out": out, "inner": carrier},
                outer * -(-inner // width))
        return ctx.result(out, shape)
    a = accumulator_type(kind_combine(kind), t)
    ins = {"x": arrs["x"].data}
    passes = gpu_passes(outer, red, inner, split_rows or SPLIT_MIN_ROWS)
    for n, (o, _, i, splits) in enumerate(passes):
        final = splits == 1
        outs = {"out": ctx.empty(o * i * splits, (U32 if kind == "argmax" else t) if final else
                                 (t if kind == "argmax" else a))}
        if kind == "argmax" and not final:
            outs["outi"] = ctx.empty(o * i * splits, U32)
        carriers = {"inner": ctx.empty(i, U32), "splits": ctx.empty(splits, U32)}  # lengths only
        w = tile_cols(i)
        ctx.run(tiled_program(kind, t, first=n == 0, final=final, cols=w), {**ins, **outs, **carriers},
                splits * o * -(-i // w))
        ins = {"x": outs["out"], **({"xi": outs["outi"]} if "outi" in outs else {})}
    return ctx.result(outs["out"], shape)
