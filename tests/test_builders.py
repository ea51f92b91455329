"""The IR builders: one per op, documented, and the operators on expressions."""

from __future__ import annotations

import inspect
import pydoc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import vyre
import vyre.ir as ir
from vyre.errors import BuildError
from vyre.ir import (
    F32, F64, I32, U32, AtomicOp, BinOp, BinOpKind, LitF32, LitU32, Program, UnOp, UnOpKind, buflen,
    f32, gid, i32, if_, output, read, store, var,
)
from vyre.ir.printer import ATOMIC_NAME, BINOP_CALL, UNOP_NAME

# Builders of the ops the printer spells with a symbol (the rest are named as the printer names them).
SYMBOL_BUILDER = {
    BinOpKind.ADD: "add", BinOpKind.SUB: "sub", BinOpKind.MUL: "mul", BinOpKind.DIV: "div",
    BinOpKind.MOD: "mod", BinOpKind.BIT_AND: "bit_and", BinOpKind.BIT_OR: "bit_or",
    BinOpKind.BIT_XOR: "bit_xor", BinOpKind.SHL: "shl", BinOpKind.SHR: "shr", BinOpKind.EQ: "eq",
    BinOpKind.NE: "ne", BinOpKind.LT: "lt", BinOpKind.GT: "gt", BinOpKind.LE: "le",
    BinOpKind.GE: "ge", BinOpKind.AND: "logical_and", BinOpKind.OR: "logical_or",
}


def _operand(rule_types: tuple[object, ...]) -> object:
    """A variable-free operand of the first type the rule accepts."""
    t = rule_types[0]
    return {ir.BOOL: ir.boolean(True), I32: i32(-3), U32: LitU32(3), F32: f32(0.5),
            F64: ir.f64(0.5)}[t]


@pytest.mark.parametrize("kind", list(UnOpKind), ids=lambda k: k.name)
def test_every_unary_op_has_a_builder(kind: UnOpKind) -> None:
    builder = getattr(ir, UNOP_NAME[kind])
    a = _operand(ir.UNOP_RULES[kind].operands)
    assert builder(a) == UnOp(kind, a)


@pytest.mark.parametrize("kind", list(BinOpKind), ids=lambda k: k.name)
def test_every_binary_op_has_a_builder(kind: BinOpKind) -> None:
    name = BINOP_CALL.get(kind) or SYMBOL_BUILDER[kind]
    builder = getattr(ir, name)
    a = _operand(ir.BINOP_RULES[kind].operands)
    assert builder(a, a) == BinOp(kind, a, a)


@pytest.mark.parametrize("op", list(AtomicOp), ids=lambda k: k.name)
def test_every_atomic_op_has_a_builder(op: AtomicOp) -> None:
    builder = getattr(ir, ATOMIC_NAME[op])
    buf = ir.read_write("c", 0, U32)
    args = (buf, 1, 2, 3) if op is AtomicOp.COMPARE_EXCHANGE else (buf, 1, 2)
    a = builder(*args)
    assert a.op is op and a.buffer == "c" and a.value == LitU32(3 if op is AtomicOp.COMPARE_EXCHANGE else 2)
    if op is AtomicOp.COMPARE_EXCHANGE:
        assert a.expected == LitU32(2)


def _public_builders() -> list[str]:
    return [n for n in ir.__all__ if inspect.isfunction(getattr(ir, n))
            and getattr(ir, n).__module__ in ("vyre.ir.builder", "vyre.ir.program")]


@pytest.mark.parametrize("name", _public_builders())
def test_every_public_builder_has_a_docstring_with_an_example(name: str) -> None:
    """Builders, and the buffer constructors (read, output, uniform, workgroup ...)."""
    doc = inspect.getdoc(getattr(ir, name)) or ""
    assert doc.strip(), f"{name} has no docstring"
    assert "``" in doc and "(" in doc, f"{name}'s docstring has no one-line example: {doc!r}"


def test_help_of_the_ir_package_lists_the_builders() -> None:
    text = pydoc.render_doc(ir, renderer=pydoc.plaintext)
    for name in ("exp", "atomic_max", "if_", "is_nan", "Program"):
        assert name in text


def test_builtin_shadowing_names_stay_out_of_star_imports() -> None:
    ns: dict[str, object] = {}
    exec("from vyre.ir import *", ns)
    for name in ("abs", "round", "min", "max", "pow"):
        assert name not in ns
        assert getattr(ir, name) is not None  # importable by name


def test_orderings_build_comparisons_and_equality_stays_structural() -> None:
    i = gid()
    assert (i < 10) == BinOp(BinOpKind.LT, i, LitU32(10))
    assert (i <= 10) == BinOp(BinOpKind.LE, i, LitU32(10))
    assert (i > 10) == BinOp(BinOpKind.GT, i, LitU32(10))
    assert (i >= 10) == BinOp(BinOpKind.GE, i, LitU32(10))
    assert (10 > i) == BinOp(BinOpKind.LT, i, LitU32(10))  # reflected: same meaning
    assert (i == gid()) is True and (i == ir.lid()) is False
    assert ir.eq(i, 3) == BinOp(BinOpKind.EQ, i, LitU32(3))
    x = var("x")
    assert (x < 1.5) == BinOp(BinOpKind.LT, x, LitF32(1.5))


def test_truth_value_of_an_expression_is_an_error_with_a_fix() -> None:
    with pytest.raises(BuildError, match="Fix:"):
        bool(gid() < 3)
    with pytest.raises(BuildError, match="Python bool"):
        if_(gid() == gid(), [])


@pytest.mark.parametrize("make", [
    lambda: var("x") // 2.0,
    lambda: 2.0 // var("x"),
    lambda: f32(3.0) // var("y"),
    lambda: var("y") // ir.cast(F64, var("z")),
])
def test_floor_division_of_floats_is_an_error_with_a_fix(make: object) -> None:
    with pytest.raises(BuildError, match=r"Fix: write floor\(a / b\)"):
        make()  # type: ignore[operator]


def test_floor_division_of_integers_is_the_ir_division() -> None:
    assert gid() // 2 == BinOp(BinOpKind.DIV, gid(), LitU32(2))
    assert 7 // gid() == BinOp(BinOpKind.DIV, LitU32(7), gid())


def test_subgroup_reduce_takes_op_names() -> None:
    v = var("v")
    assert ir.subgroup_reduce("add", v).op is BinOpKind.ADD
    assert ir.subgroup_reduce("xor", v).op is BinOpKind.BIT_XOR
    assert ir.subgroup_reduce("bit_or", v).op is BinOpKind.BIT_OR
    with pytest.raises(BuildError, match="Fix: use one of"):
        ir.subgroup_reduce("mul", v)


@given(st.lists(st.floats(-4, 4, width=32), min_size=1, max_size=16))
def test_comparison_operators_run_like_numpy(xs: list[float]) -> None:
    x, out = read("x", 0, F32), output("out", 1, U32)
    i = gid()
    prog = Program.wrapped([x, out], 32, [
        if_(i < buflen(out), [store(out, i, ir.select(x[i] >= 0.5, 1, 0) + ir.select(x[i] < -1.0, 2, 0))]),
    ])
    a = np.asarray(xs, np.float32)
    res = vyre.dispatch(prog, {"x": a, "out": np.zeros(a.size, np.uint32)}, backend="interp")
    np.testing.assert_array_equal(res["out"], (a >= 0.5) * 1 + (a < -1.0) * 2)


def test_pow_operator_and_int_exponents() -> None:
    x = ir.f64(2.0)
    assert x ** 2 == BinOp(BinOpKind.POW, x, ir.LitF64(2.0))  # a bare int exponent becomes a float
    assert 3 ** x == BinOp(BinOpKind.POW, ir.LitF64(3.0), x)
    assert ir.power(var("a"), 0.5) == BinOp(BinOpKind.POW, var("a"), LitF32(0.5))
    xs, out = read("x", 0, F64), output("out", 1, F64)
    i = var("i")
    prog = Program.wrapped([xs, out], 4, [ir.let("i", gid()), if_(i < 4, [
        store(out, i, ir.stop_gradient(xs[i]) ** ir.f64(2.0) + ir.power(xs[i], ir.f64(0.5)))])])
    prog.validate()
    from vyre.ir.parser import parse_program
    from vyre.ir.printer import print_program
    assert parse_program(print_program(prog)) == prog
    assert Program.from_wire(prog.to_wire()) == prog


def test_pow_and_stop_gradient_are_float_only() -> None:
    from vyre.errors import ValidationError
    xs, out = read("x", 0, U32), output("out", 1, U32)
    for e in (BinOp(BinOpKind.POW, xs[gid()], xs[gid()]), UnOp(UnOpKind.STOP_GRADIENT, xs[gid()])):
        with pytest.raises(ValidationError, match="Fix:"):
            Program.wrapped([xs, out], 4, [store(out, gid(), e)]).validate()
