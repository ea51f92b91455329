"""Derivative rules, one table per op enum (:data:`BINOP_DERIV`, :data:`UNOP_DERIV`).

A differentiable rule maps the adjoint (or, in forward mode, the tangent) of an op's *operand* side
to its contribution: every rule is linear in ``d``, so the same function serves reverse mode
(``d`` = the result's adjoint, one call gives every operand's contribution) and forward mode
(``d`` = one operand's tangent, the contribution for that operand is its tangent's share of the
result's tangent). Rules see the operands ``a``/``b`` and the result ``r`` as atoms (variables or
literals), so they may reuse the primal result (``exp``' = ``r``) without recomputing it.

Every rule is built only from differentiable ops (comparisons appear only as ``Select``
conditions), so the backward program is itself differentiable: Hessian-vector products work.

Conventions where the derivative is not unique (documented in docs/autodiff.md):
``abs`` and ``abs_diff`` use 0 at the kink; ``min``/``max`` split a tie 1/2 to each operand; the
operand ``min``/``max`` did not return gets nothing (so a NaN operand gets no gradient); ``pow``
follows JAX (``d/da = 0`` when ``b == 0``, ``d/db`` uses ``log(1)`` when ``a == 0``).

**The zero-derivative policy** (one rule for every piecewise-constant dependence): a float that
depends on a differentiated value only through a step (``ZeroDiff`` ops: floor, ceil, round,
trunc, sign; ``stop_gradient``) or through a non-float (a comparison, a float->int cast, an
integer op, a load at such an index) is a constant to autodiff: derivative 0, which is the exact
derivative everywhere except at the jumps, where none exists (JAX, PyTorch and Warp do the same).
:func:`stops_gradient` and the int->float cast rule are applied by both activity analyses
(``checks.Activity`` on the source, ``nf.active_names`` on the normal form).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..ir.expr import BinOp, Expr, Select, UnOp, lit
from ..ir.ops import BinOpKind, UnOpKind
from ..ir.types import DataType

# Contribution of one operand given the result's adjoint d, or None for "no contribution".
Contrib = Expr | None


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a rule may use: operand atoms, the result atom and the float type."""

    a: Expr
    b: Expr
    r: Expr
    ty: DataType

    def c(self, value: float) -> Expr:
        return lit(value, self.ty)


@dataclass(frozen=True, slots=True)
class BinDiff:
    """A differentiable binary op: ``rule(ctx, d) -> (contribution to a, contribution to b)``."""

    rule: Callable[[Ctx, Expr], tuple[Contrib, Contrib]]


@dataclass(frozen=True, slots=True)
class UnDiff:
    """A differentiable unary op: ``rule(ctx, d) -> contribution to the operand`` (``ctx.b`` unused)."""

    rule: Callable[[Ctx, Expr], Expr]


@dataclass(frozen=True, slots=True)
class ZeroDiff:
    """A float op whose derivative is 0 wherever it exists: its result is a constant to autodiff."""

    why: str


@dataclass(frozen=True, slots=True)
class NonDiff:
    """An op with no derivative on floats; ``why`` and ``fix`` go into the AutodiffError."""

    why: str
    fix: str


def _b(op: BinOpKind, a: Expr, b: Expr) -> Expr:
    return BinOp(op, a, b)


def _mul(a: Expr, b: Expr) -> Expr: return BinOp(BinOpKind.MUL, a, b)
def _div(a: Expr, b: Expr) -> Expr: return BinOp(BinOpKind.DIV, a, b)
def _add(a: Expr, b: Expr) -> Expr: return BinOp(BinOpKind.ADD, a, b)
def _sub(a: Expr, b: Expr) -> Expr: return BinOp(BinOpKind.SUB, a, b)
def _neg(a: Expr) -> Expr: return UnOp(UnOpKind.NEGATE, a)
def _u(op: UnOpKind, a: Expr) -> Expr: return UnOp(op, a)


def _sel(c: Expr, t: Expr, f: Expr) -> Expr:
    return Select(c, t, f)


def _minmax(x: Ctx, d: Expr) -> tuple[Contrib, Contrib]:
    # A tie splits evenly; otherwise the whole adjoint goes to the operand that was returned.
    half = _mul(d, x.c(0.5))
    zero = x.c(0.0)
    tie = _b(BinOpKind.EQ, x.a, x.b)
    da = _sel(tie, half, _sel(_b(BinOpKind.EQ, x.r, x.a), d, zero))
    db = _sel(tie, half, _sel(_b(BinOpKind.EQ, x.r, x.b), d, zero))
    return da, db


def _abs_diff(x: Ctx, d: Expr) -> tuple[Contrib, Contrib]:
    zero = x.c(0.0)
    s = _sel(_b(BinOpKind.GT, x.a, x.b), d, _sel(_b(BinOpKind.LT, x.a, x.b), _neg(d), zero))
    return s, _neg(s)


def _pow(x: Ctx, d: Expr) -> tuple[Contrib, Contrib]:
    # r = a^b: dr/da = b a^(b-1) (0 when b == 0, so pow(0, 0) gives 0, not 0 * inf);
    # dr/db = r log(a), with log(1) = 0 at a == 0 (JAX's conventions). Both are differentiable.
    zero = x.c(0.0)
    da = _sel(_b(BinOpKind.EQ, x.b, zero), zero,
              _mul(_mul(d, x.b), _b(BinOpKind.POW, x.a, _sub(x.b, x.c(1.0)))))
    db = _mul(_mul(d, x.r), _u(UnOpKind.LOG, _sel(_b(BinOpKind.EQ, x.a, zero), x.c(1.0), x.a)))
    return da, db


_CMP = NonDiff("a comparison yields a bool, which carries no gradient",
               "use the comparison only as a condition (If, Select); compute float values with "
               "float arithmetic")
_LOGIC = NonDiff("a logical op works on bools, which carry no gradient",
                 "use the result only as a condition")
_INTOP = NonDiff("an integer/bitwise op has no derivative",
                 "keep integer arithmetic to indices, bounds and conditions")
_STEP = ZeroDiff("piecewise constant: derivative 0 between its jumps, and 0 is used at them")
_STOP = ZeroDiff("stop_gradient: the value is a constant to autodiff")
_BOOL_TEST = NonDiff("a float test yields a bool, which carries no gradient",
                     "use the result only as a condition")

BINOP_DERIV: dict[BinOpKind, BinDiff | NonDiff] = {
    BinOpKind.ADD: BinDiff(lambda x, d: (d, d)),
    BinOpKind.SUB: BinDiff(lambda x, d: (d, _neg(d))),
    BinOpKind.MUL: BinDiff(lambda x, d: (_mul(d, x.b), _mul(d, x.a))),
    BinOpKind.DIV: BinDiff(lambda x, d: (_div(d, x.b), _neg(_div(_mul(d, x.r), x.b)))),
    # fmod: r = a - b*trunc(a/b), so dr/db = -trunc(a/b) = (r - a)/b (smooth, so second order works).
    BinOpKind.MOD: BinDiff(lambda x, d: (d, _div(_mul(d, _sub(x.r, x.a)), x.b))),
    BinOpKind.MIN: BinDiff(_minmax),
    BinOpKind.MAX: BinDiff(_minmax),
    BinOpKind.ABS_DIFF: BinDiff(_abs_diff),
    BinOpKind.POW: BinDiff(_pow),
    BinOpKind.BIT_AND: _INTOP,
    BinOpKind.BIT_OR: _INTOP,
    BinOpKind.BIT_XOR: _INTOP,
    BinOpKind.SHL: _INTOP,
    BinOpKind.SHR: _INTOP,
    BinOpKind.FIXED_MUL_Q16: _INTOP,
    BinOpKind.EQ: _CMP,
    BinOpKind.NE: _CMP,
    BinOpKind.LT: _CMP,
    BinOpKind.GT: _CMP,
    BinOpKind.LE: _CMP,
    BinOpKind.GE: _CMP,
    BinOpKind.AND: _LOGIC,
    BinOpKind.OR: _LOGIC,
}

_LN2 = math.log(2.0)


def _abs(x: Ctx, d: Expr) -> Expr:
    zero = x.c(0.0)
    return _sel(_b(BinOpKind.GT, x.a, zero), d, _sel(_b(BinOpKind.LT, x.a, zero), _neg(d), zero))


def _one_minus_sq(x: Ctx, v: Expr) -> Expr:
    return _sub(x.c(1.0), _mul(v, v))


def _one_plus_sq(x: Ctx, v: Expr) -> Expr:
    return _add(x.c(1.0), _mul(v, v))


UNOP_DERIV: dict[UnOpKind, UnDiff | ZeroDiff | NonDiff] = {
    UnOpKind.NEGATE: UnDiff(lambda x, d: _neg(d)),
    UnOpKind.ABS: UnDiff(_abs),
    UnOpKind.SQRT: UnDiff(lambda x, d: _div(_mul(d, x.c(0.5)), x.r)),
    UnOpKind.INVERSE_SQRT: UnDiff(lambda x, d: _mul(_mul(d, x.c(-0.5)), _div(x.r, x.a))),
    UnOpKind.EXP: UnDiff(lambda x, d: _mul(d, x.r)),
    UnOpKind.EXP2: UnDiff(lambda x, d: _mul(_mul(d, x.r), x.c(_LN2))),
    UnOpKind.LOG: UnDiff(lambda x, d: _div(d, x.a)),
    UnOpKind.LOG2: UnDiff(lambda x, d: _div(d, _mul(x.a, x.c(_LN2)))),
    UnOpKind.SIN: UnDiff(lambda x, d: _mul(d, _u(UnOpKind.COS, x.a))),
    UnOpKind.COS: UnDiff(lambda x, d: _neg(_mul(d, _u(UnOpKind.SIN, x.a)))),
    UnOpKind.TAN: UnDiff(lambda x, d: _mul(d, _one_plus_sq(x, x.r))),
    UnOpKind.ASIN: UnDiff(lambda x, d: _mul(d, _u(UnOpKind.INVERSE_SQRT, _one_minus_sq(x, x.a)))),
    UnOpKind.ACOS: UnDiff(
        lambda x, d: _neg(_mul(d, _u(UnOpKind.INVERSE_SQRT, _one_minus_sq(x, x.a))))),
    UnOpKind.ATAN: UnDiff(lambda x, d: _div(d, _one_plus_sq(x, x.a))),
    UnOpKind.SINH: UnDiff(lambda x, d: _mul(d, _u(UnOpKind.COSH, x.a))),
    UnOpKind.COSH: UnDiff(lambda x, d: _mul(d, _u(UnOpKind.SINH, x.a))),
    UnOpKind.TANH: UnDiff(lambda x, d: _mul(d, _one_minus_sq(x, x.r))),
    UnOpKind.RECIPROCAL: UnDiff(lambda x, d: _neg(_mul(_mul(d, x.r), x.r))),
    UnOpKind.FLOOR: _STEP,
    UnOpKind.CEIL: _STEP,
    UnOpKind.ROUND: _STEP,
    UnOpKind.TRUNC: _STEP,
    UnOpKind.SIGN: _STEP,
    UnOpKind.STOP_GRADIENT: _STOP,
    UnOpKind.BIT_NOT: _INTOP,
    UnOpKind.POPCOUNT: _INTOP,
    UnOpKind.CLZ: _INTOP,
    UnOpKind.CTZ: _INTOP,
    UnOpKind.LOGICAL_NOT: _LOGIC,
    UnOpKind.IS_NAN: _BOOL_TEST,
    UnOpKind.IS_INF: _BOOL_TEST,
    UnOpKind.IS_FINITE: _BOOL_TEST,
}


def stops_gradient(value: Expr) -> bool:
    """Whether the float ``value`` is a constant to autodiff under the zero-derivative policy
    because of its own op (a ``ZeroDiff`` unop). Casts from a non-float are the policy's other
    half; the activity analyses see them by the operand's type (they never make a float active)."""
    return isinstance(value, UnOp) and isinstance(UNOP_DERIV[value.op], ZeroDiff)


def fma_contribs(a: Expr, b: Expr, d: Expr) -> tuple[Expr, Expr, Expr]:
    """``r = a*b + c``: contributions to (a, b, c)."""
    return _mul(d, b), _mul(d, a), d


def select_contribs(cond: Expr, d: Expr, ty: DataType) -> tuple[Expr, Expr]:
    """``r = cond ? t : f``: contributions to (t, f); the condition carries none."""
    zero = lit(0.0, ty)
    return Select(cond, d, zero), Select(cond, zero, d)
