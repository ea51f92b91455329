"""Builders: one short function per IR construct, so hand-built programs read like the kernel.

    x, out = read("x", 0, F32), output("out", 1, F32)
    i = gid()
    prog = Program.wrapped([x, out], 64, [
        if_(i < buflen(out), [store(out, i, x[i] * x[i])]),
    ])

Every op of the op tables (:mod:`vyre.ir.ops`) has a builder named as the printer spells it
(``exp``, ``is_nan``, ``abs_diff``, ``atomic_max`` ...). ``abs``, ``round``, ``min``, ``max`` and
``pow`` exist too but are left out of ``__all__`` so that ``from vyre.ir import *`` does not shadow
Python's built-ins; ``absolute``, ``rint``, ``minimum``, ``maximum`` and ``power`` are the same
builders.
Python numbers passed where an expression is expected become typed literals (see
:mod:`vyre.ir.expr`). Builders raise :class:`vyre.errors.BuildError` for what they cannot build.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import BuildError
from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, ExprLike, Fma, InvocationId, LitBool, LitF32, LitF64,
    LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId, _pow, as_expr, static_type,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store
from .ops import SUBGROUP_REDUCE_OPS, AtomicOp, BinOpKind, UnOpKind
from .program import BufferDecl
from .types import DataType

BufRef = str | BufferDecl


def _name(b: BufRef) -> str:
    return b.name if isinstance(b, BufferDecl) else b


def _elem(b: BufRef) -> DataType | None:
    return b.element if isinstance(b, BufferDecl) else None


def _typeof(v: ExprLike) -> DataType | None:
    return None if isinstance(v, (bool, int, float)) else static_type(v)  # type: ignore[arg-type]


def _cond(v: ExprLike, who: str) -> ExprLike:
    if isinstance(v, bool):
        raise BuildError(f"{who} got a Python bool as its condition (did `==` compare two expressions "
                         "structurally?). Fix: build the condition with a < b, a.eq(b), ... ; use "
                         "boolean(True) for a constant")
    return v


# ---- literals, variables, ids --------------------------------------------------------------------

def u32(v: int) -> LitU32:
    """A u32 literal: ``u32(7)``."""
    return LitU32(v)


def i32(v: int) -> LitI32:
    """An i32 literal: ``i32(-3)``."""
    return LitI32(v)


def f32(v: float) -> LitF32:
    """An f32 literal (rounded to f32): ``f32(0.5)``."""
    return LitF32(v)


def f64(v: float) -> LitF64:
    """An f64 literal: ``f64(0.1)``."""
    return LitF64(v)


def boolean(v: bool) -> LitBool:
    """A bool literal: ``boolean(True)``."""
    return LitBool(v)


def var(name: str) -> Var:
    """A reference to a local bound by ``let`` or ``loop``: ``let("acc", 0.0); var("acc") + 1.0``."""
    return Var(name)


def gid(axis: int = 0) -> InvocationId:
    """The global invocation id on ``axis`` (u32): ``store(out, gid(), 1.0)``."""
    return InvocationId(axis)


def lid(axis: int = 0) -> LocalId:
    """The invocation's id inside its workgroup on ``axis`` (u32): ``tile[lid()]``."""
    return LocalId(axis)


def wgid(axis: int = 0) -> WorkgroupId:
    """The workgroup id on ``axis`` (u32): ``store(sums, wgid(), acc)``."""
    return WorkgroupId(axis)


def lane() -> SubgroupLocalId:
    """This invocation's lane in its subgroup, 0..31 (u32): ``if_(lane().eq(0), [...])``."""
    return SubgroupLocalId()


def subgroup_size() -> SubgroupSize:
    """The subgroup size, always 32 (u32): ``lid() / subgroup_size()``."""
    return SubgroupSize()


def buflen(b: BufRef) -> BufLen:
    """A buffer's element count (u32): ``if_(gid() < buflen(out), [...])``."""
    return BufLen(_name(b))


def load(b: BufRef, index: ExprLike) -> Load:
    """``b[index]`` (out of bounds reads 0): ``load(x, gid())``, same as ``x[gid()]``."""
    return Load(_name(b), as_expr(index, DataType.U32))


# ---- generic expression builders -----------------------------------------------------------------

def select(cond: ExprLike, a: ExprLike, b: ExprLike) -> Select:
    """``a if cond else b``, both arms evaluated: ``select(x < 0.0, 0.0, x)``."""
    _cond(cond, "select()")
    ta, tb = _typeof(a), _typeof(b)
    return Select(as_expr(cond), as_expr(a, ta or tb), as_expr(b, tb or ta))


def cast(target: DataType, value: ExprLike) -> Cast:
    """Convert to ``target`` (rules in docs/semantics.md): ``cast(F32, gid())``."""
    return Cast(target, as_expr(value))


def fma(a: ExprLike, b: ExprLike, c: ExprLike) -> Fma:
    """``a * b + c`` on floats: ``fma(x[i], w, acc)``."""
    ta = _typeof(a) or _typeof(b) or _typeof(c)
    return Fma(as_expr(a, ta), as_expr(b, ta), as_expr(c, ta))


def unop(op: UnOpKind, a: ExprLike) -> UnOp:
    """Any unary op by kind: ``unop(UnOpKind.EXP, x[i])``."""
    return UnOp(op, as_expr(a))


def binop(op: BinOpKind, a: ExprLike, b: ExprLike) -> BinOp:
    """Any binary op by kind; a Python number takes the other side's type: ``binop(BinOpKind.ADD, x[i], 1.0)``."""
    ta, tb = _typeof(a), _typeof(b)
    return BinOp(op, as_expr(a, tb or ta), as_expr(b, ta or tb))


# ---- binary ops ----------------------------------------------------------------------------------

def add(a: ExprLike, b: ExprLike) -> BinOp:
    """``a + b`` (integers wrap): ``add(x[i], y[i])``."""
    return binop(BinOpKind.ADD, a, b)


def sub(a: ExprLike, b: ExprLike) -> BinOp:
    """``a - b`` (integers wrap): ``sub(x[i], 1.0)``."""
    return binop(BinOpKind.SUB, a, b)


def mul(a: ExprLike, b: ExprLike) -> BinOp:
    """``a * b`` (integers wrap): ``mul(x[i], 2.0)``."""
    return binop(BinOpKind.MUL, a, b)


def div(a: ExprLike, b: ExprLike) -> BinOp:
    """``a / b``; on integers truncates toward zero, ``x / 0`` per docs/semantics.md: ``div(i, 2)``."""
    return binop(BinOpKind.DIV, a, b)


def mod(a: ExprLike, b: ExprLike) -> BinOp:
    """Remainder with the dividend's sign (C ``%``/``fmod``): ``mod(i, 3)``."""
    return binop(BinOpKind.MOD, a, b)


def bit_and(a: ExprLike, b: ExprLike) -> BinOp:
    """Bitwise and of integers, same as ``a & b``: ``bit_and(i, 0xFF)``."""
    return binop(BinOpKind.BIT_AND, a, b)


def bit_or(a: ExprLike, b: ExprLike) -> BinOp:
    """Bitwise or of integers, same as ``a | b``: ``bit_or(flags, 4)``."""
    return binop(BinOpKind.BIT_OR, a, b)


def bit_xor(a: ExprLike, b: ExprLike) -> BinOp:
    """Bitwise xor of integers, same as ``a ^ b``: ``bit_xor(h, k)``."""
    return binop(BinOpKind.BIT_XOR, a, b)


def shl(a: ExprLike, b: ExprLike) -> BinOp:
    """``a << (b & 31)``, wrapping: ``shl(u32(1), k)``."""
    ta, tb = _typeof(a), _typeof(b)
    return BinOp(BinOpKind.SHL, as_expr(a, ta or tb), as_expr(b, ta or tb))


def shr(a: ExprLike, b: ExprLike) -> BinOp:
    """``a >> (b & 31)``, arithmetic on i32, logical on u32: ``shr(bits, 16)``."""
    ta, tb = _typeof(a), _typeof(b)
    return BinOp(BinOpKind.SHR, as_expr(a, ta or tb), as_expr(b, ta or tb))


def eq(a: ExprLike, b: ExprLike) -> BinOp:
    """``a == b`` as a bool expression (Python ``==`` is structural): ``eq(lid(), 0)``."""
    return binop(BinOpKind.EQ, a, b)


def ne(a: ExprLike, b: ExprLike) -> BinOp:
    """``a != b`` as a bool expression (NaN != NaN is true): ``ne(k, 0)``."""
    return binop(BinOpKind.NE, a, b)


def lt(a: ExprLike, b: ExprLike) -> BinOp:
    """``a < b`` (unsigned for u32), same as the operator: ``lt(i, buflen(out))``."""
    return binop(BinOpKind.LT, a, b)


def le(a: ExprLike, b: ExprLike) -> BinOp:
    """``a <= b``, same as the operator: ``le(x[i], 0.0)``."""
    return binop(BinOpKind.LE, a, b)


def gt(a: ExprLike, b: ExprLike) -> BinOp:
    """``a > b``, same as the operator: ``gt(x[i], 0.0)``."""
    return binop(BinOpKind.GT, a, b)


def ge(a: ExprLike, b: ExprLike) -> BinOp:
    """``a >= b``, same as the operator: ``ge(i, 1)``."""
    return binop(BinOpKind.GE, a, b)


def logical_and(a: ExprLike, b: ExprLike) -> BinOp:
    """``a and b`` on bools (both evaluated): ``logical_and(i < n, j < n)``."""
    return binop(BinOpKind.AND, _cond(a, "logical_and()"), _cond(b, "logical_and()"))


def logical_or(a: ExprLike, b: ExprLike) -> BinOp:
    """``a or b`` on bools (both evaluated): ``logical_or(is_nan(v), v < 0.0)``."""
    return binop(BinOpKind.OR, _cond(a, "logical_or()"), _cond(b, "logical_or()"))


def minimum(a: ExprLike, b: ExprLike) -> BinOp:
    """The smaller operand (floats: IEEE minNum, NaN loses): ``minimum(x[i], 6.0)``."""
    return binop(BinOpKind.MIN, a, b)


def maximum(a: ExprLike, b: ExprLike) -> BinOp:
    """The larger operand (floats: IEEE maxNum, NaN loses): ``maximum(x[i], 0.0)``."""
    return binop(BinOpKind.MAX, a, b)


def abs_diff(a: ExprLike, b: ExprLike) -> BinOp:
    """``|a - b|`` exactly; u32 for integer operands: ``abs_diff(i, j)``."""
    return binop(BinOpKind.ABS_DIFF, a, b)


def fixed_mul(a: ExprLike, b: ExprLike) -> BinOp:
    """16.16 fixed-point product ``(a * b) >> 16``: ``fixed_mul(q, i32(1 << 15))``."""
    return binop(BinOpKind.FIXED_MUL_Q16, a, b)


def power(a: ExprLike, b: ExprLike) -> BinOp:
    """``a`` to the power ``b`` on floats (C ``pow``; also ``a ** b``): ``power(x[i], 1.5)``.
    A bare Python int becomes a float literal."""
    return _pow(a, b)


min = minimum  # the printer's spelling; not in __all__ (see the module docs)
max = maximum
pow = power


# ---- unary ops -----------------------------------------------------------------------------------

def negate(a: ExprLike) -> UnOp:
    """``-a`` (integers wrap), same as the operator: ``negate(x[i])``."""
    return unop(UnOpKind.NEGATE, a)


def bit_not(a: ExprLike) -> UnOp:
    """Bitwise not of an integer, same as ``~a``: ``bit_not(mask)``."""
    return unop(UnOpKind.BIT_NOT, a)


def logical_not(a: ExprLike) -> UnOp:
    """``not a`` on a bool: ``logical_not(is_nan(v))``."""
    return unop(UnOpKind.LOGICAL_NOT, _cond(a, "logical_not()"))


def absolute(a: ExprLike) -> UnOp:
    """``|a|`` (i32 wraps at INT_MIN), same as Python's ``abs(a)``: ``absolute(x[i])``."""
    return unop(UnOpKind.ABS, a)


abs = absolute


def sqrt(a: ExprLike) -> UnOp:
    """Square root (NaN below 0): ``sqrt(x[i])``."""
    return unop(UnOpKind.SQRT, a)


def inverse_sqrt(a: ExprLike) -> UnOp:
    """``1 / sqrt(a)``: ``inverse_sqrt(var_sum + 1e-5)``."""
    return unop(UnOpKind.INVERSE_SQRT, a)


def exp(a: ExprLike) -> UnOp:
    """``e ** a``: ``exp(x[i])``."""
    return unop(UnOpKind.EXP, a)


def exp2(a: ExprLike) -> UnOp:
    """``2 ** a``: ``exp2(x[i])``."""
    return unop(UnOpKind.EXP2, a)


def log(a: ExprLike) -> UnOp:
    """Natural logarithm: ``log(x[i])``."""
    return unop(UnOpKind.LOG, a)


def log2(a: ExprLike) -> UnOp:
    """Base-2 logarithm: ``log2(x[i])``."""
    return unop(UnOpKind.LOG2, a)


def sin(a: ExprLike) -> UnOp:
    """Sine (radians): ``sin(x[i])``."""
    return unop(UnOpKind.SIN, a)


def cos(a: ExprLike) -> UnOp:
    """Cosine (radians): ``cos(x[i])``."""
    return unop(UnOpKind.COS, a)


def tan(a: ExprLike) -> UnOp:
    """Tangent (radians): ``tan(x[i])``."""
    return unop(UnOpKind.TAN, a)


def asin(a: ExprLike) -> UnOp:
    """Arc sine: ``asin(x[i])``."""
    return unop(UnOpKind.ASIN, a)


def acos(a: ExprLike) -> UnOp:
    """Arc cosine: ``acos(x[i])``."""
    return unop(UnOpKind.ACOS, a)


def atan(a: ExprLike) -> UnOp:
    """Arc tangent: ``atan(x[i])``."""
    return unop(UnOpKind.ATAN, a)


def sinh(a: ExprLike) -> UnOp:
    """Hyperbolic sine: ``sinh(x[i])``."""
    return unop(UnOpKind.SINH, a)


def cosh(a: ExprLike) -> UnOp:
    """Hyperbolic cosine: ``cosh(x[i])``."""
    return unop(UnOpKind.COSH, a)


def tanh(a: ExprLike) -> UnOp:
    """Hyperbolic tangent: ``tanh(x[i])``."""
    return unop(UnOpKind.TANH, a)


def floor(a: ExprLike) -> UnOp:
    """Round toward -inf (a float): ``floor(x[i] / 2.0)``."""
    return unop(UnOpKind.FLOOR, a)


def ceil(a: ExprLike) -> UnOp:
    """Round toward +inf (a float): ``ceil(x[i])``."""
    return unop(UnOpKind.CEIL, a)


def rint(a: ExprLike) -> UnOp:
    """Round half to even (a float; Python's ``round(x)``, numpy's ``rint``): ``rint(x[i])``."""
    return unop(UnOpKind.ROUND, a)


round = rint


def trunc(a: ExprLike) -> UnOp:
    """Round toward zero (a float): ``trunc(x[i])``."""
    return unop(UnOpKind.TRUNC, a)


def sign(a: ExprLike) -> UnOp:
    """-1, 0 or 1 (floats: ±0 and NaN pass through): ``sign(x[i])``."""
    return unop(UnOpKind.SIGN, a)


def reciprocal(a: ExprLike) -> UnOp:
    """``1 / a`` on floats: ``reciprocal(x[i])``."""
    return unop(UnOpKind.RECIPROCAL, a)


def popcount(a: ExprLike) -> UnOp:
    """Number of set bits (u32): ``popcount(mask)``."""
    return unop(UnOpKind.POPCOUNT, a)


def clz(a: ExprLike) -> UnOp:
    """Leading zero bits, 32 for 0 (u32): ``clz(bits)``."""
    return unop(UnOpKind.CLZ, a)


def ctz(a: ExprLike) -> UnOp:
    """Trailing zero bits, 32 for 0 (u32): ``ctz(bits)``."""
    return unop(UnOpKind.CTZ, a)


def is_nan(a: ExprLike) -> UnOp:
    """Is the float NaN (bool): ``select(is_nan(v), 0.0, v)``."""
    return unop(UnOpKind.IS_NAN, a)


def is_inf(a: ExprLike) -> UnOp:
    """Is the float ±inf (bool): ``is_inf(x[i])``."""
    return unop(UnOpKind.IS_INF, a)


def is_finite(a: ExprLike) -> UnOp:
    """Is the float neither NaN nor ±inf (bool): ``is_finite(x[i])``."""
    return unop(UnOpKind.IS_FINITE, a)


def stop_gradient(a: ExprLike) -> UnOp:
    """``a`` itself, seen by autodiff as a constant (no gradient flows through it, like
    ``jax.lax.stop_gradient``): a straight-through round is ``x + stop_gradient(rint(x) - x)``."""
    return unop(UnOpKind.STOP_GRADIENT, a)


# ---- atomics -------------------------------------------------------------------------------------

def atomic(op: AtomicOp, b: BufRef, index: ExprLike, value: ExprLike,
           expected: ExprLike | None = None) -> Atomic:
    """Any atomic by kind, evaluating to the old value: ``let("old", atomic(AtomicOp.ADD, out, 0, 1))``."""
    t = _elem(b)
    return Atomic(op, _name(b), as_expr(index, DataType.U32), as_expr(value, t),
                  None if expected is None else as_expr(expected, t))


def atomic_add(b: BufRef, index: ExprLike, value: ExprLike) -> Atomic:
    """Atomically add, old value back: ``let("_", atomic_add(counts, k, 1))``."""
    return atomic(AtomicOp.ADD, b, index, value)


def atomic_min(b: BufRef, index: ExprLike, value: ExprLike) -> Atomic:
    """Atomically keep the minimum (integers): ``let("_", atomic_min(best, 0, d))``."""
    return atomic(AtomicOp.MIN, b, index, value)


def atomic_max(b: BufRef, index: ExprLike, value: ExprLike) -> Atomic:
    """Atomically keep the maximum (integers): ``let("_", atomic_max(best, 0, d))``."""
    return atomic(AtomicOp.MAX, b, index, value)


def atomic_and(b: BufRef, index: ExprLike, value: ExprLike) -> Atomic:
    """Atomically and in bits: ``let("_", atomic_and(flags, w, ~bit))``."""
    return atomic(AtomicOp.AND, b, index, value)


def atomic_or(b: BufRef, index: ExprLike, value: ExprLike) -> Atomic:
    """Atomically or in bits: ``let("_", atomic_or(flags, w, bit))``."""
    return atomic(AtomicOp.OR, b, index, value)


def atomic_xor(b: BufRef, index: ExprLike, value: ExprLike) -> Atomic:
    """Atomically xor in bits: ``let("_", atomic_xor(flags, w, bit))``."""
    return atomic(AtomicOp.XOR, b, index, value)


def atomic_exchange(b: BufRef, index: ExprLike, value: ExprLike) -> Atomic:
    """Atomically store ``value``, old value back: ``let("old", atomic_exchange(slot, 0, v))``."""
    return atomic(AtomicOp.EXCHANGE, b, index, value)


def atomic_compare_exchange(b: BufRef, index: ExprLike, expected: ExprLike, value: ExprLike) -> Atomic:
    """Store ``value`` if the old value equals ``expected``; old value back:
    ``let("old", atomic_compare_exchange(lock, 0, 0, 1))``."""
    return atomic(AtomicOp.COMPARE_EXCHANGE, b, index, value, expected)


# ---- subgroups -----------------------------------------------------------------------------------

def ballot(cond: ExprLike) -> SubgroupBallot:
    """u32 mask of the lanes where ``cond`` holds: ``let("m", ballot(x[i] > 0.0))``."""
    return SubgroupBallot(as_expr(_cond(cond, "ballot()")))


def shuffle(value: ExprLike, src_lane: ExprLike) -> SubgroupShuffle:
    """``value`` as lane ``src_lane & 31`` computed it: ``let("v", shuffle(x[i], lane() ^ 1))``."""
    return SubgroupShuffle(as_expr(value), as_expr(src_lane, DataType.U32))


def _reduce_op(op: BinOpKind | str) -> BinOpKind:
    if isinstance(op, BinOpKind):
        return op
    aliases = {"AND": BinOpKind.BIT_AND, "OR": BinOpKind.BIT_OR, "XOR": BinOpKind.BIT_XOR}
    key = op.upper() if isinstance(op, str) else ""
    kind = aliases.get(key, BinOpKind.__members__.get(key))
    if kind is None or kind not in SUBGROUP_REDUCE_OPS:
        raise BuildError(f"{op!r} is not a subgroup reduction. Fix: use one of "
                         f"{[k.name.lower() for k in SUBGROUP_REDUCE_OPS]}")
    return kind


def subgroup_reduce(op: BinOpKind | str, value: ExprLike) -> SubgroupReduce:
    """``op`` over the subgroup's 32 lanes, seen by all (op: add, min, max, bit_and, bit_or,
    bit_xor, by name or BinOpKind): ``let("s", subgroup_reduce("add", x[i]))``."""
    return SubgroupReduce(_reduce_op(op), as_expr(value))


def call(op_id: str, *args: ExprLike) -> Call:
    """Call a registered function (vyre.ir.functions): ``call("sq", x[i])``."""
    return Call(op_id, tuple(as_expr(a) for a in args))


# ---- statements ----------------------------------------------------------------------------------

def let(name: str, value: ExprLike) -> Let:
    """Bind a new local: ``let("acc", 0.0)``."""
    return Let(name, as_expr(value))


def assign(name: str, value: ExprLike) -> Assign:
    """Overwrite a local bound by ``let`` (same type): ``assign("acc", var("acc") + x[k])``."""
    return Assign(name, as_expr(value))


def store(b: BufRef, index: ExprLike, value: ExprLike) -> Store:
    """``b[index] = value`` (out of bounds does nothing): ``store(out, i, x[i] * 2.0)``."""
    return Store(_name(b), as_expr(index, DataType.U32), as_expr(value, _elem(b)))


def if_(cond: ExprLike, then: Iterable[Node], otherwise: Iterable[Node] = ()) -> If:
    """``if cond { then } else { otherwise }``: ``if_(i < buflen(out), [store(out, i, 0.0)])``."""
    _cond(cond, "if_()")
    return If(as_expr(cond), tuple(then), tuple(otherwise))


def loop(name: str, start: ExprLike, end: ExprLike, body: Iterable[Node]) -> Loop:
    """``for name in start .. end`` over u32: ``loop("k", 0, buflen(v), [assign("acc", ...)])``."""
    return Loop(name, as_expr(start, DataType.U32), as_expr(end, DataType.U32), tuple(body))


def block(body: Iterable[Node]) -> Block:
    """A nested scope: ``block([let("t", x[i]), store(out, i, var("t"))])``."""
    return Block(tuple(body))


def barrier() -> Barrier:
    """Synchronise the workgroup (workgroup memory becomes visible): ``[store(tile, lid(), v), barrier()]``."""
    return Barrier()


def ret() -> Return:
    """End this invocation: ``if_(i >= buflen(out), [ret()])``."""
    return Return()


def region(generator: str, body: Iterable[Node]) -> Region:
    """A scope labelled with what generated it (provenance only): ``region("softmax", [...])``."""
    return Region(generator, tuple(body))
