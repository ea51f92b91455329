"""grad(): the backward program's shape, the seed's tests, and regressions for every peer failure."""

from __future__ import annotations

import numpy as np
import pytest

from vyre.autodiff import check_grad, grad, value_and_grad, vjp
from vyre.ir import (
    F32, F64, U32, Atomic, BufferAccess, Let, Load, Loop, Program, Store, UnOp, UnOpKind, Var,
    assign, buflen, cast,
    exp, f32, f64, gid, if_, let, load, loop, maximum, output, read, ret, select, sin, store, var,
    walk_nodes,
)
from vyre.ir.expr import walk
from vyre.ir.node import node_exprs


def _exprs(p: Program):
    for n in walk_nodes(p.entry):
        for e in node_exprs(n):
            yield from walk(e)


def _loads(p: Program, buf: str) -> int:
    return sum(isinstance(e, Load) and e.buffer == buf for e in _exprs(p))


def _atomics(p: Program) -> list[Atomic]:
    return [e for e in _exprs(p) if isinstance(e, Atomic)]


def _stores(p: Program, buf: str) -> int:
    return sum(isinstance(n, Store) and n.buffer == buf for n in walk_nodes(p.entry))


def elementwise(dtype=F64) -> Program:
    """out = exp(x)*y + sin(x)*x: the fused chain the GPU benchmark times."""
    x, y, out = read("x", 0, dtype), read("y", 1, dtype), output("out", 2, dtype)
    i = gid()
    return Program.wrapped([x, y, out], 64, [
        if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])]),
    ])


# -- the backward program's shape ----------------------------------------------------------------

def test_backward_buffers_and_geometry() -> None:
    fwd = elementwise()
    back = grad(fwd, ["out"], ["x", "y"])
    back.validate()
    assert back.workgroup_size == fwd.workgroup_size
    by = {b.name: b for b in back.buffers}
    for b in fwd.buffers:
        assert by[b.name].access is BufferAccess.READ_ONLY and not by[b.name].is_output
        assert by[b.name].binding == b.binding
    assert by["grad_out"].access is BufferAccess.READ_ONLY and by["grad_out"].element is F64
    for name in ("grad_x", "grad_y"):
        assert by[name].access is BufferAccess.READ_WRITE and by[name].is_output
    assert len({b.binding for b in back.buffers}) == len(back.buffers)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_fused_elementwise_backward_is_one_fused_kernel(dtype) -> None:
    back = grad(elementwise(dtype), ["out"], ["x", "y"])
    assert not _atomics(back) and not any(isinstance(n, Loop) for n in walk_nodes(back.entry))
    for buf in ("x", "y", "grad_out"):
        assert _loads(back, buf) == 1, buf  # each input read once
    for buf in ("grad_x", "grad_y"):
        assert _stores(back, buf) == 1 and _loads(back, buf) == 1  # accumulated once
    assert {b.element for b in back.buffers if b.name.startswith("grad_")} == {dtype}


def test_accumulate_false_stores_private_gradients_without_reading() -> None:
    back = grad(elementwise(), ["out"], ["x", "y"], accumulate=False)
    assert _loads(back, "grad_x") == 0 and _stores(back, "grad_x") == 1


def test_gradients_accumulate_into_the_given_buffer() -> None:
    back = grad(elementwise(), ["out"], ["x"])
    from vyre import interp
    x, y = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
    gx = np.full(3, 10.0)
    interp.run(back, {"x": x, "y": y, "out": np.zeros(3), "grad_out": np.ones(3), "grad_x": gx})
    np.testing.assert_allclose(gx, 10.0 + np.exp(x) * y + np.cos(x) * x + np.sin(x))


def test_gather_uses_atomics_and_private_loads_do_not() -> None:
    x, y, idx, out = read("x", 0, F64), read("y", 1, F64), read("idx", 2, U32), output("out", 3, F64)
    i = gid()
    prog = Program.wrapped([x, y, idx, out], 8, [store(out, i, x[idx[i]] * y[i] + x[i])])
    back = grad(prog, ["out"], ["x", "y"])
    # x is gathered somewhere, so even its x[i] load scatters atomically; y is private.
    assert sorted(a.buffer for a in _atomics(back)) == ["grad_x", "grad_x"]
    assert _stores(back, "grad_y") == 1 and _stores(back, "grad_x") == 0


def test_grid_1d_false_makes_private_gradients_atomic() -> None:
    back = grad(elementwise(), ["out"], ["x"], grid_1d=False)
    assert _atomics(back) and _stores(back, "grad_x") == 0


# -- the Rust seed's tests, ported ---------------------------------------------------------------

def _square() -> Program:
    x, out = read("x", 0, F32).with_count(4), output("out", 1, F32).with_count(4)
    return Program.wrapped([x, out], 64, [store(out, gid(), x[gid()] * x[gid()])])


def test_seed_grad_simple_square() -> None:
    back = grad(_square(), ["out"], ["x"])
    names = {b.name for b in back.buffers}
    assert {"grad_out", "grad_x"} <= names
    xv = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    g = vjp(_square(), {"x": xv}, {"out": np.ones(4, np.float32)}, ["x"], backend="interp")
    np.testing.assert_allclose(g["x"], 2 * xv)


def test_seed_grad_exp() -> None:
    x, out = read("x", 0, F32).with_count(1), output("out", 1, F32).with_count(1)
    prog = Program.wrapped([x, out], 1, [store(out, 0, exp(x[0]))])
    val, g = value_and_grad(prog, {"x": np.array([0.7], np.float32)}, "out", ["x"], backend="interp")
    assert val == pytest.approx(np.exp(0.7), rel=1e-6)
    np.testing.assert_allclose(g["x"], [np.exp(0.7)], rtol=1e-6)


def test_seed_grad_bitwise_errors() -> None:
    x, out = read("x", 0, U32).with_count(1), output("out", 1, U32).with_count(1)
    prog = Program.wrapped([x, out], 1, [store(out, 0, x[0] & 0xFF)])
    with pytest.raises(Exception) as e:
        grad(prog, ["out"], ["x"])
    assert type(e.value).__name__ == "AutodiffError"
    assert "u32" in str(e.value) and "Fix:" in str(e.value)


def test_seed_grad_missing_buffer() -> None:
    from vyre.errors import AutodiffError
    prog = Program.wrapped([output("out", 0, F32).with_count(1)], 1, [])
    with pytest.raises(AutodiffError, match=r"unknown buffer 'nonexistent'.*Fix:"):
        grad(prog, ["nonexistent"], [])


# -- regressions: one per known peer failure -----------------------------------------------------

def _product(bound) -> tuple[Program, dict]:
    x, out, nb = read("x", 0, F64), output("out", 1, F64).with_count(1), read("nb", 2, U32)
    prog = Program.wrapped([x, out, nb], 1, [
        let("acc", f64(1.0)),
        loop("j", 0, bound(nb), [assign("acc", var("acc") * x[var("j")])]),
        store(out, 0, var("acc")),
    ])
    return prog, {"x": np.array([2.0, 2.0, 2.0]), "nb": np.array([3], np.uint32)}


@pytest.mark.parametrize("bound", [lambda nb: 3, lambda nb: nb[0]], ids=["static", "dynamic"])
def test_regression_warp_product_loop_gives_4_4_4(bound) -> None:
    """Warp returns [32, 8, 2] for d prod(x) / dx at x = [2, 2, 2]."""
    prog, inputs = _product(bound)
    val, g = value_and_grad(prog, inputs, "out", ["x"], backend="interp")
    assert val == 8.0
    np.testing.assert_array_equal(g["x"], [4.0, 4.0, 4.0])


def test_regression_seed_assign_self_reference_counted_once() -> None:
    """The seed adds the adjoint of ``x = x * 2`` into x's accumulator twice."""
    x, out = read("x", 0, F64), output("out", 1, F64).with_count(1)
    prog = Program.wrapped([x, out], 1, [
        let("a", x[0]), assign("a", var("a") * f64(2.0)), assign("a", var("a") * var("a")),
        store(out, 0, var("a")),
    ])
    _, g = value_and_grad(prog, {"x": np.array([1.5])}, "out", ["x"], backend="interp")
    np.testing.assert_allclose(g["x"], [8 * 1.5])  # (2x)^2 -> 8x


def test_regression_loop_carried_values_are_restored() -> None:
    """The adjoint of ``acc = sin(acc) * x[j]`` needs acc's value at each iteration, not its last."""
    x, out, nb = read("x", 0, F64), output("out", 1, F64).with_count(1), read("nb", 2, U32)
    prog = Program.wrapped([x, out, nb], 1, [
        let("acc", f64(0.9)),
        loop("j", 0, nb[0], [assign("acc", sin(var("acc")) * x[var("j")] + f64(0.3))]),
        store(out, 0, var("acc")),
    ])
    inputs = {"x": np.array([1.1, 0.7, 1.3, 0.9]), "nb": np.array([4], np.uint32)}
    check_grad(prog, inputs, ["x"], backend="interp")


def test_regression_forward_locals_are_recomputed() -> None:
    """The seed's backward reads forward locals that were never computed in it."""
    x, out = read("x", 0, F64), output("out", 1, F64)
    i = gid()
    prog = Program.wrapped([x, out], 4, [
        let("t", exp(x[i])), let("u", var("t") * var("t") + sin(var("t"))), store(out, i, var("u") * x[i]),
    ])
    back = grad(prog, ["out"], ["x"])
    # exp(x[i]) is recomputed in the backward (the adjoint needs it), not read from nowhere.
    lets = {n.name: n.value for n in walk_nodes(back.entry) if isinstance(n, Let)}
    assert any(isinstance(v, UnOp) and v.op is UnOpKind.EXP and isinstance(v.operand, Var)
               and lets.get(v.operand.name) == Load("x", gid()) for v in lets.values())
    check_grad(prog, {"x": np.linspace(-1, 1, 8), "out": np.zeros(8)}, ["x"], backend="interp")


def test_regression_gather_with_repeated_indices_accumulates_every_invocation() -> None:
    """The seed's non-atomic ``grad[i] = grad[i] + adj`` loses updates when invocations collide."""
    x, idx, out = read("x", 0, F64), read("idx", 1, U32), output("out", 2, F64)
    i = gid()
    prog = Program.wrapped([x, idx, out], 32, [
        if_(i.lt(buflen(out)), [store(out, i, x[idx[i]] * x[idx[i]])]),
    ])
    n = 512
    rng = np.random.default_rng(0)
    xv, iv = rng.uniform(-1, 1, 4), rng.integers(0, 4, n).astype(np.uint32)
    cot = rng.standard_normal(n)
    back = grad(prog, ["out"], ["x"])
    assert [a.buffer for a in _atomics(back)] == ["grad_x"]
    g = vjp(prog, {"x": xv, "idx": iv, "out": np.zeros(n)}, {"out": cot}, ["x"], backend="interp")
    want = np.zeros(4)
    np.add.at(want, iv, 2 * xv[iv] * cot)
    np.testing.assert_allclose(g["x"], want, rtol=1e-12)


# -- recurrences and control flow ----------------------------------------------------------------

def _rec_program(body, n_out=1) -> Program:
    c, t, nb = read("c", 0, F64), read("t", 1, F64), read("nb", 3, U32)
    out = output("out", 2, F64).with_count(n_out)
    return Program.wrapped([c, t, out, nb], 1, body)


REC_INPUTS = {"c": np.array([0.5, -1.2, 0.8, 1.1, -0.3]), "t": np.array([0.9]),
              "nb": np.array([5], np.uint32)}


@pytest.mark.parametrize("dynamic", [False, True])
def test_horner(dynamic) -> None:
    end = load("nb", 0) if dynamic else 5
    prog = _rec_program([let("acc", f64(0.0)),
                         loop("j", 0, end, [assign("acc", var("acc") * load("t", 0) + load("c", var("j")))]),
                         store("out", 0, var("acc"))])
    check_grad(prog, REC_INPUTS, ["c", "t"], backend="interp")


@pytest.mark.parametrize("dynamic", [False, True])
def test_running_max_nested_loops_and_ifs(dynamic) -> None:
    end = load("nb", 0) if dynamic else 5
    prog = _rec_program([
        let("m", f64(-10.0)), let("s", f64(0.0)),
        loop("j", 0, end, [
            assign("m", maximum(var("m"), load("c", var("j")) * load("t", 0))),
            loop("k", 0, 2, [
                if_(load("c", var("j")).gt(f64(0.0)),
                    [assign("s", var("s") + sin(var("m") * load("c", var("k"))))],
                    [assign("s", var("s") * f64(0.5) + var("m"))]),
            ]),
        ]),
        store("out", 0, var("m") + var("s")),
    ])
    check_grad(prog, REC_INPUTS, ["c", "t"], backend="interp")


def test_early_return_inside_loop_and_if() -> None:
    x, out = read("x", 0, F64), output("out", 1, F64)
    i = gid()
    prog = Program.wrapped([x, out], 4, [
        if_(x[i].lt(f64(-0.5)), [store(out, i, x[i] * f64(3.0)), ret()]),
        let("acc", x[i]),
        loop("j", 0, 4, [
            assign("acc", var("acc") * x[(i + var("j")) % 8]),
            if_(var("acc").gt(f64(0.6)), [store(out, i, var("acc")), ret()]),
        ]),
        store(out, i, var("acc") + f64(1.0)),
    ])
    xv = np.array([-0.9, 0.8, 0.95, -0.2, 1.3, 0.7, 0.99, 0.5])
    check_grad(prog, {"x": xv, "out": np.zeros(8)}, ["x"], backend="interp")


def test_output_stored_twice_counts_only_the_last_store() -> None:
    x, out = read("x", 0, F64), output("out", 1, F64).with_count(2)
    prog = Program.wrapped([x, out], 1, [
        store(out, 0, x[0]), store(out, 0, x[0] * f64(2.0)), store(out, 1, x[0] * f64(5.0)),
    ])
    back = grad(prog, ["out"], ["x"])
    assert any(b.name == "stored_out" for b in back.buffers)
    _, g = value_and_grad(prog, {"x": np.array([1.0])}, "out", ["x"], backend="interp")
    np.testing.assert_array_equal(g["x"], [7.0])


def test_distinct_or_exclusive_stores_need_no_flags() -> None:
    x, out = read("x", 0, F64), output("out", 1, F64)
    i = gid()
    prog = Program.wrapped([x, out], 4, [
        store(out, i * 2, x[i]), store(out, i * 2 + 1, x[i] * x[i]),
        if_(x[i].gt(f64(0.0)), [store(out, i * 2 + 2 * 1000, x[i])], [store(out, i * 2 + 2000, f64(1.0))]),
    ])
    assert not any(b.name.startswith("stored_") for b in grad(prog, ["out"], ["x"]).buffers)


def test_store_in_dynamic_loop_with_repeated_index() -> None:
    x, out, nb = read("x", 0, F64), output("out", 1, F64).with_count(3), read("nb", 2, U32)
    prog = Program.wrapped([x, out, nb], 1, [
        loop("j", 0, nb[0], [store(out, var("j") % 3, x[var("j")] * x[var("j")])]),
    ])
    xv = np.array([0.3, 0.5, 0.7, 1.1, 1.3])
    _, g = value_and_grad(prog, {"x": xv, "nb": np.array([5], np.uint32)}, "out", ["x"], backend="interp")
    np.testing.assert_allclose(g["x"], [0, 0, 2 * 0.7, 2 * 1.1, 2 * 1.3])


def test_several_outputs_and_cotangents() -> None:
    x, a, b = read("x", 0, F64), output("a", 1, F64), output("b", 2, F64)
    i = gid()
    prog = Program.wrapped([x, a, b], 4, [store(a, i, sin(x[i])), store(b, i, x[i] * x[i])])
    xv = np.linspace(-1, 1, 4)
    ua, ub = np.array([1.0, 2.0, 3.0, 4.0]), np.array([-1.0, 0.5, 0.25, 2.0])
    g = vjp(prog, {"x": xv}, {"a": ua, "b": ub}, ["x"], backend="interp")
    np.testing.assert_allclose(g["x"], ua * np.cos(xv) + ub * 2 * xv)
    check_grad(prog, {"x": xv, "a": np.zeros(4), "b": np.zeros(4)}, ["x"], backend="interp")


def test_inactive_and_integer_paths_carry_no_gradient() -> None:
    x, w, out = read("x", 0, F64), read("w", 1, F64), output("out", 2, F64)
    i = gid()
    k = cast(U32, x[i] * f64(2.0) + f64(4.0))  # a tainted index is fine
    prog = Program.wrapped([x, w, out], 4, [
        store(out, i, w[k % 4] * x[i] + cast(F64, i) * w[i]),
    ])
    xv = np.array([0.1, 0.6, -0.7, 1.2])
    wv = np.array([1.0, 2.0, 3.0, 4.0])
    g = vjp(prog, {"x": xv, "w": wv}, {"out": np.ones(4)}, ["x"], backend="interp")
    np.testing.assert_allclose(g["x"], wv[(xv * 2 + 4).astype(np.uint32) % 4])


def test_check_grad_reports_a_wrong_gradient() -> None:
    x, out = read("x", 0, F64), output("out", 1, F64)
    i = gid()
    # At x = 0 the select's branch boundary makes finite differences disagree with the derivative.
    prog = Program.wrapped([x, out], 4, [store(out, i, select(x[i].gt(f64(0.0)), x[i], x[i] * f64(2.0)))])
    with pytest.raises(AssertionError, match="finite difference"):
        check_grad(prog, {"x": np.zeros(4), "out": np.zeros(4)}, ["x"], backend="interp")


def test_f32_literal_program() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = gid()
    prog = Program.wrapped([x, out], 4, [store(out, i, x[i] * f32(1.5) + exp(x[i]))])
    check_grad(prog, {"x": np.linspace(-1, 1, 4).astype(np.float32), "out": np.zeros(4, np.float32)},
               ["x"], backend="interp")


# -- scopes, calls, long loops -------------------------------------------------------------------

def test_shadowing_blocks_and_calls() -> None:
    from vyre.ir import Block, FunctionDef, Var, block, call, register_function
    from vyre.ir.expr import BinOp
    from vyre.ir.ops import BinOpKind
    register_function(FunctionDef("ad_test_sq_plus", (("a", F64), ("b", F64)), F64,
                                  BinOp(BinOpKind.ADD, BinOp(BinOpKind.MUL, Var("a"), Var("a")), Var("b"))))
    x, out, out2 = read("x", 0, F64), output("out", 1, F64), output("out2", 2, F64)
    i = gid()
    prog = Program.wrapped([x, out, out2], 4, [
        let("a", x[i]),
        block([let("a", x[i] * f64(3.0)), assign("a", var("a") + f64(1.0)), store(out2, i, var("a"))]),
        assign("a", call("ad_test_sq_plus", var("a"), sin(var("a")))),
        store(out, i, var("a")),
    ])
    assert isinstance(prog.entry[1], Block)
    xv = np.array([0.3, -0.4, 0.9, 1.2])
    g = vjp(prog, {"x": xv, "out": np.zeros(4), "out2": np.zeros(4)},
            {"out": np.ones(4), "out2": np.full(4, 2.0)}, ["x"], backend="interp")
    np.testing.assert_allclose(g["x"], 2 * xv + np.cos(xv) + 2 * 3.0)


def test_long_constant_loop_is_not_unrolled_and_sums_stay_linear() -> None:
    x, out = read("x", 0, F64), output("out", 1, F64).with_count(1)
    prog = Program.wrapped([x, out], 1, [
        let("s", f64(0.0)), let("p", f64(1.0)),
        loop("j", 0, 70, [assign("s", var("s") + x[var("j")] * x[var("j")])]),
        loop("j2", 0, 70, [assign("p", var("p") * (f64(1.0) + x[var("j2")] * f64(0.01)))]),
        store(out, 0, var("s") + var("p")),
    ])
    back = grad(prog, ["out"], ["x"])
    # Only the product's carried value is taped (the sum's adjoint never reads it): one tape, one
    # forward replay loop (storing p), two reverse loops.
    tapes = [b.name for b in back.buffers if b.name.startswith("tape_") and b.name != "tape_info"]
    assert len(tapes) == 1
    stored = [n for n in walk_nodes(back.entry) if isinstance(n, Store) and n.buffer in tapes]
    assert len(stored) == 2  # the replay's record and the segment replay's record
    xv = np.random.default_rng(2).uniform(-1, 1, 70)
    _, g = value_and_grad(prog, {"x": xv}, "out", ["x"], backend="interp")
    p = np.prod(1 + 0.01 * xv)
    np.testing.assert_allclose(g["x"], 2 * xv + p * 0.01 / (1 + 0.01 * xv), rtol=1e-12)


def test_one_sided_assign_in_if_and_int_and_bool_carries() -> None:
    x, out, nb = read("x", 0, F64), output("out", 1, F64), read("nb", 2, U32)
    i = gid()
    prog = Program.wrapped([x, out, nb], 4, [
        let("a", x[i]), let("k", i), let("flip", f64(0.0).gt(f64(1.0))),
        loop("j", 0, nb[0], [
            if_(var("flip"), [assign("a", var("a") * x[var("k") % 4])]),
            assign("flip", var("flip").not_()),
            assign("k", var("k") + 1),
            assign("a", sin(var("a")) + x[var("j") % 4]),
        ]),
        store(out, i, var("a")),
    ])
    inputs = {"x": np.array([0.4, -0.8, 1.1, 0.6]), "nb": np.array([5], np.uint32), "out": np.zeros(4)}
    check_grad(prog, inputs, ["x"], backend="interp")


def test_nested_dynamic_loops() -> None:
    x, out, nb = read("x", 0, F64), output("out", 1, F64).with_count(1), read("nb", 2, U32)
    prog = Program.wrapped([x, out, nb], 1, [
        let("acc", f64(0.5)),
        loop("j", 0, nb[0], [
            let("inner", x[var("j")]),
            loop("k", 0, var("j") + 1, [assign("inner", var("inner") * x[var("k")] + f64(0.1))]),
            assign("acc", var("acc") * var("inner") + sin(var("acc"))),
        ]),
        store(out, 0, var("acc")),
    ])
    inputs = {"x": np.array([0.9, 1.1, -0.7, 0.8]), "nb": np.array([4], np.uint32)}
    check_grad(prog, inputs, ["x"], backend="interp")


def test_untaken_select_arm_does_not_poison_the_gradient() -> None:
    """select(x > 0, sqrt(x) * log(x), x / 2) at x < 0: the untaken arm is NaN, its share is 0."""
    from vyre.autodiff import hvp
    from vyre.ir import log, sqrt
    x, out = read("x", 0, F64), output("out", 1, F64)
    i = gid()
    prog = Program.wrapped([x, out], 4, [
        store(out, i, select(x[i].gt(f64(0.0)), sqrt(x[i]) * log(x[i]), x[i] * f64(0.5)))])
    xv = np.array([-1.0, 2.0, -3.0, 0.5])
    inputs = {"x": xv, "out": np.zeros(4)}
    g = vjp(prog, inputs, {"out": np.ones(4)}, ["x"], backend="interp")
    pos = xv > 0
    want = np.where(pos, np.log(np.abs(xv)) / (2 * np.sqrt(np.abs(xv))) + 1 / np.sqrt(np.abs(xv)), 0.5)
    np.testing.assert_allclose(g["x"], want, rtol=1e-12)
    h = hvp(prog, inputs, "out", ["x"], {"x": np.ones(4)}, backend="interp")
    assert np.all(np.isfinite(h["x"])) and np.all(h["x"][~pos] == 0.0)
