"""Reverse mode: ``grad(program, outputs, inputs) -> Program`` (see docs/autodiff.md).

Per invocation the backward program replays the forward computation (stores left out), then runs
the adjoint statements in reverse order. Adjoints of locals are locals with a symbolic zero (no
statement is built until a contribution exists). Across control flow:

* ``If``: the adjoint of the branch taken is run; it recomputes the branch's locals first.
  Adjoints of outer values touched inside become mutable accumulators for the duration.
* ``Loop`` (one not unrolled by :mod:`vyre.autodiff.ssa`): reversed in O(trips) through a tape of
  its carried values with checkpoints (:mod:`vyre.autodiff.checkpoint`); on grids that are not
  1-D, by recomputation: reverse iteration ``i`` re-runs iterations ``start .. i-1`` from the
  loop-entry values (O(n^2); dropped by dead-code elimination when the adjoint does not need the
  carried values). Carried adjoints move to the previous iteration simultaneously.
* Workgroup memory, barriers, subgroup ops, atomic adds (:mod:`vyre.autodiff.sync_reverse`):
  the forward's phases are reversed last to first with their barriers; workgroup buffers get
  adjoints in workgroup memory; values loaded from workgroup memory inside an ``If`` are
  exported past it, since the reverse recomputes branch locals after later phases ran.
* A zero adjoint contributes an exact zero: adjoints that may be a structural zero (an untaken
  select arm, an accumulator nothing reached) are tracked, and rules whose factor reads a primal
  value are applied to them as ``select(d == 0, 0, rule(d))``.
* Gradients of an input accumulate with an atomic add, unless every load of that input is at
  ``InvocationId(0)`` (the invocation's own element): then they are summed in a local and
  written once at the end.
* An output element may be stored more than once per invocation only if the stores are provably
  to different elements or on exclusive branches; otherwise a ``stored_<out>`` flag buffer makes
  only the last store (in forward order) receive the cotangent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..ir.expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, InvocationId, LitF32, LitF64, LitU32, Load, Select,
    SubgroupReduce, SubgroupShuffle, UnOp, Var, children, lit,
)
from ..errors import AutodiffError
from ..ir._checks import MAX_BUFFERS, MAX_WORKGROUP_BYTES
from ..ir.functions import substitute
from ..ir.node import Assign, Barrier, If, Let, Loop, Node, Store
from ..ir.ops import AtomicOp, BinOpKind, UnOpKind
from ..ir.program import BufferAccess, BufferDecl, Program
from ..ir.types import DataType
from .checks import as_program, check_grad_forward, check_request
from .custom import call_contribs, custom_ids, inline_calls
from .checkpoint import LoopTape, TapePlan
from .dce import eliminate_dead_code
from .marks import needs_marks
from .nf import (
    Carry, Names, NBarrier, NIf, NLet, NLoop, NStmt, NStore, Replay, active_names, buffer_loads, defined,
    emit, free_vars, is_atom, parallel_assign, rename,
)
from .prepare import inline_and_rename, remove_returns, source_names
from .rules import BINOP_DERIV, UNOP_DERIV, BinDiff, Ctx, UnDiff, fma_contribs, select_contribs
from .schedule import loads_first
from .ssa import to_normal_form
from .sync_checks import check_loops
from .sync_reverse import subgroup_adjoint, zero_workgroup

GRAD_PREFIX = "grad_"
STORED_PREFIX = "stored_"


@dataclass
class _Env:
    """Adjoints at one nesting level: symbolic ones (atoms) and outer ones being accumulated."""

    adj: dict[str, Expr] = field(default_factory=dict)
    acc: dict[str, str] = field(default_factory=dict)


def _private_key(buf: str) -> str:
    return "@" + buf  # never a variable name


class _Reverse:
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
            self.types[_private_key(b)] = program.buffer(b).element

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
        if isinstance(e, Select) or _is_zero(e):
            return True
        return any(self.may_be_zero(x) for x in children(e) if not isinstance(x, Load))

    def atomize_adj(self, e: Expr, out: list[Node], zeroable: bool) -> Expr:
        v = self.atomize(e, out)
        if zeroable and isinstance(v, Var):
            self.zeroable.add(v.name)
        return v

    def contribute(self, env: _Env, out: list[Node], target: Expr | str, d: Expr) -> None:
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

    def open_scope(self, env: _Env, out: list[Node], targets: set[str]) -> tuple[_Env, dict[str, str]]:
        """Accumulators for the outer adjoints a nested construct may add to."""
        child = _Env({}, dict(env.acc))
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

    def close_scope(self, env: _Env, new: dict[str, str]) -> None:
        for v, a in new.items():
            env.adj[v] = Var(a)

    def targets(self, stmts: tuple[NStmt, ...], extra: set[str]) -> set[str]:
        found = {v for v in free_vars(stmts) | extra if self.is_active(v)}
        found |= {_private_key(ld.buffer) for ld in buffer_loads(stmts) if ld.buffer in self.private}
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

    # -- replay -------------------------------------------------------------------------------

    def replay(self, stmts: tuple[NStmt, ...], *, stores: bool = False, initial: bool = False) -> list[Node]:
        """IR recomputing ``stmts`` (see :func:`emit`), taping the loops directly in ``stmts``:
        :meth:`block` reverses exactly these statements next, in the same scope. The ``initial``
        replay (the whole forward, once) also rebuilds workgroup memory and exports the values
        loaded from it inside ``If`` s; later replays (of a branch or loop body, to recompute its
        locals) read those exports instead."""
        rp = Replay(self.shared if initial else frozenset(), self.exports, initial, self.decls)
        if self.tape is None:
            return emit(stmts, self.names, stores=stores, replay=rp)
        out: list[Node] = []
        for s in stmts:
            if isinstance(s, NLoop) and s.carried:
                out += self.taped_loop(s, stores)
            else:
                out += emit((s,), self.names, stores=stores, replay=rp)
        return out

    def taped_loop(self, s: NLoop, stores: bool) -> list[Node]:
        """The loop, storing its carried values at the start of every ``stride``-th iteration."""
        t = self.tape
        assert t is not None
        n, stride = self.names.fresh("trips"), self.names.fresh("stride")
        c, k, sl = Var(t.c), Var(t.k), Var(t.s)

        def ceil_div(a: Expr, b: Expr) -> Expr:
            return _b(BinOpKind.DIV, _b(BinOpKind.ADD, a, _b(BinOpKind.SUB, b, LitU32(1))), b)

        # Past C trips, segments as long as the S segment slots hold (fewest segments, so the
        # least per-segment work) while the K checkpoint slots suffice; else K segments.
        out: list[Node] = [
            Let(n, Select(_b(BinOpKind.GT, s.end, s.start), _b(BinOpKind.SUB, s.end, s.start), LitU32(0))),
            Let(stride, Select(_b(BinOpKind.LE, Var(n), c), LitU32(1), Select(
                _b(BinOpKind.LE, ceil_div(Var(n), sl), k), sl, ceil_div(Var(n), k)))),
        ]
        cols = {cv.name: t.new_buffer(cv.ty) for cv in s.carried}
        t.loops[s.var] = LoopTape(n, stride, cols)
        out += [Let(cv.name, cv.entry) for cv in s.carried]
        # Every stride-th state goes to the next slot: a countdown to the next record and the
        # record's address (slot * G + invocation) are carried, so an iteration costs a compare
        # and a decrement instead of a division and a remainder.
        due, at = self.names.fresh("due"), self.names.fresh("at")
        out += [Let(due, LitU32(0)), Let(at, InvocationId(0))]
        record = If(_b(BinOpKind.EQ, Var(due), LitU32(0)), (
            If(t.owned(), tuple(t.store_at(cols[cv.name], Var(at), Var(cv.name), cv.ty) for cv in s.carried)),
            Assign(at, _b(BinOpKind.ADD, Var(at), Var(t.g))),
            Assign(due, Var(stride))))
        body: list[Node] = [record, Assign(due, _b(BinOpKind.SUB, Var(due), LitU32(1))),
                            *emit(s.body, self.names, stores=stores)]
        body += parallel_assign([(cv.name, cv.next) for cv in s.carried], self.names)
        out.append(Loop(s.var, s.start, s.end, tuple(body)))
        return out

    # -- statements ---------------------------------------------------------------------------

    def block(self, stmts: tuple[NStmt, ...], env: _Env, out: list[Node]) -> None:
        for s in reversed(stmts):
            match s:
                case NLet(_, _, Atomic()):
                    self.atomic(s, env, out)
                case NLet():
                    self.let(s, env, out)
                case NBarrier():
                    out.append(Barrier())
                case NStore():
                    self.store(s, env, out)
                case NIf():
                    self.if_(s, env, out)
                case NLoop():
                    self.loop(s, env, out)
                case _:
                    raise TypeError(f"not a normal-form statement: {s!r}")

    def let(self, s: NLet, env: _Env, out: list[Node]) -> None:
        d = env.adj.get(s.name)
        if d is None:
            return
        r: Expr = Var(s.name)
        wrap = _identity
        if self.may_be_zero(d):
            # A zero adjoint contributes exactly zero, even where the local derivative is
            # infinite or NaN (the untaken arm of a select: sqrt'(x) at x < 0).
            d = self.atomize_adj(d, out, True)
            zero = lit(0.0, s.ty)
            cond = BinOp(BinOpKind.EQ, d, zero)

            def wrap(e: Expr) -> Expr:
                return e if _linear_in(e, d) else Select(cond, zero, e)
        match s.value:
            case Var() as a:
                self.contribute(env, out, a, d)
            case Load(buf, idx) if buf in self.adj_wg:
                out.append(Let(self.names.fresh("wgadj"), Atomic(AtomicOp.ADD, self.adj_wg[buf], idx, d)))
            case SubgroupReduce() | SubgroupShuffle():
                self.subgroup(s, s.value, d, env, out)
            case Load(buf, idx):
                if buf not in self.inputs:
                    return
                if buf in self.private:
                    self.contribute(env, out, _private_key(buf), d)
                else:
                    out.append(Let(self.names.fresh("scatter"),
                                   Atomic(AtomicOp.ADD, GRAD_PREFIX + buf, idx, d)))
            case BinOp(op, a, b):
                rule = BINOP_DERIV[op]
                assert isinstance(rule, BinDiff), f"{op} on an active float"
                ca, cb = rule.rule(Ctx(a, b, r, s.ty), d)
                if ca is not None:
                    self.contribute(env, out, a, wrap(ca))
                if cb is not None:
                    self.contribute(env, out, b, wrap(cb))
            case UnOp(op, a):
                urule = UNOP_DERIV[op]
                assert isinstance(urule, UnDiff), f"{op} on an active float"
                self.contribute(env, out, a, wrap(urule.rule(Ctx(a, a, r, s.ty), d)))
            case Select(c, a, b):
                ca, cb = select_contribs(c, d, s.ty)
                self.contribute(env, out, a, ca)
                self.contribute(env, out, b, cb)
            case Cast(_, v):
                if isinstance(v, Var) and self.ty(v.name).is_float:
                    src = self.ty(v.name)
                    self.contribute(env, out, v, wrap(d if src == s.ty else Cast(src, d)))
            case Fma(a, b, c):
                ca, cb, cc = fma_contribs(a, b, d)
                self.contribute(env, out, a, wrap(ca))
                self.contribute(env, out, b, wrap(cb))
                self.contribute(env, out, c, wrap(cc))
            case Call(op_id, args):  # a function's custom adjoint (vyre.autodiff.custom)
                for a, c in call_contribs(self.program.function(op_id), args, r, d):
                    self.contribute(env, out, a, wrap(c))
            case _:
                raise TypeError(f"no adjoint for the binding {s!r}")

    def ty_of_buf(self, buf: str) -> DataType:
        return self.program.buffer(buf).element

    def atomic(self, s: NLet, env: _Env, out: list[Node]) -> None:
        """An atomic add whose old value is unused (the checks refuse every other atomic on an
        active buffer): each contribution receives the cotangent of its target element."""
        at = s.value
        assert isinstance(at, Atomic)
        if at.op is not AtomicOp.ADD:
            return
        if at.buffer in self.outputs:
            self.contribute(env, out, at.value, Load(GRAD_PREFIX + at.buffer, at.index))
        elif at.buffer in self.adj_wg:
            d = self.names.fresh("wgd")
            out.append(Let(d, Load(self.adj_wg[at.buffer], at.index)))
            self.zeroable.add(d)
            self.contribute(env, out, at.value, Var(d))

    def subgroup(self, s: NLet, value: Expr, d: Expr, env: _Env, out: list[Node]) -> None:
        """Adjoints of subgroup ops (:func:`.sync_reverse.subgroup_adjoint`)."""
        stmts, operand, contrib = subgroup_adjoint(value, s.name, s.ty, self.atomize(d, out), self.names)
        out += stmts
        self.contribute(env, out, operand, contrib)

    def store(self, s: NStore, env: _Env, out: list[Node]) -> None:
        if s.buffer in self.adj_wg:
            # The stored value takes the element's adjoint; the overwritten value's is zero.
            adj = self.adj_wg[s.buffer]
            d = self.names.fresh("wgd")
            out += [Let(d, Load(adj, s.index)), Store(adj, s.index, lit(0.0, self.ty_of_buf(s.buffer)))]
            self.zeroable.add(d)
            self.contribute(env, out, s.value, Var(d))
            return
        if s.buffer not in self.outputs:
            return
        cot: Expr = Load(GRAD_PREFIX + s.buffer, s.index)
        if s.buffer in self.marked:
            # Only the last store (in forward order) to an element receives its cotangent.
            m = self.names.fresh("seen")
            out.append(Let(m, Atomic(AtomicOp.EXCHANGE, STORED_PREFIX + s.buffer, s.index, LitU32(1))))
            zero = lit(0.0, self.program.buffer(s.buffer).element)
            cot = Select(BinOp(BinOpKind.EQ, Var(m), LitU32(0)), cot, zero)
        self.contribute(env, out, s.value, cot)

    def if_(self, s: NIf, env: _Env, out: list[Node]) -> None:
        seeds = [(p, env.adj[p.name]) for p in s.phis if p.name in env.adj]
        if not seeds and not self.has_store(s.then + s.other):
            return
        branches: list[list[Node]] = []
        extra = {a.name for p, _ in seeds for a in (p.then, p.other) if isinstance(a, Var)}
        extra -= defined(s.then + s.other)
        child_targets = self.targets(s.then + s.other, extra)
        child_proto, new = self.open_scope(env, out, child_targets)
        for stmts, pick in ((s.then, lambda p: p.then), (s.other, lambda p: p.other)):
            subst: dict[str, Expr] = {}
            copy = rename(stmts, subst, self.names)
            body = self.replay(copy)
            child = _Env({}, dict(child_proto.acc))
            for p, d in seeds:
                self.contribute(child, body, substitute(pick(p), subst), d)
            self.block(copy, child, body)
            branches.append(body)
        out.append(If(s.cond, tuple(branches[0]), tuple(branches[1])))
        self.close_scope(env, new)

    def loop(self, s: NLoop, env: _Env, out: list[Node]) -> None:
        live = [c for c in s.carried if self.is_active(c.name) and c.name in env.adj]
        if not live and not self.has_store(s.body):
            return
        act_carried = [c for c in s.carried if self.is_active(c.name)]
        extra = {c.next.name for c in s.carried if isinstance(c.next, Var)} - defined(s.body)
        inner_defs = {s.var} | {c.name for c in s.carried}
        child_targets = self.targets(s.body, extra) - inner_defs
        if self.tape is not None and s.var in self.tape.loops:
            self.loop_taped(s, env, out, act_carried, child_targets)
            return
        child_proto, new = self.open_scope(env, out, child_targets)
        adjc = {}
        for c in act_carried:
            adjc[c.name] = self.names.fresh("adjc")
            self.zeroable.add(adjc[c.name])
            out.append(Let(adjc[c.name], env.adj.get(c.name, lit(0.0, c.ty))))
        k, i, j = self.names.fresh("rk"), self.names.copy_of(s.var), self.names.copy_of(s.var)
        one = LitU32(1)
        it: list[Node] = [Let(i, BinOp(BinOpKind.ADD, BinOp(BinOpKind.SUB, BinOp(
            BinOpKind.SUB, s.end, one), Var(k)), s.start))]
        cc = {c.name: self.names.copy_of(c.name) for c in s.carried}
        it += [Let(cc[c.name], c.entry) for c in s.carried]
        if s.carried:
            # Restore the carried values at the start of iteration i by re-running start .. i-1.
            sub1: dict[str, Expr] = {s.var: Var(j), **{n: Var(m) for n, m in cc.items()}}
            pre = rename(s.body, sub1, self.names)
            pre_body = emit(pre, self.names, stores=False)
            pre_body += parallel_assign([(cc[c.name], substitute(c.next, sub1)) for c in s.carried],
                                        self.names)
            it.append(Loop(j, s.start, Var(i), tuple(pre_body)))
        sub2: dict[str, Expr] = {s.var: Var(i), **{n: Var(m) for n, m in cc.items()}}
        copy = rename(s.body, sub2, self.names)
        it += emit(copy, self.names, stores=False)
        child = _Env({}, dict(child_proto.acc))
        for c in act_carried:
            self.contribute(child, it, substitute(c.next, sub2), Var(adjc[c.name]))
        self.block(copy, child, it)
        # Every carried adjoint moves to the previous iteration at once (a swap a, b = b, a).
        it += parallel_assign([(adjc[c.name], child.adj.get(cc[c.name], lit(0.0, c.ty)))
                               for c in act_carried], self.names)
        out.append(Loop(k, s.start, s.end, tuple(it)))
        # Close first: an entry value may itself be one of the accumulated targets.
        self.close_scope(env, new)
        for c in act_carried:
            self.contribute(env, out, c.entry, Var(adjc[c.name]))

    def loop_taped(self, s: NLoop, env: _Env, out: list[Node], act_carried: list[Carry],
                   child_targets: set[str]) -> None:
        """Reverse a loop whose replay taped its carried values (see :mod:`.checkpoint`):
        segments last to first; a segment of more than one iteration is first replayed from
        its checkpoint into the segment slots; then its iterations are reversed, each restoring
        its carried values from the tape, recomputing its locals and running its adjoint."""
        t = self.tape
        assert t is not None
        lt = t.loops[s.var]
        fresh = self.names.fresh
        u32 = LitU32
        n, stride = Var(lt.trips), Var(lt.stride)
        kk, ss = Var(t.k), Var(t.s)
        child_proto, new = self.open_scope(env, out, child_targets)
        adjc: dict[str, str] = {}
        for c in act_carried:
            adjc[c.name] = fresh("adjc")
            d0 = env.adj.get(c.name, lit(0.0, c.ty))
            if self.may_be_zero(d0):  # else only if the body can make it zero (below)
                self.zeroable.add(adjc[c.name])
            out.append(Let(adjc[c.name], d0))
        # Segments: with every state on the tape (stride 1, n <= C) the whole loop is one
        # segment whose state t sits in slot t; else segment ``seg`` (``stride`` iterations from
        # checkpoint slot ``seg``) is first replayed into the segment slots K, K+1, ...
        multi, seglen, nseg = fresh("multi"), fresh("seglen"), fresh("nseg")
        out += [Let(multi, _b(BinOpKind.GT, stride, u32(1))),
                Let(seglen, Select(Var(multi), stride, n)),
                Let(nseg, Select(_b(BinOpKind.EQ, n, u32(0)), u32(0), Select(Var(multi), _b(
                    BinOpKind.DIV, _b(BinOpKind.ADD, n, _b(BinOpKind.SUB, stride, u32(1))), stride), u32(1))))]
        rs, seg_i, base, ln = fresh("rs"), fresh("seg"), fresh("base"), fresh("len")
        seg: list[Node] = [
            Let(seg_i, _b(BinOpKind.SUB, _b(BinOpKind.SUB, Var(nseg), u32(1)), Var(rs))),
            Let(base, _b(BinOpKind.MUL, Var(seg_i), Var(seglen))),
            Let(ln, _b(BinOpKind.MIN, Var(seglen), _b(BinOpKind.SUB, n, Var(base)))),
        ]
        first = _b(BinOpKind.ADD, s.start, Var(base))

        def advance(state: dict[str, str], var: Expr, record: list[Node]) -> list[Node]:
            sub: dict[str, Expr] = {s.var: var, **{c.name: Var(state[c.name]) for c in s.carried}}
            copy = rename(s.body, sub, self.names)
            body = record + emit(copy, self.names, stores=False)
            return body + parallel_assign([(state[c.name], substitute(c.next, sub)) for c in s.carried],
                                          self.names)

        def slot(k: Expr) -> Expr:
            """The slot holding the state at the start of the segment's iteration ``k``: the
            segment slots (the checkpoint, to recompute from, past the first S of them)."""
            return Select(Var(multi), Select(_b(BinOpKind.LT, k, ss), _b(BinOpKind.ADD, kk, k), Var(seg_i)), k)

        # Replay the segment from its checkpoint, storing the states that fit the segment slots.
        st = {c.name: self.names.copy_of(c.name) for c in s.carried}
        seg += [Let(st[c.name], t.load(lt.columns[c.name], Var(seg_i), c.ty)) for c in s.carried]
        j = fresh("rj")
        rec: list[Node] = [If(_b(BinOpKind.AND, _b(BinOpKind.LT, Var(j), ss), t.owned()), tuple(
            t.store(lt.columns[c.name], _b(BinOpKind.ADD, kk, Var(j)), Var(st[c.name]), c.ty)
            for c in s.carried))]
        seg.append(Loop(j, u32(0), Select(Var(multi), Var(ln), u32(0)),
                        tuple(advance(st, _b(BinOpKind.ADD, first, Var(j)), rec))))
        # Reverse the segment's iterations. The state of the next one (t - 1) is loaded one
        # iteration ahead, so the tape's memory latency overlaps this iteration's work instead
        # of stalling its start.
        pre = {c.name: fresh("pre") for c in s.carried}
        seg += [Let(pre[c.name], t.load(lt.columns[c.name], slot(_b(BinOpKind.SUB, Var(ln), u32(1))), c.ty))
                for c in s.carried]
        r2, tt, nxt = fresh("rt"), fresh("t"), fresh("tnext")
        it: list[Node] = [
            Let(tt, _b(BinOpKind.SUB, _b(BinOpKind.SUB, Var(ln), u32(1)), Var(r2))),
            Let(nxt, Select(_b(BinOpKind.GT, Var(tt), u32(0)), _b(BinOpKind.SUB, Var(tt), u32(1)), u32(0))),
        ]
        cc = {c.name: self.names.copy_of(c.name) for c in s.carried}
        it += [Let(cc[c.name], Var(pre[c.name])) for c in s.carried]
        it += [Assign(pre[c.name], t.load(lt.columns[c.name], slot(Var(nxt)), c.ty)) for c in s.carried]
        # States past the segment slots (more than about C^2/4 trips) are recomputed from the
        # segment's checkpoint (the slot read for them).
        f = fresh("rf")
        far = _b(BinOpKind.AND, Var(multi), _b(BinOpKind.GE, Var(tt), ss))
        it.append(Loop(f, u32(0), Select(far, Var(tt), u32(0)),
                       tuple(advance(cc, _b(BinOpKind.ADD, first, Var(f)), []))))
        head = it
        for _ in range(2):
            # Built once assuming the carried adjoints are never a structural zero; if the body
            # can make one zero (an untaken select arm), rebuilt with their rules guarded.
            it = list(head)
            i = self.names.copy_of(s.var)
            it.append(Let(i, _b(BinOpKind.ADD, first, Var(tt))))
            sub2: dict[str, Expr] = {s.var: Var(i), **{n_: Var(m) for n_, m in cc.items()}}
            copy = rename(s.body, sub2, self.names)
            it += self.replay(copy)
            child = _Env({}, dict(child_proto.acc))
            for c in act_carried:
                self.contribute(child, it, substitute(c.next, sub2), Var(adjc[c.name]))
            self.block(copy, child, it)
            nexts = [(adjc[c.name], child.adj.get(cc[c.name], lit(0.0, c.ty))) for c in act_carried]
            late = [a for a, d in nexts if a not in self.zeroable and self.may_be_zero(d)]
            if not late:
                break
            self.zeroable.update(late)
        it += parallel_assign(nexts, self.names)
        seg.append(Loop(r2, u32(0), Var(ln), tuple(it)))
        out.append(Loop(rs, u32(0), Var(nseg), tuple(seg)))
        self.close_scope(env, new)
        for c in act_carried:
            self.contribute(env, out, c.entry, Var(adjc[c.name]))


def _b(op: BinOpKind, a: Expr, b: Expr) -> BinOp:
    return BinOp(op, a, b)


def _identity(e: Expr) -> Expr:
    return e


def _linear_in(e: Expr, d: Expr) -> bool:
    """Whether ``e`` is exactly zero when ``d`` is: built from ``d`` with negation, finite literal
    factors, sums and selects (whose conditions may read anything), and no other value."""
    match e:
        case _ if e == d:
            return True
        case LitF32() | LitF64():
            return math.isfinite(e.value)
        case Select(_, a, b):
            return _linear_in(a, d) and _linear_in(b, d)
        case UnOp(UnOpKind.NEGATE, a) | Cast(_, a):
            return _linear_in(a, d)
        case BinOp(BinOpKind.ADD | BinOpKind.SUB, a, b):
            return _linear_in(a, d) and _linear_in(b, d) and not (_is_lit(a) or _is_lit(b))
        case BinOp(BinOpKind.MUL, a, b):
            return (_linear_in(a, d) and _is_lit(b)) or (_is_lit(a) and _linear_in(b, d))
        case _:
            return False


def _is_zero(e: Expr) -> bool:
    return isinstance(e, LitF32 | LitF64) and e.value == 0.0


def _is_lit(e: Expr) -> bool:
    return isinstance(e, LitF32 | LitF64)


def grad(program: Program, outputs: str | Sequence[str], inputs: str | Sequence[str], *, accumulate: bool = True,
         grid_1d: bool = True, with_value: bool = False, unit_cotangent: bool = False) -> Program:
    """The backward (vector-Jacobian product) program of ``program``.

    Buffers: every forward buffer (read-only; bind it with its *pre-forward* contents), then for
    each output ``grad_<out>`` (read-only cotangent, same element type and length), for each
    output that one invocation may store twice ``stored_<out>`` (u32 flags, zero-filled, same
    length), and for each input ``grad_<in>`` (read-write output, same element type and length).
    Gradients are *added* into ``grad_<in>``: zero-fill it (or pass a gradient to accumulate
    onto). With ``accumulate=False``, gradients private to an invocation are stored instead of
    added (saves a read); atomically accumulated ones still need the zero fill.

    Dispatch the backward with the forward's grid (its default grid covers the gradient buffers,
    not the forward's outputs); the runners in :mod:`vyre.autodiff` do this. ``grid_1d=False``
    says the grid will have more than one workgroup along y or z, so ``InvocationId(0)`` does not
    identify an invocation and every gradient is accumulated atomically.

    Fusion options, for value-and-gradient in one pass: ``with_value=True`` keeps the forward's
    stores in the backward (every buffer the forward writes is then written here too, with the
    forward's values), so one dispatch yields the outputs and the gradients. ``unit_cotangent=True``
    takes every cotangent to be 1 (the gradient of ``sum(output)``) and drops the ``grad_<out>``
    buffers: a store the forward would drop (out of bounds) still gets cotangent 0.

    ``outputs`` and ``inputs`` are each a buffer name or a list of names; ``program`` may be a
    ``@vyre.kernel`` function. Raises :class:`vyre.errors.AutodiffError` (naming the statement and
    the fix) for programs it cannot differentiate exactly; see docs/autodiff.md."""
    program = as_program(program)
    program.validate()
    outs, ins = check_request(program, outputs, inputs, (GRAD_PREFIX, STORED_PREFIX))
    names = Names(source_names(program))
    body = inline_and_rename(program, names, custom_ids(program))
    check_grad_forward(program, body, outs, ins)
    body = remove_returns(body, names)
    stmts, types = to_normal_form(program, body, names)
    check_loops(stmts, frozenset(b.name for b in program.buffers if b.is_workgroup))
    stmts = loads_first(stmts)  # the replay issues loads before the arithmetic (schedule.py)
    private_ok = grid_1d and program.workgroup_size[1:] == (1, 1)
    opts = (accumulate, with_value, unit_cotangent)
    result = _build(program, stmts, types, names, outs, ins, private_ok, private_ok, opts)
    if len(result.buffers) > MAX_BUFFERS:  # too many tapes: reverse loops by recomputation
        result = _build(program, stmts, types, names, outs, ins, private_ok, False, opts)
    return result  # dispatch validates it (before compiling); the tests validate every shape


def _build(program: Program, stmts: tuple[NStmt, ...], types: dict[str, DataType], names: Names,
           outs: list[str], ins: list[str], private_ok: bool, taped: bool,
           opts: tuple[bool, bool, bool]) -> Program:
    accumulate, with_value, unit_cotangent = opts
    tape = None
    if taped:
        taken = {b.name for b in program.buffers}
        info = next(n for n in ("tape_info", *(f"tape_info{k}" for k in range(1, 100))) if n not in taken)
        taken.add(info)
        tape = TapePlan(info, taken, names.fresh("tape_c"), names.fresh("tape_k"), names.fresh("tape_s"),
                        names.fresh("tape_g"))
    rev = _Reverse(program, stmts, dict(types), names, outs, ins, private_ok=private_ok, tape=tape)
    wg_bytes = sum(b.count * b.element.size_bytes for b in program.buffers if b.is_workgroup)
    wg_bytes += sum(program.buffer(w).count * program.buffer(w).element.size_bytes for w in rev.adj_wg)
    if wg_bytes > MAX_WORKGROUP_BYTES:
        raise AutodiffError(
            f"the backward program needs {wg_bytes} bytes of workgroup memory (the forward's buffers "
            f"and an adjoint for each of {sorted(rev.adj_wg)}), more than {MAX_WORKGROUP_BYTES}. "
            "Fix: use smaller workgroup buffers (at most half the limit)")
    replay = rev.replay(stmts, stores=with_value, initial=True)
    entry: list[Node] = tape.prologue() if tape is not None else []
    entry += zero_workgroup(rev.adj_wg, program, names) + rev.decls + replay
    env = _Env()
    rev.block(stmts, env, entry)
    gid = InvocationId(0)
    for b in ins:
        d = env.adj.get(_private_key(b))
        if b in rev.private and d is not None:
            g = GRAD_PREFIX + b
            entry.append(Store(g, gid, BinOp(BinOpKind.ADD, Load(g, gid), d) if accumulate else d))
    buffers = [b if (with_value and b.access.writable) or b.is_workgroup else
               BufferDecl(b.name, b.binding, BufferAccess.UNIFORM if b.access is BufferAccess.UNIFORM
                          else BufferAccess.READ_ONLY, b.element, b.count, False)
               for b in program.buffers]
    binding = max((b.binding for b in program.buffers), default=-1) + 1
    for name in outs:
        if unit_cotangent:
            continue
        d0 = program.buffer(name)
        buffers.append(BufferDecl(GRAD_PREFIX + name, binding, BufferAccess.READ_ONLY, d0.element, d0.count))
        binding += 1
    for name in outs:
        if name in rev.marked:
            d0 = program.buffer(name)
            buffers.append(BufferDecl(STORED_PREFIX + name, binding, BufferAccess.READ_WRITE,
                                      DataType.U32, d0.count))
            binding += 1
    for name in ins:
        d0 = program.buffer(name)
        buffers.append(BufferDecl(GRAD_PREFIX + name, binding, BufferAccess.READ_WRITE, d0.element,
                                  d0.count, is_output=True))
        binding += 1
    buffers += [BufferDecl.workgroup(a, program.buffer(w).count, program.buffer(w).element)
                for w, a in rev.adj_wg.items()]
    scratch = frozenset(tape.buffers) if tape is not None else frozenset()
    scratch |= rev.shared | frozenset(rev.adj_wg.values())
    used: set[str] = set()
    body_out = eliminate_dead_code(tuple(entry), scratch, used)
    if tape is not None:
        body_out = tape.finish(body_out, used)
        buffers += tape.declare(used, binding)
    body_out = inline_calls(body_out, program)  # custom adjoints' calls (vyre.autodiff.custom)
    if unit_cotangent:
        body_out = _unit_cotangents(body_out, program, outs)
    return Program(tuple(buffers), program.workgroup_size, body_out, ())


def _unit_cotangents(body: tuple[Node, ...], program: Program, outs: list[str]) -> tuple[Node, ...]:
    """Replace each cotangent load ``grad_<out>[i]`` by ``select(i < len(out), 1, 0)``."""
    from ..ir.transform import map_exprs

    loads = {GRAD_PREFIX + o: o for o in outs}

    def rewrite(e: Expr) -> Expr:
        if isinstance(e, Load) and e.buffer in loads:
            out = loads[e.buffer]
            t = program.buffer(out).element
            one, zero = (LitF32(1.0), LitF32(0.0)) if t is DataType.F32 else (LitF64(1.0), LitF64(0.0))
            return Select(BinOp(BinOpKind.LT, e.index, BufLen(out)), one, zero)
        return e

    return map_exprs(body, rewrite)


__all__ = ["GRAD_PREFIX", "STORED_PREFIX", "grad"]
