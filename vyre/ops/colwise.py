"""Reductions over a block of axes that is not last, without moving it: the array seen as
``(outer, red, inner)``, ``out[o * inner + i] = reduce over r of x[(o * red + r) * inner + i]``
(``sum(a, axis=0)`` of a matrix: column sums; ``axis=1`` of a 3-D array: ``outer`` batches).

The row-wise programs need the reduced axes last, which for these takes a transposed copy of the
whole array (its strided reads cost more than the reduction: vyre.ops._axes). Here the reduction
walks ``red`` with the ``inner`` consecutive elements side by side, which is how the data lies:

* CPU form: one invocation per ``(o, block of columns)`` (:func:`cpu_block`); the block's
  accumulators are a lane array (workgroup memory in the kernel's stack frame, as the whole-array
  reductions' CPU form), and each step over ``r`` combines the block's segments of a few rows
  (``COL_ROWS_SUM`` for the sums, one for max, min and argmax) into them elementwise: a stride-1
  loop LLVM vectorises.
* GPU form: one invocation per output element, ``red`` visited in order; consecutive invocations
  read consecutive elements (coalesced), ``COL_UNROLL`` loads in flight for the sums, max and min
  (one accumulator each, merged pairwise at the end). Only numba's device arrays, which have no
  transpose, take it (:func:`columns_for`): with one invocation per output it has too little
  parallelism where the kept extent is small, and CuPy arrays and CUDA tensors go through a
  transposed copy and the rows instead (both well below PyTorch's column reductions on an H200:
  BENCHMARKS.md).

The programs take the inner extent as the *length* of a third buffer, ``inner`` (its contents are
never read: a program has no scalar parameters, and a length is what a replayed call keeps; the
op allocates it uninitialised). Kinds: ``sum``, ``mean``, ``norm`` (f32 accumulated in f64),
``max``, ``min`` (NaN-propagating), ``argmax`` (u32 index along ``red``: the first NaN, else the
first maximum).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..ir import (
    F64, U32, DataType, Expr, Node, Program, assign, buflen, cast, gid, if_, let, load, loop,
    maximum, minimum, output, read, select, store, u32, var, workgroup,
)
from ..driver.backends import default_backend
from ._axes import Along
from ._blocks import Combine, bounded_span, isnan, kind_combine, kind_term, kind_total, tree
from ._plans import planned
from ._runtime import Kind, OpsError, _kind, prepare

__all__ = ["COL_BLOCK", "COL_BLOCK_SUM", "COL_KINDS", "COL_ROWS_SUM", "col_program", "column_block", "columns_for",
           "cpu_block", "reduce_columns"]

COL_KINDS = ("sum", "mean", "norm", "max", "min", "argmax")
#: CPU form: columns per invocation (its lane array of accumulators) and rows combined per step,
#: for the sums (sum, mean, norm) and for max, min and argmax. Measured (serial and parallel, f32
#: 2048x2048, 256x4096, 4096x256 and 1000x100, axis 0; BENCHMARKS.md): sums 128 columns of 4 rows
#: 547/122/182/32 us against 64 of 1 row 734/164/266/41 (numpy 598/136/212/29); max 64 columns of
#: one row 574/135/175/35 against 64 of 4 rows 805/166/234/37. Rows lie a whole row apart, which the
#: prefetchers do not follow: several rows' loads per step keep more in flight.
COL_BLOCK_SUM, COL_ROWS_SUM = 128, 4
COL_BLOCK = 64
#: GPU form: workgroup size, and accumulators (loads in flight) per invocation for sum/max/min
COL_WG = 256
COL_UNROLL = 4
#: the column forms take blocks whose inner extent is at least this (CPU: a vectorised step; GPU:
#: eight consecutive elements per load sector); narrower ones go through the rows (a transposed
#: copy, then rows)
MIN_INNER = 8


def cpu_block(kind: str) -> int:
    """Columns per invocation of ``kind``'s CPU form (the host launches ``outer * ceil(inner /
    cpu_block(kind))`` invocations)."""
    return COL_BLOCK if kind_combine(kind) is not Combine.ADD else COL_BLOCK_SUM


def _acc(kind: str, t: DataType) -> DataType:
    return F64 if t is DataType.F32 and kind_combine(kind) is Combine.ADD else t


def _take(v: Expr, best: Expr) -> Expr:
    """argmax's rule visiting in order: a larger value, or the first NaN (once one is held, it stays)."""
    return v.gt(best).or_(isnan(v).and_(isnan(best).not_()))


@functools.lru_cache(maxsize=64)
def col_program(kind: str, t: DataType, *, gpu: bool) -> Program:
    """``out[o * inner + i]`` = ``kind`` over ``r < red`` of ``x[(o * red + r) * inner + i]``, with
    ``inner = len(inner)`` and ``red = len(x) / len(out)`` (module docstring). Launch ``ceil(outer
    * ceil(inner / cpu_block(kind)))`` workgroups (CPU form) or ``ceil(len(out) / COL_WG)`` (GPU form)."""
    if kind not in COL_KINDS:
        raise ValueError(f"col_program kind {kind!r}; expected one of {COL_KINDS}")
    a = _acc(kind, t)
    out_t = U32 if kind == "argmax" else t
    bufs = [read("x", 0, t), output("out", 1, out_t), read("inner", 2, U32)]
    body: list[Node] = [
        let("inner", buflen("inner")),
        let("red", buflen("x") / maximum(buflen("out"), u32(1))),
    ]
    if gpu:
        return Program.wrapped(bufs, COL_WG, body + _gpu_body(kind, t, a))
    lanes = workgroup("lanes", cpu_block(kind), a)
    extra = [workgroup("lanes_i", cpu_block(kind), U32)] if kind == "argmax" else []
    return Program.wrapped([*bufs, lanes, *extra], 1, body + _cpu_body(kind, t, a))


def _cpu_body(kind: str, t: DataType, a: DataType) -> list[Node]:
    comb = kind_combine(kind)
    k, r = var("k"), var("r")
    lanes = "lanes"
    block = cpu_block(kind)
    nrows = COL_ROWS_SUM if comb is Combine.ADD else 1
    init: list[Node] = [store(lanes, k, comb.identity(a))]
    if kind == "argmax":
        init.append(store("lanes_i", k, u32(0)))
    if kind == "argmax":
        def fold(v: Expr) -> list[Node]:
            take = _take(var("v"), var("cur"))
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
        terms = [kind_term(kind, a, load("x", var(f"s{q}lo") + k)) for q in range(nrows)]
        step_nodes, part = tree("rv", terms, comb)
        rows.append(loop("rq", u32(0), var("red") / u32(nrows), [
            *spans, let("sl", common),
            loop("k", u32(0), var("sl"), [*step_nodes, store(lanes, k, comb.step(load(lanes, k), part))]),
        ]))
        first_single = (var("red") / u32(nrows)) * u32(nrows)
    rows.append(loop("r", first_single, var("red"), [
        *span(r, "s"), loop("k", u32(0), var("slen"), [*fold(load("x", var("slo") + k))])]))

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


def _gpu_body(kind: str, t: DataType, a: DataType) -> list[Node]:
    g, r = var("g"), var("r")

    def at(rr: Expr) -> Expr:
        return (var("o") * var("red") + rr) * var("inner") + var("i")

    head: list[Node] = [
        let("g", gid()),
        let("o", g / maximum(var("inner"), u32(1))),
        let("i", g % maximum(var("inner"), u32(1))),
    ]
    if kind == "argmax":
        inner: list[Node] = [
            let("best", kind_combine(kind).identity(t)), let("bi", u32(0)),
            loop("r", u32(0), var("red"), [
                let("v", load("x", at(r))),
                let("tk", _take(var("v"), var("best"))),
                assign("best", select(var("tk"), var("v"), var("best"))),
                assign("bi", select(var("tk"), r, var("bi"))),
            ]),
            store("out", g, var("bi")),
        ]
        return [*head, if_(g.lt(buflen("out")), inner)]
    comb = kind_combine(kind)
    accs = [f"a{u}" for u in range(COL_UNROLL)]
    step_nodes: list[Node] = []
    for u, name in enumerate(accs):
        rr = var("rb") + u32(u) if u else var("rb")
        step_nodes += [let(f"v{u}", kind_term(kind, a, load("x", at(rr)))),
                       assign(name, comb.step(var(name), var(f"v{u}")))]
    nodes, total = tree("am", [var(n) for n in accs], comb)
    inner = [
        *(let(n, comb.identity(a)) for n in accs),
        loop("c", u32(0), var("red") / u32(COL_UNROLL), [let("rb", var("c") * u32(COL_UNROLL)), *step_nodes]),
        loop("r", (var("red") / u32(COL_UNROLL)) * u32(COL_UNROLL), var("red"), [
            let("vt", kind_term(kind, a, load("x", at(r)))), assign(accs[0], comb.step(var(accs[0]), var("vt")))]),
        *nodes,
        store("out", g, cast(t, kind_total(kind, total, a, var("red")))),
    ]
    return [*head, if_(g.lt(buflen("out")), inner)]


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


def columns_for(x: Any, al: Along, backend: str | None) -> tuple[int, int, int] | None:
    """:func:`column_block` where the column forms are the better way: on the host backends (the
    CPU form beats a transposed copy there: BENCHMARKS.md), and on the GPU only for arrays that have
    no transpose (numba's device arrays); CuPy arrays and CUDA tensors on the GPU take the rows (the
    GPU form has one invocation per output, too few where the kept extent is small: on an H200
    ``sum(a, 0)`` of 4096x4096 f32 ran at 0.15x ``torch.sum(a, 0)``)."""
    block = column_block(al)
    if block is None:
        return None
    if type(x) is np.ndarray:
        host = backend in ("cpu", "interp") or (backend is None and default_backend() in ("cpu", "interp"))
        return block if host else None
    return block if _kind(x) is Kind.DEVICE else None


def reduce_columns(kind: str, x: Any, al: Along, block: tuple[int, int, int], keepdims: bool,
                   backend: str | None) -> Any:
    """``kind`` of ``x`` along ``al``'s axes through the column forms (``block``: what
    :func:`column_block` returned), shaped as the kept axes (or keepdims)."""
    r = _columns(kind, x, block, backend)
    if kind == "argmax" and isinstance(r, np.ndarray):
        r = r.astype(np.int64)
    return r.reshape(al.keepdims_shape if keepdims else al.kept_shape)


def _columns(kind: str, x: Any, block: tuple[int, int, int], backend: str | None,
             gpu_form: bool | None = None) -> Any:
    """The flat result of ``kind`` over ``x`` seen as ``block`` (``gpu_form``: force a program form,
    for tests; argmax's indices as u32)."""
    return planned(("col_" + kind, block, gpu_form), (x,), backend, _col_checked)


def _col_checked(op: tuple[str, tuple[int, int, int], bool | None], inputs: tuple[Any, ...],
                 backend: str | None) -> Any:
    name, (outer, red, inner), gpu_form = op
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
    out = ctx.empty(outer * inner, U32 if kind == "argmax" else t)
    if outer * inner:
        gpu = ctx.gpu_form
        grid = -(-outer * inner // COL_WG) if gpu else outer * -(-inner // cpu_block(kind))
        carrier = ctx.empty(inner, U32)  # its length is the inner extent (never read)
        ctx.run(col_program(kind, t, gpu=gpu), {"x": arrs["x"].data, "out": out, "inner": carrier}, grid)
    return ctx.result(out, (outer * inner,))
