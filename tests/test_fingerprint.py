"""Program fingerprints: blind to declaration order, sensitive to every semantic difference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

import blake3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import arbitrary_programs, programs
from vyre.ir import (
    AtomicOp,
    BinOp,
    BinOpKind,
    BufferAccess,
    BufferDecl,
    DataType,
    FunctionDef,
    If,
    InvocationId,
    Let,
    LitF32,
    LitF64,
    LitU32,
    Load,
    Loop,
    Program,
    Region,
    Store,
    UnOp,
    UnOpKind,
    Var,
    atomic,
    call,
    f32,
    gid,
    let,
    store,
)
from vyre.ir.wire import FINGERPRINT_DOMAIN, HEADER_LEN, from_wire, to_wire

F32, U32 = DataType.F32, DataType.U32
N = TypeVar("N")
SQUARE = FunctionDef("fp_square", (("a", F32),), F32, BinOp(BinOpKind.MUL, Var("a"), Var("a")))
HALF = FunctionDef("fp_half", (("a", F32),), F32, BinOp(BinOpKind.MUL, Var("a"), LitF32(0.5)))


def base() -> Program:
    x = BufferDecl.read("x", 0, F32)
    out = BufferDecl.output("out", 1, F32)
    acc = BufferDecl.read_write("acc", 2, U32)
    i = gid()
    return Program(
        (x, out, acc), (64, 1, 1),
        (
            let("t", x[i] * f32(-0.0) + f32(1.5)),
            let("old", atomic(AtomicOp.ADD, acc, 0, LitU32(1))),
            Loop("k", LitU32(0), LitU32(3), (let("c", call("fp_square", Var("t"))),)),
            If(i.lt(BinOp(BinOpKind.MIN, LitU32(8), LitU32(9))), (store(out, i, Var("t")),)),
            Region("fp.test", (let("h", call("fp_half", Var("t"))),)),
        ),
        (HALF, SQUARE),
    )


def entry_with(p: Program, k: int, node: object) -> Program:
    return replace(p, entry=(*p.entry[:k], node, *p.entry[k + 1:]))  # type: ignore[arg-type]


def buffer_with(p: Program, k: int, **changes: object) -> Program:
    bufs = list(p.buffers)
    bufs[k] = replace(bufs[k], **changes)  # type: ignore[arg-type]
    return replace(p, buffers=tuple(bufs))


def at(p: Program, k: int, kind: type[N]) -> N:
    node = p.entry[k]
    assert isinstance(node, kind)
    return node


T_LET = at(base(), 0, Let)
T_VALUE = T_LET.value
assert isinstance(T_VALUE, BinOp)
T_BIN: BinOp = T_VALUE

# One row per kind of semantic change; each must change the fingerprint.
CHANGES: list[tuple[str, Callable[[Program], Program]]] = [
    ("literal -0.0 -> +0.0", lambda p: entry_with(p, 0, let("t", Load("x", InvocationId(0)) * f32(0.0)
                                                             + f32(1.5)))),
    ("literal NaN payload", lambda p: entry_with(p, 0, let("t", LitF32(bits=0x7FC00001)))),
    ("literal other NaN payload", lambda p: entry_with(p, 0, let("t", LitF32(bits=0x7FC00002)))),
    ("f32 vs f64 literal", lambda p: entry_with(p, 0, let("t", LitF64(1.5)))),
    ("binary op", lambda p: entry_with(p, 0, Let("t", replace(T_BIN, op=BinOpKind.SUB)))),
    ("unary op wrapper", lambda p: entry_with(p, 0, Let("t", UnOp(UnOpKind.NEGATE, T_VALUE)))),
    ("variable name", lambda p: entry_with(p, 0, Let("u", T_VALUE))),
    ("atomic op", lambda p: entry_with(p, 1, let("old", atomic(AtomicOp.MAX, "acc", 0, LitU32(1))))),
    ("axis", lambda p: entry_with(p, 3, If(InvocationId(1).lt(LitU32(8)), (store("out", gid(), Var("t")),)))),
    ("loop bound", lambda p: entry_with(p, 2, replace(at(p, 2, Loop), end=LitU32(4)))),
    ("region label", lambda p: entry_with(p, 4, replace(at(p, 4, Region), generator="fp.other"))),
    ("statement order", lambda p: replace(p, entry=(p.entry[1], p.entry[0], *p.entry[2:]))),
    ("dropped statement", lambda p: replace(p, entry=p.entry[:-1])),
    ("store target", lambda p: entry_with(p, 3, If(gid().lt(LitU32(8)), (Store("acc", gid(), Var("t")),)))),
    ("buffer name", lambda p: buffer_with(p, 0, name="y")),
    ("binding", lambda p: buffer_with(p, 0, binding=7)),
    ("count", lambda p: buffer_with(p, 1, count=100)),
    ("access", lambda p: buffer_with(p, 0, access=BufferAccess.UNIFORM)),
    ("is_output", lambda p: buffer_with(p, 2, is_output=True)),
    ("element type", lambda p: buffer_with(p, 2, element=DataType.I32)),
    ("extra buffer", lambda p: replace(p, buffers=(*p.buffers, BufferDecl.workgroup("w", 4, U32)))),
    ("workgroup size x", lambda p: replace(p, workgroup_size=(32, 1, 1))),
    ("workgroup size y", lambda p: replace(p, workgroup_size=(64, 2, 1))),
    ("function body", lambda p: replace(p, functions=(replace(HALF, body=LitF32(0.5)), SQUARE))),
    ("function param type", lambda p: replace(p, functions=(HALF, replace(SQUARE, params=(("a", U32),))))),
    ("function result", lambda p: replace(p, functions=(HALF, replace(SQUARE, result=U32)))),
    ("dropped function", lambda p: replace(p, functions=(SQUARE,))),
]


def test_fingerprint_shape() -> None:
    p = base()
    fp = p.fingerprint()
    assert isinstance(fp, bytes) and len(fp) == 32
    assert fp == base().fingerprint()
    # Domain-separated: not the hash of the wire body (which is also in the header).
    assert fp != blake3.blake3(to_wire(p)[HEADER_LEN:]).digest()
    assert fp == blake3.blake3(FINGERPRINT_DOMAIN + to_wire(replace(
        p, buffers=tuple(sorted(p.buffers, key=lambda b: b.name))))[HEADER_LEN:]).digest()


@pytest.mark.parametrize(("what", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_every_semantic_change_changes_the_fingerprint(what: str,
                                                       change: Callable[[Program], Program]) -> None:
    p, q = base(), change(base())
    assert p != q, what
    assert p.fingerprint() != q.fingerprint(), what


def test_changes_are_pairwise_distinct() -> None:
    fps = [change(base()).fingerprint() for _, change in CHANGES]
    assert len(set(fps)) == len(fps)


def test_buffer_and_function_order_do_not_matter() -> None:
    p = base()
    q = replace(p, buffers=p.buffers[::-1], functions=p.functions[::-1])
    assert to_wire(p) != to_wire(q)  # the wire keeps declaration order...
    assert p.fingerprint() == q.fingerprint()  # ...the fingerprint does not


@given(programs(max_stmts=6), st.randoms(use_true_random=False))
def test_fingerprint_ignores_buffer_order_on_random_programs(p: Program, rnd: object) -> None:
    bufs = list(p.buffers)
    rnd.shuffle(bufs)  # type: ignore[attr-defined]
    assert replace(p, buffers=tuple(bufs)).fingerprint() == p.fingerprint()


@given(arbitrary_programs(), st.randoms(use_true_random=False))
def test_fingerprint_ignores_order_on_arbitrary_programs(p: Program, rnd: object) -> None:
    bufs, fns = list(p.buffers), list(p.functions)
    rnd.shuffle(bufs)  # type: ignore[attr-defined]
    rnd.shuffle(fns)  # type: ignore[attr-defined]
    assert replace(p, buffers=tuple(bufs), functions=tuple(fns)).fingerprint() == p.fingerprint()


def test_duplicate_names_sort_deterministically() -> None:
    a, b = BufferDecl.read("x", 0, F32), BufferDecl.read("x", 1, U32)
    p = Program((a, b), (1, 1, 1), ())
    assert p.fingerprint() == replace(p, buffers=(b, a)).fingerprint()
    assert p.fingerprint() != Program((a, a), (1, 1, 1), ()).fingerprint()


def test_programs_too_large_for_the_wire_still_have_fingerprints() -> None:
    e = UnOp(UnOpKind.NEGATE, LitU32(1))
    for _ in range(5000):  # far past the wire's depth limit and Python's recursion limit
        e = UnOp(UnOpKind.NEGATE, e)
    deep = Program((), (1, 1, 1), (Let("x" * 100, e),))
    assert len(deep.fingerprint()) == 32
    assert deep.fingerprint() != replace(deep, entry=(Let("x" * 100, e.operand),)).fingerprint()


def test_the_fingerprint_is_kept_per_object_and_never_carried_by_replace() -> None:
    p = base()
    assert p.fingerprint() is p.fingerprint()
    for what, change in CHANGES:
        q = change(p)  # built by dataclasses.replace from an object whose fingerprint is known
        assert q.fingerprint() != p.fingerprint(), what
        assert q.fingerprint() == change(base()).fingerprint(), what


def _rebuilt(p: Program) -> Program:
    """An equal Program made of new objects throughout (as code rebuilding it every call makes)."""
    return from_wire(to_wire(p))


@given(arbitrary_programs())
def test_structural_equality_implies_the_same_fingerprint(p: Program) -> None:
    # dispatch finds the kernel of a rebuilt program by hash and ==, never fingerprinting it: that is
    # sound only if == is at least as fine as the fingerprint (CHANGES checks the other direction)
    q = _rebuilt(p)
    assert q == p and hash(q) == hash(p)
    assert q.fingerprint() == p.fingerprint()


@given(programs(max_stmts=1), programs(max_stmts=1))
def test_equal_random_programs_have_equal_fingerprints(p: Program, q: Program) -> None:
    # small programs drawn twice are often equal; equality must never join different fingerprints
    if p == q:
        assert hash(p) == hash(q) and p.fingerprint() == q.fingerprint()
