"""Built-in example programs (used by the CLI, the demo, tests and benchmarks)."""

from __future__ import annotations

from collections.abc import Callable

from .ir import (
    F32, U32, BinOpKind, Program, assign, atomic_add, barrier, buflen, exp, f32, gid, if_, let,
    lid, load, loop, output, read, sin, store, subgroup_reduce, u32, var, wgid, workgroup,
)


def fused_chain(n: int = 0) -> Program:
    """``out[i] = exp(x[i]) * y[i] + sin(x[i]) * x[i]``: the fused elementwise chain."""
    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    if n:
        x, y, out = x.with_count(n), y.with_count(n), out.with_count(n)
    i = var("i")
    return Program.wrapped([x, y, out], 256, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [
            let("xi", x[i]),
            store(out, i, exp(var("xi")) * y[i] + sin(var("xi")) * var("xi")),
        ]),
    ])


def saxpy() -> Program:
    """``out[i] = a[0] * x[i] + y[i]``."""
    a, x, y, out = read("a", 0, F32), read("x", 1, F32), read("y", 2, F32), output("out", 3, F32)
    i = var("i")
    return Program.wrapped([a, x, y, out], 256, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(out, i, a[0] * x[i] + y[i])]),
    ])


def matvec() -> Program:
    """``out[r] = sum_j m[r * cols + j] * v[j]`` with ``cols = len(v)``: a loop-carried accumulator."""
    m, v, out = read("m", 0, F32), read("v", 1, F32), output("out", 2, F32)
    r, j, acc = var("r"), var("j"), var("acc")
    return Program.wrapped([m, v, out], 128, [
        let("r", gid()),
        if_(r.lt(buflen(out)), [
            let("acc", f32(0.0)),
            loop("j", u32(0), buflen(v), [assign("acc", acc + m[r * buflen(v) + j] * v[j])]),
            store(out, r, acc),
        ]),
    ])


def block_sum() -> Program:
    """Per-workgroup tree reduction in workgroup memory with barriers, then one atomic add."""
    x, out = read("x", 0, F32), output("out", 1, F32).with_count(1)
    tile = workgroup("tile", 256, F32)
    i, s = var("i"), var("s")
    return Program.wrapped([x, out, tile], 256, [
        let("i", gid()),
        store(tile, lid(), load(x, i)),
        barrier(),
        loop("k", u32(0), u32(8), [
            let("s", u32(128) >> var("k")),
            if_(lid().lt(s), [store(tile, lid(), tile[lid()] + tile[lid() + s])]),
            barrier(),
        ]),
        if_(lid().eq(0), [let("_old", atomic_add(out, u32(0), tile[u32(0)]))]),
    ])


def subgroup_sum() -> Program:
    """Subgroup (warp) reduction, lane 0 of each subgroup adds into ``out[0]``."""
    x, out = read("x", 0, F32), output("out", 1, F32).with_count(1)
    return Program.wrapped([x, out], 64, [
        let("v", load(x, gid())),
        let("s", subgroup_reduce(BinOpKind.ADD, var("v"))),
        if_((lid() & 31).eq(0), [let("_old", atomic_add(out, u32(0), var("s")))]),
    ])


def histogram() -> Program:
    """``counts[keys[i] % len(counts)] += 1`` with atomics (exact under contention)."""
    keys, counts = read("keys", 0, U32), output("counts", 1, U32)
    i = var("i")
    return Program.wrapped([keys, counts], 128, [
        let("i", gid()),
        if_(i.lt(buflen(keys)), [
            let("_old", atomic_add(counts, keys[i] % buflen(counts), u32(1))),
        ]),
    ])


def workgroup_ids() -> Program:
    """Writes each invocation's workgroup id (exercises ids and the default grid)."""
    out = output("out", 0, U32)
    return Program.wrapped([out], 64, [store(out, gid(), wgid())])


EXAMPLES: dict[str, Callable[[], Program]] = {
    "fused_chain": fused_chain,
    "saxpy": saxpy,
    "matvec": matvec,
    "block_sum": block_sum,
    "subgroup_sum": subgroup_sum,
    "histogram": histogram,
    "workgroup_ids": workgroup_ids,
}
