"""Issue 11's silent-wrong-gradient classes: one regression per reproducer, and Hypothesis programs
generating each class (tests/autodiff_classes.py), against float64 central differences on the
interpreter and the CPU backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from tests.autodiff_classes import (
    Case, assert_grad_matches, carried_loops, guarded_singular, initial_reads,
)
import vyre
from vyre.autodiff import (
    check_grad, grad, hvp, jvp, run_forward, value_and_grad, value_and_grad_fn, vjp,
)
from vyre.errors import ValidationError
from vyre.ir import (
    F32, U32, Program, assign, f32, let, load, loop, output, read, select, sqrt, store, var,
)


def P(body) -> Program:
    return Program.wrapped([read("x", 0, F32), read("n", 1, U32), output("out", 2, F32)], 1, body)


def _vjp(prog: Program, x, n: int, backend: str) -> np.ndarray:
    inputs = {"x": np.array(x, np.float32), "n": np.array([n], np.uint32), "out": np.zeros(1, np.float32)}
    return vjp(prog, inputs, {"out": np.ones(1, np.float32)}, ["x"], backend=backend)["x"]


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_regression_loop_carried_swap_is_reversed_simultaneously(backend) -> None:
    prog = P([let("a", load("x", 0)), let("b", load("x", 1)),
              loop("k", 0, load("n", 0), [let("t", var("a")), assign("a", var("b")), assign("b", var("t"))]),
              store("out", 0, var("a") * f32(2.0) + var("b") * f32(3.0))])
    np.testing.assert_array_equal(_vjp(prog, [1, 5], 2, backend), [2, 3])
    np.testing.assert_array_equal(_vjp(prog, [1, 5], 3, backend), [3, 2])


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_regression_initial_value_read_in_the_body_keeps_its_contribution(backend) -> None:
    prog = P([let("y", load("x", 0)), loop("k", 0, load("n", 0), [assign("y", var("y") * load("x", 0))]),
              store("out", 0, var("y"))])
    np.testing.assert_array_equal(_vjp(prog, [2], 3, backend), [32])  # d x^4 / dx at 2


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_regression_shared_select_keeps_the_untaken_zero(backend) -> None:
    x0 = load("x", 0)
    prog = P([let("s", sqrt(x0)),
              store("out", 0, select(x0.gt(f32(0.0)), var("s"), f32(0.0))
                    + select(x0.gt(f32(1.0)), var("s"), f32(0.0)))])
    np.testing.assert_array_equal(_vjp(prog, [-1], 0, backend), [0])
    np.testing.assert_allclose(_vjp(prog, [4], 0, backend), [0.5], rtol=1e-6)


def test_regression_deep_invalid_program_gives_the_validation_error_everywhere() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    e = load(x, 0)
    for _ in range(3000):
        e = e * f32(1.0001)
    prog = Program.wrapped([x, out], 1, [store(out, 0, e)])
    ins = {"x": np.ones(1, np.float32), "out": np.zeros(1, np.float32)}
    calls = [lambda: grad(prog, ["out"], ["x"]),
             lambda: vjp(prog, ins, {"out": np.ones(1, np.float32)}, ["x"], backend="interp"),
             lambda: value_and_grad(prog, ins, "out", ["x"], backend="interp"),
             lambda: hvp(prog, ins, "out", ["x"], {"x": np.ones(1, np.float32)}, backend="interp"),
             lambda: jvp(prog, ins, {"x": np.ones(1, np.float32)}, backend="interp"),
             lambda: value_and_grad_fn(prog, "out", ["x"]),
             lambda: check_grad(prog, ins, ["x"], backend="interp"),
             lambda: run_forward(prog, ins, backend="interp"),
             lambda: vyre.dispatch(prog, ins, backend="interp"),
             lambda: vyre.dispatch(prog, ins, backend="cpu")]
    for call in calls:
        with pytest.raises(ValidationError, match="V064"):
            call()


GEN = settings(max_examples=40, deadline=None)
GEN_CPU = settings(max_examples=2, deadline=None)  # each example compiles a CPU kernel (slow on CI)


@GEN
@given(carried_loops())
def test_carried_loops_interp(case: Case) -> None:
    assert_grad_matches(case, "interp")


@GEN
@given(initial_reads())
def test_initial_reads_interp(case: Case) -> None:
    assert_grad_matches(case, "interp")


@GEN
@given(guarded_singular())
def test_guarded_singular_interp(case: Case) -> None:
    assert_grad_matches(case, "interp")  # finite everywhere: the untaken arm's share is an exact 0


@GEN_CPU
@given(carried_loops())
def test_carried_loops_cpu(case: Case) -> None:
    assert_grad_matches(case, "cpu")


@GEN_CPU
@given(initial_reads())
def test_initial_reads_cpu(case: Case) -> None:
    assert_grad_matches(case, "cpu")


@GEN_CPU
@given(guarded_singular())
def test_guarded_singular_cpu(case: Case) -> None:
    assert_grad_matches(case, "cpu")
