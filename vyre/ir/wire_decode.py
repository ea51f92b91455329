"""The wire format's decoder (see :mod:`vyre.ir.wire` for the layout): a bounds-checked reader of a
verified body whose per-tag decoders are derived from the IR schema (``_READERS``: one entry per
field kind, the inverse of :mod:`vyre.ir.wire_encode`'s writers).
"""

from __future__ import annotations

# Packed imports, as in the IR core.
# isort: off
import enum
import struct
from dataclasses import replace
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import WireError
from .expr import Expr, FunctionAdjoint, FunctionDef
from .schema import EXPR_FIELDS, NODE_FIELDS, F
from .node import Node
from .ops import AtomicOp, BinOpKind, UnOpKind
from .program import BufferAccess, BufferDecl, Program
from .types import DataType
from .wire_layout import (
    EXPR_TAGS, FIX_DECODE, I32, MAX_EXPR_DEPTH, MAX_IDENT_BYTES, MAX_LABEL_BYTES, MAX_NODES, MAX_STMT_DEPTH,
    NODE_TAGS, U16, U32, U64, ExprTag, NodeTag, field_what, wire_error,
)
# isort: on

_BUFFER_MIN_BYTES = 2 + 4 + 1 + 1 + 4 + 1
_FUNCTION_MIN_BYTES = 2 + 4 + 1 + 1
_PARAM_MIN_BYTES = 2 + 1

# Integer value -> member, for every enum that appears on the wire.
_ENUMS: dict[type[enum.IntEnum], dict[int, enum.IntEnum]] = {
    t: {int(m): m for m in t}
    for t in (DataType, BinOpKind, UnOpKind, AtomicOp, BufferAccess, ExprTag, NodeTag)
}
_E = TypeVar("_E", bound=enum.IntEnum)


class _Decoder:
    """Bounds-checked reader over the body; offsets in errors are from the start of the wire."""

    def __init__(self, body: bytes, base: int) -> None:
        self.buf = body
        self.pos = 0
        self.base = base
        self.nodes = 0

    def fail(self, what: str, at: int | None = None) -> WireError:
        return wire_error(what, FIX_DECODE, self.base + (self.pos if at is None else at))

    def need(self, n: int, what: str) -> None:
        left = len(self.buf) - self.pos
        if n > left:
            raise self.fail(f"truncated: {what} needs {n} byte(s) but only {left} remain")

    def u8(self, what: str) -> int:
        self.need(1, what)
        v = self.buf[self.pos]
        self.pos += 1
        return v

    def fixed(self, fmt: struct.Struct, what: str) -> int:
        self.need(fmt.size, what)
        v: int = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos += fmt.size
        return v

    def u32(self, what: str) -> int:
        return self.fixed(U32, what)

    def flag(self, what: str) -> bool:
        v = self.u8(what)
        if v > 1:
            raise self.fail(f"{what} byte is {v}, expected 0 or 1", self.pos - 1)
        return v == 1

    def enum(self, enum_type: type[_E], what: str) -> _E:
        v = self.u8(what)
        member = _ENUMS[enum_type].get(v)
        if member is None:
            lo, hi = min(_ENUMS[enum_type]), max(_ENUMS[enum_type])
            raise self.fail(f"invalid {enum_type.__name__} value {v} for {what}; expected {lo}..{hi}",
                            self.pos - 1)
        return member  # type: ignore[return-value]

    def text(self, limit: int, what: str) -> str:
        self.need(2, f"length of {what}")
        n: int = U16.unpack_from(self.buf, self.pos)[0]
        if n > limit:
            raise self.fail(f"{what} is {n} bytes long; the limit is {limit}")
        self.pos += 2
        self.need(n, what)
        raw = self.buf[self.pos:self.pos + n]
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{what} is not valid UTF-8 ({exc.reason})", self.pos + exc.start) from None
        self.pos += n
        return s

    def count_items(self, what: str, min_bytes: int) -> int:
        at = self.pos
        n = self.u32(f"{what} count")
        left = len(self.buf) - self.pos
        if n * min_bytes > left:
            raise self.fail(f"{what} count {n} needs at least {n * min_bytes} bytes but only {left} remain",
                            at)
        return n

    def tick(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(f"more than {MAX_NODES} statements and expressions (node limit)")

    # -- expressions: one decoder per tag, called after the tag byte -------------------------

    def expr(self, depth: int) -> Expr:
        if depth > MAX_EXPR_DEPTH:
            raise self.fail(f"expressions nest deeper than {MAX_EXPR_DEPTH} (depth limit)")
        self.tick()
        at = self.pos
        t = self.u8("expression tag")
        tag = _ENUMS[ExprTag].get(t)
        if tag is None:
            raise self.fail(f"unknown expression tag {t}; expected 1..{len(ExprTag)}", at)
        return EXPR_DECODERS[tag](self, depth)  # type: ignore[index]

    def axis(self) -> int:
        a = self.u8("axis")
        if a > 2:
            raise self.fail(f"axis {a} is out of range; expected 0, 1 or 2", self.pos - 1)
        return a

    # -- statements --------------------------------------------------------------------------

    def node_list(self, depth: int) -> tuple[Node, ...]:
        n = self.count_items("statement", 1)
        out = []
        for _ in range(n):  # a loop, not a generator: one Python frame fewer per nesting level
            out.append(self.node(depth))
        return tuple(out)

    def node(self, depth: int) -> Node:
        if depth > MAX_STMT_DEPTH:
            raise self.fail(f"statements nest deeper than {MAX_STMT_DEPTH} (depth limit)")
        self.tick()
        at = self.pos
        t = self.u8("statement tag")
        tag = _ENUMS[NodeTag].get(t)
        if tag is None:
            raise self.fail(f"unknown statement tag {t}; expected 1..{len(NodeTag)}", at)
        return NODE_DECODERS[tag](self, depth)  # type: ignore[index]

    def ident(self, what: str) -> str:
        return self.text(MAX_IDENT_BYTES, what)

    # -- program -----------------------------------------------------------------------------

    def buffer(self) -> BufferDecl:
        name = self.ident("buffer name")
        binding = self.u32("buffer binding")
        access = self.enum(BufferAccess, "buffer access")
        element = self.enum(DataType, "buffer element type")
        count = self.u32("buffer count")
        return BufferDecl(name, binding, access, element, count, self.flag("is_output flag"))

    def function(self) -> FunctionDef:
        op_id = self.ident("function id")
        n = self.count_items("parameter", _PARAM_MIN_BYTES)
        params = tuple((self.ident("parameter name"), self.enum(DataType, "parameter type"))
                       for _ in range(n))
        result = self.enum(DataType, "function result type")
        return FunctionDef(op_id, params, result, self.expr(1))

    def adjoints(self, functions: tuple[FunctionDef, ...]) -> tuple[FunctionDef, ...]:
        """The trailing section of custom adjoints: u32 count (>= 1), then per entry the index of
        its function (strictly increasing), result and cotangent names, one flagged expr per
        parameter."""
        at = self.pos
        n = self.count_items("adjoint", 4 + 2 + 2 + 4)
        if n == 0:
            raise self.fail("an empty adjoint section (it is left out when no function has an "
                            "adjoint)", at)
        out = list(functions)
        last = -1
        for _ in range(n):
            k_at = self.pos
            k = self.u32("adjoint's function index")
            if k >= len(out) or k <= last:
                raise self.fail(f"adjoint function index {k}; expected increasing indices below "
                                f"{len(out)}", k_at)
            last = k
            result, cot = self.ident("adjoint result name"), self.ident("adjoint cotangent name")
            ng = self.count_items("adjoint gradient", 1)
            grads = tuple(self.expr(1) if self.flag("adjoint gradient flag") else None
                          for _ in range(ng))
            out[k] = replace(out[k], adjoint=FunctionAdjoint(result, cot, grads))
        return tuple(out)

    def program(self) -> Program:
        nb = self.count_items("buffer", _BUFFER_MIN_BYTES)
        buffers = tuple(self.buffer() for _ in range(nb))
        wg = (self.u32("workgroup size x"), self.u32("workgroup size y"), self.u32("workgroup size z"))
        entry = self.node_list(1)
        nf = self.count_items("function", _FUNCTION_MIN_BYTES)
        functions = tuple(self.function() for _ in range(nf))
        if functions and len(self.buf) - self.pos >= 4:  # an adjoint section needs a function
            functions = self.adjoints(functions)
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} trailing byte(s) after the program inside the body")
        return Program(buffers, wg, entry, functions)


_Reader = Callable[["_Decoder", str], Any]
# How each kind of fixed field is read back (the inverse of wire_encode._WRITERS).
_READERS: dict[F, _Reader] = {
    F.BOOL: lambda d, what: d.flag(what),
    F.I32: lambda d, what: d.fixed(I32, what),
    F.U32: lambda d, what: d.u32(what),
    F.BITS32: lambda d, what: d.u32(what),
    F.BITS64: lambda d, what: d.fixed(U64, what),
    F.NAME: lambda d, what: d.ident(what),
    F.LABEL: lambda d, what: d.text(MAX_LABEL_BYTES, what),
    F.AXIS: lambda d, what: d.axis(),
    F.BINOP: lambda d, what: d.enum(BinOpKind, what),
    F.UNOP: lambda d, what: d.enum(UnOpKind, what),
    F.ATOMIC: lambda d, what: d.enum(AtomicOp, what),
    F.DTYPE: lambda d, what: d.enum(DataType, what),
    F.OPT_EXPR: lambda d, what: d.flag(what + " flag"),
    F.EXPRS: lambda d, what: d.count_items(what, 1),
}


def _expr_decoder(cls: type) -> Callable[[_Decoder, int], Expr]:
    """Reads what :meth:`vyre.ir.wire_encode._Encoder.expr_fields` and the children after it wrote, from the schema:
    the fixed fields (an optional child as its presence flag, a child tuple as its count) in field
    order, then the children in field order."""
    spec = EXPR_FIELDS[cls]
    reads = tuple((name, _READERS[kind], field_what(cls, name)) for name, kind in spec if kind is not F.EXPR)
    has_children = any(kind in (F.EXPR, F.OPT_EXPR, F.EXPRS) for _, kind in spec)

    def decode(d: _Decoder, depth: int) -> Expr:
        fixed: dict[str, Any] = {}
        for name, read, what in reads:
            fixed[name] = read(d, what)
        for name, kind in spec if has_children else ():
            if kind is F.EXPR:
                fixed[name] = d.expr(depth + 1)
            elif kind is F.OPT_EXPR:
                fixed[name] = d.expr(depth + 1) if fixed[name] else None
            elif kind is F.EXPRS:
                fixed[name] = tuple(d.expr(depth + 1) for _ in range(fixed[name]))
        out: Expr = cls(**fixed)
        return out

    return decode


def _node_decoder(cls: type) -> Callable[[_Decoder, int], Node]:
    """Reads what :meth:`vyre.ir.wire_encode._Encoder.node_fields` wrote (and the statement lists after), from the
    schema, in field order; a statement's expressions start at depth 1."""
    spec = tuple((name, kind, _READERS.get(kind), field_what(cls, name)) for name, kind in NODE_FIELDS[cls])

    def decode(d: _Decoder, depth: int) -> Node:
        values: dict[str, Any] = {}
        for name, kind, read, what in spec:
            if kind is F.EXPR:
                values[name] = d.expr(1)
            elif kind is F.NODES:
                values[name] = d.node_list(depth + 1)
            else:
                values[name] = read(d, what)  # type: ignore[misc]
        out: Node = cls(**values)
        return out

    return decode


EXPR_DECODERS: dict[ExprTag, Callable[[_Decoder, int], Expr]] = {
    tag: _expr_decoder(cls) for cls, tag in EXPR_TAGS.items()
}
NODE_DECODERS: dict[NodeTag, Callable[[_Decoder, int], Node]] = {
    tag: _node_decoder(cls) for cls, tag in NODE_TAGS.items()
}



def decode_body(body: bytes, base: int) -> Program:
    """The program in a verified wire body; errors name offsets from ``base`` (the header length)."""
    return _Decoder(body, base).program()
