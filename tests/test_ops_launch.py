"""vyre.ops' direct CUDA launch without a GPU: the packed kernel arguments (numba's ABI per array:
meminfo, parent, nitems, itemsize, data, shape, stride; a flat kernel's two scalars) are built once
per thread and refilled on every launch, so each launch must carry its own arrays, grid and stream.
A ctypes callback stands in for ``cuLaunchKernelEx`` and decodes what it is handed."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import pytest

from vyre.driver import fast_launch
from vyre.driver.fast_launch import LaunchConfig, Launcher
from vyre.ir import F32, F64, buflen, gid, if_, let, load, output, read, store, var
from vyre.ir.program import Program
from vyre.ops import _launch as LA
from vyre.ops import _runtime as RT

PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class Dev:
    """A device array as far as the launch looks: a length and a data pointer."""

    def __init__(self, ptr: int, n: int) -> None:
        self.shape = (n,)
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (n,), "typestr": "<f4", "version": 3}


def _program() -> Program:
    i = var("i")
    return Program.wrapped([read("x", 0, F32), output("out", 1, F64)], 256, [
        let("i", gid()), if_(i.lt(buflen("out")), [store("out", i, load("x", i))])])


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int | None, list[int]]]:
    seen: list[tuple[int, int, int | None, list[int]]] = []
    count = 7 * 2 + 2

    @PROTO
    def fake(cfg: int, func: int, params: int, extra: int) -> int:
        c = LaunchConfig.from_address(cfg)
        slots = (ctypes.c_void_p * count).from_address(params)
        seen.append((c.grid_x, c.block_x, c.stream,
                     [ctypes.c_int64.from_address(int(slots[k])).value for k in range(count)]))
        return 0

    monkeypatch.setattr(fast_launch, "_launcher", Launcher(fake, True))
    monkeypatch.setattr(fast_launch, "launch_stream", lambda arrays: 0)
    return seen


def test_each_launch_carries_its_own_arrays_grid_and_stream(launches: list,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    lean = LA._Lean(ctypes.c_void_p(1), (("x", 4), ("out", 8)), (256, 1, 1), True)
    LA._direct(lean, _program(), {"x": Dev(1000, 10), "out": Dev(2000, 3)}, 5)
    monkeypatch.setattr(fast_launch, "launch_stream", lambda arrays: 7)  # e.g. PyTorch's current stream
    LA._direct(lean, _program(), {"x": Dev(3000, 7), "out": Dev(4000, 1)}, 2)
    assert launches == [
        (5, 256, None, [0, 0, 10, 4, 1000, 10, 4, 0, 0, 3, 8, 2000, 3, 8, 5 * 256, 1]),
        (2, 256, 7, [0, 0, 7, 4, 3000, 7, 4, 0, 0, 1, 8, 4000, 1, 8, 2 * 256, 1]),
    ]


def test_threads_pack_into_their_own_slots(launches: list) -> None:
    lean = LA._Lean(ctypes.c_void_p(1), (("x", 4), ("out", 8)), (128, 1, 1), True)
    errors: list[BaseException] = []

    def work(base: int) -> None:
        try:
            for k in range(50):
                LA._direct(lean, _program(), {"x": Dev(base + k, k + 1), "out": Dev(base + 10_000 + k, 1)}, k + 1)
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=work, args=(b,)) for b in (1 << 20, 1 << 30)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert len(launches) == 100
    for grid, _, _, vals in launches:  # every launch is consistent with itself
        assert vals[2] == vals[5] == grid and vals[14] == grid * 128
        assert vals[11] - vals[4] == 10_000


def test_cuda_tensors_and_cupy_arrays_are_told_apart_without_their_interface() -> None:
    """PyTorch builds its ``__cuda_array_interface__`` dict on every access: the kind and the device
    come from the type and the array's own device attribute."""

    class Interface:
        @property
        def __cuda_array_interface__(self) -> Any:
            raise AssertionError("the interface dict was built")

    class Tensor(Interface):
        is_cuda = True
        device = type("device", (), {"index": 1})()

    class Ndarray(Interface):
        data = None
        device = type("Device", (), {"id": 2})()

    Tensor.__module__, Ndarray.__module__ = "torch", "cupy"
    assert RT._kind(Tensor()) is RT.Kind.TORCH and LA.device_of(Tensor()) == 1
    assert RT._kind(Ndarray()) is RT.Kind.CUPY and LA.device_of(Ndarray()) == 2


def test_a_plans_launch_packs_what_the_direct_launch_packs(launches: list) -> None:
    """DeviceLaunch (a device plan's pass: lengths packed once, pointers per call) hands the driver
    the slots _direct packs for the same arrays, each call its own pointers, grid and stream."""
    lean = LA._Lean(ctypes.c_void_p(1), (("x", 4), ("out", 8)), (256, 1, 1), True)
    LA._direct(lean, _program(), {"x": Dev(1000, 10), "out": Dev(2000, 3)}, 5)
    step = LA.DeviceLaunch(lean, {"x": 1, "out": 0}, {"x": 10, "out": 3}, 5)  # buffers: [out, x]
    step([2000, 1000], 0)
    step([2222, 1111], 9)
    assert launches[1] == launches[0]
    assert launches[2] == (5, 256, 9, [0, 0, 10, 4, 1111, 10, 4, 0, 0, 3, 8, 2222, 3, 8, 5 * 256, 1])
