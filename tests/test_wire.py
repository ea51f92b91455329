"""The wire format: round trips, canonical encodings, and rejection of every kind of bad input."""

from __future__ import annotations

import inspect
import random
import struct
import sys

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import arbitrary_programs, programs
from vyre.errors import WireError
from vyre.ir import (
    EXPR_TYPES,
    NODE_TYPES,
    Assign,
    Atomic,
    AtomicOp,
    Barrier,
    BinOp,
    BinOpKind,
    Block,
    BufferAccess,
    BufferDecl,
    BufLen,
    Call,
    Cast,
    DataType,
    Fma,
    FunctionDef,
    If,
    InvocationId,
    Let,
    LitBool,
    LitF32,
    LitF64,
    LitI32,
    LitU32,
    Load,
    LocalId,
    Loop,
    Program,
    Region,
    Return,
    Select,
    Store,
    SubgroupBallot,
    SubgroupLocalId,
    SubgroupReduce,
    SubgroupShuffle,
    SubgroupSize,
    UnOp,
    UnOpKind,
    Var,
    WorkgroupId,
    wire,
)
from vyre.ir.expr import Expr
from vyre.ir.node import Node
from vyre.ir.wire import HEADER_LEN, MAGIC, ExprTag, NodeTag, frame, from_wire, to_wire
from vyre.ir.wire_decode import EXPR_DECODERS, NODE_DECODERS

F32 = DataType.F32


def every_variant() -> Program:
    """A (not necessarily valid) program holding every expression and statement variant."""
    x = Var("x")
    exprs: tuple[Expr, ...] = (
        LitBool(True), LitI32(-(2**31)), LitU32(2**32 - 1), LitF32(bits=0x7FC00001), LitF64(-0.0), x,
        Load("in", x), BufLen("in"), InvocationId(2), WorkgroupId(1), LocalId(0), SubgroupLocalId(),
        SubgroupSize(), BinOp(BinOpKind.FIXED_MUL_Q16, x, x), UnOp(UnOpKind.IS_FINITE, x),
        Select(x, x, x), Cast(DataType.F64, x), Fma(x, x, x), Atomic(AtomicOp.ADD, "in", x, x),
        Atomic(AtomicOp.COMPARE_EXCHANGE, "in", x, x, x), SubgroupBallot(x), SubgroupShuffle(x, x),
        SubgroupReduce(BinOpKind.BIT_XOR, x), Call("f", (x, LitF32(1.5))), Call("g", ()),
    )
    stmts: tuple[Node, ...] = (
        *(Let(f"v{k}", e) for k, e in enumerate(exprs)), Assign("x", x), Store("out", x, x),
        If(x, (Return(),), (Barrier(),)), Loop("i", x, x, (Block((Region("lbl", ()),)),)),
    )
    bufs = (BufferDecl("in", 0, BufferAccess.READ_ONLY, F32), BufferDecl.output("out", 1, F32),
            BufferDecl("u", 2, BufferAccess.UNIFORM, DataType.BOOL, 7),
            BufferDecl("w", 3, BufferAccess.WRITE_ONLY, DataType.I32),
            BufferDecl.workgroup("wg", 64, DataType.U32))
    fns = (FunctionDef("f", (("a", F32), ("b", F32)), F32, Var("a")), FunctionDef("g", (), F32, LitF32(0.0)))
    return Program(bufs, (64, 2, 1), stmts, fns)


def test_tag_tables_cover_every_variant() -> None:
    assert set(wire.EXPR_TAGS) == set(EXPR_TYPES)
    assert set(wire.NODE_TAGS) == set(NODE_TYPES)
    assert set(wire.EXPR_TAGS.values()) == set(ExprTag) == set(EXPR_DECODERS)
    assert set(wire.NODE_TAGS.values()) == set(NodeTag) == set(NODE_DECODERS)


def test_every_variant_round_trips() -> None:
    p = every_variant()
    data = to_wire(p)
    assert data[:4] == MAGIC
    assert from_wire(data) == p
    assert to_wire(from_wire(data)) == data
    assert from_wire(bytearray(data)) == p and from_wire(memoryview(data)) == p


@pytest.mark.parametrize("lit", [
    LitF32(-0.0), LitF32(0.0), LitF32(bits=0x7FC00001), LitF32(bits=0xFFBFFFFF), LitF32(bits=1),
    LitF32(float("inf")), LitF64(-0.0), LitF64(bits=0x7FF0000000000001), LitF64(bits=1),
    LitF64(bits=0xFFFFFFFFFFFFFFFF), LitI32(-(2**31)), LitI32(2**31 - 1), LitU32(0), LitU32(2**32 - 1),
])
def test_literal_bits_survive_exactly(lit: LitF32 | LitF64 | LitI32 | LitU32) -> None:
    p = Program((), (1, 1, 1), (Let("x", lit),))
    back = from_wire(to_wire(p)).entry[0]
    assert isinstance(back, Let) and back.value == lit


@given(arbitrary_programs())
def test_arbitrary_programs_round_trip(p: Program) -> None:
    data = to_wire(p)
    assert from_wire(data) == p
    assert to_wire(from_wire(data)) == data


@settings(max_examples=10)
@given(programs(max_stmts=10, allow_atomics=True, allow_barriers=True, allow_subgroups=True))
def test_valid_programs_round_trip(p: Program) -> None:
    data = p.to_wire()
    assert Program.from_wire(data) == p
    assert Program.from_wire(data).to_wire() == data


# --- hostile input: only WireError, and anything accepted is canonical ----------------------------

def check_decodes_or_rejects(data: bytes) -> None:
    try:
        p = from_wire(data)
    except WireError as e:
        assert str(e).rstrip().split("Fix: ")[-1]  # every message ends with a fix
        return
    assert to_wire(p) == data  # an accepted encoding is the canonical encoding of what it decodes to


@given(st.binary(max_size=200))
def test_random_bytes_raise_only_wire_error(data: bytes) -> None:
    check_decodes_or_rejects(data)
    check_decodes_or_rejects(MAGIC + data)


@given(st.binary(max_size=300))
def test_random_bodies_with_valid_header_raise_only_wire_error(body: bytes) -> None:
    check_decodes_or_rejects(frame(body))


@given(arbitrary_programs(), st.data())
def test_mutated_bodies_raise_only_wire_error(p: Program, data: st.DataObject) -> None:
    body = bytearray(to_wire(p)[HEADER_LEN:])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, max(0, len(body) - 1)))
        body[at:at + 1] = data.draw(st.binary(max_size=2))
    check_decodes_or_rejects(frame(bytes(body)))


def test_hundreds_of_random_mutations() -> None:
    data = to_wire(every_variant())
    body = data[HEADER_LEN:]
    rng = random.Random(20240613)
    for k in range(600):
        b = bytearray(body if k % 3 else data)  # a third mutate the framed bytes (digest catches them)
        kind = k % 5
        at = rng.randrange(len(b))
        if kind == 0:
            b[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[at] = rng.choice((0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif kind == 2:
            del b[at:at + rng.randrange(1, 9)]
        elif kind == 3:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
        else:
            del b[at:]
        check_decodes_or_rejects(bytes(b) if k % 3 == 0 else frame(bytes(b)))


def test_every_truncation_is_rejected() -> None:
    data = to_wire(every_variant())
    for n in range(len(data)):
        with pytest.raises(WireError, match=r"truncated|bad magic"):
            from_wire(data[:n])
    body = data[HEADER_LEN:]
    for n in range(len(body)):
        with pytest.raises(WireError):
            from_wire(frame(body[:n]))


# --- byte-level builders for hand-made hostile bodies ---------------------------------------------

def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<H", len(raw)) + raw


EMPTY_TAIL = u32(0)  # no functions
WG = u32(1) * 3


def body_with(stmts: bytes, count: int = 1, buffers: bytes = u32(0)) -> bytes:
    return buffers + WG + u32(count) + stmts + EMPTY_TAIL


def let(expr: bytes, name: bytes = s("x")) -> bytes:
    return bytes([NodeTag.LET]) + name + expr


def reject(data: bytes, pattern: str, offset: int | None = None) -> WireError:
    with pytest.raises(WireError, match=pattern) as info:
        from_wire(data)
    msg = str(info.value)
    assert "Fix: " in msg and msg.rstrip().endswith(msg.split("Fix: ")[-1])
    assert msg.index("Fix: ") > msg.find(" at byte ") if info.value.offset is not None else True
    if offset is not None:
        assert info.value.offset == offset and f"at byte {offset}" in msg
    return info.value


LIT_U32 = bytes([ExprTag.LIT_U32]) + u32(5)
STMT0 = HEADER_LEN + 4 + 12 + 4  # the first statement of body_with(...)
EXPR0 = STMT0 + 1 + 3  # the value of let(...) named "x"


def test_minimal_hand_built_body_decodes() -> None:
    p = from_wire(frame(body_with(let(LIT_U32))))
    assert p == Program((), (1, 1, 1), (Let("x", LitU32(5)),))


def test_deep_expression_nesting_is_rejected_without_recursion() -> None:
    neg = bytes([ExprTag.UN_OP, UnOpKind.NEGATE])
    ok = frame(body_with(let(neg * 127 + LIT_U32)))
    assert from_wire(ok).entry  # depth 128 is the limit
    reject(frame(body_with(let(neg * 128 + LIT_U32))), "expressions nest deeper than 128")
    reject(frame(body_with(let(neg * 500_000 + LIT_U32))), "depth limit")


def test_deep_statement_nesting_is_rejected_without_recursion() -> None:
    block = bytes([NodeTag.BLOCK]) + u32(1)
    ok = frame(body_with(block * 63 + bytes([NodeTag.RETURN])))
    assert from_wire(ok).entry
    reject(frame(body_with(block * 64 + bytes([NodeTag.RETURN]))), "statements nest deeper than 64")
    reject(frame(body_with(block * 300_000 + bytes([NodeTag.RETURN]))), "depth limit")


def test_deepest_legal_nesting_decodes_within_a_modest_recursion_limit() -> None:
    neg = bytes([ExprTag.UN_OP, UnOpKind.NEGATE])
    block = bytes([NodeTag.BLOCK]) + u32(1)
    data = frame(body_with(block * 63 + let(neg * 127 + LIT_U32)))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 700)
    try:
        p = from_wire(data)
    finally:
        sys.setrecursionlimit(old)
    assert to_wire(p) == data  # the encoder is iterative, so no limit applies to it


def test_node_count_limit() -> None:
    ret = bytes([NodeTag.RETURN])
    assert len(from_wire(frame(body_with(ret * wire.MAX_NODES, wire.MAX_NODES))).entry) == wire.MAX_NODES
    reject(frame(body_with(ret * (wire.MAX_NODES + 1), wire.MAX_NODES + 1)), "node limit")


@pytest.mark.parametrize("count", [10, 1000, 2**32 - 1])
def test_counts_are_checked_against_remaining_bytes(count: int) -> None:
    reject(frame(body_with(bytes([NodeTag.RETURN]), count)), f"statement count {count} needs at least",
           STMT0 - 4)
    reject(frame(u32(count) + bytes(20)), "buffer count", HEADER_LEN)
    call = bytes([ExprTag.CALL]) + s("f") + u32(count)
    reject(frame(body_with(let(call))), "argument count")


def test_bad_magic() -> None:
    reject(b"VYRX" + to_wire(every_variant())[4:], "bad magic b'VYRX'", 0)
    reject(b"", "truncated")  # an empty prefix of the magic is a truncation
    reject(b"\x00", "bad magic", 0)


def test_unknown_version() -> None:
    data = bytearray(to_wire(every_variant()))
    data[4:6] = struct.pack("<H", 2)
    reject(bytes(data), "unknown wire version 2", 4)


def test_unknown_flags() -> None:
    data = bytearray(to_wire(every_variant()))
    data[6:8] = struct.pack("<H", 0x0100)
    reject(bytes(data), "unknown flags 0x0100", 6)


def test_digest_mismatch() -> None:
    data = bytearray(to_wire(every_variant()))
    data[-1] ^= 0x01
    reject(bytes(data), "digest mismatch", 12)


def test_truncated_header_and_body() -> None:
    data = to_wire(every_variant())
    reject(data[:HEADER_LEN - 1], "truncated: the header needs", HEADER_LEN - 1)
    reject(data[:-1], "truncated: the header announces", len(data) - 1)
    cut = body_with(let(LIT_U32))[:-len(EMPTY_TAIL) - 2]
    reject(frame(cut), "truncated: LitU32 value needs 4 byte.s. but only 2 remain", EXPR0 + 1)


def test_trailing_bytes() -> None:
    data = to_wire(every_variant())
    reject(data + b"\x00", "1 trailing byte", len(data))
    reject(frame(body_with(let(LIT_U32)) + b"\x07\x07"), "2 trailing byte.*inside the body")


def test_unknown_tags() -> None:
    reject(frame(body_with(let(bytes([0])))), "unknown expression tag 0", EXPR0)
    reject(frame(body_with(let(bytes([200])))), "unknown expression tag 200")
    reject(frame(body_with(bytes([0]))), "unknown statement tag 0", STMT0)
    reject(frame(body_with(bytes([10]))), "unknown statement tag 10")


@pytest.mark.parametrize(("expr", "pattern"), [
    (bytes([ExprTag.BIN_OP, 99]) + LIT_U32 * 2, "invalid BinOpKind value 99"),
    (bytes([ExprTag.UN_OP, 0]) + LIT_U32, "invalid UnOpKind value 0"),
    (bytes([ExprTag.CAST, 6]) + LIT_U32, "invalid DataType value 6"),
    (bytes([ExprTag.ATOMIC, 9]) + s("b") + b"\x00" + LIT_U32 * 2, "invalid AtomicOp value 9"),
    (bytes([ExprTag.SUBGROUP_REDUCE, 99]) + LIT_U32, "invalid BinOpKind value 99"),
])
def test_invalid_enum_values(expr: bytes, pattern: str) -> None:
    reject(frame(body_with(let(expr))), pattern, EXPR0 + 1)


def test_invalid_buffer_enums_and_flags() -> None:
    def buf(access: int, elem: int, is_output: int) -> bytes:
        return u32(1) + s("b") + u32(0) + bytes([access, elem]) + u32(0) + bytes([is_output])

    assert from_wire(frame(body_with(b"", 0, buf(1, 1, 1)))).buffers[0].is_output
    reject(frame(body_with(b"", 0, buf(6, 1, 0))), "invalid BufferAccess value 6", HEADER_LEN + 11)
    reject(frame(body_with(b"", 0, buf(1, 0, 0))), "invalid DataType value 0", HEADER_LEN + 12)
    reject(frame(body_with(b"", 0, buf(1, 1, 2))), "is_output flag byte is 2", HEADER_LEN + 17)


def test_out_of_range_fields() -> None:
    reject(frame(body_with(let(bytes([ExprTag.LIT_BOOL, 2])))), "LitBool value byte is 2, expected 0 or 1")
    reject(frame(body_with(let(bytes([ExprTag.INVOCATION_ID, 3])))), "axis 3 is out of range",
           EXPR0 + 1)
    reject(frame(body_with(let(bytes([ExprTag.ATOMIC, 1]) + s("b") + b"\x05" + LIT_U32 * 2))),
           "has-expected flag byte is 5")


def test_invalid_utf8() -> None:
    reject(frame(body_with(let(LIT_U32, s(b"\xff\xfe")))), "variable name is not valid UTF-8",
           STMT0 + 1 + 2)
    reject(frame(body_with(let(LIT_U32, s(b"\xed\xa0\x80")))), "not valid UTF-8")  # a surrogate


def test_string_length_limits() -> None:
    assert from_wire(frame(body_with(let(LIT_U32, s("x" * 64))))).entry
    reject(frame(body_with(let(LIT_U32, s("x" * 65)))), "variable name is 65 bytes long; the limit is 64")
    region = bytes([NodeTag.REGION])
    assert from_wire(frame(body_with(region + s("r" * 128) + u32(0)))).entry
    reject(frame(body_with(region + s("r" * 129) + u32(0))),
           "region label is 129 bytes long; the limit is 128")


def test_total_size_limit() -> None:
    reject(bytes(wire.MAX_WIRE_BYTES + 1), "size limit", 0)


@pytest.mark.parametrize("value", ["VYRE", None, 12, [1, 2]])
def test_non_bytes_input(value: object) -> None:
    with pytest.raises(WireError, match="expected bytes"):
        from_wire(value)  # type: ignore[arg-type]


# --- encoding limits and speed --------------------------------------------------------------------

def test_encoder_refuses_what_the_decoder_would_reject() -> None:
    e: LitU32 | UnOp = LitU32(1)
    for _ in range(128):
        e = UnOp(UnOpKind.NEGATE, e)
    with pytest.raises(WireError, match="nest deeper than 128"):
        to_wire(Program((), (1, 1, 1), (Let("x", e),)))
    with pytest.raises(WireError, match="limit is 64"):
        to_wire(Program((), (1, 1, 1), (Let("x" * 65, LitU32(0)),)))
    with pytest.raises(WireError, match="axis"):
        to_wire(Program((), (1, 1, 1), (Let("x", InvocationId(3)),)))
    with pytest.raises(WireError, match="workgroup size"):
        to_wire(Program((), (2**32, 1, 1), ()))
    with pytest.raises(WireError, match="not valid UTF-8"):
        to_wire(Program((), (1, 1, 1), (Let("\ud800", LitU32(0)),)))
    with pytest.raises(WireError, match="count of buffer"):
        to_wire(Program((BufferDecl("b", 0, BufferAccess.READ_ONLY, F32, -1),), (1, 1, 1), ()))


def test_digest_is_blake3_of_body() -> None:
    data = to_wire(every_variant())
    assert data[12:HEADER_LEN] == blake3.blake3(data[HEADER_LEN:]).digest()
    assert struct.unpack_from("<HHI", data, 4) == (1, 0, len(data) - HEADER_LEN)


def test_a_10k_node_program_round_trips() -> None:
    # Decoding speed is measured in bench/cpu_bench.py, not asserted here: a timed test fails on a
    # slow CI host without any change in the code.
    x = Var("x")
    stmts = tuple(Let(f"v{k}", BinOp(BinOpKind.ADD, Load("in", BinOp(BinOpKind.ADD, x, LitU32(k))),
                                     LitF32(1.0)))
                  for k in range(2000))
    p = Program((BufferDecl.read("in", 0, F32),), (64, 1, 1), stmts)
    data = to_wire(p)
    back = from_wire(data)
    assert back == p
    assert to_wire(back) == data
