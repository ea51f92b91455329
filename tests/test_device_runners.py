"""Runners on the caller's arrays: DLPack binding, array kinds, the in-kernel loss, the reusable
value-and-gradient handle. CPU only (PyTorch CPU tensors stand in for every non-numpy kind; the
GPU kinds are checked in bench/gpu_bench.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import vyre
from tests.autodiff_strategies import Case, programs
from vyre.autodiff import check_grad, grad, hvp, jvp, run_forward, value_and_grad, value_and_grad_fn, vjp
from vyre.autodiff.checkpoint import tape_arrays
from vyre.autodiff.fused import LOSS_PREFIX, loss_program, needs_zero_fill, partial_count, with_loss_partials
from vyre.driver.dispatch import compile as vcompile
from vyre.errors import AutodiffError, DispatchError
from vyre.examples import fused_chain, matvec
from vyre.ir.node import Store, walk_nodes

torch = pytest.importorskip("torch")

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _chain_inputs(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(n).astype(np.float32), "y": rng.standard_normal(n).astype(np.float32),
            "out": np.zeros(n, np.float32)}


# ---- DLPack binding ----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_torch_cpu_tensors_are_bound_zero_copy_and_written_in_place(backend: str) -> None:
    a = _chain_inputs(257)
    t = {k: torch.from_numpy(v.copy()) for k, v in a.items()}
    res = vyre.dispatch(fused_chain(), t, backend=backend)
    assert res["out"] is t["out"]
    ref = vcompile(fused_chain(), "interp")(a)["out"]
    np.testing.assert_allclose(t["out"].numpy(), ref, rtol=1e-6, atol=1e-6)


def test_a_tensor_that_requires_grad_is_refused_with_a_fix() -> None:
    a = {k: torch.from_numpy(v) for k, v in _chain_inputs(8).items()}
    a["x"].requires_grad_(True)
    with pytest.raises(DispatchError, match=r"detach\(\)"):
        vyre.dispatch(fused_chain(), a, backend="cpu")


def test_a_wrong_dtype_tensor_names_the_buffer() -> None:
    a = {k: torch.from_numpy(v) for k, v in _chain_inputs(8).items()}
    a["y"] = a["y"].double()
    with pytest.raises(DispatchError, match="'y' has dtype float64"):
        vyre.dispatch(fused_chain(), a, backend="cpu")


def test_dlpack_view_reads_pointer_shape_dtype_and_offset() -> None:
    from vyre.driver.dlpack import DL_CPU, DLPackView

    base = torch.arange(10, dtype=torch.float64)
    t = base[3:]
    v = DLPackView(t, "x")
    cai = v.__cuda_array_interface__
    assert v.device_type == DL_CPU
    assert cai["data"][0] == t.data_ptr() and cai["shape"] == (7,) and cai["typestr"] == "<f8"
    assert cai["strides"] in (None, (8,))
    del v  # the deleter runs: the tensor stays usable
    assert float(t.sum()) == sum(range(3, 10))


def test_dlpack_cuda_binding_refuses_a_host_object() -> None:
    from vyre.driver.dlpack import device_view

    with pytest.raises(DispatchError, match="backend='cpu'"):
        device_view(torch.zeros(3), "x")


# ---- runners return the caller's kind -----------------------------------------------------------

def test_runners_on_torch_tensors_return_tensors_equal_to_numpy_results() -> None:
    prog = fused_chain()
    a = _chain_inputs(100)
    t = {k: torch.from_numpy(v.copy()) for k, v in a.items()}
    for fn in (lambda d: value_and_grad(prog, d, "out", ["x", "y"], backend="cpu"),
               lambda d: value_and_grad(prog, d, "out", ["x", "y"], cotangent=d["x"], backend="cpu")):
        ln, gn = fn(a)
        lt, gt = fn(t)
        assert isinstance(lt, float) and lt == pytest.approx(ln, rel=1e-12)
        for w in ("x", "y"):
            assert isinstance(gt[w], torch.Tensor)
            np.testing.assert_array_equal(gt[w].numpy(), gn[w])
    g = vjp(prog, t, {"out": t["y"]}, ["x"], backend="cpu")
    np.testing.assert_array_equal(g["x"].numpy(), vjp(prog, a, {"out": a["y"]}, ["x"], backend="cpu")["x"])
    p, tan = jvp(prog, t, {"x": t["y"]}, backend="cpu")
    _, tn = jvp(prog, a, {"x": a["y"]}, backend="cpu")
    assert isinstance(p["out"], torch.Tensor) and isinstance(tan["out"], torch.Tensor)
    np.testing.assert_array_equal(tan["out"].numpy(), tn["out"])
    h = hvp(prog, t, "out", ["x"], {"x": t["y"]}, backend="cpu")
    np.testing.assert_array_equal(h["x"].numpy(), hvp(prog, a, "out", ["x"], {"x": a["y"]}, backend="cpu")["x"])
    f = run_forward(prog, t, backend="cpu")
    assert isinstance(f["out"], torch.Tensor) and f["out"] is not t["out"]  # inputs stay pre-forward
    assert float(t["out"].abs().sum()) == 0.0
    assert check_grad(prog, {k: v[:16] for k, v in t.items()}, ["x", "y"], backend="cpu") < 2e-3


def test_two_dimensional_inputs_get_gradients_of_their_shape() -> None:
    a = _chain_inputs(12)
    t = {k: torch.from_numpy(v.reshape(3, 4).copy()) for k, v in a.items()}
    _, g = value_and_grad(fused_chain(), t, "out", ["x"], backend="interp")
    assert g["x"].shape == (3, 4)


# ---- the loss inside the kernel -----------------------------------------------------------------

@SETTINGS
@given(programs())
def test_loss_partials_sum_to_the_sum_of_the_output(case: Case) -> None:
    fused = grad(case.program, ["out"], case.wrt, with_value=True, unit_cotangent=True)
    prog = with_loss_partials(fused, "out")
    stores = [n for n in walk_nodes(fused.entry) if isinstance(n, Store) and n.buffer == "out"]
    if prog is None:  # an early return stores out[i] too: two store sites
        assert len(stores) > 1
        return
    assert len(stores) == 1
    n = case.inputs["out"].size
    args = {**{k: v.copy() for k, v in case.inputs.items()}, LOSS_PREFIX + "out": np.zeros(partial_count(n))}
    for w in case.wrt:
        args["grad_" + w] = np.zeros_like(case.inputs[w])
    wg = prog.workgroup_size[0]
    args.update(tape_arrays(case.program, prog, -(-n // wg) * wg))  # loops' tapes, default grid
    res = vcompile(prog, "interp")(args)
    assert float(np.sum(res[LOSS_PREFIX + "out"])) == pytest.approx(float(np.sum(res["out"])), rel=1e-12, abs=1e-12)


def test_partials_split_every_8192_outputs_and_match_on_the_cpu_backend() -> None:
    n = 20000
    a = _chain_inputs(n, seed=3)
    prog, has = loss_program(fused_chain(), "out", ("x", "y"), True, False)
    assert has and partial_count(n) == 3 and partial_count(8192) == 1 and partial_count(1) == 1
    args = {**a, "grad_x": np.zeros(n, np.float32), "grad_y": np.zeros(n, np.float32), "loss_out": np.zeros(3)}
    res = vcompile(prog, "cpu")(args)
    x, y = a["x"].astype(np.float64), a["y"].astype(np.float64)
    full = np.exp(x) * y + np.sin(x) * x
    expect = [full[i * 8192:(i + 1) * 8192].sum() for i in range(3)]
    np.testing.assert_allclose(res["loss_out"], expect, rtol=1e-5)


def test_outputs_stored_twice_or_in_a_loop_get_no_partials() -> None:
    from vyre.ir import F64, Program, f64, gid, loop, output, read, store

    x, out = read("x", 0, F64), output("out", 1, F64)
    twice = Program.wrapped([x, out], 4, [store(out, gid(), x[gid()]), store(out, gid(), x[gid()] * f64(2.0))])
    looped = Program.wrapped([x, out], 4, [loop("j", 0, 2, [store(out, gid(), x[gid()])])])
    for p in (twice, looped):
        assert with_loss_partials(grad(p, ["out"], ["x"], with_value=True, unit_cotangent=True), "out") is None
    assert with_loss_partials(grad(matvec(), ["out"], ["m", "v"], with_value=True, unit_cotangent=True), "out")


# ---- skipping zero fills --------------------------------------------------------------------------

@SETTINGS
@given(programs())
def test_gradients_said_to_need_no_zero_fill_are_fully_overwritten(case: Case) -> None:
    fused = grad(case.program, ["out"], case.wrt, with_value=True, unit_cotangent=True, accumulate=False)
    base = {k: v.copy() for k, v in case.inputs.items()}
    if any(b.name == "stored_out" for b in fused.buffers):
        base["stored_out"] = np.zeros(case.inputs["out"].size, np.uint32)
    wg, n = fused.workgroup_size[0], case.inputs["out"].size
    base.update(tape_arrays(case.program, fused, -(-n // wg) * wg))  # loops' tapes, default grid
    clean = dict(base, **{"grad_" + w: np.zeros_like(case.inputs[w]) for w in case.wrt})
    dirty = dict({k: v.copy() for k, v in base.items()},
                 **{"grad_" + w: np.full_like(case.inputs[w], np.nan) for w in case.wrt})
    k = vcompile(fused, "interp")
    want, got = k(clean), k(dirty)
    for w in case.wrt:
        if not needs_zero_fill(fused, w):
            np.testing.assert_array_equal(got["grad_" + w], want["grad_" + w])


def test_the_elementwise_chain_needs_no_zero_fill_and_matvec_does() -> None:
    chain = grad(fused_chain(), ["out"], ["x", "y"], with_value=True, unit_cotangent=True, accumulate=False)
    assert not needs_zero_fill(chain, "x") and not needs_zero_fill(chain, "y")
    mv = grad(matvec(), ["out"], ["m", "v"], with_value=True, unit_cotangent=True, accumulate=False)
    assert needs_zero_fill(mv, "v")
    acc = grad(fused_chain(), ["out"], ["x"], with_value=True, unit_cotangent=True, accumulate=True)
    assert needs_zero_fill(acc, "x")


# ---- the reusable handle ----------------------------------------------------------------------------

@SETTINGS
@given(programs())
def test_handle_equals_value_and_grad_on_every_call(case: Case) -> None:
    vg = value_and_grad_fn(case.program, "out", case.wrt, backend="interp")
    loss0, g0 = value_and_grad(case.program, case.inputs, "out", case.wrt, backend="interp")
    inputs = {k: torch.from_numpy(v.copy()) for k, v in case.inputs.items()}
    for _ in range(2):  # the second call reuses the buffers
        loss, g = vg(inputs)
        assert loss == pytest.approx(loss0, rel=1e-12, abs=1e-12)
        for w in case.wrt:
            np.testing.assert_allclose(g[w].numpy(), g0[w], rtol=1e-12, atol=1e-12)


def test_handle_reuses_its_gradient_buffers_and_follows_new_arrays() -> None:
    vg = value_and_grad_fn(matvec(), "out", ["m", "v"], backend="cpu")
    rng = np.random.default_rng(1)
    a = {"m": rng.standard_normal(64 * 32).astype(np.float32), "v": rng.standard_normal(32).astype(np.float32),
         "out": np.zeros(64, np.float32)}
    l1, g1 = vg(a)
    l2, g2 = vg(a)  # atomically accumulated gradients are zero-filled again, not doubled
    assert g2["v"] is g1["v"] and l1 == l2
    np.testing.assert_allclose(g2["v"], a["m"].reshape(64, 32).sum(0), rtol=1e-4)
    b = dict(a, v=a["v"] * 2)
    l3, g3 = vg(b)
    assert g3["v"] is not g1["v"]
    np.testing.assert_allclose(l3, 2 * l1, rtol=1e-5)


def test_handle_rejects_unknown_and_gradient_buffers() -> None:
    vg = value_and_grad_fn(fused_chain(), "out", ["x"], backend="interp")
    with pytest.raises(AutodiffError, match="grad_x"):
        vg({**_chain_inputs(4), "grad_x": np.zeros(4, np.float32)})
    with pytest.raises(AutodiffError):
        value_and_grad_fn(fused_chain(), "out", ["nope"])


# ---- JAX arrays through DLPack (eagerly; not under jax.jit) ---------------------------------------

def test_jax_arrays_are_read_through_dlpack_and_results_come_back_as_jax() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    a = _chain_inputs(64, seed=5)
    jx, jy = jnp.asarray(a["x"]), jnp.asarray(a["y"])
    out = np.zeros(64, np.float32)
    vyre.dispatch(fused_chain(), {"x": jx, "y": jy, "out": out}, backend="cpu")
    np.testing.assert_allclose(out, vcompile(fused_chain(), "interp")(a)["out"], rtol=1e-6, atol=1e-6)
    with pytest.raises(DispatchError, match="immutable"):
        vyre.dispatch(fused_chain(), {"x": jx, "y": jy, "out": jnp.zeros(64, jnp.float32)}, backend="cpu")
    loss, g = value_and_grad(fused_chain(), {"x": jx, "y": jy, "out": jnp.zeros(64, jnp.float32)}, "out",
                             ["x", "y"], backend="cpu")
    ref_loss, ref = value_and_grad(fused_chain(), a, "out", ["x", "y"], backend="cpu")
    assert isinstance(g["x"], jax.Array) and loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_array_equal(np.asarray(g["x"]), ref["x"])


def test_vyre_under_jax_jit_is_a_clear_error() -> None:
    jax = pytest.importorskip("jax")

    @jax.jit
    def f(x: object) -> object:
        return vyre.dispatch(fused_chain(), {"x": x, "y": x, "out": np.zeros(8, np.float32)}, backend="cpu")["out"]

    with pytest.raises(DispatchError, match=r"jax\.pure_callback"):
        f(jax.numpy.zeros(8, jax.numpy.float32))
