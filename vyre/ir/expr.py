"""Expressions: a closed union of frozen, slotted dataclasses.

Python operators build IR: ``a + b``, ``a * 2.0``, ``-a``, ``a & 0xFF``, ``abs(a)``, and the
orderings ``a < b``, ``a <= b``, ``a > b``, ``a >= b`` build comparisons (``i < 10``).
``==`` and ``!=`` on expressions are *structural* equality (expressions are dict keys and are
compared in tests): build those comparisons with ``a.eq(b)`` / ``a.ne(b)``. ``//`` builds the
integer division (truncating toward zero, docs/semantics.md) and is an error on floats, where
Python's floor division has no single IR op (write ``floor(a / b)``). A bare Python ``int`` takes the
type of the other operand when that type is visible from the expression alone (a literal, an id, a
cast, ...), otherwise it becomes ``u32``; a bare ``float`` becomes ``f32`` (or ``f64`` beside an
``f64``). Write ``i32(1)`` / ``f64(1.0)`` to be explicit.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, Union

from ..errors import BuildError
from .ops import BINOP_RULES, UNOP_RULES, AtomicOp, BinOpKind, UnOpKind
from .types import DataType

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
U32_MAX = 2**32 - 1


def f32_bits(value: float) -> int:
    """The IEEE-754 binary32 bit pattern of ``value`` rounded to f32 (overflow gives +-inf)."""
    try:
        return int.from_bytes(struct.pack("<f", value), "little")
    except OverflowError:
        return 0x7F800000 if value > 0 else 0xFF800000


def f32_from_bits(bits: int) -> float:
    return float(struct.unpack("<f", (bits & 0xFFFFFFFF).to_bytes(4, "little"))[0])


def f64_bits(value: float) -> int:
    return int.from_bytes(struct.pack("<d", value), "little")


def f64_from_bits(bits: int) -> float:
    return float(struct.unpack("<d", (bits & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))[0])


class _ExprOps:
    """Operator sugar shared by every expression class."""

    __slots__ = ()

    def __add__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.ADD, self, o)
    def __radd__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.ADD, o, self)
    def __sub__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.SUB, self, o)
    def __rsub__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.SUB, o, self)
    def __mul__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.MUL, self, o)
    def __rmul__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.MUL, o, self)
    def __truediv__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.DIV, self, o)
    def __rtruediv__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.DIV, o, self)
    def __floordiv__(self, o: ExprLike) -> BinOp: return _int_div(self, o)
    def __rfloordiv__(self, o: ExprLike) -> BinOp: return _int_div(o, self)
    def __mod__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.MOD, self, o)
    def __rmod__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.MOD, o, self)
    def __and__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.BIT_AND, self, o)
    def __rand__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.BIT_AND, o, self)
    def __or__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.BIT_OR, self, o)
    def __ror__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.BIT_OR, o, self)
    def __xor__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.BIT_XOR, self, o)
    def __rxor__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.BIT_XOR, o, self)
    def __lshift__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.SHL, self, o)
    def __rshift__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.SHR, self, o)
    def __neg__(self) -> UnOp: return UnOp(UnOpKind.NEGATE, _as_expr(self))
    def __invert__(self) -> UnOp: return UnOp(UnOpKind.BIT_NOT, _as_expr(self))
    def __abs__(self) -> UnOp: return UnOp(UnOpKind.ABS, _as_expr(self))
    # Orderings build comparisons; == and != stay structural (see the module docs).
    def __lt__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.LT, self, o)
    def __le__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.LE, self, o)
    def __gt__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.GT, self, o)
    def __ge__(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.GE, self, o)
    def __pow__(self, o: ExprLike) -> BinOp: return _pow(self, o)
    def __rpow__(self, o: ExprLike) -> BinOp: return _pow(o, self)

    def __bool__(self) -> bool:
        raise BuildError(
            "a vyre expression has no Python truth value (it is computed on the device). Fix: "
            "branch with if_(a < b, [...]) or select(cond, a, b); compare for equality with a.eq(b)"
        )

    def eq(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.EQ, self, o)
    def ne(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.NE, self, o)
    def lt(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.LT, self, o)
    def le(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.LE, self, o)
    def gt(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.GT, self, o)
    def ge(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.GE, self, o)
    def and_(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.AND, self, o)
    def or_(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.OR, self, o)
    def not_(self) -> UnOp: return UnOp(UnOpKind.LOGICAL_NOT, _as_expr(self))
    def min(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.MIN, self, o)
    def max(self, o: ExprLike) -> BinOp: return _bin(BinOpKind.MAX, self, o)
    def cast(self, target: DataType) -> Cast: return Cast(target, _as_expr(self))


@dataclass(frozen=True, slots=True)
class LitBool(_ExprOps):
    value: bool


@dataclass(frozen=True, slots=True)
class LitI32(_ExprOps):
    value: int

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise TypeError(f"LitI32 needs an int, got {self.value!r}. Fix: pass a Python int")
        if not I32_MIN <= self.value <= I32_MAX:
            raise ValueError(f"LitI32 {self.value} is outside [-2^31, 2^31-1]. Fix: use a value in range")


@dataclass(frozen=True, slots=True)
class LitU32(_ExprOps):
    value: int

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise TypeError(f"LitU32 needs an int, got {self.value!r}. Fix: pass a Python int")
        if not 0 <= self.value <= U32_MAX:
            raise ValueError(f"LitU32 {self.value} is outside [0, 2^32-1]. Fix: use a value in range")


@dataclass(frozen=True, slots=True, init=False)
class LitF32(_ExprOps):
    """An f32 literal, stored as its bit pattern so NaN payloads and -0.0 are exact and equality
    is bitwise. Construct with ``LitF32(1.5)`` or ``LitF32(bits=0x3FC00000)``."""

    bits: int

    def __init__(self, value: float | None = None, *, bits: int | None = None) -> None:
        if (value is None) == (bits is None):
            raise TypeError("LitF32 takes exactly one of value or bits=")
        b = f32_bits(float(value)) if value is not None else bits
        assert b is not None
        if not 0 <= b <= 0xFFFFFFFF:
            raise ValueError(f"LitF32 bits {b:#x} do not fit in 32 bits")
        object.__setattr__(self, "bits", b)

    @property
    def value(self) -> float:
        return f32_from_bits(self.bits)


@dataclass(frozen=True, slots=True, init=False)
class LitF64(_ExprOps):
    """An f64 literal, stored as its bit pattern (see :class:`LitF32`)."""

    bits: int

    def __init__(self, value: float | None = None, *, bits: int | None = None) -> None:
        if (value is None) == (bits is None):
            raise TypeError("LitF64 takes exactly one of value or bits=")
        b = f64_bits(float(value)) if value is not None else bits
        assert b is not None
        if not 0 <= b <= 0xFFFFFFFFFFFFFFFF:
            raise ValueError(f"LitF64 bits {b:#x} do not fit in 64 bits")
        object.__setattr__(self, "bits", b)

    @property
    def value(self) -> float:
        return f64_from_bits(self.bits)


@dataclass(frozen=True, slots=True)
class Var(_ExprOps):
    """A local variable (bound by ``Let`` or a ``Loop``)."""

    name: str


@dataclass(frozen=True, slots=True)
class Load(_ExprOps):
    """``buffer[index]``; index is u32. Out of bounds reads 0 of the element type."""

    buffer: str
    index: Expr


@dataclass(frozen=True, slots=True)
class BufLen(_ExprOps):
    """Number of elements of a buffer, as u32."""

    buffer: str


@dataclass(frozen=True, slots=True)
class InvocationId(_ExprOps):
    """Global invocation id on ``axis`` (0, 1, 2) = workgroup id * workgroup size + local id."""

    axis: int = 0


@dataclass(frozen=True, slots=True)
class WorkgroupId(_ExprOps):
    axis: int = 0


@dataclass(frozen=True, slots=True)
class LocalId(_ExprOps):
    axis: int = 0


@dataclass(frozen=True, slots=True)
class SubgroupLocalId(_ExprOps):
    """Lane of this invocation in its subgroup (0..31)."""


@dataclass(frozen=True, slots=True)
class SubgroupSize(_ExprOps):
    """Always 32 (docs/semantics.md)."""


@dataclass(frozen=True, slots=True)
class BinOp(_ExprOps):
    op: BinOpKind
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class UnOp(_ExprOps):
    op: UnOpKind
    operand: Expr


@dataclass(frozen=True, slots=True)
class Select(_ExprOps):
    """``true_val if cond else false_val``; both arms are evaluated (they are pure)."""

    cond: Expr
    true_val: Expr
    false_val: Expr


@dataclass(frozen=True, slots=True)
class Cast(_ExprOps):
    target: DataType
    value: Expr


@dataclass(frozen=True, slots=True)
class Fma(_ExprOps):
    """``a * b + c`` on floats; backends may or may not round once (see docs/semantics.md)."""

    a: Expr
    b: Expr
    c: Expr


@dataclass(frozen=True, slots=True)
class Atomic(_ExprOps):
    """Atomic read-modify-write of ``buffer[index]``; evaluates to the old value.

    ``expected`` is required for COMPARE_EXCHANGE (store ``value`` if the old value equals
    ``expected``) and must be None otherwise."""

    op: AtomicOp
    buffer: str
    index: Expr
    value: Expr
    expected: Expr | None = None


@dataclass(frozen=True, slots=True)
class SubgroupBallot(_ExprOps):
    """u32 mask with bit ``lane`` set where ``cond`` holds in that lane of the subgroup."""

    cond: Expr


@dataclass(frozen=True, slots=True)
class SubgroupShuffle(_ExprOps):
    """``value`` as computed by lane ``lane % 32`` of this subgroup."""

    value: Expr
    lane: Expr


@dataclass(frozen=True, slots=True)
class SubgroupReduce(_ExprOps):
    """Reduction of ``value`` over the 32 lanes of the subgroup, seen by every lane."""

    op: BinOpKind
    value: Expr


@dataclass(frozen=True, slots=True)
class Call(_ExprOps):
    """Call of a function the program carries (``Program.functions``), inlinable."""

    op_id: str
    args: tuple[Expr, ...]


Expr: TypeAlias = (
    LitBool | LitI32 | LitU32 | LitF32 | LitF64 | Var | Load | BufLen | InvocationId | WorkgroupId
    | LocalId | SubgroupLocalId | SubgroupSize | BinOp | UnOp | Select | Cast | Fma | Atomic
    | SubgroupBallot | SubgroupShuffle | SubgroupReduce | Call
)
EXPR_TYPES: tuple[type, ...] = (
    LitBool, LitI32, LitU32, LitF32, LitF64, Var, Load, BufLen, InvocationId, WorkgroupId, LocalId,
    SubgroupLocalId, SubgroupSize, BinOp, UnOp, Select, Cast, Fma, Atomic, SubgroupBallot,
    SubgroupShuffle, SubgroupReduce, Call,
)
ExprLike: TypeAlias = Union[Expr, "_ExprOps", bool, int, float]


@dataclass(frozen=True, slots=True)
class FunctionAdjoint:
    """A function's own reverse-mode rule, used by ``vyre.autodiff.grad`` instead of
    differentiating the body (like ``jax.custom_vjp`` or Warp's ``func_grad``).

    ``grads[k]`` is what parameter ``k`` receives: an expression over the parameters, ``result``
    (the function's value) and ``cotangent`` (the adjoint of the result, of the result type), or
    None for no gradient (integer parameters, or by choice). It must be linear in the cotangent
    (a vector-Jacobian product); ``check_grad`` tests it against finite differences."""

    result: str
    cotangent: str
    grads: tuple[Expr | None, ...]


@dataclass(frozen=True, slots=True)
class FunctionDef:
    """A pure function a ``Call`` can name: typed parameters and a body expression over them.

    Bodies may not load, store, use atomics, subgroup ops or invocation ids: a call is inlined by
    substituting its arguments, so it must mean the same wherever it is placed. ``adjoint``, when
    given, is the function's custom reverse-mode rule (:class:`FunctionAdjoint`)."""

    op_id: str
    params: tuple[tuple[str, DataType], ...]
    result: DataType
    body: Expr
    adjoint: FunctionAdjoint | None = None


def children(e: Expr) -> Iterator[Expr]:
    """Direct sub-expressions of ``e``, in evaluation order (:func:`vyre.ir.schema.expr_children`)."""
    global _expr_children
    if _expr_children is None:  # the schema imports this module, so it is bound at the first call
        from .schema import expr_children

        _expr_children = expr_children
    return _expr_children(e)


_expr_children: Callable[[Expr], Iterator[Expr]] | None = None


def walk(e: Expr) -> Iterator[Expr]:
    """Pre-order walk of ``e`` and every sub-expression (iterative: deep trees do not recurse)."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(list(children(x))))


def static_type(e: Expr) -> DataType | None:
    """The type of ``e`` when it can be seen without a program (no Var, Load, Call typing).

    Used for literal coercion only, so a tree too deep to inspect simply has no static type."""
    try:
        return _static_type(e)
    except RecursionError:
        return None


def _static_type(e: Expr) -> DataType | None:
    match e:
        case LitBool():
            return DataType.BOOL
        case LitI32():
            return DataType.I32
        case LitU32() | BufLen() | InvocationId() | WorkgroupId() | LocalId():
            return DataType.U32
        case SubgroupLocalId() | SubgroupSize() | SubgroupBallot():
            return DataType.U32
        case LitF32():
            return DataType.F32
        case LitF64():
            return DataType.F64
        case Cast(target, _):
            return target
        case BinOp(op, left, right):
            t = _static_type(left) or _static_type(right)
            if t is None:
                return None
            rule = BINOP_RULES[op]
            return rule.result_for(t) if t in rule.operands else None
        case UnOp(op, operand):
            t = _static_type(operand)
            if t is None:
                return None
            rule = UNOP_RULES[op]
            return rule.result_for(t) if t in rule.operands else None
        case Select(_, a, b) | Fma(a, b, _):
            return _static_type(a) or _static_type(b)
        case SubgroupShuffle(v, _) | SubgroupReduce(_, v):
            return _static_type(v)
        case Var() | Load() | Atomic() | Call():
            return None
        case _:
            raise TypeError(f"not a vyre expression: {e!r}")


def lit(value: bool | int | float, dtype: DataType) -> Expr:
    """A literal of ``dtype``; ints for float types and floats for int types are rejected."""
    match dtype:
        case DataType.BOOL:
            return LitBool(bool(value))
        case DataType.I32:
            return LitI32(_int(value))
        case DataType.U32:
            return LitU32(_int(value))
        case DataType.F32:
            return LitF32(float(value))
        case DataType.F64:
            return LitF64(float(value))
    raise TypeError(f"unknown DataType {dtype!r}")


def _int(v: bool | int | float) -> int:
    if isinstance(v, float):
        if not v.is_integer():
            raise TypeError(f"{v!r} is not an integer. Fix: pass an int for an integer literal")
        return int(v)
    return int(v)


def _coerce(value: ExprLike, like: DataType | None) -> Expr:
    if isinstance(value, _ExprOps):
        return value  # type: ignore[return-value]
    if isinstance(value, bool):
        return LitBool(value)
    if isinstance(value, int):
        if like is not None and like.is_numeric:
            if like.is_float:
                return lit(float(value), like)
            return lit(value, like)
        return LitI32(value) if value < 0 else LitU32(value)
    if isinstance(value, float):
        if not math.isfinite(value) or like is not DataType.F64:
            return LitF32(value) if like is not DataType.F64 else LitF64(value)
        return LitF64(value)
    raise TypeError(
        f"cannot use {value!r} ({type(value).__name__}) as a vyre expression. "
        "Fix: pass an Expr, or a Python bool/int/float literal"
    )


def _as_expr(value: ExprLike) -> Expr:
    return _coerce(value, None)


def _bin(op: BinOpKind, a: ExprLike, b: ExprLike) -> BinOp:
    ta = static_type(a) if isinstance(a, _ExprOps) else None  # type: ignore[arg-type]
    tb = static_type(b) if isinstance(b, _ExprOps) else None  # type: ignore[arg-type]
    if op in (BinOpKind.SHL, BinOpKind.SHR):
        return BinOp(op, _coerce(a, ta or tb), _coerce(b, ta or tb))
    return BinOp(op, _coerce(a, tb or ta), _coerce(b, ta or tb))


def _int_div(a: ExprLike, b: ExprLike) -> BinOp:
    """``a // b``: integer division; floats are refused rather than silently divided."""
    for v in (a, b):
        t = static_type(v) if isinstance(v, _ExprOps) else None  # type: ignore[arg-type]
        if isinstance(v, float) or (t is not None and t.is_float):
                raise BuildError(
                "`//` on floats: Python's floor division has no single IR op, and building a true "
                "division would silently differ from Python. Fix: write floor(a / b) (vyre.ir.floor) "
                "for floor division, or a / b for true division"
            )
    return _bin(BinOpKind.DIV, a, b)


def _pow(a: ExprLike, b: ExprLike) -> BinOp:
    """``a ** b``: pow is float-only, so a bare Python int operand becomes a float literal."""
    a = float(a) if isinstance(a, int) and not isinstance(a, bool) else a
    b = float(b) if isinstance(b, int) and not isinstance(b, bool) else b
    return _bin(BinOpKind.POW, a, b)


def as_expr(value: ExprLike, like: DataType | None = None) -> Expr:
    """Public coercion: an Expr passes through, a Python literal becomes a typed literal."""
    return _coerce(value, like)
