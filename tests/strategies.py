"""Hypothesis strategies for vyre programs.

Valid programs (well typed, docs/semantics.md placement rules, race free)::

    programs(max_stmts=8, dtypes=ALL_DTYPES, allow_floats=True, allow_atomics=False,
             allow_barriers=False, allow_subgroups=False, allow_calls=True, exact_floats=False)
    program_and_inputs(..., finite_only=True) -> (Program, {name: np.ndarray}, grid)

What the generated programs guarantee, so backends can be compared:

* Race free. Invocation ``i`` stores only to ``out_<t>[i]`` (``i`` = ``InvocationId(0)``; the grid and
  workgroups are 1-D; some outputs are WRITE_ONLY) and loads only inputs, its own output elements and
  workgroup slots behind a barrier. Atomics touch only ``acc_<t>`` buffers, and their results are
  never read: add/min/max/and/or/xor on integers, and add of small integer-valued floats, so any
  order gives the same bits.
* Integer and bool results are bit-identical on every conforming backend. A float value only flows
  into an int/bool (casts, comparisons, ``is_nan``...) or into a rounding op (floor, sign, fmod...)
  when it is *deterministic*: computed from inputs and literals by correctly rounded operations that
  no backend may contract into an FMA (no product feeds an add/sub, directly or through a variable).
  Float min/max results are normalised with ``+ 0.0`` because the sign of ``min(-0.0, 0.0)`` is
  unspecified.
* Float outputs may use transcendentals and ``Fma``: compare them with the tolerances in
  docs/semantics.md (cancellation can amplify ULP differences; scale ``atol`` by input magnitude).
  With ``exact_floats=True`` every float value is deterministic, so outputs are bit-identical up to
  NaN payloads.

``arbitrary_programs()`` generates structurally arbitrary (usually invalid) programs over every
expression and statement variant, for the wire format and other structure-only code.
"""

from __future__ import annotations

# Packed imports, as in the IR core.
# isort: off
import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from hypothesis import strategies as st

from vyre.ir import (
    BINOP_RULES, SUBGROUP_REDUCE_OPS, UNOP_RULES, Assign, Atomic, AtomicOp, Barrier, BinOp,
    BinOpKind, Block, BufferAccess, BufferDecl, BufLen, Call, Cast, DataType, Expr, Fma,
    FunctionAdjoint, FunctionDef, If, InvocationId, Let, LitBool, LitF32, LitF64, LitI32, LitU32, Load, LocalId,
    Loop, Node, Program, Region, Return, Select, Store, SubgroupBallot, SubgroupLocalId,
    SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp, UnOpKind, Var, WorkgroupId,
)
from vyre.ir.expr import I32_MAX, I32_MIN, U32_MAX, lit
# isort: on

B, I, U, F, D = DataType.BOOL, DataType.I32, DataType.U32, DataType.F32, DataType.F64
ALL_DTYPES: tuple[DataType, ...] = (B, I, U, F, D)
Grid = tuple[int, int, int]


class FloatClass(enum.Enum):
    """How an op treats float determinism (see the module docs)."""

    EXACT = "correctly rounded: deterministic when its operands are"
    NEEDS_DET = "amplifies tiny differences (rounding, comparison, fmod): operands must be deterministic"
    APPROX = "libm/libdevice or FMA-contractable result: never deterministic"


BINOP_FLOAT: dict[BinOpKind, FloatClass] = {
    **{op: FloatClass.EXACT for op in BinOpKind},
    BinOpKind.MOD: FloatClass.NEEDS_DET,
    BinOpKind.POW: FloatClass.APPROX,  # libm/libdevice pow
    **{op: FloatClass.NEEDS_DET for op in (BinOpKind.EQ, BinOpKind.NE, BinOpKind.LT, BinOpKind.GT,
                                           BinOpKind.LE, BinOpKind.GE)},
}
UNOP_FLOAT: dict[UnOpKind, FloatClass] = {
    **{op: FloatClass.EXACT for op in UnOpKind},
    **{op: FloatClass.NEEDS_DET for op in (UnOpKind.FLOOR, UnOpKind.CEIL, UnOpKind.ROUND, UnOpKind.TRUNC,
                                           UnOpKind.SIGN, UnOpKind.IS_NAN, UnOpKind.IS_INF,
                                           UnOpKind.IS_FINITE)},
    **{op: FloatClass.APPROX for op in (UnOpKind.INVERSE_SQRT, UnOpKind.EXP, UnOpKind.EXP2, UnOpKind.LOG,
                                        UnOpKind.LOG2, UnOpKind.SIN, UnOpKind.COS, UnOpKind.TAN,
                                        UnOpKind.ASIN, UnOpKind.ACOS, UnOpKind.ATAN, UnOpKind.SINH,
                                        UnOpKind.COSH, UnOpKind.TANH)},
}
# Float ops a backend may fuse with a multiply operand (a*b+c -> fma): operands must not be products.
CONTRACTS = frozenset({BinOpKind.ADD, BinOpKind.SUB, BinOpKind.ABS_DIFF})
# Atomics whose final memory state does not depend on the order invocations run in, as long as a
# buffer sees one of them only: each commutes with itself, not with the others (or 128 then and 1
# leaves 0; and 1 then or 128 leaves 128). A program picks one per acc_ buffer.
ORDER_FREE_ATOMICS = (AtomicOp.ADD, AtomicOp.MIN, AtomicOp.MAX, AtomicOp.AND, AtomicOp.OR, AtomicOp.XOR)

_a, _b = Var("a"), Var("b")
FUNCTIONS: dict[str, FunctionDef] = {f.op_id: f for f in (
    FunctionDef("strat_mix_i32", (("a", I), ("b", I)), I,
                BinOp(BinOpKind.BIT_XOR, BinOp(BinOpKind.MUL, _a, LitI32(3)),
                      BinOp(BinOpKind.SHR, _b, LitI32(1)))),
    FunctionDef("strat_mix_u32", (("a", U), ("b", U)), U,
                BinOp(BinOpKind.MUL, BinOp(BinOpKind.ADD, _a, _b), LitU32(0x9E3779B1))),
    FunctionDef("strat_twice_u32", (("a", U),), U, Call("strat_mix_u32", (_a, _a))),
    *(FunctionDef(f"strat_absdiff_{t.short}", (("a", t), ("b", t)), t,
                  Select(BinOp(BinOpKind.LT, _a, _b), BinOp(BinOpKind.SUB, _b, _a),
                         BinOp(BinOpKind.SUB, _a, _b))) for t in (F, D)),
)}
# Transitive callees, so a program carries every function its calls reach.
_CALLEES = {"strat_twice_u32": ("strat_mix_u32",)}

I32_SPECIAL = (0, 1, -1, 2, -2, 7, 31, 32, 33, -32, 255, 65536, -65536, I32_MIN, I32_MIN + 1, I32_MAX)
U32_SPECIAL = (0, 1, 2, 7, 31, 32, 33, 255, 65536, 0x7FFFFFFF, 0x80000000, U32_MAX - 1, U32_MAX)
FLOAT_SPECIAL = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.0, -2.5, 0.1, 10.0, 100.0, -1000.0, 1e-3)
NONFINITE = (float("nan"), float("inf"), float("-inf"), -float("nan"))


def int_values(t: DataType) -> st.SearchStrategy[int]:
    """i32/u32 values: small numbers, the type's extremes, and anything in range."""
    if t is I:
        return st.one_of(st.sampled_from(I32_SPECIAL), st.integers(-100, 100), st.integers(I32_MIN, I32_MAX))
    return st.one_of(st.sampled_from(U32_SPECIAL), st.integers(0, 100), st.integers(0, U32_MAX))


def float_values(t: DataType, finite_only: bool = True, moderate: float = 1e3) -> st.SearchStrategy[float]:
    """Floats exactly representable in ``t``: +-0.0, small values, and moderate random ones."""
    width: Literal[32, 64] = 32 if t is F else 64
    parts = [st.sampled_from(FLOAT_SPECIAL),
             st.floats(-moderate, moderate, width=width, allow_nan=False, allow_infinity=False)]
    if not finite_only:
        tiny = 1e-40 if t is F else 5e-324
        parts += [st.sampled_from(NONFINITE), st.sampled_from((tiny, -tiny, 3.4e38 if t is F else 1.7e308)),
                  st.floats(width=width)]
    return st.one_of(*parts).map(lambda v: float(np.array(v, dtype=t.np_dtype)))


@functools.cache
def values(t: DataType, finite_only: bool = True) -> st.SearchStrategy[Any]:
    if t is B:
        return st.booleans()
    return int_values(t) if t.is_int else float_values(t, finite_only)


def small_int_floats(t: DataType) -> st.SearchStrategy[float]:
    return st.integers(-4, 4).map(float)


@functools.cache
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Cached: building a strategy per draw dominates generation time otherwise."""
    return st.integers(lo, hi)


def _below(n: int) -> st.SearchStrategy[int]:
    return _ints(0, n - 1)


@dataclass(frozen=True)
class Config:
    max_stmts: int = 8
    dtypes: tuple[DataType, ...] = ALL_DTYPES
    allow_atomics: bool = False
    allow_barriers: bool = False
    allow_subgroups: bool = False
    allow_calls: bool = True
    exact_floats: bool = False
    max_expr_depth: int = 3
    max_nesting: int = 3

    @property
    def types(self) -> tuple[DataType, ...]:
        """Types expressions may take: the requested ones plus u32 (indices) and bool (conditions)."""
        return tuple(t for t in ALL_DTYPES if t in self.dtypes or t in (B, U))


@dataclass(frozen=True)
class VarInfo:
    dtype: DataType
    det: bool = True  # see module docs; always true for non-floats
    prod: bool = False  # a float product that a later add could be contracted with
    assignable: bool = True


@dataclass(frozen=True)
class Gen:
    """A generated expression with its determinism facts."""

    e: Expr
    det: bool = True
    prod: bool = False


@dataclass
class _Builder:
    draw: Any
    cfg: Config
    wg: int
    buffers: dict[str, BufferDecl] = field(default_factory=dict)
    budget: int = 0
    fresh_id: int = 0
    calls: set[str] = field(default_factory=set)
    acc_ops: dict[str, AtomicOp] = field(default_factory=dict)  # the one atomic op of each acc_ buffer

    # -- helpers ------------------------------------------------------------------------------

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self.draw(_below(len(options)))]  # shrinks toward the first option

    def chance(self, p: float) -> bool:
        return bool(self.draw(_below(1000)) < p * 1000)  # shrinks toward True

    def pick_op(self, cands: list[tuple[Any, DataType]]) -> tuple[Any, DataType]:
        """An op uniformly, then one of its operand types (comparisons would otherwise dominate)."""
        op = self.pick(sorted({op for op, _ in cands}))
        return op, self.pick([s for o, s in cands if o is op])

    def fresh(self, prefix: str) -> str:
        self.fresh_id += 1
        return f"{prefix}{self.fresh_id}"

    def buf(self, prefix: str, t: DataType) -> str | None:
        name = f"{prefix}_{t.short}"
        return name if name in self.buffers else None

    # -- expressions --------------------------------------------------------------------------

    def literal(self, t: DataType) -> Expr:
        v = self.draw(values(t))
        return lit(v, t)

    def index(self, scope: dict[str, VarInfo], buf: str, depth: int) -> Expr:
        """A u32 index into ``buf``: mostly in bounds, sometimes past the end (reads give 0)."""
        loop_vars = [n for n, v in scope.items() if v.dtype is U and not v.assignable]
        kind = self.pick(["gid", "lit", "mod", "any"] + (["loop"] if loop_vars else []))
        if kind == "gid":
            return InvocationId(0)
        if kind == "lit":
            return LitU32(self.draw(_ints(0, 2 * self.wg + 4)))
        if kind == "loop":
            return Var(self.pick(loop_vars))
        e = self.expr(U, scope, min(depth, 2)).e
        return BinOp(BinOpKind.MOD, e, BufLen(buf)) if kind == "mod" else e

    def leaf(self, t: DataType, scope: dict[str, VarInfo], det: bool, no_prod: bool) -> Gen:
        opts: list[Any] = ["lit", "lit"]
        vars_ = [n for n, v in scope.items()
                 if v.dtype is t and (v.det or not det) and not (no_prod and v.prod)]
        if vars_:
            opts += ["var"] * 3
        src, out = self.buf("in", t), self.buf("out", t)
        if src:
            opts += ["load", "load"]
        if out and self.buffers[out].access.readable and not (t.is_float and (det or no_prod)):
            opts.append("own")
        if t is U:
            opts += ["buflen", "id"] + (["uniform"] if "params" in self.buffers else [])
        kind = self.pick(opts)
        if kind == "var":
            v = self.pick(vars_)
            return Gen(Var(v), scope[v].det, scope[v].prod)
        if kind == "load" and src:
            return Gen(Load(src, self.index(scope, src, 1)))
        if kind == "own" and out:
            # Our own element: deterministic for ints; a float may hold a stored (forwardable) product.
            return Gen(Load(out, InvocationId(0)), not t.is_float, t.is_float)
        if kind == "buflen":
            return Gen(BufLen(self.pick([b.name for b in self.buffers.values() if not b.is_workgroup])))
        if kind == "id":
            return Gen(self.pick([InvocationId, LocalId, WorkgroupId])(self.pick([0, 0, 0, 1, 2])))
        if kind == "uniform":
            return Gen(Load("params", self.index(scope, "params", 1)))
        return Gen(self.literal(t))

    def expr(self, t: DataType, scope: dict[str, VarInfo], depth: int,
             det: bool = False, no_prod: bool = False) -> Gen:
        """An expression of type ``t``. ``det``: must be deterministic; ``no_prod``: must not be a
        float product (it will feed an add/sub)."""
        det = det or self.cfg.exact_floats
        if depth <= 0 or self.chance(0.3):
            return self.leaf(t, scope, det, no_prod)
        kinds = ["binop", "binop", "unop", "select", "cast"]
        if t.is_float and not det:
            kinds.append("fma")
        callable_ = [f for f in FUNCTIONS.values() if f.result is t]
        if callable_ and self.cfg.allow_calls:
            kinds.append("call")
        match self.pick(kinds):
            case "binop":
                g = self.binop(t, scope, depth, det, no_prod)
            case "unop":
                g = self.unop(t, scope, depth, det, no_prod)
            case "select":
                c = self.expr(B, scope, depth - 1, det=True)
                x, y = self.expr(t, scope, depth - 1, det), self.expr(t, scope, depth - 1, det)
                g = Gen(Select(c.e, x.e, y.e), x.det and y.det)
            case "cast":
                s = self.pick(self.cfg.types)
                x = self.expr(s, scope, depth - 1, det or (s.is_float and not t.is_float),
                              no_prod and s.is_float and t.is_float)
                g = Gen(Cast(t, x.e), x.det, x.prod and s.is_float and t.is_float)
            case "fma":
                a, b, c = (self.expr(t, scope, depth - 1) for _ in range(3))
                g = Gen(Fma(a.e, b.e, c.e), det=False)
            case "call":
                fn = self.pick(callable_)
                self.calls.add(fn.op_id)
                args = [self.expr(pt, scope, depth - 1, det, no_prod=True) for _, pt in fn.params]
                g = Gen(Call(fn.op_id, tuple(a.e for a in args)), all(a.det for a in args))
            case _:
                raise AssertionError("unreachable")
        return g if t.is_float else Gen(g.e)

    def binop(self, t: DataType, scope: dict[str, VarInfo], depth: int, det: bool, no_prod: bool) -> Gen:
        cands = [(op, s) for op, rule in BINOP_RULES.items() for s in rule.operands
                 if s in self.cfg.types and rule.result_for(s) is t
                 and not (no_prod and op is BinOpKind.MUL and t.is_float)
                 and not (det and s.is_float and BINOP_FLOAT[op] is FloatClass.APPROX)]
        op, s = self.pick_op(cands)
        needs = s.is_float and (BINOP_FLOAT[op] is FloatClass.NEEDS_DET or not t.is_float)
        contract = s.is_float and op in CONTRACTS
        x = self.expr(s, scope, depth - 1, det or needs, contract)
        y = self.expr(s, scope, depth - 1, det or needs, contract)
        e: Expr = BinOp(op, x.e, y.e)
        if s.is_float and op in (BinOpKind.MIN, BinOpKind.MAX):
            e = BinOp(BinOpKind.ADD, e, lit(0.0, s))  # the sign of a zero min/max is unspecified
        exact = not (s.is_float and BINOP_FLOAT[op] is FloatClass.APPROX)
        return Gen(e, x.det and y.det and exact, s.is_float and op is BinOpKind.MUL)

    def unop(self, t: DataType, scope: dict[str, VarInfo], depth: int, det: bool, no_prod: bool) -> Gen:
        cands = [(op, s) for op, rule in UNOP_RULES.items() for s in rule.operands
                 if s in self.cfg.types and rule.result_for(s) is t
                 and not (det and s.is_float and UNOP_FLOAT[op] is FloatClass.APPROX)]
        if not cands:  # bool has only LOGICAL_NOT; every type has at least one unary op
            return self.leaf(t, scope, det, no_prod)
        op, s = self.pick_op(cands)
        cls = UNOP_FLOAT[op] if s.is_float else FloatClass.EXACT
        neg = op is UnOpKind.NEGATE
        x = self.expr(s, scope, depth - 1, det or cls is FloatClass.NEEDS_DET, no_prod and neg)
        return Gen(UnOp(op, x.e), x.det and cls is not FloatClass.APPROX, neg and x.prod)

    def small_int_float(self, t: DataType, scope: dict[str, VarInfo]) -> Expr:
        """A float in -3..4 with an integer value, so sums of many are exact in any order."""
        u = self.expr(U, scope, 2).e
        small = Cast(I, BinOp(BinOpKind.BIT_AND, u, LitU32(7)))
        return Cast(t, BinOp(BinOpKind.SUB, small, LitI32(3)))

    # -- statements ---------------------------------------------------------------------------

    def body(self, scope: dict[str, VarInfo], nest: int, uniform: bool, may_return: bool) -> list[Node]:
        out: list[Node] = []
        scope = dict(scope)
        lo = 1 if nest == 0 and self.budget > 0 else 0
        n = self.draw(_ints(lo, max(lo, self.budget if nest == 0 else min(self.budget, 4))))
        for _ in range(n):
            if self.budget <= 0:
                break
            self.budget -= 1
            out += self.statement(scope, nest, uniform)
        if may_return and self.chance(0.15):
            out.append(Return())
        return out

    def statement(self, scope: dict[str, VarInfo], nest: int, uniform: bool) -> list[Node]:
        cfg, depth = self.cfg, self.cfg.max_expr_depth
        assignable = [n for n, v in scope.items() if v.assignable]
        kinds = ["let", "let", "store"] + (["assign"] if assignable else [])
        if nest < cfg.max_nesting:
            kinds += ["if", "loop", "block"]
        if cfg.allow_atomics and any(n.startswith("acc_") for n in self.buffers):
            kinds.append("atomic")
        if uniform and cfg.allow_barriers:
            kinds.append("barrier")
        if uniform and cfg.allow_subgroups:
            kinds += ["subgroup", "subgroup"]
        match self.pick(kinds):
            case "let":
                t = self.pick(cfg.types)
                g = self.expr(t, scope, depth)
                name = self.fresh("v")
                scope[name] = VarInfo(t, g.det, g.prod)
                return [Let(name, g.e)]
            case "assign":
                name = self.pick(assignable)
                v = scope[name]
                g = self.expr(v.dtype, scope, depth, det=v.det, no_prod=not v.prod)
                return [Assign(name, g.e)]
            case "store":
                return [self.store(scope)]
            case "if":
                c = self.expr(B, scope, depth, det=True)
                barrier_free = not (cfg.allow_barriers or cfg.allow_subgroups)
                then = self.body(scope, nest + 1, False, barrier_free)
                other = self.body(scope, nest + 1, False, barrier_free) if self.chance(0.5) else []
                return [If(c.e, tuple(then), tuple(other))]
            case "loop":
                var = self.fresh("i")
                start = LitU32(self.draw(_ints(0, 2)))
                hi = LitU32(self.draw(_ints(0, 4)))
                lit_bound = not self.chance(0.3)
                bufs = [b for b in self.buffers.values() if not b.is_workgroup]
                end: Expr = hi if lit_bound else BinOp(BinOpKind.MIN, BufLen(self.pick(bufs).name), hi)
                inner = {**scope, var: VarInfo(U, assignable=False)}
                body = self.body(inner, nest + 1, uniform and lit_bound, False)
                return [Loop(var, start, end, tuple(body))]
            case "block":
                block = tuple(self.body(scope, nest + 1, uniform, False))
                return [Region(self.pick(["strategies.gen", "strategies.region"]), block)
                        if self.chance(0.5) else Block(block)]
            case "atomic":
                return [self.atomic(scope)]
            case "barrier":
                return self.barrier_phase(scope)
            case "subgroup":
                return [self.subgroup(scope)]
            case _:
                raise AssertionError("unreachable")

    def store(self, scope: dict[str, VarInfo]) -> Node:
        out = self.pick([b.name for b in self.buffers.values() if b.is_output and b.name.startswith("out_")])
        t = self.buffers[out].element
        s = Store(out, InvocationId(0), self.expr(t, scope, self.cfg.max_expr_depth).e)
        if self.chance(0.5):  # otherwise rely on the out-of-bounds rule
            return If(BinOp(BinOpKind.LT, InvocationId(0), BufLen(out)), (s,))
        return s

    def atomic(self, scope: dict[str, VarInfo]) -> Node:
        acc = self.pick([n for n in self.buffers if n.startswith("acc_")])
        t = self.buffers[acc].element
        op = self.acc_ops.get(acc)
        if op is None:
            op = self.acc_ops[acc] = self.pick(ORDER_FREE_ATOMICS if t.is_int else (AtomicOp.ADD,))
        value = self.expr(t, scope, self.cfg.max_expr_depth).e if t.is_int else self.small_int_float(t, scope)
        # The returned old value depends on invocation order, so nothing reads it.
        return Let(self.fresh("old"), Atomic(op, acc, self.index(scope, acc, 2), value))

    def barrier_phase(self, scope: dict[str, VarInfo]) -> list[Node]:
        """Every invocation writes its own slot, a barrier, one read of another slot, a barrier."""
        wg_bufs = [n for n in self.buffers if n.startswith("wg_")]
        name = self.pick(wg_bufs)
        t = self.buffers[name].element
        g = self.expr(t, scope, self.cfg.max_expr_depth)
        w = self.wg
        idx = self.pick([
            BinOp(BinOpKind.MOD, BinOp(BinOpKind.ADD, LocalId(0), LitU32(self.draw(_ints(0, w)))),
                  LitU32(w)),
            BinOp(BinOpKind.SUB, LitU32(w - 1), LocalId(0)),
            LitU32(self.draw(_ints(0, w + 1))),
        ])
        v = self.fresh("w")
        scope[v] = VarInfo(t, g.det, g.prod)
        return [Store(name, LocalId(0), g.e), Barrier(), Let(v, Load(name, idx)), Barrier()]

    def subgroup(self, scope: dict[str, VarInfo]) -> Node:
        depth = self.cfg.max_expr_depth
        name = self.fresh("s")
        kind = self.pick(["reduce", "ballot", "shuffle", "lane"])
        if kind == "lane":
            scope[name] = VarInfo(U)
            return Let(name, self.pick([SubgroupLocalId(), SubgroupSize()]))
        if kind == "ballot":
            ballot = SubgroupBallot(self.expr(B, scope, depth, det=True).e)
            scope[name] = VarInfo(U)
            return Let(name, ballot)
        if kind == "shuffle":
            t = self.pick(self.cfg.types)
            g = self.expr(t, scope, depth)
            shuffle = SubgroupShuffle(g.e, self.expr(U, scope, 2).e)
            scope[name] = VarInfo(t, g.det, False)
            return Let(name, shuffle)
        op, t = self.pick([(op, t) for op, rule in SUBGROUP_REDUCE_OPS.items()
                           for t in rule.operands if t in self.cfg.types])
        det = True
        if t.is_float and op is BinOpKind.ADD:
            value = self.small_int_float(t, scope)  # any association order gives the same sum
        elif t.is_float:  # + 0.0: no -0.0 enters, so the sign of a zero result is fixed
            g = self.expr(t, scope, depth, no_prod=True)
            value, det = BinOp(BinOpKind.ADD, g.e, lit(0.0, t)), g.det
        else:
            value = self.expr(t, scope, depth).e
        scope[name] = VarInfo(t, det, False)
        return Let(name, SubgroupReduce(op, value))


def _declare(cfg: Config, draw: Any, wg: int) -> dict[str, BufferDecl]:
    decls: list[BufferDecl] = []
    num = [t for t in cfg.dtypes if t is not B]
    for t in cfg.dtypes:
        decls.append(BufferDecl.read(f"in_{t.short}", 0, t))
    for t in cfg.dtypes:
        access = BufferAccess.WRITE_ONLY if draw(_below(4)) == 3 else BufferAccess.READ_WRITE
        decls.append(BufferDecl(f"out_{t.short}", 0, access, t, is_output=True))
    if cfg.allow_atomics:
        for t in num:
            decls.append(BufferDecl(f"acc_{t.short}", 0, BufferAccess.READ_WRITE, t, is_output=True))
    if draw(st.booleans()):
        decls.append(BufferDecl.uniform("params", 0, U))
    if cfg.allow_barriers:
        decls += [BufferDecl.workgroup(f"wg_{t.short}", wg, t) for t in cfg.dtypes]
    order = draw(st.permutations(range(len(decls))))
    out, binding = {}, 0
    for k in order:  # declaration order and bindings vary; names stay stable
        d = decls[k]
        if not d.is_workgroup:
            d = BufferDecl(d.name, binding, d.access, d.element, d.count, d.is_output)
            binding += 1
        out[d.name] = d
    return out


def _config(**kw: Any) -> Config:
    dtypes = tuple(kw.pop("dtypes", ALL_DTYPES))
    if not kw.pop("allow_floats", True):
        dtypes = tuple(t for t in dtypes if not t.is_float)
    if not dtypes:
        raise ValueError("programs() needs at least one dtype")
    return Config(dtypes=dtypes, **kw)


def _workgroup_size(draw: Any, cfg: Config) -> int:
    if cfg.allow_subgroups:
        return int(draw(st.sampled_from((32, 64))))
    return int(draw(st.one_of(st.sampled_from((1, 2, 8, 32, 64)), st.integers(1, 64))))


def _program(draw: Any, cfg: Config, wg: int) -> Program:
    b = _Builder(draw, cfg, wg, _declare(cfg, draw, wg), budget=cfg.max_stmts)
    entry = b.body({}, 0, True, False)
    may_return = not (cfg.allow_barriers or cfg.allow_subgroups)
    outs = [n for n, d in b.buffers.items() if d.is_output and n.startswith("out_")]
    for name in draw(st.permutations(outs)):  # every output is written at least once
        t = b.buffers[name].element
        entry.append(Store(name, InvocationId(0), b.expr(t, {}, cfg.max_expr_depth).e))
    if may_return and draw(st.booleans()):
        entry.insert(draw(_ints(0, len(entry))), If(BinOp(BinOpKind.GE, InvocationId(0),
                                                                 LitU32(draw(_ints(0, 3 * wg)))),
                                                           (Return(),)))
    names = set(b.calls)
    for n in list(names):
        names.update(_CALLEES.get(n, ()))
    fns = tuple(FUNCTIONS[n] for n in sorted(names))
    return Program(tuple(b.buffers.values()), (wg, 1, 1), tuple(entry), fns)


@st.composite
def programs(draw: Any, max_stmts: int = 8, dtypes: Sequence[DataType] = ALL_DTYPES,
             allow_floats: bool = True, allow_atomics: bool = False, allow_barriers: bool = False,
             allow_subgroups: bool = False, allow_calls: bool = True, exact_floats: bool = False,
             max_expr_depth: int = 3) -> Program:
    """Random valid programs (see the module docs for what they guarantee)."""
    cfg = _config(max_stmts=max_stmts, dtypes=dtypes, allow_floats=allow_floats,
                  allow_atomics=allow_atomics, allow_barriers=allow_barriers,
                  allow_subgroups=allow_subgroups, allow_calls=allow_calls, exact_floats=exact_floats,
                  max_expr_depth=max_expr_depth)
    return _program(draw, cfg, _workgroup_size(draw, cfg))


def input_arrays(program: Program, max_len: int, finite_only: bool = True) -> st.SearchStrategy[
        dict[str, np.ndarray]]:
    """Arrays for every storage buffer of ``program`` (outputs get arbitrary initial contents)."""

    @st.composite
    def build(draw: Any) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {}
        for d in program.buffers:
            if d.is_workgroup:
                continue
            is_acc = d.name.startswith("acc_")
            n = d.count or draw(_ints(1, 8 if is_acc or d.access is BufferAccess.UNIFORM else max_len))
            elems = small_int_floats(d.element) if is_acc and d.element.is_float \
                else values(d.element, finite_only)
            arrays[d.name] = np.array(draw(st.lists(elems, min_size=n, max_size=n)), dtype=d.element.np_dtype)
        return arrays

    return build()


@st.composite
def program_and_inputs(draw: Any, max_stmts: int = 8, dtypes: Sequence[DataType] = ALL_DTYPES,
                       allow_floats: bool = True, allow_atomics: bool = False,
                       allow_barriers: bool = False, allow_subgroups: bool = False,
                       allow_calls: bool = True, exact_floats: bool = False, max_expr_depth: int = 3,
                       finite_only: bool = True) -> tuple[Program, dict[str, np.ndarray], Grid]:
    """A valid program, arrays for all its storage buffers, and a grid of <= 4 workgroups of
    <= 64 invocations. Buffer lengths are drawn independently, so some invocations and loads fall
    past the end of some buffers."""
    cfg = _config(max_stmts=max_stmts, dtypes=dtypes, allow_floats=allow_floats,
                  allow_atomics=allow_atomics, allow_barriers=allow_barriers,
                  allow_subgroups=allow_subgroups, allow_calls=allow_calls, exact_floats=exact_floats,
                  max_expr_depth=max_expr_depth)
    wg = _workgroup_size(draw, cfg)
    groups = draw(_ints(1, 4))
    prog = _program(draw, cfg, wg)
    arrays = draw(input_arrays(prog, wg * groups + 3, finite_only))
    return prog, arrays, (groups, 1, 1)


# ---------------------------------------------------------------------------------------------
# Structurally arbitrary programs (any tag, any name, any literal bits; not valid in general)

names = st.text(max_size=16)  # <= 64 UTF-8 bytes; hypothesis text excludes surrogates
axes = st.integers(0, 2)
u32s = st.integers(0, U32_MAX)


def arbitrary_exprs(max_leaves: int = 12) -> st.SearchStrategy[Expr]:
    leaves: st.SearchStrategy[Expr] = st.one_of(
        st.builds(LitBool, st.booleans()), st.builds(LitI32, st.integers(I32_MIN, I32_MAX)),
        st.builds(LitU32, u32s), u32s.map(lambda b: LitF32(bits=b)),
        st.integers(0, 2**64 - 1).map(lambda b: LitF64(bits=b)),
        st.builds(Var, names), st.builds(BufLen, names), st.builds(InvocationId, axes),
        st.builds(WorkgroupId, axes), st.builds(LocalId, axes), st.just(SubgroupLocalId()),
        st.just(SubgroupSize()),
    )

    def extend(sub: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        return st.one_of(
            st.builds(Load, names, sub), st.builds(BinOp, st.sampled_from(BinOpKind), sub, sub),
            st.builds(UnOp, st.sampled_from(UnOpKind), sub), st.builds(Select, sub, sub, sub),
            st.builds(Cast, st.sampled_from(DataType), sub), st.builds(Fma, sub, sub, sub),
            st.builds(Atomic, st.sampled_from(AtomicOp), names, sub, sub, st.none() | sub),
            st.builds(SubgroupBallot, sub), st.builds(SubgroupShuffle, sub, sub),
            st.builds(SubgroupReduce, st.sampled_from(BinOpKind), sub),
            st.builds(Call, names, st.lists(sub, max_size=3).map(tuple)),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)


def arbitrary_nodes(max_leaves: int = 8) -> st.SearchStrategy[tuple[Node, ...]]:
    e = arbitrary_exprs(4)
    simple: st.SearchStrategy[Node] = st.one_of(
        st.builds(Let, names, e), st.builds(Assign, names, e), st.builds(Store, names, e, e),
        st.just(Barrier()), st.just(Return()),
    )

    def extend(sub: st.SearchStrategy[tuple[Node, ...]]) -> st.SearchStrategy[tuple[Node, ...]]:
        compound: st.SearchStrategy[Node] = st.one_of(
            st.builds(If, e, sub, sub), st.builds(Loop, names, e, e, sub), st.builds(Block, sub),
            st.builds(Region, st.text(max_size=32), sub),
        )
        return st.lists(st.one_of(simple, compound), max_size=3).map(tuple)

    return st.recursive(st.lists(simple, max_size=3).map(tuple), extend, max_leaves=max_leaves)


@st.composite
def arbitrary_programs(draw: Any) -> Program:
    buffers = draw(st.lists(st.builds(BufferDecl, names, u32s, st.sampled_from(BufferAccess),
                                      st.sampled_from(DataType), u32s, st.booleans()), max_size=4))
    wg = (draw(u32s), draw(u32s), draw(u32s))
    adjoints = st.one_of(st.none(), st.builds(  # custom adjoints (vyre.ir.expr.FunctionAdjoint)
        FunctionAdjoint, names, names, st.lists(st.one_of(st.none(), arbitrary_exprs(4)), max_size=3).map(tuple)))
    fns = draw(st.lists(st.builds(FunctionDef, names,
                                  st.lists(st.tuples(names, st.sampled_from(DataType)), max_size=3)
                                  .map(tuple), st.sampled_from(DataType), arbitrary_exprs(6), adjoints),
                        max_size=2))
    return Program(tuple(buffers), wg, draw(arbitrary_nodes()), tuple(fns))
