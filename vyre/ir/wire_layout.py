"""The wire format's shared vocabulary (:mod:`vyre.ir.wire`): the tags of statements and
expressions, the per-program limits, how errors name a field, the packed integer formats, and the
:class:`~vyre.errors.WireError` constructor; :mod:`vyre.ir.wire_encode` and
:mod:`vyre.ir.wire_decode` are built on it.
"""

from __future__ import annotations

# Packed imports, as in the IR core.
# isort: off
import enum
import struct

from ..errors import WireError
from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Fma, InvocationId, LitBool, LitF32, LitF64, LitI32, LitU32, Load, LocalId,
    Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Region, Return, Store
# isort: on

MAX_EXPR_DEPTH = 128
MAX_STMT_DEPTH = 64
MAX_NODES = 200_000
MAX_IDENT_BYTES = 64
MAX_LABEL_BYTES = 128


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


def field_what(cls: type, field: str) -> str:
    return _FIELD_WHAT.get((cls, field)) or _NAME_WHAT.get(field) or f"{cls.__name__} {field}"


U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")
U64 = struct.Struct("<Q")


def wire_error(what: str, fix: str, offset: int | None = None) -> WireError:
    """A WireError whose message names the byte offset and still ends with ``Fix: ...``."""
    where = f" at byte {offset}" if offset is not None else ""
    e = WireError(f"{what}{where}. Fix: {fix}")
    e.offset = offset
    return e


def describe(x: object) -> str:
    return f"a {type(x).__name__} ({x!r:.60})"


FIX_ENCODE = "build the program from vyre.ir objects with in-range fields (see vyre.ir.wire's docs)"
FIX_DECODE = "pass bytes produced by Program.to_wire() of a compatible vyre version, unmodified"
