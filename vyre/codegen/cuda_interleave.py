"""Prints the interleave pass's steps (vyre/codegen/interleave.py) as the body of the CUDA flat
kernel's interleaved function (numba's ``_vy_interleaved``; the NVRTC route's ``vy_interleaved``
through :class:`vyre.codegen.cuda_c.CInterleavedPrinter`): every decision was made by the pass;
this module only writes each step once per invocation (switching the target's ``lane_k``, the
invocation whose ids the emitter writes) or once for the group, in the emitter's syntax (its
hooks, vyre/codegen/emit.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, assert_never

from ..ir import DataType, Expr, InvocationId, LitU32, Node, Var
from .emit import Binding, Emitter, Target
from .interleave import AllIf, Each, Finish, Guard, Interleaved, IStep, Scope, Solo, StoreAll

Scopes = list[dict[str, Binding]]


class InterleaveTarget(Target, Protocol):
    """A target whose ``InvocationId`` source follows ``lane_k`` (the invocation being emitted)."""

    lane_k: int | None


@dataclass
class InterleavedPrinter:
    """Emits through ``em`` the body of a function that runs ``plan.k`` invocations interleaved."""

    em: Emitter
    target: InterleaveTarget
    plan: Interleaved
    # runs invocation `_q` of the group alone, from the start (the one-by-one path)
    solo_call: str

    @property
    def k(self) -> int:
        return self.plan.k

    def _set(self, k: int) -> None:
        self.target.lane_k = k

    def function_body(self, indent: int) -> None:
        self.body(self.plan.steps, [{} for _ in range(self.k)], indent)
        self.target.lane_k = None

    def body(self, steps: tuple[IStep, ...], scopes: Scopes, indent: int) -> None:
        start = len(self.em.lines)
        self.block(steps, scopes, indent)
        if len(self.em.lines) == start:
            self.em.empty_block(indent)

    def block(self, steps: tuple[IStep, ...], scopes: Scopes, indent: int) -> None:
        saved = self.em.facts
        for s in steps:
            self.step(s, scopes, indent)
        self.em.facts = saved

    def step(self, s: IStep, scopes: Scopes, indent: int) -> None:
        em = self.em
        match s:
            case Each(n):
                for k in range(self.k):
                    self._set(k)
                    em.stmt(n, scopes[k], indent)
            case StoreAll(n):
                self.store_all(n.buffer, n.index, n.value, scopes, indent)
            case AllIf(n, then, otherwise, solo):
                conds = self.conditions(n.cond, scopes, indent)
                saved = em.facts
                em.emit(indent, em.if_open(em.all_of(conds)))
                self.add_facts(n.cond, scopes)
                self.body(then, [dict(x) for x in scopes], indent + 1)
                em.facts = saved
                em.emit(indent, em.elif_open(em.none_of(conds)))
                self.body(otherwise, [dict(x) for x in scopes], indent + 1)
                em.emit(indent, em.else_open())
                if solo:
                    self.solo(indent + 1)
                else:
                    for k in range(self.k):  # each invocation runs its own branch, in turn
                        self._set(k)
                        em.emit(indent + 1, em.if_open(conds[k]))
                        em.facts = saved | em.bound_facts(n.cond, scopes[k])
                        em.block(n.then, dict(scopes[k]), indent + 2)
                        em.facts = saved
                        if n.otherwise:
                            em.emit(indent + 1, em.else_open())
                            em.block(n.otherwise, dict(scopes[k]), indent + 2)
                        em.close(indent + 1)
                em.close(indent)
            case Scope(_, body):
                self.block(body, [dict(x) for x in scopes], em.open_scope(indent))
                em.close(indent)
            case Guard(n, returns_in_then, branch, rest, fallback):
                conds = self.conditions(n.cond, scopes, indent)
                saved_facts = em.facts
                if returns_in_then:
                    em.emit(indent, em.if_open(em.none_of(conds)))
                else:
                    em.emit(indent, em.if_open(em.all_of(conds)))
                    self.add_facts(n.cond, scopes)
                inner = [dict(x) for x in scopes]
                self.body(branch, [dict(x) for x in inner], indent + 1)
                em.facts = saved_facts
                self.body(rest, inner, indent + 1)
                em.emit(indent, em.else_open())
                self.step(fallback, scopes, indent + 1)
                em.close(indent)
            case Solo():
                self.solo(indent)
            case Finish(rest):
                # each invocation finishes on its own; a Return leaves its one-trip loop (and the
                # loops around it, through the `_ret` checks the emitter writes after them)
                self.target.flag_returns = True
                for k in range(self.k):
                    self._set(k)
                    self.one_trip(rest, dict(scopes[k]), indent)
                self.target.flag_returns = False
            case _:
                assert_never(s)

    # ---- the two forms only this printer writes (numba Python; cuda_c.py's subclass: C++) ----
    def solo(self, indent: int) -> None:
        """Hand the whole group to the one-by-one path (nothing has been written yet)."""
        self.em.emit(indent, f"for _q in range({self.k}):")
        self.em.emit(indent + 1, self.solo_call)
        self.em.emit(indent, "return")

    def one_trip(self, body: tuple[Node, ...], scope: dict[str, Binding], indent: int) -> None:
        """``body`` in a loop of one trip that a flagged Return breaks out of, setting ``_ret``."""
        self.em.emit(indent, "_ret = False")
        self.em.emit(indent, "for _once in range(1):")
        self.em.block(body, scope, indent + 1)

    def store_all(self, buf: str, index: Expr, value: Expr, scopes: Scopes, indent: int) -> None:
        em = self.em
        d = em.decl(buf)
        b = em.buffer_src[buf]
        targets = []
        for k in range(self.k):
            self._set(k)
            i = em.expr(index, scopes[k])
            proven = em.in_bounds(i, index, d)
            if not isinstance(index, (Var, LitU32, InvocationId)):
                tmp = em.fresh("_i")
                em.emit(indent, em.declare(DataType.U32, tmp, i))
                i = tmp
            v = em.fresh("_v")
            em.emit(indent, em.declare(em.type_of(value, scopes[k]), v, em.expr(value, scopes[k])))
            targets.append((i, em.store_value(buf, v), proven))
        for i, v, proven in targets:
            if proven:
                em.emit(indent, em.store(b, i, v))
            else:
                em.guarded_store(indent, buf, i, v)

    def add_facts(self, cond: Expr, scopes: Scopes) -> None:
        """Bounds that ``cond`` proves for every invocation (all K conditions hold)."""
        for k in range(self.k):
            self._set(k)  # a fact names the index's source, which follows the invocation
            self.em.facts = self.em.facts | self.em.bound_facts(cond, scopes[k])

    def conditions(self, cond: Expr, scopes: Scopes, indent: int) -> list[str]:
        out = []
        for k in range(self.k):
            self._set(k)
            c = self.em.fresh("_c")
            self.em.emit(indent, self.em.declare(DataType.BOOL, c, self.em.expr(cond, scopes[k]), const=True))
            out.append(c)
        return out
