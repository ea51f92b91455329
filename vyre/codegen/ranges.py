"""Value ranges of u32 index arithmetic: proofs that an index is in ``[0, len)``.

Out-of-bounds loads read 0 and stores do nothing (docs/semantics.md), so the CPU emitter guards
every access it cannot prove in range, and those guards keep LLVM from vectorising a loop cleanly
(masked loads with a vector of indices). This module proves ``index < len(buffer)`` (and any u32
comparison) from what holds at a program point:

* definitions of never-assigned locals (``p = lo + j * 32``), exactly where u32 arithmetic cannot
  wrap, as an upper bound where it may (a wrapped sum or product is below the true one);
* loop bounds (``start <= var <= end - 1``, and ``start < end`` inside the body);
* conditions of enclosing ``If``\\ s (``if i + 32 <= len(x)``; the else branch gets the negation);
* ``min``/``max``/``select`` (a case split, or either operand for the bound that needs only one);
* divisions and remainders by constants or by locals proven >= 1, masks, shifts, the static
  lengths of workgroup and fixed-size buffers, local ids below the workgroup size.

A goal ``G <= 0`` is a polynomial over *atoms* (locals, lengths, ids, opaque values, each a u32,
so never negative) with rational coefficients. The prover substitutes the most recently bound atom
by its bounds (an upper bound where its coefficient is positive, a lower one where negative) until
every coefficient is <= 0. Every step is sound for u32 values; anything the rules do not cover is
an atom known only to lie in ``[0, 2^32 - 1]``, which proves nothing. A proof has a step budget, so
an unprovable goal fails quickly. Subtraction is used only where ``b <= a`` is proven first (else
``a - b`` wraps to a huge value, which is exactly the case a guard must catch).

Used by the ``bounds`` pass (vyre/codegen/pipeline.py: drops ``If`` guards proven true) and by the
CPU emitter (drops the per-access guard of an index proven in range).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction

from ..ir import (
    BinOp, BinOpKind, BufLen, Cast, DataType, Expr, InvocationId, LitBool, LitI32, LitU32, LocalId, Program,
    Select, SubgroupLocalId, SubgroupSize, UnOp, UnOpKind, Var, WorkgroupId,
)

from .poly import Mono, Poly, add, atom, const, mul, scale, substitute

__all__ = ["RangeCtx", "Resolve", "U32_MAX"]

U32_MAX = 2**32 - 1
_STEPS = 400  # substitution steps per proof (a failed proof costs at most this)
_DEPTH = 48

#: ``resolve(name)``: the atom key of a variable in scope and whether it keeps its value (never
#: assigned), or None when the caller does not know the name
Resolve = Callable[[str], "tuple[str, DataType, bool] | None"]

#: one case of an atom's value: (upper bound, lower bound, side goals that make them valid)
_Case = tuple["Poly | None", "Poly | None", "tuple[Poly, ...]"]

_OPAQUE = "?"  # prefix of atoms that stand for an opaque u32 value (a load, a cast from a float)


@dataclass(frozen=True)
class _Bound:
    """Bounds of a u32 expression's value: ``lb <= value <= ub`` (polynomials), each valid once
    its side goals (each ``<= 0``) are proven. ``ub`` None: no useful upper bound."""

    ub: Poly | None
    lb: Poly
    ub_sides: tuple[Poly, ...] = ()
    lb_sides: tuple[Poly, ...] = ()


@dataclass
class _Atom:
    order: int  # atoms bound later are substituted first; roots (lengths, ids) are -1
    type: DataType
    lo: int = 0
    hi: int = U32_MAX
    defn: Expr | None = None  # resolved (Vars are atom keys), u32, stable


@dataclass
class _Table:
    atoms: dict[str, _Atom] = field(default_factory=dict)
    global_facts: list[Poly] = field(default_factory=list)  # from min/max definitions
    counter: int = 0
    synthetic: dict[Expr, str] = field(default_factory=dict)


class RangeCtx:
    """What is known at one program point. :meth:`child` opens a nested scope (facts added there
    stay there); atoms are shared (their keys are unique per binding)."""

    def __init__(self, program: Program, table: _Table | None = None, facts: tuple[Poly, ...] = ()) -> None:
        self.program = program
        self.table = table or _Table()
        self.facts = facts
        self._steps = 0
        self._memo: dict[frozenset[tuple[Mono, Fraction]], bool] = {}

    def child(self) -> RangeCtx:
        return RangeCtx(self.program, self.table, self.facts)

    # ---- recording what holds --------------------------------------------------------------
    def define(self, key: str, value: Expr | None, t: DataType) -> None:
        """A local ``key`` bound to ``value``, already :meth:`resolved` (None: not stable, or
        not known: the local is then only a u32 in ``[0, 2^32 - 1]``)."""
        self._new_atom(key, t, value if t is DataType.U32 else None)

    def loop(self, key: str, start: Expr, end: Expr, resolve: Resolve) -> None:
        """Inside ``for key in [start, end)``: ``start <= key < end`` and ``start < end``."""
        self._new_atom(key, DataType.U32, None)
        s, e = self.resolved(start, resolve, opaque=False), self.resolved(end, resolve, opaque=False)
        v = atom(key)
        if e is not None:
            be = self._lin(e)
            if be.ub is not None and self._all(be.ub_sides):
                self._fact(add(add(v, be.ub, -1), const(1)))  # key + 1 <= end
                if s is not None:
                    bs = self._lin(s)
                    if self._all(bs.lb_sides):
                        self._fact(add(add(bs.lb, const(1)), be.ub, -1))  # start + 1 <= end
        if s is not None:
            bs = self._lin(s)
            if self._all(bs.lb_sides):
                self._fact(add(bs.lb, v, -1))  # start <= key

    def assume(self, cond: Expr, resolve: Resolve, holds: bool = True) -> None:
        """``cond`` is ``holds`` here (the branch of an ``If``). Only u32 comparisons of stable
        values and ``and`` (``or`` when false) of them give facts; anything else adds nothing."""
        c = self.resolved(cond, resolve, opaque=False)
        if c is not None:
            self._assume(c, holds)

    def _assume(self, c: Expr, holds: bool) -> None:
        match c:
            case BinOp(BinOpKind.AND, a, b) if holds:
                self._assume(a, True)
                self._assume(b, True)
            case BinOp(BinOpKind.OR, a, b) if not holds:
                self._assume(a, False)
                self._assume(b, False)
            case UnOp(UnOpKind.LOGICAL_NOT, a):
                self._assume(a, not holds)
            case BinOp(op, a, b) if op in _CMP and self._type(a) is DataType.U32:
                for lo, hi, strict in _CMP[op](a, b, holds):
                    self._le(lo, hi, strict)

    def _le(self, a: Expr, b: Expr, strict: bool) -> None:
        """Record ``a (+1 if strict) <= b``."""
        ba, bb = self._lin(a), self._lin(b)
        if bb.ub is None or not self._all(ba.lb_sides) or not self._all(bb.ub_sides):
            return
        self._fact(add(add(ba.lb, const(1 if strict else 0)), bb.ub, -1))

    def _fact(self, f: Poly) -> None:
        if any(m for m in f):
            self.facts = (*self.facts, f)

    def _new_atom(self, key: str, t: DataType, defn: Expr | None) -> None:
        self.table.counter += 1
        a = _Atom(self.table.counter, t, defn=defn)
        self.table.atoms[key] = a
        if defn is not None:
            a.lo, a.hi = self._interval(defn)
            self._def_facts(key, defn)

    def _def_facts(self, key: str, defn: Expr) -> None:
        """``x = min(a, b)``: ``x <= a`` and ``x <= b``; ``max`` the other way (valid wherever
        ``x`` and its operands are, since ``x`` is a pure function of stable values)."""
        if isinstance(defn, BinOp) and defn.op in (BinOpKind.MIN, BinOpKind.MAX):
            for operand in (defn.left, defn.right):
                b = self._lin(operand)
                if defn.op is BinOpKind.MIN and b.ub is not None and not b.ub_sides:
                    self.table.global_facts.append(add(atom(key), b.ub, -1))
                elif defn.op is BinOpKind.MAX and not b.lb_sides:
                    self.table.global_facts.append(add(b.lb, atom(key), -1))

    # ---- questions -----------------------------------------------------------------------
    def proves_lt(self, index: Expr, length: Expr, resolve: Resolve) -> bool:
        """Is ``index < length`` at every execution of this point?"""
        i = self.resolved(index, resolve, opaque=True)
        n = self.resolved(length, resolve, opaque=True)
        if i is None or n is None:
            return False
        bi, bn = self._lin(i), self._lin(n)
        if bi.ub is None:
            return False
        goal = add(add(bi.ub, const(1)), bn.lb, -1)
        return self._all((*bi.ub_sides, *bn.lb_sides, goal))

    def proves(self, cond: Expr, resolve: Resolve) -> bool:
        """Is the bool ``cond`` true at every execution of this point? (u32 comparisons, ``and``.)"""
        c = self.resolved(cond, resolve, opaque=True)
        return c is not None and self._proves(c)

    def _proves(self, c: Expr) -> bool:
        match c:
            case LitBool(v):
                return v
            case BinOp(BinOpKind.AND, a, b):
                return self._proves(a) and self._proves(b)
            case BinOp(BinOpKind.OR, a, b):
                return self._proves(a) or self._proves(b)
            case BinOp(op, a, b) if op in _CMP and self._type(a) is DataType.U32:
                ineqs = _CMP[op](a, b, True)
                if not ineqs:
                    return False  # a != b is no inequality the prover can show
                for lo, hi, strict in ineqs:
                    bl, bh = self._lin(lo), self._lin(hi)
                    if bl.ub is None:
                        return False
                    goal = add(add(bl.ub, const(1 if strict else 0)), bh.lb, -1)
                    if not self._all((*bl.ub_sides, *bh.lb_sides, goal)):
                        return False
                return True
        return False

    def _all(self, goals: tuple[Poly, ...] | list[Poly]) -> bool:
        for g in goals:
            self._steps = 0
            self._memo = {}
            if not self._prove(g, 0):
                return False
        return True

    # ---- expressions -----------------------------------------------------------------------
    def resolved(self, e: Expr, resolve: Resolve, *, opaque: bool) -> Expr | None:
        """``e`` with variables replaced by their atom keys. A value that may change (an assigned
        variable, a load) becomes a fresh opaque atom when ``opaque`` (it is one value at one
        point), else the result is None (facts and definitions must stay true)."""
        match e:
            case Var(name):
                r = resolve(name)
                if r is None:
                    return self._opaque(DataType.U32) if opaque else None  # not ours to know
                key, t, stable = r
                if key not in self.table.atoms:
                    self.table.atoms[key] = _Atom(-1, t)
                if not stable:
                    return self._opaque(t) if opaque else None
                return Var(key)
            case BinOp(op, a, b):
                ra, rb = self.resolved(a, resolve, opaque=opaque), self.resolved(b, resolve, opaque=opaque)
                return None if ra is None or rb is None else BinOp(op, ra, rb)
            case UnOp(op, a):
                ra = self.resolved(a, resolve, opaque=opaque)
                return None if ra is None else UnOp(op, ra)
            case Select(c, a, b):
                rs = [self.resolved(x, resolve, opaque=opaque) for x in (c, a, b)]
                return None if None in rs else Select(*rs)  # type: ignore[arg-type]
            case Cast(t, a):
                ra = self.resolved(a, resolve, opaque=opaque)
                return None if ra is None else Cast(t, ra)
            case (LitBool() | LitI32() | LitU32() | BufLen() | InvocationId() | WorkgroupId() | LocalId()
                  | SubgroupLocalId() | SubgroupSize()):
                return e
        if not opaque:
            return None
        from ..ir.typing import expr_type

        try:
            t = expr_type(e, {}, self.program)
        except (KeyError, TypeError):
            t = DataType.U32
        return self._opaque(t)

    def _opaque(self, t: DataType) -> Var:
        self.table.counter += 1
        key = f"{_OPAQUE}{self.table.counter}"
        self.table.atoms[key] = _Atom(-1, t)
        return Var(key)

    def _type(self, e: Expr) -> DataType | None:
        match e:
            case LitU32() | BufLen() | InvocationId() | WorkgroupId() | LocalId() | SubgroupLocalId() | SubgroupSize():
                return DataType.U32
            case LitI32():
                return DataType.I32
            case LitBool():
                return DataType.BOOL
            case Var(k):
                a = self.table.atoms.get(k)
                return None if a is None else a.type
            case BinOp(op, a, _):
                return DataType.BOOL if op in _BOOL_OPS else self._type(a)
            case UnOp(op, a):
                return DataType.BOOL if op in (UnOpKind.LOGICAL_NOT, UnOpKind.IS_NAN, UnOpKind.IS_INF,
                                               UnOpKind.IS_FINITE) else self._type(a)
            case Select(_, a, _):
                return self._type(a)
            case Cast(t, _):
                return t
        return None

    def _interval(self, e: Expr) -> tuple[int, int]:
        """Numeric bounds of a resolved u32 expression (wrap-aware; ``[0, 2^32-1]`` when unsure)."""
        full = (0, U32_MAX)
        match e:
            case LitU32(v):
                return v, v
            case Var(k):
                a = self.table.atoms.get(k)
                return (a.lo, a.hi) if a is not None and a.type is DataType.U32 else full
            case BufLen(b):
                d = self.program.buffer(b)
                return (d.count, d.count) if d.count > 0 else full
            case LocalId(axis):
                return 0, self.program.workgroup_size[axis] - 1
            case SubgroupLocalId():
                return 0, 31
            case SubgroupSize():
                return 32, 32
            case Cast(_, a) if self._type(a) is DataType.BOOL:
                return 0, 1
            case Cast(_, a) if self._type(a) is DataType.U32:
                return self._interval(a)
            case BinOp(op, a, b) if self._type(e) is DataType.U32:
                (al, ah), (bl, bh) = self._interval(a), self._interval(b)
                match op:
                    case BinOpKind.ADD if ah + bh <= U32_MAX:
                        return al + bl, ah + bh
                    case BinOpKind.SUB if bh <= al:
                        return al - bh, ah - bl
                    case BinOpKind.MUL if ah * bh <= U32_MAX:
                        return al * bl, ah * bh
                    case BinOpKind.DIV if bl >= 1:
                        return al // bh, ah // bl
                    case BinOpKind.MOD if bl >= 1:
                        return 0, min(ah, bh - 1)
                    case BinOpKind.BIT_AND:
                        return 0, min(ah, bh)
                    case BinOpKind.MIN:
                        return min(al, bl), min(ah, bh)
                    case BinOpKind.MAX:
                        return max(al, bl), max(ah, bh)
                    case BinOpKind.SHR if bl == bh:
                        return al >> (bl & 31), ah >> (bl & 31)
            case Select(_, a, b) if self._type(e) is DataType.U32:
                (al, ah), (bl, bh) = self._interval(a), self._interval(b)
                return min(al, bl), max(ah, bh)
        return full

    def _lin(self, e: Expr) -> _Bound:
        """Bounds of a resolved u32 expression as polynomials over atoms."""
        if self._type(e) is not DataType.U32:
            lo, hi = self._interval(e) if self._type(e) is DataType.U32 else (0, U32_MAX)
            return _Bound(const(hi), const(lo))
        match e:
            case LitU32(v):
                return _Bound(const(v), const(v))
            case Var(k):
                return _Bound(atom(k), atom(k))
            case BufLen(b):
                d = self.program.buffer(b)
                if d.count > 0:
                    return _Bound(const(d.count), const(d.count))
                key = f"len:{b}"
                self.table.atoms.setdefault(key, _Atom(-1, DataType.U32))
                return _Bound(atom(key), atom(key))
            case InvocationId() | WorkgroupId() | LocalId() | SubgroupLocalId() | SubgroupSize():
                key = f"id:{type(e).__name__}:{getattr(e, 'axis', 0)}"
                lo, hi = self._interval(e)
                self.table.atoms.setdefault(key, _Atom(-1, DataType.U32, lo, hi))
                return _Bound(atom(key), atom(key))
            case Cast(_, a) if self._type(a) is DataType.U32:
                return self._lin(a)
            case BinOp(BinOpKind.MIN | BinOpKind.MAX, _, _) | Select():
                return self._lin(Var(self._synthetic(e)))
            case BinOp(op, a, b):
                return self._binop(op, a, b)
        lo, hi = self._interval(e)
        return _Bound(const(hi), const(lo))

    def _synthetic(self, e: Expr) -> str:
        """An atom standing for a nested ``min``/``max``/``select`` (so the prover can split it)."""
        key = self.table.synthetic.get(e)
        if key is None:
            key = f"~{len(self.table.synthetic)}"
            self.table.synthetic[e] = key
            self._new_atom(key, DataType.U32, e)
        return key

    def _binop(self, op: BinOpKind, a: Expr, b: Expr) -> _Bound:
        ba, bb = self._lin(a), self._lin(b)
        zero = const(0)
        cb = _literal(b)
        match op:
            case BinOpKind.ADD | BinOpKind.BIT_OR | BinOpKind.BIT_XOR:
                if ba.ub is None or bb.ub is None:
                    return _Bound(None, zero)
                ub = add(ba.ub, bb.ub)  # a wrapped sum is below the true one; a|b, a^b <= a + b
                if op is not BinOpKind.ADD:
                    return _Bound(ub, zero, ba.ub_sides + bb.ub_sides)
                nowrap = add(ub, const(U32_MAX), -1)
                return _Bound(ub, add(ba.lb, bb.lb), ba.ub_sides + bb.ub_sides,
                              ba.lb_sides + bb.lb_sides + ba.ub_sides + bb.ub_sides + (nowrap,))
            case BinOpKind.SUB:
                if ba.ub is None or bb.ub is None:
                    return _Bound(None, zero)
                # exact only where b <= a (proven as a side goal), else it wraps
                le = add(bb.ub, ba.lb, -1)
                sides = ba.lb_sides + bb.ub_sides + (le,)
                return _Bound(add(ba.ub, bb.lb, -1), add(ba.lb, bb.ub, -1),
                              ba.ub_sides + bb.lb_sides + sides, ba.lb_sides + bb.ub_sides + sides)
            case BinOpKind.MUL:
                if ba.ub is None or bb.ub is None:
                    return _Bound(None, zero)
                ub = mul(ba.ub, bb.ub)  # factors are >= 0; a wrapped product is below the true one
                ca = _literal(a)
                c = cb if cb is not None else ca
                if c is None:
                    return _Bound(ub, zero, ba.ub_sides + bb.ub_sides)
                other = ba if cb is not None else bb
                nowrap = add(ub, const(U32_MAX), -1)
                return _Bound(ub, scale(other.lb, c), ba.ub_sides + bb.ub_sides,
                              other.lb_sides + ba.ub_sides + bb.ub_sides + (nowrap,))
            case BinOpKind.DIV:
                if ba.ub is None:
                    return _Bound(None, zero)
                if cb is not None and cb >= 1:
                    return _Bound(scale(ba.ub, Fraction(1, cb)), scale(add(ba.lb, const(cb - 1), -1),
                                                                        Fraction(1, cb)),
                                  ba.ub_sides, ba.lb_sides)
                if isinstance(b, Var):  # a / b <= a / b exactly when b >= 1 (b == 0 gives 2^32 - 1)
                    inv: Poly = {((b.name, -1),): Fraction(1)}
                    return _Bound(mul(ba.ub, inv), zero, (*ba.ub_sides, add(const(1), atom(b.name), -1)))
                return _Bound(None, zero)
            case BinOpKind.MOD:
                if cb is not None and cb >= 1:
                    return _Bound(const(cb - 1), zero)
                if ba.ub is not None:
                    return _Bound(ba.ub, zero, ba.ub_sides)  # a % b <= a (a % 0 == 0)
                return _Bound(None, zero)
            case BinOpKind.BIT_AND:
                if cb is not None:
                    return _Bound(const(cb), zero)
                ca = _literal(a)
                if ca is not None:
                    return _Bound(const(ca), zero)
                return _Bound(ba.ub, zero, ba.ub_sides) if ba.ub is not None else _Bound(None, zero)
            case BinOpKind.SHR if cb is not None and ba.ub is not None:
                d = 1 << (cb & 31)
                return _Bound(scale(ba.ub, Fraction(1, d)), scale(add(ba.lb, const(d - 1), -1), Fraction(1, d)),
                              ba.ub_sides, ba.lb_sides)
            case BinOpKind.SHL if cb is not None and ba.ub is not None:
                return _Bound(scale(ba.ub, 1 << (cb & 31)), zero, ba.ub_sides)
        lo, hi = self._interval(BinOp(op, a, b))
        return _Bound(const(hi), const(lo))

    # ---- the prover ------------------------------------------------------------------------
    def _prove(self, g: Poly, depth: int) -> bool:
        """Is ``g <= 0`` for every value of its atoms that the context allows?"""
        key = frozenset(g.items())
        known = self._memo.get(key)
        if known is None:
            known = self._memo[key] = self._search(g, depth)
        return known

    def _search(self, g: Poly, depth: int) -> bool:
        self._steps += 1
        if self._steps > _STEPS or depth > _DEPTH:
            return False
        if all(c <= 0 for c in g.values()):
            return True  # every monomial is >= 0
        if not any(m for m in g):
            return False
        if self._numeric(g) <= 0:
            return True
        neg_exp = {k for m in g for k, e in m if e < 0}
        cands = {k for m in g for k, e in m if e > 0} - neg_exp
        if not cands:
            return False
        x = max(cands, key=lambda k: (self.table.atoms[k].order if k in self.table.atoms else -1, k))
        pos = any(c > 0 for m, c in g.items() if any(k == x for k, _ in m))
        neg = any(c < 0 for m, c in g.items() if any(k == x for k, _ in m))
        for option in self._options(x, pos, neg):
            if all(self._case(g, x, ub, lb, sides, depth) for ub, lb, sides in option):
                return True
        return False

    def _numeric(self, g: Poly) -> Fraction | float:
        """An upper bound of ``g`` from every atom's numeric range alone (inf when unknown)."""
        total = Fraction(0)
        for m, c in g.items():
            if any(e < 0 for _, e in m):
                return float("inf")
            lo, hi = Fraction(1), Fraction(1)
            for k, e in m:
                a = self.table.atoms.get(k)
                lo *= (a.lo if a is not None else 0) ** e
                hi *= (a.hi if a is not None else U32_MAX) ** e
            total += c * (hi if c > 0 else lo)
        return total

    def _case(self, g: Poly, x: str, ub: Poly | None, lb: Poly | None, sides: tuple[Poly, ...], depth: int) -> bool:
        g2 = substitute(g, x, ub, lb)
        return g2 is not None and all(self._prove(s, depth + 1) for s in sides) and self._prove(g2, depth + 1)

    def _options(self, x: str, pos: bool, neg: bool) -> Iterator[list[_Case]]:
        """Ways to bound atom ``x``: each a list of cases that together cover every value (all must
        be proven); the first that works wins."""
        a = self.table.atoms.get(x)
        d = a.defn if a is not None else None
        if d is not None:
            yield from self._def_options(d, pos, neg)
        ubs, lbs = self._fact_bounds(x)
        if pos and not neg:
            for u in ubs:
                yield [(u, None, ())]
        elif neg and not pos:
            for lo in lbs:
                yield [(None, lo, ())]
        else:
            for u, lo in itertools.product(ubs, lbs):
                yield [(u, lo, ())]
        # numeric bounds last, and only where they say something (a u32 is in [0, 2^32 - 1] anyway)
        if a is not None and ((pos and a.hi < U32_MAX) or (neg and a.lo > 0)):
            yield [(const(a.hi), const(a.lo), ())]

    def _def_options(self, d: Expr, pos: bool, neg: bool) -> Iterator[list[_Case]]:
        def case(e: Expr) -> _Case:
            b = self._lin(e)
            sides = (b.ub_sides if pos else ()) + (b.lb_sides if neg else ())
            return b.ub, b.lb, sides

        match d:
            case BinOp(BinOpKind.MIN, a, b) if pos and not neg:
                yield [case(a)]  # min(a, b) <= a and <= b: either bound will do
                yield [case(b)]
            case BinOp(BinOpKind.MAX, a, b) if neg and not pos:
                yield [case(a)]
                yield [case(b)]
            case BinOp(BinOpKind.MIN | BinOpKind.MAX, a, b) | Select(_, a, b):
                yield [case(a), case(b)]  # the value is one of them: prove both
            case _:
                yield [case(d)]

    def _order(self, k: str) -> int:
        a = self.table.atoms.get(k)
        return -1 if a is None else a.order

    def _fact_bounds(self, x: str) -> tuple[list[Poly], list[Poly]]:
        """Bounds of ``x`` from facts where it appears alone. Facts of the context (loops, ``If``
        conditions) give only bounds over atoms bound before ``x``, so substitution descends and
        ends; facts of ``min``/``max`` definitions (``a <= max(a, b)``) are few and always used."""
        ubs: list[Poly] = []
        lbs: list[Poly] = []
        mine = self._order(x)
        n_ctx = len(self.facts)
        for i, f in enumerate((*self.facts, *self.table.global_facts)):
            c = f.get(((x, 1),))
            if c is None or any(k == x for m in f if m != ((x, 1),) for k, _ in m):
                continue
            if i < n_ctx and any(self._order(k) >= mine for m in f for k, _ in m if k != x):
                continue
            rest = {m: v for m, v in f.items() if m != ((x, 1),)}
            (ubs if c > 0 else lbs).append(scale(rest, Fraction(-1) / c))
        return ubs, lbs


def _literal(e: Expr) -> int | None:
    return e.value if isinstance(e, LitU32) else None


def _lt(a: Expr, b: Expr, holds: bool) -> list[tuple[Expr, Expr, bool]]:
    return [(a, b, True)] if holds else [(b, a, False)]


def _le(a: Expr, b: Expr, holds: bool) -> list[tuple[Expr, Expr, bool]]:
    return [(a, b, False)] if holds else [(b, a, True)]


def _eq(a: Expr, b: Expr, holds: bool) -> list[tuple[Expr, Expr, bool]]:
    return [(a, b, False), (b, a, False)] if holds else []


#: comparison -> the inequalities ``(lo, hi, strict)`` it means when it ``holds`` (or not)
_CMP: dict[BinOpKind, Callable[[Expr, Expr, bool], list[tuple[Expr, Expr, bool]]]] = {
    BinOpKind.LT: _lt,
    BinOpKind.LE: _le,
    BinOpKind.GT: lambda a, b, h: _lt(b, a, h),
    BinOpKind.GE: lambda a, b, h: _le(b, a, h),
    BinOpKind.EQ: _eq,
    BinOpKind.NE: lambda a, b, h: _eq(a, b, not h),
}

_BOOL_OPS = frozenset({BinOpKind.LT, BinOpKind.LE, BinOpKind.GT, BinOpKind.GE, BinOpKind.EQ, BinOpKind.NE,
                       BinOpKind.AND, BinOpKind.OR})
