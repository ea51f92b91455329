"""16.16 helpers, natural-gradient block apply and the seed's sheaf step: exact integer oracles
against every backend, the seed's vectors, and shape errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.errors import VyreError
from vyre.primitives import (
    Q16_ONE, PrimitiveError, as_i32, fmul_q16, from_q16, natural_gradient_block_apply,
    natural_gradient_block_apply_cpu, natural_gradient_block_apply_exact, sheaf_diffusion_step,
    sheaf_diffusion_step_cpu, sheaf_diffusion_step_exact, to_q16,
)

# The simulator runs in its own process (NUMBA_ENABLE_CUDASIM=1); a real GPU with VYRE_TEST_CUDA=1.
BACKENDS = (["interp", "cpu"] + (["cudasim"] if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else [])
            + (["cuda"] if os.environ.get("VYRE_TEST_CUDA") == "1" else []))
ONE, HALF = Q16_ONE, Q16_ONE // 2
# The buffer names the self-substrate's via paths use: same programs, so kernels compile once.
NG_NAMES = ("m_inv_sqrt", "grad", "grad_nat")
SHEAF_NAMES = ("stalks", "restriction_diag", "damping", "stalks_next")

# u32 bit patterns that exercise sign and overflow: extremes, small negatives, random.
u32s = st.one_of(
    st.sampled_from([0, 1, ONE, HALF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 0xFFFF_0000, 0x0001_0001]),
    st.integers(0, 2**32 - 1),
    st.integers(-64 * ONE, 64 * ONE).map(lambda v: v & 0xFFFF_FFFF),
)


def run(program, inputs, backend):
    from vyre.driver.dispatch import dispatch

    return dispatch(program, inputs, backend=backend)


def u32a(values) -> np.ndarray:
    return np.asarray(values, dtype=np.uint32)


# --- fixed point -------------------------------------------------------------------------------

@given(u32s, u32s)
@settings(max_examples=300, deadline=None)
def test_fmul_q16_is_the_signed_64_bit_product_shifted(a: int, b: int) -> None:
    prod = np.int64(np.uint32(a).view(np.int32)) * np.int64(np.uint32(b).view(np.int32))
    assert fmul_q16(a, b) == int(np.uint32(np.int64(prod >> 16) & 0xFFFF_FFFF))


def test_fmul_q16_known_values() -> None:
    assert fmul_q16(10 * ONE, HALF) == 5 * ONE
    assert as_i32(fmul_q16(to_q16(-3.0), to_q16(2.0))) == -6 * ONE
    assert fmul_q16(0xFFFF_FFFF, 0xFFFF_FFFF) == 0  # (-1 * -1) >> 16 == 0
    assert fmul_q16(0xFFFF_FFFF, 1) == 0xFFFF_FFFF  # -1 >> 16 == -1 (arithmetic shift)


@given(st.floats(-32767.0, 32767.0))
@settings(max_examples=200, deadline=None)
def test_to_q16_round_trips_within_half_an_ulp(v: float) -> None:
    assert abs(from_q16(to_q16(v)) - v) <= 0.5 / ONE + 1e-12


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 40000.0, -40000.0])
def test_to_q16_rejects_unrepresentable(bad: float) -> None:
    with pytest.raises(PrimitiveError, match="Fix:"):
        to_q16(bad)


# --- natural gradient ----------------------------------------------------------------------------

def test_float_reference_diagonal_fisher_scales_per_axis() -> None:
    assert natural_gradient_block_apply_cpu([1.0, 0.0, 0.0, 0.5], [10.0, 10.0], 2) == [10.0, 5.0]


@pytest.mark.parametrize("n", [0, -1, 65536, 2**20])
def test_block_apply_rejects_empty_and_overflowing_n(n: int) -> None:
    with pytest.raises(PrimitiveError, match="Fix:") as info:
        natural_gradient_block_apply("m", "g", "out", n)
    assert isinstance(info.value, VyreError)


def test_block_apply_largest_n_builds_and_names_must_differ() -> None:
    prog = natural_gradient_block_apply("m", "g", "out", 65535)
    assert prog.buffer("m").count == 65535 * 65535
    with pytest.raises(PrimitiveError, match="distinct"):
        natural_gradient_block_apply("m", "m", "out", 2)


def test_block_apply_program_shape() -> None:
    prog = natural_gradient_block_apply("m", "g", "out", 3)
    assert [b.name for b in prog.buffers] == ["m", "g", "out"]
    assert [b.count for b in prog.buffers] == [9, 3, 3]
    assert prog.workgroup_size == (256, 1, 1)
    assert [b.name for b in prog.outputs] == ["out"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_block_apply_seed_vector(backend: str) -> None:
    prog = natural_gradient_block_apply(*NG_NAMES, 2)
    out = run(prog, {"m_inv_sqrt": u32a([ONE, 0, 0, HALF]), "grad": u32a([10 * ONE, 10 * ONE])},
              backend)["grad_nat"]
    assert out.tolist() == [10 * ONE, 5 * ONE]


# Few fixed sizes (shared with test_self_substrate.py) so compiled backends reuse their kernels.
@st.composite
def block_inputs(draw: st.DrawFn) -> tuple[int, list[int], list[int]]:
    n = draw(st.sampled_from([2, 3]))
    m = draw(st.lists(u32s, min_size=n * n, max_size=n * n))
    return n, m, draw(st.lists(u32s, min_size=n, max_size=n))


@pytest.mark.parametrize("backend", BACKENDS)
@given(case=block_inputs())
@settings(max_examples=25, deadline=None)
def test_block_apply_matches_exact_oracle(backend: str, case: tuple[int, list[int], list[int]]) -> None:
    n, m, g = case
    prog = natural_gradient_block_apply(*NG_NAMES, n)
    out = run(prog, {"m_inv_sqrt": u32a(m), "grad": u32a(g)}, backend)["grad_nat"]
    assert out.tolist() == natural_gradient_block_apply_exact(m, g, n)


def test_exact_oracle_tracks_float_reference_when_nothing_overflows() -> None:
    rng = np.random.default_rng(0)
    m, g = rng.uniform(-2, 2, 16), rng.uniform(-2, 2, 4)
    exact = natural_gradient_block_apply_exact([to_q16(v) for v in m], [to_q16(v) for v in g], 4)
    ref = natural_gradient_block_apply_cpu(list(m), list(g), 4)
    assert np.allclose([from_q16(v) for v in exact], ref, atol=4 * 4 / ONE)


def test_references_check_lengths() -> None:
    with pytest.raises(PrimitiveError, match=r"len\(m\) == n\*n.*Fix:"):
        natural_gradient_block_apply_exact([1], [1, 2], 2)
    with pytest.raises(PrimitiveError, match=r"len\(g\) == n.*Fix:"):
        natural_gradient_block_apply_cpu([1.0] * 4, [1.0], 2)


# --- the seed's sheaf step ----------------------------------------------------------------------

def test_seed_sheaf_step_float_reference() -> None:
    assert sheaf_diffusion_step_cpu([1.0, 2.0, 3.0], [0.5] * 3, 0.0) == [1.0, 2.0, 3.0]
    assert sheaf_diffusion_step_cpu([10.0, 20.0], [1.0, 1.0], 0.5) == [5.0, 10.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_sheaf_step_vector(backend: str) -> None:
    prog = sheaf_diffusion_step(*SHEAF_NAMES, 2, 1)
    out = run(prog, {"stalks": u32a([10 * ONE, 20 * ONE]), "restriction_diag": u32a([ONE, ONE]),
                     "damping": u32a([HALF])}, backend)["stalks_next"]
    assert out.tolist() == [5 * ONE, 10 * ONE]


@st.composite
def sheaf_inputs(draw: st.DrawFn) -> tuple[int, int, list[int], list[int], int]:
    n_nodes, d = draw(st.sampled_from([(2, 1), (3, 2)]))
    cells = n_nodes * d
    return (n_nodes, d, draw(st.lists(u32s, min_size=cells, max_size=cells)),
            draw(st.lists(u32s, min_size=cells, max_size=cells)), draw(u32s))


@pytest.mark.parametrize("backend", BACKENDS)
@given(case=sheaf_inputs())
@settings(max_examples=25, deadline=None)
def test_seed_sheaf_step_matches_exact_oracle(backend: str, case) -> None:
    n_nodes, d, s, r, damping = case
    prog = sheaf_diffusion_step(*SHEAF_NAMES, n_nodes, d)
    out = run(prog, {"stalks": u32a(s), "restriction_diag": u32a(r), "damping": u32a([damping])},
              backend)["stalks_next"]
    assert out.tolist() == sheaf_diffusion_step_exact(s, r, damping)


@pytest.mark.parametrize("args", [(0, 1), (1, 0), (2**16, 2**16), (True, 1)])
def test_seed_sheaf_step_rejects_bad_shapes(args: tuple[int, int]) -> None:
    with pytest.raises(PrimitiveError, match="Fix:"):
        sheaf_diffusion_step("s", "r", "d", "o", *args)
    with pytest.raises(PrimitiveError, match="Fix:"):
        sheaf_diffusion_step_exact([1, 2], [1], 0)
