"""Prints the interleave pass's steps (vyre/codegen/interleave.py) as the body of the CUDA flat
kernel's ``_vy_interleaved`` function: every decision was made by the pass; this module only
writes each step once per invocation (switching the target's ``lane_k``, the invocation whose ids
the emitter writes) or once for the group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, assert_never

from ..ir import Expr, InvocationId, LitU32, Var
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
            self.em.emit(indent, "pass")

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
                em.emit(indent, f"if {' and '.join(conds)}:")
                self.add_facts(n.cond, scopes)
                self.body(then, [dict(x) for x in scopes], indent + 1)
                em.facts = saved
                em.emit(indent, f"elif not ({' or '.join(conds)}):")
                self.body(otherwise, [dict(x) for x in scopes], indent + 1)
                em.emit(indent, "else:")
                if solo:
                    self.solo(indent + 1)
                    return
                for k in range(self.k):  # each invocation runs its own branch, in turn
                    self._set(k)
                    em.emit(indent + 1, f"if {conds[k]}:")
                    em.facts = saved | em.bound_facts(n.cond, scopes[k])
                    em.block(n.then, dict(scopes[k]), indent + 2)
                    em.facts = saved
                    if n.otherwise:
                        em.emit(indent + 1, "else:")
                        em.block(n.otherwise, dict(scopes[k]), indent + 2)
            case Scope(_, body):
                self.block(body, [dict(x) for x in scopes], indent)
            case Guard(n, returns_in_then, branch, rest, fallback):
                conds = self.conditions(n.cond, scopes, indent)
                saved_facts = em.facts
                if returns_in_then:
                    em.emit(indent, f"if not ({' or '.join(conds)}):")
                else:
                    em.emit(indent, f"if {' and '.join(conds)}:")
                    self.add_facts(n.cond, scopes)
                inner = [dict(x) for x in scopes]
                self.body(branch, [dict(x) for x in inner], indent + 1)
                em.facts = saved_facts
                self.body(rest, inner, indent + 1)
                em.emit(indent, "else:")
                self.step(fallback, scopes, indent + 1)
            case Solo():
                self.solo(indent)
            case Finish(rest):
                self.target.flag_returns = True
                for k in range(self.k):
                    self._set(k)
                    em.emit(indent, "_ret = False")
                    em.emit(indent, "for _once in range(1):")
                    em.block(rest, dict(scopes[k]), indent + 1)
                self.target.flag_returns = False
            case _:
                assert_never(s)

    def solo(self, indent: int) -> None:
        """Hand the whole group to the one-by-one path (nothing has been written yet)."""
        self.em.emit(indent, f"for _q in range({self.k}):")
        self.em.emit(indent + 1, self.solo_call)
        self.em.emit(indent, "return")

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
                em.emit(indent, f"{tmp} = {i}")
                i = tmp
            v = em.fresh("_v")
            em.emit(indent, f"{v} = {em.expr(value, scopes[k])}")
            targets.append((i, v, proven))
        for i, v, proven in targets:
            if proven:
                em.emit(indent, f"{b}[{i}] = {v}")
            else:
                em.emit(indent, f"if {i} < {b}.shape[0]:")
                em.emit(indent + 1, f"{b}[{i}] = {v}")

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
            self.em.emit(indent, f"{c} = {self.em.expr(cond, scopes[k])}")
            out.append(c)
        return out
