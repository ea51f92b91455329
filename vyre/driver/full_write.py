"""Which written buffers a launch provably fills, so an allocation for them needs no zero-fill.

A written buffer the caller does not pass is allocated zero-filled: an element no invocation
stores to reads 0 (docs/semantics.md). On a GPU the fill is a pass over the whole buffer, a sixth
of the memory traffic of a three-buffer elementwise kernel, so callers that allocate per call
(``vyre.dask``, one output per chunk) skip it where it cannot be observed. That is decided from
the IR alone, conservatively; :func:`writes_every_element` is True only when all of these hold:

* the program never reads the buffer (no load, no atomic): its initial contents are never seen;
* the program has no ``Return``: every invocation runs every statement of the entry;
* some store to the buffer is indexed by exactly the invocation id ``gid(0)`` (directly, or a
  ``let`` bound to it and never reassigned, :func:`vyre.driver.coverage` rules) and is reached by
  every invocation below the buffer's length: it sits in the entry's statement list (or a nested
  block) or only under guards ``id < buflen(buffer)`` (``buflen(buffer) > id``).

A launch of at least ``len(buffer)`` invocations along x (:func:`covers`) then stores to every
element before the kernel ends, so any initial contents are overwritten and the zero-fill
changes nothing. Anything else (other guards, loops, indices like ``2 * gid()``) keeps the fill.
"""

from __future__ import annotations

import threading

from ..ir import (
    Atomic, BinOpKind, Block, BufLen, If, Load, Node, Program, Region, Return, Store, node_exprs, walk,
    walk_nodes,
)
from ..ir.expr import BinOp, Expr
from .coverage import _gid_aliases, _is_id

__all__ = ["covers", "writes_every_element"]


def _reads(program: Program, buffer: str) -> bool:
    for n in walk_nodes(program.entry):
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, (Load, Atomic)) and x.buffer == buffer:
                    return True
    return False


def _bounds_guard(cond: Expr, buffer: str, aliases: frozenset[str]) -> bool:
    """``id < buflen(buffer)`` or ``buflen(buffer) > id``: true for every id below the length."""
    if not isinstance(cond, BinOp):
        return False
    if cond.op is BinOpKind.LT:
        return _is_id(cond.left, aliases) and cond.right == BufLen(buffer)
    if cond.op is BinOpKind.GT:
        return cond.left == BufLen(buffer) and _is_id(cond.right, aliases)
    return False


def _stores_by_id(body: tuple[Node, ...], buffer: str, aliases: frozenset[str]) -> bool:
    """Does every invocation below the buffer's length reach a ``buffer[id] = ...`` in ``body``
    (given that no invocation returns early)?"""
    for n in body:
        match n:
            case Store(b, index, _) if b == buffer and _is_id(index, aliases):
                return True
            case If(cond, then, _) if _bounds_guard(cond, buffer, aliases) and _stores_by_id(then, buffer, aliases):
                return True
            case Block(inner) | Region(_, inner) if _stores_by_id(inner, buffer, aliases):
                return True
            case _:
                pass
    return False


def _analyse(program: Program, buffer: str) -> bool:
    if any(isinstance(n, Return) for n in walk_nodes(program.entry)) or _reads(program, buffer):
        return False
    return _stores_by_id(program.entry, buffer, _gid_aliases(program.entry))


_cache: dict[tuple[int, str], tuple[Program, bool]] = {}
_lock = threading.Lock()


def writes_every_element(program: Program, buffer: str) -> bool:
    """True when a launch that :func:`covers` ``buffer`` stores to each of its elements and the
    program never reads it, so its initial contents cannot be observed (see module docs)."""
    hit = _cache.get((id(program), buffer))
    if hit is not None and hit[0] is program:
        return hit[1]
    full = _analyse(program, buffer)
    with _lock:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[(id(program), buffer)] = (program, full)
    return full


def covers(program: Program, grid: tuple[int, ...], length: int) -> bool:
    """Does a launch of ``grid`` workgroups run an invocation for every id below ``length`` along x?"""
    return grid[0] * program.workgroup_size[0] >= length
