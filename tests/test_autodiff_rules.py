"""Derivative rule tables: coverage of every op, and table-driven first/second-order checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vyre.autodiff import BINOP_DERIV, UNOP_DERIV, BinDiff, NonDiff, UnDiff, ZeroDiff, check_grad, hvp, jvp
from vyre.autodiff.check import promote_f64
from vyre.ir import (
    BINOP_RULES, F32, F64, UNOP_RULES, BinOpKind, Program, UnOpKind, binop, buflen, cast, f64, fma,
    gid, if_, output, read, select, store, unop,
)

N = 6


def test_every_binop_is_classified() -> None:
    assert set(BINOP_DERIV) == set(BinOpKind)
    for op, rule in BINOP_DERIV.items():
        assert isinstance(rule, BinDiff | NonDiff)
        floaty = F64 in BINOP_RULES[op].operands and BINOP_RULES[op].result_for(F64).is_float
        # Every op that maps floats to floats has a derivative; the rest are explicitly non-differentiable.
        assert isinstance(rule, BinDiff) == floaty, op


def test_every_unop_is_classified() -> None:
    assert set(UNOP_DERIV) == set(UnOpKind)
    # The zero-derivative policy: exactly the piecewise-constant ops and stop_gradient.
    zero = {UnOpKind.FLOOR, UnOpKind.CEIL, UnOpKind.ROUND, UnOpKind.TRUNC, UnOpKind.SIGN,
            UnOpKind.STOP_GRADIENT}
    for op, rule in UNOP_DERIV.items():
        assert isinstance(rule, UnDiff | ZeroDiff | NonDiff)
        floaty = F64 in UNOP_RULES[op].operands and UNOP_RULES[op].result_for(F64).is_float
        assert isinstance(rule, UnDiff) == (floaty and op not in zero), op
        assert isinstance(rule, ZeroDiff) == (op in zero), op
        # NonDiff is left for ops whose result is no float (bools, integers): nothing to differentiate.
        assert isinstance(rule, NonDiff) == (not floaty), op
        if isinstance(rule, NonDiff):
            assert rule.why and rule.fix


def _domain(lo: float, hi: float, away_from_zero: bool = False):
    def gen(rng: np.random.Generator) -> np.ndarray:
        v = rng.uniform(lo, hi, N)
        if away_from_zero:
            v = np.where(rng.random(N) < 0.5, -1.0, 1.0) * rng.uniform(0.3, hi, N)
        return v
    return gen


# (op, input generator, d/dx, d2/dx2) with numpy reference derivatives.
UNARY = [
    (UnOpKind.NEGATE, _domain(-2, 2), lambda x: -np.ones_like(x), lambda x: 0 * x),
    (UnOpKind.ABS, _domain(0, 2, True), np.sign, lambda x: 0 * x),
    (UnOpKind.SQRT, _domain(0.2, 3), lambda x: 0.5 / np.sqrt(x), lambda x: -0.25 * x ** -1.5),
    (UnOpKind.INVERSE_SQRT, _domain(0.2, 3), lambda x: -0.5 * x ** -1.5, lambda x: 0.75 * x ** -2.5),
    (UnOpKind.EXP, _domain(-2, 2), np.exp, np.exp),
    (UnOpKind.EXP2, _domain(-2, 2), lambda x: np.exp2(x) * math.log(2),
     lambda x: np.exp2(x) * math.log(2) ** 2),
    (UnOpKind.LOG, _domain(0.2, 3), lambda x: 1 / x, lambda x: -1 / x**2),
    (UnOpKind.LOG2, _domain(0.2, 3), lambda x: 1 / (x * math.log(2)), lambda x: -1 / (x**2 * math.log(2))),
    (UnOpKind.SIN, _domain(-3, 3), np.cos, lambda x: -np.sin(x)),
    (UnOpKind.COS, _domain(-3, 3), lambda x: -np.sin(x), lambda x: -np.cos(x)),
    (UnOpKind.TAN, _domain(-1.2, 1.2), lambda x: 1 / np.cos(x) ** 2,
     lambda x: 2 * np.tan(x) / np.cos(x) ** 2),
    (UnOpKind.ASIN, _domain(-0.9, 0.9), lambda x: 1 / np.sqrt(1 - x**2), lambda x: x * (1 - x**2) ** -1.5),
    (UnOpKind.ACOS, _domain(-0.9, 0.9), lambda x: -1 / np.sqrt(1 - x**2), lambda x: -x * (1 - x**2) ** -1.5),
    (UnOpKind.ATAN, _domain(-3, 3), lambda x: 1 / (1 + x**2), lambda x: -2 * x / (1 + x**2) ** 2),
    (UnOpKind.SINH, _domain(-2, 2), np.cosh, np.sinh),
    (UnOpKind.COSH, _domain(-2, 2), np.sinh, np.cosh),
    (UnOpKind.TANH, _domain(-2, 2), lambda x: 1 - np.tanh(x) ** 2,
     lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    (UnOpKind.RECIPROCAL, _domain(0, 2, True), lambda x: -1 / x**2, lambda x: 2 / x**3),
]


def test_unary_table_covers_every_differentiable_unop() -> None:
    assert {u[0] for u in UNARY} == {op for op, r in UNOP_DERIV.items() if isinstance(r, UnDiff)}


def _unary_program(op: UnOpKind, dtype=F64) -> Program:
    x, out = read("x", 0, dtype), output("out", 1, dtype)
    i = gid()
    return Program.wrapped([x, out], 4, [if_(i.lt(buflen(out)), [store(out, i, unop(op, x[i]))])])


@pytest.mark.parametrize("op, gen, d1, d2", UNARY, ids=[u[0].name for u in UNARY])
def test_unary_first_and_second_order(op, gen, d1, d2) -> None:
    rng = np.random.default_rng(int(op))
    xv = gen(rng)
    inputs = {"x": xv, "out": np.zeros(N)}
    prog = _unary_program(op)
    check_grad(prog, inputs, ["x"], backend="interp")
    v = rng.standard_normal(N)
    _, t = jvp(prog, inputs, {"x": v}, backend="interp")
    np.testing.assert_allclose(t["out"], d1(xv) * v, rtol=1e-12, atol=1e-12)
    h = hvp(prog, inputs, "out", ["x"], {"x": v}, backend="interp")
    np.testing.assert_allclose(h["x"], d2(xv) * v, rtol=1e-10, atol=1e-10)


def _b(lo, hi):
    return lambda rng: rng.uniform(lo, hi, N)


# (op, a generator, b generator, (da, db), hessian-vector reference or None)
BINARY = [
    (BinOpKind.ADD, _b(-2, 2), _b(-2, 2)),
    (BinOpKind.SUB, _b(-2, 2), _b(-2, 2)),
    (BinOpKind.MUL, _b(-2, 2), _b(-2, 2)),
    (BinOpKind.DIV, _b(-2, 2), _b(0.5, 2)),
    (BinOpKind.MOD, _b(0.1, 4), _b(0.7, 1.3)),
    (BinOpKind.MIN, _b(-2, 2), _b(-2, 2)),
    (BinOpKind.MAX, _b(-2, 2), _b(-2, 2)),
    (BinOpKind.ABS_DIFF, _b(-2, 2), _b(-2, 2)),
    (BinOpKind.POW, _b(0.3, 2.5), _b(-2, 2)),
]


def test_binary_table_covers_every_differentiable_binop() -> None:
    assert {b[0] for b in BINARY} == {op for op, r in BINOP_DERIV.items() if isinstance(r, BinDiff)}


def _binary_program(op: BinOpKind) -> Program:
    a, b, out = read("a", 0, F64), read("b", 1, F64), output("out", 2, F64)
    i = gid()
    return Program.wrapped([a, b, out], 4,
                           [if_(i.lt(buflen(out)), [store(out, i, binop(op, a[i], b[i]))])])


@pytest.mark.parametrize("op, ga, gb", BINARY, ids=[b[0].name for b in BINARY])
def test_binary_first_and_second_order(op, ga, gb) -> None:
    rng = np.random.default_rng(100 + int(op))
    inputs = {"a": ga(rng), "b": gb(rng), "out": np.zeros(N)}
    prog = _binary_program(op)
    check_grad(prog, inputs, ["a", "b"], backend="interp")
    # Second order: the HVP agrees with finite differences of the gradient.
    from vyre.autodiff import vjp
    v = {"a": rng.standard_normal(N), "b": rng.standard_normal(N)}
    h = hvp(prog, inputs, "out", ["a", "b"], v, backend="interp")
    eps = 1e-6
    plus = {k: inputs[k] + eps * v[k] if k in v else inputs[k] for k in inputs}
    minus = {k: inputs[k] - eps * v[k] if k in v else inputs[k] for k in inputs}
    gp = vjp(prog, plus, {"out": np.ones(N)}, ["a", "b"], backend="interp")
    gm = vjp(prog, minus, {"out": np.ones(N)}, ["a", "b"], backend="interp")
    for k in ("a", "b"):
        np.testing.assert_allclose(h[k], (gp[k] - gm[k]) / (2 * eps), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", [BinOpKind.MIN, BinOpKind.MAX])
def test_min_max_ties_split_evenly(op) -> None:
    from vyre.autodiff import vjp
    prog = _binary_program(op)
    same = np.array([0.5, -1.0, 2.0, 0.0, 3.0, -2.0])
    g = vjp(prog, {"a": same, "b": same.copy(), "out": np.zeros(N)}, {"out": np.ones(N)}, ["a", "b"],
            backend="interp")
    np.testing.assert_array_equal(g["a"], np.full(N, 0.5))
    np.testing.assert_array_equal(g["b"], np.full(N, 0.5))


def test_min_max_nan_operand_gets_no_gradient() -> None:
    from vyre.autodiff import vjp
    prog = _binary_program(BinOpKind.MIN)
    a = np.array([np.nan, 1.0, 2.0, 3.0, 4.0, 5.0])
    g = vjp(prog, {"a": a, "b": np.full(N, 0.25), "out": np.zeros(N)}, {"out": np.ones(N)},
            ["a", "b"], backend="interp")
    assert g["a"][0] == 0.0 and g["b"][0] == 1.0  # min(NaN, b) returns b


def test_abs_and_abs_diff_use_zero_at_the_kink() -> None:
    from vyre.autodiff import vjp
    g = vjp(_unary_program(UnOpKind.ABS), {"x": np.zeros(N), "out": np.zeros(N)},
            {"out": np.ones(N)}, ["x"], backend="interp")
    np.testing.assert_array_equal(g["x"], np.zeros(N))
    z = np.ones(N)
    g2 = vjp(_binary_program(BinOpKind.ABS_DIFF), {"a": z, "b": z.copy(), "out": np.zeros(N)},
             {"out": np.ones(N)}, ["a", "b"], backend="interp")
    np.testing.assert_array_equal(g2["a"], np.zeros(N))


def test_fma_select_and_float_casts() -> None:
    a, b, out = read("a", 0, F64), read("b", 1, F32), output("out", 2, F64)
    i = gid()
    bb = cast(F64, b[i])
    body = fma(a[i], bb, select(a[i].gt(f64(0.0)), a[i] * a[i], bb * f64(3.0)))
    prog = Program.wrapped([a, b, out], 4, [if_(i.lt(buflen(out)), [store(out, i, body)])])
    rng = np.random.default_rng(3)
    inputs: dict[str, np.ndarray] = {
        "a": rng.uniform(-2, 2, N), "b": rng.uniform(-2, 2, N).astype(np.float32), "out": np.zeros(N)}
    check_grad(prog, inputs, ["a", "b"], backend="interp")


def test_f32_program_is_checked_against_promoted_f64() -> None:
    prog = _unary_program(UnOpKind.TANH, F32)
    assert all(b.element is F64 for b in promote_f64(prog).buffers)
    x = np.random.default_rng(5).uniform(-2, 2, N).astype(np.float32)
    err = check_grad(prog, {"x": x, "out": np.zeros(N, np.float32)}, ["x"], backend="interp")
    assert err < 2e-3


def test_pow_matches_analytic_derivatives_and_its_conventions() -> None:
    from vyre.autodiff import vjp
    prog = _binary_program(BinOpKind.POW)
    a = np.array([0.5, 2.0, 3.0, 0.0, 0.0, -2.0])
    b = np.array([3.0, -1.5, 0.0, 2.0, 0.0, 3.0])
    g = vjp(prog, {"a": a, "b": b, "out": np.zeros(N)}, {"out": np.ones(N)}, ["a", "b"], backend="interp")
    with np.errstate(all="ignore"):
        da = np.where(b == 0, 0.0, b * a ** (b - 1))
        db = a ** b * np.log(np.where(a == 0, 1.0, a))
    np.testing.assert_allclose(g["a"], da, rtol=1e-14)
    # JAX's conventions: d/da is 0 at b == 0 (pow(0, 0) included); d/db uses log(1) at a == 0;
    # a negative base has no derivative in b (NaN, which check_grad reports).
    assert g["a"][2] == 0.0 and g["a"][4] == 0.0 and g["b"][3] == 0.0 and g["b"][4] == 0.0
    assert np.isnan(g["b"][5]) and np.isnan(db[5])
    np.testing.assert_allclose(g["b"][:5], db[:5], rtol=1e-14)
