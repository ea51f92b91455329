"""Programs autodiff cannot differentiate exactly are rejected with the node's path and a Fix."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vyre.autodiff import grad, hvp, jvp_program
from vyre.errors import AutodiffError
from vyre.ir import (
    F32, F64, U32, AtomicOp, BinOpKind, Program, UnOpKind, atomic, atomic_add, barrier, cast,
    f64, gid, if_, let, output, read, read_write, store, subgroup_reduce, unop, var, workgroup,
)

X, OUT = read("x", 0, F64), output("out", 1, F64)
I = gid()


def _p(body, extra=()) -> Program:
    return Program.wrapped([X, OUT, *extra], 32, body)


def _rejects(prog: Program, path: str | None, *words: str, outputs=("out",), inputs=("x",)) -> str:
    with pytest.raises(AutodiffError) as e:
        grad(prog, list(outputs), list(inputs))
    msg = str(e.value)
    assert "Fix:" in msg, msg
    if path is not None:
        assert msg.startswith(path + ":"), msg
    for w in words:
        assert re.search(w, msg), (w, msg)
    return msg


# Floats computed through floor/round/sign/trunc/ceil, comparisons and float->int casts are not
# rejected: they have derivative 0 (the zero-derivative policy, tests/test_autodiff_policy.py).


def test_integer_ops_feeding_indices_and_conditions_are_fine() -> None:
    y = read("y", 2, F64)
    k = cast(U32, unop(UnOpKind.FLOOR, y[I] * f64(4.0)))  # floor of an inactive value is fine
    prog = _p([let("j", cast(U32, X[I] * f64(2.0)) & 3),
               if_(X[I].gt(f64(0.0)), [store(OUT, I, X[var("j")] * y[k])])], [y])
    grad(prog, ["out"], ["x"]).validate()


def test_atomics_in_forward() -> None:
    c = read_write("c", 2, U32)
    prog = _p([let("slot", atomic_add(c, 0, 1)), store(OUT, var("slot"), X[I])], [c])
    _rejects(prog, "entry[0]", "atomic add")


def test_subgroup_ops_barriers_and_workgroup_memory_now_differentiate() -> None:
    """Once refused; reverse mode supports them (tests/test_autodiff_sync.py tests them in depth)."""
    from vyre.autodiff import vjp

    x = np.linspace(-1.0, 1.0, 64)
    ones = {"out": np.ones(64)}
    prog = _p([let("s", subgroup_reduce(BinOpKind.ADD, X[I])), store(OUT, I, var("s"))])
    g = vjp(prog, {"x": x, "out": np.zeros(64)}, ones, ["x"], backend="interp")["x"]
    np.testing.assert_allclose(g, np.full(64, 32.0))  # every lane's x feeds 32 outputs
    prog1 = _p([store(OUT, I, X[I]), barrier()])
    np.testing.assert_allclose(vjp(prog1, {"x": x, "out": np.zeros(64)}, ones, ["x"], backend="interp")["x"], 1.0)
    tile = workgroup("tile", 32, F64)
    prog2 = Program.wrapped([X, OUT, tile], 32, [store(tile, I % 32, X[I] * X[I]), barrier(),
                                                 store(OUT, I, tile[(I + 1) % 32])])
    g2 = vjp(prog2, {"x": x, "out": np.zeros(64)}, ones, ["x"], backend="interp")["x"]
    np.testing.assert_allclose(g2, 2 * x)


def test_in_place_update() -> None:
    buf = read_write("buf", 0, F64).as_output()
    prog = Program.wrapped([buf], 32, [store(buf, I, buf[I] * buf[I])])
    _rejects(prog, "entry[0]", "also loads", outputs=("buf",), inputs=("buf",))


def test_input_written_by_the_program() -> None:
    a = read_write("a", 2, F64)
    prog = _p([store(a, I, f64(1.0)), store(OUT, I, X[I])], [a])
    _rejects(prog, None, "'a' is also written", inputs=("x", "a"))


def test_request_errors() -> None:
    prog = _p([store(OUT, I, X[I])])
    _rejects(prog, None, "unknown buffer 'nope'", outputs=("nope",))
    _rejects(prog, None, "unknown buffer 'nope'", inputs=("nope",))
    _rejects(prog, None, "output 'x' is READ_ONLY", outputs=("x",))
    n = read("n", 2, U32)
    _rejects(_p([store(OUT, I, X[I])], [n]), None, "'n' holds u32", inputs=("n",))
    assert grad(prog, "out", "x") == grad(prog, ["out"], ["x"])  # a name or a list, alike
    with pytest.raises(AutodiffError, match="list of buffer names"):
        grad(prog, ["out"], [1])  # type: ignore[list-item]
    with pytest.raises(AutodiffError, match="twice"):
        grad(prog, ["out"], ["x", "x"])


def test_gradient_buffer_name_collision() -> None:
    g = read("grad_x", 2, F64)
    _rejects(_p([store(OUT, I, X[I] + g[I])], [g]), None, "already declares a buffer 'grad_x'")


def test_forward_mode_rejects_float_atomics_other_than_add() -> None:
    acc = read_write("acc", 1, F32).as_output()
    x32 = read("x", 0, F32)
    prog = Program.wrapped([x32, acc], 32, [let("o", atomic(AtomicOp.EXCHANGE, acc, 0, x32[I]))])
    with pytest.raises(AutodiffError, match=r"entry\[0\].*exchange.*Fix:"):
        jvp_program(prog, ["x"])


def test_forward_mode_rejects_reading_an_atomic_add_result() -> None:
    acc = read_write("acc", 1, F64).as_output()
    prog = Program.wrapped([X, acc], 32, [let("o", atomic_add(acc, 0, X[I])),
                                          store(acc, 1, var("o") * f64(2.0))])
    with pytest.raises(AutodiffError, match=r"old value.*Fix:"):
        jvp_program(prog, ["x"])


def test_forward_mode_handles_in_place_and_atomic_add() -> None:
    from vyre.autodiff import jvp
    acc = read_write("acc", 1, F64).as_output().with_count(2)
    prog = Program.wrapped([X, acc], 4, [
        let("o", atomic_add(acc, 0, X[I] * X[I])),
        if_(I.eq(0), [store(acc, 1, acc[1] * f64(3.0) + X[I])]),
    ])
    xv = np.array([0.5, 1.0, -2.0, 3.0])
    v = np.array([1.0, -1.0, 0.5, 2.0])
    _, t = jvp(prog, {"x": xv, "acc": np.array([0.0, 1.0])}, {"x": v}, backend="interp")
    np.testing.assert_allclose(t["acc"], [np.dot(2 * xv, v), v[0]])


def test_hvp_through_a_gather_backward_with_atomics() -> None:
    idx = read("idx", 2, U32)
    prog = _p([if_(I.lt(8), [store(OUT, I, unop(UnOpKind.SIN, X[idx[I]]) * X[I])])], [idx])
    xv = np.linspace(-1, 1, 8)
    iv = np.array([0, 0, 1, 3, 3, 3, 7, 2], np.uint32)
    v = np.random.default_rng(1).standard_normal(8)
    h = hvp(prog, {"x": xv, "idx": iv, "out": np.zeros(8)}, "out", ["x"], {"x": v}, backend="interp")
    # loss = sum_i sin(x[idx_i]) x_i
    hess = np.zeros((8, 8))
    for i, k in enumerate(iv):
        hess[k, k] += -np.sin(xv[k]) * xv[i]
        hess[k, i] += np.cos(xv[k])
        hess[i, k] += np.cos(xv[k])
    np.testing.assert_allclose(h["x"], hess @ v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bad", [(1.5,), (0,), "x", (1, 1, 1, 1), (-2,), True])
def test_runners_reject_a_bad_grid_before_running(bad: object) -> None:
    from vyre.autodiff import jvp, value_and_grad, vjp
    from vyre.errors import DispatchError
    from vyre.examples import fused_chain

    prog = fused_chain()
    x = np.ones(64, np.float32)
    calls = [
        lambda: value_and_grad(prog, {"x": x, "y": x}, "out", ["x"], backend="cpu", grid=bad),
        lambda: vjp(prog, {"x": x, "y": x}, {"out": x}, ["x"], backend="cpu", grid=bad),
        lambda: jvp(prog, {"x": x, "y": x}, {"x": x}, outputs=["out"], backend="cpu", grid=bad),
    ]
    for call in calls:
        with pytest.raises(DispatchError, match=r"grid.*Fix:"):
            call()
