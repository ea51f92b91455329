"""Interleaved emission: K invocations of a flat program run statement by statement in one thread.

A CUDA thread that runs its invocations one after another cannot issue the loads of the next before
the stores of the current one: numba cannot tell the compiler that buffers do not alias, so a store
orders every later load after it, and each invocation pays the full memory latency alone. Measured
on an H200 (``bench/gpu_chain_ceiling.py``), that capped a transcendental elementwise chain at 82%
of copy bandwidth. Interleaving K invocations, so that statement ``s`` runs for all K before
statement ``s + 1`` runs for any, puts K invocations' loads in flight at once.

This is a legal schedule: invocations are unordered (``docs/semantics.md``), and running statements
of several invocations in turn is what the lanes of a warp do anyway. The rules:

* ``Let`` / ``Assign`` / ``Loop`` / atomics: emitted once per invocation, in turn.
* ``Store``: the K indices and values are computed first, then the K stores, so no store of one
  invocation sits between the loads of another's value.
* ``If`` (without ``Return`` inside): the K conditions are computed; when they agree, the branch
  runs interleaved.
* A statement holding a ``Return``: when it is an ``If`` with a branch free of ``Return`` and
  every invocation takes that branch, emission stays interleaved.
* Otherwise (the invocations disagree): if nothing so far wrote memory, the K invocations run one
  by one from the start through the per-invocation function, called in a loop (the work so far
  was loads and arithmetic, so nothing is done twice that anyone could see). After a write, each
  invocation finishes on its own, in turn; a ``Return`` there breaks a one-trip loop.

The hand-over keeps code size near K + 2 copies of the body (the interleaved one, and the
per-invocation function at its two call sites) where per-branch fallbacks would add K more. Its
shape is measured: a variant where the interleaved function returned a flag and the kernel's
loop ran the fallback cost 15-20% of the chain's throughput on an H200.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..errors import CodegenError
from ..ir import (
    Assign, Barrier, Block, Expr, If, InvocationId, Let, LitU32, Loop, Node, Program, Region,
    Return, Store, Var, node_exprs, walk, walk_nodes,
)
from .emit import Binding, Emitter, Target, has_return
from .simplify import written

#: Invocations interleaved per thread on CUDA.
INTERLEAVE = 4
#: Bodies with more statements and expression nodes than this are not interleaved (the interleaved
#: copy multiplies compile time by about K for a gain that shrinks as arithmetic dominates).
MAX_INTERLEAVED_SIZE = 400
#: Dispatches of at least this many invocations launch INTERLEAVE per thread by default (fewer
#: would leave the GPU short of threads); programs whose buffers all have static counts below it
#: are not interleaved at all (their dispatches are small: the copy would only cost compile time).
INTERLEAVE_MIN_INVOCATIONS = 1 << 20

Scopes = list[dict[str, Binding]]


class InterleaveTarget(Target, Protocol):
    """A target whose ``InvocationId`` source follows ``lane_k`` (the invocation being emitted)."""

    lane_k: int | None


def worth_interleaving(program: Program) -> bool:
    """Should the flat kernel of ``program`` carry an interleaved copy of its body?"""
    if body_size(program.entry) > MAX_INTERLEAVED_SIZE:
        return False
    storage = [b for b in program.buffers if not b.is_workgroup]
    return not (storage and all(0 < b.count < INTERLEAVE_MIN_INVOCATIONS for b in storage))


def body_size(body: tuple[Node, ...]) -> int:
    """Statements plus expression nodes: a proxy for how much code a body compiles to."""
    return sum(1 + sum(1 for e in node_exprs(n) for _ in walk(e)) for n in walk_nodes(body))


@dataclass
class Interleaver:
    """Emits through ``em`` the body of a function that runs K invocations interleaved, or hands
    them to the one-by-one path before writing anything when they disagree (module docs)."""

    em: Emitter
    target: InterleaveTarget
    k: int
    # runs invocation `_q` of the group alone, from the start (the one-by-one path)
    solo_call: str
    wrote: bool = False  # has the path being emitted written memory yet?

    def _set(self, k: int) -> None:
        self.target.lane_k = k

    def function_body(self, body: tuple[Node, ...], indent: int) -> None:
        self.body(body, [{} for _ in range(self.k)], indent)
        self.target.lane_k = None

    def solo(self, indent: int) -> None:
        """Hand the whole group to the one-by-one path (nothing has been written yet)."""
        self.em.emit(indent, f"for _q in range({self.k}):")
        self.em.emit(indent + 1, self.solo_call)
        self.em.emit(indent, "return")

    def body(self, body: tuple[Node, ...], scopes: Scopes, indent: int) -> None:
        start = len(self.em.lines)
        saved = self.wrote
        self.block(body, scopes, indent)
        self.wrote = saved
        if len(self.em.lines) == start:
            self.em.emit(indent, "pass")

    def block(self, body: tuple[Node, ...], scopes: Scopes, indent: int) -> None:
        saved = self.em.facts
        for pos, n in enumerate(body):
            if has_return((n,)):
                self.split(body[pos:], scopes, indent)
                break
            self.stmt(n, scopes, indent)
            self.wrote = self.wrote or bool(written((n,)))
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
                self.add_facts(cond, scopes)
                self.body(then, [dict(s) for s in scopes], indent + 1)
                em.facts = saved
                em.emit(indent, f"elif not ({' or '.join(conds)}):")
                self.body(otherwise, [dict(s) for s in scopes], indent + 1)
                em.emit(indent, "else:")
                if not self.wrote:
                    self.solo(indent + 1)
                    return
                for k in range(self.k):  # each invocation runs its own branch, in turn
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

    def split(self, rest: tuple[Node, ...], scopes: Scopes, indent: int) -> None:
        """``rest`` starts with a statement that holds a ``Return``."""
        em = self.em
        first = rest[0]
        if isinstance(first, If) and not (has_return(first.then) and has_return(first.otherwise)):
            # when every invocation takes the branch without a Return, stay interleaved
            conds = self.conditions(first.cond, scopes, indent)
            saved_facts = self.em.facts
            if has_return(first.then):
                em.emit(indent, f"if not ({' or '.join(conds)}):")
                branch = first.otherwise
            else:
                em.emit(indent, f"if {' and '.join(conds)}:")
                branch = first.then
                self.add_facts(first.cond, scopes)
            inner = [dict(s) for s in scopes]
            saved = self.wrote
            self.body(branch, [dict(s) for s in inner], indent + 1)
            em.facts = saved_facts
            self.wrote = saved or bool(written((first,)))
            self.body(rest[1:], inner, indent + 1)
            self.wrote = saved
            em.emit(indent, "else:")
            indent += 1
        if not self.wrote:
            self.solo(indent)
            return
        self.target.flag_returns = True
        for k in range(self.k):
            self._set(k)
            em.emit(indent, "_ret = False")
            em.emit(indent, "for _once in range(1):")
            em.block(rest, dict(scopes[k]), indent + 1)
        self.target.flag_returns = False
