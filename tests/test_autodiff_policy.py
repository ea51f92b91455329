"""The zero-derivative policy (docs/autodiff.md): a float that depends on a differentiated value
only through a step (floor, ceil, round, trunc, sign), ``stop_gradient``, or a non-float
(comparison, float->int cast, integer op) has derivative 0; nothing else loses its derivative.

Hypothesis mixes smooth ops with every kind of step; at generic points (inputs from a seeded
numpy generator, never on a jump) the policy's gradient is the true derivative, so it must agree
with float64 central differences, on the interpreter and the CPU backend. ``stop_gradient`` is
checked against the same program with the stopped value passed in as data.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vyre.autodiff import check_grad, grad, vjp
from vyre.ir import (
    F32, F64, I32, U32, Expr, Program, absolute, cast, ceil, f64, floor, gid, if_, let, output,
    UnOp, UnOpKind, power, read, rint, select, sign, sin, stop_gradient, store, tanh, trunc, var,
    walk,
)

N = 6
STEP_KINDS = ("floor", "ceil", "round", "trunc", "sign", "cast_i32", "cast_u32", "cmp_select",
              "bool_cast", "int_mix", "stop")


def _step(kind: str, e: Expr, other: Expr) -> Expr:
    """A piecewise-constant function of ``e`` (``other`` is used smoothly where a kind allows)."""
    scaled = e * f64(3.0)
    match kind:
        case "floor":
            return floor(scaled)
        case "ceil":
            return ceil(scaled)
        case "round":
            return rint(scaled)
        case "trunc":
            return trunc(scaled)
        case "sign":
            return sign(e)
        case "cast_i32":
            return cast(F64, cast(I32, scaled))
        case "cast_u32":
            return cast(F64, cast(U32, absolute(scaled)) & 3)
        case "cmp_select":
            return select(e.gt(f64(0.2)), f64(1.0), f64(-0.5))
        case "bool_cast":
            return cast(F64, e.lt(other))
        case "int_mix":
            return cast(F64, (cast(I32, scaled) * 7) % 5)
        case "stop":
            return stop_gradient(e)
    raise AssertionError(kind)


@st.composite
def exprs(draw: st.DrawFn, depth: int, leaves: tuple[Expr, ...], steps: bool = True) -> Expr:
    if depth == 0 or draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from([*leaves, f64(0.7), f64(-1.3)]))
    a = draw(exprs(depth - 1, leaves, steps))
    b = draw(exprs(depth - 1, leaves, steps))
    kinds = ["add", "mul", "tanh", "sin", "pow"] + (["step"] * 3 if steps else [])
    match draw(st.sampled_from(kinds)):
        case "add":
            return a + b
        case "mul":
            return a * b
        case "tanh":
            return tanh(a)
        case "sin":
            return sin(a) * b
        case "pow":
            return power(f64(1.0) + a * a, tanh(b))  # a positive base
        case _:
            return _step(draw(st.sampled_from(STEP_KINDS)), a, b) * b + a


def _program(body: Callable[[Expr, Expr], Expr]) -> Program:
    x, y, out = read("x", 0, F64), read("y", 1, F64), output("out", 2, F64)
    i = var("i")
    return Program.wrapped([x, y, out], 4, [let("i", gid()), if_(i.lt(N), [
        let("xv", x[i]), let("yv", y[i]), store(out, i, body(var("xv"), var("yv")))])])


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-1.5, 1.5, N), "y": rng.uniform(-1.5, 1.5, N), "out": np.zeros(N)}


LEAVES = (var("xv"), var("yv"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs(4, LEAVES), st.integers(0, 2**16))
def test_steps_have_derivative_zero_interp(e: Expr, seed: int) -> None:
    if _has_stop(e):
        return  # stop_gradient is not the derivative of the function: tested below
    check_grad(_program(lambda _x, _y: e), _inputs(seed), ["x", "y"], backend="interp", seed=seed)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs(3, LEAVES), st.integers(0, 2**16))
def test_steps_have_derivative_zero_cpu(e: Expr, seed: int) -> None:
    if _has_stop(e):
        return
    check_grad(_program(lambda _x, _y: e), _inputs(seed), ["x", "y"], backend="cpu", seed=seed)


def _has_stop(e: Expr) -> bool:
    return any(isinstance(x, UnOp) and x.op is UnOpKind.STOP_GRADIENT for x in walk(e))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs(3, (*LEAVES, var("sv")), steps=False), exprs(3, LEAVES), st.integers(0, 2**16))
def test_stop_gradient_is_the_value_passed_as_data(f: Expr, g: Expr, seed: int) -> None:
    """d/dx f(x, stop_gradient(g(x))) == d/dx f(x, c) with c = g(x) given as an input."""
    x, y, c, out = read("x", 0, F64), read("y", 1, F64), read("c", 2, F64), output("out", 3, F64)
    i = var("i")
    head = [let("i", gid())]
    loads = [let("xv", x[i]), let("yv", y[i])]
    stopped = Program.wrapped([x, y, c, out], 4, [*head, if_(i.lt(N), [
        *loads, let("sv", stop_gradient(g)), store(out, i, f)])])
    as_data = Program.wrapped([x, y, c, out], 4, [*head, if_(i.lt(N), [
        *loads, let("sv", c[i]), store(out, i, f)])])
    gval = Program.wrapped([x, y, c, out], 4, [*head, if_(i.lt(N), [*loads, store(out, i, g)])])
    from vyre.autodiff import run_forward
    inputs = _inputs(seed)
    inputs["c"] = np.zeros(N)
    inputs["c"] = np.asarray(run_forward(gval, inputs, backend="interp")["out"])
    u = {"out": np.random.default_rng(seed).standard_normal(N)}
    got = vjp(stopped, inputs, u, ["x", "y"], backend="interp")
    want = vjp(as_data, inputs, u, ["x", "y"], backend="interp")
    for k in ("x", "y"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_straight_through_estimator(backend: str) -> None:
    prog = _program(lambda xv, _y: xv + stop_gradient(rint(xv) - xv))
    inputs = _inputs(3)
    from vyre.autodiff import value_and_grad
    loss, g = value_and_grad(prog, inputs, "out", ["x"], backend=backend)
    assert loss == pytest.approx(float(np.sum(np.round(inputs["x"]))))
    np.testing.assert_array_equal(g["x"], np.ones(N))


@pytest.mark.parametrize("body", [
    lambda xv, _y: select(xv.gt(f64(1.0)), f64(1.0), f64(0.0)),         # select on a comparison
    lambda xv, _y: cast(F64, cast(F32, cast(U32, absolute(xv) * f64(4.0)))),  # float->int->float
    lambda xv, _y: floor(xv) + sign(xv) + trunc(xv * f64(2.0)),
    lambda xv, _y: cast(F64, xv.gt(f64(0.0))),
], ids=["select", "cast_chain", "steps", "bool"])
def test_pure_steps_give_exact_zero_and_no_error(body) -> None:
    prog = _program(body)
    grad(prog, ["out"], ["x"]).validate()
    g = vjp(prog, _inputs(1), {"out": np.ones(N)}, ["x"], backend="interp")
    np.testing.assert_array_equal(g["x"], np.zeros(N))


def test_second_order_treats_steps_and_stopped_values_as_constants() -> None:
    from vyre.autodiff import hvp, jvp
    prog = _program(lambda xv, yv: xv * xv * floor(xv) + stop_gradient(xv) * xv * xv + yv)
    inputs = _inputs(9)
    x = inputs["x"]
    v = {"x": np.ones(N), "y": np.zeros(N)}
    h = hvp(prog, inputs, "out", ["x", "y"], v, backend="interp")
    np.testing.assert_allclose(h["x"], 2 * np.floor(x) + 2 * x, rtol=1e-12)
    np.testing.assert_array_equal(h["y"], np.zeros(N))
    _, t = jvp(prog, inputs, {"x": np.ones(N)}, backend="interp")  # forward mode: the same rule
    np.testing.assert_allclose(t["out"], 2 * x * np.floor(x) + 2 * x * x, rtol=1e-12)
