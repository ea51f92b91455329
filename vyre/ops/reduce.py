"""Whole-array reductions: ``sum``, ``max``, ``min``, ``mean``, ``dot``, ``norm``, ``argmax``.

Each is one vyre program applied in passes (docs/ops.md). A pass reduces its input to one partial
result per workgroup (GPU form) or per block (CPU form), in a fixed order; the next pass reduces the
partials, until one value is left. No float atomics anywhere, so results are bit-identical run to
run.

* **GPU form** (``cuda``, ``cudasim``): workgroups of :data:`GPU_WG` invocations, at most
  :func:`~vyre.ops._runtime.gpu_workgroups_cap` of them. Invocation ``t`` of ``T = G * GPU_WG``
  accumulates elements ``t, t + T, t + 2T, ...`` into :data:`GPU_UNROLL` independent accumulators
  (that many loads in flight per thread, coalesced across the warp); the accumulators merge
  pairwise, the subgroup reduces with shuffles, subgroup results meet in workgroup memory and
  one more subgroup reduce gives the workgroup's partial, which invocation 0 stores.
* **CPU form** (``cpu``, ``interp``): one invocation per workgroup; workgroup ``g`` of ``G = ceil(n
  / CPU_BLOCK)`` (``CPU_BLOCK_EXACT`` for max, min and argmax) reduces the contiguous block ``[g*B,
  (g+1)*B)``, ``B = ceil(n / G)``, into a *lane array* of :data:`CPU_LANES` accumulators in
  workgroup memory: each step adds ``CPU_LANES`` consecutive elements, element ``k`` into lane
  ``k``. That inner loop is elementwise, so LLVM vectorises it (numba compiles without fast-math, so
  a loop-carried scalar sum, or eight of them, stays scalar: LLVM may not reorder float adds, and
  numba leaves the SLP vectoriser off); the lanes then merge pairwise. Workgroups run on every core.

f32 sums (``sum``, ``mean``, ``dot``, ``norm``) accumulate in f64 and round once at the end.
"""

from __future__ import annotations

import builtins
import enum
import functools
import math
from typing import Any

from ..ir import (
    F64, U32, BinOpKind, BufferDecl, DataType, Expr, Node, Program, UnOpKind, assign, barrier, buflen, cast, fma, gid,
    if_, lane, let, lid, load, loop, minimum, output, read, select, store, subgroup_reduce, u32,
    unop, var, wgid, workgroup,
)
from ..ir.expr import lit
from ._blocks import (
    SUBGROUP, Combine, all_of, bounded_span, isnan, lane_fold, lane_reduce, nan, nan_flags, subgroup_combine,
    tree, workgroup_combine,
)
from ._plans import planned
from ._runtime import Arr, Ctx, OpsError, gpu_workgroups_cap, prepare

__all__ = [
    "CPU_LANES", "GPU_UNROLL", "GPU_WG", "Reduce", "argmax", "argmax_program", "dot", "full_program",
    "max", "mean", "min", "norm", "sum",
]

GPU_WG = 256
GPU_UNROLL = 8
#: CPU form: accumulators per block (lanes of one vectorised add). The lane array is a workgroup
#: buffer, which the CPU kernel keeps in its stack frame (vyre/codegen/cpu.py), so LLVM holds the
#: lanes in vector registers across the loop; 64 measured fastest there (serial kernel, 2^16
#: elements in cache: f32 max 4.4 -> 4.0 us against 128 lanes, f32 sum 5.3 -> 4.8, f64 dot 8.4 ->
#: 8.0); 32 lanes is a loop LLVM unrolls before it vectorises, and without the SLP vectoriser
#: (numba leaves it off) the unrolled adds stay scalar (f64 dot 27 us)
CPU_LANES = 64
#: CPU form: elements per lane and step, combined pairwise first (fewer lane updates per element):
#: 2 measured 1.1-1.4x faster for sum, sum of squares and max; f64 max with 4 measured 8.2 -> 9.9
#: us at 2^16; dot keeps 1 (2 measured slower: 4.0 against 5.2 G/s for f32)
CPU_PAIR = 2
#: CPU forms (full_program, argmax_program): elements per block at most (one workgroup; blocks run
#: in parallel). Smaller blocks shorten each lane's chain of adds (accuracy, docs/ops.md) at a
#: little overhead.
CPU_BLOCK = 1 << 13
#: CPU forms of max, min and argmax: elements per block at most. Their result does not depend on
#: the partition (no rounding), so blocks are as long as parallelism allows: up to this many
#: elements take one pass and one block, which saves the second pass's call (2^16 f32 max 7.2 ->
#: 6.1 us); past it, blocks of this size keep both cores busy
CPU_BLOCK_EXACT = 1 << 17
#: CPU argmax: bytes of the lanes' snapshots, one per segment of the block (its stack share,
#: vyre/codegen/cpu.py STACK_BYTES): 16 segments of 8192 f32 or 8 of 16384 f64 elements cover a
#: block of CPU_BLOCK_EXACT. The lowest index holding a block's maximum is searched in one segment
#: of each lane holding it, 128 or 256 strided loads instead of the block's 2048. Serial kernel,
#: 2^16 elements: f32 5.5 -> 4.5 us, f64 9.1 -> 8.4 (max: 3.9, 7.4); a heap snapshot (more segments)
#: cost 0.1-0.3 us more at 2^12
ARGMAX_SNAPSHOT_BYTES = 4096


class Reduce(enum.Enum):
    """The whole-array reductions: what each element contributes, and how contributions combine."""

    # members are singletons: hashing by identity is C-speed (Enum's own hashes the name in Python;
    # plan keys hash two of these per call)
    __hash__ = object.__hash__

    SUM = "sum"
    DOT = "dot"
    SUMSQ = "sumsq"
    MAX = "max"
    MIN = "min"

    @property
    def combine(self) -> Combine:
        return {Reduce.MAX: Combine.MAX, Reduce.MIN: Combine.MIN}.get(self, Combine.ADD)

    @property
    def inputs(self) -> int:
        return 2 if self is Reduce.DOT else 1

    def term(self, acc: DataType, i: Expr) -> Expr:
        """The contribution of element ``i`` in the accumulator type."""
        x = cast(acc, load("x", i))
        match self:
            case Reduce.SUM | Reduce.MAX | Reduce.MIN:
                return x
            case Reduce.DOT:
                return x * cast(acc, load("y", i))
            case Reduce.SUMSQ:
                return x * x


def accumulator(kind: Reduce, t: DataType) -> DataType:
    """f32 sums accumulate in f64 (exact products, 2^29 times less rounding, no overflow); max and
    min need no wider type."""
    return F64 if kind.combine is Combine.ADD else t


class Post(enum.Enum):
    """What the pass that writes the final value applies to it."""

    # members are singletons: hashing by identity is C-speed (Enum's own hashes the name in Python;
    # plan keys hash two of these per call)
    __hash__ = object.__hash__

    NONE = "none"
    SQRT = "sqrt"  # norm
    MEAN = "mean"  # divide by the input's length (applied to each partial of the first pass)


@functools.lru_cache(maxsize=256)
def full_program(kind: Reduce, t_in: DataType, t_out: DataType, *, gpu: bool, post: Post = Post.NONE,
                 acc: DataType | None = None) -> Program:
    """One pass of ``kind``: ``out[g]`` = the reduction of workgroup/block ``g``'s share of ``x``
    (and ``y``), for ``g < len(out)``; ``len(out)`` is the number of workgroups (GPU form) or blocks
    (CPU form) the pass is dispatched over. ``post`` applies to each partial: dispatch the last
    pass over one workgroup to get the final value."""
    a = acc or accumulator(kind, t_in)
    comb = kind.combine
    bufs = [read("x", 0, t_in)]
    if kind.inputs == 2:
        bufs.append(read("y", 1, t_in))
    out = output("out", len(bufs), t_out)
    bufs.append(out)
    names = [b.name for b in bufs[:kind.inputs]]
    if not gpu:
        return _lane_program(kind, bufs, names, t_out, a, post)
    n = var("n")
    body: list[Node] = [let("n", buflen("x"))]
    unroll = GPU_UNROLL
    accs = [f"a{k}" for k in range(unroll)]
    body += [let(name, comb.identity(a)) for name in accs]

    def term(i: Expr) -> Expr:
        return kind.term(a, i)

    def guarded(i: Expr) -> Expr:
        # past the end a load reads 0, the identity of a sum; max/min need their own identity
        return term(i) if comb is Combine.ADD else select(i.lt(n), term(i), comb.identity(a))

    def steps(idx: list[Expr]) -> list[Node]:
        # one If that the whole step is in range (always true here) lets the emitters drop each
        # access's bounds check, so the step's loads issue together (docs/ops.md)
        cond = all_of([i.lt(buflen(name)) for i in idx for name in names])
        return [if_(cond, [x for k, i in enumerate(idx) for x in _step(accs[k], comb, term(i), f"v{k}")])]

    s, su = var("stride"), var("span")
    body += [
        let("t", gid()),
        let("stride", buflen(out) * u32(GPU_WG)),
        let("span", s * u32(unroll)),
        let("full", n / su),
        loop("c", u32(0), var("full"), [
            let("b", var("c") * su + var("t")),
            *steps([var("b") + s * u32(k) if k else var("b") for k in range(unroll)]),
        ]),
        let("tb", var("full") * su + var("t")),
        *(x for k in range(unroll)
          for x in _step(accs[k], comb, guarded(var("tb") + s * u32(k) if k else var("tb")), f"w{k}")),
    ]
    nodes, part = tree("am", [var(x) for x in accs], comb)
    body += nodes
    nodes, total, tiles = workgroup_combine("r", part, comb, a, GPU_WG)
    body += nodes
    bufs += tiles
    total = _post(total, post, a, n)
    body.append(if_(lid().eq(u32(0)), [store(out, wgid(), cast(t_out, total))]))
    return Program.wrapped(bufs, GPU_WG, body)


def _lane_program(kind: Reduce, bufs: list[BufferDecl], names: list[str], t_out: DataType, a: DataType,
                  post: Post) -> Program:
    """The CPU form of :func:`full_program`: one invocation per workgroup, a block per workgroup,
    reduced into a lane array of CPU_LANES accumulators in workgroup memory (a private array with
    one invocation per workgroup). Each step adds CPU_LANES consecutive elements, one per lane: an
    elementwise loop, which LLVM vectorises (a reduction into scalars it may not reorder)."""
    comb = kind.combine
    lanes = workgroup("lanes", CPU_LANES, a)
    bufs = [*bufs, lanes]
    out = bufs[len(names)]
    n, g = var("n"), var("g")
    # CPU_PAIR elements per lane and step; dot keeps 1 (2 measured slower)
    pair = 1 if kind is Reduce.DOT else CPU_PAIR
    fused = None
    if kind is Reduce.DOT and a is F64 and bufs[0].element is DataType.F32:
        # the product of two f32 is exact in f64, so a fused multiply-add gives the bits of
        # lane + x * y (the interpreter's unfused Fma) in one instruction where the CPU has one
        def fused(i: Expr, acc: Expr) -> Expr:
            return fma(cast(F64, load("x", i)), cast(F64, load("y", i)), acc)
    nodes, total, more = lane_reduce(lanes, comb, lambda i: kind.term(a, i), pair, fused=fused)
    body: list[Node] = [*_block_bounds(names, buflen(out)), let("g", wgid()), *nodes]
    body.append(if_(g.lt(buflen(out)), [store(out, g, cast(t_out, _post(total, post, a, n)))]))
    return Program.wrapped([*bufs, *more], 1, body)


def _block_bounds(names: list[str], parts: Expr) -> list[Node]:
    """``n`` (the shortest input's length), and block ``wgid()``'s share ``[lo, hi)`` of it, ``len
    = hi - lo`` elements in ``m`` full steps of CPU_LANES: written so that u32 arithmetic provably
    never wraps (``hi = lo + min(bl, n - lo)``, not ``min(lo + bl, n)``, which wraps when
    ``bl`` is huge), which is what lets the range analysis prove every access in range."""
    n: Expr = buflen(names[0])
    for name in names[1:]:
        n = minimum(n, buflen(name))
    return [
        let("n", n),
        let("bl", (var("n") + parts - u32(1)) / parts),
        *bounded_span(var("n"), wgid() * var("bl"), var("bl")),
        let("m", var("len") / u32(CPU_LANES)),
    ]


def _step(name: str, comb: Combine, x: Expr, tmp: str) -> list[Node]:
    """``name = name . x`` with ``x`` bound first (max/min read their operand twice)."""
    return [let(tmp, x), assign(name, comb.step(var(name), var(tmp)))]


def _post(total: Expr, post: Post, a: DataType, n: Expr) -> Expr:
    match post:
        case Post.NONE:
            return total
        case Post.SQRT:
            return unop(UnOpKind.SQRT, total)
        case Post.MEAN:
            return total / cast(a, n)


# ---------------------------------------------------------------------------------------------
# argmax: (value, index) pairs. NaN rule (numpy's): the first NaN wins; otherwise the first maximum.

_NONE = 0xFFFFFFFF  # "no index yet"


def _better(v: Expr, i: Expr, m: Expr, mi: Expr) -> Expr:
    """Does candidate ``(v, i)`` beat ``(m, mi)``? NaN beats everything but an earlier NaN; among
    equal values the lower index wins, so the result does not depend on the visiting order."""
    earlier = i.lt(mi)
    return (isnan(m).not_().and_(isnan(v).or_(v.gt(m)).or_(v.eq(m).and_(earlier)))
            .or_(isnan(m).and_(isnan(v)).and_(earlier)))


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

    def visit(i: Expr, guard: bool) -> list[Node]:
        v = load("x", i)
        gi = load("xi", i) if indexed else i
        cond = _better(v, gi, var("m"), var("mi"))
        if guard:
            cond = i.lt(n).and_(cond)
        return [if_(cond, [assign("m", v), assign("mi", gi)])]

    s = var("stride")
    body += [let("t", gid()), let("stride", buflen(val) * u32(GPU_WG))]
    if indexed:
        # the partials of a first pass: their indices follow no order, every pair is compared
        body += [
            let("m", lit(-math.inf, t)), let("mi", u32(_NONE)),
            let("steps", (n + s - u32(1)) / s),
            loop("c", u32(0), var("steps"), [let("i", var("c") * s + var("t")), *visit(var("i"), True)]),
        ]
    else:
        body += _argmax_strided(t, n, s)
    # across the subgroup: the max (NaN flagged separately), then the lowest index holding it
    nodes, wmax = subgroup_combine("w", var("m"), Combine.MAX, t)
    body += [*nodes, let("wm", wmax)]
    body += _lowest_index("w", var("m"), var("mi"), var("wm"))
    nw = GPU_WG // SUBGROUP
    tv, ti = workgroup("tv", nw, t), workgroup("ti", nw, U32)
    bufs += [tv, ti]
    body += [
        if_(lane().eq(u32(0)), [store(tv, lid() / u32(SUBGROUP), var("wm")),
                                store(ti, lid() / u32(SUBGROUP), var("w_i"))]),
        barrier(),
        let("pm", select(lane().lt(u32(nw)), tv[lane()], lit(-math.inf, t))),
        let("pi", select(lane().lt(u32(nw)), ti[lane()], u32(_NONE))),
    ]
    nodes, gmax = subgroup_combine("g", var("pm"), Combine.MAX, t)
    body += [*nodes, let("gm", gmax)]
    body += _lowest_index("g", var("pm"), var("pi"), var("gm"))
    body.append(if_(lid().eq(u32(0)), [store(val, wgid(), var("gm")), store(idx, wgid(), var("g_i"))]))
    return Program.wrapped(bufs, GPU_WG, body)


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
                if_(isnan(m).not_().and_(isnan(x).or_(x.gt(m)).or_(mi.eq(u32(_NONE)))),
                    [assign(m.name, x), assign(mi.name, i)])]

    body: list[Node] = []
    for k in range(unroll):
        body += [let(f"m{k}", lit(-math.inf, t)), let(f"mi{k}", u32(_NONE))]
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
    pairs = [(var(f"m{k}"), var(f"mi{k}")) for k in range(unroll)]
    level = 0
    while len(pairs) > 1:
        merged = []
        for j in range(0, len(pairs), 2):
            (a, ai), (b, bi) = pairs[j], pairs[j + 1]
            name = f"p{level}_{j // 2}"
            body += [let(name, a), let(f"{name}i", ai),
                     if_(_better(b, bi, var(name), var(f"{name}i")), [assign(name, b), assign(f"{name}i", bi)])]
            merged.append((var(name), var(f"{name}i")))
        pairs = merged
        level += 1
    (m, mi), = pairs
    return [*body, let("m", m), let("mi", mi)]


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
        return [let(f"{tmp}_v", load("x", i)), let(gi.name, load("xi", i) if indexed else i),
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
        let("seg", _umax(u32(least), (var("len") / u32(segments * CPU_LANES * CPU_PAIR) + u32(1))
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
        let("best", u32(_NONE)),
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


def _umax(a: Expr, b: Expr) -> Expr:
    return select(a.lt(b), b, a)


def _lowest_index(prefix: str, m: Expr, mi: Expr, best: Expr) -> list[Node]:
    """``<prefix>_i``: the lowest index among lanes whose value is ``best`` (NaN matches NaN)."""
    hit = select(isnan(best), isnan(m), m.eq(best))
    return [
        let(f"{prefix}_c", select(hit, mi, u32(_NONE))),
        let(f"{prefix}_i", subgroup_reduce(BinOpKind.MIN, var(f"{prefix}_c"))),
    ]


# ---------------------------------------------------------------------------------------------
# Running the passes


def _gpu_form(ctx: Ctx) -> bool:
    return ctx.gpu_form


def _partials(n: int, gpu: bool, cap: int = 0, exact: bool = False) -> int:
    """Workgroups (GPU: at most ``cap``) or blocks (CPU: of CPU_BLOCK, of CPU_BLOCK_EXACT where the
    result is ``exact``, whatever the partition) of a pass over ``n`` elements."""
    if gpu:
        return builtins.max(1, builtins.min(cap or gpu_workgroups_cap(), -(-n // (GPU_WG * GPU_UNROLL))))
    return builtins.max(1, -(-n // (CPU_BLOCK_EXACT if exact else CPU_BLOCK)))


def _cap(ctx: Ctx, program: Program, deterministic: bool) -> int:
    """Workgroups of a GPU pass: what the GPU holds at once (one wave), unless ``deterministic``
    asks for the fixed count, which makes the bits independent of the device."""
    if deterministic or ctx.backend != "cuda":
        return gpu_workgroups_cap()
    from ._launch import resident_workgroups

    return resident_workgroups(program) or gpu_workgroups_cap()


@functools.lru_cache(maxsize=1024)
def _passes(kind: Reduce, t: DataType, post: Post, n: int, gpu: bool, cap: int
            ) -> tuple[tuple[Program, int, DataType], ...]:
    """The passes of ``kind`` over ``n`` elements of ``t``: per pass its program, its workgroups /
    blocks and its output type; the last pass has one workgroup and writes the value."""
    a = accumulator(kind, t)
    exact = kind.combine is not Combine.ADD
    g = _partials(n, gpu, cap, exact)
    t_in = t
    out = []
    while True:
        last = g == 1
        out.append((full_program(kind, t_in, t if last else a, gpu=gpu,
                                 post=post if last or post is Post.MEAN else Post.NONE, acc=a), g, t if last else a))
        if last:
            return tuple(out)
        # later passes combine partials: sums of partials, max of maxima (mean's division and
        # norm's squares happened in the first pass)
        kind = Reduce.SUM if kind.combine is Combine.ADD else kind
        if post is Post.MEAN:
            post = Post.NONE
        t_in = a
        g = _partials(g, gpu, cap, exact)


def _run_full(ctx: Ctx, kind: Reduce, arrs: dict[str, Arr], post: Post, deterministic: bool = False) -> Any:
    t = arrs["x"].dtype
    gpu = _gpu_form(ctx)
    a = accumulator(kind, t)
    cap = _cap(ctx, full_program(kind, t, a, gpu=True, acc=a), deterministic) if gpu else 0
    inputs = {name: arr.data for name, arr in arrs.items()}
    for prog, g, t_out in _passes(kind, t, post, arrs["x"].size, gpu, cap):
        out = ctx.empty(g, t_out)
        ctx.run(prog, {**inputs, "out": out}, g)
        inputs = {"x": out}
    return ctx.scalar(out)


def _reduce(kind: Reduce, post: Post, named: dict[str, Any], backend: str | None,
            gpu_form: bool | None = None, deterministic: bool = False) -> Any:
    """One reduction over the arrays ``named`` (``x``, and ``y`` for dot); ``gpu_form`` (tests)
    forces a program form."""
    return planned((kind, post, deterministic, gpu_form), tuple(named.values()), backend, _reduce_checked)


def _reduce_checked(op: tuple[Reduce, Post, bool, bool | None], inputs: tuple[Any, ...], backend: str | None) -> Any:
    """The reduction ``op`` (kind, post, deterministic, forced form) as written (vyre.ops._plans
    replays what it did)."""
    kind, post, deterministic, gpu_form = op
    named = {"x": inputs[0]} if len(inputs) == 1 else {"x": inputs[0], "y": inputs[1]}
    ctx, arrs = prepare(named, backend, ndim=1 if kind is Reduce.DOT else None)
    if gpu_form is not None:
        ctx.gpu_form = gpu_form
    if kind is Reduce.DOT and arrs["x"].size != arrs["y"].size:
        raise OpsError(f"dot of arrays of lengths {arrs['x'].size} and {arrs['y'].size}. "
                       "Fix: pass two arrays of the same length")
    return _run_full(ctx, kind, arrs, post, deterministic)


# ``deterministic``: every reduction is reproducible run to run (a fixed partition and order, no
# float atomics). By default the GPU partition follows the device (one wave of workgroups), so two
# GPU models may round differently; ``deterministic=True`` fixes it (1024 workgroups), so the bits
# depend only on the input and the program form (docs/ops.md, "Determinism").


def _keys(kind: Reduce, post: Post) -> tuple[tuple[Reduce, Post, bool, None], tuple[Reduce, Post, bool, None]]:
    """The plan keys of a public reduction, without and with ``deterministic`` (built once: an enum
    member lookup costs 0.1 us in Python 3.11, a fifth of a small call's Python)."""
    return (kind, post, False, None), (kind, post, True, None)


_SUM, _MEAN, _MAX, _MIN = (_keys(Reduce.SUM, Post.NONE), _keys(Reduce.SUM, Post.MEAN), _keys(Reduce.MAX, Post.NONE),
                           _keys(Reduce.MIN, Post.NONE))
_DOT, _NORM = _keys(Reduce.DOT, Post.NONE), _keys(Reduce.SUMSQ, Post.SQRT)


def sum(x: Any, *, backend: str | None = None, deterministic: bool = False) -> Any:
    """Sum of all elements (0 for an empty array). f32 accumulates in f64. See docs/ops.md for the
    error bound and NaN rules; every call is bit-identical to the last on the same backend."""
    return planned(_SUM[bool(deterministic)], (x,), backend, _reduce_checked)


def mean(x: Any, *, backend: str | None = None, deterministic: bool = False) -> Any:
    """Arithmetic mean (NaN for an empty array)."""
    return planned(_MEAN[bool(deterministic)], (x,), backend, _reduce_checked)


def max(x: Any, *, backend: str | None = None, deterministic: bool = False) -> Any:
    """Largest element; NaN if any element is NaN; -inf for an empty array."""
    return planned(_MAX[bool(deterministic)], (x,), backend, _reduce_checked)


def min(x: Any, *, backend: str | None = None, deterministic: bool = False) -> Any:
    """Smallest element; NaN if any element is NaN; +inf for an empty array."""
    return planned(_MIN[bool(deterministic)], (x,), backend, _reduce_checked)


def dot(x: Any, y: Any, *, backend: str | None = None, deterministic: bool = False) -> Any:
    """``sum(x * y)`` of two 1-D arrays of one length (0 when empty); f32 in f64."""
    return planned(_DOT[bool(deterministic)], (x, y), backend, _reduce_checked)


def norm(x: Any, *, backend: str | None = None, deterministic: bool = False) -> Any:
    """Euclidean norm ``sqrt(sum(x * x))`` over all elements (0 when empty). f32 squares are summed
    in f64, so they never overflow; f64 squares overflow past 1e154, as numpy's do."""
    return planned(_NORM[bool(deterministic)], (x,), backend, _reduce_checked)


def argmax(x: Any, *, backend: str | None = None, deterministic: bool = False) -> Any:
    """Flat index of the first maximum (numpy's rule: the first NaN if there is one), as an int64
    scalar (numpy) or 0-d uint32 device array (device input). An empty array is an error."""
    return planned(("argmax", deterministic, None), (x,), backend, _argmax_checked)


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
