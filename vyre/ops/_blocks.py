"""IR building blocks shared by the op programs: how two partial results combine (with the NaN rule
of each reduction), identities, and the workgroup-wide reduction (subgroup reduce, one slot per
subgroup in workgroup memory, a barrier, a second subgroup reduce).

Every helper returns plain IR (statements and expressions); nothing here emits text."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable

from ..ir import (
    F64, U32, BinOpKind, BufferDecl, DataType, Expr, Node, UnOpKind, barrier, buflen, cast, if_, lane,
    let, lid, loop, minimum, select, store, subgroup_reduce, u32, unop, var, workgroup,
)
from ..ir.expr import Var, lit

SUBGROUP = 32
#: CPU forms (vyre.ops.reduce; the row-wise ops' long rows): accumulators per block (lanes of one
#: vectorised add). The lane array is a workgroup buffer, which the CPU kernel keeps in its stack
#: frame (vyre/codegen/cpu.py), so LLVM holds the lanes in vector registers across the loop; 64
#: measured fastest there (serial kernel, 2^16 elements in cache: f32 max 4.4 -> 4.0 us against 128
#: lanes, f32 sum 5.3 -> 4.8, f64 dot 8.4 -> 8.0); 32 lanes is a loop LLVM unrolls before it
#: vectorises, and without the SLP vectoriser (numba leaves it off) the unrolled adds stay scalar
#: (f64 dot 27 us)
CPU_LANES = 64
#: CPU form: elements per lane and step, combined pairwise first (fewer lane updates per element):
#: 2 measured 1.1-1.4x faster for sum, sum of squares and max; f64 max with 4 measured 8.2 -> 9.9
#: us at 2^16; dot keeps 1 (2 measured slower: 4.0 against 5.2 G/s for f32)
CPU_PAIR = 2
#: CPU forms (reduce.full_program, argmax_program; the grouped rows of vyre.ops._grouped):
#: elements per block at most (one workgroup; blocks run in parallel). Smaller blocks shorten each
#: lane's chain of adds (accuracy, docs/ops.md) at a little overhead.
CPU_BLOCK = 1 << 13
#: :func:`halving`: levels of at most this many slots are written out instead of looped
HALVING_UNROLLED = 8


class Combine(enum.Enum):
    """How partial results combine.

    ``ADD``: IEEE sum (NaN and inf propagate as in any sum). ``MAX``/``MIN``: NaN-propagating
    (``numpy.max`` semantics): once a NaN is seen the result is NaN. The IR's ``Max``/``Min`` are
    IEEE maxNum/minNum, which drop NaNs, so these are built from a comparison and a select, and the
    cross-lane step ORs a NaN flag beside the subgroup max/min."""

    ADD = "add"
    MAX = "max"
    MIN = "min"

    @property
    def binop(self) -> BinOpKind:
        return {Combine.ADD: BinOpKind.ADD, Combine.MAX: BinOpKind.MAX, Combine.MIN: BinOpKind.MIN}[self]

    def identity(self, t: DataType) -> Expr:
        return lit({Combine.ADD: 0.0, Combine.MAX: -math.inf, Combine.MIN: math.inf}[self], t)

    def step(self, acc: Expr, x: Expr) -> Expr:
        """``acc`` combined with one more value ``x`` (same float type)."""
        match self:
            case Combine.ADD:
                return acc + x
            case Combine.MAX:
                return select(x.gt(acc).or_(isnan(x)), x, acc)
            case Combine.MIN:
                return select(x.lt(acc).or_(isnan(x)), x, acc)

    def ordered_step(self, acc: Expr, x: Expr) -> Expr:
        """:meth:`step` for values that are not NaN (a NaN ``x`` leaves ``acc``; a NaN ``acc``
        may absorb ``x``): one comparison and a select, which a CPU does in one vector
        instruction (``maxps``). The CPU lane forms use it beside NaN flags (:func:`lane_reduce`)."""
        match self:
            case Combine.ADD:
                return acc + x
            case Combine.MAX:
                return select(x.gt(acc), x, acc)
            case Combine.MIN:
                return select(x.lt(acc), x, acc)


def isnan(e: Expr) -> Expr:
    return unop(UnOpKind.IS_NAN, e)


def nan(t: DataType) -> Expr:
    return lit(math.nan, t)


def tree(prefix: str, values: list[Expr], comb: Combine, step: Callable[[Expr, Expr], Expr] | None = None
         ) -> tuple[list[Node], Expr]:
    """Pairwise combination ``((v0 . v1) . (v2 . v3)) ...``: the order every program uses to merge
    its accumulators (documented in docs/ops.md). Returns the statements and the result: every
    value and partial result is bound to a local first, since ``max``/``min`` read each operand
    twice (a nested expression would grow 4x per level: 16 values gave 3000 lines of PTX)."""
    step = step or comb.step
    nodes: list[Node] = []
    names = []
    for i, v in enumerate(values):
        if isinstance(v, Var):
            names.append(v.name)
        else:
            nodes.append(let(f"{prefix}_{i}", v))
            names.append(f"{prefix}_{i}")
    level = 0
    while len(names) > 1:
        nxt = []
        for i in range(0, len(names) - 1, 2):
            name = f"{prefix}_l{level}_{i // 2}"
            nodes.append(let(name, step(var(names[i]), var(names[i + 1]))))
            nxt.append(name)
        if len(names) % 2:
            nxt.append(names[-1])
        names, level = nxt, level + 1
    return nodes, var(names[0])


def halving(lanes: BufferDecl, count: int, step: Callable[[Expr, Expr], Expr], prefix: str, base: int = 0
            ) -> list[Node]:
    """Merge the ``count`` (a power of two) slots of ``lanes`` pairwise into slot 0: level by level,
    slot ``k`` takes ``step(lanes[k], lanes[k + half])`` for ``half = count / 2, ..., 1`` (a loop per
    level, which LLVM vectorises; a tree of ``log2(count)`` levels). ``base``: the slots start there."""
    out: list[Node] = []
    half = count // 2
    while half > HALVING_UNROLLED:
        k: Expr = var(f"{prefix}{half}")
        a, b = var(f"{prefix}{half}_a"), var(f"{prefix}{half}_b")
        name = f"{prefix}{half}"
        if base:
            k = k + u32(base)
        out.append(loop(name, u32(0), u32(half), [
            let(a.name, lanes[k]), let(b.name, lanes[k + u32(half)]), store(lanes, k, step(a, b)),
        ]))
        half //= 2
    # the last levels in straight-line code (the same adds in the same order): a loop of 8 or fewer
    # iterations costs more in set-up (LLVM's run-time alias checks) than its work
    while half >= 1:
        for i in range(half):
            a, b = var(f"{prefix}{half}_{i}a"), var(f"{prefix}{half}_{i}b")
            out += [let(a.name, lanes[u32(base + i)]), let(b.name, lanes[u32(base + i + half)]),
                    store(lanes, u32(base + i), step(a, b))]
        half //= 2
    return out


def bounded_span(n: Expr, start: Expr, length: Expr, prefix: str = "") -> list[Node]:
    """``<prefix>lo``, ``<prefix>len``, ``<prefix>hi``: the span of ``length`` elements from ``start``,
    clipped to ``[0, n)`` (``n``: a local or length). Written so that u32 arithmetic provably never
    wraps (``hi = lo + min(length, n - lo)``, not ``min(start + length, n)``, which wraps when
    ``length`` is huge), which lets the range analysis (vyre/codegen/ranges.py) prove every index
    below ``hi`` in range. Where the span lies inside ``[0, n)`` (every caller's case) it is exactly
    ``[start, start + length)``."""
    lo = var(f"{prefix}lo")
    return [
        let(lo.name, minimum(start, n)),
        let(f"{prefix}len", minimum(length, n - lo)),
        let(f"{prefix}hi", lo + var(f"{prefix}len")),
    ]


def lane_fold(lanes: BufferDecl, comb: Combine, term: Callable[[Expr], Expr], pair: int, prefix: str = "",
              flags: BufferDecl | None = None, fused: Callable[[Expr, Expr], Expr] | None = None) -> list[Node]:
    """Fold ``term(i)`` for every ``i`` of the span ``[<prefix>lo, <prefix>hi)`` (bound by
    :func:`bounded_span`, ``<prefix>len`` elements) into the lane array ``lanes`` (already holding
    the identity), CPU form: each step adds ``len(lanes)`` consecutive elements, element ``k`` into
    lane ``k`` (``pair`` of them per lane and step, combined pairwise before they meet the lane:
    one load and store of the lane per ``pair`` elements), then ``len(lanes)`` at a time, then the
    last ``< len(lanes)`` one per lane. The loops over ``k`` are elementwise, so LLVM vectorises
    them (numba compiles without fast-math: a loop-carried scalar sum stays scalar), and every
    index is proven in range (``p + k < lo + span m2 <= lo + len = hi``), so they carry no guard.
    ``flags`` (max/min, a u32 array as long as ``lanes``, holding 0): the lanes combine with
    :meth:`Combine.ordered_step` and lane ``k``'s flag records a NaN among its elements (one
    unordered comparison per pair), half the vector work of the NaN-propagating step. ``fused``
    (sums, ``pair`` 1): ``fused(i, lane)`` is the lane's new value, ``lane + term(i)`` in one
    expression (a fused multiply-add where the product is exact). Merge the lanes after with
    :func:`halving`, or use :func:`lane_reduce`, which does all of it."""
    if fused is not None and pair != 1:
        raise ValueError("lane_fold: a fused step takes one element per lane and step. Fix: pass pair=1 with fused=")
    nl = lanes.count
    span = nl * pair
    step = comb.step if flags is None else comb.ordered_step

    def v(name: str) -> Expr:
        return var(f"{prefix}{name}")

    def flagged(slot: Expr, vals: list[Expr]) -> list[Node]:
        if flags is None:
            return []
        seen = isnan(vals[0])
        for x in vals[1:]:
            seen = seen.or_(isnan(x))
        return [store(flags, slot, select(seen, u32(1), flags[slot]))]

    def into(i: Expr, slot: Expr, tmp: str) -> list[Node]:
        if fused is not None:
            return [store(lanes, slot, fused(i, lanes[slot]))]
        return [let(tmp, term(i)), store(lanes, slot, step(lanes[slot], var(tmp))), *flagged(slot, [var(tmp)])]

    def into_pairs(i: Expr, slot: Expr, tmp: str) -> list[Node]:
        if fused is not None:
            return into(i, slot, tmp)
        vals = [var(f"{tmp}{u}") for u in range(pair)]
        nodes: list[Node] = [let(x.name, term(i + u32(u * nl) if u else i)) for u, x in enumerate(vals)]
        more, part = tree(f"{tmp}t", list(vals), comb, step)
        return [*nodes, *more, store(lanes, slot, step(lanes[slot], part)), *flagged(slot, list(vals))]

    k = var("k")
    return [
        let(f"{prefix}m2", v("len") / u32(span)),
        loop(f"{prefix}j", u32(0), v("m2"), [
            let(f"{prefix}p", v("lo") + v("j") * u32(span)),
            loop("k", u32(0), buflen(lanes), into_pairs(v("p") + k, k, f"{prefix}v")),
        ]),
        let(f"{prefix}s0", v("lo") + v("m2") * u32(span)),
        let(f"{prefix}m1", (v("len") - v("m2") * u32(span)) / u32(nl)),
        loop(f"{prefix}j1", u32(0), v("m1"), [
            let(f"{prefix}p1", v("s0") + v("j1") * u32(nl)),
            loop("k", u32(0), buflen(lanes), into(v("p1") + k, k, f"{prefix}u")),
        ]),
        let(f"{prefix}t0", v("s0") + v("m1") * u32(nl)),
        loop(f"{prefix}q", v("t0"), v("hi"), into(v("q"), v("q") - v("t0"), f"{prefix}w")),
    ]


def nan_flags(lanes: BufferDecl) -> BufferDecl:
    """The NaN flags beside a max/min lane array (:func:`lane_fold`'s ``flags``)."""
    return workgroup(f"{lanes.name}_nan", lanes.count, U32)


def lane_reduce(lanes: BufferDecl, comb: Combine, term: Callable[[Expr], Expr], pair: int, prefix: str = "",
                fused: Callable[[Expr, Expr], Expr] | None = None) -> tuple[list[Node], Expr, list[BufferDecl]]:
    """The whole CPU lane reduction of the span ``[<prefix>lo, <prefix>hi)`` (:func:`bounded_span`):
    the lanes set to the identity, :func:`lane_fold`, the pairwise merge (:func:`halving`). Returns
    the statements, the result (an expression reading the lanes; bind it before the lanes are
    used again) and the extra workgroup buffers it used: max and min keep NaN flags beside the
    lanes (:func:`nan_flags`), so the result is NaN exactly when an element is. ``fused``: see
    :func:`lane_fold` (sums only)."""
    t = lanes.element
    k = var("k")
    nodes: list[Node] = [loop("k", u32(0), buflen(lanes), [store(lanes, k, comb.identity(t))])]
    if comb is Combine.ADD:
        nodes += [*lane_fold(lanes, comb, term, pair, prefix, fused=fused),
                  *halving(lanes, lanes.count, comb.step, f"{prefix}r")]
        return nodes, lanes[u32(0)], []
    flags = nan_flags(lanes)
    nodes += [
        loop("k", u32(0), buflen(flags), [store(flags, k, u32(0))]),
        *lane_fold(lanes, comb, term, pair, prefix, flags),
        *halving(lanes, lanes.count, comb.ordered_step, f"{prefix}r"),
        *halving(flags, flags.count, lambda a, b: a | b, f"{prefix}f"),
    ]
    return nodes, select(flags[u32(0)].ne(u32(0)), nan(t), lanes[u32(0)]), [flags]


def subgroup_combine(prefix: str, value: Expr, comb: Combine, t: DataType) -> tuple[list[Node], Expr]:
    """Statements reducing ``value`` over the 32 lanes of the subgroup; every lane gets the result.
    Must be placed at a uniform point."""
    s = f"{prefix}_s"
    nodes: list[Node] = [let(s, subgroup_reduce(comb.binop, value))]
    if comb is Combine.ADD:
        return nodes, var(s)
    f = f"{prefix}_nan"
    nodes.append(let(f, subgroup_reduce(BinOpKind.BIT_OR, cast(U32, isnan(value)))))
    return nodes, select(var(f).ne(u32(0)), nan(t), var(s))


def workgroup_combine(prefix: str, value: Expr, comb: Combine, t: DataType, wg: int
                      ) -> tuple[list[Node], Expr, list[BufferDecl]]:
    """Statements reducing ``value`` over a 1-D workgroup of ``wg`` invocations (a multiple of 32);
    every invocation gets the result. Uses one workgroup buffer (returned) of one slot per subgroup
    and one barrier; must be placed at a uniform point. Distinct prefixes give distinct buffers, so
    several reductions in one program need no barrier between reading one and writing the next."""
    nodes, warp = subgroup_combine(f"{prefix}_w", value, comb, t)
    nw = wg // SUBGROUP
    if nw == 1:
        return nodes, warp, []
    tile = workgroup(f"{prefix}_tile", nw, t)
    nodes += [
        let(f"{prefix}_wv", warp),
        if_(lane().eq(u32(0)), [store(tile, lid() / u32(SUBGROUP), var(f"{prefix}_wv"))]),
        barrier(),
        # every subgroup reads all nw slots, so every invocation ends up with the total
        let(f"{prefix}_part", select(lane().lt(u32(nw)), tile[lane()], comb.identity(t))),
    ]
    more, total = subgroup_combine(f"{prefix}_g", var(f"{prefix}_part"), comb, t)
    return nodes + more, total, [tile]


#: an index that names no element ("no index yet", an empty share's or row's argmax; the identity
#: of :func:`beats`)
NO_INDEX = 0xFFFFFFFF


def beats(v: Expr, i: Expr, m: Expr, mi: Expr) -> Expr:
    """argmax's rule: does candidate ``(v, i)`` (a value and its index) beat ``(m, mi)``? NaN beats
    everything but an earlier NaN; among equal values the lower index wins, so the result does not
    depend on the order candidates are visited in."""
    earlier = i.lt(mi)
    return (isnan(m).not_().and_(isnan(v).or_(v.gt(m)).or_(v.eq(m).and_(earlier)))
            .or_(isnan(m).and_(isnan(v)).and_(earlier)))


def takes(v: Expr, m: Expr, mi: Expr | None = None) -> Expr:
    """argmax's rule for a slot that sees its candidates in increasing index order: take ``v`` over
    the held ``m`` when it is larger, or the first NaN (once a NaN is held it stays), so the slot
    holds the first maximum without comparing indices. With the slot's index ``mi``, a slot holding
    nothing yet (``NO_INDEX``, with ``-inf``) also takes its first candidate, so an all ``-inf``
    share answers its first index."""
    rule = v.gt(m).or_(isnan(v).and_(isnan(m).not_()))
    return rule if mi is None else rule.or_(mi.eq(u32(NO_INDEX)))


def merge_argmax(prefix: str, pairs: list[tuple[Expr, Expr]]) -> tuple[list[Node], Expr, Expr]:
    """(value, index) candidates merged pairwise by :func:`beats`, in the fixed order of
    :func:`tree` (the indices may come in any order). Returns the statements and the winner."""
    nodes: list[Node] = []
    named: list[tuple[Expr, Expr]] = []
    for n, (v, i) in enumerate(pairs):
        if not isinstance(v, Var):
            nodes.append(let(f"{prefix}_{n}", v))
            v = var(f"{prefix}_{n}")
        if not isinstance(i, Var):
            nodes.append(let(f"{prefix}_{n}i", i))
            i = var(f"{prefix}_{n}i")
        named.append((v, i))
    level = 0
    while len(named) > 1:
        nxt: list[tuple[Expr, Expr]] = []
        for n in range(0, len(named) - 1, 2):
            (m, mi), (v, i) = named[n], named[n + 1]
            name = f"{prefix}_l{level}_{n // 2}"
            nodes += [let(f"{name}t", beats(v, i, m, mi)),
                      let(name, select(var(f"{name}t"), v, m)), let(f"{name}i", select(var(f"{name}t"), i, mi))]
            nxt.append((var(name), var(f"{name}i")))
        if len(named) % 2:
            nxt.append(named[-1])
        named, level = nxt, level + 1
    (m, mi), = named
    return nodes, m, mi


def accumulator_type(comb: Combine, t: DataType, *, pairwise: bool = False) -> DataType:
    """The type ``t`` elements combine in: f32 sums in f64 (exact products, 2^29 times less
    rounding, no overflow), unless ``pairwise`` (a tree over a few registers, the resident GPU row
    form, which keeps f32 accurate without the registers f64 would need); max and min in ``t``."""
    return F64 if comb is Combine.ADD and t is DataType.F32 and not pairwise else t


def kind_combine(kind: str) -> Combine:
    """How the elements of a named reduction of the row and column forms combine (``sum``,
    ``mean`` and ``norm`` add; ``max``, ``min`` and ``argmax`` compare)."""
    return {"max": Combine.MAX, "min": Combine.MIN, "argmax": Combine.MAX}.get(kind, Combine.ADD)


def kind_term(kind: str, a: DataType, x: Expr) -> Expr:
    """What element ``x`` contributes to the named reduction, in the accumulator type ``a``."""
    v = cast(a, x)
    return v * v if kind == "norm" else v


def kind_total(kind: str, total: Expr, a: DataType, count: Expr) -> Expr:
    """The named reduction's value from its combined ``total`` of ``count`` elements (``mean``
    divides, NaN for none as 0 / 0; ``norm`` takes the square root)."""
    if kind == "mean":
        return total / cast(a, count)
    if kind == "norm":
        return unop(UnOpKind.SQRT, total)
    return total


def all_of(conds: list[Expr]) -> Expr:
    """The conjunction of ``conds`` (at least one)."""
    out = conds[0]
    for c in conds[1:]:
        out = out.and_(c)
    return out
