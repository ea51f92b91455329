"""Property tests: random differentiable programs (tests/autodiff_strategies.py) on the interpreter."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from tests.autodiff_strategies import Case, programs
from vyre.autodiff import check_grad, grad, hvp, jvp, vjp

SETTINGS = settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs())
def test_grad_matches_finite_differences(case: Case) -> None:
    grad(case.program, ["out"], case.wrt).validate()
    check_grad(case.program, case.inputs, case.wrt, directions=2, backend="interp")


@SETTINGS
@given(programs())
def test_forward_and_reverse_agree(case: Case) -> None:
    """<v, J^T u> == <J v, u> for random u, v."""
    rng = np.random.default_rng(7)
    u = rng.standard_normal(case.inputs["out"].size)
    v = {w: rng.standard_normal(case.inputs[w].size) for w in case.wrt}
    g = vjp(case.program, case.inputs, {"out": u}, case.wrt, backend="interp")
    _, t = jvp(case.program, case.inputs, v, outputs=["out"], backend="interp")
    lhs = sum(float(np.dot(v[w], g[w])) for w in case.wrt)
    rhs = float(np.dot(t["out"], u))
    assert abs(lhs - rhs) <= 1e-9 * (1 + abs(lhs) + abs(rhs))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_hessian_vector_product_matches_differenced_gradients(case: Case) -> None:
    """Forward-over-reverse H v against (grad(x + h v) - grad(x - h v)) / 2h."""
    rng = np.random.default_rng(11)
    v = {w: rng.standard_normal(case.inputs[w].size) for w in case.wrt}
    hv = hvp(case.program, case.inputs, "out", case.wrt, v, backend="interp")
    h = 1e-5
    shifted = []
    for sign in (1.0, -1.0):
        args = dict(case.inputs)
        for w in case.wrt:
            args[w] = case.inputs[w] + sign * h * v[w]
        shifted.append(vjp(case.program, args, {"out": np.ones(case.inputs["out"].size)}, case.wrt,
                           backend="interp"))
    for w in case.wrt:
        fd = (shifted[0][w] - shifted[1][w]) / (2 * h)
        scale = 1.0 + float(np.max(np.abs(fd)))
        assert float(np.max(np.abs(fd - hv[w]))) <= 1e-5 * scale, (w, fd, hv[w])
