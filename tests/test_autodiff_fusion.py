"""grad(with_value=..., unit_cotangent=...): the fused value-and-gradient kernel."""

from __future__ import annotations

import numpy as np
import pytest

from vyre.autodiff import grad, vjp
from vyre.driver.dispatch import compile as vcompile
from vyre.examples import fused_chain
from vyre.ir import F64, Program, gid, let, output, read, store, var


def _arrays(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(n).astype(np.float32), "y": rng.standard_normal(n).astype(np.float32)}


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_fused_value_and_grad_matches_forward_plus_backward(backend: str) -> None:
    prog = fused_chain()
    n = 300
    a = _arrays(n)
    fused = grad(prog, ["out"], ["x", "y"], accumulate=False, with_value=True, unit_cotangent=True)
    assert not any(b.name == "grad_out" for b in fused.buffers)
    res = vcompile(fused, backend)({**a, "out": np.zeros(n, np.float32), "grad_x": np.zeros(n, np.float32),
                                    "grad_y": np.zeros(n, np.float32)})
    fwd = vcompile(prog, "interp")({**a, "out": np.zeros(n, np.float32)})["out"]
    ref = vjp(prog, {**a, "out": np.zeros(n, np.float32)}, {"out": np.ones(n, np.float32)}, ["x", "y"],
              backend="interp")
    np.testing.assert_allclose(res["out"], fwd, rtol=1e-6)
    np.testing.assert_allclose(res["grad_x"], ref["x"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["grad_y"], ref["y"], rtol=1e-5, atol=1e-6)


def test_unit_cotangent_gives_zero_to_dropped_stores() -> None:
    # out is shorter than x: invocations past len(out) store out of bounds, so their x gets no gradient
    x, out = read("x", 0, F64), output("out", 1, F64)
    prog = Program.wrapped([x, out], 64, [let("v", x[gid()]), store(out, gid(), var("v") * var("v"))])
    back = grad(prog, ["out"], ["x"], unit_cotangent=True)
    xs = np.arange(1.0, 9.0)
    res = vcompile(back, "interp")({"x": xs, "out": np.zeros(5), "grad_x": np.zeros(8)}, grid=1)
    np.testing.assert_array_equal(res["grad_x"], np.r_[2 * xs[:5], np.zeros(3)])


# ---- the fused path of value_and_grad on random differentiable programs -----------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402

from tests.autodiff_strategies import Case, programs  # noqa: E402
from vyre.autodiff import run_forward, value_and_grad  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_fused_value_and_grad_equals_forward_then_vjp(case: Case) -> None:
    loss, g = value_and_grad(case.program, case.inputs, "out", case.wrt, backend="interp")
    out = run_forward(case.program, case.inputs, backend="interp")["out"]
    ones = np.ones_like(case.inputs["out"])
    ref = vjp(case.program, case.inputs, {"out": ones}, case.wrt, backend="interp")
    assert abs(loss - float(np.sum(out))) <= 1e-9 * (1 + abs(loss))
    for w in case.wrt:
        np.testing.assert_allclose(g[w], ref[w], rtol=1e-9, atol=1e-12, err_msg=w)
    # the caller's arrays are the pre-forward contents, untouched
    assert not np.any(case.inputs["out"])
