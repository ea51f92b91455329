"""Launch geometry shared by every backend (and the interpreter)."""

from __future__ import annotations

from collections.abc import Mapping

from ..ir import Program


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def default_grid(program: Program, lengths: Mapping[str, int]) -> tuple[int, int, int]:
    """Workgroups along x so the dispatch covers the largest output buffer (one invocation per
    element, as the seed's driver does); at least one workgroup. ``lengths`` maps buffer names to
    element counts."""
    outs = [lengths.get(b.name, b.count) for b in program.buffers if b.is_output]
    if not outs:
        outs = [lengths.get(b.name, b.count) for b in program.buffers if b.access.writable and not b.is_workgroup]
    n = max(outs, default=1)
    return (max(1, ceil_div(n, program.workgroup_size[0])), 1, 1)
