"""From a prepared source tree (calls inlined, names unique, no ``Return``) to the normal form of
:mod:`vyre.autodiff.nf`.

* Every ``Assign`` becomes a fresh binding; values merged by an ``If`` become ``Phi`` s and values
  carried around a loop become ``Carry`` s.
* Every float-valued operation and every ``Load`` is bound to its own ``NLet`` (operands are
  atoms); identical pure bindings in scope are shared (so ``x[i]`` is read once).
* A loop whose bounds are constants with at most :data:`UNROLL_TRIPS` iterations (and a body
  that stays under :data:`UNROLL_BUDGET` statements) is unrolled: its iterations become straight
  SSA code, which the backward pass reverses without recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, InvocationId, LitBool, LitF32, LitF64, LitI32,
    LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId,
)
from ..ir.node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store, walk_nodes
from ..ir.ops import BinOpKind
from ..ir.program import Program
from ..ir.types import DataType
from ..ir.typing import expr_type
from .nf import Carry, Names, NBarrier, NIf, NLet, NLoop, NStmt, NStore, Phi, is_atom

UNROLL_TRIPS = 64
UNROLL_BUDGET = 4096


def _fold(e: Expr) -> Expr:
    """Fold u32 ``+ - *`` of literals (enough to see constant loop bounds after unrolling)."""
    if isinstance(e, BinOp) and isinstance(e.left, LitU32) and isinstance(e.right, LitU32):
        a, b = e.left.value, e.right.value
        match e.op:
            case BinOpKind.ADD:
                return LitU32((a + b) & 0xFFFFFFFF)
            case BinOpKind.SUB:
                return LitU32((a - b) & 0xFFFFFFFF)
            case BinOpKind.MUL:
                return LitU32((a * b) & 0xFFFFFFFF)
            case _:
                return e
    return e


def _size(body: tuple[Node, ...]) -> int:
    """Statements after unrolling the loops whose bounds are literal (an estimate)."""
    total = 0
    for n in body:
        match n:
            case Loop(_, LitU32(s), LitU32(e), b):
                total += 1 + max(0, e - s) * _size(b)
            case Loop(_, _, _, b) | Block(b) | Region(_, b):
                total += 1 + _size(b)
            case If(_, t, o):
                total += 1 + _size(t) + _size(o)
            case _:
                total += 1
    return total


@dataclass
class _Scope:
    cse: dict[Expr, Expr] = field(default_factory=dict)
    parent: _Scope | None = None

    def find(self, key: Expr) -> Expr | None:
        s: _Scope | None = self
        while s is not None:
            hit = s.cse.get(key)
            if hit is not None:
                return hit
            s = s.parent
        return None


class Converter:
    """One conversion; ``types`` ends up holding the type of every normal-form name."""

    def __init__(self, program: Program, names: Names, *, unroll: bool = True) -> None:
        self.program = program
        self.names = names
        self.unroll = unroll
        self.types: dict[str, DataType] = {}
        self.env: dict[str, Expr] = {}  # source name -> current atom or tree
        written = set()
        for n in walk_nodes(program.entry):
            if isinstance(n, Store):
                written.add(n.buffer)
            if isinstance(n, Let) and isinstance(n.value, Atomic):
                written.add(n.value.buffer)
        self.cse_ok = {b.name for b in program.buffers if b.name not in written}
        self.scope = _Scope()
        self.out: list[NStmt] = []

    # -- expressions --------------------------------------------------------------------------

    def type_of(self, e: Expr) -> DataType:
        return expr_type(e, self.types, self.program)

    def bind(self, value: Expr, hint: str = "t", *, share: bool = True) -> Var:
        """An ``NLet`` for ``value`` (or the one already in scope)."""
        if share:
            hit = self.scope.find(value)
            if hit is not None:
                assert isinstance(hit, Var)
                return hit
        name = self.names.fresh(hint)
        ty = self.type_of(value)
        self.types[name] = ty
        self.out.append(NLet(name, ty, value))
        v = Var(name)
        if share:
            self.scope.cse[value] = v
        return v

    def expr(self, e: Expr) -> Expr:
        """``e`` over normal-form atoms: float ops and loads bound, integer/bool ops as trees."""
        match e:
            case Var(name):
                return self.env[name]
            case (LitBool() | LitI32() | LitU32() | LitF32() | LitF64() | BufLen() | InvocationId()
                  | WorkgroupId() | LocalId() | SubgroupLocalId() | SubgroupSize()):
                return e
            case Load(buf, idx):
                i = self.expr(idx)
                if not is_atom(i) and self.program.buffer(buf).element.is_float:
                    # Bound once: the reverse's gradient scatter to the same element reuses it
                    # instead of computing the index again.
                    i = self.bind(i, "idx")
                return self.bind(Load(buf, i), "ld", share=buf in self.cse_ok)
            case BinOp(op, a, b):
                return self._maybe_bind(_fold(BinOp(op, self.expr(a), self.expr(b))))
            case UnOp(op, a):
                return self._maybe_bind(UnOp(op, self.expr(a)))
            case Select(c, a, b):
                return self._maybe_bind(Select(self.expr(c), self.expr(a), self.expr(b)))
            case Cast(t, v):
                return self._maybe_bind(Cast(t, self.expr(v)))
            case Fma(a, b, c):
                return self._maybe_bind(Fma(self.expr(a), self.expr(b), self.expr(c)))
            case Atomic(op, buf, idx, v, ex):
                return self.bind(Atomic(op, buf, self.expr(idx), self.expr(v),
                                        None if ex is None else self.expr(ex)), "at", share=False)
            case Call(op_id, args):  # a function with a custom adjoint: one binding, atom arguments
                return self._maybe_bind(Call(op_id, tuple(self.atom(a, "arg") for a in args)))
            case SubgroupBallot(c):
                # Subgroup ops stay the whole value of their own binding (a uniform point).
                return self.bind(SubgroupBallot(self.expr(c)), "ballot", share=False)
            case SubgroupShuffle(v, lane):
                return self.bind(SubgroupShuffle(self.atom(v), self.expr(lane)), "shfl", share=False)
            case SubgroupReduce(op, v):
                return self.bind(SubgroupReduce(op, self.atom(v)), "red", share=False)
            case _:
                raise TypeError(f"not a vyre expression: {e!r}")

    def _maybe_bind(self, e: Expr) -> Expr:
        if is_atom(e):
            return e
        if self.type_of(e).is_float:
            return self.bind(e)
        return e

    def atom(self, e: Expr, hint: str = "t") -> Expr:
        v = self.expr(e)
        return v if is_atom(v) else self.bind(v, hint)

    # -- statements ---------------------------------------------------------------------------

    def body(self, nodes: tuple[Node, ...]) -> None:
        for n in nodes:
            self.node(n)

    def node(self, n: Node) -> None:
        match n:
            case Let(name, v) | Assign(name, v):
                self.env[name] = self.atom(v, name)
            case Store(buf, idx, v):
                self.out.append(NStore(buf, self.expr(idx), self.atom(v)))
            case If(c, t, o):
                self._if(self.expr(c), t, o)
            case Loop(var, s, e, b):
                self._loop(var, self.atom(s, "lo"), self.atom(e, "hi"), b)
            case Block(b) | Region(_, b):
                self.body(b)
            case Barrier():
                self.out.append(NBarrier())
            case Return():
                raise TypeError("Return must be removed before conversion")
            case _:
                raise TypeError(f"not a vyre node: {n!r}")

    def _branch(self, nodes: tuple[Node, ...]) -> tuple[tuple[NStmt, ...], dict[str, Expr]]:
        saved_out, saved_scope, saved_env = self.out, self.scope, dict(self.env)
        self.out, self.scope = [], _Scope(parent=saved_scope)
        try:
            self.body(nodes)
            return tuple(self.out), self.env
        finally:
            self.out, self.scope, self.env = saved_out, saved_scope, saved_env

    def _if(self, cond: Expr, t: tuple[Node, ...], o: tuple[Node, ...]) -> None:
        before = dict(self.env)
        then, tenv = self._branch(t)
        other, oenv = self._branch(o)
        phis: list[Phi] = []
        for name, init in before.items():
            tv, ov = tenv.get(name, init), oenv.get(name, init)
            if tv != init or ov != init:
                p = self.names.fresh(name)
                ty = self.type_of(init)
                self.types[p] = ty
                phis.append(Phi(p, ty, init, tv, ov))
                self.env[name] = Var(p)
        if then or other or phis:
            self.out.append(NIf(cond, then, other, tuple(phis)))

    def _loop(self, var: str, start: Expr, end: Expr, body: tuple[Node, ...]) -> None:
        if (self.unroll and isinstance(start, LitU32) and isinstance(end, LitU32)
                and end.value - start.value <= UNROLL_TRIPS
                and max(0, end.value - start.value) * _size(body) <= UNROLL_BUDGET):
            for k in range(start.value, end.value):
                self.env[var] = LitU32(k)
                self.body(body)
            return
        assigned = {n.name for n in walk_nodes(body) if isinstance(n, Assign)}
        carried_src = [name for name in self.env if name in assigned]
        entries = {name: self.env[name] for name in carried_src}
        phi_names: dict[str, str] = {}
        for name in carried_src:
            p = self.names.fresh(name)
            self.types[p] = self.type_of(entries[name])
            phi_names[name] = p
            self.env[name] = Var(p)
        lv = self.names.fresh(var)
        self.types[lv] = DataType.U32
        self.env[var] = Var(lv)
        stmts, benv = self._branch(body)
        carried = tuple(Carry(phi_names[n], self.types[phi_names[n]], entries[n], benv[n])
                        for n in carried_src)
        for name in carried_src:
            self.env[name] = Var(phi_names[name])
        self.out.append(NLoop(lv, start, end, stmts, carried))


def to_normal_form(program: Program, body: tuple[Node, ...], names: Names, *,
                   unroll: bool = True) -> tuple[tuple[NStmt, ...], dict[str, DataType]]:
    """The normal form of ``body`` (a prepared version of ``program.entry``) and its types."""
    c = Converter(program, names, unroll=unroll)
    c.body(body)
    return tuple(c.out), c.types
