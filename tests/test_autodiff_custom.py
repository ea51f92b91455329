"""Custom adjoints: a function registered with its own backward rule (like jax.custom_vjp / Warp's
func_grad) is differentiated by that rule, not by its body.

The oracle: a program calling functions whose custom adjoints are correct must give the same
gradient as the same program with the adjoints removed (the body differentiated), and agree with
float64 central differences; a deliberately wrong adjoint must fail ``check_grad``. Hypothesis
places the calls in random surroundings (arithmetic, selects, branches, loops).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vyre.autodiff import check_grad, grad, hvp, vjp
from vyre.errors import ValidationError
from vyre.ir import (
    F64, I32, U32, Expr, FunctionAdjoint, FunctionDef, Program, buflen, call, cast, cos, exp, f64,
    gid, i32, if_, let, log, loop, output, read, register_function, select, sin, store, tanh, var,
)
from vyre.ir.parser import parse_program
from vyre.ir.printer import print_program

N = 6
a_, b_, k_, g_, r_ = var("a"), var("b"), var("k"), var("g"), var("r")

TWICE = register_function(FunctionDef("cadj_twice", (("a", F64),), F64, a_ * f64(2.0)))
MULSIN = register_function(
    FunctionDef("cadj_mulsin", (("a", F64), ("b", F64)), F64, a_ * b_ + sin(a_)),
    adjoint=FunctionAdjoint("r", "g", (g_ * (b_ + cos(a_)), g_ * a_)))
# Uses the result: softplus' = sigmoid = 1 - exp(-r).
SOFTPLUS = register_function(
    FunctionDef("cadj_softplus", (("a", F64),), F64, log(f64(1.0) + exp(a_))),
    adjoint=FunctionAdjoint("r", "g", (g_ * (f64(1.0) - exp(-r_)),)))
# An integer parameter takes no gradient.
SCALE = register_function(
    FunctionDef("cadj_scale", (("a", F64), ("k", I32)), F64, a_ * cast(F64, k_)),
    adjoint=FunctionAdjoint("r", "g", (g_ * cast(F64, k_), None)))
# The adjoint calls another function.
SQUARE = register_function(
    FunctionDef("cadj_square", (("a", F64),), F64, a_ * a_),
    adjoint=FunctionAdjoint("r", "g", (g_ * call("cadj_twice", a_),)))
CORRECT = (MULSIN, SOFTPLUS, SCALE, SQUARE)


def _strip(p: Program) -> Program:
    """The same program with every custom adjoint removed (autodiff differentiates the bodies)."""
    return dataclasses.replace(p, functions=tuple(dataclasses.replace(f, adjoint=None)
                                                  for f in p.functions))


def _call(fn: FunctionDef, x: Expr, y: Expr) -> Expr:
    match fn.op_id:
        case "cadj_mulsin":
            return call(fn.op_id, x, y)
        case "cadj_scale":
            return call(fn.op_id, x, i32(3))
        case _:
            return call(fn.op_id, tanh(x) if fn is SOFTPLUS else x)


@st.composite
def contexts(draw: st.DrawFn, depth: int = 3) -> Expr:
    """An expression over xv, yv with custom-adjoint calls placed anywhere in it."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from([var("xv"), var("yv"), f64(0.6)]))
    a = draw(contexts(depth - 1))
    b = draw(contexts(depth - 1))
    match draw(st.sampled_from(["call", "call", "add", "mul", "tanh", "select"])):
        case "call":
            return _call(draw(st.sampled_from(CORRECT)), a, b)
        case "add":
            return a + b
        case "mul":
            return a * b
        case "tanh":
            return tanh(a)
        case _:
            return select(a.gt(b), a * f64(2.0), b)


def _program(e: Expr, shape: str) -> Program:
    x, y, n, out = read("x", 0, F64), read("y", 1, F64), read("n", 2, U32), output("out", 3, F64)
    i = var("i")
    head = [let("xv", x[i]), let("yv", y[i])]
    match shape:
        case "plain":
            body = [*head, store(out, i, e)]
        case "branch":
            body = [*head, let("acc", f64(0.5)),
                    if_(var("xv").gt(f64(0.0)), [store(out, i, e)], [store(out, i, e * var("acc"))])]
        case _:  # a dynamic loop (n[0] trips) carrying a value through the call
            body = [*head, let("acc", f64(0.0)),
                    loop("j", 0, n[0], [let("xv", var("xv") * f64(0.9) + var("acc") * f64(0.1)),
                                        let("acc", var("acc") + e * f64(0.5))]),
                    store(out, i, var("acc"))]
    return Program.wrapped([x, y, n, out], 4, [let("i", gid()), if_(i.lt(buflen(out)), body)])


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-1.5, 1.5, N), "y": rng.uniform(-1.5, 1.5, N),
            "n": np.array([3], dtype=np.uint32), "out": np.zeros(N)}


SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(contexts(), st.sampled_from(["plain", "branch", "loop"]), st.integers(0, 2**16))
def test_correct_custom_adjoints_equal_the_body_gradient_and_finite_differences(e, shape, seed) -> None:
    prog = _program(e, shape)
    inputs = _inputs(seed)
    u = {"out": np.random.default_rng(seed).standard_normal(N)}
    got = vjp(prog, inputs, u, ["x", "y"], backend="interp")
    want = vjp(_strip(prog), inputs, u, ["x", "y"], backend="interp")
    for k in ("x", "y"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)
    check_grad(prog, inputs, ["x", "y"], backend="interp", seed=seed)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contexts(2), st.sampled_from(["plain", "loop"]), st.integers(0, 2**16))
def test_custom_adjoints_on_cpu(e, shape, seed) -> None:
    check_grad(_program(e, shape), _inputs(seed), ["x", "y"], backend="cpu", seed=seed)


def _wrong(scale: float) -> FunctionDef:
    return register_function(
        FunctionDef(f"cadj_wrong_{int(scale * 100)}", (("a", F64),), F64, sin(a_)),
        adjoint=FunctionAdjoint("r", "g", (g_ * cos(a_) * f64(scale),)))


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_a_wrong_custom_adjoint_fails_check_grad(backend: str) -> None:
    wrong = _wrong(1.1)
    prog = _program(call(wrong.op_id, var("xv")) * var("yv"), "plain")
    with pytest.raises(AssertionError, match=r"worst element x\["):
        check_grad(prog, _inputs(1), ["x", "y"], backend=backend)
    check_grad(_strip(prog), _inputs(1), ["x", "y"], backend=backend)  # the body is fine


def test_the_custom_adjoint_is_what_grad_uses() -> None:
    """A clipped ("straight-through") backward: the gradient is the rule's, not the body's."""
    clip = register_function(
        FunctionDef("cadj_clip", (("a", F64),), F64, a_ * a_ * a_),
        adjoint=FunctionAdjoint("r", "g", (select(g_.gt(f64(1.0)), f64(1.0), g_),)))
    prog = _program(call(clip.op_id, var("xv")), "plain")
    u = np.array([0.5, 2.0, -3.0, 1.0, 7.0, 0.0])
    g = vjp(prog, _inputs(2), {"out": u}, ["x"], backend="interp")
    np.testing.assert_array_equal(g["x"], np.minimum(u, 1.0))
    # forward mode differentiates the body (docs/autodiff.md): d(x^3) = 3x^2 dx
    from vyre.autodiff import jvp
    x = _inputs(2)["x"]
    _, t = jvp(prog, _inputs(2), {"x": np.ones(N)}, backend="interp")
    np.testing.assert_allclose(t["out"], 3 * x * x, rtol=1e-14)


def test_a_stable_adjoint_where_the_body_derivative_overflows() -> None:
    """softplus(1000): the body's derivative exp(a)/(1+exp(a)) is inf/inf = NaN; the adjoint's
    1 - exp(-r) is 1."""
    x, out = read("x", 0, F64), output("out", 1, F64)
    prog = Program.wrapped([x, out], 4, [if_(gid().lt(buflen(out)), [
        store(out, gid(), call("cadj_softplus", x[gid()]))])])
    inputs = {"x": np.array([1000.0, -1000.0, 0.0, 30.0]), "out": np.zeros(4)}
    g = vjp(prog, inputs, {"out": np.ones(4)}, ["x"], backend="interp")["x"]
    np.testing.assert_allclose(g, [1.0, 0.0, 0.5, 1.0], atol=1e-12)
    with np.errstate(all="ignore"):
        body = vjp(_strip(prog), inputs, {"out": np.ones(4)}, ["x"], backend="interp")["x"]
    assert np.isnan(body[0])


def test_second_order_differentiates_the_custom_adjoint() -> None:
    prog = _program(call("cadj_square", var("xv")) * var("yv"), "plain")
    inputs = _inputs(5)
    v = {"x": np.ones(N), "y": np.zeros(N)}
    h = hvp(prog, inputs, "out", ["x", "y"], v, backend="interp")
    np.testing.assert_allclose(h["x"], 2 * inputs["y"], rtol=1e-12)  # d2/dx2 of x^2 y
    np.testing.assert_allclose(h["y"], 2 * inputs["x"], rtol=1e-12)


def test_the_backward_program_has_no_calls() -> None:
    back = grad(_program(call("cadj_mulsin", var("xv"), var("yv")), "plain"), ["out"], ["x", "y"])
    assert back.functions == () and "cadj" not in print_program(back)


def test_adjoints_round_trip_through_text_and_wire() -> None:
    prog = _program(call("cadj_scale", var("xv"), i32(2)) + call("cadj_square", var("yv")), "plain")
    assert any(f.adjoint is not None for f in prog.functions)
    assert parse_program(print_program(prog)) == prog
    assert Program.from_wire(prog.to_wire()) == prog
    assert "vjp(r, g) = [(g * f64(k)), nograd]" in print_program(prog)
    # the adjoint is part of the program's identity
    assert _strip(prog).fingerprint() != prog.fingerprint()
    assert _strip(prog).to_wire() == Program.from_wire(_strip(prog).to_wire()).to_wire()


@pytest.mark.parametrize("adjoint, message", [
    (FunctionAdjoint("r", "g", (g_,)), r"gives 1 gradient\(s\); expected a tuple of 2"),
    (FunctionAdjoint("r", "g", (g_, g_)), r"parameter 'k' is i32, which takes no gradient; expected None"),
    (FunctionAdjoint("a", "g", (g_, None)), r"must be two identifiers that are not parameters"),
    (FunctionAdjoint("r", "r", (g_, None)), r"must be two identifiers"),
    (FunctionAdjoint("r", "g", (cast(F64, k_) > f64(0.0), None)),
     r"gradient of parameter 'a' has type bool; expected f64"),
    (FunctionAdjoint("r", "g", (var("zz"), None)), r"zz"),
])
def test_bad_adjoints_are_refused_when_registered(adjoint, message) -> None:
    fn = FunctionDef("cadj_bad", (("a", F64), ("k", I32)), F64, a_ * cast(F64, k_))
    with pytest.raises(ValidationError, match="Fix:") as e:
        register_function(fn, adjoint=adjoint)
    assert all(".adjoint" in d.path for d in e.value.diagnostics)
    assert re.search(message, str(e.value)), str(e.value)


def test_an_adjoint_on_an_integer_function_is_refused() -> None:
    fn = FunctionDef("cadj_int", (("a", F64),), I32, cast(I32, a_))
    with pytest.raises(ValidationError, match="returns i32, which carries no gradient"):
        register_function(fn, adjoint=FunctionAdjoint("r", "g", (a_,)))
    prog = Program.wrapped([read("x", 0, F64), output("out", 1, I32)], 4, [
        store("out", gid(), call("cadj_int", read("x", 0, F64)[gid()]))],
        [dataclasses.replace(fn, adjoint=FunctionAdjoint("r", "g", (a_,)))])
    with pytest.raises(ValidationError, match="V067"):
        prog.validate()


def test_a_custom_adjoint_keeps_the_untaken_select_arm_exactly_zero() -> None:
    """select(x > 0, mysqrt(x), 0) at x < 0: the adjoint's factor 0.5/sqrt(x) is NaN there, but the
    arm's adjoint is a structural zero, so the gradient is 0, as for the built-in sqrt."""
    from vyre.ir import sqrt
    root = register_function(
        FunctionDef("cadj_sqrt", (("a", F64),), F64, sqrt(a_)),
        adjoint=FunctionAdjoint("r", "g", (g_ * f64(0.5) / sqrt(a_),)))
    prog = _program(select(var("xv").gt(f64(0.0)), call(root.op_id, var("xv")), f64(0.0))
                    + select(var("xv").gt(f64(1.0)), call(root.op_id, var("xv")), f64(0.0)), "plain")
    inputs = dict(_inputs(0), x=np.array([-1.0, -0.5, 0.25, 2.0, 4.0, -3.0]))
    g = vjp(prog, inputs, {"out": np.ones(N)}, ["x"], backend="interp")["x"]
    want = np.where(inputs["x"] > 0, 0.5 / np.sqrt(np.abs(inputs["x"])), 0.0)
    want = want + np.where(inputs["x"] > 1, 0.5 / np.sqrt(np.abs(inputs["x"])), 0.0)
    np.testing.assert_array_equal(np.isnan(g), np.zeros(N, bool))
    np.testing.assert_allclose(g, want, rtol=1e-14)
