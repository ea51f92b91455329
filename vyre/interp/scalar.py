"""Scalar semantics of every op: the executable form of docs/semantics.md.

Values inside the interpreter use one representation per :class:`DataType`:

=========  =========================================================
``bool``   Python ``bool``
``i32``    Python ``int`` in ``[-2**31, 2**31)``
``u32``    Python ``int`` in ``[0, 2**32)``
``f32``    ``numpy.float32`` scalar (f32 arithmetic is done in f32)
``f64``    Python ``float``
=========  =========================================================

Per-op rules live in tables keyed by the op enums, one function per op and operand type:
:data:`BINOP_EVAL`, :data:`UNOP_EVAL`, :data:`ATOMIC_EVAL`, :data:`CAST_EVAL` (keyed by
``(source, target)``). The machine looks the function up once per expression at compile time.

The table functions assume canonical values (as produced by :func:`to_value`) and assume numpy
floating-point warnings are silenced by the caller (``np.errstate(all="ignore")``); the public
``eval_*`` helpers do both, so tests can use them as oracles on plain Python / numpy scalars.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InterpError
from ..ir.ops import ATOMIC_RULES, BINOP_RULES, UNOP_RULES, AtomicOp, BinOpKind, UnOpKind
from ..ir.types import DataType

Value = Any  # bool | int | np.float32 | float, per the table in the module docstring
BinFn = Callable[[Value, Value], Value]
UnFn = Callable[[Value], Value]

BOOL, I32, U32, F32, F64 = DataType.BOOL, DataType.I32, DataType.U32, DataType.F32, DataType.F64
M32 = 0xFFFFFFFF
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
_F32 = np.float32
_F32_ONE = np.float32(1.0)


# --- representation -------------------------------------------------------------------------

def wrap_i32(x: int) -> int:
    """``x`` reduced modulo 2**32 into the signed range."""
    return ((x + 0x80000000) & M32) - 0x80000000


def as_signed(x: int) -> int:
    """The u32 bit pattern ``x`` read as i32."""
    return x - 0x100000000 if x & 0x80000000 else x


def zero_of(t: DataType) -> Value:
    """The value an out-of-bounds load (or atomic) yields: 0 of the type."""
    return _ZERO[t]


_ZERO: dict[DataType, Value] = {BOOL: False, I32: 0, U32: 0, F32: np.float32(0.0), F64: 0.0}


def to_value(t: DataType, x: Any) -> Value:
    """Canonical interpreter value of type ``t`` for a Python or numpy scalar ``x``.

    Integers must already be in range (no silent wrapping); floats are rounded to ``t``."""
    if t is BOOL:
        if not isinstance(x, (bool, np.bool_)):
            raise InterpError(f"expected a bool for a bool value, got {x!r}. Fix: pass True or False")
        return bool(x)
    if t.is_int:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise InterpError(f"expected an int for a {t.short} value, got {x!r}. Fix: pass a Python int")
        v = int(x)
        lo, hi = (I32_MIN, I32_MAX) if t is I32 else (0, M32)
        if not lo <= v <= hi:
            raise InterpError(f"{v} is outside the {t.short} range [{lo}, {hi}]. Fix: pass a value in range")
        return v
    if not isinstance(x, (int, float, np.integer, np.floating)) or isinstance(x, (bool, np.bool_)):
        raise InterpError(f"expected a float for a {t.short} value, got {x!r}. Fix: pass a Python float")
    with np.errstate(all="ignore"):
        return np.float32(x) if t is F32 else float(x)


# --- float helpers (f64 math on Python floats, which raise where IEEE does not) --------------

def _fdiv(a: float, b: float) -> float:
    if b == 0.0:
        if a != a or a == 0.0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _fmod(a: float, b: float) -> float:
    """C ``fmod``: exact, sign of the dividend; NaN for ``x % 0`` and ``inf % y``."""
    if a != a or b != b or b == 0.0 or math.isinf(a):
        return math.nan
    return math.fmod(a, b)  # fmod(x, inf) == x


def _min_num(a: Value, b: Value) -> Value:
    """IEEE minNum: a NaN operand loses to the other."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a <= b else b


def _max_num(a: Value, b: Value) -> Value:
    if a != a:
        return b
    if b != b:
        return a
    return a if a >= b else b


def _libm(fn: Callable[[float], float], fallback: Any) -> Callable[[float], float]:
    """``math`` function for finite, in-domain inputs; numpy's IEEE result (inf, NaN) where
    ``math`` raises instead."""
    def f(x: float) -> float:
        try:
            return fn(x)
        except (ValueError, OverflowError):
            with np.errstate(all="ignore"):
                return float(fallback(np.float64(x)))
    return f


def _pow(a: float, b: float) -> float:
    """C ``pow`` (IEEE special cases: ``pow(x, 0) == 1`` even for NaN, a negative base with a
    non-integer exponent is NaN, ``pow(0, -1) == inf``); ``math.pow`` raises where C returns
    those, so numpy's C result is used there."""
    try:
        return math.pow(a, b)
    except (ValueError, OverflowError, ZeroDivisionError):
        with np.errstate(all="ignore"):
            return float(np.power(np.float64(a), np.float64(b)))


def _integral(fn: Callable[[float], int]) -> Callable[[float], float]:
    """floor/ceil/trunc/round-half-even keeping the sign of zero (as C does); inf and NaN pass."""
    def f(x: float) -> float:
        if x != x or math.isinf(x):
            return x
        return math.copysign(float(fn(x)), x)
    return f


_F64_UN: dict[UnOpKind, Callable[[float], float]] = {
    UnOpKind.SQRT: _libm(math.sqrt, np.sqrt),
    UnOpKind.EXP: _libm(math.exp, np.exp),
    UnOpKind.EXP2: _libm(math.exp2, np.exp2),
    UnOpKind.LOG: _libm(math.log, np.log),
    UnOpKind.LOG2: _libm(math.log2, np.log2),
    UnOpKind.SIN: _libm(math.sin, np.sin),
    UnOpKind.COS: _libm(math.cos, np.cos),
    UnOpKind.TAN: _libm(math.tan, np.tan),
    UnOpKind.ASIN: _libm(math.asin, np.arcsin),
    UnOpKind.ACOS: _libm(math.acos, np.arccos),
    UnOpKind.ATAN: _libm(math.atan, np.arctan),
    UnOpKind.SINH: _libm(math.sinh, np.sinh),
    UnOpKind.COSH: _libm(math.cosh, np.cosh),
    UnOpKind.TANH: _libm(math.tanh, np.tanh),
    UnOpKind.FLOOR: _integral(math.floor),
    UnOpKind.CEIL: _integral(math.ceil),
    UnOpKind.TRUNC: _integral(math.trunc),
    UnOpKind.ROUND: _integral(round),  # Python's round() is half to even
}


def _via_f64(fn: Callable[[float], float]) -> UnFn:
    """An f32 op computed in f64 and rounded once to f32 (the most accurate reference for
    transcendentals; exact for floor/ceil/trunc/round)."""
    return lambda x: _F32(fn(float(x)))


# --- binary ops -------------------------------------------------------------------------------

def _i32_div(a: int, b: int) -> int:
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return wrap_i32(-q if (a < 0) != (b < 0) else q)  # INT_MIN / -1 wraps to INT_MIN


def _i32_mod(a: int, b: int) -> int:
    if b == 0:
        return 0
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _cmp_table(fn: BinFn, types: tuple[DataType, ...]) -> dict[DataType, BinFn]:
    return dict.fromkeys(types, fn)


_NUM = (I32, U32, F32, F64)
_FL = (F32, F64)


def _f_bool(fn: BinFn) -> BinFn:
    return lambda a, b: bool(fn(a, b))


BINOP_EVAL: dict[BinOpKind, dict[DataType, BinFn]] = {
    BinOpKind.ADD: {I32: lambda a, b: wrap_i32(a + b), U32: lambda a, b: (a + b) & M32,
                    F32: lambda a, b: a + b, F64: lambda a, b: a + b},
    BinOpKind.SUB: {I32: lambda a, b: wrap_i32(a - b), U32: lambda a, b: (a - b) & M32,
                    F32: lambda a, b: a - b, F64: lambda a, b: a - b},
    BinOpKind.MUL: {I32: lambda a, b: wrap_i32(a * b), U32: lambda a, b: (a * b) & M32,
                    F32: lambda a, b: a * b, F64: lambda a, b: a * b},
    BinOpKind.DIV: {I32: _i32_div, U32: lambda a, b: a // b if b else M32,
                    F32: lambda a, b: a / b, F64: _fdiv},
    BinOpKind.MOD: {I32: _i32_mod, U32: lambda a, b: a % b if b else 0,
                    F32: lambda a, b: _F32(_fmod(float(a), float(b))), F64: _fmod},
    # Python's & | ^ on signed ints act on the infinite two's complement, so i32 stays in range.
    BinOpKind.BIT_AND: {I32: lambda a, b: a & b, U32: lambda a, b: a & b},
    BinOpKind.BIT_OR: {I32: lambda a, b: a | b, U32: lambda a, b: a | b},
    BinOpKind.BIT_XOR: {I32: lambda a, b: a ^ b, U32: lambda a, b: a ^ b},
    BinOpKind.SHL: {I32: lambda a, b: wrap_i32(a << (b & 31)), U32: lambda a, b: (a << (b & 31)) & M32},
    BinOpKind.SHR: {I32: lambda a, b: a >> (b & 31), U32: lambda a, b: a >> (b & 31)},
    BinOpKind.EQ: {**_cmp_table(lambda a, b: a == b, (I32, U32, F64, BOOL)),
                   F32: _f_bool(lambda a, b: a == b)},
    BinOpKind.NE: {**_cmp_table(lambda a, b: a != b, (I32, U32, F64, BOOL)),
                   F32: _f_bool(lambda a, b: a != b)},
    BinOpKind.LT: {**_cmp_table(lambda a, b: a < b, (I32, U32, F64)), F32: _f_bool(lambda a, b: a < b)},
    BinOpKind.GT: {**_cmp_table(lambda a, b: a > b, (I32, U32, F64)), F32: _f_bool(lambda a, b: a > b)},
    BinOpKind.LE: {**_cmp_table(lambda a, b: a <= b, (I32, U32, F64)), F32: _f_bool(lambda a, b: a <= b)},
    BinOpKind.GE: {**_cmp_table(lambda a, b: a >= b, (I32, U32, F64)), F32: _f_bool(lambda a, b: a >= b)},
    BinOpKind.AND: {BOOL: lambda a, b: a and b},
    BinOpKind.OR: {BOOL: lambda a, b: a or b},
    BinOpKind.MIN: {I32: min, U32: min, F32: _min_num, F64: _min_num},
    BinOpKind.MAX: {I32: max, U32: max, F32: _max_num, F64: _max_num},
    BinOpKind.ABS_DIFF: {I32: lambda a, b: abs(a - b), U32: lambda a, b: abs(a - b),
                         F32: lambda a, b: abs(a - b), F64: lambda a, b: abs(a - b)},
    # 16.16: the 64-bit product of the signed bit patterns, arithmetic shift, wrapped to 32 bits.
    BinOpKind.FIXED_MUL_Q16: {I32: lambda a, b: wrap_i32((a * b) >> 16),
                              U32: lambda a, b: ((as_signed(a) * as_signed(b)) >> 16) & M32},
    # C pow (f32 computed in f64 and rounded once, like the transcendentals).
    BinOpKind.POW: {F32: lambda a, b: _F32(_pow(float(a), float(b))), F64: _pow},
}


# --- unary ops --------------------------------------------------------------------------------

def _clz(x: int) -> int:
    return 32 - (x & M32).bit_length()


def _ctz(x: int) -> int:
    x &= M32
    return 32 if x == 0 else (x & -x).bit_length() - 1


def _i32_sign(a: int) -> int:
    return (a > 0) - (a < 0)


def _f_sign(one: Value, minus_one: Value) -> UnFn:
    return lambda x: one if x > 0 else (minus_one if x < 0 else x)


def _float_un(op: UnOpKind) -> dict[DataType, UnFn]:
    f = _F64_UN[op]
    return {F32: _via_f64(f), F64: f}


UNOP_EVAL: dict[UnOpKind, dict[DataType, UnFn]] = {
    UnOpKind.NEGATE: {I32: lambda a: wrap_i32(-a), U32: lambda a: -a & M32,
                      F32: lambda a: -a, F64: lambda a: -a},
    UnOpKind.BIT_NOT: {I32: lambda a: ~a, U32: lambda a: a ^ M32},
    UnOpKind.LOGICAL_NOT: {BOOL: lambda a: not a},
    UnOpKind.ABS: {I32: lambda a: wrap_i32(abs(a)), U32: lambda a: a,
                   F32: lambda a: abs(a), F64: lambda a: abs(a)},
    # sqrt is correctly rounded in f32 directly; 1/sqrt is two f32 roundings, as written.
    UnOpKind.SQRT: {F32: lambda a: np.sqrt(a), F64: _F64_UN[UnOpKind.SQRT]},
    UnOpKind.INVERSE_SQRT: {F32: lambda a: _F32_ONE / np.sqrt(a),
                            F64: lambda a: _fdiv(1.0, _F64_UN[UnOpKind.SQRT](a))},
    UnOpKind.EXP: _float_un(UnOpKind.EXP),
    UnOpKind.EXP2: _float_un(UnOpKind.EXP2),
    UnOpKind.LOG: _float_un(UnOpKind.LOG),
    UnOpKind.LOG2: _float_un(UnOpKind.LOG2),
    UnOpKind.SIN: _float_un(UnOpKind.SIN),
    UnOpKind.COS: _float_un(UnOpKind.COS),
    UnOpKind.TAN: _float_un(UnOpKind.TAN),
    UnOpKind.ASIN: _float_un(UnOpKind.ASIN),
    UnOpKind.ACOS: _float_un(UnOpKind.ACOS),
    UnOpKind.ATAN: _float_un(UnOpKind.ATAN),
    UnOpKind.SINH: _float_un(UnOpKind.SINH),
    UnOpKind.COSH: _float_un(UnOpKind.COSH),
    UnOpKind.TANH: _float_un(UnOpKind.TANH),
    UnOpKind.FLOOR: _float_un(UnOpKind.FLOOR),
    UnOpKind.CEIL: _float_un(UnOpKind.CEIL),
    UnOpKind.ROUND: _float_un(UnOpKind.ROUND),
    UnOpKind.TRUNC: _float_un(UnOpKind.TRUNC),
    UnOpKind.SIGN: {I32: _i32_sign, F32: _f_sign(_F32_ONE, np.float32(-1.0)), F64: _f_sign(1.0, -1.0)},
    UnOpKind.RECIPROCAL: {F32: lambda a: _F32_ONE / a, F64: lambda a: _fdiv(1.0, a)},
    UnOpKind.POPCOUNT: {I32: lambda a: (a & M32).bit_count(), U32: lambda a: a.bit_count()},
    UnOpKind.CLZ: {I32: _clz, U32: _clz},
    UnOpKind.CTZ: {I32: _ctz, U32: _ctz},
    UnOpKind.IS_NAN: {F32: lambda a: bool(a != a), F64: lambda a: a != a},
    UnOpKind.IS_INF: {F32: lambda a: math.isinf(a), F64: math.isinf},
    UnOpKind.IS_FINITE: {F32: lambda a: math.isfinite(a), F64: math.isfinite},
    UnOpKind.STOP_GRADIENT: {F32: lambda a: a, F64: lambda a: a},
}


# --- casts ------------------------------------------------------------------------------------

def _float_to_int(lo: int, hi: int) -> UnFn:
    """Rust ``as``: truncate toward zero, saturate, NaN -> 0."""
    def f(x: Value) -> int:
        v = float(x)
        if v != v:
            return 0
        if v <= lo:
            return lo
        if v >= hi:
            return hi
        return int(v)  # int() truncates toward zero
    return f


CAST_EVAL: dict[tuple[DataType, DataType], UnFn] = {
    (BOOL, BOOL): lambda v: v,
    (BOOL, I32): int, (BOOL, U32): int,
    (BOOL, F32): lambda v: _F32(1.0 if v else 0.0), (BOOL, F64): float,
    (I32, BOOL): lambda v: v != 0, (U32, BOOL): lambda v: v != 0,
    (F32, BOOL): lambda v: bool(v != 0), (F64, BOOL): lambda v: v != 0,  # NaN -> true
    (I32, I32): lambda v: v, (U32, U32): lambda v: v,
    (I32, U32): lambda v: v & M32, (U32, I32): as_signed,
    # A 32-bit int converts to f64 exactly, so f64 -> f32 rounds once (nearest even).
    (I32, F32): _F32, (U32, F32): _F32, (I32, F64): float, (U32, F64): float,
    (F32, I32): _float_to_int(I32_MIN, I32_MAX), (F32, U32): _float_to_int(0, M32),
    (F64, I32): _float_to_int(I32_MIN, I32_MAX), (F64, U32): _float_to_int(0, M32),
    (F32, F32): lambda v: v, (F64, F64): lambda v: v,
    (F32, F64): float, (F64, F32): _F32,
}


# --- atomics ----------------------------------------------------------------------------------

AtomicFn = Callable[[Value, Value, Value], Value]
"""``(old, value, expected) -> new`` stored value; the atomic itself evaluates to ``old``."""


def _rmw(op: BinOpKind, t: DataType) -> AtomicFn:
    f = BINOP_EVAL[op][t]
    return lambda old, v, _e: f(old, v)


ATOMIC_EVAL: dict[AtomicOp, dict[DataType, AtomicFn]] = {
    AtomicOp.ADD: {t: _rmw(BinOpKind.ADD, t) for t in _NUM},
    AtomicOp.MIN: {t: _rmw(BinOpKind.MIN, t) for t in (I32, U32)},
    AtomicOp.MAX: {t: _rmw(BinOpKind.MAX, t) for t in (I32, U32)},
    AtomicOp.AND: {t: _rmw(BinOpKind.BIT_AND, t) for t in (I32, U32)},
    AtomicOp.OR: {t: _rmw(BinOpKind.BIT_OR, t) for t in (I32, U32)},
    AtomicOp.XOR: {t: _rmw(BinOpKind.BIT_XOR, t) for t in (I32, U32)},
    AtomicOp.EXCHANGE: dict.fromkeys(_NUM, lambda _old, v, _e: v),
    AtomicOp.COMPARE_EXCHANGE: dict.fromkeys((I32, U32), lambda old, v, e: v if old == e else old),
}


# --- lookups with errors, and the public oracle functions ------------------------------------

def binop_fn(op: BinOpKind, t: DataType) -> BinFn:
    fn = BINOP_EVAL[op].get(t)
    if fn is None:
        accepted = ", ".join(x.short for x in BINOP_RULES[op].operands)
        raise InterpError(f"binary op {op.name} got {t.short} operands, expected one of {accepted}. "
                          "Fix: cast the operands (program.validate() reports this)")
    return fn


def unop_fn(op: UnOpKind, t: DataType) -> UnFn:
    fn = UNOP_EVAL[op].get(t)
    if fn is None:
        accepted = ", ".join(x.short for x in UNOP_RULES[op].operands)
        raise InterpError(f"unary op {op.name} got a {t.short} operand, expected one of {accepted}. "
                          "Fix: cast the operand (program.validate() reports this)")
    return fn


def atomic_fn(op: AtomicOp, t: DataType) -> AtomicFn:
    fn = ATOMIC_EVAL[op].get(t)
    if fn is None:
        accepted = ", ".join(x.short for x in ATOMIC_RULES[op].operands)
        raise InterpError(f"atomic {op.name} on a {t.short} buffer; it accepts {accepted}. "
                          "Fix: use a buffer of an accepted element type")
    return fn


def eval_binop(op: BinOpKind, dtype: DataType, a: Any, b: Any) -> Value:
    """``a op b`` for operands of type ``dtype``, exactly as every backend must compute it.

    Accepts Python or numpy scalars; returns the interpreter representation (see module docs)."""
    fn = binop_fn(op, dtype)
    with np.errstate(all="ignore"):
        return fn(to_value(dtype, a), to_value(dtype, b))


def eval_unop(op: UnOpKind, dtype: DataType, a: Any) -> Value:
    """``op a`` for an operand of type ``dtype`` (see :func:`eval_binop`)."""
    fn = unop_fn(op, dtype)
    with np.errstate(all="ignore"):
        return fn(to_value(dtype, a))


def eval_cast(target: DataType, src_type: DataType, v: Any) -> Value:
    """``Cast(target, v)`` for a value ``v`` of type ``src_type`` (see :func:`eval_binop`)."""
    with np.errstate(all="ignore"):
        return CAST_EVAL[src_type, target](to_value(src_type, v))


def eval_atomic(op: AtomicOp, dtype: DataType, old: Any, value: Any, expected: Any = None) -> Value:
    """The value an atomic stores, given the old one (the atomic itself returns ``old``)."""
    fn = atomic_fn(op, dtype)
    with np.errstate(all="ignore"):
        e = None if expected is None else to_value(dtype, expected)
        return fn(to_value(dtype, old), to_value(dtype, value), e)
