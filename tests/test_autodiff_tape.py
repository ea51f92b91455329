"""Tapes: sequences of dispatches on shared buffers, differentiated as one function.

Hypothesis builds small pipelines (elementwise layers, gathers, activations, reductions, steps
that overwrite only part of a buffer, buffers written twice, inputs overwritten later) and
checks the tape's gradients against float64 central differences of the whole sequence, on the
reference interpreter and the CPU backend.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vyre
from vyre import Array
from vyre.autodiff import check_grad, hvp, jvp, run_forward, value_and_grad, vjp
from vyre.autodiff.tape import Tape
from vyre.errors import AutodiffError
from vyre.ir import (
    F32, F64, Expr, Program, U32, assign, f64, read_write, gid, if_, let, loop, output, read, sin, store, tanh, var,
)

N = 6


def _ew(f: Callable[[Expr], Expr], upto: int = N) -> Program:
    """out[i] = f(x[i]) for i < upto (the rest of out keeps what it held)."""
    x, out = read("x", 0, F64).with_count(N), output("out", 1, F64).with_count(N)
    i = var("i")
    return Program.wrapped([x, out], 4, [let("i", gid()), if_(i.lt(upto), [store(out, i, f(x[i]))])])


def _affine() -> Program:
    x, w = read("x", 0, F64).with_count(N), read("w", 1, F64).with_count(N)
    out = output("out", 2, F64).with_count(N)
    i = var("i")
    return Program.wrapped([x, w, out], 4, [let("i", gid()), if_(i.lt(N), [
        store(out, i, x[i] * w[i] + w[(i + 1) % N] * x[(i + 2) % N])])])


def _sumsq() -> Program:
    """out[0] = sum_k x[k]^2 * 0.5 + x[k]; one invocation, a dynamic-free static loop."""
    x, out = read("x", 0, F64).with_count(N), output("out", 1, F64).with_count(1)
    s = var("s")
    return Program.wrapped([x, out], 1, [if_(gid().eq(0), [
        let("s", f64(0.0)),
        loop("k", 0, N, [let("t", x[var("k")]), let("s2", s + var("t") * var("t") * f64(0.5) + var("t")),
                         store(out, 0, var("s2")), assign("s", var("s2"))]),
    ])])


def _dynloop() -> Program:
    """out[i] = a recurrence over n[0] trips (a dynamic trip count: reversed from a tape)."""
    x, n = read("x", 0, F64).with_count(N), read("n", 1, U32).with_count(1)
    out = output("out", 2, F64).with_count(N)
    i, acc = var("i"), var("acc")
    return Program.wrapped([x, n, out], 4, [let("i", gid()), if_(i.lt(N), [
        let("acc", x[i]),
        loop("k", 0, n[0], [assign("acc", sin(acc) * x[i] + acc * f64(0.5))]),
        store(out, i, acc)])])


STEPS: dict[str, Callable[[], Program]] = {
    "dynloop": _dynloop,
    "tanh": lambda: _ew(lambda v: tanh(v)),
    "square": lambda: _ew(lambda v: v * v + f64(0.5) * v),
    "sin_half": lambda: _ew(lambda v: sin(v) * f64(2.0), upto=N // 2),  # overwrites half
    "affine": _affine,
}


@st.composite
def pipelines(draw: st.DrawFn) -> tuple[Tape, dict[str, np.ndarray], list[str], int]:
    """Steps over shared buffers b0..b4; b0 and b1 are the inputs differentiated."""
    names = [f"b{k}" for k in range(5)]
    tape = Tape()
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(sorted(STEPS)))
        prog = STEPS[kind]()
        reads = [b.name for b in prog.buffers if not b.access.writable and b.element.is_float]
        srcs = draw(st.lists(st.sampled_from(names), min_size=len(reads), max_size=len(reads)))
        dst = draw(st.sampled_from([n for n in names if n not in srcs]))
        tape.record(prog, {**dict(zip(reads, srcs, strict=True)), "out": dst})
    if draw(st.booleans()):
        last = next(s for p, s in tape.steps[-1].bind if p == "out")
        tape.record(_sumsq(), {"x": last, "out": "loss"})
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    used = [b.name for b in tape.buffers]
    inputs = {n: rng.uniform(-1.2, 1.2, N) for n in used if n not in ("loss", "n")}
    inputs["n"] = np.array([3], dtype=np.uint32)
    wrt = [n for n in ("b0", "b1") if n in used] or [used[0]]
    return tape, inputs, wrt, seed


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(pipelines())
def test_tape_gradient_matches_finite_differences_interp(case) -> None:
    tape, inputs, wrt, seed = case
    check_grad(tape, inputs, wrt, backend="interp", seed=seed)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines())
def test_tape_gradient_matches_finite_differences_cpu(case) -> None:
    tape, inputs, wrt, seed = case
    check_grad(tape, inputs, wrt, backend="cpu", seed=seed)


@SETTINGS
@given(pipelines())
def test_tape_forward_and_reverse_agree(case) -> None:
    """<J v, u> == <v, J^T u> over the whole sequence (jvp against vjp)."""
    tape, inputs, wrt, seed = case
    rng = np.random.default_rng(seed + 1)
    outs = [b.name for b in tape.buffers if b.is_output]
    u = {o: rng.standard_normal(np.asarray(run_forward(tape, inputs, backend="interp")[o]).size) for o in outs}
    v = {w: rng.standard_normal(N) for w in wrt}
    _, t = jvp(tape, inputs, v, outputs=outs, backend="interp")
    g = vjp(tape, inputs, u, wrt, backend="interp")
    lhs = sum(float(np.dot(t[o], u[o])) for o in outs)
    rhs = sum(float(np.dot(v[w], g[w])) for w in wrt)
    assert abs(lhs - rhs) <= 1e-10 * (1 + abs(lhs))


def _mlp() -> tuple[Tape, dict[str, np.ndarray]]:
    tape = (Tape().record(_affine(), {"out": "h"})
            .record(STEPS["tanh"](), {"x": "h", "out": "a"})
            .record(_sumsq(), {"x": "a", "out": "loss"}))
    rng = np.random.default_rng(4)
    return tape, {"x": rng.uniform(-1, 1, N), "w": rng.uniform(-1, 1, N)}


def _mlp_numpy(x: np.ndarray, w: np.ndarray) -> float:
    a = np.tanh(x * w + np.roll(w, -1) * np.roll(x, -2))
    return float(np.sum(0.5 * a * a + a))


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_value_and_grad_of_a_layer_activation_loss_pipeline(backend: str) -> None:
    tape, inputs = _mlp()
    loss, g = value_and_grad(tape, inputs, "loss", ["x", "w"], backend=backend)
    assert loss == pytest.approx(_mlp_numpy(inputs["x"], inputs["w"]), rel=1e-12)
    h = 1e-6
    for name in ("x", "w"):
        for k in range(N):
            e = np.zeros(N)
            e[k] = h
            p = dict(inputs, **{name: inputs[name] + e})
            m = dict(inputs, **{name: inputs[name] - e})
            fd = (_mlp_numpy(p["x"], p["w"]) - _mlp_numpy(m["x"], m["w"])) / (2 * h)
            assert g[name][k] == pytest.approx(fd, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("dynamic", [False, True])
def test_hvp_of_a_pipeline_matches_differenced_gradients(dynamic: bool) -> None:
    tape, inputs = _mlp()
    if dynamic:  # a step whose loop the backward reverses from its tape of carried values
        tape = Tape([*tape.steps[:1], *Tape().record(_dynloop(), {"x": "h", "out": "a"}).steps,
                     *tape.steps[2:]])
        inputs = {**inputs, "n": np.array([4], dtype=np.uint32)}
    v = {"x": np.linspace(-1, 1, N), "w": np.linspace(1, -0.5, N)}
    hv = hvp(tape, inputs, "loss", ["x", "w"], v, backend="interp")
    eps = 1e-6
    def shifted(h: float) -> dict[str, np.ndarray]:
        return {k: inputs[k] + h * v[k] if k in v else inputs[k] for k in inputs}

    gp = vjp(tape, shifted(eps), {"loss": np.ones(1)}, ["x", "w"], backend="interp")
    gm = vjp(tape, shifted(-eps), {"loss": np.ones(1)}, ["x", "w"], backend="interp")
    for k in ("x", "w"):
        np.testing.assert_allclose(hv[k], (gp[k] - gm[k]) / (2 * eps), rtol=1e-5, atol=1e-7)


def test_a_wrong_step_fails_check_grad() -> None:
    """The tape's check is not vacuous: one step's backward, made wrong, fails it."""
    import vyre.autodiff.tape as tape_mod

    tape, inputs = _mlp()
    real = tape_mod._vjp

    def wrong(program, *args, **kwargs):
        g = real(program, *args, **kwargs)
        return {k: v * 1.01 for k, v in g.items()} if program == tape.steps[1].program else g

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tape_mod, "_vjp", wrong)
        with pytest.raises(AssertionError, match="worst element"):
            check_grad(tape, inputs, ["x", "w"], backend="interp")


def test_tape_errors_say_what_and_fix() -> None:
    prog = STEPS["tanh"]()
    with pytest.raises(AutodiffError, match=r"no storage buffer.*Fix:"):
        Tape().record(prog, {"nope": "a"})
    with pytest.raises(AutodiffError, match=r"both bound to 'a'.*Fix:"):
        Tape().record(prog, {"x": "a", "out": "a"})
    x32, o32 = read("x", 0, F32).with_count(N), output("out", 1, F32).with_count(N)
    p32 = Program.wrapped([x32, o32], 4, [store(o32, gid(), x32[gid()])])
    with pytest.raises(AutodiffError, match=r"holds f64 .* f32 here.*Fix:"):
        Tape().record(prog, {"out": "h"}).record(p32, {"x": "h"})
    t = Tape().record(prog, {"out": "h"})
    with pytest.raises(AutodiffError, match=r"grid.*Fix: pass grid= to Tape.record"):
        run_forward(t, {"x": np.zeros(N)}, grid=(1, 1, 1))
    with pytest.raises(AutodiffError, match=r"no step writes 'x'.*Fix:"):
        vjp(t, {"x": np.zeros(N)}, {"x": np.ones(N)}, ["x"], backend="interp")
    with pytest.raises(AutodiffError, match=r"expected a vyre Program or a @vyre.kernel.*Fix:"):
        Tape().record("not a program")
    with pytest.raises(AutodiffError, match=r"empty.*Fix:"):
        run_forward(Tape(), {})
    inplace_x, inplace_out = read_write("x", 0, F64).with_count(N), output("out", 1, F64).with_count(N)
    inplace = Program.wrapped([inplace_x, inplace_out], 4, [if_(gid().lt(N), [
        store(inplace_out, gid(), inplace_x[gid()]), store(inplace_x, gid(), f64(0.0))])])
    t2 = Tape().record(STEPS["tanh"](), {"out": "h"}).record(inplace, {"x": "h", "out": "loss"})
    with pytest.raises(AutodiffError, match=r"^tape step 1: entry\[0\]\.then\[1\]: .*Fix:"):
        vjp(t2, {"x": np.ones(N)}, {"loss": np.ones(N)}, ["x"], backend="interp")
    ui = read("n", 0, U32)
    with pytest.raises(AutodiffError, match="only float buffers have gradients"):
        vjp(Tape().record(Program.wrapped([ui, output("out", 1, F64).with_count(N)], 4, [
            store("out", gid(), f64(1.0))])), {"n": np.zeros(1, np.uint32)}, {"out": np.ones(N)},
            ["n"], backend="interp")


@vyre.kernel
def _square(x: Array[f64], out: Array[f64]):
    i = vyre.gid()
    if i < len(out):
        out[i] = x[i] ** 2.0 + vyre.stop_gradient(x[i]) * x[i]


def test_kernels_record_like_programs() -> None:
    square = _square
    tape = Tape().record(square, {"out": "h"}).record(_sumsq(), {"x": "h", "out": "loss"})
    x = np.linspace(-1.0, 1.0, N)
    loss, g = value_and_grad(tape, {"x": x, "h": np.zeros(N)}, "loss", "x", backend="interp")
    h = 2 * x * x
    assert loss == pytest.approx(float(np.sum(0.5 * h * h + h)))
    np.testing.assert_allclose(g["x"], (h + 1.0) * 3 * x, rtol=1e-12)  # stop_gradient: d(h)/dx = 3x


def test_value_and_grad_fn_takes_a_tape() -> None:
    from vyre.autodiff import value_and_grad_fn

    tape, inputs = _mlp()
    f = value_and_grad_fn(tape, "loss", ["x", "w"], backend="interp")
    loss, g = f(inputs)
    want_loss, want = value_and_grad(tape, inputs, "loss", ["x", "w"], backend="interp")
    assert loss == want_loss
    for k in ("x", "w"):
        np.testing.assert_array_equal(g[k], want[k])
    with pytest.raises(AutodiffError, match="no step writes"):
        value_and_grad_fn(tape, "x", "w")


def test_f32_tapes_are_checked_against_a_promoted_f64_tape() -> None:
    def ew32(f: Callable[[Expr], Expr]) -> Program:
        x, out = read("x", 0, F32).with_count(N), output("out", 1, F32).with_count(N)
        i = var("i")
        return Program.wrapped([x, out], 4, [let("i", gid()), if_(i.lt(N), [store(out, i, f(x[i]))])])

    tape = Tape().record(ew32(lambda v: tanh(v) * v), {"out": "h"}).record(ew32(lambda v: sin(v)), {"x": "h"})
    promoted = tape.promote_f64()
    assert all(b.element is F64 for b in promoted.buffers)
    assert [s.bind for s in promoted.steps] == [s.bind for s in tape.steps]
    x = np.linspace(-1.0, 1.2, N).astype(np.float32)
    assert check_grad(tape, {"x": x}, ["x"], backend="interp") < 2e-3


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines())
def test_tape_hvp_matches_differenced_gradients(case) -> None:
    tape, inputs, wrt, seed = case
    rng = np.random.default_rng(seed + 2)
    out = [b.name for b in tape.buffers if b.is_output][-1]
    size = np.asarray(run_forward(tape, inputs, backend="interp")[out]).size
    cot = rng.standard_normal(size)
    v = {w: rng.standard_normal(N) for w in wrt}
    hv = hvp(tape, inputs, out, wrt, v, cotangent=cot, backend="interp")
    eps = 1e-6

    def g(h: float) -> dict[str, np.ndarray]:
        shifted = {k: x + h * v[k] if k in v else x for k, x in inputs.items()}
        return vjp(tape, shifted, {out: cot}, wrt, backend="interp")

    gp, gm = g(eps), g(-eps)
    for w in wrt:
        np.testing.assert_allclose(hv[w], (gp[w] - gm[w]) / (2 * eps), rtol=1e-4, atol=1e-6)


def test_runners_take_a_list_of_steps() -> None:
    from vyre.autodiff import value_and_grad_fn

    tape, inputs = _mlp()
    steps = [(s.program, dict(s.bind)) for s in tape.steps]
    want = value_and_grad(tape, inputs, "loss", ["x", "w"], backend="interp")
    for seq in (steps, tuple(steps), [*steps[:1], (steps[1][0], steps[1][1], None), steps[2]]):
        got = value_and_grad(seq, inputs, "loss", ["x", "w"], backend="interp")
        assert got[0] == want[0]
        np.testing.assert_array_equal(got[1]["w"], want[1]["w"])
    assert value_and_grad_fn(steps, "loss", "w", backend="interp")(inputs)[0] == want[0]
    assert check_grad(steps, inputs, ["x", "w"], backend="interp") < 1e-6
    with pytest.raises(AutodiffError, match=r"step 0 of the sequence .* expected a mapping"):
        vjp([(steps[0][0], ["out"])], inputs, {"h": np.ones(N)}, ["x"], backend="interp")


def test_a_write_only_buffer_carrying_a_tangent_is_refused_in_forward_mode() -> None:
    from vyre.ir import BufferAccess, BufferDecl
    x = read("x", 0, F64).with_count(N)
    wo = BufferDecl("out", 1, BufferAccess.WRITE_ONLY, F64, N, is_output=True)
    half = Program.wrapped([x, wo], 4, [if_(gid().lt(N // 2), [store(wo, gid(), x[gid()])])])
    tape = Tape().record(STEPS["tanh"](), {"out": "h"}).record(half, {"out": "h"})
    with pytest.raises(AutodiffError, match=r"tape step 1 writes 'out', which is write-only.*Fix:"):
        jvp(tape, {"x": np.ones(N)}, {"x": np.ones(N)}, backend="interp")
