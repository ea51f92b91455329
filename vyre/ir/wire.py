"""The versioned binary wire format of a :class:`~vyre.ir.program.Program`, and its fingerprint.

Layout (all integers little-endian)::

    header  magic b"VYRE" | u16 version (1) | u16 flags (0) | u32 body length | 32-byte blake3(body)
    body    u32 #buffers, buffers | u32 x 3 workgroup size | statement list | u32 #functions, functions
            [| u32 #adjoints (>= 1), adjoints]    (only when some function has a custom adjoint)

    buffer      str name | u32 binding | u8 BufferAccess | u8 DataType | u32 count | u8 is_output (0/1)
    function    str op_id | u32 #params, (str name | u8 DataType) each | u8 result DataType | expr body
    adjoint     u32 function index (increasing) | str result | str cotangent | u32 #grads,
                (u8 present (0/1) [| expr]) each
    stmt list   u32 count, statements
    str         u16 byte length | UTF-8 bytes

Every statement and expression is a one-byte tag (:class:`NodeTag`, :class:`ExprTag`) followed by
its fields as the IR schema (vyre/ir/schema.py) lists them: an expression writes its fixed fields
in field order (an optional child as a presence byte, a child tuple as its u32 count), then its
children in :func:`vyre.ir.expr.children` order; a statement writes its fields in field order (an
expression where it stands), then its statement lists. The encoder and the decoder are derived
from the schema (``_WRITERS`` / ``_READERS``, one entry per field kind), so no ``match`` over
the node classes repeats the layout. Enums are written as
their integer values (u8; they are the documented wire tags); float literals as their bit patterns,
so -0.0, NaN payloads and subnormals survive exactly. Every accepted byte string is canonical:
``to_wire(from_wire(b)) == b``.

:func:`from_wire` verifies everything and raises only :class:`~vyre.errors.WireError` for any input,
within the limits below, without deep recursion and allocating no more than the input justifies. It
decodes structure only; ``Program.validate()`` checks meaning. :func:`to_wire` enforces the same
limits, so whatever it produces decodes.

:func:`fingerprint` hashes a *canonical* body (buffers sorted by name, functions by op_id) under a
domain-separation prefix; it skips the size limits (depth, node count, name length) so any
representable program, however large, has a fingerprint.
"""

from __future__ import annotations

# Packed imports, as in the IR core.
# isort: off
import enum
import struct
from dataclasses import replace
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import blake3

from ..errors import WireError
from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, FunctionAdjoint, FunctionDef, InvocationId, LitBool, LitF32,
    LitF64, LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId, children,
)
from .schema import EXPR_FIELDS, NODE_FIELDS, F
from .node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store
from .ops import AtomicOp, BinOpKind, UnOpKind
from .program import BufferAccess, BufferDecl, Program
from .types import DataType
# isort: on

MAGIC = b"VYRE"
VERSION = 1
KNOWN_FLAGS = 0  # no flags are defined in version 1
FINGERPRINT_DOMAIN = b"vyre-fp-v1\0"

MAX_WIRE_BYTES = 64 * 1024 * 1024
MAX_EXPR_DEPTH = 128
MAX_STMT_DEPTH = 64
MAX_NODES = 200_000
MAX_IDENT_BYTES = 64
MAX_LABEL_BYTES = 128
_U16_MAX = 0xFFFF

_HEADER = struct.Struct("<4sHHI32s")
HEADER_LEN = _HEADER.size
_BUFFER_MIN_BYTES = 2 + 4 + 1 + 1 + 4 + 1
_FUNCTION_MIN_BYTES = 2 + 4 + 1 + 1
_PARAM_MIN_BYTES = 2 + 1


class ExprTag(enum.IntEnum):
    """Wire tags of expression variants; never renumber."""

    LIT_BOOL = 1
    LIT_I32 = 2
    LIT_U32 = 3
    LIT_F32 = 4
    LIT_F64 = 5
    VAR = 6
    LOAD = 7
    BUF_LEN = 8
    INVOCATION_ID = 9
    WORKGROUP_ID = 10
    LOCAL_ID = 11
    SUBGROUP_LOCAL_ID = 12
    SUBGROUP_SIZE = 13
    BIN_OP = 14
    UN_OP = 15
    SELECT = 16
    CAST = 17
    FMA = 18
    ATOMIC = 19
    SUBGROUP_BALLOT = 20
    SUBGROUP_SHUFFLE = 21
    SUBGROUP_REDUCE = 22
    CALL = 23


class NodeTag(enum.IntEnum):
    """Wire tags of statement variants; never renumber."""

    LET = 1
    ASSIGN = 2
    STORE = 3
    IF = 4
    LOOP = 5
    BLOCK = 6
    BARRIER = 7
    RETURN = 8
    REGION = 9


EXPR_TAGS: dict[type, ExprTag] = {
    LitBool: ExprTag.LIT_BOOL, LitI32: ExprTag.LIT_I32, LitU32: ExprTag.LIT_U32,
    LitF32: ExprTag.LIT_F32, LitF64: ExprTag.LIT_F64, Var: ExprTag.VAR, Load: ExprTag.LOAD,
    BufLen: ExprTag.BUF_LEN, InvocationId: ExprTag.INVOCATION_ID, WorkgroupId: ExprTag.WORKGROUP_ID,
    LocalId: ExprTag.LOCAL_ID, SubgroupLocalId: ExprTag.SUBGROUP_LOCAL_ID,
    SubgroupSize: ExprTag.SUBGROUP_SIZE, BinOp: ExprTag.BIN_OP, UnOp: ExprTag.UN_OP,
    Select: ExprTag.SELECT, Cast: ExprTag.CAST, Fma: ExprTag.FMA, Atomic: ExprTag.ATOMIC,
    SubgroupBallot: ExprTag.SUBGROUP_BALLOT, SubgroupShuffle: ExprTag.SUBGROUP_SHUFFLE,
    SubgroupReduce: ExprTag.SUBGROUP_REDUCE, Call: ExprTag.CALL,
}
NODE_TAGS: dict[type, NodeTag] = {
    Let: NodeTag.LET, Assign: NodeTag.ASSIGN, Store: NodeTag.STORE, If: NodeTag.IF,
    Loop: NodeTag.LOOP, Block: NodeTag.BLOCK, Barrier: NodeTag.BARRIER, Return: NodeTag.RETURN,
    Region: NodeTag.REGION,
}

# How errors name a field: by (class, field), else by field name.
_FIELD_WHAT: dict[tuple[type, str], str] = {
    (LitBool, "value"): "LitBool value", (LitI32, "value"): "LitI32 value",
    (LitU32, "value"): "LitU32 value", (LitF32, "bits"): "LitF32 bits", (LitF64, "bits"): "LitF64 bits",
    (BinOp, "op"): "binary op", (UnOp, "op"): "unary op", (Cast, "target"): "cast target",
    (Atomic, "op"): "atomic op", (Atomic, "expected"): "atomic has-expected", (Call, "args"): "argument",
    (SubgroupReduce, "op"): "subgroup reduce op", (Loop, "var"): "loop variable",
}
_NAME_WHAT = {"name": "variable name", "buffer": "buffer name", "op_id": "function id",
              "axis": "axis", "generator": "region label"}


def _what(cls: type, field: str) -> str:
    return _FIELD_WHAT.get((cls, field)) or _NAME_WHAT.get(field) or f"{cls.__name__} {field}"


# Integer value -> member, for every enum that appears on the wire.
_ENUMS: dict[type[enum.IntEnum], dict[int, enum.IntEnum]] = {
    t: {int(m): m for m in t}
    for t in (DataType, BinOpKind, UnOpKind, AtomicOp, BufferAccess, ExprTag, NodeTag)
}
_E = TypeVar("_E", bound=enum.IntEnum)

_u16 = struct.Struct("<H")
_u32 = struct.Struct("<I")
_i32 = struct.Struct("<i")
_u64 = struct.Struct("<Q")


def _err(what: str, fix: str, offset: int | None = None) -> WireError:
    """A WireError whose message names the byte offset and still ends with ``Fix: ...``."""
    where = f" at byte {offset}" if offset is not None else ""
    e = WireError(f"{what}{where}. Fix: {fix}")
    e.offset = offset
    return e


def describe(x: object) -> str:
    return f"a {type(x).__name__} ({x!r:.60})"


_FIX_ENCODE = "build the program from vyre.ir objects with in-range fields (see vyre.ir.wire's docs)"
_FIX_DECODE = "pass bytes produced by Program.to_wire() of a compatible vyre version, unmodified"


# ---------------------------------------------------------------------------------------------
# Encoding


class _Encoder:
    """Pre-order, iterative encoder (deep trees do not recurse)."""

    def __init__(self, limits: bool) -> None:
        self.out = bytearray()
        self.limits = limits
        self.nodes = 0

    def u32(self, v: int, what: str) -> None:
        self.uint(v, 0xFFFFFFFF, what)
        self.out += _u32.pack(v)

    def uint(self, v: object, hi: int, what: str) -> None:
        if not isinstance(v, int) or not 0 <= v <= hi:
            raise _err(f"cannot encode {what} {v!r}: expected an int in [0, {hi}]", _FIX_ENCODE)

    def flag(self, v: object) -> None:
        self.out.append(1 if v else 0)

    def enum(self, v: object, enum_type: type[enum.IntEnum], what: str) -> None:
        if not isinstance(v, enum_type):
            raise _err(f"cannot encode {what} {v!r}: expected a {enum_type.__name__}", _FIX_ENCODE)
        self.out.append(int(v))

    def text(self, s: object, limit: int, what: str) -> None:
        if not isinstance(s, str):
            raise _err(f"cannot encode {what} {s!r}: expected a str", _FIX_ENCODE)
        try:
            raw = s.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _err(f"cannot encode {what} {s!r}: not valid UTF-8 ({exc.reason})", _FIX_ENCODE) from None
        cap = limit if self.limits else _U16_MAX
        if len(raw) > cap:
            raise _err(
                f"cannot encode {what} {s[:32]!r}...: {len(raw)} UTF-8 bytes, the limit is {cap}",
                "use a shorter name",
            )
        self.out += _u16.pack(len(raw))
        self.out += raw

    def count(self) -> None:
        self.nodes += 1
        if self.limits and self.nodes > MAX_NODES:
            raise _err(f"cannot encode program: more than {MAX_NODES} statements and expressions",
                       "split the program into several kernels")

    def expr(self, root: Expr) -> None:
        stack: list[tuple[Expr, int]] = [(root, 1)]
        while stack:
            e, depth = stack.pop()
            if self.limits and depth > MAX_EXPR_DEPTH:
                raise _err(f"cannot encode program: expressions nest deeper than {MAX_EXPR_DEPTH}",
                           "bind intermediate values with Let to flatten the expression")
            self.count()
            self.expr_fields(e)
            stack.extend((c, depth + 1) for c in reversed(list(children(e))))

    def expr_fields(self, e: Expr) -> None:
        """The tag and fixed fields of ``e`` (children follow, written by :meth:`expr`)."""
        plan = _EXPR_WRITE.get(type(e))
        if plan is None:
            raise _err(f"cannot encode {describe(e)}: expected a vyre expression", _FIX_ENCODE)
        tag, fields = plan
        self.out.append(tag)
        for name, write, what in fields:
            write(self, getattr(e, name), what)

    def nodes_list(self, body: Sequence[Node]) -> None:
        # Stack items are statements (with depth) or raw count bytes, emitted in pre-order.
        stack: list[tuple[Node, int] | bytes] = [(n, 1) for n in reversed(body)]
        stack.append(_u32.pack(len(body)))
        while stack:
            item = stack.pop()
            if isinstance(item, bytes):
                self.out += item
                continue
            n, depth = item
            if self.limits and depth > MAX_STMT_DEPTH:
                raise _err(f"cannot encode program: statements nest deeper than {MAX_STMT_DEPTH}",
                           "flatten nested blocks, ifs and loops")
            self.count()
            for sub in reversed(self.node_fields(n)):
                stack.extend((c, depth + 1) for c in reversed(sub))
                stack.append(_u32.pack(len(sub)))

    def node_fields(self, n: Node) -> tuple[Sequence[Node], ...]:
        """Write the tag, fixed fields and expressions of ``n`` in field order; return its
        statement lists."""
        plan = _NODE_WRITE.get(type(n))
        if plan is None:
            raise _err(f"cannot encode {describe(n)}: expected a vyre statement", _FIX_ENCODE)
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
            raise _err(f"cannot encode the adjoint of function {f.op_id!r}: {describe(adj)}",
                       _FIX_ENCODE)
        self.text(adj.result, MAX_IDENT_BYTES, "adjoint result name")
        self.text(adj.cotangent, MAX_IDENT_BYTES, "adjoint cotangent name")
        self.u32(len(adj.grads), "adjoint gradient count")
        for g in adj.grads:
            self.flag(g is not None)
            if g is not None:
                self.expr(g)


def _w_i32(enc: _Encoder, v: Any, what: str) -> None:
    if not isinstance(v, int) or not -(1 << 31) <= v < (1 << 31):
        raise _err(f"cannot encode {what} {v!r}: expected an int in [-2^31, 2^31)", _FIX_ENCODE)
    enc.out += _i32.pack(v)


def _w_u64(enc: _Encoder, v: Any, what: str) -> None:
    enc.uint(v, 0xFFFFFFFFFFFFFFFF, what)
    enc.out += _u64.pack(v)


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
    cls: (EXPR_TAGS[cls], tuple((name, _WRITERS[kind], _what(cls, name)) for name, kind in spec
                                if kind is not F.EXPR))
    for cls, spec in EXPR_FIELDS.items()
}
_NODE_WRITE: dict[type, tuple[int, tuple[tuple[str, _Writer | None, str], ...]]] = {
    cls: (NODE_TAGS[cls], tuple((name, None if kind is F.NODES else _WRITERS[kind], _what(cls, name))
                                for name, kind in spec))
    for cls, spec in NODE_FIELDS.items()
}


def _encode_body(p: Program, *, canonical: bool, limits: bool) -> bytes:
    if not isinstance(p, Program):
        raise _err(f"cannot encode {describe(p)}: expected a vyre Program", "build one with Program(...)")
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
        raise _err(f"cannot encode workgroup size {wg!r}: expected 3 components", _FIX_ENCODE)
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


def frame(body: bytes) -> bytes:
    """Wrap an encoded body in a version-1 header (magic, version, flags, length, digest)."""
    return _HEADER.pack(MAGIC, VERSION, 0, len(body), blake3.blake3(body).digest()) + body


def to_wire(p: Program) -> bytes:
    """The wire encoding of ``p``. Raises WireError if ``p`` exceeds the format's limits."""
    out = frame(_encode_body(p, canonical=False, limits=True))
    if len(out) > MAX_WIRE_BYTES:
        raise _err(f"cannot encode program: {len(out)} bytes exceed the limit of {MAX_WIRE_BYTES}",
                   "split the program into several kernels")
    return out


def fingerprint(p: Program) -> bytes:
    """32-byte blake3 of the canonical encoding of ``p`` (buffer and function order do not count)."""
    return blake3.blake3(FINGERPRINT_DOMAIN + _encode_body(p, canonical=True, limits=False)).digest()


# ---------------------------------------------------------------------------------------------
# Decoding


class _Decoder:
    """Bounds-checked reader over the body; offsets in errors are from the start of the wire."""

    def __init__(self, body: bytes, base: int) -> None:
        self.buf = body
        self.pos = 0
        self.base = base
        self.nodes = 0

    def fail(self, what: str, at: int | None = None) -> WireError:
        return _err(what, _FIX_DECODE, self.base + (self.pos if at is None else at))

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
        return self.fixed(_u32, what)

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
        n: int = _u16.unpack_from(self.buf, self.pos)[0]
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
        return _EXPR_DECODERS[tag](self, depth)  # type: ignore[index]

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
        return _NODE_DECODERS[tag](self, depth)  # type: ignore[index]

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
# How each kind of fixed field is read back (the inverse of _WRITERS).
_READERS: dict[F, _Reader] = {
    F.BOOL: lambda d, what: d.flag(what),
    F.I32: lambda d, what: d.fixed(_i32, what),
    F.U32: lambda d, what: d.u32(what),
    F.BITS32: lambda d, what: d.u32(what),
    F.BITS64: lambda d, what: d.fixed(_u64, what),
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
    """Reads what :meth:`_Encoder.expr_fields` and the children after it wrote, from the schema:
    the fixed fields (an optional child as its presence flag, a child tuple as its count) in field
    order, then the children in field order."""
    spec = EXPR_FIELDS[cls]
    reads = tuple((name, _READERS[kind], _what(cls, name)) for name, kind in spec if kind is not F.EXPR)
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
    """Reads what :meth:`_Encoder.node_fields` wrote (and the statement lists after), from the
    schema, in field order; a statement's expressions start at depth 1."""
    spec = tuple((name, kind, _READERS.get(kind), _what(cls, name)) for name, kind in NODE_FIELDS[cls])

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


_EXPR_DECODERS: dict[ExprTag, Callable[[_Decoder, int], Expr]] = {
    tag: _expr_decoder(cls) for cls, tag in EXPR_TAGS.items()
}
_NODE_DECODERS: dict[NodeTag, Callable[[_Decoder, int], Node]] = {
    tag: _node_decoder(cls) for cls, tag in NODE_TAGS.items()
}


def from_wire(data: bytes | bytearray | memoryview) -> Program:
    """Decode and verify ``data``; raise WireError (only) for anything that is not a valid encoding."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _err(f"expected bytes, got {type(data).__name__}", "pass the bytes from Program.to_wire()")
    try:
        raw = bytes(data)
    except (TypeError, ValueError, BufferError) as exc:
        raise _err(f"cannot read the buffer as bytes ({exc})", "pass a bytes object") from None
    n = len(raw)
    if n > MAX_WIRE_BYTES:
        raise _err(f"input is {n} bytes; the limit is {MAX_WIRE_BYTES} (size limit)",
                   "split the program into several kernels", 0)
    k = min(n, len(MAGIC))
    if raw[:k] != MAGIC[:k]:
        raise _err(f"bad magic {raw[:4]!r}, expected {MAGIC!r}; this is not a vyre wire encoding",
                   _FIX_DECODE, 0)
    if n < HEADER_LEN:
        raise _err(f"truncated: the header needs {HEADER_LEN} bytes but the input has {n}", _FIX_DECODE, n)
    _, version, flags, body_len, digest = _HEADER.unpack_from(raw, 0)
    if version != VERSION:
        raise _err(f"unknown wire version {version}; this vyre reads version {VERSION}",
                   "re-encode the program with this vyre version", 4)
    if flags & ~KNOWN_FLAGS:
        raise _err(f"unknown flags {flags:#06x}; version {VERSION} defines none",
                   "re-encode the program with this vyre version", 6)
    have = n - HEADER_LEN
    if body_len > have:
        raise _err(f"truncated: the header announces a {body_len}-byte body but {have} bytes follow",
                   _FIX_DECODE, n)
    if body_len < have:
        raise _err(f"{have - body_len} trailing byte(s) after the {body_len}-byte body",
                   _FIX_DECODE, HEADER_LEN + body_len)
    body = raw[HEADER_LEN:]
    if blake3.blake3(body).digest() != digest:
        raise _err("digest mismatch: the body does not hash to the header's blake3 digest (corrupted)",
                   _FIX_DECODE, 12)
    return _Decoder(body, HEADER_LEN).program()
