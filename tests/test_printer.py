"""Printer and parser: golden text, exact round trips (own strategy and the shared ones), float
bits, quoted names, parse errors, deep input."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import arbitrary_programs, programs
from tests.test_validate import LERP, histogram, reduction, saxpy
from vyre.errors import ParseError
from vyre.ir import (
    EXPR_TYPES, F32, U32, Assign, Atomic, AtomicOp, Barrier, BinOp, BinOpKind, Block, BufferAccess,
    BufferDecl, BufLen, Call, Cast, DataType, Expr, Fma, FunctionAdjoint, FunctionDef, If, InvocationId, Let,
    LitBool, LitF32, LitF64, LitI32, LitU32, Load, LocalId, Loop, Node, Program, Region, Return,
    Select, Store, SubgroupBallot, SubgroupLocalId, SubgroupReduce, SubgroupShuffle, SubgroupSize,
    UnOp, UnOpKind, Var, WorkgroupId,
)
from vyre.ir.expr import I32_MAX, I32_MIN, U32_MAX
from vyre.ir.parser import parse_expr, parse_program
from vyre.ir.printer import (
    ACCESS_NAME, ATOMIC_NAME, BINOP_CALL, CALL_HEADS, ID_NAME, UNOP_NAME, print_expr,
)
from vyre.ir.validate import diagnostics

GOLDEN = Path(__file__).resolve().parent / "golden"


def kitchen_sink() -> Program:
    """Every statement kind, most expression kinds, odd floats and a quoted name."""
    i, v = Var("i"), Var("v")
    return Program(
        (BufferDecl.read("x", 0, F32), BufferDecl.output("out", 1, F32).with_count(4),
         BufferDecl.read_write("flags", 2, U32), BufferDecl.workgroup("tile", 64, F32)),
        (64, 1, 1),
        (
            Let("i", InvocationId(0)),
            Let("v", Select(BinOp(BinOpKind.LT, i, BufLen("x")), Load("x", i), LitF32(bits=0x80000000))),
            Let("s", SubgroupReduce(BinOpKind.ADD, v)),
            Let("mask", SubgroupBallot(UnOp(UnOpKind.IS_NAN, v))),
            Let("up", SubgroupShuffle(v, BinOp(BinOpKind.ADD, SubgroupLocalId(), LitU32(1)))),
            Let("old", Atomic(AtomicOp.COMPARE_EXCHANGE, "flags", LitU32(0), LitU32(1), LitU32(0))),
            Store("tile", LocalId(0), BinOp(BinOpKind.MAX, v, LitF32(bits=0x7FC00001))),
            Barrier(),
            Region("softmax.max", (
                Loop("k", LitU32(0), BinOp(BinOpKind.DIV, SubgroupSize(), LitU32(8)), (
                    Let("t", Fma(Load("tile", Var("k")), LitF32(0.1), Cast(F32, WorkgroupId(0)))),
                    Let("for", UnOp(UnOpKind.NEGATE, LitI32(-3))),
                    Assign("v", BinOp(BinOpKind.ADD, v, Var("t"))),
                )),
            )),
            If(BinOp(BinOpKind.GE, i, LitU32(4)), (Store("out", i, LitF32(math.inf)),), (
                Block((Let("q", Call("fx_lerp", (LitI32(1), LitI32(2), LitI32(3)))),)),
                Store("out", i, Cast(F32, Cast(DataType.F64, v))),
            )),
            If(LitBool(False), (), (Store("out", LitU32(0), LitF32(-1.5e-7)),)),
            Return(),
        ),
        (LERP,),
    )


GOLDEN_PROGRAMS = {"saxpy": saxpy, "reduction": reduction, "kitchen_sink": kitchen_sink}


@pytest.mark.parametrize("name", sorted(GOLDEN_PROGRAMS))
def test_golden(name: str) -> None:
    """Set VYRE_UPDATE_GOLDEN=1 to rewrite the files; review the diff before committing."""
    p = GOLDEN_PROGRAMS[name]()
    path = GOLDEN / f"{name}.vyre"
    text = str(p) + "\n"
    if os.environ.get("VYRE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.read_text() == text
    assert parse_program(path.read_text()) == p


def test_golden_programs_are_valid() -> None:
    for make in GOLDEN_PROGRAMS.values():
        assert diagnostics(make()) == []


def test_spelling_tables_cover_every_op() -> None:
    assert set(UNOP_NAME) == set(UnOpKind)
    assert set(ATOMIC_NAME) == set(AtomicOp)
    assert set(ACCESS_NAME) == set(BufferAccess)
    assert set(BINOP_CALL) | {k for k in BinOpKind if k not in BINOP_CALL} == set(BinOpKind)
    assert set(ID_NAME) == {InvocationId, LocalId, WorkgroupId}
    spellings = [*UNOP_NAME.values(), *BINOP_CALL.values(), *ATOMIC_NAME.values(), *ID_NAME.values()]
    assert len(spellings) == len(set(spellings)) and set(spellings) <= CALL_HEADS


def test_literal_spellings() -> None:
    assert print_expr(LitI32(-3)) == "-3i32"
    assert print_expr(LitU32(7)) == "7u32"
    assert print_expr(LitF32(1.5)) == "1.5f32"
    assert print_expr(LitF32(0.1)) == "0.1f32"
    assert print_expr(LitF64(2.0)) == "2.0f64"
    assert print_expr(LitF32(-0.0)) == "-0.0f32"
    assert print_expr(LitF32(bits=0x7FC00001)) == "f32(bits=0x7fc00001)"
    assert print_expr(LitF64(math.inf)) == "f64(bits=0x7ff0000000000000)"
    assert print_expr(LitBool(True)) == "true"
    assert print_expr(BinOp(BinOpKind.FIXED_MUL_Q16, LitI32(1), LitI32(2))) == "fixed_mul(1i32, 2i32)"
    assert print_expr(Atomic(AtomicOp.ADD, "h", LitU32(0), LitU32(1))) == "atomic_add(h, 0u32, 1u32)"


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
def test_float_literals_round_trip_bit_exactly(b32: int, b64: int) -> None:
    for e in (LitF32(bits=b32), LitF64(bits=b64)):
        back = parse_expr(print_expr(e))
        assert type(back) is type(e) and back.bits == e.bits  # type: ignore[union-attr]


def test_names_that_need_quotes() -> None:
    for name in ("let", "if", "true", "a b", "`tick`", "back\\slash", "é", "", "\n", "min"):
        p = Program((), (1, 1, 1), (Let(name, Var(name)), Assign(name, Call(name, ()))), ())
        assert parse_program(str(p)) == p, str(p)
    # built-in call names are fine as variables and buffers, and quoted only as functions
    assert print_expr(Var("min")) == "min"
    assert print_expr(Load("len", LitU32(0))) == "len[0u32]"
    assert print_expr(Call("min", (Var("a"),))) == "`min`(a)"


def test_hand_written_text_with_comments() -> None:
    text = """
    # a comment
    program wg(32, 1, 1) {
      buffer x: f32 read @0   # input
      buffer y: f32 read_write output @1
      let i = gid(0)
      y[i] = sqrt(x[i])
      for k in 0u32 .. 2u32 { y[i] = (y[i] * 0.5f32) }
    }
    """
    p = parse_program(text)
    assert p.workgroup_size == (32, 1, 1)
    assert p.entry[1] == Store("y", Var("i"), UnOp(UnOpKind.SQRT, Load("x", Var("i"))))
    assert diagnostics(p) == []


@pytest.mark.parametrize(("text", "where", "what"), [
    ("program wg(64, 1, 1) {\n  let x = (a + b c)\n}", "2:18", "expected ')'"),
    ("program wg(64, 1, 1) {\n  let x = 1\n}", "2:11", "no type suffix"),
    ("program wg(64, 1, 1) {\n  let x = 4294967296u32\n}", "2:11", "bad u32 literal"),
    ("program wg(64, 1, 1) {\n  let if = 1u32\n}", "2:7", "expected a variable name"),
    ("program wg(64, 1, 1) {\n  let x = select(true, 1u32)\n}", "2:28", "expected ','"),
    ("program wg(64, 1, 1) {\n  let x = 1u32\n", "3:1", "not closed"),
    ("program wg(64, 1, 1) {\n  let x = $\n}", "2:11", "unexpected character"),
    ("program wg(64, 1, 1) {\n  if true { fn f() -> u32 = 1u32 }\n}", "2:13", "inside a nested block"),
    ("program wg(64, 1, 1) {\n  buffer x: f32 readable @0\n}", "2:17", "buffer access"),
    ("progam wg(64) { }", "1:1", "expected 'program'"),
    ("program wg(64) { } trailing", "1:20", "after the end"),
])
def test_parse_errors_point_at_the_problem(text: str, where: str, what: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_program(text)
    msg = str(info.value)
    assert msg.startswith(where + ": ") and what in msg
    lines = msg.split("\n")
    col = int(where.split(":")[1])
    assert lines[2].index("^") - 2 == col - 1
    assert lines[-1].startswith("Fix: ")


def test_deep_programs_print_and_parse_without_recursion() -> None:
    e: Expr = LitU32(1)
    for _ in range(10_000):
        e = BinOp(BinOpKind.ADD, e, LitU32(1))
    body: tuple[Node, ...] = (Let("a", e),)
    for _ in range(2_000):
        body = (Block(body),)
    text = str(Program((), (1, 1, 1), body, ()))
    assert str(parse_program(text)) == text
    with pytest.raises(ParseError):
        parse_program("program wg(1) { let a = " + "(" * 100_000 + "1u32 }")


# ---- a small strategy over every variant, including odd names and values ------------------------

_names = st.one_of(st.sampled_from(["x", "i", "let", "for", "min", "gid", "a b", "`", "\\", "é"]),
                   st.text(max_size=5))
_leaf: st.SearchStrategy[Expr] = st.one_of(
    st.builds(LitBool, st.booleans()),
    st.builds(LitI32, st.integers(I32_MIN, I32_MAX)),
    st.builds(LitU32, st.integers(0, U32_MAX)),
    st.integers(0, 2**32 - 1).map(lambda b: LitF32(bits=b)),
    st.integers(0, 2**64 - 1).map(lambda b: LitF64(bits=b)),
    st.floats(width=32).map(LitF32),
    st.builds(Var, _names),
    st.builds(BufLen, _names),
    st.builds(InvocationId, st.integers(-3, 5)),
    st.builds(WorkgroupId, st.integers(0, 2)),
    st.builds(LocalId, st.integers(0, 2)),
    st.just(SubgroupLocalId()),
    st.just(SubgroupSize()),
)


def _extend(s: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.builds(Load, _names, s),
        st.builds(BinOp, st.sampled_from(BinOpKind), s, s),
        st.builds(UnOp, st.sampled_from(UnOpKind), s),
        st.builds(Select, s, s, s),
        st.builds(Cast, st.sampled_from(DataType), s),
        st.builds(Fma, s, s, s),
        st.builds(Atomic, st.sampled_from(AtomicOp), _names, s, s, st.none() | s),
        st.builds(SubgroupBallot, s),
        st.builds(SubgroupShuffle, s, s),
        st.builds(SubgroupReduce, st.sampled_from(BinOpKind), s),
        st.builds(Call, _names, st.lists(s, max_size=3).map(tuple)),
    )


_exprs = st.recursive(_leaf, _extend, max_leaves=8)


def _extend_nodes(s: st.SearchStrategy[tuple[Node, ...]]) -> st.SearchStrategy[tuple[Node, ...]]:
    one: st.SearchStrategy[Node] = st.one_of(
        st.builds(If, _exprs, s, s),
        st.builds(Loop, _names, _exprs, _exprs, s),
        st.builds(Block, s),
        st.builds(Region, st.text(max_size=6), s),
    )
    return st.lists(one, max_size=3).map(tuple)


_simple: st.SearchStrategy[Node] = st.one_of(
    st.builds(Let, _names, _exprs), st.builds(Assign, _names, _exprs),
    st.builds(Store, _names, _exprs, _exprs), st.just(Barrier()), st.just(Return()),
)
_bodies = st.recursive(st.lists(_simple, max_size=3).map(tuple), _extend_nodes, max_leaves=6)
_buffers = st.builds(BufferDecl, _names, st.integers(-2, 40), st.sampled_from(BufferAccess),
                     st.sampled_from(DataType), st.integers(0, 2**33), st.booleans())
_adjoints = st.one_of(st.none(), st.builds(
    FunctionAdjoint, _names, _names, st.lists(st.one_of(st.none(), _exprs), max_size=3).map(tuple)))
_functions = st.builds(FunctionDef, _names,
                       st.lists(st.tuples(_names, st.sampled_from(DataType)), max_size=3).map(tuple),
                       st.sampled_from(DataType), _exprs, _adjoints)
_programs = st.builds(
    Program, st.lists(_buffers, max_size=3).map(tuple),
    st.tuples(st.integers(-2, 2000), st.integers(1, 4), st.integers(1, 4)), _bodies,
    st.lists(_functions, max_size=2).map(tuple),
)


@settings(max_examples=60, deadline=None)
@given(_programs)
def test_round_trip_arbitrary_programs(p: Program) -> None:
    assert parse_program(str(p)) == p
    for d in diagnostics(p):  # the validator takes anything the printer can print
        assert "Fix:" in d.message


@settings(max_examples=25, deadline=None)
@given(programs(allow_atomics=True, allow_barriers=True, allow_subgroups=True))
def test_round_trip_generated_valid_programs(p: Program) -> None:
    assert parse_program(str(p)) == p


@settings(max_examples=25, deadline=None)
@given(arbitrary_programs())
def test_round_trip_shared_arbitrary_programs(p: Program) -> None:
    assert parse_program(str(p)) == p


def test_round_trip_realistic() -> None:
    p = histogram()
    assert parse_program(str(p)) == p
    assert len(EXPR_TYPES) == 23  # a new variant needs a spelling here and in the parser
    assert re.search(r"atomic_add\(hist, bin, 1u32\)", str(p))
