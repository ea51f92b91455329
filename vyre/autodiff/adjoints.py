"""Adjoint bookkeeping for the reverse walk (:mod:`vyre.autodiff.reverse`).

:class:`Adjoints` holds what the walk knows about the forward (active values and buffers, private
gradients, outputs needing store flags, workgroup adjoint buffers) and the adjoint arithmetic every
statement kind shares: symbolic adjoints per nesting level (:class:`Env`), contributions, scopes of
accumulators for the outer adjoints a nested construct adds to, and which adjoints may be a
structural zero (kept exact by the rules applied to them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.expr import Atomic, BinOp, Expr, InvocationId, LitF32, LitF64, Load, Select, Var, children, lit
from ..ir.node import Assign, Let, Node
from ..ir.ops import BinOpKind
from ..ir.program import Program
from ..ir.types import DataType
from .checkpoint import TapePlan
from .marks import needs_marks
from .nf import Names, NIf, NLet, NLoop, NStmt, NStore, active_names, buffer_loads, free_vars, is_atom


@dataclass
class Env:
    """Adjoints at one nesting level: symbolic ones (atoms) and outer ones being accumulated."""

    adj: dict[str, Expr] = field(default_factory=dict)
    acc: dict[str, str] = field(default_factory=dict)


def private_key(buf: str) -> str:
    return "@" + buf  # never a variable name


class Adjoints:
    """The reverse walk's state and adjoint arithmetic; the statement kinds are built on it
    (:mod:`.loop_reverse`, :mod:`.reverse`)."""

    def __init__(self, program: Program, stmts: tuple[NStmt, ...], types: dict[str, DataType],
                 names: Names, outputs: list[str], inputs: list[str], *, private_ok: bool,
                 tape: TapePlan | None = None) -> None:
        self.program = program
        self.tape = tape
        self.names = names
        self.outputs = set(outputs)
        self.inputs = set(inputs)
        self.types = dict(types)
        self.shared = frozenset(b.name for b in program.buffers if b.is_workgroup)
        active_bufs = set(self.inputs)
        self.active = active_names(stmts, active_bufs, self.types, self.shared)
        # Active workgroup buffers get adjoint buffers in workgroup memory (see :meth:`grad_wg`).
        taken = {b.name for b in program.buffers}
        self.adj_wg: dict[str, str] = {}
        for w in sorted(active_bufs & self.shared):
            name = next(n for n in (f"adj_{w}", *(f"adj{k}_{w}" for k in range(1, 1000))) if n not in taken)
            taken.add(name)
            self.adj_wg[w] = name
        self.exports: dict[str, str] = {}
        self.decls: list[Node] = []
        loads = buffer_loads(stmts)
        self.private = {b for b in inputs if private_ok
                        and all(ld.index == InvocationId(0) for ld in loads if ld.buffer == b)}
        self.marked = {b for b in outputs if needs_marks(stmts, b)}
        # Adjoint variables that may hold a structural zero (an untaken select arm, an If or a
        # loop that contributed nothing): rules applied to them keep the zero exact.
        self.zeroable: set[str] = set()
        for b in self.private:
            self.types[private_key(b)] = program.buffer(b).element

    # -- helpers ------------------------------------------------------------------------------

    def ty(self, name: str) -> DataType:
        return self.types[self.names.root(name)] if not name.startswith("@") else self.types[name]

    def is_active(self, name: str) -> bool:
        return name.startswith("@") or self.names.root(name) in self.active

    def zero(self, name: str) -> Expr:
        return lit(0.0, self.ty(name))

    def atomize(self, e: Expr, out: list[Node], hint: str = "adj") -> Expr:
        if is_atom(e):
            return e
        name = self.names.fresh(hint)
        out.append(Let(name, e))
        return Var(name)

    def may_be_zero(self, e: Expr) -> bool:
        """Whether adjoint ``e`` may be a structural zero (see :attr:`zeroable`)."""
        if isinstance(e, Var):
            return e.name in self.zeroable
        if isinstance(e, Select) or is_zero(e):
            return True
        return any(self.may_be_zero(x) for x in children(e) if not isinstance(x, Load))

    def atomize_adj(self, e: Expr, out: list[Node], zeroable: bool) -> Expr:
        v = self.atomize(e, out)
        if zeroable and isinstance(v, Var):
            self.zeroable.add(v.name)
        return v

    def contribute(self, env: Env, out: list[Node], target: Expr | str, d: Expr) -> None:
        """Add ``d`` to the adjoint of ``target`` (a variable, or a literal that takes nothing)."""
        if isinstance(target, str):
            name = target
        elif isinstance(target, Var):
            name = target.name
        else:
            return
        if not self.is_active(name):
            return
        z = self.may_be_zero(d)
        if name in env.acc:
            a = env.acc[name]
            out.append(Assign(a, BinOp(BinOpKind.ADD, Var(a), d)))
        elif name in env.adj:
            prev = env.adj[name]
            env.adj[name] = self.atomize_adj(BinOp(BinOpKind.ADD, prev, d), out,
                                             z or self.may_be_zero(prev))
        else:
            env.adj[name] = self.atomize_adj(d, out, z)

    def open_scope(self, env: Env, out: list[Node], targets: set[str]) -> tuple[Env, dict[str, str]]:
        """Accumulators for the outer adjoints a nested construct may add to."""
        child = Env({}, dict(env.acc))
        new: dict[str, str] = {}
        for v in sorted(targets):
            if v in env.acc or not self.is_active(v):
                continue
            a = self.names.fresh("acc")
            out.append(Let(a, env.adj.get(v, self.zero(v))))
            self.zeroable.add(a)  # the construct may add nothing (branch not taken, no trips)
            child.acc[v] = a
            new[v] = a
        return child, new

    def close_scope(self, env: Env, new: dict[str, str]) -> None:
        for v, a in new.items():
            env.adj[v] = Var(a)

    def targets(self, stmts: tuple[NStmt, ...], extra: set[str]) -> set[str]:
        found = {v for v in free_vars(stmts) | extra if self.is_active(v)}
        found |= {private_key(ld.buffer) for ld in buffer_loads(stmts) if ld.buffer in self.private}
        return found

    def has_store(self, stmts: tuple[NStmt, ...]) -> bool:
        """Whether ``stmts`` seed adjoints themselves (stores or atomic adds into outputs or
        active workgroup memory), so their reverse is needed even without incoming adjoints."""
        for s in stmts:
            match s:
                case NStore(buf, _, _) if buf in self.outputs or buf in self.adj_wg:
                    return True
                case NLet(_, _, Atomic(_, buf, _, _, _)) if buf in self.outputs or buf in self.adj_wg:
                    return True
                case NIf(_, t, o, _):
                    if self.has_store(t) or self.has_store(o):
                        return True
                case NLoop(_, _, _, b, _):
                    if self.has_store(b):
                        return True
                case _:
                    pass
        return False


def is_zero(e: Expr) -> bool:
    return isinstance(e, LitF32 | LitF64) and e.value == 0.0
