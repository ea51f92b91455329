"""Reversing the loops :mod:`vyre.autodiff.ssa` did not unroll (see docs/autodiff.md, "Loops").

Through a tape (:mod:`vyre.autodiff.checkpoint`) on 1-D grids: the forward replay records the
carried values of every ``stride``-th iteration (:meth:`LoopReverse.taped_loop`), and the reverse
walks the segments last to first, replaying each from its checkpoint (:meth:`LoopReverse.loop_taped`).
Otherwise by recomputation: reverse iteration ``i`` re-runs iterations ``start .. i-1`` from the
loop-entry values (:meth:`LoopReverse.loop`, O(n^2)).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..ir.expr import BinOp, Expr, InvocationId, LitU32, Select, Var, lit
from ..ir.functions import substitute
from ..ir.node import Assign, If, Let, Loop, Node
from ..ir.ops import BinOpKind
from .adjoints import Adjoints, Env
from .checkpoint import LoopTape
from .nf import Carry, NLoop, NStmt, defined, emit, parallel_assign, rename


class LoopReverse(Adjoints, ABC):
    """Loop reversal on top of the adjoint arithmetic; the statement walk (:meth:`block`) and the
    forward replay (:meth:`replay`) come from :class:`vyre.autodiff.reverse._Reverse`."""

    @abstractmethod
    def block(self, stmts: tuple[NStmt, ...], env: Env, out: list[Node]) -> None:
        """Append the adjoint of ``stmts`` (walked last to first) to ``out``."""

    @abstractmethod
    def replay(self, stmts: tuple[NStmt, ...], *, stores: bool = False, initial: bool = False) -> list[Node]:
        """IR recomputing ``stmts``, taping the loops directly in them."""

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

    def loop(self, s: NLoop, env: Env, out: list[Node]) -> None:
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
        child = Env({}, dict(child_proto.acc))
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

    def loop_taped(self, s: NLoop, env: Env, out: list[Node], act_carried: list[Carry],
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
            child = Env({}, dict(child_proto.acc))
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
