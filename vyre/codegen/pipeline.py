"""The named pass pipeline between a validated Program and an emitter.

Each :class:`Pass` is a function ``Program -> Program`` that keeps the program valid and its results
unchanged (tests/test_codegen_pipeline.py checks both against the reference interpreter, one pass
at a time). :func:`lower` runs :data:`PIPELINE` in order; both emitters print its result, once per
compile. :func:`trace` returns every stage, to test or snapshot a pass alone.

After it, a target's :class:`Lowering` turns the program into the lowered form its emitter prints
without deciding anything (:data:`LOWERINGS`):

* ``lockstep`` (CPU, programs with barriers or subgroup operations): the body cut into segments
  run for every lane, subgroup exchanges between them and uniform loops around them
  (vyre/codegen/lockstep.py);
* ``interleave`` (CUDA, flat programs worth it): the steps that run K invocations statement by
  statement in one thread, with the hand-overs to the one-by-one path
  (vyre/codegen/interleave.py).

Lowered forms are codegen-only types (frozen dataclasses in closed unions around statements of
the public IR); each has a printer (the golden snapshots under tests/golden/lowered/) and a way
back to the public IR that tests compare against the input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, Any

from ..errors import CodegenError
from ..ir import Program
from .bounds import prune_guards
from .flat import is_tunable
from .inline import inline_calls
from .interleave import Interleaved, interleave, print_interleaved, worth_interleaving
from .lockstep import Lockstep, needs_lockstep, print_lockstep, split_lockstep
from .simplify import simplify

__all__ = [
    "CPU_PASSES", "LOWERINGS", "PIPELINE", "Lowering", "Pass", "interleaved_form", "lockstep_form", "lower",
    "lower_cpu", "lowering_named", "pass_named", "trace",
]


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Program], Program]
    doc: str


_Named = TypeVar("_Named", "Pass", "Lowering")

PIPELINE: tuple[Pass, ...] = (
    Pass("inline", inline_calls, "substitute every Call by its function's body over the arguments; "
         "emitters never see a Call or a FunctionDef"),
    Pass("simplify", simplify, "fuse adjacent Ifs of one condition and share a Let whose value a "
         "variable in scope already holds (reverse-mode programs replay their forward)"),
)


#: Passes only the CPU emitter runs, after :data:`PIPELINE`. ``bounds`` is CPU-only because the
#: CUDA emitters (and the CUDA C printer) drop per-access guards only under an enclosing ``If``
#: they can read syntactically; removing a proven ``If`` would give them back their checks.
CPU_PASSES: tuple[Pass, ...] = (
    Pass("bounds", prune_guards, "drop If guards that the value-range prover (vyre/codegen/ranges.py) "
         "shows always true; the CPU emitter asks the same prover per access"),
)


def pass_named(name: str) -> Pass:
    return _named(PIPELINE + CPU_PASSES, name, "pass")


def trace(program: Program) -> list[tuple[str, Program]]:
    """``[("input", program), (pass name, program after it), ...]`` through the whole pipeline."""
    out = [("input", program)]
    for p in PIPELINE:
        program = p.run(program)
        out.append((p.name, program))
    return out


def lower(program: Program) -> Program:
    """``program`` after every pass of :data:`PIPELINE` (the emitters' input)."""
    for p in PIPELINE:
        program = p.run(program)
    return program


def lower_cpu(program: Program) -> Program:
    """:func:`lower`, then :data:`CPU_PASSES` (the CPU emitter's input)."""
    program = lower(program)
    for p in CPU_PASSES:
        program = p.run(program)
    return program


@dataclass(frozen=True)
class Lowering:
    """A target's last pass: :func:`lower`'s program to the form its emitter prints. ``applies``
    says whether the emitter uses it for a program; ``text`` prints the form (snapshots)."""

    name: str
    target: str
    applies: Callable[[Program], bool]
    run: Callable[[Program], object]
    text: Callable[[Any], str]
    doc: str


def _interleaves(program: Program) -> bool:
    return is_tunable(program) and worth_interleaving(program)


def lockstep_form(program: Program) -> Lockstep | None:
    """The CPU emitter's input for :func:`lower`'s ``program``: its lockstep form, or None when it
    has no barrier or subgroup operation (the ``lockstep`` lowering)."""
    return split_lockstep(program) if needs_lockstep(program) else None


def interleaved_form(program: Program) -> Interleaved | None:
    """The CUDA flat emitter's interleaved body for :func:`lower`'s ``program``, or None when the
    program is not flat or not worth it (the ``interleave`` lowering)."""
    return interleave(program) if _interleaves(program) else None


LOWERINGS: tuple[Lowering, ...] = (
    Lowering("lockstep", "cpu", needs_lockstep, split_lockstep, print_lockstep,
             "cut a program with barriers or subgroup operations into segments run for every lane, "
             "subgroup exchanges and uniform loops"),
    Lowering("interleave", "cuda", _interleaves, interleave, print_interleaved,
             "run K invocations of a flat program statement by statement in one thread, handing the "
             "group to the one-by-one path where they disagree"),
)


def lowering_named(name: str) -> Lowering:
    return _named(LOWERINGS, name, "lowering")


def _named(items: tuple[_Named, ...], name: str, kind: str) -> _Named:
    for x in items:
        if x.name == name:
            return x
    raise CodegenError(f"no {kind} named {name!r}. Fix: use one of {[x.name for x in items]}")
