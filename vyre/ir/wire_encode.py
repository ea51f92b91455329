"""The wire format's encoder (see :mod:`vyre.ir.wire` for the layout): an iterative pre-order
writer whose per-class plans are derived from the IR schema (``_WRITERS``: one entry per field kind).
"""

from __future__ import annotations

# Packed imports, as in the IR core.
# isort: off
import enum
from collections.abc import Callable, Sequence
from typing import Any

from .expr import Expr, FunctionAdjoint, FunctionDef, children
from .schema import EXPR_FIELDS, NODE_FIELDS, F
from .node import Node
from .ops import AtomicOp, BinOpKind, UnOpKind
from .program import BufferAccess, BufferDecl, Program
from .types import DataType
from .wire_layout import (
    EXPR_TAGS, FIX_ENCODE, I32, MAX_EXPR_DEPTH, MAX_IDENT_BYTES, MAX_LABEL_BYTES, MAX_NODES, MAX_STMT_DEPTH,
    NODE_TAGS, U16, U32, U64, describe, field_what, wire_error,
)
# isort: on

_U16_MAX = 0xFFFF


class _Encoder:
    """Pre-order, iterative encoder (deep trees do not recurse)."""

    def __init__(self, limits: bool) -> None:
        self.out = bytearray()
        self.limits = limits
        self.nodes = 0

    def u32(self, v: int, what: str) -> None:
        self.uint(v, 0xFFFFFFFF, what)
        self.out += U32.pack(v)

    def uint(self, v: object, hi: int, what: str) -> None:
        if not isinstance(v, int) or not 0 <= v <= hi:
            raise wire_error(f"cannot encode {what} {v!r}: expected an int in [0, {hi}]", FIX_ENCODE)

    def flag(self, v: object) -> None:
        self.out.append(1 if v else 0)

    def enum(self, v: object, enum_type: type[enum.IntEnum], what: str) -> None:
        if not isinstance(v, enum_type):
            raise wire_error(f"cannot encode {what} {v!r}: expected a {enum_type.__name__}", FIX_ENCODE)
        self.out.append(int(v))

    def text(self, s: object, limit: int, what: str) -> None:
        if not isinstance(s, str):
            raise wire_error(f"cannot encode {what} {s!r}: expected a str", FIX_ENCODE)
        try:
            raw = s.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise wire_error(f"cannot encode {what} {s!r}: not valid UTF-8 ({exc.reason})", FIX_ENCODE) from None
        cap = limit if self.limits else _U16_MAX
        if len(raw) > cap:
            raise wire_error(
                      f"cannot encode {what} {s[:32]!r}...: {len(raw)} UTF-8 bytes, the limit is {cap}",
                      "use a shorter name",
                  )
        self.out += U16.pack(len(raw))
        self.out += raw

    def count(self) -> None:
        self.nodes += 1
        if self.limits and self.nodes > MAX_NODES:
            raise wire_error(f"cannot encode program: more than {MAX_NODES} statements and expressions",
                             "split the program into several kernels")

    def expr(self, root: Expr) -> None:
        stack: list[tuple[Expr, int]] = [(root, 1)]
        while stack:
            e, depth = stack.pop()
            if self.limits and depth > MAX_EXPR_DEPTH:
                raise wire_error(f"cannot encode program: expressions nest deeper than {MAX_EXPR_DEPTH}",
                                 "bind intermediate values with Let to flatten the expression")
            self.count()
            self.expr_fields(e)
            stack.extend((c, depth + 1) for c in reversed(list(children(e))))

    def expr_fields(self, e: Expr) -> None:
        """The tag and fixed fields of ``e`` (children follow, written by :meth:`expr`)."""
        plan = _EXPR_WRITE.get(type(e))
        if plan is None:
            raise wire_error(f"cannot encode {describe(e)}: expected a vyre expression", FIX_ENCODE)
        tag, fields = plan
        self.out.append(tag)
        for name, write, what in fields:
            write(self, getattr(e, name), what)

    def nodes_list(self, body: Sequence[Node]) -> None:
        # Stack items are statements (with depth) or raw count bytes, emitted in pre-order.
        stack: list[tuple[Node, int] | bytes] = [(n, 1) for n in reversed(body)]
        stack.append(U32.pack(len(body)))
        while stack:
            item = stack.pop()
            if isinstance(item, bytes):
                self.out += item
                continue
            n, depth = item
            if self.limits and depth > MAX_STMT_DEPTH:
                raise wire_error(f"cannot encode program: statements nest deeper than {MAX_STMT_DEPTH}",
                                 "flatten nested blocks, ifs and loops")
            self.count()
            for sub in reversed(self.node_fields(n)):
                stack.extend((c, depth + 1) for c in reversed(sub))
                stack.append(U32.pack(len(sub)))

    def node_fields(self, n: Node) -> tuple[Sequence[Node], ...]:
        """Write the tag, fixed fields and expressions of ``n`` in field order; return its
        statement lists."""
        plan = _NODE_WRITE.get(type(n))
        if plan is None:
            raise wire_error(f"cannot encode {describe(n)}: expected a vyre statement", FIX_ENCODE)
        tag, fields = plan
        self.out.append(tag)
        bodies: list[Sequence[Node]] = []
        for name, write, what in fields:
            if write is None:
                bodies.append(getattr(n, name))
            else:
                write(self, getattr(n, name), what)
        return tuple(bodies)

    def buffer(self, b: BufferDecl) -> None:
        self.text(b.name, MAX_IDENT_BYTES, "buffer name")
        self.u32(b.binding, f"binding of buffer {b.name!r}")
        self.enum(b.access, BufferAccess, f"access of buffer {b.name!r}")
        self.enum(b.element, DataType, f"element type of buffer {b.name!r}")
        self.u32(b.count, f"count of buffer {b.name!r}")
        self.flag(b.is_output)

    def function(self, f: FunctionDef) -> None:
        self.text(f.op_id, MAX_IDENT_BYTES, "function id")
        self.u32(len(f.params), "parameter count")
        for name, t in f.params:
            self.text(name, MAX_IDENT_BYTES, "parameter name")
            self.enum(t, DataType, "parameter type")
        self.enum(f.result, DataType, "function result type")
        self.expr(f.body)

    def adjoint(self, f: FunctionDef) -> None:
        adj = f.adjoint
        if not isinstance(adj, FunctionAdjoint) or not isinstance(adj.grads, tuple):
            raise wire_error(f"cannot encode the adjoint of function {f.op_id!r}: {describe(adj)}",
                             FIX_ENCODE)
        self.text(adj.result, MAX_IDENT_BYTES, "adjoint result name")
        self.text(adj.cotangent, MAX_IDENT_BYTES, "adjoint cotangent name")
        self.u32(len(adj.grads), "adjoint gradient count")
        for g in adj.grads:
            self.flag(g is not None)
            if g is not None:
                self.expr(g)


def _w_i32(enc: _Encoder, v: Any, what: str) -> None:
    if not isinstance(v, int) or not -(1 << 31) <= v < (1 << 31):
        raise wire_error(f"cannot encode {what} {v!r}: expected an int in [-2^31, 2^31)", FIX_ENCODE)
    enc.out += I32.pack(v)


def _w_u64(enc: _Encoder, v: Any, what: str) -> None:
    enc.uint(v, 0xFFFFFFFFFFFFFFFF, what)
    enc.out += U64.pack(v)


def _w_axis(enc: _Encoder, v: Any, what: str) -> None:
    enc.uint(v, 2, what)
    enc.out.append(v)


_Writer = Callable[[_Encoder, Any, str], None]
# How each kind of field is written: fixed fields as their values, an expression where it stands
# (statements write theirs inline; an expression's children follow it, written by _Encoder.expr),
# an optional child as its presence flag and a child tuple as its count.
_WRITERS: dict[F, _Writer] = {
    F.BOOL: lambda enc, v, what: enc.flag(v),
    F.I32: _w_i32,
    F.U32: lambda enc, v, what: enc.u32(v, what),
    F.BITS32: lambda enc, v, what: enc.u32(v, what),
    F.BITS64: _w_u64,
    F.NAME: lambda enc, v, what: enc.text(v, MAX_IDENT_BYTES, what),
    F.LABEL: lambda enc, v, what: enc.text(v, MAX_LABEL_BYTES, what),
    F.AXIS: _w_axis,
    F.BINOP: lambda enc, v, what: enc.enum(v, BinOpKind, what),
    F.UNOP: lambda enc, v, what: enc.enum(v, UnOpKind, what),
    F.ATOMIC: lambda enc, v, what: enc.enum(v, AtomicOp, what),
    F.DTYPE: lambda enc, v, what: enc.enum(v, DataType, what),
    F.OPT_EXPR: lambda enc, v, what: enc.flag(v is not None),
    F.EXPRS: lambda enc, v, what: enc.u32(len(v), f"{what} count"),
    F.EXPR: lambda enc, v, what: enc.expr(v),
}
# Per class: its tag and (field, writer, name in errors) for what it writes itself, in field order.
_EXPR_WRITE: dict[type, tuple[int, tuple[tuple[str, _Writer, str], ...]]] = {
    cls: (EXPR_TAGS[cls], tuple((name, _WRITERS[kind], field_what(cls, name)) for name, kind in spec
                                if kind is not F.EXPR))
    for cls, spec in EXPR_FIELDS.items()
}
_NODE_WRITE: dict[type, tuple[int, tuple[tuple[str, _Writer | None, str], ...]]] = {
    cls: (NODE_TAGS[cls], tuple((name, None if kind is F.NODES else _WRITERS[kind], field_what(cls, name))
                                for name, kind in spec))
    for cls, spec in NODE_FIELDS.items()
}


def encode_body(p: Program, *, canonical: bool, limits: bool) -> bytes:
    """The body of ``p`` (no header). ``canonical`` sorts buffers by name and functions by op_id (the
    fingerprint's form); ``limits`` enforces the size limits (:func:`vyre.ir.wire.to_wire`)."""
    if not isinstance(p, Program):
        raise wire_error(f"cannot encode {describe(p)}: expected a vyre Program", "build one with Program(...)")
    enc = _Encoder(limits)

    def piece(item: BufferDecl | FunctionDef) -> bytes:
        # Encoded separately so the canonical form can sort whole encodings.
        sub = _Encoder(limits)
        sub.nodes = enc.nodes
        if isinstance(item, BufferDecl):
            sub.buffer(item)
        else:
            sub.function(item)
        enc.nodes = sub.nodes
        return bytes(sub.out)

    bufs = [(b.name, piece(b)) for b in p.buffers]
    if canonical:
        bufs.sort()  # by name; the encoding breaks ties so duplicates sort deterministically
    enc.u32(len(bufs), "buffer count")
    for _, raw in bufs:
        enc.out += raw
    wg = tuple(p.workgroup_size)
    if len(wg) != 3:
        raise wire_error(f"cannot encode workgroup size {wg!r}: expected 3 components", FIX_ENCODE)
    for v in wg:
        enc.u32(v, "workgroup size component")
    enc.nodes_list(p.entry)
    fns = [(f.op_id, piece(f), f) for f in p.functions]
    if canonical:
        fns.sort(key=lambda t: (t[0], t[1]))
    enc.u32(len(fns), "function count")
    for _, raw, _ in fns:
        enc.out += raw
    adjoints = [(k, f) for k, (_, _, f) in enumerate(fns) if f.adjoint is not None]
    if adjoints:  # a trailing section, absent when no function has one (older bodies decode)
        enc.u32(len(adjoints), "adjoint count")
        for k, f in adjoints:
            enc.u32(k, "adjoint's function index")
            enc.adjoint(f)
    return bytes(enc.out)
