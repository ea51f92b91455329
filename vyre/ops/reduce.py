"""Whole-array reductions: ``sum``, ``max``, ``min``, ``mean``, ``dot``, ``norm`` (``argmax``, which
carries indices through the same passes and blocks: vyre.ops.argreduce).

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
from collections.abc import Callable
from typing import Any

from ..ir import (
    F64, BufferDecl, DataType, Expr, Node, Program, UnOpKind, assign, buflen, cast, fma, gid,
    if_, let, lid, load, loop, minimum, output, read, select, store, u32,
    unop, var, wgid, workgroup,
)
from ..ir.expr import lit
from ._blocks import (
    CPU_BLOCK, CPU_LANES, CPU_PAIR, Combine, accumulator_type, all_of, bounded_span, halving, lane_fold,
    lane_reduce, tree, workgroup_combine,
)
from ._axes import along, matrix_axis, whole_keepdims
from .colwise import MIN_INNER, column_block, reduce_columns, reduce_matrix_columns
from ._plans import planned
from ._sites import Site
from ._runtime import Arr, Ctx, OpsError, gpu_workgroups_cap, prepare
from .rowwise import reduce_matrix_rows, reduce_rows

__all__ = [
    "CPU_LANES", "GPU_UNROLL", "GPU_WG", "Reduce", "dot", "full_program",
    "max", "mean", "min", "norm", "sum",
]

GPU_WG = 256
GPU_UNROLL = 8
#: GPU whole-array reductions of at most this many elements run as one pass of one workgroup (each
#: invocation at most 8 steps of GPU_UNROLL loads): one launch instead of two, whose host time is
#: most of a call of that size. H200, 2^14 f32: a call that waits for its answer 46 -> 36 us
#: (sum), 54 -> 42 (argmax), GPU time 2.8 -> 4.3 us; at 2^16 one pass took 4x the GPU time
#: (bench/one_pass_probe.py, BENCHMARKS.md)
GPU_ONE_PASS = 1 << 14
#: CPU forms of max, min and argmax (and f32 dot and norm, :func:`_staged_program`): elements per
#: block at most. Their result does not depend on the partition (no rounding; the stages' f32
#: error is far above what longer f64 lane chains add), so blocks are as long as parallelism
#: allows: up to this many elements take one pass and one block, which saves the second pass's
#: call (2^16 f32 max 7.2 -> 6.1 us); past it, blocks of this size keep both cores busy
CPU_BLOCK_EXACT = 1 << 17
#: CPU form of f32 ``dot`` and ``norm`` (:func:`_staged_program`): f32 steps of CPU_LANES elements
#: per stage. Measured serial, 2^16 f32 dot (H200 host): 1 step (f64 throughout) 11.2 us, 2 steps
#: 8.7, 4 steps 8.2, 8 steps 9.2; more steps add error (one f32 rounding each)
STAGE_STEPS = 4
#: a block's staged total is kept when its magnitude is at least this (and finite): each of a
#: block's at most CPU_BLOCK_EXACT products is off by at most 2^-150 where f32 subnormals round
#: it, in all at most 2^-133, which is 2^-73 of such a total, below f64's own rounding
STAGE_TRUSTED = 2.0 ** -60


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
    a = acc or accumulator_type(kind.combine, t_in)
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
    if _staged(kind, bufs[0].element) and a is F64:
        return _staged_program(kind, bufs, names, t_out, post)
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


def _staged(kind: Reduce, t_in: DataType) -> bool:
    """Does the CPU form of ``kind`` over ``t_in`` stage its products in f32 (:func:`_staged_program`)?"""
    return kind in (Reduce.DOT, Reduce.SUMSQ) and t_in is DataType.F32


def _staged_program(kind: Reduce, bufs: list[BufferDecl], names: list[str], t_out: DataType, post: Post
                    ) -> Program:
    """The CPU form of an f32 ``dot`` or sum of squares (``norm``): each block's products are
    formed and added in f32 for :data:`STAGE_STEPS` steps of CPU_LANES elements (a *stage*, one
    f32 lane array), then each stage's lanes are added into f64 lanes, which merge into the
    staged total; what is left of the block (fewer than a stage's elements) goes into fresh f64
    lanes, whose total is added to it. Widening every element to f64 took two conversions per
    four elements, the CPU's one shuffle port's limit (2^16 f32 dot 11.6 -> 6.8 us, norm 8.8 ->
    5.0: BENCHMARKS.md). The cost is accuracy: a product and the stage's additions round in f32,
    at most ``STAGE_STEPS 2^-24 sum|x_i y_i|`` more error (docs/ops.md, "Accuracy").

    Where the staged total is not finite (an overflow in f32, or an inf or NaN in the input) or
    below :data:`STAGE_TRUSTED` in magnitude (where products may have lost bits to f32's
    subnormals; no stage at all), the f64 lanes take the whole block instead, the exact way, so
    every overflow, NaN and inf rule and the tiny-value behaviour are those of the f64 form. One
    f64 fold serves both (a second one would add to the compile time, already about 1.5x the f64
    form's: BENCHMARKS.md)."""
    lanes = workgroup("lanes", CPU_LANES, F64)
    stage = workgroup("stage", CPU_LANES, DataType.F32)
    out = bufs[len(names)]
    bufs = [*bufs, lanes, stage]
    n, g, k = var("n"), var("g"), var("k")

    def term32(i: Expr) -> Expr:
        x = load("x", i)
        return x * (load("y", i) if kind is Reduce.DOT else x)

    fused = None
    if kind is Reduce.DOT:
        def fused(i: Expr, acc: Expr) -> Expr:
            return fma(cast(F64, load("x", i)), cast(F64, load("y", i)), acc)
    span = CPU_LANES * STAGE_STEPS
    staged: list[Node] = [
        let("ps", var("lo") + var("js") * u32(span)),
        loop("k", u32(0), buflen(stage), [store(stage, k, lit(0.0, DataType.F32))]),
    ]
    # a loop over the stage's lanes per step: one loop over k with the four products in locals
    # ran 1.2-1.4x slower (2^14-2^18, device host) and compiled only 5-10% faster
    for i in range(STAGE_STEPS):
        at = var("ps") + u32(i * CPU_LANES) if i else var("ps")
        staged.append(loop("k", u32(0), buflen(stage), [store(stage, k, stage[k] + term32(at + k))]))
    staged.append(loop("k", u32(0), buflen(lanes), [store(lanes, k, lanes[k] + cast(F64, stage[k]))]))
    zero = loop("k", u32(0), buflen(lanes), [store(lanes, k, lit(0.0, F64))])
    st = var("st")
    size = unop(UnOpKind.ABS, st)
    trusted = size.ge(lit(STAGE_TRUSTED, F64)).and_(size.lt(lit(math.inf, F64)))
    body: list[Node] = [
        *_block_bounds(names, buflen(out)), let("g", wgid()), zero,
        let("ms", var("len") / u32(span)),
        loop("js", u32(0), var("ms"), staged),
        *halving(lanes, CPU_LANES, Combine.ADD.step, "h"),
        let("st", lanes[u32(0)]),
        let("kept", trusted),
        # the f64 fold: the rest of the block after a trusted staged total, else the whole block
        let("from", select(var("kept"), var("lo") + var("ms") * u32(span), var("lo"))),
        *bounded_span(var("hi"), var("from"), var("hi") - var("from"), "r"),
        zero,
        *lane_fold(lanes, Combine.ADD, lambda i: kind.term(F64, i), 1, "r", fused=fused),
        *halving(lanes, CPU_LANES, Combine.ADD.step, "e"),
        let("tot", select(var("kept"), st + lanes[u32(0)], lanes[u32(0)])),
        if_(g.lt(buflen(out)), [store(out, g, cast(t_out, _post(var("tot"), post, F64, n)))]),
    ]
    return Program.wrapped(bufs, 1, body)


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
# Running the passes


def _gpu_form(ctx: Ctx) -> bool:
    return ctx.gpu_form


def _partials(n: int, gpu: bool, cap: int = 0, exact: bool = False) -> int:
    """Workgroups (GPU: at most ``cap``; one up to GPU_ONE_PASS elements) or blocks (CPU: of
    CPU_BLOCK, of CPU_BLOCK_EXACT where the result is ``exact`` whatever the partition, or
    staged in f32) of a pass over ``n`` elements."""
    if gpu:
        if n <= GPU_ONE_PASS:
            return 1
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
    a = accumulator_type(kind.combine, t)
    # long blocks where the partition changes no bit (max, min) or hardly any (the f32 stages'
    # error is far above the f64 lanes' chains): a pass fewer up to CPU_BLOCK_EXACT elements
    exact = kind.combine is not Combine.ADD
    g = _partials(n, gpu, cap, exact or _staged(kind, t))
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
    a = accumulator_type(kind.combine, t)
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
# GPU models may round differently; ``deterministic=True`` fixes it (2048 workgroups), so the bits
# depend only on the input and the program form (docs/ops.md, "Determinism").


def _keys(kind: Reduce, post: Post) -> tuple[tuple[Reduce, Post, bool, None], tuple[Reduce, Post, bool, None]]:
    """The plan keys of a public reduction, without and with ``deterministic`` (built once: an enum
    member lookup costs 0.1 us in Python 3.11, a fifth of a small call's Python)."""
    return (kind, post, False, None), (kind, post, True, None)


_SUM, _MEAN, _MAX, _MIN = (_keys(Reduce.SUM, Post.NONE), _keys(Reduce.SUM, Post.MEAN), _keys(Reduce.MAX, Post.NONE),
                           _keys(Reduce.MIN, Post.NONE))
_DOT, _NORM = _keys(Reduce.DOT, Post.NONE), _keys(Reduce.SUMSQ, Post.SQRT)


def _route(keys: tuple[tuple[Reduce, Post, bool, None], tuple[Reduce, Post, bool, None]], row_kind: str
           ) -> Callable[[Any, Any, Any, str | None, Any], Any]:
    """A reduction's route: the whole array (its plan key ``keys``, without and with
    ``deterministic``), or along axes (:func:`_along`)."""

    def route(x: Any, axis: Any, keepdims: Any, backend: str | None, deterministic: Any) -> Any:
        if axis is None and not keepdims:
            return planned(keys[bool(deterministic)], (x,), backend, _reduce_checked)
        return _along(keys, row_kind, x, axis, keepdims, backend, deterministic)

    return route


def _dot_route(x: Any, y: Any, backend: str | None, deterministic: Any) -> Any:
    return planned(_DOT[bool(deterministic)], (x, y), backend, _reduce_checked)


_SUM_SITE, _MEAN_SITE, _MAX_SITE, _MIN_SITE, _NORM_SITE = (
    Site(_route(keys, kind)) for keys, kind in ((_SUM, "sum"), (_MEAN, "mean"), (_MAX, "max"), (_MIN, "min"),
                                                (_NORM, "norm")))
_DOT_SITE = Site(_dot_route)


def sum(x: Any, axis: Any = None, *, keepdims: bool = False, backend: str | None = None,
        deterministic: bool = False) -> Any:
    """Sum of all elements, or along ``axis`` (an int or a tuple of ints; docs/ops.md, "Axes"); 0
    where nothing is summed. f32 accumulates in f64. See docs/ops.md for the error bound and NaN
    rules; every call is bit-identical to the last on the same backend."""
    return _SUM_SITE.one(x, axis, keepdims, backend, deterministic)


def mean(x: Any, axis: Any = None, *, keepdims: bool = False, backend: str | None = None,
         deterministic: bool = False) -> Any:
    """Arithmetic mean of all elements, or along ``axis`` (NaN where there is nothing, as 0 / 0)."""
    return _MEAN_SITE.one(x, axis, keepdims, backend, deterministic)


def max(x: Any, axis: Any = None, *, keepdims: bool = False, backend: str | None = None,
        deterministic: bool = False) -> Any:
    """Largest element, or along ``axis``; NaN if any element is NaN; -inf where there is none."""
    return _MAX_SITE.one(x, axis, keepdims, backend, deterministic)


def min(x: Any, axis: Any = None, *, keepdims: bool = False, backend: str | None = None,
        deterministic: bool = False) -> Any:
    """Smallest element, or along ``axis``; NaN if any element is NaN; +inf where there is none."""
    return _MIN_SITE.one(x, axis, keepdims, backend, deterministic)


def dot(x: Any, y: Any, *, backend: str | None = None, deterministic: bool = False) -> Any:
    """``sum(x * y)`` of two 1-D arrays of one length (0 when empty); f32 in f64 (the CPU form
    adds short runs of products in f32 first: docs/ops.md, "Accuracy")."""
    return _DOT_SITE.two(x, y, backend, deterministic)


def norm(x: Any, axis: Any = None, *, keepdims: bool = False, backend: str | None = None,
         deterministic: bool = False) -> Any:
    """Euclidean norm ``sqrt(sum(x * x))`` over all elements, or along ``axis`` (0 where there is
    nothing). f32 squares never overflow (the sum is f64; where the CPU form's f32 stages would
    overflow, it sums again in f64); f64 squares overflow past 1e154, as numpy's do."""
    return _NORM_SITE.one(x, axis, keepdims, backend, deterministic)


def _along(keys: tuple[tuple[Reduce, Post, bool, None], tuple[Reduce, Post, bool, None]], row_kind: str, x: Any,
           axis: Any, keepdims: bool, backend: str | None, deterministic: bool) -> Any:
    """A reduction with ``axis`` or ``keepdims``: every axis reduced is the whole-array reduction
    (its passes, ``deterministic`` as asked); otherwise one row per position of the kept axes
    (vyre.ops.rowwise: a row's order is fixed, so every result is deterministic)."""
    m = matrix_axis(x, axis)
    if m is not None and not keepdims:  # a matrix's rows or columns, without reading the axes
        if m == 1:
            return reduce_matrix_rows(row_kind, x, backend)
        if x.shape[1] >= MIN_INNER:
            return reduce_matrix_columns(row_kind, x, backend)
    al = along(x, axis)
    if al.whole:
        value = planned(keys[bool(deterministic)], (x,), backend, _reduce_checked)
        return whole_keepdims(value, al) if keepdims else value
    block = column_block(al)
    if block is not None:  # the reduced axes lie before a run of kept ones: no transpose
        return reduce_columns(row_kind, x, al, block, keepdims, backend)
    return reduce_rows(row_kind, x, al, keepdims, backend)
