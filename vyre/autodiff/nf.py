"""The normal form both autodiff transforms work on.

A forward program is brought (by :mod:`vyre.autodiff.ssa`) into a per-invocation SSA form:

* every local is bound once (``NLet``); an ``Assign`` in the source becomes a new binding;
* every float-valued operation and every ``Load`` is bound to its own ``NLet`` whose operands are
  atoms (variables or literals), so derivative rules can name operands and results;
* values merged by control flow are explicit: an ``NIf`` lists its ``Phi`` s (the value on each
  branch), an ``NLoop`` its ``Carry`` s (the value entering the loop and at the end of each
  iteration). Loops with small constant bounds have been unrolled away.

Names are unique in the whole form, so copies made with :func:`rename` can sit anywhere.
:func:`emit` turns the form back into IR statements (optionally without the stores), which is how
the backward program replays the forward computation it needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..ir.expr import (
    Atomic, BufLen, Cast, Expr, InvocationId, LitBool, LitF32, LitF64, LitI32, LitU32, Load,
    LocalId, Select, SubgroupLocalId, SubgroupSize, Var, WorkgroupId, walk,
)
from ..ir.functions import substitute
from ..ir.node import Assign, Barrier, If, Let, Loop, Node, Store
from ..ir.types import DataType
from .rules import stops_gradient


@dataclass(frozen=True, slots=True)
class NLet:
    name: str
    ty: DataType
    value: Expr


@dataclass(frozen=True, slots=True)
class NStore:
    buffer: str
    index: Expr
    value: Expr


@dataclass(frozen=True, slots=True)
class Phi:
    """After the ``NIf``, ``name`` holds ``then`` or ``other``; ``init`` is its value before."""

    name: str
    ty: DataType
    init: Expr
    then: Expr
    other: Expr


@dataclass(frozen=True, slots=True)
class NIf:
    cond: Expr
    then: tuple[NStmt, ...]
    other: tuple[NStmt, ...]
    phis: tuple[Phi, ...]


@dataclass(frozen=True, slots=True)
class Carry:
    """A loop-carried value: ``name`` is ``entry`` before the first iteration and ``next`` (an
    atom valid at the end of the body) after each one; after the loop it holds the last value."""

    name: str
    ty: DataType
    entry: Expr
    next: Expr


@dataclass(frozen=True, slots=True)
class NLoop:
    var: str
    start: Expr
    end: Expr
    body: tuple[NStmt, ...]
    carried: tuple[Carry, ...]


@dataclass(frozen=True, slots=True)
class NBarrier:
    """A workgroup barrier (only at uniform points: never inside an ``NIf``)."""


NStmt = NLet | NStore | NIf | NLoop | NBarrier


class Names:
    """Fresh local names that never collide with a name already in use."""

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.taken = set(taken)
        self.counter = 0
        self.origin: dict[str, str] = {}  # copy -> the name it copies (see :meth:`copy_of`)

    def fresh(self, hint: str = "t") -> str:
        base = hint.split("__")[0][:40] or "t"
        while True:
            self.counter += 1
            name = f"{base}__{self.counter}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def copy_of(self, name: str) -> str:
        """A fresh name for a copy of the binding ``name`` (remembered by :meth:`root`)."""
        new = self.fresh(name)
        self.origin[new] = name
        return new

    def root(self, name: str) -> str:
        """The original binding a (copy of a copy of a ...) name stands for."""
        while name in self.origin:
            name = self.origin[name]
        return name


_ATOMS = (LitBool, LitI32, LitU32, LitF32, LitF64, Var, BufLen, InvocationId, WorkgroupId, LocalId,
          SubgroupLocalId, SubgroupSize)


def is_atom(e: Expr) -> bool:
    """Trivial, side-effect-free expressions that are copied instead of bound."""
    return isinstance(e, _ATOMS)


def var_name(e: Expr) -> str | None:
    return e.name if isinstance(e, Var) else None


def expr_vars(e: Expr) -> set[str]:
    return {x.name for x in walk(e) if isinstance(x, Var)}


def rename(stmts: tuple[NStmt, ...], subst: dict[str, Expr], names: Names) -> tuple[NStmt, ...]:
    """A copy of ``stmts`` with every binding given a fresh name and free variables replaced by
    ``subst`` (which is extended, in place, with the names bound at this level)."""
    out: list[NStmt] = []
    for s in stmts:
        match s:
            case NLet(name, ty, value):
                new = names.copy_of(name)
                out.append(NLet(new, ty, substitute(value, subst)))
                subst[name] = Var(new)
            case NStore(buf, idx, value):
                out.append(NStore(buf, substitute(idx, subst), substitute(value, subst)))
            case NBarrier():
                out.append(s)
            case NIf(cond, then, other, phis):
                ts, es = dict(subst), dict(subst)
                t2 = rename(then, ts, names)
                e2 = rename(other, es, names)
                new_phis = []
                for p in phis:
                    new = names.copy_of(p.name)
                    new_phis.append(Phi(new, p.ty, substitute(p.init, subst),
                                        substitute(p.then, ts), substitute(p.other, es)))
                out.append(NIf(substitute(cond, subst), t2, e2, tuple(new_phis)))
                for p, q in zip(phis, new_phis, strict=True):
                    subst[p.name] = Var(q.name)
            case NLoop(var, start, end, body, carried):
                start2, end2 = substitute(start, subst), substitute(end, subst)
                inner = dict(subst)
                new_var = names.copy_of(var)
                inner[var] = Var(new_var)
                new_names = [names.copy_of(c.name) for c in carried]
                for c, n in zip(carried, new_names, strict=True):
                    inner[c.name] = Var(n)
                body2 = rename(body, inner, names)
                new_carried = tuple(
                    Carry(n, c.ty, substitute(c.entry, subst), substitute(c.next, inner))
                    for c, n in zip(carried, new_names, strict=True))
                for c, n in zip(carried, new_names, strict=True):
                    subst[c.name] = Var(n)
                out.append(NLoop(new_var, start2, end2, body2, new_carried))
            case _:
                raise TypeError(f"not a normal-form statement: {s!r}")
    return tuple(out)


def parallel_assign(targets: list[tuple[str, Expr]], names: Names) -> list[Node]:
    """``Assign`` each target its value as if all values were read first."""
    written = {t for t, _ in targets}
    moves = [(t, v) for t, v in targets if v != Var(t)]
    if not any(expr_vars(v) & written for _, v in moves):
        return [Assign(t, v) for t, v in moves]
    temps = [(t, names.fresh("par"), v) for t, v in moves]
    return [*(Let(tmp, v) for _, tmp, v in temps), *(Assign(t, Var(tmp)) for t, tmp, _ in temps)]


@dataclass
class Replay:
    """How :func:`emit` replays the forward inside the backward program.

    ``keep``: buffers whose stores and atomics are replayed even without ``stores`` (workgroup
    memory: the replay must rebuild it). ``exports``: NF name of a workgroup load inside an ``If``
    -> a variable declared before the outermost ``If`` (in ``decls``) that keeps the loaded value:
    the reverse re-emits a branch to recompute its locals, and by then workgroup memory holds
    later phases' values, so a re-emitted load reads the export instead (``define=False``)."""

    keep: frozenset[str] = frozenset()
    exports: dict[str, str] | None = None
    define: bool = False
    decls: list[Node] | None = None


def emit(stmts: tuple[NStmt, ...], names: Names, *, stores: bool, replay: Replay | None = None,
         depth: int = 0) -> list[Node]:
    """IR statements computing ``stmts``; with ``stores=False`` the stores and atomics are left out
    (a replay of the forward pass that changes no memory; see :class:`Replay` for the exceptions)."""
    rp = replay if replay is not None else _NO_REPLAY
    out: list[Node] = []
    for s in stmts:
        match s:
            case NLet(name, ty, Load(buf, _)) if rp.define and depth > 0 and buf in rp.keep:
                assert rp.exports is not None and rp.decls is not None
                exp = rp.exports[names.root(name)] = names.fresh("exp")
                rp.decls.append(Let(exp, _zero(ty)))
                out += [Let(name, s.value), Assign(exp, Var(name))]
            case NLet(name, _, Load()) if (not rp.define and rp.exports
                                            and names.root(name) in rp.exports):
                out.append(Let(name, Var(rp.exports[names.root(name)])))
            case NLet(name, _, Atomic(_, buf, _, _, _) as at):
                if stores or buf in rp.keep:
                    out.append(Let(name, at))
            case NLet(name, _, value):
                out.append(Let(name, value))
            case NStore(buf, idx, value):
                if stores or buf in rp.keep:
                    out.append(Store(buf, idx, value))
            case NBarrier():
                out.append(Barrier())
            case NIf(cond, then, other, phis):
                out += [Let(p.name, p.init) for p in phis]
                t = emit(then, names, stores=stores, replay=replay, depth=depth + 1)
                t += [Assign(p.name, p.then) for p in phis if p.then != p.init]
                e = emit(other, names, stores=stores, replay=replay, depth=depth + 1)
                e += [Assign(p.name, p.other) for p in phis if p.other != p.init]
                out.append(If(cond, tuple(t), tuple(e)))
            case NLoop(var, start, end, body, carried):
                out += [Let(c.name, c.entry) for c in carried]
                b = emit(body, names, stores=stores, replay=replay, depth=depth + 1)
                b += parallel_assign([(c.name, c.next) for c in carried], names)
                out.append(Loop(var, start, end, tuple(b)))
            case _:
                raise TypeError(f"not a normal-form statement: {s!r}")
    return out


_NO_REPLAY = Replay()


def _zero(ty: DataType) -> Expr:
    match ty:
        case DataType.F32:
            return LitF32(0.0)
        case DataType.F64:
            return LitF64(0.0)
        case DataType.BOOL:
            return LitBool(False)
        case DataType.I32:
            return LitI32(0)
        case _:
            return LitU32(0)


def defined(stmts: tuple[NStmt, ...]) -> set[str]:
    """Every name bound anywhere in ``stmts``."""
    out: set[str] = set()
    for s in stmts:
        match s:
            case NLet(name, _, _):
                out.add(name)
            case NStore() | NBarrier():
                pass
            case NIf(_, then, other, phis):
                out |= defined(then) | defined(other) | {p.name for p in phis}
            case NLoop(var, _, _, body, carried):
                out |= {var} | defined(body) | {c.name for c in carried}
            case _:
                raise TypeError(f"not a normal-form statement: {s!r}")
    return out


def used(stmts: tuple[NStmt, ...]) -> set[str]:
    """Every name read anywhere in ``stmts``."""
    out: set[str] = set()
    for s in stmts:
        match s:
            case NLet(_, _, value):
                out |= expr_vars(value)
            case NStore(_, idx, value):
                out |= expr_vars(idx) | expr_vars(value)
            case NBarrier():
                pass
            case NIf(cond, then, other, phis):
                out |= expr_vars(cond) | used(then) | used(other)
                for p in phis:
                    out |= expr_vars(p.init) | expr_vars(p.then) | expr_vars(p.other)
            case NLoop(_, start, end, body, carried):
                out |= expr_vars(start) | expr_vars(end) | used(body)
                for c in carried:
                    out |= expr_vars(c.entry) | expr_vars(c.next)
            case _:
                raise TypeError(f"not a normal-form statement: {s!r}")
    return out


def free_vars(stmts: tuple[NStmt, ...]) -> set[str]:
    return used(stmts) - defined(stmts)


def all_types(stmts: tuple[NStmt, ...], into: dict[str, DataType] | None = None) -> dict[str, DataType]:
    """Name -> type for every binding in ``stmts`` (loop variables are u32)."""
    out = {} if into is None else into
    for s in stmts:
        match s:
            case NLet(name, ty, _):
                out[name] = ty
            case NStore() | NBarrier():
                pass
            case NIf(_, then, other, phis):
                all_types(then, out)
                all_types(other, out)
                for p in phis:
                    out[p.name] = p.ty
            case NLoop(var, _, _, body, carried):
                out[var] = DataType.U32
                all_types(body, out)
                for c in carried:
                    out[c.name] = c.ty
            case _:
                raise TypeError(f"not a normal-form statement: {s!r}")
    return out


def _value_vars(value: Expr) -> set[str]:
    """Variables whose *value* flows into ``value`` (not conditions or indices)."""
    match value:
        case Var(name):
            return {name}
        case Select(_, a, b):
            return expr_vars(a) | expr_vars(b)
        case Load() | Atomic():
            return set()
        case _ if stops_gradient(value):
            return set()  # the zero-derivative policy (rules.py)
        case _:
            return expr_vars(value)


def active_names(stmts: tuple[NStmt, ...], active_bufs: set[str], types: dict[str, DataType],
                 shared: frozenset[str] = frozenset()) -> set[str]:
    """Float bindings of ``stmts`` whose value depends on a load from ``active_bufs``.

    A ``shared`` buffer (workgroup memory) becomes active once an active value is stored or
    atomically added into it (``active_bufs`` is extended in place). Values computed from
    integers (casts) are never active: the source checks have already rejected the casts that
    would hide a dependence."""
    active: set[str] = set()

    def into(buf: str, value: Expr) -> bool:
        if buf in shared and buf not in active_bufs and _value_vars(value) & active:
            active_bufs.add(buf)
            return True
        return False

    def val(value: Expr) -> bool:
        if isinstance(value, Load):
            return value.buffer in active_bufs
        if isinstance(value, Cast) and value.target.is_float:
            inner = value.value
            return isinstance(inner, Var) and inner.name in active and types[inner.name].is_float
        return bool(_value_vars(value) & active)

    def step(ss: tuple[NStmt, ...]) -> bool:
        changed = False
        for s in ss:
            match s:
                case NLet(name, ty, value):
                    if isinstance(value, Atomic):
                        changed |= into(value.buffer, value.value)
                    elif ty.is_float and name not in active and val(value):
                        active.add(name)
                        changed = True
                case NStore(buf, _, value):
                    changed |= into(buf, value)
                case NBarrier():
                    pass
                case NIf(_, then, other, phis):
                    changed |= step(then) | step(other)
                    for p in phis:
                        if p.ty.is_float and p.name not in active and (
                                _value_vars(p.init) | _value_vars(p.then) | _value_vars(p.other)) & active:
                            active.add(p.name)
                            changed = True
                case NLoop(_, _, _, body, carried):
                    changed |= step(body)
                    for c in carried:
                        if c.ty.is_float and c.name not in active and (
                                _value_vars(c.entry) | _value_vars(c.next)) & active:
                            active.add(c.name)
                            changed = True
                case _:
                    raise TypeError(f"not a normal-form statement: {s!r}")
        return changed

    while step(stmts):
        pass
    return active


def buffer_loads(stmts: tuple[NStmt, ...]) -> list[Load]:
    """Every ``Load`` bound in ``stmts`` (nested statements included)."""
    out: list[Load] = []
    for s in stmts:
        match s:
            case NLet(_, _, Load() as ld):
                out.append(ld)
            case NLet() | NStore() | NBarrier():
                pass
            case NIf(_, then, other, _):
                out += buffer_loads(then) + buffer_loads(other)
            case NLoop(_, _, _, body, _):
                out += buffer_loads(body)
            case _:
                raise TypeError(f"not a normal-form statement: {s!r}")
    return out
