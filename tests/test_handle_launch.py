"""The value-and-grad handle's own launch (vyre.autodiff.handle) and the pieces it stands on
(FastLaunch.clone / set_pointer, ScalarPool), on the CPU: a ctypes callback stands in for the
driver (tests/test_fast_launch.py) and a fake array kind hands out device scalars."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.test_fast_launch import FakeDeviceArray, Recorder, _abi
from vyre.autodiff.handle import _Setup
from vyre.driver import dispatch as dispatch_mod
from vyre.driver.arrays import ArrayKind, ScalarPool
from vyre.driver.fast_launch import CAPTURE, FastLaunch, build_fast_launch
from vyre.examples import fused_chain


class FakeKind(ArrayKind):
    """Device scalars are (chunk, k) tuples at fake addresses; ``total`` names what it summed."""

    name = "fake"
    device = True
    pooled_scalars = True

    def __init__(self) -> None:
        self.chunks: list[int] = []

    def scalar_chunk(self, n: int) -> tuple[list[Any], int]:
        base = 0x100000 * (len(self.chunks) + 1)
        self.chunks.append(base)
        return [("scalar", base, k) for k in range(n)], base

    def total(self, a: Any) -> Any:
        return ("total", a)


def _launch(extended: bool, rec: Recorder, arrays: dict[str, FakeDeviceArray]) -> FastLaunch:
    fast = build_fast_launch(rec.launcher, 1, arrays, list(arrays.values()), (), (4, 1, 1), (256, 1, 1), (4, 1, 1),
                             None, None, tuple(arrays), 0, tuple(arrays))
    assert fast is not None
    return fast


def _arrays() -> dict[str, FakeDeviceArray]:
    return {"x": FakeDeviceArray(0x1000, 1024), "grad_x": FakeDeviceArray(0x2000, 1024),
            "loss_out": FakeDeviceArray(0x3000, 1, np.float64)}


@pytest.mark.parametrize("extended", [True, False], ids=["cuLaunchKernelEx", "cuLaunchKernel"])
def test_a_clone_has_its_own_arguments_and_repoints_one_array(extended: bool) -> None:
    arrays = _arrays()
    rec = Recorder(extended, 21)
    fast = _launch(extended, rec, arrays)
    mine = fast.clone()
    mine.set_pointer(2, 0xABC000)
    assert mine.run() and fast.run()
    moved = _abi(list(arrays.values()))
    moved[7 * 2 + 4] = 0xABC000
    assert rec.calls[0]["params"] == moved
    assert rec.calls[1]["params"] == _abi(list(arrays.values()))  # the kernel's own launch is untouched
    assert {k: v for k, v in rec.calls[0].items() if k != "params"} == \
        {k: v for k, v in rec.calls[1].items() if k != "params"}
    assert mine.matches(arrays, (4, 1, 1), None) and mine.slots == fast.slots and mine.slots is not fast.slots


@given(size=st.integers(1, 5), takes=st.integers(1, 40))
def test_the_pool_never_hands_out_a_scalar_twice(size: int, takes: int) -> None:
    kind = FakeKind()
    pool = ScalarPool(kind, size)
    got = [pool.take() for _ in range(takes)]
    assert len({ptr for _, ptr in got}) == takes
    for view, ptr in got:  # each scalar is its chunk's element at 8 bytes a step
        _, base, k = view
        assert ptr == base + 8 * k and 0 <= k < size
    assert len(kind.chunks) == -(-takes // size)


def _setup(fast: FastLaunch | None, fills: list[str], pooled: bool) -> _Setup:
    kind = FakeKind()

    def fill(name: str) -> Any:
        return lambda: fills.append(name)

    zero = (fill("grad_v"), fill("loss_out"))
    loss_of = object()
    return _Setup((), {}, zero, {"x": "gx"}, loss_of, kind, (4, 1, 1), fused_chain(), 0x3000, fast=fast,
                  pool=ScalarPool(kind, 2) if pooled else None, loss_slot=2, zero_pooled=zero[:1])


@pytest.mark.parametrize("extended", [True, False], ids=["cuLaunchKernelEx", "cuLaunchKernel"])
def test_each_call_adds_the_loss_into_a_new_pooled_scalar_and_a_capture_into_the_fixed_partials(
        extended: bool) -> None:
    arrays = _arrays()
    rec = Recorder(extended, 21)
    fast = _launch(extended, rec, arrays).clone()
    fills: list[str] = []
    s = _setup(fast, fills, pooled=True)
    losses = [s.launch(fast) for _ in range(3)]
    assert [loss for loss, _ in losses] == [("scalar", 0x100000, 0), ("scalar", 0x100000, 1), ("scalar", 0x200000, 0)]
    assert [c["params"][7 * 2 + 4] for c in rec.calls] == [0x100000, 0x100008, 0x200000]
    assert fills == ["grad_v"] * 3  # the pooled scalar is zero already: no fill for the loss
    assert losses[0][1] == {"x": "gx"} and losses[0][1] is not losses[1][1]
    fills.clear()
    if extended:  # a capture replays fixed pointers: the fixed partials, zero-filled in the graph
        CAPTURE.stream = 0x7000
        try:
            loss, _ = s.launch(fast)
        finally:
            CAPTURE.stream = None
        assert loss is s.loss_of and fills == ["grad_v", "loss_out"]
        assert rec.calls[-1]["params"][7 * 2 + 4] == 0x3000 and rec.calls[-1]["stream"] == 0x7000


def test_without_a_pool_every_fill_runs_and_the_kind_sums_the_partials() -> None:
    rec = Recorder(True, 21)
    fast = _launch(True, rec, _arrays()).clone()
    fills: list[str] = []
    s = _setup(fast, fills, pooled=False)
    loss, _ = s.launch(fast)
    assert loss == ("total", s.loss_of) and fills == ["grad_v", "loss_out"]
    assert rec.calls[-1]["params"] == _abi(list(_arrays().values()))


def test_a_launch_that_cannot_run_says_so_and_returns_nothing() -> None:
    rec = Recorder(True, 21, status=201)  # no context on this thread
    fast = _launch(True, rec, _arrays()).clone()
    assert _setup(fast, [], pooled=True).launch(fast) is None


def test_the_handle_adopts_the_kernels_launch_once_it_stayed_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    arrays = _arrays()
    rec = Recorder(True, 21)
    fast = _launch(True, rec, arrays)
    kernel = SimpleNamespace(backend="cuda", _fast=fast, launch=None)
    monkeypatch.setattr(dispatch_mod, "dispatched_kernel", lambda program, backend: kernel)
    s = _setup(None, [], pooled=True)
    s.loss_slot = -1
    s.adopt(s.program, "cuda", arrays, "out")
    assert s.fast is None  # seen once: the launch policy may still change it
    s.adopt(s.program, "cuda", arrays, "out")
    assert s.fast is not None and s.fast is not fast and s.loss_slot == 2
    # a launch the tuner replaced since, or other arrays, is never adopted
    for k, args in ((SimpleNamespace(backend="cuda", _fast=fast, launch="other"), arrays),
                    (kernel, {**arrays, "x": FakeDeviceArray(0x1000, 1024)})):
        monkeypatch.setattr(dispatch_mod, "dispatched_kernel", lambda program, backend, k=k: k)
        t = _setup(None, [], pooled=True)
        for _ in range(3):
            t.adopt(t.program, "cuda", args, "out")
        assert t.fast is None


def test_a_torch_tensor_whose_storage_was_swapped_sets_the_handle_up_again() -> None:
    torch = pytest.importorskip("torch")
    from vyre.autodiff import value_and_grad, value_and_grad_fn

    prog = fused_chain()
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.standard_normal(64).astype(np.float32))
    y = torch.from_numpy(rng.standard_normal(64).astype(np.float32))
    vg = value_and_grad_fn(prog, "out", ["x", "y"], backend="cpu")
    args = {"x": x, "y": y, "out": torch.zeros(64)}
    vg(args)
    first = vg._setup
    vg(args)
    assert vg._setup is first  # the same tensors: the same buffers
    other = torch.from_numpy(rng.standard_normal(64).astype(np.float32))
    x.set_(other)  # the same tensor object, another storage
    loss, g = vg(args)
    assert vg._setup is not first
    want_loss, want = value_and_grad(prog, {"x": other.numpy(), "y": y.numpy(), "out": np.zeros(64, np.float32)},
                                     "out", ["x", "y"], backend="cpu")
    assert loss == pytest.approx(want_loss, rel=1e-6)
    np.testing.assert_allclose(g["x"].numpy(), want["x"], rtol=1e-5)
    grads = vg._setup.grads
    grads["x"].set_(torch.zeros(3))  # a returned gradient resized in place: the handle must not write past it
    vg(args)
    assert vg._setup.grads["x"] is not grads["x"] and grads["x"].numel() == 3
