"""The interleave pass: K invocations of a flat program run statement by statement in one thread.

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

:func:`interleave` applies these rules once and returns them as *steps* (:class:`Each`,
:class:`StoreAll`, :class:`AllIf`, :class:`Guard`, :class:`Scope`, :class:`Solo`, :class:`Finish`),
which the CUDA emitter prints (vyre/codegen/cuda_interleave.py) without deciding anything;
:func:`as_body` gives the statements back (a step loses none) and :func:`print_interleaved` is the
steps' text, for snapshots.

The hand-over keeps code size near K + 2 copies of the body (the interleaved one, and the
per-invocation function at its two call sites) where per-branch fallbacks would add K more. Its
shape is measured: a variant where the interleaved function returned a flag and the kernel's
loop ran the fallback cost 15-20% of the chain's throughput on an H200.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, assert_never

from ..errors import CodegenError
from ..ir import (
    Assign, Barrier, Block, If, Let, Loop, Node, Program, Region, Return, Store, node_exprs, walk,
    walk_nodes,
)
from ..ir.printer import print_expr, print_statements, quote
from .emit import INTERLEAVE, INTERLEAVE_MIN_INVOCATIONS, has_return
from .simplify import written

__all__ = [
    "INTERLEAVE", "INTERLEAVE_MIN_INVOCATIONS", "MAX_INTERLEAVED_SIZE", "AllIf", "Each", "Finish", "Guard",
    "IStep", "Interleaved", "Scope", "Solo", "StoreAll", "as_body", "body_size", "interleave",
    "print_interleaved", "worth_interleaving",
]

#: Bodies with more statements and expression nodes than this are not interleaved (the interleaved
#: copy multiplies compile time by about K for a gain that shrinks as arithmetic dominates).
MAX_INTERLEAVED_SIZE = 400


def worth_interleaving(program: Program) -> bool:
    """Should the flat kernel of ``program`` carry an interleaved copy of its body?"""
    if body_size(program.entry) > MAX_INTERLEAVED_SIZE:
        return False
    storage = [b for b in program.buffers if not b.is_workgroup]
    return not (storage and all(0 < b.count < INTERLEAVE_MIN_INVOCATIONS for b in storage))


def body_size(body: tuple[Node, ...]) -> int:
    """Statements plus expression nodes: a proxy for how much code a body compiles to."""
    return sum(1 + sum(1 for e in node_exprs(n) for _ in walk(e)) for n in walk_nodes(body))


# ---- the steps --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Each:
    """A ``Let``, ``Assign`` or ``Loop`` run once per invocation, in turn."""

    node: Let | Assign | Loop


@dataclass(frozen=True, slots=True)
class StoreAll:
    """A ``Store``: the K indices and values first, then the K stores."""

    node: Store


@dataclass(frozen=True, slots=True)
class AllIf:
    """An ``If`` free of ``Return``: when the K conditions agree, ``then`` or ``otherwise`` runs
    interleaved; when they disagree, the group goes ``solo`` (nothing written yet) or each
    invocation runs its own branch of ``node``, in turn."""

    node: If
    then: tuple[IStep, ...]
    otherwise: tuple[IStep, ...]
    solo: bool


@dataclass(frozen=True, slots=True)
class Scope:
    """A ``Block`` or ``Region`` free of ``Return``: its body's steps in a nested scope."""

    node: Block | Region
    body: tuple[IStep, ...]


@dataclass(frozen=True, slots=True)
class Solo:
    """The group runs one by one from the start (nothing was written yet); ``rest`` is what the
    invocations had left, from the statement they may disagree on. Always a list's last step."""

    rest: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Finish:
    """Each invocation finishes ``rest`` alone, in turn (a ``Return`` breaks a one-trip loop).
    Always a list's last step."""

    rest: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Guard:
    """An ``If`` with a ``Return`` in one branch only: when every invocation takes the other
    branch (``then`` unless ``returns_in_then``), ``branch`` and then the statements after the
    ``If`` (``rest``) stay interleaved; otherwise ``fallback``. Always a list's last step."""

    node: If
    returns_in_then: bool
    branch: tuple[IStep, ...]
    rest: tuple[IStep, ...]
    fallback: Solo | Finish


IStep: TypeAlias = Each | StoreAll | AllIf | Scope | Guard | Solo | Finish


@dataclass(frozen=True, slots=True)
class Interleaved:
    """The body of a flat program as K invocations interleaved."""

    program: Program
    k: int
    steps: tuple[IStep, ...]


# ---- the pass ---------------------------------------------------------------------------------------
def _steps(body: tuple[Node, ...], wrote: bool) -> tuple[IStep, ...]:
    """``body``'s steps; ``wrote``: did the path to it write memory?"""
    out: list[IStep] = []
    for pos, n in enumerate(body):
        if has_return((n,)):
            out.append(_split(body[pos:], wrote))
            break
        out.append(_step(n, wrote))
        wrote = wrote or bool(written((n,)))
    return tuple(out)


def _step(n: Node, wrote: bool) -> IStep:
    match n:
        case Let() | Assign() | Loop():
            return Each(n)
        case Store():
            return StoreAll(n)
        case If(_, then, otherwise):
            return AllIf(n, _steps(then, wrote), _steps(otherwise, wrote), solo=not wrote)
        case Block(body) | Region(_, body):
            return Scope(n, _steps(body, wrote))
        case Barrier() | Return():
            raise CodegenError(f"{type(n).__name__} cannot be interleaved. Fix: interleave flat "
                               "programs only (vyre.codegen.flat.is_tunable)")
        case _:
            assert_never(n)


def _split(rest: tuple[Node, ...], wrote: bool) -> IStep:
    """``rest`` starts with a statement that holds a ``Return``."""
    fallback = Finish(rest) if wrote else Solo(rest)
    first = rest[0]
    if isinstance(first, If) and not (has_return(first.then) and has_return(first.otherwise)):
        returns_in_then = has_return(first.then)
        branch = first.otherwise if returns_in_then else first.then
        after = wrote or bool(written((first,)))
        return Guard(first, returns_in_then, _steps(branch, wrote), _steps(rest[1:], after), fallback)
    return fallback


def interleave(program: Program, k: int = INTERLEAVE) -> Interleaved:
    """The steps of ``k`` invocations of flat ``program`` (valid, calls inlined) interleaved."""
    if k < 2:
        raise CodegenError(f"interleaving {k} invocations. Fix: interleave 2 or more")
    return Interleaved(program, k, _steps(program.entry, False))


# ---- back to statements, and text -------------------------------------------------------------------
def as_body(steps: tuple[IStep, ...]) -> tuple[Node, ...]:
    """The statements ``steps`` came from (``as_body(interleave(p).steps) == p.entry``)."""
    out: list[Node] = []
    for s in steps:
        match s:
            case Each(n) | StoreAll(n):
                out.append(n)
            case AllIf(n, then, otherwise, _):
                out.append(If(n.cond, as_body(then), as_body(otherwise)))
            case Scope(n, body):
                out.append(Block(as_body(body)) if isinstance(n, Block) else Region(n.generator, as_body(body)))
            case Guard(n, returns_in_then, branch, rest, _):
                b = as_body(branch)
                out.append(If(n.cond, n.then, b) if returns_in_then else If(n.cond, b, n.otherwise))
                out.extend(as_body(rest))
            case Solo(rest) | Finish(rest):
                out.extend(rest)
            case _:
                assert_never(s)
    return tuple(out)


def _prefixed(word: str, n: Node, depth: int) -> list[str]:
    text = print_statements((n,), depth).splitlines()
    pad = "  " * depth
    return [pad + word + " " + text[0][len(pad):], *text[1:]]


def _lines(steps: tuple[IStep, ...], depth: int, out: list[str]) -> None:
    pad = "  " * depth
    for s in steps:
        match s:
            case Each(n):
                out += _prefixed("each", n, depth)
            case StoreAll(n):
                out += _prefixed("store_all", n, depth)
            case AllIf(n, then, otherwise, solo):
                out.append(f"{pad}if all {print_expr(n.cond)} {{")
                _lines(then, depth + 1, out)
                out.append(f"{pad}}} if none {{")
                _lines(otherwise, depth + 1, out)
                out.append(f"{pad}}} else {'solo' if solo else 'each own branch'}")
            case Scope(n, body):
                head = "block" if isinstance(n, Block) else "region " + quote(n.generator, '"')
                out.append(f"{pad}{head} {{")
                _lines(body, depth + 1, out)
                out.append(pad + "}")
            case Guard(n, returns_in_then, branch, rest, fallback):
                out.append(f"{pad}guard if {'none' if returns_in_then else 'all'} {print_expr(n.cond)} {{")
                _lines(branch, depth + 1, out)
                out.append(f"{pad}}} then {{")
                _lines(rest, depth + 1, out)
                out.append(f"{pad}}} else {{")
                _lines((fallback,), depth + 1, out)
                out.append(pad + "}")
            case Solo(rest):
                out.append(f"{pad}solo ({len(rest)} statements left)")
            case Finish(rest):
                out.append(f"{pad}finish each {{")
                if rest:
                    out.append(print_statements(rest, depth + 1))
                out.append(pad + "}")
            case _:
                assert_never(s)


def print_interleaved(il: Interleaved) -> str:
    """The steps' text; statements and expressions as the IR printer (vyre/ir/printer.py) writes them."""
    out = [f"interleaved x{il.k} {{"]
    _lines(il.steps, 1, out)
    out.append("}")
    return "\n".join(out)
