"""vyre.driver.device_launch without a GPU: which calls take the direct launch, and what it packs.

CuPy and the driver are stand-ins here (a fake ``cupy`` module and a recording ``cuLaunchKernelEx``);
the real launch runs in bench/dask_bench.py's ``check`` on a GPU."""

from __future__ import annotations

import ctypes
import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest

import vyre
from vyre.driver import device_launch, fast_launch
from vyre.errors import DispatchError
from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, store, var


class _Arr:
    """Enough of a CuPy array: dtype, size, contiguity, device, pointer."""

    def __init__(self, n: int, ptr: int, device: int = 0, dtype=np.float32, contiguous: bool = True) -> None:
        self.dtype, self.size, self.itemsize = np.dtype(dtype), n, np.dtype(dtype).itemsize
        self.nbytes = n * self.itemsize
        self.flags = types.SimpleNamespace(c_contiguous=contiguous)
        self.device = types.SimpleNamespace(id=device)
        self.data = types.SimpleNamespace(ptr=ptr)


@dataclass
class _Launcher:
    calls: list
    err: int = 0
    extended: bool = True

    def fn(self, cfg, func, ptrs, extra) -> int:
        c = cfg._obj
        n = 7 * 3 + 2  # three buffers, then (invocations, invocations per thread)
        vals = [ctypes.cast(ptrs[k], ctypes.POINTER(ctypes.c_int64))[0] for k in range(n)]
        self.calls.append(((c.grid_x, c.grid_y, c.grid_z), (c.block_x, c.block_y, c.block_z), c.stream, func.value,
                           vals))
        return self.err


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> _Launcher:
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(ndarray=_Arr))
    launcher = _Launcher([])
    monkeypatch.setattr(fast_launch, "driver_launcher", lambda: launcher)
    monkeypatch.setattr(device_launch, "function_on", lambda kernel, device: 0xF00 + device)
    return launcher


def _kernel() -> vyre.Kernel:
    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    p = Program.wrapped([x, y, out], 64, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i])])])
    return vyre.compile(p, "cpu")


def _arrays(n: int, base: int, device: int = 0) -> dict[str, _Arr]:
    return {"x": _Arr(n, base, device), "y": _Arr(n, base + 8 * n, device), "out": _Arr(n, base + 16 * n, device)}


def test_a_layout_takes_the_direct_launch_once_the_checked_path_ran_it(fake: _Launcher) -> None:
    k, g = _kernel(), (4, 1, 1)
    assert not device_launch.launch(k, _arrays(256, 1 << 20), g, 0, 0)  # never checked: nothing runs
    assert fake.calls == []
    device_launch.remember(k, _arrays(256, 1 << 20), g)
    assert device_launch.launch(k, _arrays(256, 1 << 24, device=1), g, 1, 7)
    grid, block, stream, func, vals = fake.calls[-1]
    assert (func, stream) == (0xF01, 7)  # that device's function, the caller's stream
    for slot, name_ptr in enumerate((1 << 24, (1 << 24) + 8 * 256, (1 << 24) + 16 * 256)):
        assert vals[7 * slot:7 * slot + 7] == [0, 0, 256, 4, name_ptr, 256, 4]
    from vyre.driver.cuda_launch import launch_dims

    assert (grid, block, tuple(vals[21:])) == launch_dims(k, g, k.launch)


@pytest.mark.parametrize("change", ["length", "dtype", "strided", "device", "not cupy", "overlap", "grid", "missing"])
def test_anything_the_checks_did_not_see_goes_back_to_the_checked_path(fake: _Launcher, change: str) -> None:
    k, g = _kernel(), (4, 1, 1)
    device_launch.remember(k, _arrays(256, 1 << 20), g)
    a = _arrays(256, 1 << 26)
    if change == "length":
        a["y"] = _Arr(255, a["y"].data.ptr)
    elif change == "dtype":
        a["y"] = _Arr(256, a["y"].data.ptr, dtype=np.float64)
    elif change == "strided":
        a["x"] = _Arr(256, a["x"].data.ptr, contiguous=False)
    elif change == "device":
        a["y"] = _Arr(256, a["y"].data.ptr, device=1)
    elif change == "not cupy":
        a["x"] = np.zeros(256, np.float32)  # type: ignore[assignment]
    elif change == "overlap":  # the output written over half of an input
        a["out"] = _Arr(256, a["x"].data.ptr + 4 * 128)
    elif change == "grid":
        g = (5, 1, 1)
    else:
        del a["y"]
    assert not device_launch.launch(k, a, g, 0, 0)
    assert fake.calls == []


def test_a_refused_launch_is_a_dispatch_error(fake: _Launcher) -> None:
    k, g = _kernel(), (4, 1, 1)
    device_launch.remember(k, _arrays(256, 1 << 20), g)
    fake.err = 700
    with pytest.raises(DispatchError, match="CUDA error 700"):
        device_launch.launch(k, _arrays(256, 1 << 20), g, 0, 0)
