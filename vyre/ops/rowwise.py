"""Row-wise ops on 2-D arrays (``axis=-1``): ``row_sum``, ``row_max``, ``softmax``, ``logsumexp``,
``layer_norm``, and the gradient programs of the last three.

Each program takes the matrix flat (``rows * cols`` elements) and one *per-row* buffer of ``rows``
elements (the result of a row reduction, or a statistic the gradient needs: the log-sum-exp of a
softmax row, the mean and inverse deviation of a layer-norm row), so ``cols = len(x) / len(row
buffer)`` and one compiled kernel serves every shape.

* GPU form: one workgroup per row (:func:`row_workgroup` invocations: 32 for short rows up to 256);
  each invocation strides through the row (vyre.ops._rows), partial results combine across the
  workgroup (subgroup reduce, workgroup memory, subgroup reduce) and every invocation gets the
  row's value, then writes its share.
* CPU form: a flat program, one invocation per row, stride-1 loops. With ``lanes=True`` (what the
  functions below run) rows of at least ``_rows.LANES_MIN_COLS`` elements reduce through a lane
  array of 64 accumulators (vectorised, as the whole-array reductions' CPU form), shorter ones and
  every row of the ``lanes=False`` form into 8 accumulators. ``lanes=False`` is the form reverse
  mode takes (vyre.autodiff refuses workgroup memory written in a loop, as for the whole-array
  reductions' CPU form); the GPU form ignores ``lanes``.

Stable formulas: softmax and logsumexp subtract the row maximum (logsumexp takes 0 when it is
infinite, so an all ``-inf`` row gives ``-inf``); layer norm is two-pass (mean, then the mean
squared deviation), accumulated in f64 for f32 input.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any


from ..ir import (
    BufferDecl, DataType, Expr, Node, Program, UnOpKind, buflen, cast, exp, fma, gid, if_, let, lid,
    load, log, output, read, select, store, u32, unop, var, wgid,
)
from ..ir.expr import lit
from ._axes import Along, along, from_rows, matrix_axis, per_row, rows_of_stat, to_rows
from ._blocks import Combine, accumulator_type, kind_combine, kind_term, kind_total, workgroup_combine
from ._grouped import cpu_workgroups, grouped_rows
from ._rows import LANES_MIN_COLS_COSTLY, Access, RowLoop
from ._plans import planned
from ._runtime import Ctx, OpsError, _kind, prepare

__all__ = [
    "GROUPED_KINDS", "ROW_KINDS", "RowBuilder", "grouped_row_program", "layer_norm", "layer_norm_grad",
    "layer_norm_grad_program", "layer_norm_program", "logsumexp", "logsumexp_grad", "logsumexp_grad_program",
    "logsumexp_program", "prepare_rows", "reduce_matrix_rows", "reduce_rows", "row_max", "row_program",
    "row_sum", "row_workgroup", "softmax", "softmax_grad", "softmax_grad_program", "softmax_program",
]

GPU_UNROLL = 8
CPU_UNROLL = 8


def row_workgroup(cols: int) -> int:
    """Invocations per row in the GPU form: enough that each has a few elements, at most 256."""
    for wg in (32, 64, 128):
        if cols <= wg * 8:
            return wg
    return 256


#: The GPU form keeps a row in registers (each invocation loads its elements once) up to this many
#: elements per invocation: 4096 columns at 256 invocations per row.
MAX_RESIDENT = 16


def row_resident(cols: int, wg: int) -> int:
    """Elements per invocation of the resident GPU form (a power of two), or 0: loop over the row."""
    r = 1
    while wg * r < cols:
        r *= 2
    return r if r <= MAX_RESIDENT else 0


class RowBuilder:
    """Builds one row-wise program: declares buffers, binds the row's geometry and combines."""

    def __init__(self, gpu: bool, wg: int, stat: str, resident: int = 0, lanes: bool = False) -> None:
        self.gpu, self.wg, self.resident = gpu, wg, resident if gpu else 0
        self.lanes = lanes and not gpu
        self.bufs: list[BufferDecl] = []
        self.body: list[Node] = []
        self.stat = stat
        self.stmts: list[Node] = []
        self.rl: RowLoop | None = None

    def buf(self, decl: BufferDecl) -> BufferDecl:
        self.bufs.append(decl)
        return decl

    def begin(self, data: str) -> RowLoop:
        r = wgid() if self.gpu else gid()
        self.body += [
            let("r", r),
            let("cols", buflen(data) / buflen(self.stat)),
            let("base", var("r") * var("cols")),
        ]
        lanes = self.wg if self.gpu else 1
        self.rl = RowLoop(self.gpu, lanes, GPU_UNROLL if self.gpu else CPU_UNROLL, lid(), var("base"), var("cols"),
                       self.resident, elements={d.name: d.element for d in self.bufs}, lane_reduce=self.lanes)
        return self.rl

    def combine(self, prefix: str, value: Expr, comb: Combine, t: DataType) -> Expr:
        if not self.gpu:
            return value
        nodes, total, tiles = workgroup_combine(prefix, value, comb, t, self.wg)
        self.stmts += nodes
        self.bufs += tiles
        return total

    def store_stat(self, name: str, value: Expr) -> None:
        st = store(name, var("r"), value)
        self.stmts.append(if_(lid().eq(u32(0)), [st]) if self.gpu else st)

    def program(self) -> Program:
        if self.gpu:
            body = self.body + self.stmts
        else:
            # CPU form: one invocation per row; nothing to do past the last row
            body = [*self.body, if_(var("r").lt(buflen(self.stat)), self.stmts)]
        lanes = list(self.rl.lane_arrays.values()) if self.rl else []
        return Program.wrapped(self.bufs + lanes, self.wg if self.gpu else 1, body)


def _shift(m: Expr, t: DataType) -> Expr:
    """The row maximum used as the shift: 0 when it is infinite (or NaN, which propagates anyway)."""
    return select(unop(UnOpKind.IS_FINITE, m), m, lit(0.0, t))


#: row_program's kinds: how a row's elements combine, and what the total becomes
ROW_KINDS = ("sum", "mean", "max", "min", "norm")


@functools.lru_cache(maxsize=64)
def row_program(kind: str, t: DataType, *, gpu: bool, wg: int = 256, resident: int = 0,
        lanes: bool = False) -> Program:
    """``out[r]`` = the reduction of row ``r``: its sum (``kind="sum"``), mean (``"mean"``: NaN for
    an empty row, as 0 / 0) or Euclidean norm (``"norm"``), f32 accumulated in f64; its
    NaN-propagating maximum (``"max"``) or minimum (``"min"``)."""
    if kind not in ROW_KINDS:
        raise ValueError(f"row_program kind {kind!r}; expected one of {ROW_KINDS}")
    b = RowBuilder(gpu, wg, "out", resident, lanes)
    b.buf(read("x", 0, t))
    b.buf(output("out", 1, t))
    rl = b.begin("x")
    comb = kind_combine(kind)
    a = accumulator_type(comb, t, pairwise=bool(b.resident))
    nodes, part = rl.reduce("s", comb, a, lambda ld: kind_term(kind, a, ld("x")), ("x",))
    b.stmts += nodes
    total = b.combine("t", part, comb, a)
    b.store_stat("out", cast(t, kind_total(kind, total, a, var("cols"))))
    return b.program()


#: the kinds row sums in groups compute (vyre.ops._grouped), for rows of at least GROUPED_MIN_COLS
#: and fewer than GROUPED_MAX_COLS columns: against one row per invocation, 2-3x faster for 16-48
#: columns, 1.2-1.7x for 64-128; about even at 256 (f32 row sums, 2-core VM, BENCHMARKS.md)
GROUPED_KINDS = ("sum", "mean", "norm")
GROUPED_MIN_COLS = 8
GROUPED_MAX_COLS = 256


@functools.lru_cache(maxsize=16)
def grouped_row_program(kind: str, t: DataType) -> Program:
    """The CPU form of :func:`row_program` for the adding kinds (GROUPED_KINDS) in groups of rows
    (vyre.ops._grouped; launch ``cpu_workgroups(rows, cols)`` workgroups): the same
    values up to the order of the additions (16 lanes a row, merged pairwise)."""
    if kind not in GROUPED_KINDS:
        raise ValueError(f"grouped_row_program kind {kind!r}; expected one of {GROUPED_KINDS}")
    a = accumulator_type(Combine.ADD, t)
    exact = t is not a  # a square of an f32 is exact in f64: fusing it changes no bit

    def add(i: int, at: Expr, j: Expr, slot: Expr, w: Expr | None, tmp: str) -> list[Node]:
        x = cast(a, load("x", at))
        if kind != "norm":
            return [store("lanes", slot, load("lanes", slot) + x)]
        if exact:
            return [let(tmp, x), store("lanes", slot, fma(var(tmp), var(tmp), load("lanes", slot)))]
        return [let(tmp, x), store("lanes", slot, load("lanes", slot) + var(tmp) * var(tmp))]

    return grouped_rows([read("x", 0, t), output("out", 1, t)], a, matrix="x", out="out",
                        cols=buflen("x") / buflen("out"), add=add, shared=None,
                        total=lambda total: cast(t, kind_total(kind, total, a, var("cols"))))


def _max_and_sumexp(b: RowBuilder, rl: RowLoop, t: DataType, *, finite_shift: bool) -> tuple[Expr, Expr]:
    """Statements for the row's shift ``ms`` and ``S = sum exp(x - ms)``; returns their vars.
    ``finite_shift``: an infinite maximum shifts by 0 (logsumexp: an all -inf row gives -inf, a
    +inf gives +inf); otherwise by the maximum itself (softmax: such rows are NaN, as in PyTorch)."""
    nodes, part = rl.reduce("m", Combine.MAX, t, lambda ld: ld("x"), ("x",))
    b.stmts += nodes
    b.stmts.append(let("mx", b.combine("mt", part, Combine.MAX, t)))
    b.stmts.append(let("ms", _shift(var("mx"), t) if finite_shift else var("mx")))
    nodes, part = rl.reduce("e", Combine.ADD, t, lambda ld: exp(ld("x") - var("ms")), ("x",),
                            lanes_from=LANES_MIN_COLS_COSTLY)
    b.stmts += nodes
    b.stmts.append(let("se", b.combine("et", part, Combine.ADD, t)))
    return var("ms"), var("se")


@functools.lru_cache(maxsize=64)
def logsumexp_program(t: DataType, *, gpu: bool, wg: int = 256, resident: int = 0,
        lanes: bool = False) -> Program:
    """``out[r] = log(sum_j exp(x[r, j]))``, shifted by the row maximum."""
    b = RowBuilder(gpu, wg, "out", resident, lanes)
    b.buf(read("x", 0, t))
    b.buf(output("out", 1, t))
    rl = b.begin("x")
    ms, se = _max_and_sumexp(b, rl, t, finite_shift=True)
    b.store_stat("out", ms + log(se))
    return b.program()


@functools.lru_cache(maxsize=64)
def softmax_program(t: DataType, *, gpu: bool, wg: int = 256, resident: int = 0,
        lanes: bool = False) -> Program:
    """``y[r, j] = exp(x[r, j] - m) / sum_k exp(x[r, k] - m)`` with ``m`` the row maximum (so a row
    holding NaN or +inf, or only -inf, is NaN throughout, as in PyTorch); ``lse[r] = m + log(sum)``
    (its length gives the row count)."""
    b = RowBuilder(gpu, wg, "lse", resident, lanes)
    b.buf(read("x", 0, t))
    b.buf(output("y", 1, t))
    b.buf(output("lse", 2, t))
    rl = b.begin("x")
    if gpu:
        ms, se = _max_and_sumexp(b, rl, t, finite_shift=False)
        b.stmts.append(let("inv", lit(1.0, t) / se))
        b.stmts += rl.each("w", lambda ld, i: [store("y", i, exp(ld("x") - ms) * var("inv"))], ("x",), ("y",))
    else:
        # CPU: the exponentials in an elementwise pass (vectorised), then sum and scale what it stored
        nodes, part = rl.reduce("m", Combine.MAX, t, lambda ld: ld("x"), ("x",))
        b.stmts += [*nodes, let("mx", part)]
        ms = var("mx")
        b.stmts += rl.each("e", lambda ld, i: [store("y", i, exp(ld("x") - ms))], ("x",), ("y",))
        nodes, part = rl.reduce("s", Combine.ADD, t, lambda ld: ld("y"), ("y",))
        b.stmts += [*nodes, let("se", part), let("inv", lit(1.0, t) / var("se"))]
        se = var("se")
        b.stmts += rl.each("w", lambda ld, i: [store("y", i, ld("y") * var("inv"))], ("y",), ("y",))
    b.store_stat("lse", ms + log(se))
    return b.program()


@functools.lru_cache(maxsize=64)
def layer_norm_program(t: DataType, eps: float, *, gpu: bool, wg: int = 256, resident: int = 0,
        lanes: bool = False) -> Program:
    """``y = (x - mean) / sqrt(var + eps)`` per row (biased variance, no affine parameters, as
    ``torch.nn.functional.layer_norm(x, (cols,))``); ``mean[r]`` and ``rstd[r]`` are kept for the
    gradient. Two passes over the row, accumulated in f64 for f32."""
    b = RowBuilder(gpu, wg, "mean", resident, lanes)
    a = accumulator_type(Combine.ADD, t, pairwise=bool(b.resident))
    b.buf(read("x", 0, t))
    b.buf(output("y", 1, t))
    b.buf(output("mean", 2, t))
    b.buf(output("rstd", 3, t))
    rl = b.begin("x")
    nodes, part = rl.reduce("s", Combine.ADD, a, lambda ld: cast(a, ld("x")), ("x",))
    b.stmts += nodes
    b.stmts.append(let("mu", b.combine("st", part, Combine.ADD, a) / cast(a, var("cols"))))
    nodes, part = rl.reduce("v", Combine.ADD, a, lambda ld: _sq(cast(a, ld("x")) - var("mu")), ("x",))
    b.stmts += nodes
    b.stmts.append(let("var_", b.combine("vt", part, Combine.ADD, a) / cast(a, var("cols"))))
    b.stmts.append(let("rs", lit(1.0, a) / unop(UnOpKind.SQRT, var("var_") + lit(eps, a))))
    b.stmts.append(let("mu_t", cast(t, var("mu"))))
    b.stmts.append(let("rs_t", cast(t, var("rs"))))
    b.stmts += rl.each("w", lambda ld, i: [store("y", i, (ld("x") - var("mu_t")) * var("rs_t"))], ("x",), ("y",))
    b.store_stat("mean", var("mu_t"))
    b.store_stat("rstd", var("rs_t"))
    return b.program()


def _sq(e: Expr) -> Expr:
    return e * e


# ---------------------------------------------------------------------------------------------
# Gradient programs (vector-Jacobian products), each one pass over the row


@functools.lru_cache(maxsize=64)
def softmax_grad_program(t: DataType, *, gpu: bool, wg: int = 256, resident: int = 0,
        lanes: bool = False) -> Program:
    """``dx = y * (g - sum_j g_j y_j)`` per row; ``d[r]`` gets the row's ``sum g y``."""
    b = RowBuilder(gpu, wg, "d", resident, lanes)
    b.buf(read("y", 0, t))
    b.buf(read("g", 1, t))
    b.buf(output("dx", 2, t))
    b.buf(output("d", 3, t))
    rl = b.begin("y")
    nodes, part = rl.reduce("s", Combine.ADD, t, lambda ld: ld("g") * ld("y"), ("g", "y"))
    b.stmts += nodes
    b.stmts.append(let("gy", b.combine("st", part, Combine.ADD, t)))
    b.stmts += rl.each("w", lambda ld, i: [store("dx", i, ld("y") * (ld("g") - var("gy")))], ("y", "g"), ("dx",))
    b.store_stat("d", var("gy"))
    return b.program()


@functools.lru_cache(maxsize=64)
def logsumexp_grad_program(t: DataType, *, gpu: bool, wg: int = 256, resident: int = 0,
        lanes: bool = False) -> Program:
    """``dx[r, j] = g[r] * exp(x[r, j] - lse[r])`` (the softmax of the row, scaled)."""
    b = RowBuilder(gpu, wg, "lse", resident, lanes)
    b.buf(read("x", 0, t))
    b.buf(read("lse", 1, t))
    b.buf(read("g", 2, t))
    b.buf(output("dx", 3, t))
    rl = b.begin("x")
    b.stmts += [let("l", load("lse", var("r"))), let("gr", load("g", var("r")))]
    b.stmts += rl.each("w", lambda ld, i: [store("dx", i, var("gr") * exp(ld("x") - var("l")))], ("x",), ("dx",))
    return b.program()


@functools.lru_cache(maxsize=64)
def layer_norm_grad_program(t: DataType, *, gpu: bool, wg: int = 256, resident: int = 0,
        lanes: bool = False) -> Program:
    """``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`` per row, ``xhat = (x - mean) * rstd``."""
    b = RowBuilder(gpu, wg, "mean", resident, lanes)
    a = accumulator_type(Combine.ADD, t, pairwise=bool(b.resident))
    b.buf(read("x", 0, t))
    b.buf(read("g", 1, t))
    b.buf(read("mean", 2, t))
    b.buf(read("rstd", 3, t))
    b.buf(output("dx", 4, t))
    rl = b.begin("x")
    b.stmts += [let("mu", load("mean", var("r"))), let("rs", load("rstd", var("r")))]

    def xhat(ld: Access) -> Expr:
        return (ld("x") - var("mu")) * var("rs")

    nodes, part = rl.reduce("g", Combine.ADD, a, lambda ld: cast(a, ld("g")), ("g",))
    b.stmts += nodes
    b.stmts.append(let("mg", cast(t, b.combine("gt", part, Combine.ADD, a) / cast(a, var("cols")))))
    nodes, part = rl.reduce("h", Combine.ADD, a, lambda ld: cast(a, ld("g") * xhat(ld)), ("g", "x"))
    b.stmts += nodes
    b.stmts.append(let("mgx", cast(t, b.combine("ht", part, Combine.ADD, a) / cast(a, var("cols")))))
    b.stmts += rl.each("w", lambda ld, i: [
        store("dx", i, var("rs") * (ld("g") - var("mg") - xhat(ld) * var("mgx")))], ("g", "x"), ("dx",))
    return b.program()


# ---------------------------------------------------------------------------------------------
# Functions


def _form(ctx: Ctx, cols: int) -> dict[str, Any]:
    """The program form's keyword arguments for rows of ``cols`` elements."""
    if not ctx.gpu_form:
        return {"gpu": False, "wg": 1, "resident": 0, "lanes": True}
    wg = row_workgroup(cols)
    return {"gpu": True, "wg": wg, "resident": row_resident(cols, wg)}


def prepare_rows(named: dict[str, Any], backend: str | None, gpu_form: bool | None
          ) -> tuple[Ctx, dict, int, int, dict[str, Any]]:
    ctx, arrs = prepare(named, backend)
    if gpu_form is not None:
        ctx.gpu_form = gpu_form
    first = next(iter(arrs.values()))
    if len(first.shape) != 2:
        raise OpsError(f"{next(iter(named))} has shape {first.shape}; row-wise ops take a 2-D array "
                       "(rows, cols) and reduce along the last axis. Fix: reshape it to 2-D")
    rows, cols = first.shape
    return ctx, arrs, rows, cols, _form(ctx, cols)


def _row_reduce(kind: str, x: Any, backend: str | None, gpu_form: bool | None = None) -> Any:
    return planned(("row_" + kind, gpu_form), (x,), backend, _row_reduce_checked)


def _row_reduce_checked(op: tuple[str, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    name, gpu_form = op
    kind = name[4:]  # "row_sum" -> "sum"
    (x,) = inputs
    ctx, arrs, rows, cols, kw = prepare_rows({"x": x}, backend, gpu_form)
    t = arrs["x"].dtype
    out = ctx.empty(rows, t)
    if rows:
        if not kw["gpu"] and kind in GROUPED_KINDS and GROUPED_MIN_COLS <= cols < GROUPED_MAX_COLS:
            prog, grid = grouped_row_program(kind, t), cpu_workgroups(rows, cols)
        else:
            prog, grid = (row_program(kind, t, **kw) if kind in ROW_KINDS else logsumexp_program(t, **kw)), rows
        ctx.run(prog, {"x": arrs["x"].data, "out": out}, grid)
    return ctx.result(out, (rows,))


def reduce_rows(kind: str, x: Any, al: Along, keepdims: bool, backend: str | None) -> Any:
    """``kind`` (one of ROW_KINDS) of ``x`` along ``al``'s axes, one row per position of the kept
    axes (vyre.ops._axes): what ``sum(x, axis=...)`` and its kin run when some axis is kept."""
    r = planned(("row_" + kind, None), (to_rows(x, al),), backend, _row_reduce_checked)
    return per_row(r, al, keepdims)


def reduce_matrix_rows(kind: str, x: Any, backend: str | None) -> Any:
    """``kind`` (one of ROW_KINDS) of each row of 2-D ``x``: :func:`reduce_rows` along the last
    axis of a matrix, without reading the axes (the common call: 1-1.5 us less)."""
    return planned(_ROW_KEYS[kind], (x,), backend, _row_reduce_checked)


_ROW_KEYS = {kind: ("row_" + kind, None) for kind in ROW_KINDS}


def row_sum(x: Any, *, backend: str | None = None) -> Any:
    """Sum of each row of a 2-D array (0 for an empty row), f32 accumulated in f64: ``sum(x,
    axis=-1)``."""
    return planned(("row_sum", None), (x,), backend, _row_reduce_checked)


def row_max(x: Any, *, backend: str | None = None) -> Any:
    """Maximum of each row (NaN if the row has one, -inf for an empty row): ``max(x, axis=-1)``."""
    return planned(("row_max", None), (x,), backend, _row_reduce_checked)


def logsumexp(x: Any, axis: Any = -1, *, keepdims: bool = False, backend: str | None = None) -> Any:
    """``log(sum(exp(x), axis))``, stable (-inf for an empty or all -inf row). ``axis``: an int or
    a tuple of ints (the last axis by default; docs/ops.md, "Axes")."""
    if matrix_axis(x, axis) == 1 and not keepdims:
        return planned(("row_lse", None), (x,), backend, _row_reduce_checked)
    al = along(x, axis)
    r = planned(("row_lse", None), (to_rows(x, al),), backend, _row_reduce_checked)
    return per_row(r, al, keepdims)


def softmax(x: Any, axis: Any = -1, *, backend: str | None = None, return_lse: bool = False,
            _gpu_form: bool | None = None) -> Any:
    """Softmax along ``axis`` (the last by default; an int or a tuple of ints), in ``x``'s shape;
    with ``return_lse`` also the log-sum-exp of each row (the kept axes' shape), which
    :func:`logsumexp_grad` and the gradient of a cross-entropy take."""
    op = ("softmax", return_lse, _gpu_form)
    if matrix_axis(x, axis) == 1:
        return planned(op, (x,), backend, _softmax)
    al = along(x, axis)
    out = planned(op, (to_rows(x, al),), backend, _softmax)
    if return_lse:
        y, lse = out
        return from_rows(y, al), per_row(lse, al)
    return from_rows(out, al)


def _softmax(op: tuple[str, bool, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    _, return_lse, gpu_form = op
    (x,) = inputs
    ctx, arrs, rows, cols, kw = prepare_rows({"x": x}, backend, gpu_form)
    t = arrs["x"].dtype
    y, lse = ctx.empty(rows * cols, t), ctx.empty(rows, t)
    if rows:
        ctx.run(softmax_program(t, **kw), {"x": arrs["x"].data, "y": y, "lse": lse}, rows)
    ys = ctx.result(y, (rows, cols))
    return (ys, ctx.result(lse, (rows,))) if return_lse else ys


def softmax_grad(y: Any, g: Any, axis: Any = -1, *, backend: str | None = None,
                 _gpu_form: bool | None = None) -> Any:
    """The vector-Jacobian product of softmax along ``axis``: ``dx`` for the softmax output ``y``
    and cotangent ``g`` (of ``y``'s shape)."""
    op = ("softmax_grad", _gpu_form)
    if matrix_axis(y, axis) == 1:
        return planned(op, (y, g), backend, _softmax_grad)
    al = along(y, axis, "y")
    _same_shapes(al, g, "g")
    return from_rows(planned(op, (to_rows(y, al), to_rows(g, al)), backend, _softmax_grad), al)


def _softmax_grad(op: tuple[str, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    _, gpu_form = op
    y, g = inputs
    ctx, arrs, rows, cols, kw = prepare_rows({"y": y, "g": g}, backend, gpu_form)
    _same_shape(arrs, ("y", "g"))
    t = arrs["y"].dtype
    dx, d = ctx.empty(rows * cols, t), ctx.empty(rows, t)
    if rows:
        ctx.run(softmax_grad_program(t, **kw),
                {"y": arrs["y"].data, "g": arrs["g"].data, "dx": dx, "d": d}, rows)
    return ctx.result(dx, (rows, cols))


def logsumexp_grad(x: Any, lse: Any, g: Any, axis: Any = -1, *, backend: str | None = None,
                   _gpu_form: bool | None = None) -> Any:
    """``dx`` of ``logsumexp(x, axis)`` (whose value is ``lse``) for the per-row cotangent ``g``
    (both of the kept axes' shape, or the keepdims shape)."""
    op = ("logsumexp_grad", _gpu_form)
    if matrix_axis(x, axis) == 1:
        return planned(op, (x, lse, g), backend, _logsumexp_grad)
    al = along(x, axis)
    inputs = (to_rows(x, al), rows_of_stat(lse, al, "lse"), rows_of_stat(g, al, "g"))
    return from_rows(planned(op, inputs, backend, _logsumexp_grad), al)


def _logsumexp_grad(op: tuple[str, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    _, gpu_form = op
    x, lse, g = inputs
    ctx, arrs, rows, cols, kw = prepare_rows({"x": x, "lse": lse, "g": g}, backend, gpu_form)
    for name in ("lse", "g"):
        if arrs[name].shape not in ((rows,), (rows, 1)):  # the keepdims shape too
            raise OpsError(f"{name} has shape {arrs[name].shape}, expected ({rows},) (one per row of x). "
                           "Fix: pass logsumexp(x) and a cotangent per row")
    t = arrs["x"].dtype
    dx = ctx.empty(rows * cols, t)
    if rows:
        ctx.run(logsumexp_grad_program(t, **kw),
                {"x": arrs["x"].data, "lse": arrs["lse"].data, "g": arrs["g"].data, "dx": dx}, rows)
    return ctx.result(dx, (rows, cols))


def layer_norm(x: Any, eps: float = 1e-5, axis: Any = -1, *, backend: str | None = None,
               return_stats: bool = False, _gpu_form: bool | None = None) -> Any:
    """Layer norm ``(x - mean) / sqrt(var + eps)`` along ``axis`` (the last by default; an int or a
    tuple of ints, normalised together), no affine parameters; with ``return_stats`` also the
    per-row ``mean`` and ``rstd`` (the kept axes' shape) that :func:`layer_norm_grad` takes."""
    op = ("layer_norm", _eps(eps), return_stats, _gpu_form)
    if matrix_axis(x, axis) == 1:
        return planned(op, (x,), backend, _layer_norm)
    al = along(x, axis)
    out = planned(op, (to_rows(x, al),), backend, _layer_norm)
    if return_stats:
        y, mean, rstd = out
        return from_rows(y, al), per_row(mean, al), per_row(rstd, al)
    return from_rows(out, al)


def _eps(eps: Any) -> float:
    """``eps`` as a float: any finite real number >= 0 (a Python or numpy int or float, not a bool)."""
    if isinstance(eps, numbers.Real) and not isinstance(eps, bool):
        try:
            e = float(eps)
        except OverflowError:  # an int past the float range
            e = math.inf
        if math.isfinite(e) and e >= 0:
            return e
    raise OpsError(f"eps must be a finite real number >= 0, got {eps!r}. Fix: pass e.g. eps=1e-5")


def _layer_norm(op: tuple[str, float, bool, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    _, eps, return_stats, gpu_form = op
    (x,) = inputs
    ctx, arrs, rows, cols, kw = prepare_rows({"x": x}, backend, gpu_form)
    t = arrs["x"].dtype
    y, mean, rstd = ctx.empty(rows * cols, t), ctx.empty(rows, t), ctx.empty(rows, t)
    if rows:
        ctx.run(layer_norm_program(t, eps, **kw),
                {"x": arrs["x"].data, "y": y, "mean": mean, "rstd": rstd}, rows)
    ys = ctx.result(y, (rows, cols))
    return (ys, ctx.result(mean, (rows,)), ctx.result(rstd, (rows,))) if return_stats else ys


def layer_norm_grad(x: Any, g: Any, mean: Any, rstd: Any, axis: Any = -1, *, backend: str | None = None,
                    _gpu_form: bool | None = None) -> Any:
    """``dx`` of :func:`layer_norm` along ``axis`` for cotangent ``g``, from the statistics it
    returned."""
    op = ("layer_norm_grad", _gpu_form)
    if matrix_axis(x, axis) == 1:
        return planned(op, (x, g, mean, rstd), backend, _layer_norm_grad)
    al = along(x, axis)
    _same_shapes(al, g, "g")
    inputs = (to_rows(x, al), to_rows(g, al), rows_of_stat(mean, al, "mean"), rows_of_stat(rstd, al, "rstd"))
    return from_rows(planned(op, inputs, backend, _layer_norm_grad), al)


def _layer_norm_grad(op: tuple[str, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    _, gpu_form = op
    named = dict(zip(("x", "g", "mean", "rstd"), inputs, strict=True))
    ctx, arrs, rows, cols, kw = prepare_rows(named, backend, gpu_form)
    _same_shape(arrs, ("x", "g"))
    for name in ("mean", "rstd"):
        if arrs[name].shape not in ((rows,), (rows, 1)):  # the keepdims shape too
            raise OpsError(f"{name} has shape {arrs[name].shape}, expected ({rows},). "
                           "Fix: pass the statistics layer_norm(x, return_stats=True) returned")
    t = arrs["x"].dtype
    dx = ctx.empty(rows * cols, t)
    if rows:
        ctx.run(layer_norm_grad_program(t, **kw),
                {n: arrs[n].data for n in ("x", "g", "mean", "rstd")} | {"dx": dx}, rows)
    return ctx.result(dx, (rows, cols))


def _same_shapes(al: Along, g: Any, name: str) -> None:
    """A cotangent of the forward output's shape (checked before the rows hide a mismatch)."""
    if not hasattr(g, "shape"):
        _kind(g)  # not an array: says what it takes
    shape = tuple(int(d) for d in g.shape)
    if shape != al.shape:
        raise OpsError(f"{name} has shape {shape} but the output has {al.shape}. "
                       "Fix: pass a cotangent of the output's shape")


def _same_shape(arrs: dict, names: tuple[str, str]) -> None:
    a, b = names
    if arrs[a].shape != arrs[b].shape:
        raise OpsError(f"{a} has shape {arrs[a].shape} but {b} has {arrs[b].shape}. "
                       "Fix: pass a cotangent of the output's shape")
