"""Launch geometry shared by every backend (and the interpreter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import DispatchError
from ..ir import Program

Grid = int | Sequence[int]


def is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def grid3(grid: Grid, what: str = "grid") -> tuple[int, int, int]:
    """``grid`` (or ``workgroup_size``, named by ``what``) as three positive ints."""
    bad = DispatchError(f"{what} must be an int or a sequence of 1-3 ints, got {grid!r}. "
                        f"Fix: pass e.g. {what}=16 or {what}=(16, 1, 1)")
    if is_int(grid):
        g: tuple[object, ...] = (grid,)
    elif isinstance(grid, (tuple, list)):
        g = tuple(grid)
    else:
        raise bad
    if not 1 <= len(g) <= 3 or not all(is_int(v) for v in g):
        raise bad
    gx, gy, gz = (*(int(v) for v in g), 1, 1)[:3]  # type: ignore[call-overload]
    if any(v < 1 or v > 2**31 - 1 for v in (gx, gy, gz)):
        raise DispatchError(f"{what} {(gx, gy, gz)} has a dimension outside [1, 2^31-1]. "
                            "Fix: pass positive counts")
    return gx, gy, gz



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
