"""Which GPU a CUDA dispatch runs on (vyre.driver.devices), checked without a GPU through objects
that export ``__cuda_array_interface__`` and say their device the way CuPy and PyTorch do."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vyre.driver import cuda_launch
from vyre.driver.devices import array_device, inputs_device
from vyre.errors import DispatchError


class FakeDeviceArray:
    """A device array as CuPy (``device.id``) or PyTorch (``device.index``) presents it."""

    def __init__(self, ordinal: int, style: str = "cupy") -> None:
        self.__cuda_array_interface__ = {"data": (0x1000 * (ordinal + 1), False), "shape": (4,),
                                         "typestr": "<f4", "version": 3}
        self.device = SimpleNamespace(id=ordinal) if style == "cupy" else SimpleNamespace(index=ordinal)


def test_array_device_reads_cupy_and_torch_style_devices() -> None:
    assert array_device(FakeDeviceArray(3, "cupy")) == 3
    assert array_device(FakeDeviceArray(2, "torch")) == 2
    assert array_device(np.zeros(3)) is None
    assert array_device([1, 2]) is None


@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.booleans())
def test_one_device_or_a_clear_error(ordinals: list[int], with_host: bool) -> None:
    inputs: dict[str, Any] = {f"b{k}": FakeDeviceArray(d, "cupy" if k % 2 else "torch")
                              for k, d in enumerate(ordinals)}
    if with_host:
        inputs["h"] = np.zeros(4, np.float32)
    if len(set(ordinals)) == 1:
        assert inputs_device(inputs) == ordinals[0]
        assert inputs_device(inputs, ordinals[0]) == ordinals[0]
        with pytest.raises(DispatchError, match="Fix: pass device="):
            inputs_device(inputs, ordinals[0] + 1)
    else:
        with pytest.raises(DispatchError, match="different GPUs") as e:
            inputs_device(inputs)
        assert "Fix:" in str(e.value)


def test_host_arrays_follow_device_or_stay_unplaced() -> None:
    host = {"x": np.zeros(4, np.float32)}
    assert inputs_device(host) is None
    assert inputs_device(host, 1) == 1
    for bad in (-1, 1.5, "0"):
        with pytest.raises(DispatchError, match="device must be a CUDA device ordinal"):
            inputs_device(host, bad)  # type: ignore[arg-type]


def test_a_dispatch_to_another_gpu_runs_in_its_context_unpinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays on GPU 1 while GPU 0 is current: the checked path runs inside GPU 1's context and
    keeps no cached launch (that path serves the current device only)."""
    calls: list[tuple[str, Any]] = []

    @contextmanager
    def fake_on_device(d: int):
        calls.append(("enter", d))
        yield
        calls.append(("exit", d))

    monkeypatch.setattr(cuda_launch, "current_device", lambda: 0)
    monkeypatch.setattr(cuda_launch, "on_device", fake_on_device)
    monkeypatch.setattr(cuda_launch, "_launch_checked",
                        lambda k, i, g, r, pin, **kw: calls.append(("launch", pin)) or {})
    kernel = SimpleNamespace(_fast=None, launch=None, backend="cuda")
    cuda_launch.launch_cuda(kernel, {"x": FakeDeviceArray(1)}, None, None)  # type: ignore[arg-type]
    assert calls == [("enter", 1), ("launch", False), ("exit", 1)]
    calls.clear()
    cuda_launch.launch_cuda(kernel, {"x": FakeDeviceArray(0)}, None, None)  # type: ignore[arg-type]
    assert calls == [("launch", True)]
    calls.clear()
    cuda_launch.launch_cuda(kernel, {"x": np.zeros(4, np.float32)}, None, None, 1)  # type: ignore[arg-type]
    assert calls == [("enter", 1), ("launch", False), ("exit", 1)]
    with pytest.raises(DispatchError, match="different GPUs"):
        cuda_launch.launch_cuda(kernel, {"x": FakeDeviceArray(0), "y": FakeDeviceArray(1)},  # type: ignore[arg-type]
                                None, None)


def test_device_on_the_cpu_backend_is_an_error() -> None:
    import vyre
    from vyre.examples import saxpy

    x = np.ones(8, np.float32)
    with pytest.raises(DispatchError, match="device=0 names a GPU") as e:
        vyre.dispatch(saxpy(), {"a": x[:1], "x": x, "y": x, "out": np.zeros(8, np.float32)}, backend="cpu",
                      device=0)
    assert "Fix:" in str(e.value)

