"""Property tests: random differentiable programs (tests/autodiff_strategies.py) on the interpreter."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from tests.autodiff_strategies import Case, programs
from vyre.autodiff import check_grad, grad, jvp, vjp

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
