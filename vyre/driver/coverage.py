"""Launch coverage: when the default grid is known to cover a program's work, and which buffers
are indexed by the invocation id.

The default grid runs one invocation per element of the largest output along x
(:func:`vyre.driver.geometry.default_grid`). That is right for the elementwise programs it was
made for and silently wrong for others: a 2-D program gets one row, a workgroup reduction sums
one workgroup's worth of its input. This module works out, once per program, what the dispatch
needs to tell the two apart:

* ``axes``: the id axes (1, 2) the program uses besides x; a default grid only ever spans x, so
  such programs must be given ``dim=`` or ``grid=``.
* ``id_indexed``: storage buffers some load, store or atomic indexes with exactly the invocation
  id ``gid(0)`` (directly, or through a ``let`` bound to it and never reassigned). Such a buffer
  has one element per invocation: if it is longer than the default covers, the default would skip
  elements (an error); if two of them disagree in length, some invocations read zeros or write
  nothing (a :class:`LaunchWarning`, an error under ``strict=True``).

Indexing by anything else (``gid() * k + j``, workgroup and local ids) is not judged: the rule
only fires where the mismatch is certain.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..errors import DispatchError, VyreError
from ..ir import (
    Assign, Atomic, Expr, InvocationId, Let, Load, LocalId, Loop, Node, Program, Store, Var,
    WorkgroupId, node_exprs, walk, walk_nodes,
)

__all__ = ["Coverage", "LaunchWarning", "check_default_covers", "check_id_lengths", "coverage"]


class LaunchWarning(UserWarning):
    """Buffers indexed by the invocation id have different lengths (``strict=True``: an error)."""


@dataclass(frozen=True, slots=True)
class Coverage:
    """What the launch checks need to know about one program (see module docs)."""

    axes: tuple[int, ...]
    id_indexed: tuple[str, ...]


def _gid_aliases(body: tuple[Node, ...]) -> frozenset[str]:
    """Names every ``let`` of which binds exactly ``gid(0)`` and that are never reassigned or
    used as a loop variable (so the name means the invocation id wherever it appears)."""
    good: set[str] = set()
    bad: set[str] = set()
    for n in walk_nodes(body):
        match n:
            case Let(name, value):
                (good if value == InvocationId(0) else bad).add(name)
            case Assign(name, _):
                bad.add(name)
            case Loop(var, _, _, _):
                bad.add(var)
            case _:
                pass
    return frozenset(good - bad)


def _is_id(e: Expr, aliases: frozenset[str]) -> bool:
    return e == InvocationId(0) or (isinstance(e, Var) and e.name in aliases)


def _accesses(body: tuple[Node, ...]) -> Iterator[tuple[str, Expr]]:
    """(buffer, index) of every load, store and atomic in ``body``."""
    for n in walk_nodes(body):
        if isinstance(n, Store):
            yield n.buffer, n.index
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, (Load, Atomic)):
                    yield x.buffer, x.index


def _analyse(program: Program) -> Coverage:
    axes: set[int] = set()
    for n in walk_nodes(program.entry):
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, (InvocationId, WorkgroupId, LocalId)) and x.axis != 0:
                    axes.add(x.axis)
    aliases = _gid_aliases(program.entry)
    storage = {b.name for b in program.buffers if not b.is_workgroup}
    indexed: list[str] = []
    for buf, index in _accesses(program.entry):
        if buf in storage and buf not in indexed and _is_id(index, aliases):
            indexed.append(buf)
    order = [b.name for b in program.buffers]
    return Coverage(tuple(sorted(axes)), tuple(sorted(indexed, key=order.index)))


_cache: dict[int, tuple[Program, Coverage]] = {}
_cache_lock = threading.Lock()


def coverage(program: Program) -> Coverage:
    """The program's :class:`Coverage` (worked out once per program object)."""
    hit = _cache.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    cov = _analyse(program)
    with _cache_lock:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[id(program)] = (program, cov)
    return cov


def check_default_covers(program: Program, lengths: Mapping[str, int], invocations: int,
                         sized_by: tuple[str, int], err: type[VyreError] = DispatchError) -> None:
    """Raise ``err`` unless a default grid of ``invocations`` along x is known to cover the work
    (``sized_by``: the output buffer and length it was sized by, for the message)."""
    cov = coverage(program)
    if not cov.axes:  # the common case, on every default-grid dispatch: no string is built
        for name in cov.id_indexed:
            n = lengths.get(name)
            if n is not None and n > invocations:
                break
        else:
            return
    wg = program.workgroup_size
    covered_by = f"output {sized_by[0]!r} of {sized_by[1]} elements" if sized_by[0] else "no output buffer"
    if cov.axes:
        axis = "y" if 1 in cov.axes else "z"
        raise err(
            f"the program uses ids along {axis} (axis {cov.axes[0]}), but the default grid only spans "
            f"x ({invocations} invocations, sized by {covered_by}), so most of the work would not run. "
            f"Fix: pass dim=(nx, ny[, nz]) (invocations per axis) or grid=(gx, gy[, gz]) (workgroups "
            f"of {wg[0]}x{wg[1]}x{wg[2]})")
    for name in cov.id_indexed:
        n = lengths.get(name)
        if n is not None and n > invocations:
            raise err(
                f"buffer {name!r} is indexed by the invocation id and has {n} elements, but the default "
                f"grid runs {invocations} invocations (sized by {covered_by}), so elements "
                f"{invocations}..{n - 1} would be skipped. Fix: pass dim={n} (invocations) or "
                f"grid={-(-n // wg[0])} (workgroups of {wg[0]})")


def check_id_lengths(program: Program, lengths: Mapping[str, int], strict: bool,
                     err: type[VyreError] = DispatchError) -> bool:
    """Warn (``strict``: raise ``err``) when buffers indexed by the invocation id have different
    lengths; True when they agree (or there are fewer than two)."""
    names = coverage(program).id_indexed
    if len(names) < 2:
        return True
    first = lengths.get(names[0])
    for name in names:
        n = lengths.get(name, first)
        if first is None:
            first = n
        elif n != first:
            break
    else:
        return True
    seen = {name: lengths[name] for name in names if name in lengths}
    if len(set(seen.values())) <= 1:
        return True
    listing = ", ".join(f"{k}={v}" for k, v in seen.items())
    msg = (f"buffers indexed by the invocation id have different lengths ({listing}): invocations "
           "past a shorter buffer read zeros from it and their stores to it do nothing. "
           "Fix: pass arrays of one length for these buffers")
    if strict:
        raise err(msg)
    warnings.warn(msg, LaunchWarning, stacklevel=4)
    return False
