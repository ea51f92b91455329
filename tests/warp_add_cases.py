"""Atomic adds whose old value is discarded: the CUDA emitter turns float ones into warp-aggregated
adds (``_vy_warp_add``) and integer adds of a constant into grouped counts (``_vy_warp_count``).
Shared by the PTX check in CI (the aggregation is really emitted, and only where the old value is
unused) and the GPU bench's parity section (the sums are right under every
contention pattern: a whole warp on one address, some lanes sharing, none sharing, partial warps).
"""

from __future__ import annotations

import numpy as np

from vyre.autodiff import grad
from vyre.examples import matvec
from vyre.ir import (
    F32, F64, I32, U32, DataType, LitI32, LitU32, Program, atomic_add, barrier, buflen, gid, if_, let, lid,
    loop, output, read, store, var, workgroup,
)

#: name -> (PTX must contain, PTX must not contain)
PTX_EXPECT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "warp_add_f32_k1": (("vote.sync.all", "shfl.sync.down", "atom.global.add.f32"), ()),
    "warp_add_f64_k7": (("vote.sync.all", "shfl.sync.down", "atom.global.add.f64"), ()),
    "warp_add_matvec_backward": (("vote.sync.all", "shfl.sync.down"), ()),
    "atomic_old_value_used": (("atom.global.add.f32",), ("vote.sync", "shfl.sync")),
    "warp_add_shared": (("vote.sync.all", "shfl.sync.down", "atom.shared.add.f32"), ()),
    "warp_count_u32": (("match.any.sync", "popc", "atom.global.add.u32"), ()),
    "warp_count_i32": (("match.any.sync", "popc", "atom.global.add.u32"), ()),  # PTX adds s32 as u32
    "int_add_not_constant": (("atom.global.add.u32",), ("match.any.sync", "vote.sync")),
    "count_many_bins": (("atom.global.add.u32",), ("match.any.sync",)),  # above WARP_COUNT_MAX_BINS
    "lane_distinct_scatter": (("atom.global.add.f32",), ("vote.sync", "shfl.sync")),  # lanes.py
}


def count(t: DataType, k: int, c: int, wg: int = 256) -> Program:
    """A histogram: ``out[x[i] % k] += c`` (a constant) for every ``i < len(x)``, old value unused."""
    x, out = read("x", 0, U32), output("out", 1, t).with_count(k)
    i = var("i")
    lit = LitU32(c) if t is U32 else LitI32(c)
    return Program.wrapped([x, out], wg, [
        let("i", gid()),
        if_(i.lt(buflen(x)), [let("unused", atomic_add(out, x[i] % k, lit))]),
    ])


def scatter(t: DataType, k: int, wg: int) -> Program:
    """``out[i % k] += x[i]`` for every invocation ``i < len(x)``, the old value discarded."""
    x, out = read("x", 0, t), output("out", 1, t).with_count(k)
    i = var("i")
    return Program.wrapped([x, out], wg, [
        let("i", gid()),
        if_(i.lt(buflen(x)), [let("unused", atomic_add(out, i % k, x[i]))]),
    ])


def shared_scatter(n: int, slots: int = 4) -> Program:
    """Per workgroup of 64: ``t[lid % slots] += x[gid]`` in workgroup memory, then the first
    ``slots`` lanes write the slot sums to ``out[gid]`` (the rest of ``out`` stays 0)."""
    x, out, t = read("x", 0, F32), output("out", 1, F32).with_count(n), workgroup("t", slots, F32)
    i = var("i")
    return Program.wrapped([x, out, t], 64, [
        let("i", gid()),
        if_(lid().lt(slots), [store(t, lid(), 0.0)]),
        barrier(),
        let("unused", atomic_add(t, lid() % slots, x[i])),
        barrier(),
        if_(lid().lt(slots), [store(out, i, t[lid()])]),
    ])


def old_value_used() -> Program:
    """``olds[i] = atomic_add(out[0], x[i])``: the old value is read, so no aggregation."""
    x, out, olds = read("x", 0, F32), output("out", 1, F32).with_count(1), output("olds", 2, F32)
    i = var("i")
    return Program.wrapped([x, out, olds], 64, [
        let("i", gid()),
        if_(i.lt(buflen(x)), [let("old", atomic_add(out, 0, x[i])), store(olds, i, var("old"))]),
    ])


def ptx_programs() -> list[tuple[str, Program]]:
    fwd = matvec()
    return [
        ("warp_add_f32_k1", scatter(F32, 1, 64)),
        ("warp_add_f64_k7", scatter(F64, 7, 96)),
        ("warp_add_matvec_backward", grad(fwd, ["out"], ["m", "v"])),
        ("atomic_old_value_used", old_value_used()),
        ("warp_add_shared", shared_scatter(256)),
        ("warp_count_u32", count(U32, 16, 1)),
        ("warp_count_i32", count(I32, 5, -3)),
        ("int_add_not_constant", scatter(U32, 4, 64)),
        ("count_many_bins", count(U32, 4096, 1)),
        ("lane_distinct_scatter", loop_scatter()),
    ]


def gpu_cases(n: int = 1 << 16) -> list[tuple[str, Program, dict[str, np.ndarray], np.ndarray]]:
    """(name, program, inputs, the exact sums of ``out``) for contention patterns on a GPU. The
    inputs are small integers, so every partial sum is exact and any order must give the same."""
    rng = np.random.default_rng(7)
    out = []
    for t, np_t in ((F32, np.float32), (F64, np.float64)):
        x = rng.integers(-8, 9, n).astype(np_t)
        for k in (1, 3, 32, 33, 1000):
            for wg in (256, 48):  # 48: every other warp is partial, so never aggregated
                exact = np.bincount(np.arange(n) % k, weights=x.astype(np.float64), minlength=k)
                out.append((f"{t.name.lower()}_k{k}_wg{wg}", scatter(t, k, wg), {"x": x}, exact))
    x = rng.integers(-8, 9, n).astype(np.float32)
    exact = np.zeros(n)
    lanes = np.arange(n) % 64
    for s in range(4):
        exact[s::64] = np.bincount(np.arange(n)[lanes % 4 == s] // 64, weights=x[lanes % 4 == s].astype(np.float64),
                                   minlength=n // 64)
    out.append(("f32_shared_slots4_wg64", shared_scatter(n), {"x": x}, exact))
    # counts: many lanes of a warp hit one bin (k = 1, 3), some do (k = 200), or the keys repeat
    # within a warp only by chance (k = 100 000); constants that wrap the 32-bit counters
    for t, c in ((U32, 1), (U32, 0xFFFFFFF0), (I32, -3), (I32, 2**31 - 5)):
        keys = rng.integers(0, 1 << 30, n).astype(np.uint32)
        for k in (1, 3, 200, 100_000):
            for wg in (256, 48):
                hits = np.bincount(keys % k, minlength=k).astype(np.int64)
                exact = (hits * c) % (1 << 32)
                out.append((f"count_{t.name.lower()}_c{c}_k{k}_wg{wg}", count(t, k, c, wg), {"x": keys},
                            exact.astype(np.uint32).view(t.np_dtype).astype(np.float64)))
    return out



def loop_scatter() -> Program:
    """The reverse loop's gradient scatter shape: ``out[(i + j) % len(out)] += x[i]`` over a loop
    ``j``: every lane of a warp adds to its own element, so the add stays a plain atomic."""
    x, n, out = read("x", 0, F32), read("n", 1, U32), output("out", 2, F32)
    i, j = var("i"), var("j")
    return Program.wrapped([x, n, out], 64, [
        let("i", gid()),
        if_(i.lt(buflen(x)), [loop("j", 0, n[0], [let("k", (i + j) % buflen(out)),
                                                  let("unused", atomic_add(out, var("k"), x[i]))])]),
    ])
