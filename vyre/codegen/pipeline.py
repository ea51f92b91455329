"""The named pass pipeline between a validated Program and an emitter.

Each :class:`Pass` is a function ``Program -> Program`` that keeps the program valid and its results
unchanged (tests/test_codegen_pipeline.py checks both against the reference interpreter, one pass
at a time). :func:`lower` runs :data:`PIPELINE` in order; both emitters print its result, once per
compile. :func:`trace` returns every stage, to test or snapshot a pass alone.

Target-specific lowering that is not (yet) an IR-to-IR pass stays in the emitters: the CPU
lockstep split at synchronisation points (vyre/codegen/cpu.py) and the interleaving of flat CUDA
kernels (vyre/codegen/interleave.py) work on the emitter's own structures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import CodegenError
from ..ir import Program
from .inline import inline_calls
from .simplify import simplify

__all__ = ["PIPELINE", "Pass", "lower", "pass_named", "trace"]


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Program], Program]
    doc: str


PIPELINE: tuple[Pass, ...] = (
    Pass("inline", inline_calls, "substitute every Call by its function's body over the arguments; "
         "emitters never see a Call or a FunctionDef"),
    Pass("simplify", simplify, "fuse adjacent Ifs of one condition and share a Let whose value a "
         "variable in scope already holds (reverse-mode programs replay their forward)"),
)


def pass_named(name: str) -> Pass:
    for p in PIPELINE:
        if p.name == name:
            return p
    raise CodegenError(f"no pass named {name!r}. Fix: use one of {[p.name for p in PIPELINE]}")


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
