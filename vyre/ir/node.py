"""Statements: a closed union of frozen, slotted dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from .expr import Expr

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True, slots=True)
class Let:
    """Bind a new local ``name`` in the current scope (no duplicate in one scope)."""

    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Assign:
    """Overwrite a local bound by ``Let`` (not a loop variable); same type."""

    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Store:
    """``buffer[index] = value``; a store out of bounds does nothing."""

    buffer: str
    index: Expr
    value: Expr


@dataclass(frozen=True, slots=True)
class If:
    cond: Expr
    then: tuple[Node, ...]
    otherwise: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True)
class Loop:
    """``for var in [start, end)`` over u32; bounds evaluated once; empty when end <= start."""

    var: str
    start: Expr
    end: Expr
    body: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Block:
    """A nested scope."""

    body: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Barrier:
    """Synchronise the invocations of one workgroup (workgroup memory becomes visible)."""


@dataclass(frozen=True, slots=True)
class Return:
    """End this invocation."""


@dataclass(frozen=True, slots=True)
class Region:
    """A scope labelled with the generator that produced it (debug and provenance only)."""

    generator: str
    body: tuple[Node, ...]


Node: TypeAlias = Let | Assign | Store | If | Loop | Block | Barrier | Return | Region
NODE_TYPES: tuple[type, ...] = (Let, Assign, Store, If, Loop, Block, Barrier, Return, Region)


def node_exprs(n: Node) -> Iterator[Expr]:
    """Expressions held directly by ``n`` (not those of nested statements); see vyre/ir/schema.py."""
    from .schema import node_exprs as f  # the schema imports this module

    return f(n)


def node_children(n: Node) -> Iterator[tuple[Node, ...]]:
    """Nested statement lists of ``n``; see vyre/ir/schema.py."""
    from .schema import node_bodies

    return node_bodies(n)


def walk_nodes(body: tuple[Node, ...]) -> Iterator[Node]:
    """Pre-order walk of every statement in ``body``."""
    stack = list(reversed(body))
    while stack:
        n = stack.pop()
        yield n
        for sub in reversed(list(node_children(n))):
            stack.extend(reversed(sub))
