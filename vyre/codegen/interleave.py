"""Interleaved emission: K invocations of a flat program run statement by statement in one thread.

A CUDA thread that runs its invocations one after another cannot issue the loads of the next before
the stores of the current one: numba cannot tell the compiler that buffers do not alias, so a store
orders every later load after it, and each invocation pays the full memory latency alone. Measured
on an H200 (``bench/gpu_chain_ceiling.py``), that caps a transcendental elementwise chain near 82% of
copy bandwidth. Interleaving K invocations, so that statement ``s`` runs for all K before statement
``s + 1`` runs for any, puts K invocations' loads in flight at once (K = 4: about 90%).

This is a legal schedule: invocations are unordered (``docs/semantics.md``), and running statements
of several invocations in turn is what the lanes of a warp do anyway. The rules:

* ``Let`` / ``Assign`` / ``Loop`` / atomics: emitted once per invocation, in turn.
* ``Store``: the K indices and values are computed first, then the K stores, so no store of one
  invocation sits between the loads of another's value.
* ``If`` (without ``Return`` inside): the K conditions are computed; when they agree, the branch
  runs interleaved; otherwise each invocation runs its own branch, in turn.
* A statement holding a ``Return``: when it is ``if c { ...return... } else { ... }`` and no
  invocation takes the returning branch, emission stays interleaved; otherwise the rest of the body
  runs once per invocation, in turn, each in a one-trip loop that ``Return`` breaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..errors import CodegenError
from ..ir import (
    Assign, Barrier, Block, Expr, If, InvocationId, Let, LitU32, Loop, Node, Region, Return, Store, Var,
)
from .emit import Binding, Emitter, Target, has_return

#: Invocations interleaved per thread on CUDA.
INTERLEAVE = 4
#: Bodies with more statements and expression nodes than this are not interleaved (the interleaved
#: copy multiplies compile time by about K for a gain that shrinks as arithmetic dominates).
MAX_INTERLEAVED_SIZE = 400

Scopes = list[dict[str, Binding]]


class InterleaveTarget(Target, Protocol):
    """A target whose ``InvocationId`` source follows ``lane_k`` (the invocation being emitted)."""

    lane_k: int | None


@dataclass
class Interleaver:
    """Emits through ``em`` K invocations of a body interleaved (see the module docs)."""

    em: Emitter
    target: InterleaveTarget
    k: int

    def _set(self, k: int) -> None:
        self.target.lane_k = k

    def body(self, body: tuple[Node, ...], scopes: Scopes, indent: int) -> None:
        start = len(self.em.lines)
        self.block(body, scopes, indent)
        if len(self.em.lines) == start:
            self.em.emit(indent, "pass")

    def block(self, body: tuple[Node, ...], scopes: Scopes, indent: int) -> None:
        saved = self.em.facts
        for pos, n in enumerate(body):
            if has_return((n,)):
                self.split(body[pos:], scopes, indent)
                break
            self.stmt(n, scopes, indent)
        self.em.facts = saved

    def each(self, n: Node, scopes: Scopes, indent: int) -> None:
        """``n`` once per invocation, in turn."""
        for k in range(self.k):
            self._set(k)
            self.em.stmt(n, scopes[k], indent)

    def stmt(self, n: Node, scopes: Scopes, indent: int) -> None:
        em = self.em
        match n:
            case Let() | Assign() | Loop():
                self.each(n, scopes, indent)
            case Store(buf, index, value):
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
            case If(cond, then, otherwise):
                conds = self.conditions(cond, scopes, indent)
                saved = em.facts
                em.emit(indent, f"if {' and '.join(conds)}:")
                for k in range(self.k):
                    em.facts = em.facts | em.bound_facts(cond, scopes[k])
                self.body(then, [dict(s) for s in scopes], indent + 1)
                em.facts = saved
                if otherwise:
                    em.emit(indent, f"elif not ({' or '.join(conds)}):")
                    self.body(otherwise, [dict(s) for s in scopes], indent + 1)
                em.emit(indent, "else:")  # the invocations disagree: each runs its own branch
                for k in range(self.k):
                    self._set(k)
                    em.emit(indent + 1, f"if {conds[k]}:")
                    em.facts = saved | em.bound_facts(cond, scopes[k])
                    em.block(then, dict(scopes[k]), indent + 2)
                    em.facts = saved
                    if otherwise:
                        em.emit(indent + 1, "else:")
                        em.block(otherwise, dict(scopes[k]), indent + 2)
            case Block(body) | Region(_, body):
                self.block(body, [dict(s) for s in scopes], indent)
            case Barrier() | Return():
                raise CodegenError(f"{type(n).__name__} cannot be interleaved. Fix: interleave flat "
                                   "programs only (vyre.codegen.flat.is_tunable)")
            case _:
                raise TypeError(f"not a vyre node: {n!r}")

    def conditions(self, cond: Expr, scopes: Scopes, indent: int) -> list[str]:
        out = []
        for k in range(self.k):
            self._set(k)
            c = self.em.fresh("_c")
            self.em.emit(indent, f"{c} = {self.em.expr(cond, scopes[k])}")
            out.append(c)
        return out

    def split(self, rest: tuple[Node, ...], scopes: Scopes, indent: int) -> None:
        """``rest`` starts with a statement that holds a ``Return``."""
        em = self.em
        first = rest[0]
        if isinstance(first, If) and not has_return(first.otherwise):
            conds = self.conditions(first.cond, scopes, indent)
            em.emit(indent, f"if not ({' or '.join(conds)}):")  # nobody returns: stay interleaved
            inner = [dict(s) for s in scopes]
            self.body(first.otherwise, [dict(s) for s in inner], indent + 1)
            self.body(rest[1:], inner, indent + 1)
            em.emit(indent, "else:")
            indent += 1
        self.target.flag_returns = True
        for k in range(self.k):
            self._set(k)
            em.emit(indent, "_ret = False")
            em.emit(indent, "for _once in range(1):")
            em.block(rest, dict(scopes[k]), indent + 1)
        self.target.flag_returns = False
