"""Newton-Schulz inverse square root: the matmul programs, the float64 reference, and the
dispatched iteration (Z M Z ~ I on random SPD matrices; clear errors instead of garbage)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.ir import F32, F64, U32
from vyre.primitives import (
    ConvergenceError, PrimitiveError, inv_sqrt_eigh, matmul_program, newton_schulz_inv_sqrt,
    newton_schulz_inv_sqrt_reference, newton_schulz_t_program,
)
from vyre.primitives import driver_runner

# The simulator runs in its own process (NUMBA_ENABLE_CUDASIM=1); a real GPU with VYRE_TEST_CUDA=1.
BACKENDS = (["interp", "cpu"] + (["cudasim"] if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else [])
            + (["cuda"] if os.environ.get("VYRE_TEST_CUDA") == "1" else []))


def run(program, inputs, backend):
    from vyre.driver.dispatch import dispatch

    return dispatch(program, inputs, backend=backend)


def spd(n: int, seed: int, cond: float = 50.0) -> np.ndarray:
    """A random SPD matrix with eigenvalues spread log-uniformly over [scale/cond, scale]."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    scale = 10.0 ** rng.uniform(-3, 3)
    w = scale * np.geomspace(1.0 / cond, 1.0, n)
    return (q * w) @ q.T


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_matmul_program_matches_numpy(backend: str, dtype) -> None:
    rng = np.random.default_rng(1)
    # f32 3x3x3 is the program newton_schulz_inv_sqrt dispatches for n=3; f64 checks a non-square case.
    m, k, n = (3, 3, 3) if dtype is F32 else (3, 4, 2)
    a, b = rng.normal(size=(m, k)), rng.normal(size=(k, n))
    nd = dtype.np_dtype
    out = run(matmul_program(m, k, n, dtype), {"a": a.astype(nd).reshape(-1), "b": b.astype(nd).reshape(-1)},
              backend)["c"]
    tol = 1e-5 if dtype is F32 else 1e-12
    np.testing.assert_allclose(out.reshape(m, n), a @ b, rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_t_program_is_the_affine_step(backend: str) -> None:
    rng = np.random.default_rng(2)
    z, y = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    f32 = np.float32
    inputs = {"z": z.astype(f32).reshape(-1), "y": y.astype(f32).reshape(-1)}
    out = run(newton_schulz_t_program(3, F32), inputs, backend)["t"]
    z, y = z.astype(f32).astype(np.float64), y.astype(f32).astype(np.float64)
    np.testing.assert_allclose(out.reshape(3, 3), 1.5 * np.eye(3) - 0.5 * z @ y, rtol=1e-5, atol=1e-5)


def test_program_builders_reject_bad_arguments() -> None:
    with pytest.raises(PrimitiveError, match="f32 or f64"):
        matmul_program(2, 2, 2, U32)
    with pytest.raises(PrimitiveError, match="Fix:"):
        matmul_program(0, 2, 2)
    with pytest.raises(PrimitiveError, match="Fix:"):
        newton_schulz_t_program(70000)


@given(st.integers(1, 8), st.integers(0, 2**31), st.floats(1.0, 1e4))
@settings(max_examples=60, deadline=None)
def test_reference_inverts_the_square_root(n: int, seed: int, cond: float) -> None:
    m = spd(n, seed, cond)
    z = newton_schulz_inv_sqrt_reference(m)
    np.testing.assert_allclose(z @ m @ z, np.eye(n), atol=1e-7)
    np.testing.assert_allclose(z, inv_sqrt_eigh(m), rtol=1e-6, atol=1e-6 * np.abs(z).max())


@pytest.mark.parametrize("backend", BACKENDS)
@given(n=st.just(3), seed=st.integers(0, 2**31), cond=st.floats(1.0, 100.0))
@settings(max_examples=6, deadline=None)
def test_dispatched_iteration_gives_z_m_z_identity(backend: str, n: int, seed: int, cond: float) -> None:
    m = spd(n, seed, cond)
    z = newton_schulz_inv_sqrt(m, run=driver_runner(backend))
    np.testing.assert_allclose(z @ m @ z, np.eye(n), atol=2e-3)
    exact = inv_sqrt_eigh(m)
    np.testing.assert_allclose(z, exact, atol=2e-3 * np.abs(exact).max())


def test_f64_iteration_on_the_interpreter_is_tight() -> None:
    m = spd(3, 5, 1e3)
    z = newton_schulz_inv_sqrt(m, dtype=F64, run=driver_runner("interp"))
    np.testing.assert_allclose(z @ m @ z, np.eye(3), atol=1e-8)


@pytest.mark.parametrize("bad, match", [
    (np.ones((2, 3)), "square"),
    (np.zeros((2, 2)), "zero matrix"),
    (np.array([[1.0, 2.0], [0.0, 1.0]]), "non-symmetric"),
    (np.array([[1.0, np.nan], [np.nan, 1.0]]), "NaN"),
])
def test_bad_matrices_are_rejected(bad: np.ndarray, match: str) -> None:
    with pytest.raises(PrimitiveError, match=match):
        newton_schulz_inv_sqrt_reference(bad)
    with pytest.raises(PrimitiveError, match="Fix:"):
        newton_schulz_inv_sqrt(bad, run=driver_runner("interp"))


def test_indefinite_matrix_reports_instead_of_returning_garbage() -> None:
    m = np.diag([1.0, -0.5])
    with pytest.raises(ConvergenceError, match="Fix:") as info:
        newton_schulz_inv_sqrt_reference(m)
    assert info.value.iterations >= 1
    with pytest.raises(ConvergenceError, match="Fix:"):
        newton_schulz_inv_sqrt(m, run=driver_runner("interp"))


def test_too_few_iterations_is_a_convergence_error() -> None:
    m = spd(3, 9, 1e4)
    with pytest.raises(ConvergenceError, match="did not converge") as info:
        newton_schulz_inv_sqrt_reference(m, iters=3)
    assert info.value.iterations == 3 and info.value.residual > 1e-10
    with pytest.raises(PrimitiveError, match="iters"):
        newton_schulz_inv_sqrt_reference(m, iters=0)


def test_f32_cannot_reach_an_f64_tolerance_on_an_ill_conditioned_matrix() -> None:
    with pytest.raises(ConvergenceError, match="dtype=F64"):
        newton_schulz_inv_sqrt(spd(3, 4, 1e5), tol=1e-9, run=driver_runner("interp"))
