"""Compile a program's statements into nested Python closures, once per run.

Each expression becomes a function ``ev(r) -> value`` and each statement a function
``run(r) -> bool`` (True when the invocation executed ``Return``), where ``r`` is the invocation's
register list: slots 0-9 hold the ids (see :data:`ID_SLOTS`), the rest hold variables. Scoping and
shadowing are resolved here, at compile time: every ``Let`` gets its own slot, so the closures do
no name lookups. Buffers are bound before compiling, so loads capture the Python list they read.

Statements that contain a synchronisation point (``Barrier``, or a ``Let`` whose value is a
subgroup op) are compiled by :mod:`vyre.interp.sync` into generators instead.

Step counting: each statement adds its own cost (1 + the number of expression nodes it
evaluates, function bodies included) to a shared counter before running, and each loop iteration
adds 1, so ``max_steps`` bounds statements plus expression evaluations exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from ..errors import InterpError
from ..ir.expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, FunctionDef, InvocationId, LitBool, LitF32,
    LitF64, LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId,
    SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId,
)
from ..ir.node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store
from ..ir.ops import BINOP_RULES, UNOP_RULES, BinOpKind
from ..ir.types import DataType
from .scalar import CAST_EVAL, Value, atomic_fn, binop_fn, unop_fn, zero_of

Regs = list[Any]
Ev = Callable[[Regs], Value]
Stmt = Callable[[Regs], bool]

# Register layout: invocation ids on x/y/z, local ids, workgroup ids, subgroup lane.
GID, LID, WGID, LANE = 0, 3, 6, 9
ID_SLOTS = 10
SUBGROUP_SIZE = 32


class Steps:
    """Shared step counter (statements + expression evaluations over the whole run)."""

    __slots__ = ("limit", "n")

    def __init__(self, limit: int) -> None:
        self.n = 0
        self.limit = limit

    def exceeded(self) -> InterpError:
        return InterpError(
            f"execution exceeded max_steps={self.limit} (statements plus expression evaluations, "
            "over all invocations); the program may loop without end. Fix: raise max_steps or "
            "shrink the grid"
        )


@dataclass
class Memory:
    """What compiled closures read and write for one run."""

    storage: dict[str, list[Any]]
    workgroup: dict[str, int]  # workgroup buffer name -> index into ``wg``
    wg: list[list[Any]]  # the current workgroup's buffers (swapped per workgroup)
    oob: list[int] = field(default_factory=lambda: [0, 0])  # [loads, stores]


class Scope:
    __slots__ = ("parent", "vars")

    def __init__(self, parent: Scope | None) -> None:
        self.parent = parent
        self.vars: dict[str, tuple[int, DataType, bool]] = {}  # name -> (slot, type, read-only)

    def lookup(self, name: str) -> tuple[int, DataType, bool]:
        s: Scope | None = self
        while s is not None:
            if name in s.vars:
                return s.vars[name]
            s = s.parent
        raise InterpError(f"variable {name!r} is used but not bound in scope. "
                          "Fix: bind it with Let before use (program.validate() reports this)")


def _lit(v: Value) -> Ev:
    return lambda r: v


def is_subgroup(e: Expr) -> bool:
    return isinstance(e, (SubgroupBallot, SubgroupShuffle, SubgroupReduce))


class Compiler:
    """Compiles one program against one run's :class:`Memory`."""

    def __init__(self, functions: tuple[FunctionDef, ...], buffers: dict[str, DataType],
                 mem: Memory, steps: Steps) -> None:
        self.functions = {f.op_id: f for f in functions}
        self.buffers = buffers
        self.mem = mem
        self.steps = steps
        self.nslots = ID_SLOTS
        self._calls: list[str] = []

    def slot(self) -> int:
        self.nslots += 1
        return self.nslots - 1

    def _elem(self, name: str) -> DataType:
        t = self.buffers.get(name)
        if t is None:
            raise InterpError(f"unknown buffer {name!r}; the program declares {sorted(self.buffers)}. "
                              "Fix: declare the buffer (program.validate() reports this)")
        return t

    # --- expressions --------------------------------------------------------------------------

    def expr(self, e: Expr, sc: Scope) -> tuple[Ev, DataType, int]:
        """``(closure, type, cost)`` where cost is the number of expression evaluations."""
        match e:
            case LitBool(v):
                return _lit(bool(v)), DataType.BOOL, 1
            case LitI32(v):
                return _lit(v), DataType.I32, 1
            case LitU32(v):
                return _lit(v), DataType.U32, 1
            case LitF32(bits):
                # From the bit pattern, so -0.0 and NaN payloads are exact.
                return _lit(np.array(bits, dtype=np.uint32).view(np.float32)[()]), DataType.F32, 1
            case LitF64():
                return _lit(e.value), DataType.F64, 1
            case Var(name):
                slot, t, _ = sc.lookup(name)
                return itemgetter(slot), t, 1
            case InvocationId(axis) | LocalId(axis) | WorkgroupId(axis):
                if axis not in (0, 1, 2):
                    raise InterpError(f"{type(e).__name__} axis {axis} is not 0, 1 or 2. Fix: use axis 0-2")
                base = GID if isinstance(e, InvocationId) else LID if isinstance(e, LocalId) else WGID
                return itemgetter(base + axis), DataType.U32, 1
            case SubgroupLocalId():
                return itemgetter(LANE), DataType.U32, 1
            case SubgroupSize():
                return _lit(SUBGROUP_SIZE), DataType.U32, 1
            case BufLen(name):
                return self._buflen(name), DataType.U32, 1
            case Load(name, index):
                fi, _, ci = self.expr(index, sc)
                return self._load(name, fi), self._elem(name), ci + 1
            case BinOp(op, left, right):
                return self._binop(op, left, right, sc)
            case UnOp(op, operand):
                fa, t, ca = self.expr(operand, sc)
                f = unop_fn(op, t)
                rt = UNOP_RULES[op].result_for(t)
                return (lambda r: f(fa(r))), rt, ca + 1
            case Select(cond, a, b):
                fc, tc, cc = self.expr(cond, sc)
                fa, ta, ca = self.expr(a, sc)
                fb, tb, cb = self.expr(b, sc)
                self._same("Select", ta, tb)
                if tc is not DataType.BOOL:
                    raise InterpError(f"Select condition is {tc.short}, expected bool. "
                                      "Fix: compare to build a bool")

                def sel(r: Regs) -> Value:
                    c, x, y = fc(r), fa(r), fb(r)  # both arms are evaluated
                    return x if c else y
                return sel, ta, cc + ca + cb + 1
            case Cast(target, value):
                fv, src, cv = self.expr(value, sc)
                cf = CAST_EVAL[src, target]
                return (lambda r: cf(fv(r))), target, cv + 1
            case Fma(a, b, c):
                # Unfused: a*b rounded, then + c rounded (docs/semantics.md allows either).
                fa, ta, ca = self.expr(a, sc)
                fb, tb, cb = self.expr(b, sc)
                fc, tc, cc = self.expr(c, sc)
                self._same("Fma", ta, tb, tc)
                mul, add = binop_fn(BinOpKind.MUL, ta), binop_fn(BinOpKind.ADD, ta)

                def fma(r: Regs) -> Value:
                    x, y, z = fa(r), fb(r), fc(r)
                    return add(mul(x, y), z)
                return fma, ta, ca + cb + cc + 1
            case Atomic():
                return self._atomic(e, sc)
            case SubgroupBallot() | SubgroupShuffle() | SubgroupReduce():
                raise InterpError(
                    f"{type(e).__name__} appears inside an expression; subgroup ops may only be the "
                    "whole value of a Let at a uniform point. Fix: bind it with its own Let"
                )
            case Call(op_id, args):
                return self._call(op_id, args, sc)
            case _:
                raise TypeError(f"not a vyre expression: {e!r}")

    @staticmethod
    def _same(what: str, *types: DataType) -> None:
        if len(set(types)) != 1:
            raise InterpError(f"{what} operands have types {[t.short for t in types]}, expected one type. "
                              "Fix: cast the operands to one type (program.validate() reports this)")

    def _binop(self, op: BinOpKind, left: Expr, right: Expr, sc: Scope) -> tuple[Ev, DataType, int]:
        fa, ta, ca = self.expr(left, sc)
        fb, tb, cb = self.expr(right, sc)
        if op not in (BinOpKind.SHL, BinOpKind.SHR):
            self._same(f"binary op {op.name}", ta, tb)
        f = binop_fn(op, ta)
        rt = BINOP_RULES[op].result_for(ta)
        # Constant right operands are common (x * 2.0, i + 1): skip one call for them.
        if isinstance(right, (LitI32, LitU32, LitF32, LitF64, LitBool)):
            k = fb(None)  # type: ignore[arg-type]  # a literal ignores its registers
            return (lambda r: f(fa(r), k)), rt, ca + cb + 1
        return (lambda r: f(fa(r), fb(r))), rt, ca + cb + 1

    def _buflen(self, name: str) -> Ev:
        self._elem(name)
        if name in self.mem.workgroup:
            n = len(self.mem.wg[self.mem.workgroup[name]])
        else:
            n = len(self.mem.storage[name])
        return _lit(n)

    def _buffer_ref(self, name: str) -> tuple[list[Any] | None, int, list[list[Any]]]:
        """``(storage list or None, workgroup index, wg holder)``."""
        self._elem(name)
        if name in self.mem.workgroup:
            return None, self.mem.workgroup[name], self.mem.wg
        return self.mem.storage[name], -1, self.mem.wg

    def _load(self, name: str, fi: Ev) -> Ev:
        buf, k, wg = self._buffer_ref(name)
        zero, oob = zero_of(self._elem(name)), self.mem.oob
        if buf is not None:
            data, n = buf, len(buf)

            def load(r: Regs) -> Value:
                i = fi(r)
                if 0 <= i < n:
                    return data[i]
                oob[0] += 1
                return zero
            return load

        def load_wg(r: Regs) -> Value:
            i = fi(r)
            data = wg[k]
            if 0 <= i < len(data):
                return data[i]
            oob[0] += 1
            return zero
        return load_wg

    def _store_fn(self, name: str) -> Callable[[int, Value], None]:
        buf, k, wg = self._buffer_ref(name)
        oob = self.mem.oob

        def store(i: int, v: Value) -> None:
            data = buf if buf is not None else wg[k]
            if 0 <= i < len(data):
                data[i] = v
            else:
                oob[1] += 1
        return store

    def _atomic(self, e: Atomic, sc: Scope) -> tuple[Ev, DataType, int]:
        t = self._elem(e.buffer)
        rmw = atomic_fn(e.op, t)
        fi, _, ci = self.expr(e.index, sc)
        fv, tv, cv = self.expr(e.value, sc)
        self._same(f"atomic {e.op.name} (buffer element, value)", t, tv)
        fe: Ev = _lit(None)
        ce = 0
        if e.expected is not None:
            fe, te, ce = self.expr(e.expected, sc)
            self._same(f"atomic {e.op.name} (buffer element, expected)", t, te)
        buf, k, wg = self._buffer_ref(e.buffer)
        zero, oob = zero_of(t), self.mem.oob

        def atomic(r: Regs) -> Value:
            i, v, x = fi(r), fv(r), fe(r)
            data = buf if buf is not None else wg[k]
            if 0 <= i < len(data):
                old = data[i]
                data[i] = rmw(old, v, x)
                return old
            oob[1] += 1  # an atomic past the end does nothing and returns 0
            return zero
        return atomic, t, ci + cv + ce + 1

    def _call(self, op_id: str, args: tuple[Expr, ...], sc: Scope) -> tuple[Ev, DataType, int]:
        fn = self.functions.get(op_id)
        if fn is None:
            raise InterpError(f"Call names function {op_id!r}, which the program does not carry "
                              f"(it has {sorted(self.functions)}). Fix: register the function before "
                              "building the program, or pass it in Program.functions")
        if op_id in self._calls:
            raise InterpError(f"function {op_id!r} calls itself (via {' -> '.join(self._calls)}). "
                              "Fix: functions are inlined and may not recurse")
        if len(args) != len(fn.params):
            raise InterpError(f"Call {op_id!r} passes {len(args)} arguments, the function takes "
                              f"{len(fn.params)}. Fix: pass one argument per parameter")
        compiled = [self.expr(a, sc) for a in args]
        # Parameters get fresh slots per call site; the body sees only them (it is pure).
        fsc = Scope(None)
        slots: list[int] = []
        for (pname, ptype), (_, at, _) in zip(fn.params, compiled, strict=True):
            if at is not ptype:
                raise InterpError(f"Call {op_id!r} passes {at.short} for parameter {pname!r} of "
                                  f"type {ptype.short}. Fix: cast the argument")
            slot = self.slot()
            fsc.vars[pname] = (slot, ptype, True)
            slots.append(slot)
        self._calls.append(op_id)
        try:
            body, bt, cbody = self.expr(fn.body, fsc)
        finally:
            self._calls.pop()
        bind = list(zip(slots, [c[0] for c in compiled], strict=True))

        def call(r: Regs) -> Value:
            for s, a in bind:
                r[s] = a(r)
            return body(r)
        return call, bt, sum(c[2] for c in compiled) + cbody + 1

    # --- statements ---------------------------------------------------------------------------

    def seq(self, nodes: tuple[Node, ...], sc: Scope) -> Stmt:
        stmts = [self.stmt(n, sc) for n in nodes]
        if len(stmts) == 1:
            return stmts[0]

        def seq(r: Regs) -> bool:
            for s in stmts:
                if s(r):
                    return True
            return False
        return seq

    def tick(self, cost: int) -> Callable[[], None]:
        steps = self.steps
        limit = steps.limit

        def tick() -> None:
            steps.n += cost
            if steps.n > limit:
                raise steps.exceeded()
        return tick

    def stmt(self, n: Node, sc: Scope) -> Stmt:
        """A plain statement closure (``n`` has no sync point)."""
        steps = self.steps
        limit = steps.limit
        match n:
            case Let(name, value) | Assign(name, value):
                fv, t, cost = self.expr(value, sc)
                cost += 1
                if isinstance(n, Let):
                    slot = self.slot()
                    sc.vars[name] = (slot, t, False)  # bound after its value: Let x = x + 1 reads outer x
                else:
                    slot, vt, ro = sc.lookup(name)
                    if ro:
                        raise InterpError(f"Assign to {name!r}, which is a loop variable or parameter. "
                                          "Fix: copy it into a Let variable first")
                    self._same(f"Assign to {name!r} (variable, value)", vt, t)

                def let(r: Regs) -> bool:
                    steps.n += cost
                    if steps.n > limit:
                        raise steps.exceeded()
                    r[slot] = fv(r)
                    return False
                return let
            case Store(name, index, value):
                fi, _, ci = self.expr(index, sc)
                fv, tv, cv = self.expr(value, sc)
                self._same(f"Store to {name!r} (buffer element, value)", self._elem(name), tv)
                store, cost = self._store_fn(name), ci + cv + 1

                def st(r: Regs) -> bool:
                    steps.n += cost
                    if steps.n > limit:
                        raise steps.exceeded()
                    i = fi(r)
                    store(i, fv(r))
                    return False
                return st
            case If(cond, then, otherwise):
                fc, cost = self.cond(cond, sc)
                ft, fo = self.seq(then, Scope(sc)), self.seq(otherwise, Scope(sc))

                def if_(r: Regs) -> bool:
                    steps.n += cost
                    if steps.n > limit:
                        raise steps.exceeded()
                    return ft(r) if fc(r) else fo(r)
                return if_
            case Loop():
                slot, fs, fe, cost, inner = self.loop_head(n, sc)
                body = self.seq(n.body, inner)

                def loop(r: Regs) -> bool:
                    steps.n += cost
                    if steps.n > limit:
                        raise steps.exceeded()
                    for v in range(fs(r), fe(r)):
                        steps.n += 1
                        if steps.n > limit:
                            raise steps.exceeded()
                        r[slot] = v
                        if body(r):
                            return True
                    return False
                return loop
            case Block(body) | Region(_, body):
                return self.seq(body, Scope(sc))
            case Return():
                tick = self.tick(1)

                def ret(r: Regs) -> bool:
                    tick()
                    return True
                return ret
            case Barrier():
                raise AssertionError("Barrier is a sync point; vyre.interp.sync compiles it")
            case _:
                raise TypeError(f"not a vyre node: {n!r}")

    def cond(self, cond: Expr, sc: Scope) -> tuple[Ev, int]:
        fc, tc, cc = self.expr(cond, sc)
        if tc is not DataType.BOOL:
            raise InterpError(f"If condition is {tc.short}, expected bool. Fix: compare to build a bool")
        return fc, cc + 1

    def loop_head(self, n: Loop, sc: Scope) -> tuple[int, Ev, Ev, int, Scope]:
        fs, ts, cs = self.expr(n.start, sc)
        fe, te, ce = self.expr(n.end, sc)
        if ts is not DataType.U32 or te is not DataType.U32:
            raise InterpError(f"Loop {n.var!r} bounds are {ts.short}..{te.short}, expected u32. "
                              "Fix: cast the bounds to u32")
        inner = Scope(sc)
        slot = self.slot()
        inner.vars[n.var] = (slot, DataType.U32, True)
        return slot, fs, fe, cs + ce + 1, inner
