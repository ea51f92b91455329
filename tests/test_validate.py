"""Validation: one negative test per code, findings reported together, realistic valid programs,
limits without recursion, hostile input, and agreement with the shared program strategies."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings

from tests.strategies import arbitrary_programs, programs
from vyre.errors import ValidationError
from vyre.ir import (
    EXPR_TYPES, F32, I32, NODE_TYPES, U32, Assign, Atomic, AtomicOp, Barrier, BinOp,
    BinOpKind, Block, BufferAccess, BufferDecl, Call, Cast, Fma, FunctionAdjoint, FunctionDef, If, InvocationId, Let,
    LitBool, LitF32, LitF64, LitI32, LitU32, Load, Loop, Node, Program, Region, Return, Select,
    Store, SubgroupBallot, SubgroupReduce, SubgroupShuffle, UnOp, UnOpKind, Var, assign, atomic_add,
    ballot, barrier, buflen, f32, fixed_mul, fma, gid, i32, if_, lane, let, lid, loop, output,
    read, read_write, select, shuffle, store, subgroup_reduce, u32, uniform, var, wgid, workgroup,
)
from vyre.ir._checks import EXPR_FIELDS, NODE_FIELDS, measure
from vyre.ir.validate import CODES, diagnostics, validate_function

DOCS = Path(__file__).resolve().parent.parent / "docs" / "errors.md"

X = BufferDecl.read("x", 0, F32)
OUT = BufferDecl.output("out", 1, F32)
ACC = BufferDecl.read_write("acc", 2, U32)
ACCF = BufferDecl.read_write("accf", 3, F32)
WO = BufferDecl.storage("wo", 4, BufferAccess.WRITE_ONLY, U32)
BUFS = (X, OUT, ACC, ACCF, WO)
SQ = FunctionDef("sq", (("a", F32),), F32, BinOp(BinOpKind.MUL, Var("a"), Var("a")))
T = LitBool(True)


def prog(*entry: object, buffers: tuple[object, ...] = BUFS, wg: object = (64, 1, 1),
         functions: tuple[object, ...] = (SQ,)) -> Program:
    """A program built directly (no builder checks), so malformed parts get through."""
    return Program(buffers, wg, tuple(entry), functions)  # type: ignore[arg-type]


def fn_prog(fn: FunctionDef) -> Program:
    return prog(functions=(SQ, fn))


def deep_expr(n: int) -> BinOp:
    e: BinOp | LitU32 = LitU32(1)
    for _ in range(n):
        e = BinOp(BinOpKind.ADD, e, LitU32(1))
    assert isinstance(e, BinOp)
    return e


def nested_blocks(n: int) -> Node:
    node: Node = Let("z", LitU32(0))
    for _ in range(n):
        node = Block((node,))
    return node


SHARED_100 = deep_expr(100)  # 201 expressions; 2000 uses of it make a tree past the limit


def _sub() -> SubgroupReduce:
    return SubgroupReduce(BinOpKind.ADD, LitU32(1))


# One program per code; each must produce (at least) that code.
NEGATIVE: dict[str, Callable[[], Program]] = {
    "V001": lambda: prog("not a statement"),
    "V002": lambda: prog(Let("my var", LitU32(1))),
    "V003": lambda: prog(Region('gen"quoted', ())),
    "V004": lambda: prog(buffers=(X, BufferDecl.read("x", 5, F32))),
    "V005": lambda: prog(buffers=(X, BufferDecl.read("y", 0, F32))),
    "V006": lambda: prog(buffers=(BufferDecl.read("x", -1, F32),)),
    "V007": lambda: prog(Let("a", Load("nope", LitU32(0)))),
    "V008": lambda: prog(Let("a", Var("q"))),
    "V009": lambda: prog(Assign("q", LitU32(1))),
    "V010": lambda: prog(Loop("k", LitU32(0), LitU32(4), (Assign("k", LitU32(1)),))),
    "V011": lambda: prog(Let("a", LitU32(1)), Let("a", LitU32(2))),
    "V012": lambda: prog(Let("k", LitU32(1)), Loop("k", LitU32(0), LitU32(4), ())),
    "V013": lambda: prog(Let("a", BinOp(BinOpKind.ADD, LitI32(1), LitU32(1)))),
    "V014": lambda: prog(Let("a", UnOp(UnOpKind.SQRT, LitU32(4)))),
    "V015": lambda: prog(Let("a", Select(LitU32(1), LitU32(1), LitU32(2)))),
    "V016": lambda: prog(Let("a", Select(T, LitU32(1), LitI32(2)))),
    "V017": lambda: prog(Let("a", Fma(LitF32(1.0), LitF32(2.0), LitF64(3.0)))),
    "V018": lambda: prog(Let("a", Load("x", LitI32(0)))),
    "V019": lambda: prog(Loop("k", LitI32(0), LitU32(4), ())),
    "V020": lambda: prog(If(LitU32(1), ())),
    "V021": lambda: prog(Let("a", LitU32(1)), Assign("a", LitF32(1.0))),
    "V022": lambda: prog(Store("out", LitU32(0), LitU32(1))),
    "V023": lambda: prog(Let("o", Atomic(AtomicOp.ADD, "acc", LitU32(0), LitI32(1)))),
    "V024": lambda: prog(Let("o", Atomic(AtomicOp.MIN, "accf", LitU32(0), LitF32(1.0)))),
    "V025": lambda: prog(Let("o", Atomic(AtomicOp.ADD, "acc", LitU32(0), LitU32(1), LitU32(0)))),
    "V026": lambda: prog(Let("b", SubgroupBallot(LitU32(1)))),
    "V027": lambda: prog(Let("s", SubgroupShuffle(LitU32(1), LitI32(0)))),
    "V028": lambda: prog(Let("s", SubgroupReduce(BinOpKind.MUL, LitU32(1)))),
    "V030": lambda: prog(Store("acc", LitU32(0), Atomic(AtomicOp.ADD, "acc", LitU32(0), LitU32(1)))),
    "V031": lambda: prog(Let("s", BinOp(BinOpKind.ADD, _sub(), LitU32(1)))),
    "V032": lambda: prog(If(T, (Let("s", _sub()),))),
    "V033": lambda: prog(If(T, (Barrier(),))),
    "V034": lambda: prog(Barrier(), If(T, (Return(),))),
    "V035": lambda: prog(Let("s", _sub()), wg=(48, 1, 1)),
    "V040": lambda: prog(Let("a", Call("nope", ()))),
    "V041": lambda: prog(Let("a", Call("sq", ()))),
    "V042": lambda: prog(Let("a", Call("sq", (LitU32(1),)))),
    "V043": lambda: fn_prog(FunctionDef("f", (), F32, Load("x", LitU32(0)))),
    "V044": lambda: fn_prog(FunctionDef("f", (), F32, Var("z"))),
    "V045": lambda: fn_prog(FunctionDef("f", (("a", F32),), F32, Call("f", (Var("a"),)))),
    "V046": lambda: fn_prog(FunctionDef("f", (), F32, LitU32(1))),
    "V047": lambda: prog(functions=(SQ, SQ)),
    "V050": lambda: prog(Store("x", LitU32(0), LitF32(1.0))),
    "V051": lambda: prog(Let("o", Atomic(AtomicOp.ADD, "wo", LitU32(0), LitU32(1)))),
    "V052": lambda: prog(Let("a", Load("wo", LitU32(0)))),
    "V053": lambda: prog(buffers=(BufferDecl.workgroup("t", 0, F32),)),
    "V054": lambda: prog(buffers=(BufferDecl.workgroup("t", 20_000, F32),)),
    "V055": lambda: prog(buffers=(BufferDecl("r", 0, BufferAccess.READ_ONLY, F32, is_output=True),)),
    "V056": lambda: prog(buffers=(BufferDecl.read("x", 0, F32).with_count(2**32),)),
    "V060": lambda: prog(wg=(0, 1, 1)),
    "V061": lambda: prog(wg=(2048, 1, 1)),
    "V062": lambda: prog(Let("a", InvocationId(3))),
    "V063": lambda: prog(nested_blocks(70)),
    "V064": lambda: prog(Let("a", deep_expr(200))),
    "V065": lambda: prog(*[Let(f"v{i}", SHARED_100) for i in range(2000)]),
    "V066": lambda: prog(buffers=tuple(BufferDecl.read(f"b{i}", i, F32) for i in range(65))),
    "V067": lambda: prog(Let("a", Call("adj2", (LitF32(1.0), LitF32(2.0)))), functions=(FunctionDef(
        "adj2", (("p", F32), ("q", F32)), F32, Var("p"),
        FunctionAdjoint("r", "g", (Var("g"),))),)),  # one gradient for two parameters
}


def test_every_code_has_a_negative_test_and_docs() -> None:
    assert set(NEGATIVE) == set(CODES)
    documented = set(re.findall(r"^\| (V\d{3}) \|", DOCS.read_text(), flags=re.M))
    assert documented == set(CODES)


@pytest.mark.parametrize("code", sorted(NEGATIVE))
def test_negative(code: str) -> None:
    diags = diagnostics(NEGATIVE[code]())
    hits = [d for d in diags if d.code == code]
    assert hits, f"{code} not reported; got {[str(d) for d in diags]}"
    for d in hits:
        assert "Fix:" in d.message
        assert "expected" in d.message or code in ("V065",)
    with pytest.raises(ValidationError) as info:
        NEGATIVE[code]().validate()
    assert code in info.value.codes


def test_field_tables_cover_every_variant() -> None:
    assert set(EXPR_FIELDS) == set(EXPR_TYPES)
    assert set(NODE_FIELDS) == set(NODE_TYPES)


def test_paths_name_fields() -> None:
    p = prog(If(T, (Let("a", BinOp(BinOpKind.ADD, LitU32(1), Var("nope"))),)))
    assert [(d.code, d.path) for d in p.diagnostics()] == [("V008", "entry[0].then[0].value.right")]


def test_literal_fix_says_how_to_write_it() -> None:
    (d,) = [d for d in diagnostics(NEGATIVE["V013"]()) if d.code == "V013"]
    assert "write i32(1)" in d.message
    p = prog(Let("a", LitF64(1.0)), Assign("a", BinOp(BinOpKind.ADD, Var("a"), LitF32(1.0))))
    assert any("write f64(1.0)" in d.message for d in p.diagnostics())
    (d,) = [d for d in diagnostics(NEGATIVE["V022"]()) if d.code == "V022"]
    assert "write f32(1.0)" in d.message


def test_several_errors_reported_together() -> None:
    p = prog(
        Let("i", gid()),
        Let("a", Var("missing")),
        Store("x", Var("i"), LitF32(1.0)),
        Let("b", BinOp(BinOpKind.ADD, Var("i"), LitF32(1.0))),
        If(Var("i"), (Barrier(),)),
        Let("i", LitU32(0)),
        wg=(2048, 1, 1),
    )
    codes = [d.code for d in p.diagnostics()]
    assert set(codes) >= {"V008", "V050", "V013", "V020", "V033", "V011", "V061"}
    with pytest.raises(ValidationError) as info:
        p.validate()
    assert str(info.value).count("Fix:") == len(codes)


# ---- realistic valid programs -------------------------------------------------------------------


def saxpy() -> Program:
    x, y, out, a = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32), uniform("a", 3, F32)
    i = var("i")
    return Program.wrapped([x, y, out, a], 64, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(out, i, fma(a[0], x[i], y[i]))]),
    ])


def reduction() -> Program:
    """Workgroup tree reduction: workgroup memory, barriers inside a loop with uniform bounds."""
    x, out, tile = read("x", 0, F32), output("out", 1, F32), workgroup("tile", 256, F32)
    l, g, s = var("l"), var("g"), var("s")
    return Program.wrapped([x, out, tile], 256, [
        let("l", lid()),
        let("g", gid()),
        store(tile, l, select(g.lt(buflen(x)), x[g], f32(0.0))),
        barrier(),
        let("steps", u32(8)),
        loop("k", 0, var("steps"), [
            let("s", u32(128) >> var("k")),
            if_(l.lt(s), [store(tile, l, tile[l] + tile[l + s])]),
            barrier(),
        ]),
        if_(l.eq(0), [store(out, wgid(), tile[0])]),
    ])


def subgroup_sum() -> Program:
    x, out = read("x", 0, F32), output("out", 1, F32)
    g, v = var("g"), var("v")
    return Program.wrapped([x, out], 64, [
        let("g", gid()),
        let("v", select(g.lt(buflen(x)), x[g], f32(0.0))),
        let("s", subgroup_reduce(BinOpKind.ADD, v)),
        let("mask", ballot(v.gt(0.0))),
        let("first", shuffle(v, u32(0))),
        if_(lane().eq(0), [store(out, g / 32, var("s") + var("first") * 0.0)]),
    ])


def histogram() -> Program:
    data, hist = read("data", 0, U32), read_write("hist", 1, U32).as_output()
    g = var("g")
    return Program.wrapped([data, hist], 128, [
        let("g", gid()),
        if_(g.lt(buflen(data)), [
            let("bin", data[g] % 16),
            let("old", atomic_add(hist, var("bin"), u32(1))),
        ]),
    ])


LERP = FunctionDef("fx_lerp", (("a", I32), ("b", I32), ("t", I32)), I32,
                   BinOp(BinOpKind.ADD, Var("a"),
                         BinOp(BinOpKind.FIXED_MUL_Q16, BinOp(BinOpKind.SUB, Var("b"), Var("a")), Var("t"))))


def fixed_point() -> Program:
    """16.16 fixed point: products with fixed_mul, a lerp function, an accumulator."""
    a, b, out = read("a", 0, I32), read("b", 1, I32), output("out", 2, I32)
    g, acc = var("g"), var("acc")
    return Program.wrapped([a, b, out], 64, [
        let("g", gid()),
        if_(g.lt(buflen(out)), [
            let("acc", i32(1 << 16)),
            loop("k", 0, 4, [
                assign("acc", fixed_mul(acc, a[g]) + Call("fx_lerp", (a[g], b[g], i32(1 << 15)))),
            ]),
            store(out, g, acc),
        ]),
    ], functions=[LERP])


REALISTIC = {"saxpy": saxpy, "reduction": reduction, "subgroup_sum": subgroup_sum,
             "histogram": histogram, "fixed_point": fixed_point}


@pytest.mark.parametrize("name", sorted(REALISTIC))
def test_realistic_programs_are_valid(name: str) -> None:
    p = REALISTIC[name]()
    assert p.diagnostics() == []
    assert p.validate() is p


def test_uniformity_is_tracked_through_lets_and_loops() -> None:
    # a Let-bound value that is later assigned is not uniform: a barrier in a loop over it is rejected
    p = prog(Let("n", LitU32(4)), Loop("k", LitU32(0), Var("n"), (Barrier(),)), Assign("n", LitU32(5)))
    assert [d.code for d in p.diagnostics()] == ["V033"]
    ok = prog(Let("n", BinOp(BinOpKind.ADD, Cast(U32, LitI32(4)), Load("acc", LitU32(0)))),
              Loop("k", LitU32(0), LitU32(4), (Barrier(),)))
    assert ok.diagnostics() == []
    per_lane = prog(Let("n", InvocationId(0)), Loop("k", LitU32(0), Var("n"), (Barrier(),)))
    assert [d.code for d in per_lane.diagnostics()] == ["V033"]
    nested = prog(Loop("k", LitU32(0), LitU32(4), (Loop("j", LitU32(0), Var("k"), (Let("s", _sub()),)),)))
    assert nested.diagnostics() == []


def test_shadowing_and_scopes() -> None:
    ok = prog(Let("a", LitU32(1)), Block((Let("a", LitF32(1.0)), Store("out", LitU32(0), Var("a")))),
              Store("acc", LitU32(0), Var("a")))
    assert ok.diagnostics() == []
    out_of_scope = prog(If(T, (Let("a", LitU32(1)),)), Let("b", Var("a")))
    assert [d.code for d in out_of_scope.diagnostics()] == ["V008"]
    loop_let = prog(Loop("k", LitU32(0), LitU32(4), (Let("k", LitU32(1)),)))
    assert [d.code for d in loop_let.diagnostics()] == ["V012"]


# ---- limits, hostile input -------------------------------------------------------------------------


def test_deep_expression_is_a_finding_not_a_recursion_error() -> None:
    p = prog(Let("a", deep_expr(10_000)), Store("out", LitU32(0), deep_expr(10_000)))
    assert [d.code for d in p.diagnostics()] == ["V064", "V064"]
    fn = FunctionDef("deep", (), U32, deep_expr(10_000))
    assert [d.code for d in validate_function(fn)] == ["V064"]


def test_deep_statements_are_a_finding() -> None:
    assert [d.code for d in prog(nested_blocks(10_000)).diagnostics()] == ["V063"]


def test_shared_subtrees_count_per_use_and_are_measured_once() -> None:
    e: BinOp | LitF32 = LitF32(1.0)
    for _ in range(300):
        e = BinOp(BinOpKind.ADD, e, e)
    # The tree has 2^301 - 1 nodes counted per use; only a memoised walk can finish.
    assert [d.code for d in prog(Let("a", e)).diagnostics()] == ["V065"]
    memo: dict[int, tuple[int, int, int]] = {}
    size, depth, _ = measure(e, memo)
    assert len(memo) == 301  # each distinct node measured exactly once
    assert size >= 200_000 and depth == 301


def test_hostile_names_are_truncated_in_messages() -> None:
    name = "A" * 10_000 + "\n\x00"
    p = prog(Let(name, LitU32(1)), Let("b", Var(name)), buffers=(BufferDecl.read(name, 0, F32),))
    diags = p.diagnostics()
    assert {d.code for d in diags} == {"V002"}
    assert all("A" * 41 not in d.message and len(d.message) < 400 for d in diags)


def test_wrong_python_types_anywhere_are_findings() -> None:
    p = prog(
        Let("a", BinOp("add", LitU32(1), LitU32(2))),  # type: ignore[arg-type]
        If(T, [Barrier()]),  # type: ignore[arg-type]
        Let("c", Call("sq", [LitF32(1.0)])),  # type: ignore[arg-type]
        Let("d", 5),  # type: ignore[arg-type]
        Store(7, LitU32(0), LitF32(1.0)),  # type: ignore[arg-type]
        Loop("k", LitU32(0), LitU32(1), (LitU32(1),)),  # type: ignore[arg-type]
        buffers=(X, OUT, "buf"),
        functions=(SQ, "fn"),
    )
    diags = p.diagnostics()
    assert [d.code for d in diags].count("V001") == 8
    assert diagnostics("not a program") [0].code == "V001"  # type: ignore[arg-type]
    assert prog(wg=(64, 1)).diagnostics()[0].code == "V060"


def test_validate_function_standalone() -> None:
    assert validate_function(SQ) == []
    assert validate_function(LERP) == []
    uses = FunctionDef("uses_sq", (("v", F32),), F32, Call("sq", (Var("v"),)))
    assert validate_function(uses, [SQ]) == []
    assert [d.code for d in validate_function(uses, {})] == ["V040"]
    a = FunctionDef("a", (), F32, Call("b", ()))
    b = FunctionDef("b", (), F32, Call("a", ()))
    assert [d.code for d in validate_function(a, [b])] == ["V045"]
    assert [(d.code, d.path) for d in validate_function(FunctionDef("f", (), F32, Var("x")))] == [
        ("V044", "function.body")]


def test_mutual_recursion_in_program() -> None:
    a = FunctionDef("a", (), F32, Call("b", ()))
    b = FunctionDef("b", (), F32, Call("a", ()))
    assert [d.code for d in prog(functions=(a, b)).diagnostics()] == ["V045"]


@settings(max_examples=25, deadline=None)
@given(programs(allow_atomics=True, allow_barriers=True, allow_subgroups=True, allow_calls=True))
def test_generated_valid_programs_validate(p: Program) -> None:
    assert p.diagnostics() == []


@settings(max_examples=25, deadline=None)
@given(arbitrary_programs())
def test_arbitrary_programs_never_crash(p: Program) -> None:
    for d in p.diagnostics():
        assert d.code in CODES
        assert "Fix:" in d.message


def test_builders_reach_every_helper() -> None:
    # the realistic programs above use builders; this keeps the imports honest for mypy/ruff
    assert isinstance(ballot(T), SubgroupBallot) and isinstance(barrier(), Barrier)
    assert isinstance(loop("k", 0, 1, []), Loop) and isinstance(u32(1), LitU32)
    assert isinstance(i32(1), LitI32) and isinstance(f32(1.0), LitF32)


def test_loads_of_uniform_buffers_at_uniform_indices_are_uniform() -> None:
    """A kernel's scalar parameters (1-element uniform buffers) may bound loops holding barriers;
    loads of other buffers, or at a varying index, may not."""
    n = uniform("n", 2, U32).with_count(1)
    m = read("m", 3, U32)
    tile = workgroup("tile", 64, F32)

    def looped(bound: object) -> Program:
        return Program.wrapped([X, OUT, n, m, tile], 64, [
            loop("k", 0, bound, [store(tile, lid(), X[gid()]), barrier()]),  # type: ignore[arg-type]
            store(OUT, gid(), tile[lid()]),
        ])

    assert looped(n[0]).diagnostics() == []
    assert looped(n[u32(0) + wgid()]).diagnostics() == []
    assert [d.code for d in looped(n[lid()]).diagnostics()] == ["V033"]
    assert [d.code for d in looped(m[0]).diagnostics()] == ["V033"]
