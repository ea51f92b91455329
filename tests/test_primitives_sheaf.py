"""Real sheaf diffusion: the IR step against its float64 reference on every backend, and the
properties that make it diffusion (energy never increases, global sections are fixed points,
iteration converges to the projection onto the global sections)."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vyre.ir import F32, F64, U32
from vyre.primitives import (
    PrimitiveError, SheafGraph, coboundary, sheaf_dirichlet_energy, sheaf_laplacian_apply,
    sheaf_laplacian_dense, sheaf_laplacian_step, sheaf_laplacian_step_reference, sheaf_stable_alpha,
)

# The simulator runs in its own process (NUMBA_ENABLE_CUDASIM=1); a real GPU with VYRE_TEST_CUDA=1.
BACKENDS = (["interp", "cpu"] + (["cudasim"] if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else [])
            + (["cuda"] if os.environ.get("VYRE_TEST_CUDA") == "1" else []))


def run(program, inputs, backend):
    from vyre.driver.dispatch import dispatch

    return dispatch(program, inputs, backend=backend)


@st.composite
def sheaves(draw: st.DrawFn, shapes: list[tuple[int, int]] | None = None) -> SheafGraph:
    if shapes is None:
        n, d = draw(st.integers(2, 6)), draw(st.integers(1, 3))
    else:
        n, d = draw(st.sampled_from(shapes))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=2 * n))
    # Zero maps (a component the edge ignores), and maps of either sign away from underflow.
    coef = st.one_of(st.just(0.0), st.floats(0.05, 2.0), st.floats(-2.0, -0.05))
    maps_u = draw(st.lists(coef, min_size=len(edges) * d, max_size=len(edges) * d))
    maps_v = draw(st.lists(coef, min_size=len(edges) * d, max_size=len(edges) * d))
    return SheafGraph.from_edges(n, d, edges, maps_u, maps_v)


def stalks(graph: SheafGraph, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-4, 4, graph.n_cells)


# --- reference algebra --------------------------------------------------------------------------

@given(sheaves(), st.integers(0, 2**31))
@settings(max_examples=60, deadline=None)
def test_laplacian_is_symmetric_psd_and_energy_is_its_quadratic_form(graph: SheafGraph, seed: int) -> None:
    lap = sheaf_laplacian_dense(graph)
    np.testing.assert_allclose(lap, lap.T, atol=1e-12)
    assert np.linalg.eigvalsh(lap).min() >= -1e-9
    x = stalks(graph, seed)
    assert math.isclose(sheaf_dirichlet_energy(graph, x), float(x @ lap @ x), rel_tol=1e-9, abs_tol=1e-9)
    np.testing.assert_allclose(sheaf_laplacian_apply(graph, x), lap @ x, atol=1e-9)
    # Gershgorin: the stable step keeps every eigenvalue of I - alpha L in [-1, 1].
    assert sheaf_stable_alpha(graph) * np.linalg.eigvalsh(lap).max() <= 1.0 + 1e-9


def test_stable_alpha_survives_underflowing_maps() -> None:
    graph = SheafGraph.from_edges(2, 1, [(0, 1)], [[0.0]], [[3e-159]])  # (3e-159)^2 is subnormal
    alpha = sheaf_stable_alpha(graph)
    assert math.isfinite(alpha)
    assert np.all(np.isfinite(sheaf_laplacian_step_reference(graph, [1.0, 2.0], alpha)))


def test_constant_sheaf_is_graph_diffusion() -> None:
    graph = SheafGraph.from_edges(3, 1, [(0, 1), (1, 2)])
    np.testing.assert_allclose(sheaf_laplacian_dense(graph), [[1, -1, 0], [-1, 2, -1], [0, -1, 1]])


def test_neighbours_are_coupled_through_the_restriction_maps() -> None:
    # One edge, d=1: F_0 = 2, F_1 = 1. Global sections satisfy 2 x0 = x1.
    graph = SheafGraph.from_edges(2, 1, [(0, 1)], [[2.0]], [[1.0]])
    np.testing.assert_allclose(sheaf_laplacian_dense(graph), [[4, -2], [-2, 1]])
    assert sheaf_dirichlet_energy(graph, [1.0, 2.0]) == 0.0
    np.testing.assert_allclose(coboundary(graph, [1.0, 1.0]), [[-1.0]])


@given(sheaves(), st.integers(0, 2**31), st.floats(0.01, 1.0))
@settings(max_examples=60, deadline=None)
def test_energy_never_increases_for_stable_alpha(graph: SheafGraph, seed: int, frac: float) -> None:
    alpha = frac * sheaf_stable_alpha(graph)
    x = stalks(graph, seed)
    energy = sheaf_dirichlet_energy(graph, x)
    for _ in range(25):
        x = sheaf_laplacian_step_reference(graph, x, alpha)
        e = sheaf_dirichlet_energy(graph, x)
        assert e <= energy * (1 + 1e-12) + 1e-12
        energy = e


def section_sheaf(n: int, d: int, edges: list[tuple[int, int]], seed: int) -> tuple[SheafGraph, np.ndarray]:
    """A sheaf for which the random stalks ``x`` are a global section: a_u = w x_v, a_v = w x_u."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 2.0, (n, d)) * rng.choice([-1.0, 1.0], (n, d))
    w = rng.uniform(0.2, 1.0, (len(edges), d))
    mu = np.array([w[e] * x[v] for e, (_, v) in enumerate(edges)])
    mv = np.array([w[e] * x[u] for e, (u, _) in enumerate(edges)])
    return SheafGraph.from_edges(n, d, edges, mu, mv), x.reshape(-1)


@given(st.integers(0, 2**31))
@settings(max_examples=30, deadline=None)
def test_global_sections_are_fixed_points(seed: int) -> None:
    graph, x = section_sheaf(5, 3, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (1, 3)], seed)
    assert sheaf_dirichlet_energy(graph, x) < 1e-20
    np.testing.assert_allclose(sheaf_laplacian_step_reference(graph, x, sheaf_stable_alpha(graph)), x,
                               atol=1e-12)


@given(sheaves(), st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_diffusion_converges_to_the_projection_onto_global_sections(graph: SheafGraph, seed: int) -> None:
    lap = sheaf_laplacian_dense(graph)
    w, v = np.linalg.eigh(lap)
    top = max(w.max(), 1e-3)
    assume(np.all((w < 1e-10 * top) | (w > 1e-2 * top)))  # a clear spectral gap
    alpha = sheaf_stable_alpha(graph)
    positive = w[w > 1e-2 * top]
    rate = 1.0 - alpha * positive.min() if positive.size else 0.0
    steps = 1 if rate <= 0 else math.ceil(math.log(1e-8) / math.log(rate))
    assume(steps <= 4000)
    x0 = stalks(graph, seed)
    kernel = v[:, w < 1e-10 * top]
    target = kernel @ (kernel.T @ x0)
    step = np.eye(graph.n_cells) - alpha * lap
    x = x0
    for _ in range(steps):
        x = step @ x
    np.testing.assert_allclose(x, target, atol=1e-6 * (1 + np.abs(x0).max()))
    assert sheaf_dirichlet_energy(graph, x) <= 1e-10 * (1 + sheaf_dirichlet_energy(graph, x0))


# --- the IR program ------------------------------------------------------------------------------

def test_program_shape_and_errors() -> None:
    prog = sheaf_laplacian_step(4, 3)
    assert [b.name for b in prog.buffers] == ["x", "row_ptr", "col", "r_self", "r_nbr", "alpha", "x_next"]
    assert prog.buffer("x").element is F32 and prog.buffer("row_ptr").element is U32
    assert prog.buffer("row_ptr").count == 5 and prog.buffer("x_next").count == 12
    assert sheaf_laplacian_step(2, 2, dtype=F64).buffer("x").element is F64
    with pytest.raises(PrimitiveError, match="Fix:"):
        sheaf_laplacian_step(0, 3)
    with pytest.raises(PrimitiveError, match="f32 or f64"):
        sheaf_laplacian_step(2, 2, dtype=U32)
    with pytest.raises(PrimitiveError, match="distinct"):
        sheaf_laplacian_step(2, 2, x="a", x_next="a")


@pytest.mark.parametrize("bad", [[(0, 0)], [(0, 5)], [(-1, 1)]])
def test_graph_rejects_bad_edges(bad: list[tuple[int, int]]) -> None:
    with pytest.raises(PrimitiveError, match="Fix:"):
        SheafGraph.from_edges(3, 1, bad)


def test_graph_rejects_bad_maps() -> None:
    with pytest.raises(PrimitiveError, match="shape"):
        SheafGraph(3, 2, ((0, 1),), np.ones((1, 3)), np.ones((1, 2)))
    with pytest.raises(PrimitiveError, match="NaN"):
        SheafGraph.from_edges(3, 1, [(0, 1)], [[float("nan")]], [[1.0]])
    with pytest.raises(PrimitiveError, match="n_nodes\\*d"):
        sheaf_dirichlet_energy(SheafGraph.from_edges(3, 1, [(0, 1)]), [1.0, 2.0])


SHAPES = [(6, 3)]  # one compiled shape (shared with the global-section test below)


@pytest.mark.parametrize("backend", BACKENDS)
@given(graph=sheaves(SHAPES), seed=st.integers(0, 2**31), frac=st.floats(0.05, 1.0))
@settings(max_examples=15, deadline=None)
def test_ir_step_matches_float64_reference(backend: str, graph: SheafGraph, seed: int, frac: float) -> None:
    alpha = frac * sheaf_stable_alpha(graph)
    x = stalks(graph, seed)
    prog = sheaf_laplacian_step(graph.n_nodes, graph.d)
    out = run(prog, graph.dispatch_inputs(x, alpha), backend)["x_next"]
    ref = sheaf_laplacian_step_reference(graph, x.astype(np.float32).astype(np.float64), alpha)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * (1 + np.abs(x).max()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_ir_step_f64_and_isolated_nodes(backend: str) -> None:
    # Node 3 has no edges: its stalk must not move.
    graph = SheafGraph.from_edges(4, 2, [(0, 1), (1, 2)], [[1.0, 2.0], [0.5, -1.0]], [[1.5, 1.0], [2.0, 0.0]])
    x = stalks(graph, 7)
    out = run(sheaf_laplacian_step(4, 2, dtype=F64), graph.dispatch_inputs(x, 0.05, F64), backend)["x_next"]
    np.testing.assert_allclose(out, sheaf_laplacian_step_reference(graph, x, 0.05), rtol=1e-12, atol=1e-12)
    assert out[6:].tolist() == x[6:].tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ir_step_keeps_global_sections_and_lowers_energy(backend: str) -> None:
    graph, section = section_sheaf(6, 3, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 3)], 3)
    prog = sheaf_laplacian_step(6, 3)
    alpha = sheaf_stable_alpha(graph)
    out = run(prog, graph.dispatch_inputs(section, alpha), backend)["x_next"]
    np.testing.assert_allclose(out, section, rtol=1e-5, atol=1e-5)
    x = stalks(graph, 11)
    energies = [sheaf_dirichlet_energy(graph, x)]
    for _ in range(5):
        x = run(prog, graph.dispatch_inputs(x, alpha), backend)["x_next"].astype(np.float64)
        energies.append(sheaf_dirichlet_energy(graph, x))
    assert all(b <= a * (1 + 1e-5) for a, b in itertools.pairwise(energies))
    assert energies[-1] < energies[0]
