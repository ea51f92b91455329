"""Safe launches: ``dim=`` beside ``grid=``, no silent partial result from the default grid,
length checks of buffers indexed by the invocation id, argument checks before any tuning."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre
from vyre.autodiff import value_and_grad
from vyre.driver.coverage import LaunchWarning, coverage
from vyre.driver.launch_policy import launch_policy, set_launch_policy
from vyre.errors import DispatchError, InterpError
from vyre.examples import block_sum, fused_chain, histogram, saxpy, subgroup_sum
from vyre.interp import run as interp_run
from vyre.ir import (
    F32, U32, Program, assign, buflen, gid, if_, let, lid, output, read, store, u32, var, wgid,
)

BACKENDS = ("cpu", "interp")


def copy_prog(wg: int = 64) -> Program:
    """``out[i] = x[i] + 1`` guarded by ``i < len(out)``."""
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    return Program.wrapped([x, out], wg, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, x[i] + 1.0)])])


def grid2d_prog() -> Program:
    """``out[y * w + x] = y * w + x`` over a 2-D launch of 8x8 workgroups (w = 40)."""
    out = output("out", 0, U32)
    w = u32(40)
    xi, yi = gid(0), gid(1)
    return Program.wrapped([out], (8, 8, 1), [
        if_(xi.lt(w), [store(out, yi * w + xi, yi * w + xi)]),
    ])


# -- the analysis ----------------------------------------------------------------------------------


def test_coverage_finds_invocation_indexed_buffers_and_axes() -> None:
    assert coverage(saxpy()).id_indexed == ("x", "y", "out") and coverage(saxpy()).axes == ()
    assert coverage(block_sum()).id_indexed == ("x",)
    assert coverage(subgroup_sum()).id_indexed == ("x",)
    assert coverage(histogram()).id_indexed == ("keys",)
    assert coverage(grid2d_prog()).axes == (1,)
    # a name reassigned later is not the invocation id everywhere: not judged
    x, out = read("x", 0, F32), output("out", 1, F32)
    p = Program.wrapped([x, out], 64, [let("i", gid()), assign("i", var("i") + u32(1)), store(out, var("i"), x[gid()])])
    assert coverage(p).id_indexed == ("x",)
    # an index computed from workgroup and local ids is not judged either (not certainly elementwise)
    q = Program.wrapped([x, out], 64, [store(out, wgid() * u32(64) + lid(), x[wgid()])])
    assert coverage(q).id_indexed == ()


# -- dim= ------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3000), wg=st.sampled_from([1, 32, 64, 256]), backend=st.sampled_from(BACKENDS))
def test_dim_covers_exactly_what_grid_would(n: int, wg: int, backend: str) -> None:
    p = copy_prog(wg)
    x = np.arange(n, dtype=np.float32)
    a = vyre.dispatch(p, {"x": x, "out": np.zeros(n, np.float32)}, backend=backend, dim=n)["out"]
    b = vyre.dispatch(p, {"x": x, "out": np.zeros(n, np.float32)}, backend=backend, grid=-(-n // wg))["out"]
    np.testing.assert_array_equal(a, x + 1)
    np.testing.assert_array_equal(a, b)


def test_dim_and_grid_together_or_bad_dims_are_errors() -> None:
    p = copy_prog()
    args = {"x": np.zeros(8, np.float32), "out": np.zeros(8, np.float32)}
    with pytest.raises(DispatchError, match="only one"):
        vyre.dispatch(p, args, backend="cpu", dim=8, grid=1)
    for bad in (0, -3, (1, 2, 3, 4), 1.5, "8"):
        with pytest.raises(DispatchError, match="dim"):
            vyre.dispatch(p, args, backend="cpu", dim=bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_2d_program_needs_dim_or_grid_and_dim_covers_it(backend: str) -> None:
    p = grid2d_prog()
    w, h = 40, 30
    with pytest.raises(DispatchError, match=r"along y.*Fix: pass dim="):
        vyre.dispatch(p, {"out": np.zeros(w * h, np.uint32)}, backend=backend)
    out = vyre.dispatch(p, {"out": np.zeros(w * h, np.uint32)}, backend=backend, dim=(w, h))["out"]
    np.testing.assert_array_equal(out, np.arange(w * h, dtype=np.uint32))


def test_the_interpreter_applies_the_same_rule() -> None:
    with pytest.raises(InterpError, match="dim="):
        interp_run(block_sum(), {"x": np.ones(300, np.float32)})


def test_autodiff_forwards_dim() -> None:
    p = fused_chain()
    n = 300
    x = np.linspace(-1, 1, n).astype(np.float32)
    loss_dim, g_dim = value_and_grad(p, {"x": x, "y": x, "out": np.zeros(n, np.float32)}, "out", ["x"],
                                     backend="cpu", dim=n)
    loss, g = value_and_grad(p, {"x": x, "y": x, "out": np.zeros(n, np.float32)}, "out", ["x"], backend="cpu")
    assert loss == loss_dim
    np.testing.assert_array_equal(g["x"], g_dim["x"])


# -- the default grid ------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(length=st.integers(1, 2000), which=st.sampled_from(["block_sum", "subgroup_sum"]),
       backend=st.sampled_from(BACKENDS))
def test_workgroup_reductions_never_sum_part_of_their_input(length: int, which: str, backend: str) -> None:
    p = block_sum() if which == "block_sum" else subgroup_sum()
    wg = p.workgroup_size[0]
    x = np.ones(length, np.float32)
    if length > wg:  # the default grid (one workgroup: the output has one element) cannot cover x
        with pytest.raises(DispatchError, match=rf"'x'.*{length} elements.*Fix: pass dim={length}"):
            vyre.dispatch(p, {"x": x}, backend=backend)
    else:
        assert vyre.dispatch(p, {"x": x}, backend=backend)["out"][0] == length
    assert vyre.dispatch(p, {"x": x}, backend=backend, dim=length)["out"][0] == length


@settings(max_examples=20, deadline=None)
@given(n_in=st.integers(1, 600), n_out=st.integers(1, 600))
def test_an_input_longer_than_the_default_covers_is_an_error(n_in: int, n_out: int) -> None:
    p = copy_prog(64)
    args: dict[str, Any] = {"x": np.ones(n_in, np.float32), "out": np.zeros(n_out, np.float32)}
    covered = -(-n_out // 64) * 64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LaunchWarning)
        if n_in > covered:
            with pytest.raises(DispatchError, match="would be skipped"):
                vyre.dispatch(p, args, backend="cpu")
        else:
            out = vyre.dispatch(p, args, backend="cpu")["out"]
            m = min(n_in, n_out)
            np.testing.assert_array_equal(out[:m], 2.0)
            np.testing.assert_array_equal(out[m:], 1.0)  # out-of-bounds reads are zero (documented)


# -- lengths of invocation-indexed buffers -----------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(nx=st.integers(1, 300), ny=st.integers(1, 300), backend=st.sampled_from(BACKENDS))
def test_disagreeing_lengths_warn_and_strict_raises(nx: int, ny: int, backend: str) -> None:
    p = saxpy()
    n = max(nx, ny)

    def args() -> dict[str, np.ndarray]:
        return {"a": np.ones(1, np.float32), "x": np.ones(nx, np.float32), "y": np.ones(ny, np.float32),
                "out": np.zeros(n, np.float32)}

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        vyre.dispatch(p, args(), backend=backend)
    launch = [w for w in seen if issubclass(w.category, LaunchWarning)]
    if nx == ny:
        assert launch == []
        vyre.dispatch(p, args(), backend=backend, strict=True)
    else:
        assert len(launch) == 1 and f"x={nx}" in str(launch[0].message)
        with pytest.raises(DispatchError, match="different lengths"):
            vyre.dispatch(p, args(), backend=backend, strict=True)


# -- argument checks come before tuning ----------------------------------------------------------------


class DLPackOnly:
    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, **kw: Any) -> Any:
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return self.a.__dlpack_device__()


def test_arguments_are_checked_and_bound_before_the_launch_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VYRE_AUTOTUNER", "on")
    asked: list[tuple[int, list[type]]] = []

    def policy(kernel: Any, arrays: Any, n: int) -> None:
        asked.append((n, [type(a) for a in arrays.values()]))

    previous = set_launch_policy(policy)
    try:
        n = 1 << 16
        x = np.ones(n, np.float32)
        base = {"a": np.ones(1, np.float32), "y": x, "out": np.empty_like(x)}
        with pytest.raises(DispatchError, match="dtype float64"):
            vyre.dispatch(saxpy(), {**base, "x": np.ones(n)}, backend="cpu")
        with pytest.raises(DispatchError, match=r"got a|no length"):
            vyre.dispatch(saxpy(), {**base, "x": object()}, backend="cpu")
        assert asked == []
        # a host DLPack object is bound (zero-copy) before the policy sees it: it gets numpy arrays
        out = vyre.dispatch(saxpy(), {**base, "x": DLPackOnly(x)}, backend="cpu")["out"]
        np.testing.assert_array_equal(out, 2.0)
        assert asked == [(n, [np.ndarray] * 4)]
    finally:
        set_launch_policy(previous)


def test_dispatch_works_with_no_launch_policy() -> None:
    previous = set_launch_policy(None)
    try:
        assert launch_policy() is None
        n = 1 << 16
        x = np.arange(n, dtype=np.float32)
        out = vyre.dispatch(copy_prog(), {"x": x, "out": np.zeros(n, np.float32)}, backend="cpu")["out"]
        np.testing.assert_array_equal(out, x + 1)
    finally:
        set_launch_policy(previous)
    with pytest.raises(DispatchError, match="callable"):
        set_launch_policy(3)  # type: ignore[arg-type]


def test_value_and_grad_fn_forwards_dim() -> None:
    from vyre.autodiff import value_and_grad_fn

    p = fused_chain()
    n = 300
    x = np.linspace(-1, 1, n).astype(np.float32)
    args = {"x": x, "y": x, "out": np.zeros(n, np.float32)}
    loss, g = value_and_grad_fn(p, "out", ["x"], backend="cpu", dim=n)(dict(args))
    loss2, g2 = value_and_grad_fn(p, "out", ["x"], backend="cpu", grid=-(-n // 256))(dict(args))
    assert loss == loss2
    np.testing.assert_array_equal(g["x"], g2["x"])
    with pytest.raises(DispatchError, match="only one"):
        value_and_grad_fn(p, "out", ["x"], backend="cpu", dim=n, grid=2)
