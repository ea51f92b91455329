"""Small helpers that make hand-built programs short.

    x, out = read("x", 0, F32), output("out", 1, F32)
    i = gid()
    prog = Program.wrapped([x, out], 64, [
        if_(i.lt(buflen(out)), [store(out, i, x[i] * x[i])]),
    ])
"""

from __future__ import annotations

from collections.abc import Iterable

from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, ExprLike, Fma, InvocationId, LitBool, LitF32, LitF64,
    LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId, as_expr, static_type,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store
from .ops import AtomicOp, BinOpKind, UnOpKind
from .program import BufferDecl
from .types import DataType

BufRef = str | BufferDecl


def _name(b: BufRef) -> str:
    return b.name if isinstance(b, BufferDecl) else b


def _elem(b: BufRef) -> DataType | None:
    return b.element if isinstance(b, BufferDecl) else None


def u32(v: int) -> LitU32: return LitU32(v)
def i32(v: int) -> LitI32: return LitI32(v)
def f32(v: float) -> LitF32: return LitF32(v)
def f64(v: float) -> LitF64: return LitF64(v)
def boolean(v: bool) -> LitBool: return LitBool(v)
def var(name: str) -> Var: return Var(name)
def gid(axis: int = 0) -> InvocationId: return InvocationId(axis)
def lid(axis: int = 0) -> LocalId: return LocalId(axis)
def wgid(axis: int = 0) -> WorkgroupId: return WorkgroupId(axis)
def lane() -> SubgroupLocalId: return SubgroupLocalId()
def subgroup_size() -> SubgroupSize: return SubgroupSize()
def buflen(b: BufRef) -> BufLen: return BufLen(_name(b))
def load(b: BufRef, index: ExprLike) -> Load: return Load(_name(b), as_expr(index, DataType.U32))


def select(cond: ExprLike, a: ExprLike, b: ExprLike) -> Select:
    if isinstance(cond, bool):
        raise TypeError(
            "select() got a Python bool as its condition. Fix: build the condition with "
            "a.lt(b), a.eq(b), ... (== on expressions is structural equality)"
        )
    ta = static_type(a) if not isinstance(a, (bool, int, float)) else None  # type: ignore[arg-type]
    tb = static_type(b) if not isinstance(b, (bool, int, float)) else None  # type: ignore[arg-type]
    return Select(as_expr(cond), as_expr(a, ta or tb), as_expr(b, tb or ta))


def cast(target: DataType, value: ExprLike) -> Cast: return Cast(target, as_expr(value))
def fma(a: ExprLike, b: ExprLike, c: ExprLike) -> Fma: return Fma(as_expr(a), as_expr(b), as_expr(c))
def unop(op: UnOpKind, a: ExprLike) -> UnOp: return UnOp(op, as_expr(a))


def binop(op: BinOpKind, a: ExprLike, b: ExprLike) -> BinOp:
    ta = static_type(a) if not isinstance(a, (bool, int, float)) else None  # type: ignore[arg-type]
    tb = static_type(b) if not isinstance(b, (bool, int, float)) else None  # type: ignore[arg-type]
    return BinOp(op, as_expr(a, tb or ta), as_expr(b, ta or tb))


def sqrt(a: ExprLike) -> UnOp: return unop(UnOpKind.SQRT, a)
def exp(a: ExprLike) -> UnOp: return unop(UnOpKind.EXP, a)
def log(a: ExprLike) -> UnOp: return unop(UnOpKind.LOG, a)
def sin(a: ExprLike) -> UnOp: return unop(UnOpKind.SIN, a)
def cos(a: ExprLike) -> UnOp: return unop(UnOpKind.COS, a)
def tanh(a: ExprLike) -> UnOp: return unop(UnOpKind.TANH, a)
def minimum(a: ExprLike, b: ExprLike) -> BinOp: return binop(BinOpKind.MIN, a, b)
def maximum(a: ExprLike, b: ExprLike) -> BinOp: return binop(BinOpKind.MAX, a, b)
def fixed_mul(a: ExprLike, b: ExprLike) -> BinOp: return binop(BinOpKind.FIXED_MUL_Q16, a, b)


def atomic(op: AtomicOp, b: BufRef, index: ExprLike, value: ExprLike,
           expected: ExprLike | None = None) -> Atomic:
    t = _elem(b)
    return Atomic(op, _name(b), as_expr(index, DataType.U32), as_expr(value, t),
                  None if expected is None else as_expr(expected, t))


def atomic_add(b: BufRef, index: ExprLike, value: ExprLike) -> Atomic:
    return atomic(AtomicOp.ADD, b, index, value)


def ballot(cond: ExprLike) -> SubgroupBallot: return SubgroupBallot(as_expr(cond))
def shuffle(value: ExprLike, src_lane: ExprLike) -> SubgroupShuffle:
    return SubgroupShuffle(as_expr(value), as_expr(src_lane, DataType.U32))
def subgroup_reduce(op: BinOpKind, value: ExprLike) -> SubgroupReduce:
    return SubgroupReduce(op, as_expr(value))
def call(op_id: str, *args: ExprLike) -> Call: return Call(op_id, tuple(as_expr(a) for a in args))


def let(name: str, value: ExprLike) -> Let: return Let(name, as_expr(value))
def assign(name: str, value: ExprLike) -> Assign: return Assign(name, as_expr(value))


def store(b: BufRef, index: ExprLike, value: ExprLike) -> Store:
    return Store(_name(b), as_expr(index, DataType.U32), as_expr(value, _elem(b)))


def if_(cond: ExprLike, then: Iterable[Node], otherwise: Iterable[Node] = ()) -> If:
    if isinstance(cond, bool):
        raise TypeError("if_() got a Python bool as its condition. Fix: build it with a.lt(b), a.eq(b), ...")
    return If(as_expr(cond), tuple(then), tuple(otherwise))


def loop(name: str, start: ExprLike, end: ExprLike, body: Iterable[Node]) -> Loop:
    return Loop(name, as_expr(start, DataType.U32), as_expr(end, DataType.U32), tuple(body))


def block(body: Iterable[Node]) -> Block: return Block(tuple(body))
def barrier() -> Barrier: return Barrier()
def ret() -> Return: return Return()
def region(generator: str, body: Iterable[Node]) -> Region: return Region(generator, tuple(body))
