"""The one way vyre's own IR programs are run: a *runner* callable over arrays.

``run(program, arrays, grid) -> outputs``: ``arrays`` holds one array per storage buffer of
``program`` in declaration order (numpy, or device arrays on CUDA), ``grid`` is the number of
workgroups (None: the driver's default), and the result holds the program's output buffers
(:func:`output_decls`) in declaration order, of the kind that went in. :func:`driver_runner` runs
through :func:`vyre.dispatch`; tests pass small fakes; the self-substrate's byte-level dispatchers
adapt to it (:func:`vyre.self_substrate.as_runner`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..driver.dispatch import dispatch
from ..errors import DispatchError
from ..ir import BufferDecl, Program

__all__ = ["Grid3", "Runner", "driver_runner", "output_decls", "storage_decls"]

Grid3 = tuple[int, int, int]
Runner = Callable[[Program, Sequence[Any], "Grid3 | None"], list[Any]]


def storage_decls(program: Program) -> list[BufferDecl]:
    """Buffers a runner takes arrays for: every non-workgroup buffer, declaration order."""
    return [b for b in program.buffers if not b.is_workgroup]


def output_decls(program: Program) -> list[BufferDecl]:
    """Buffers a runner returns: those marked ``is_output`` (else every writable storage buffer),
    in declaration order."""
    marked = [b for b in storage_decls(program) if b.is_output]
    return marked or [b for b in storage_decls(program) if b.access.writable]


def driver_runner(backend: str | None = None) -> Runner:
    """A runner over :func:`vyre.dispatch` on ``backend`` (None: the driver's default). Errors are
    the driver's own (:class:`vyre.errors.DispatchError` and friends)."""

    def run(program: Program, arrays: Sequence[Any], grid: Grid3 | None) -> list[Any]:
        decls = storage_decls(program)
        if len(arrays) != len(decls):
            raise DispatchError(f"got {len(arrays)} arrays for the {len(decls)} storage buffers "
                                f"{[d.name for d in decls]}. Fix: pass one array per storage buffer, "
                                "in declaration order")
        res = dispatch(program, {d.name: a for d, a in zip(decls, arrays, strict=True)}, backend=backend,
                       grid=grid)
        return [res[d.name] for d in output_decls(program)]

    return run
