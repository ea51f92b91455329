"""``matvec(m, v)`` and its gradient.

* Forward, GPU form: one subgroup per row (``MATVEC_WG / 32`` rows per workgroup). The 32 lanes
  read the row coalesced, ``GPU_UNROLL`` loads in flight each, accumulate (in f64 for f32), and one
  subgroup reduce gives the row; lane 0 stores it. CPU form: one invocation per row, stride-1,
  8 accumulators.
* Gradient (``matvec_grad``): ``grad_m = outer(g, v)`` is elementwise (one flat program);
  ``grad_v = m^T g`` sums columns: invocation ``(chunk, j)`` sums column ``j`` over a chunk of rows
  (consecutive invocations read consecutive columns of the same rows: coalesced), and a second pass
  adds the chunks in order. No atomics, so both are deterministic; the examples.matvec program
  differentiated by vyre.autodiff instead issues an atomic per (row, column) for ``grad_v``
  (BENCHMARKS.md compares them).
"""

from __future__ import annotations

import functools
from typing import Any

from ..ir import (
    F64, assign, DataType, Expr, Node, Program, buflen, cast, gid, if_, lane, let, lid, load, loop, minimum,
    output, read, store, u32, var, wgid,
)
from ..ir.expr import lit
from ._blocks import SUBGROUP, Combine, subgroup_combine
from ._rows import RowLoop
from ._runtime import OpsError, prepare

__all__ = ["MATVEC_WG", "matvec", "matvec_grad", "matvec_program", "outer_program", "vecmat_program"]

MATVEC_WG = 256
GPU_UNROLL = 8
CPU_UNROLL = 8
#: rows per chunk of the column sums of ``grad_v`` (first pass)
VECMAT_CHUNK = 64


def _acc(t: DataType) -> DataType:
    return F64 if t is DataType.F32 else t


@functools.lru_cache(maxsize=16)
def matvec_program(t: DataType, *, gpu: bool) -> Program:
    """``out[r] = sum_j m[r * cols + j] * v[j]``, ``cols = len(v)``, ``rows = len(out)``."""
    a = _acc(t)
    bufs = [read("m", 0, t), read("v", 1, t), output("out", 2, t)]
    if gpu:
        per = MATVEC_WG // SUBGROUP
        r: Expr = wgid() * u32(per) + lid() / u32(SUBGROUP)
    else:
        r = gid()
    body: list[Node] = [let("r", r), let("cols", buflen("v"))]
    rl = RowLoop(gpu, SUBGROUP if gpu else 1, GPU_UNROLL if gpu else CPU_UNROLL, lane(),
                 var("r") * var("cols"), var("cols"), cols_of=("v",))
    nodes, part = rl.reduce("s", Combine.ADD, a, lambda ld: cast(a, ld("m")) * cast(a, ld("v")), ("m", "v"))
    body += nodes
    if gpu:
        # rows past the end (the last workgroup's spare subgroups) read past m's end: zeros; their
        # lanes still take part in the subgroup reduce, which must be reached by all
        more, total = subgroup_combine("w", part, Combine.ADD, a)
        body += more
        body.append(if_(lane().eq(u32(0)).and_(var("r").lt(buflen("out"))),
                        [store("out", var("r"), cast(t, total))]))
        return Program.wrapped(bufs, MATVEC_WG, body)
    body.append(store("out", var("r"), cast(t, part)))
    return Program.wrapped(bufs, 1, [let("r0", gid()), if_(var("r0").lt(buflen("out")), body)])


@functools.lru_cache(maxsize=8)
def outer_program(t: DataType) -> Program:
    """``gm[i] = g[i / cols] * v[i % cols]``: the gradient of ``matvec`` with respect to ``m``."""
    i = var("i")
    return Program.wrapped([read("g", 0, t), read("v", 1, t), output("gm", 2, t)], 256, [
        let("i", gid()),
        if_(i.lt(buflen("gm")), [
            let("cols", buflen("v")),
            store("gm", i, load("g", i / var("cols")) * load("v", i % var("cols"))),
        ]),
    ])


@functools.lru_cache(maxsize=8)
def vecmat_program(t: DataType, *, first: bool) -> Program:
    """Column sums in two passes. ``first``: ``part[c * cols + j] = sum over rows r of chunk c of
    g[r] * m[r * cols + j]`` (``cols = len(v)``, chunks of ``ceil(rows / chunks)`` rows, ``chunks =
    len(part) / cols``). Otherwise ``gv[j] = sum_c part[c * cols + j]`` in chunk order."""
    a = _acc(t)
    i, j, c = var("i"), var("j"), var("c")
    if first:
        bufs = [read("m", 0, t), read("g", 1, t), read("v", 2, t), output("part", 3, a)]
        rows = buflen("g")
        body: list[Node] = [
            let("cols", buflen("v")),
            let("j", i % var("cols")),
            let("c", i / var("cols")),
            let("per", (rows + buflen("part") / var("cols") - u32(1)) / (buflen("part") / var("cols"))),
            let("lo", minimum(c * var("per"), rows)),
            let("hi", minimum(var("lo") + var("per"), rows)),
            let("acc", _zero(a)),
            loop("k", var("lo"), var("hi"), [
                _add("acc", cast(a, load("g", var("k"))) * cast(a, load("m", var("k") * var("cols") + j))),
            ]),
            store("part", i, var("acc")),
        ]
        n = buflen("part")
    else:
        bufs = [read("part", 0, a), read("v", 1, t), output("gv", 2, t)]
        body = [
            let("cols", buflen("v")),
            let("chunks", buflen("part") / var("cols")),
            let("acc", _zero(a)),
            loop("c", u32(0), var("chunks"), [_add("acc", load("part", c * var("cols") + i))]),
            store("gv", i, cast(t, var("acc"))),
        ]
        n = buflen("gv")
    return Program.wrapped(bufs, 256, [let("i", gid()), if_(i.lt(n), body)])


def _zero(a: DataType) -> Expr:
    return lit(0.0, a)


def _add(name: str, v: Expr) -> Node:
    return assign(name, var(name) + v)


def _check(arrs: dict) -> tuple[int, int]:
    m, v = arrs["m"], arrs["v"]
    if len(m.shape) != 2 or len(v.shape) != 1 or m.shape[1] != v.shape[0]:
        raise OpsError(f"matvec of shapes {m.shape} and {v.shape}. Fix: pass m of shape (rows, cols) and "
                       "v of shape (cols,)")
    return m.shape[0], m.shape[1]


def matvec(m: Any, v: Any, *, backend: str | None = None, _gpu_form: bool | None = None) -> Any:
    """``m @ v`` for a 2-D ``m`` (rows, cols) and a 1-D ``v`` (cols); f32 accumulates in f64."""
    ctx, arrs = prepare({"m": m, "v": v}, backend)
    if _gpu_form is not None:
        ctx.gpu_form = _gpu_form
    rows, _ = _check(arrs)
    t = arrs["m"].dtype
    out = ctx.empty(rows, t)
    if rows:
        per = MATVEC_WG // SUBGROUP
        grid = -(-rows // per) if ctx.gpu_form else rows
        ctx.run(matvec_program(t, gpu=ctx.gpu_form), {"m": arrs["m"].data, "v": arrs["v"].data, "out": out}, grid)
    return ctx.result(out, (rows,))


def matvec_grad(m: Any, v: Any, g: Any, *, backend: str | None = None) -> tuple[Any, Any]:
    """``(grad_m, grad_v) = (outer(g, v), m^T g)``: the vector-Jacobian product of ``matvec`` for
    the cotangent ``g`` (rows,)."""
    ctx, arrs = prepare({"m": m, "v": v, "g": g}, backend)
    rows, cols = _check(arrs)
    if arrs["g"].shape != (rows,):
        raise OpsError(f"g has shape {arrs['g'].shape}, expected ({rows},). Fix: pass one cotangent per row")
    t = arrs["m"].dtype
    a = _acc(t)
    gm, gv = ctx.empty(rows * cols, t), ctx.empty(cols, t)
    if rows * cols:
        ctx.run(outer_program(t), {"g": arrs["g"].data, "v": arrs["v"].data, "gm": gm}, -(-rows * cols // 256))
    if cols:
        chunks = max(1, min(-(-rows // VECMAT_CHUNK), 64))
        part = ctx.empty(chunks * cols, a)
        ctx.run(vecmat_program(t, first=True), {"m": arrs["m"].data, "g": arrs["g"].data,
                                                "v": arrs["v"].data, "part": part}, -(-chunks * cols // 256))
        ctx.run(vecmat_program(t, first=False), {"part": part, "v": arrs["v"].data, "gv": gv}, -(-cols // 256))
    return ctx.result(gm, (rows, cols)), ctx.result(gv, (cols,))
