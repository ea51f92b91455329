"""Backends as objects (vyre/driver/backend.py): every name has one, availability and its reasons
come from it, and kernels ask it for their launch and their run."""

from __future__ import annotations

import numpy as np
import pytest

import vyre
from vyre.driver.backend import CpuBackend, CudaBackend, CudaSimBackend, InterpBackend, backend
from vyre.driver.backends import BACKENDS, check_backend, cuda_available, simulator_enabled
from vyre.errors import DispatchError
from vyre.examples import fused_chain


def test_every_backend_name_has_an_object() -> None:
    kinds = {"cpu": CpuBackend, "cuda": CudaBackend, "cudasim": CudaSimBackend, "interp": InterpBackend}
    for name in BACKENDS:
        b = backend(name)
        assert isinstance(b, kinds[name]) and b.name == name
        assert b.timer == ("cuda-events" if name == "cuda" else "wall")
        assert b.memory == ("device" if name in ("cuda", "cudasim") else "host")
    with pytest.raises(DispatchError, match="unknown backend 'metal'"):
        backend("metal")


def test_availability_and_its_reason_come_from_the_object() -> None:
    assert backend("cpu").unavailable() is None and backend("interp").unavailable() is None
    assert (backend("cuda").unavailable() is None) == cuda_available()
    assert (backend("cudasim").unavailable() is None) == simulator_enabled()
    for name in ("cuda", "cudasim"):
        why = backend(name).unavailable()
        if why is None:
            assert check_backend(name) == name
        else:
            assert "Fix:" in why
            with pytest.raises(DispatchError) as e:
                check_backend(name)
            assert str(e.value) == why


def test_key_parts_and_default_launches() -> None:
    assert backend("cpu").target_parts() == [] and backend("cudasim").target_parts() == []
    k = vyre.compile(fused_chain(), "cpu")
    assert k.impl is backend("cpu")
    assert k.default_launch(1 << 22) == vyre.Launch(1024, 64)  # a few chunks per core
    assert k.default_launch(100) == vyre.Launch(1024, 1)
    ki = vyre.compile(fused_chain(), "interp")
    assert ki.impl is backend("interp") and ki.default_launch(100).wg == fused_chain().workgroup_size[0]


def test_a_kernel_runs_through_its_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    k = vyre.compile(fused_chain(), "cpu")
    x = np.linspace(0, 1, 64, dtype=np.float32)
    want = k({"x": x, "y": x, "out": np.zeros(64, np.float32)})["out"]
    calls: list[str] = []
    real = CpuBackend.run

    def spy(self: CpuBackend, *a: object, **kw: object) -> object:
        calls.append(self.name)
        return real(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(CpuBackend, "run", spy)
    got = k({"x": x, "y": x, "out": np.zeros(64, np.float32)})["out"]
    assert calls == ["cpu"] and np.array_equal(got, want)
    with pytest.raises(DispatchError, match="device=0 names a GPU"):
        k({"x": x, "y": x, "out": np.zeros(64, np.float32)}, device=0)
