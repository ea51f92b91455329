"""``matvec(m, v)`` and its gradient.

* Forward, GPU form: ``MATVEC_ROWS`` consecutive rows per subgroup (``MATVEC_WG / 32``
  subgroups per workgroup; one row measured fastest). The 32 lanes read a row coalesced,
  ``GPU_UNROLL`` columns each per step, all the step's loads first under one in-range check,
  accumulate (in f64 for f32), and one subgroup reduce per row gives it; lane 0 stores it.
  CPU form: rows in groups (vyre.ops._grouped): a block of rows per workgroup, four rows at a
  time sharing each step's widened ``v``, 16 lane accumulators a row, merged pairwise.
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
    BufferDecl, DataType, Expr, Node, Program, assign, buflen, cast, fma, gid, if_, lane, let, lid, load, loop,
    minimum, output, read, select, store, u32, var, wgid,
)
from ..ir.expr import lit
from ._blocks import SUBGROUP, Combine, accumulator_type, all_of, subgroup_combine, tree
from ._grouped import cpu_workgroups, grouped_rows
from ._plans import planned
from ._sites import Site
from ._runtime import OpsError, prepare

__all__ = ["MATVEC_WG", "matvec", "matvec_grad", "matvec_program", "outer_program", "vecmat_program"]

MATVEC_WG = 256
#: GPU form: rows per subgroup. Measured on an H100 (BENCHMARKS.md, vyre.ops): 1 row, 8 columns
#: per lane per step: 28.0 us for 4096x4096 f32; 2 rows 32.5 us, 4 rows 29.8-41.8 us, 8 rows 42.4 us,
#: 1 row with 16 columns 35.0 us (re-using v across rows does not pay: v stays in L1 anyway)
MATVEC_ROWS = 1
GPU_UNROLL = 8
#: rows per chunk of the column sums of ``grad_v`` (first pass)
VECMAT_CHUNK = 64


@functools.lru_cache(maxsize=32)
def matvec_program(t: DataType, *, gpu: bool, rows: int = MATVEC_ROWS, unroll: int = GPU_UNROLL,
                   wg: int = MATVEC_WG) -> Program:
    """``out[r] = sum_j m[r * cols + j] * v[j]``, ``cols = len(v)``, ``rows = len(out)``.

    GPU form: each subgroup of a workgroup of ``wg`` computes ``rows`` consecutive rows (launch
    ``ceil(len(out) / (wg / 32 * rows))`` workgroups); its lanes read ``unroll`` columns each per
    step, coalesced, and each ``v`` element is loaded (and widened) once for all ``rows`` rows."""
    a = accumulator_type(Combine.ADD, t)
    bufs = [read("m", 0, t), read("v", 1, t), output("out", 2, t)]
    if gpu:
        return _matvec_gpu(t, a, bufs, rows, unroll, wg)
    return _matvec_cpu(t, a, bufs)


def _matvec_cpu(t: DataType, a: DataType, bufs: list[BufferDecl]) -> Program:
    """CPU form: rows in groups (vyre.ops._grouped), each step's ``w = v[j]`` widened once for
    the group's rows: ``lanes[i L + k] += m[b_i + p + k] * w``."""
    exact = t is DataType.F32  # a product of two f32 is exact in f64: fusing it changes no bit

    def add(i: int, at: Expr, j: Expr, slot: Expr, w: Expr | None, tmp: str) -> list[Node]:
        assert w is not None
        x = cast(a, load("m", at))
        if exact:  # one fused multiply-add where the CPU has one (Fma), the same value as x * w + lane
            return [let(tmp, x), store("lanes", slot, fma(var(tmp), w, load("lanes", slot)))]
        return [let(tmp, x * w), store("lanes", slot, load("lanes", slot) + var(tmp))]

    return grouped_rows(bufs, a, matrix="m", out="out", cols=buflen("v"), add=add,
                        shared=lambda j: cast(a, load("v", j)), total=lambda s: cast(t, s))


def _matvec_gpu(t: DataType, a: DataType, bufs: list[BufferDecl], nr: int, u: int, wg: int) -> Program:
    span = SUBGROUP * u
    cols, b, tb = var("cols"), var("b"), var("tb")
    body: list[Node] = [
        let("r0", (wgid() * u32(wg // SUBGROUP) + lid() / u32(SUBGROUP)) * u32(nr)),
        let("nrows", buflen("out")),
        let("cols", buflen("v")),
    ]
    # a subgroup's rows past the last read the last row (a real one) and store nothing, so every
    # load of a full step is in range and the step needs one check (docs/codegen.md, "Bounds guards")
    body += [let(f"base{i}", minimum(var("r0") + u32(i), var("nrows") - u32(1)) * cols) for i in range(nr)]
    body += [let(f"a{i}_{k}", lit(0.0, a)) for i in range(nr) for k in range(u)]

    def step(j0: Expr, guarded: bool) -> list[Node]:
        js = [j0 + u32(k * SUBGROUP) if k else j0 for k in range(u)]
        out: list[Node] = []
        for k, j in enumerate(js):  # every load of the step first: they issue together
            out.append(let(f"v{k}", cast(a, load("v", j))))
            for i in range(nr):
                out.append(let(f"m{i}_{k}", cast(a, load("m", var(f"base{i}") + j))))
        for k, j in enumerate(js):
            for i in range(nr):
                term: Expr = var(f"m{i}_{k}") * var(f"v{k}")
                if guarded:  # past the row's end m reads the next row: the term must be 0, not 0 * inf
                    term = select(j.lt(cols), term, lit(0.0, a))
                out.append(assign(f"a{i}_{k}", var(f"a{i}_{k}") + term))
        if guarded:
            return out
        conds: list[Expr] = [j.lt(buflen("v")) for j in js]
        conds += [(var(f"base{i}") + j).lt(buflen("m")) for i in range(nr) for j in js]
        return [if_(all_of(conds), out)]

    body += [
        loop("c", u32(0), cols / u32(span), [let("b", var("c") * u32(span) + lane()), *step(b, False)]),
        let("tb", (cols / u32(span)) * u32(span) + lane()),
        *step(tb, True),
    ]
    for i in range(nr):
        nodes, part = tree(f"t{i}", [var(f"a{i}_{k}") for k in range(u)], Combine.ADD)
        more, total = subgroup_combine(f"w{i}", part, Combine.ADD, a)
        body += nodes + more
        r = var("r0") + u32(i) if i else var("r0")
        body.append(if_(lane().eq(u32(0)).and_(r.lt(var("nrows"))), [store("out", r, cast(t, total))]))
    return Program.wrapped(bufs, wg, body)


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
    a = accumulator_type(Combine.ADD, t)
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
    if _gpu_form is None:
        return _MATVEC_SITE.two(m, v, backend, None)
    return planned(("matvec", _gpu_form), (m, v), backend, _matvec)


def _matvec_route(m: Any, v: Any, backend: str | None, _: None) -> Any:
    return planned(("matvec", None), (m, v), backend, _matvec)


_MATVEC_SITE = Site(_matvec_route)


def _matvec(op: tuple[str, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    _, gpu_form = op
    m, v = inputs
    ctx, arrs = prepare({"m": m, "v": v}, backend)
    if gpu_form is not None:
        ctx.gpu_form = gpu_form
    rows, _ = _check(arrs)
    t = arrs["m"].dtype
    out = ctx.empty(rows, t)
    if rows:
        per = MATVEC_WG // SUBGROUP * MATVEC_ROWS
        grid = -(-rows // per) if ctx.gpu_form else cpu_workgroups(rows, arrs["v"].shape[0])
        # the builder's defaults, spelled as every caller spells them: one cached Program per form
        prog = matvec_program(t, gpu=ctx.gpu_form)
        ctx.run(prog, {"m": arrs["m"].data, "v": arrs["v"].data, "out": out}, grid)
    return ctx.result(out, (rows,))


def matvec_grad(m: Any, v: Any, g: Any, *, backend: str | None = None) -> tuple[Any, Any]:
    """``(grad_m, grad_v) = (outer(g, v), m^T g)``: the vector-Jacobian product of ``matvec`` for
    the cotangent ``g`` (rows,)."""
    return planned(("matvec_grad",), (m, v, g), backend, _matvec_grad)


def _matvec_grad(op: tuple[str], inputs: tuple[Any, ...], backend: str | None) -> tuple[Any, Any]:
    m, v, g = inputs
    ctx, arrs = prepare({"m": m, "v": v, "g": g}, backend)
    rows, cols = _check(arrs)
    if arrs["g"].shape != (rows,):
        raise OpsError(f"g has shape {arrs['g'].shape}, expected ({rows},). Fix: pass one cotangent per row")
    t = arrs["m"].dtype
    a = accumulator_type(Combine.ADD, t)
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
