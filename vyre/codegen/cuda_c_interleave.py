"""Prints the interleave pass's steps (vyre/codegen/interleave.py) as C++: the body of the NVRTC
route's ``vy_interleaved`` function, as vyre/codegen/cuda_interleave.py prints them for numba.
Every decision was made by the pass; this module writes each step once per invocation (switching
the target's ``lane_k``, the invocation whose ids the emitter writes) or once for the group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from ..ir import Expr, InvocationId, LitU32, Var
from .c_ops import C_TYPE
from .cuda_c import CEmitter, CudaCTarget
from .emit import Binding
from .interleave import AllIf, Each, Finish, Guard, Interleaved, IStep, Scope, Solo, StoreAll

Scopes = list[dict[str, Binding]]


@dataclass
class CInterleavedPrinter:
    """Emits through ``em`` the body of a function that runs ``plan.k`` invocations interleaved;
    ``solo_call(q)``: the statement running invocation ``q`` of the group alone, from the start."""

    em: CEmitter
    target: CudaCTarget
    plan: Interleaved
    solo_call: str  # with ``_q`` for the invocation's index in the group

    @property
    def k(self) -> int:
        return self.plan.k

    def _set(self, k: int) -> None:
        self.target.lane_k = k

    def function_body(self, indent: int) -> None:
        self.block(self.plan.steps, [{} for _ in range(self.k)], indent)
        self.target.lane_k = None

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
                em.emit(indent, f"if ({' && '.join(conds)}) {{")
                self.add_facts(n.cond, scopes)
                self.block(then, [dict(x) for x in scopes], indent + 1)
                em.facts = saved
                em.emit(indent, f"}} else if (!({' || '.join(conds)})) {{")
                self.block(otherwise, [dict(x) for x in scopes], indent + 1)
                em.emit(indent, "} else {")
                if solo:
                    self.solo(indent + 1)
                else:
                    for k in range(self.k):  # each invocation runs its own branch, in turn
                        self._set(k)
                        em.emit(indent + 1, f"if ({conds[k]}) {{")
                        em.facts = saved | em.bound_facts(n.cond, scopes[k])
                        em.block(n.then, dict(scopes[k]), indent + 2)
                        em.facts = saved
                        if n.otherwise:
                            em.emit(indent + 1, "} else {")
                            em.block(n.otherwise, dict(scopes[k]), indent + 2)
                        em.emit(indent + 1, "}")
                em.emit(indent, "}")
            case Scope(_, body):
                em.emit(indent, "{")
                self.block(body, [dict(x) for x in scopes], indent + 1)
                em.emit(indent, "}")
            case Guard(n, returns_in_then, branch, rest, fallback):
                conds = self.conditions(n.cond, scopes, indent)
                saved_facts = em.facts
                if returns_in_then:
                    em.emit(indent, f"if (!({' || '.join(conds)})) {{")
                else:
                    em.emit(indent, f"if ({' && '.join(conds)}) {{")
                    self.add_facts(n.cond, scopes)
                inner = [dict(x) for x in scopes]
                self.block(branch, [dict(x) for x in inner], indent + 1)
                em.facts = saved_facts
                self.block(rest, inner, indent + 1)
                em.emit(indent, "} else {")
                self.step(fallback, scopes, indent + 1)
                em.emit(indent, "}")
            case Solo():
                self.solo(indent)
            case Finish(rest):
                # each invocation finishes on its own; a Return leaves its one-trip loop (and the
                # loops around it, through the `_ret` checks the emitter writes after them)
                self.target.flag_returns = True
                for k in range(self.k):
                    self._set(k)
                    em.emit(indent, "{ bool _ret = false; do {")
                    em.block(rest, dict(scopes[k]), indent + 1)
                    em.emit(indent, "} while (0); (void)_ret; }")
                self.target.flag_returns = False
            case _:
                assert_never(s)

    def solo(self, indent: int) -> None:
        """Hand the whole group to the one-by-one path (nothing has been written yet)."""
        self.em.emit(indent, f"for (int _q = 0; _q < {self.k}; ++_q) {self.solo_call}")
        self.em.emit(indent, "return;")

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
                em.emit(indent, f"unsigned {tmp} = {i};")
                i = tmp
            v = em.fresh("_v")
            t = em.type_of(value, scopes[k])
            em.emit(indent, f"{C_TYPE[t]} {v} = {em.expr(value, scopes[k])};")
            targets.append((i, em.c_store(buf, v), proven))
        for i, v, proven in targets:
            if proven:
                em.emit(indent, f"{b}[{i}] = {v};")
            else:
                em.emit(indent, f"if ((long long){i} < {em.lengths[buf]}) {b}[{i}] = {v};")

    def add_facts(self, cond: Expr, scopes: Scopes) -> None:
        """Bounds that ``cond`` proves for every invocation (all K conditions hold)."""
        for k in range(self.k):
            self._set(k)
            self.em.facts = self.em.facts | self.em.bound_facts(cond, scopes[k])

    def conditions(self, cond: Expr, scopes: Scopes, indent: int) -> list[str]:
        out = []
        for k in range(self.k):
            self._set(k)
            c = self.em.fresh("_c")
            self.em.emit(indent, f"const bool {c} = {self.em.expr(cond, scopes[k])};")
            out.append(c)
        return out

