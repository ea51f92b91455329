"""The seed's self-substrate tests (mock dispatchers and vectors), the same functions through the
real DriverDispatcher on every backend, the byte helpers, error kinds and counters."""

from __future__ import annotations

import inspect
import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre
from vyre.ir import Program
from vyre.primitives import Q16_ONE, natural_gradient_block_apply, natural_gradient_block_apply_exact
from vyre.primitives import sheaf_diffusion_step_exact
from vyre.self_substrate import (
    NATURAL_GRADIENT_AUTOTUNER_CALLS, SHEAF_HETEROPHILIC_DISPATCH_CALLS, DispatchErrorKind,
    DriverDispatcher, NaturalGradientScratch, OptimizerDispatcher, OptimizerDispatchError,
    SheafDispatchScratch, autotune_step, autotune_step_into, bump, ceil_div_u32, checked_product_count,
    checked_square_cells, decode_u32_le, decode_u32_output_exact, diffuse_dispatch_stalks_fixed_via,
    diffuse_dispatch_stalks_fixed_via_with_scratch_into, diffuse_to_equilibrium, encode_u32_le,
    flag_fusion_incompatible, flag_fusion_incompatible_into, identity_fisher_block,
    natural_gradient_direction, precondition_autotune_gradient_fixed_via,
    precondition_autotune_gradient_fixed_via_with_scratch_into, read_u32s,
    reference_diffuse_dispatch_stalks, reference_precondition_autotune_gradient, snapshot_counters,
    u32_slice_to_le_bytes,
)
from vyre.self_substrate import natural_gradient_autotuner as nga
from vyre.self_substrate import sheaf_heterophilic_dispatch as shd

# The simulator runs in its own process (NUMBA_ENABLE_CUDASIM=1); a real GPU with VYRE_TEST_CUDA=1.
BACKENDS = (["interp", "cpu"] + (["cudasim"] if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else [])
            + (["cuda"] if os.environ.get("VYRE_TEST_CUDA") == "1" else []))
ONE, HALF = Q16_ONE, Q16_ONE // 2


def approx_eq(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9 * (1.0 + abs(a) + abs(b))


# --- the seed's mock dispatchers -----------------------------------------------------------------

class NaturalGradientDispatcher:
    """The seed's mock: checks the contract and computes the product on the host."""

    def dispatch(self, program: Program, inputs, grid_override):
        assert grid_override == (1, 1, 1)
        assert len(inputs) == 3
        matrix, grad = read_u32s(inputs[0]), read_u32s(inputs[1])
        assert len(inputs[2]) == len(grad) * 4 and not any(inputs[2])
        n = len(grad)
        assert len(matrix) == n * n
        out = [sum((matrix[i * n + j] * grad[j]) >> 16 for j in range(n)) & 0xFFFF_FFFF for i in range(n)]
        return [u32_slice_to_le_bytes(out)]


class SheafDispatcher:
    def dispatch(self, program: Program, inputs, grid_override):
        assert grid_override == (1, 1, 1)
        assert len(inputs) == 4
        stalks, restrictions = read_u32s(inputs[0]), read_u32s(inputs[1])
        damping = read_u32s(inputs[2])[0]
        assert len(inputs[3]) == len(stalks) * 4
        out = []
        for s, r in zip(stalks, restrictions, strict=True):
            damped_r = (damping * r) >> 16
            out.append(max(s - ((damped_r * s) >> 16), 0))
        return [u32_slice_to_le_bytes(out)]


class Returns:
    """A dispatcher that returns a fixed answer (malformed readback cases)."""

    def __init__(self, outputs: list[bytes]) -> None:
        self.outputs = outputs

    def dispatch(self, program, inputs, grid_override):
        return self.outputs


def test_mocks_satisfy_the_protocol() -> None:
    assert isinstance(NaturalGradientDispatcher(), OptimizerDispatcher)
    assert isinstance(DriverDispatcher("interp"), OptimizerDispatcher)


# --- natural_gradient_autotuner (seed tests) ------------------------------------------------------

def test_identity_fisher_recovers_plain_gradient() -> None:
    grad = [1.0, -2.0, 0.5]
    g_nat = reference_precondition_autotune_gradient(identity_fisher_block(3), grad, 3)
    assert all(approx_eq(a, b) for a, b in zip(grad, g_nat, strict=True))


def test_autotune_step_negates_gradient() -> None:
    step = autotune_step(identity_fisher_block(2), [1.0, 2.0], 2, 0.1)
    assert approx_eq(step[0], -0.1) and approx_eq(step[1], -0.2)


def test_autotune_step_zero_lr_no_motion() -> None:
    assert all(approx_eq(v, 0.0) for v in autotune_step(identity_fisher_block(3), [1.0, 2.0, 3.0], 3, 0.0))


def test_autotune_step_into_reuses_output() -> None:
    out: list[float] = [9.0] * 8
    before = id(out)
    autotune_step_into(identity_fisher_block(2), [1.0, 2.0], 2, 0.1, out)
    assert id(out) == before and len(out) == 2
    assert approx_eq(out[0], -0.1) and approx_eq(out[1], -0.2)


def test_diagonal_fisher_scales_per_axis() -> None:
    g_nat = reference_precondition_autotune_gradient([1.0, 0.0, 0.0, 0.5], [10.0, 10.0], 2)
    assert approx_eq(g_nat[0], 10.0) and approx_eq(g_nat[1], 5.0)


def test_fixed_via_dispatches_natural_gradient_primitive() -> None:
    out = precondition_autotune_gradient_fixed_via(NaturalGradientDispatcher(), [ONE, 0, 0, HALF],
                                                   [10 * ONE, 10 * ONE], 2)
    assert out == [10 * ONE, 5 * ONE]


def test_fixed_via_rejects_invalid_shapes() -> None:
    with pytest.raises(OptimizerDispatchError) as info:
        precondition_autotune_gradient_fixed_via(NaturalGradientDispatcher(), [1], [1, 2], 2)
    assert info.value.kind is DispatchErrorKind.BAD_INPUTS
    assert "Fix:" in str(info.value) and isinstance(info.value, vyre.DispatchError)


@pytest.mark.parametrize("m, g, n, match", [
    ([1, 2, 3, 4], [1], 2, r"len\(grad_fixed\) == n"),
    ([], [], 0, "positive"),
    ([], [], 65536, "exceeds"),
    ([1, 2, 3, 4], [1, 2], True, "positive"),
    ([1, 2, 3, -4], [1, 2], 2, "outside"),
])
def test_fixed_via_bad_inputs(m, g, n, match: str) -> None:
    with pytest.raises(OptimizerDispatchError, match=match) as info:
        precondition_autotune_gradient_fixed_via(NaturalGradientDispatcher(), m, g, n)
    assert info.value.kind is DispatchErrorKind.BAD_INPUTS and "Fix:" in str(info.value)


@pytest.mark.parametrize("outputs, match", [
    ([], "at least one output"),
    ([b"\0" * 4], "expected an output of 2"),
    ([b"\0" * 12], "expected an output of 2"),
    ([b"\0" * 7], "expected an output of 2"),
])
def test_fixed_via_malformed_readback_is_a_backend_error(outputs: list[bytes], match: str) -> None:
    with pytest.raises(OptimizerDispatchError, match=match) as info:
        precondition_autotune_gradient_fixed_via(Returns(outputs), [ONE, 0, 0, ONE], [ONE, ONE], 2)
    assert info.value.kind is DispatchErrorKind.BACKEND_ERROR and "Fix:" in str(info.value)


def test_fixed_via_with_scratch_reuses_input_buffers() -> None:
    scratch, out = NaturalGradientScratch(), []
    args = ([ONE, 0, 0, ONE], [3 * ONE, 5 * ONE], 2)
    via = precondition_autotune_gradient_fixed_via_with_scratch_into
    via(NaturalGradientDispatcher(), *args, scratch, out)
    ids = [id(b) for b in scratch.inputs]
    out_id = id(out)
    via(NaturalGradientDispatcher(), *args, scratch, out)
    assert [id(b) for b in scratch.inputs] == ids and id(out) == out_id
    assert out == [3 * ONE, 5 * ONE]


@pytest.mark.parametrize("via", [
    nga.precondition_autotune_gradient_fixed_via_with_scratch_into,
    shd.diffuse_dispatch_stalks_fixed_via_with_scratch_into,
])
def test_production_via_path_keeps_cpu_helpers_out(via) -> None:
    body = inspect.getsource(via)
    assert "_cpu" not in body and "reference_" not in body
    assert "apply_exact" not in body and "step_exact" not in body


def test_identity_fisher_block_is_diagonal_of_ones() -> None:
    m = identity_fisher_block(4)
    assert all(m[i * 4 + j] == (1.0 if i == j else 0.0) for i in range(4) for j in range(4))


# --- sheaf_heterophilic_dispatch (seed tests) -----------------------------------------------------

def test_zero_damping_holds_initial() -> None:
    s = [1.0, 2.0, 3.0]
    assert all(approx_eq(a, b) for a, b in zip(s, reference_diffuse_dispatch_stalks(s, [0.5] * 3, 0.0),
                                                strict=True))


def test_high_damping_drives_to_equilibrium() -> None:
    final, iters = diffuse_to_equilibrium([1.0] * 3, [1.0] * 3, 0.9, 1e-6, 100)
    assert all(abs(v) < 1.0 for v in final) and iters < 100


def test_equilibrium_with_zero_max_iters_returns_initial() -> None:
    assert diffuse_to_equilibrium([5.0, 10.0], [1.0, 1.0], 0.5, 1e-6, 0) == ([5.0, 10.0], 0)


def test_flag_fusion_incompatible() -> None:
    assert flag_fusion_incompatible([1.0, 2.0, 3.0], [0.5, 2.0, 2.5], 0.0) == [1, 0, 1]
    assert flag_fusion_incompatible([1.0, 2.0], [1.5, 2.5], 100.0) == [0, 0]
    flags: list[int] = [7] * 8
    before = id(flags)
    flag_fusion_incompatible_into([1.0, 2.0, 3.0], [0.5, 2.0, 2.5], 0.0, flags)
    assert flags == [1, 0, 1] and id(flags) == before
    with pytest.raises(OptimizerDispatchError, match="Fix:"):
        flag_fusion_incompatible([1.0], [1.0, 2.0], 0.0)


def test_sheaf_fixed_via_dispatches_sheaf_step() -> None:
    out = diffuse_dispatch_stalks_fixed_via(SheafDispatcher(), [10 * ONE, 20 * ONE], [ONE, ONE], HALF, 2, 1)
    assert out == [5 * ONE, 10 * ONE]


def test_sheaf_fixed_via_rejects_shape_mismatch() -> None:
    for args in (([1, 2, 3], [1, 2], 1, 2, 2), ([1, 2, 3, 4], [1, 2], 1, 2, 2), ([], [], 1, 0, 2),
                 ([], [], 1, 2**16, 2**16)):
        with pytest.raises(OptimizerDispatchError, match="Fix:") as info:
            diffuse_dispatch_stalks_fixed_via(SheafDispatcher(), *args)
        assert info.value.kind is DispatchErrorKind.BAD_INPUTS
    with pytest.raises(OptimizerDispatchError, match="at least one output") as info2:
        diffuse_dispatch_stalks_fixed_via(Returns([]), [ONE], [ONE], HALF, 1, 1)
    assert info2.value.kind is DispatchErrorKind.BACKEND_ERROR


def test_sheaf_fixed_via_with_scratch_reuses_input_buffers() -> None:
    scratch, out = SheafDispatchScratch(), []
    diffuse_dispatch_stalks_fixed_via_with_scratch_into(SheafDispatcher(), [10 * ONE, 20 * ONE], [ONE, ONE],
                                                        HALF, 2, 1, scratch, out)
    ids = [id(b) for b in scratch.inputs]
    diffuse_dispatch_stalks_fixed_via_with_scratch_into(SheafDispatcher(), [8 * ONE, 12 * ONE], [ONE, ONE],
                                                        HALF, 2, 1, scratch, out)
    assert [id(b) for b in scratch.inputs] == ids and out == [4 * ONE, 6 * ONE]


# --- the same functions through the real driver ---------------------------------------------------

u32s = st.one_of(st.sampled_from([0, 1, ONE, HALF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF]),
                 st.integers(0, 2**32 - 1), st.integers(-8 * ONE, 8 * ONE).map(lambda v: v & 0xFFFF_FFFF))


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_vectors_through_driver(backend: str) -> None:
    disp = DriverDispatcher(backend)
    out = precondition_autotune_gradient_fixed_via(disp, [ONE, 0, 0, HALF], [10 * ONE] * 2, 2)
    assert out == [10 * ONE, 5 * ONE]
    out = diffuse_dispatch_stalks_fixed_via(disp, [10 * ONE, 20 * ONE], [ONE, ONE], HALF, 2, 1)
    assert out == [5 * ONE, 10 * ONE]


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data(), n=st.sampled_from([2, 3]))
@settings(max_examples=15, deadline=None)
def test_via_paths_match_exact_oracles_through_driver(backend: str, data: st.DataObject, n: int) -> None:
    disp = DriverDispatcher(backend)
    m = data.draw(st.lists(u32s, min_size=n * n, max_size=n * n))
    g = data.draw(st.lists(u32s, min_size=n, max_size=n))
    out = precondition_autotune_gradient_fixed_via(disp, m, g, n)
    assert out == natural_gradient_block_apply_exact(m, g, n)
    d = n - 1  # the shapes test_primitives.py compiles: (2, 1) and (3, 2)
    s = data.draw(st.lists(u32s, min_size=n * d, max_size=n * d))
    r = data.draw(st.lists(u32s, min_size=n * d, max_size=n * d))
    k = data.draw(u32s)
    assert diffuse_dispatch_stalks_fixed_via(disp, s, r, k, n, d) == sheaf_diffusion_step_exact(s, r, k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_natural_gradient_direction_end_to_end(backend: str) -> None:
    # Fisher diag(1, 4, 16): M^{-1/2} = diag(1, 0.5, 0.25), so [10, 10, 10] -> [10, 5, 2.5].
    disp = DriverDispatcher(backend)
    out = natural_gradient_direction(np.diag([1.0, 4.0, 16.0]), [10.0] * 3, disp, damping=0.0)
    np.testing.assert_allclose(out, [10.0, 5.0, 2.5], atol=0.02)
    with pytest.raises(OptimizerDispatchError, match="Fix:"):
        natural_gradient_direction(np.eye(3), [1.0, 2.0], DriverDispatcher(backend))


def test_driver_dispatcher_errors_have_the_right_kind() -> None:
    disp = DriverDispatcher("interp")
    prog = natural_gradient_block_apply("m", "g", "out", 2)
    good = [encode_u32_le([ONE, 0, 0, ONE]), encode_u32_le([ONE, ONE]), bytes(8)]
    assert [read_u32s(b) for b in disp.dispatch(prog, good, None)] == [[ONE, ONE]]
    cases = [
        (good[:2], DispatchErrorKind.BAD_INPUTS, "3 storage buffers"),
        ([good[0], good[1], bytes(7)], DispatchErrorKind.BAD_INPUTS, "multiple of its element size"),
        ([good[0], encode_u32_le([1, 2, 3]), bytes(8)], DispatchErrorKind.BAD_INPUTS, "declares 2"),
        ([good[0], good[1], "x"], DispatchErrorKind.BAD_INPUTS, "expected bytes"),
    ]
    for inputs, kind, match in cases:
        with pytest.raises(OptimizerDispatchError, match=match) as info:
            disp.dispatch(prog, inputs, None)
        assert info.value.kind is kind and "Fix:" in str(info.value)
    invalid = Program(prog.buffers, (0, 1, 1), prog.entry)
    with pytest.raises(OptimizerDispatchError) as info:
        disp.dispatch(invalid, good, None)
    assert info.value.kind is DispatchErrorKind.REJECTED and isinstance(info.value.__cause__, vyre.VyreError)
    with pytest.raises(OptimizerDispatchError) as info:
        DriverDispatcher("no-such-backend").dispatch(prog, good, None)
    assert info.value.kind is DispatchErrorKind.BACKEND_ERROR


# --- byte helpers and counters ---------------------------------------------------------------------

def test_byte_helpers() -> None:
    assert ceil_div_u32(0, 256) == 0 and ceil_div_u32(257, 256) == 2
    assert ceil_div_u32(2**32 - 1, 1) == 2**32 - 1
    assert checked_square_cells(65535, "t") == 65535**2
    assert checked_product_count(3, 5, "a", "b", "t") == 15
    data = encode_u32_le([0, 1, 0xFFFF_FFFF])
    assert data == b"\0\0\0\0\1\0\0\0\xff\xff\xff\xff" and decode_u32_le(data) == [0, 1, 0xFFFF_FFFF]
    out: list[int] = []
    decode_u32_output_exact(data, 3, "t", out)
    assert out == [0, 1, 0xFFFF_FFFF]
    for fn, kind in [
        (lambda: ceil_div_u32(1, 0), DispatchErrorKind.BAD_INPUTS),
        (lambda: checked_square_cells(0, "t"), DispatchErrorKind.BAD_INPUTS),
        (lambda: checked_product_count(2**16, 2**16, "a", "b", "t"), DispatchErrorKind.BAD_INPUTS),
        (lambda: encode_u32_le([2**32]), DispatchErrorKind.BAD_INPUTS),
        (lambda: encode_u32_le([1.5]), DispatchErrorKind.BAD_INPUTS),
        (lambda: decode_u32_le(b"\0" * 5), DispatchErrorKind.BACKEND_ERROR),
        (lambda: decode_u32_output_exact(data, 2, "t", out), DispatchErrorKind.BACKEND_ERROR),
    ]:
        with pytest.raises(OptimizerDispatchError, match="Fix:") as info:
            fn()
        assert info.value.kind is kind


def test_counters_are_thread_safe_and_count_calls() -> None:
    before = snapshot_counters()
    threads = [threading.Thread(target=lambda: [bump("test_counter") for _ in range(2000)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert snapshot_counters()["test_counter"] - before.get("test_counter", 0) == 16000
    reference_precondition_autotune_gradient([1.0], [1.0], 1)
    reference_diffuse_dispatch_stalks([1.0], [1.0], 0.5)
    after = snapshot_counters()
    assert after[NATURAL_GRADIENT_AUTOTUNER_CALLS] > before[NATURAL_GRADIENT_AUTOTUNER_CALLS]
    assert after[SHEAF_HETEROPHILIC_DISPATCH_CALLS] > before[SHEAF_HETEROPHILIC_DISPATCH_CALLS]
