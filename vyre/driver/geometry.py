"""Launch geometry shared by every backend (and the interpreter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import DispatchError, VyreError
from ..ir import BufferDecl, Program
from .coverage import check_default_covers

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


def _sized_by(program: Program) -> tuple[BufferDecl, ...]:
    """The buffers the default grid covers: the outputs, else every written storage buffer."""
    hit = _sized_cache.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    outs = tuple(b for b in program.buffers if b.is_output) or tuple(
        b for b in program.buffers if b.access.writable and not b.is_workgroup)
    if len(_sized_cache) > 4096:
        _sized_cache.clear()
    _sized_cache[id(program)] = (program, outs)
    return outs


_sized_cache: dict[int, tuple[Program, tuple[BufferDecl, ...]]] = {}


def default_grid(program: Program, lengths: Mapping[str, int],
                 err: type[VyreError] = DispatchError) -> tuple[int, int, int]:
    """Workgroups along x so the dispatch covers the largest output buffer (one invocation per
    element, as the seed's driver does); at least one workgroup. ``lengths`` maps buffer names to
    element counts.

    Raises ``err`` when that grid is not known to cover the program's work
    (:func:`vyre.driver.coverage.check_default_covers`: ids along y/z, or a buffer indexed by the
    invocation id that is longer than the grid): pass ``dim=`` or ``grid=`` then."""
    n, name = 1, ""
    for b in _sized_by(program):
        m = lengths.get(b.name, b.count)
        if m > n or not name:
            n, name = max(n, m), b.name
    g = (max(1, ceil_div(n, program.workgroup_size[0])), 1, 1)
    check_default_covers(program, lengths, g[0] * program.workgroup_size[0], (name, n), err)
    return g


def check_ids_fit(program: Program, g: tuple[int, int, int]) -> None:
    """Raise DispatchError unless every invocation id of grid ``g`` fits in a u32 (ids are u32:
    docs/semantics.md), axis by axis."""
    for axis, (n, w) in enumerate(zip(g, program.workgroup_size, strict=True)):
        if n * w > 2**32:
            raise DispatchError(
                f"grid {g} with workgroup size {program.workgroup_size} has {n * w} invocations along "
                f"axis {axis}; invocation ids are u32, so at most 2^32 fit. Fix: split the work into "
                "several dispatches, or spread it over more axes")


def flat_invocations(program: Program, g: tuple[int, int, int]) -> int:
    """The invocation count along x of a flat kernel over grid ``g``. A flat program's ids are 1-D,
    so the workgroups of a 2-D or 3-D grid along y and z run the same x-row again: ``gy * gz``
    times, as the interpreter runs them (docs/semantics.md "Invocations")."""
    check_ids_fit(program, g)
    return g[0] * program.workgroup_size[0]


def launch_grid(program: Program, grid: Grid | None, dim: Grid | None) -> Grid | None:
    """The grid (workgroups per axis) a dispatch given ``grid=`` or ``dim=`` (invocations per axis)
    runs; None when neither is given (the default grid). ``dim`` is rounded up to whole workgroups:
    the extra invocations run, as with any grid, and the program's bounds checks keep them out."""
    if dim is None:
        return grid
    if grid is not None:
        raise DispatchError(f"got both grid={grid!r} (workgroups) and dim={dim!r} (invocations). "
                            "Fix: pass only one of them")
    d = grid3(dim, "dim")
    wg = program.workgroup_size
    return (ceil_div(d[0], wg[0]), ceil_div(d[1], wg[1]), ceil_div(d[2], wg[2]))
