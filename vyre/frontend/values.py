"""What a Python expression in a kernel lowers to, and the typing of operators on those values.

* :class:`Typed` - an IR expression of a known type;
* :class:`Weak` - a Python number (or an expression of Python numbers only) whose IR type comes from
  where it is used, as a literal's does in the builders: ``x[i] * 2`` makes ``2`` an f32 when ``x`` is
  f32. With nothing around to give it a type, an int is ``u32`` (``i32`` when negative) and a float
  ``f32``;
* :class:`BufRef` - an array parameter or workgroup array (indexable, ``len``-able, not a value).

The operator rules are the IR's (:data:`vyre.ir.ops.BINOP_RULES`): both operands of one type, no
implicit conversions. Failures raise :class:`TypeProblem` with a fix; the lowering adds the line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir import BinOp, BinOpKind, DataType, UnOp, UnOpKind
from ..ir.expr import Expr, LitBool, LitF32, LitF64, LitI32, LitU32
from ..ir.ops import BINOP_RULES, UNOP_RULES


class TypeProblem(Exception):
    """A typing failure: ``what`` went wrong and the ``fix`` (the lowering adds the location)."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.what, self.fix = what, fix


@dataclass(frozen=True)
class Typed:
    expr: Expr
    dtype: DataType


@dataclass(frozen=True)
class Weak:
    """``kind`` is ``int`` or ``float``; ``value`` the Python value when it is known (literals and
    ``+ - *`` of them), used where a compile-time number is needed."""

    kind: type
    build: Callable[[DataType], Expr]
    value: int | float | None
    negative: bool

    @property
    def default(self) -> DataType:
        if self.kind is float:
            return DataType.F32
        return DataType.I32 if self.negative else DataType.U32


@dataclass(frozen=True)
class BufRef:
    """A buffer a name refers to: ``kind`` is ``array``, ``uniform`` (``Uniform[T]``: never written),
    ``write_only`` (``WriteOnly[T]``: never read), ``scalar`` or ``workgroup``; ``count`` an array's
    declared length (0: the length of what is bound)."""

    name: str
    dtype: DataType
    kind: str
    count: int = 0
    alias: str = ""     # inside a @vyre.func: the name of the parameter it is bound to
    declared: str = ""  # the parameter whose annotation gave ``kind``, when not ``name``

    @property
    def shown(self) -> str:
        """The buffer as the code at hand names it (for messages)."""
        return f"`{self.alias}` (bound to `{self.name}`)" if self.alias else f"`{self.name}`"

    @property
    def spelled(self) -> str:
        """The parameter to re-annotate to change ``kind`` (for a message's fix)."""
        return self.declared or self.name


Value = Typed | Weak


def literal(v: int | float, t: DataType) -> Expr:
    """The literal of ``v`` in type ``t``, or a TypeProblem saying why it does not fit."""
    if t is DataType.BOOL:
        raise TypeProblem(f"the number {v!r} is used as a bool",
                          "compare it (x != 0) or write True / False")
    if t.is_float:
        return LitF32(float(v)) if t is DataType.F32 else LitF64(float(v))
    if isinstance(v, float):
        raise TypeProblem(f"the float {v!r} is used as {t.short}",
                          f"write an integer, or convert explicitly with vyre.{t.short}(...)")
    lo, hi = (-(2**31), 2**31 - 1) if t is DataType.I32 else (0, 2**32 - 1)
    if not lo <= v <= hi:
        raise TypeProblem(f"the integer {v} does not fit in {t.short} [{lo}, {hi}]",
                          "use a value in range, or convert another operand to a wider type")
    return LitI32(v) if t is DataType.I32 else LitU32(v)


def weak_const(v: int | float) -> Weak:
    kind = float if isinstance(v, float) else int
    return Weak(kind, lambda t: literal(v, t), v, v < 0)


def bool_const(v: bool) -> Typed:
    return Typed(LitBool(bool(v)), DataType.BOOL)


def typed(v: Value, t: DataType | None = None) -> Typed:
    """``v`` as a typed expression (a Weak takes ``t``, or its default type)."""
    if isinstance(v, Typed):
        return v
    target = t if t is not None else v.default
    if v.kind is float and target.is_int:
        raise TypeProblem(f"a float constant is used where {target.short} is expected",
                          "write an integer, or convert the other operand with vyre.f32(...)")
    return Typed(v.build(target), target)


def coerce(v: Value, t: DataType, where: str) -> Typed:
    """``v`` as type ``t`` for ``where`` (a store, an assignment, an argument)."""
    if isinstance(v, Weak):
        return typed(v, t)
    if v.dtype is not t:
        raise TypeProblem(f"{where} expects {t.short}, got {v.dtype.short}",
                          f"convert explicitly with vyre.{_conv(t)}(...)")
    return v


def _conv(t: DataType) -> str:
    return "boolean" if t is DataType.BOOL else t.short


# Folding of integer constants (``TILE // 2``). + - * agree with the IR's wrapping arithmetic
# whenever the folded value fits the type it is built in (arithmetic mod 2^32); division and
# remainder only when both sides are in [0, 2^31), where truncation and flooring agree in both
# integer types.
_ARITH_FOLD: dict[BinOpKind, Callable[[int, int], int | None]] = {
    BinOpKind.ADD: lambda a, b: a + b,
    BinOpKind.SUB: lambda a, b: a - b,
    BinOpKind.MUL: lambda a, b: a * b,
    BinOpKind.DIV: lambda a, b: a // b if 0 <= a < 2**31 and 0 < b < 2**31 else None,
    BinOpKind.MOD: lambda a, b: a % b if 0 <= a < 2**31 and 0 < b < 2**31 else None,
}


def _fits(v: int, t: DataType) -> bool:
    return (-(2**31) <= v < 2**31) if t is DataType.I32 else (t is DataType.U32 and 0 <= v < 2**32)

_OP_FIX: dict[str, str] = {
    "bool": "compare first (x != 0), or convert with vyre.u32(cond)",
    "float": "bit operations and shifts need integers; convert with vyre.u32(...) / vyre.i32(...)",
    "int": "convert with vyre.f32(...) for float math",
    "logic": "`and`, `or`, `not` need bools: compare first (x != 0)",
}


def _operand_fix(op_name: str, t: DataType) -> str:
    if op_name in ("and", "or", "not"):
        return _OP_FIX["logic"]
    if t is DataType.BOOL:
        return _OP_FIX["bool"]
    return _OP_FIX["float"] if t.is_float else _OP_FIX["int"]


def binary(op: BinOpKind, a: Value, b: Value, op_name: str) -> Value:
    """``a op b`` under the IR's rules; ``op_name`` is the Python spelling for messages."""
    rule = BINOP_RULES[op]
    if isinstance(a, Weak) and isinstance(b, Weak) and rule.result is None:
        kind = float if float in (a.kind, b.kind) else int
        fold = _ARITH_FOLD.get(op) if kind is int else None
        value = fold(int(a.value), int(b.value)) if fold and a.value is not None and b.value is not None else None
        neg = value < 0 if value is not None else (a.negative or b.negative)
        wa, wb = a, b

        def build(t: DataType) -> Expr:
            if value is not None and _fits(int(value), t):
                return literal(value, t)
            return BinOp(op, typed(wa, t).expr, typed(wb, t).expr)

        probe = typed(Weak(kind, build, value, neg))  # type-check now, in the default type
        if probe.dtype not in rule.operands:
            raise TypeProblem(f"`{op_name}` does not apply to {probe.dtype.short}",
                              _operand_fix(op_name, probe.dtype))
        return Weak(kind, build, value, neg)
    if isinstance(a, Weak) and isinstance(b, Weak):  # a comparison of constants
        if float in (a.kind, b.kind):
            both = DataType.F32
        else:
            both = DataType.I32 if a.negative or b.negative else DataType.U32
        ta, tb = typed(a, both), typed(b, both)
    elif isinstance(a, Weak):
        tb = typed(b)
        ta = typed(a, tb.dtype)
    elif isinstance(b, Weak):
        ta = typed(a)
        tb = typed(b, ta.dtype)
    else:
        ta, tb = a, b
    if ta.dtype is not tb.dtype:
        raise TypeProblem(f"`{op_name}` mixes {ta.dtype.short} and {tb.dtype.short} (the IR has no "
                          "implicit conversions)",
                          f"convert one side explicitly, e.g. vyre.{_conv(ta.dtype)}(...) or "
                          f"vyre.{_conv(tb.dtype)}(...)")
    if ta.dtype not in rule.operands:
        raise TypeProblem(f"`{op_name}` does not apply to {ta.dtype.short}", _operand_fix(op_name, ta.dtype))
    return Typed(BinOp(op, ta.expr, tb.expr), rule.result_for(ta.dtype))


def unary(op: UnOpKind, a: Value, op_name: str) -> Value:
    rule = UNOP_RULES[op]
    if isinstance(a, Weak) and rule.result is None and op in (UnOpKind.NEGATE, UnOpKind.ABS):
        wa = a
        if op is UnOpKind.NEGATE:
            value = -a.value if a.value is not None else None
            neg = value < 0 if value is not None else True
        else:
            value = abs(a.value) if a.value is not None else None
            neg = False if value is not None else a.negative
        return Weak(a.kind, lambda t: UnOp(op, typed(wa, t).expr), value, neg)
    if isinstance(a, Weak) and a.kind is int and DataType.U32 not in rule.operands and rule.operands[0].is_float:
        ta = typed(a, DataType.F32)  # math on an int constant: exp(1) is exp(1.0)
    else:
        ta = typed(a)
    if ta.dtype not in rule.operands:
        raise TypeProblem(f"`{op_name}` does not apply to {ta.dtype.short}", _operand_fix(op_name, ta.dtype))
    return Typed(UnOp(op, ta.expr), rule.result_for(ta.dtype))
