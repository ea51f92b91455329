"""The cached CUDA launch (vyre.driver.fast_launch), on the CPU: a ctypes callback stands in for
the driver and decodes exactly what ``cuLaunchKernelEx`` / ``cuLaunchKernel`` would receive."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import vyre
from vyre.driver import dispatch as dispatch_mod
from vyre.driver.fast_launch import FastLaunch, LaunchConfig, Launcher, build_fast_launch, make_fast_launch
from vyre.errors import DispatchError
from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var


class FakeDeviceArray:
    """Just enough of a CAI device array for packing: a pointer, a length, a dtype."""

    def __init__(self, ptr: int, n: int, dtype: Any = np.float32) -> None:
        self.shape = (n,)
        self.dtype = np.dtype(dtype)
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (n,), "typestr": self.dtype.str,
                                         "version": 3}


def _params(ptr_array: int, count: int) -> list[int]:
    slots = (ctypes.c_void_p * count).from_address(ptr_array)
    return [ctypes.c_int64.from_address(int(p)).value for p in slots]


class Recorder:
    """A ctypes function pointer that records each launch, decoded, and returns ``status``."""

    def __init__(self, extended: bool, n_params: int, status: int = 0) -> None:
        self.calls: list[dict[str, Any]] = []
        self.status = status
        if extended:
            proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_void_p)

            def ex(cfg: int, func: int, params: int, extra: int | None) -> int:
                c = LaunchConfig.from_address(cfg)
                self.calls.append({
                    "func": func, "grid": (c.grid_x, c.grid_y, c.grid_z),
                    "block": (c.block_x, c.block_y, c.block_z), "shmem": c.shared_mem_bytes,
                    "stream": c.stream, "attrs": c.num_attrs, "extra": extra,
                    "params": _params(params, n_params)})
                return self.status

            self.fn = proto(ex)
        else:
            u = ctypes.c_uint
            proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_void_p)

            def plain(func: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shmem: int,
                      stream: int | None, params: int, extra: int | None) -> int:
                self.calls.append({
                    "func": func, "grid": (gx, gy, gz), "block": (bx, by, bz), "shmem": shmem,
                    "stream": stream, "attrs": 0, "extra": extra, "params": _params(params, n_params)})
                return self.status

            self.fn = proto(plain)
        self.launcher = Launcher(self.fn, extended)


def _abi(arrays: list[FakeDeviceArray]) -> list[int]:
    out: list[int] = []
    for a in arrays:
        n, item = a.shape[0], a.dtype.itemsize
        out += [0, 0, n, item, a.__cuda_array_interface__["data"][0], n, item]
    return out


@pytest.mark.parametrize("extended", [True, False], ids=["cuLaunchKernelEx", "cuLaunchKernel"])
@given(sizes=st.lists(st.tuples(st.integers(1, 2**31), st.sampled_from([np.float32, np.float64, np.uint32])),
                      min_size=1, max_size=6),
       scalars=st.lists(st.integers(0, 2**40), max_size=2),
       grid=st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 65535), st.integers(1, 65535)),
       block=st.tuples(st.integers(1, 1024), st.integers(1, 64), st.integers(1, 64)))
def test_the_driver_receives_numbas_abi(extended: bool, sizes: list[tuple[int, Any]], scalars: list[int],
                                        grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
    arrays = [FakeDeviceArray(0x7F0000000000 + 4096 * k, n, dt) for k, (n, dt) in enumerate(sizes)]
    inputs = {f"b{k}": a for k, a in enumerate(arrays)}
    expected = _abi(arrays) + scalars
    rec = Recorder(extended, len(expected))
    written = tuple(inputs)[::2]  # one name or several: both ways of building the result
    fast = build_fast_launch(rec.launcher, 0xDEADBEEF00, inputs, list(arrays), tuple(scalars), grid, block,
                             None, None, None, written)
    assert fast is not None
    first, second = fast(inputs), fast(inputs)
    assert first == second == {n: inputs[n] for n in written}
    assert all(first[n] is inputs[n] for n in written)
    assert first is not second  # a fresh dict each call: a caller may edit what it got back
    assert len(rec.calls) == 2
    call = rec.calls[0]
    assert call == rec.calls[1]
    assert call["func"] == 0xDEADBEEF00
    assert call["grid"] == grid and call["block"] == block
    assert call["shmem"] == 0 and call["stream"] is None and call["extra"] is None and call["attrs"] == 0
    assert call["params"] == expected


def _fast(inputs: dict[str, Any], rec: Recorder, grid: Any = None, return_device: bool | None = None) -> FastLaunch:
    arrays = list(inputs.values())
    fast = build_fast_launch(rec.launcher, 1, inputs, arrays, (), (1, 1, 1), (32, 1, 1), grid, None,
                             return_device, ())
    assert fast is not None
    return fast


def test_only_the_very_same_arrays_match() -> None:
    a, b = FakeDeviceArray(4096, 8), FakeDeviceArray(8192, 8)
    fast = _fast({"a": a, "b": b}, Recorder(True, 14))
    assert fast.matches({"a": a, "b": b}, None, None)
    assert fast.matches({"b": b, "a": a}, None, None)  # order of the mapping is irrelevant
    twin = FakeDeviceArray(4096, 8)  # same pointer and length, but another object
    assert not fast.matches({"a": twin, "b": b}, None, None)
    assert not fast.matches({"a": b, "b": a}, None, None)
    assert not fast.matches({"a": a}, None, None)
    assert not fast.matches({"a": a, "b": b, "c": a}, None, None)
    assert not fast.matches({"a": a, "c": b}, None, None)
    assert not fast.matches({"a": a, "b": b}, (4,), None)
    assert not fast.matches({"a": a, "b": b}, None, True)
    gridded = _fast({"a": a}, Recorder(True, 7), grid=(4,), return_device=True)
    assert gridded.matches({"a": a}, (4,), True)
    assert not gridded.matches({"a": a}, None, True)


def test_the_arrays_are_held_weakly() -> None:
    import gc
    import weakref

    a, b = FakeDeviceArray(4096, 8), FakeDeviceArray(8192, 8)
    fast = _fast({"a": a, "b": b}, Recorder(True, 14))
    gone = weakref.ref(a)
    del a
    gc.collect()
    assert gone() is None  # the cached launch did not keep the caller's array alive
    # ... and a dead array never matches, not even a None passed in its place
    assert not fast.matches({"a": None, "b": b}, None, None)


def test_an_input_without_weak_references_is_not_pinned() -> None:
    class Slotted:
        __slots__ = ("__cuda_array_interface__", "dtype", "shape")

    s = Slotted()
    s.shape, s.dtype = (8,), np.dtype(np.float32)
    s.__cuda_array_interface__ = {"data": (4096, False)}
    fast = build_fast_launch(Recorder(True, 7).launcher, 1, {"a": s}, [s], (), (1, 1, 1), (32, 1, 1), None,
                             None, None, ("a",))
    assert fast is None


def test_a_driver_error_is_a_dispatch_error() -> None:
    a = FakeDeviceArray(4096, 8)
    rec = Recorder(True, 7, status=700)  # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(DispatchError, match=r"CUDA error 700.*Fix:"):
        _fast({"a": a}, rec)({"a": a})


@pytest.mark.parametrize("stream", [12345, 0x7F00DEADBEEF])
def test_arrays_of_a_user_stream_are_never_pinned(stream: int) -> None:
    a = FakeDeviceArray(4096, 8)
    a.__cuda_array_interface__["stream"] = stream
    assert make_fast_launch(None, {"a": a}, [], (), (1, 1, 1), (1, 1, 1), None, None, ()) is None  # type: ignore[arg-type]


class TorchLike(FakeDeviceArray):
    """A stand-in for a PyTorch CUDA tensor: its storage can be swapped under the same object."""

    class _Dev:
        index = 0

    device = _Dev()
    requires_grad = False

    def data_ptr(self) -> int:
        return int(self.__cuda_array_interface__["data"][0])

    def numel(self) -> int:
        return int(self.shape[0])

    def is_contiguous(self) -> bool:
        return True


TorchLike.__module__ = "torch.fake"


def test_host_inputs_are_never_pinned() -> None:
    host = {"a": np.zeros(8, np.float32)}
    assert make_fast_launch(None, host, [], (), (1, 1, 1), (1, 1, 1), None, None, ()) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("extended", [True, False], ids=["cuLaunchKernelEx", "cuLaunchKernel"])
def test_torch_tensors_are_pinned_with_their_storage_checked_on_torchs_stream(
        extended: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from vyre.driver import fast_launch

    stream = [0]
    monkeypatch.setattr(fast_launch, "torch_stream", lambda index: stream[0])
    t, u = TorchLike(4096, 8), FakeDeviceArray(8192, 8)
    rec = Recorder(extended, 14)
    fast = _fast({"t": t, "u": u}, rec)
    assert fast.matches({"t": t, "u": u}, None, None)
    assert fast({"t": t, "u": u}) is not None
    stream[0] = 0x5000  # torch.cuda.stream(s): the next launch goes to s (or back to the checked path)
    done = fast({"t": t, "u": u})
    if extended:
        assert done is not None and rec.calls[-1]["stream"] == 0x5000
    else:
        assert done is None and len(rec.calls) == 1
    t.__cuda_array_interface__ = dict(t.__cuda_array_interface__, data=(12288, False))  # t.set_(other)
    assert not fast.matches({"t": t, "u": u}, None, None)
    t.__cuda_array_interface__ = dict(t.__cuda_array_interface__, data=(4096, False))
    t.shape = (4,)  # t.resize_(4)
    assert not fast.matches({"t": t, "u": u}, None, None)


def test_other_torch_tensors_of_the_same_layout_are_rebound_by_pointer(monkeypatch: pytest.MonkeyPatch) -> None:
    from vyre.driver import fast_launch

    monkeypatch.setattr(fast_launch, "torch_stream", lambda index: 0)
    t, u, o = TorchLike(4096, 8), FakeDeviceArray(8192, 8), TorchLike(12288, 8)
    rec = Recorder(True, 21)
    inputs = {"t": t, "u": u, "o": o}
    fast = build_fast_launch(rec.launcher, 1, inputs, [t, u, o], (), (1, 1, 1), (32, 1, 1), None, None, None,
                             ("o",), 0, ("t", "u", "o"))
    assert fast is not None
    t2, o2 = TorchLike(65536, 8), TorchLike(131072, 8)  # a new detached view, a new output
    new = {"t": t2, "u": u, "o": o2}
    assert not fast.matches(new, None, None) and fast.rebind(new, None, None)
    assert fast.matches(new, None, None)
    assert fast(new) == {"o": o2}
    assert rec.calls[-1]["params"] == _abi([t2, u, o2])
    assert not fast.rebind({"t": TorchLike(4096, 9), "u": u, "o": o2}, None, None)  # another length
    assert not fast.rebind({"t": t2, "u": FakeDeviceArray(8192, 8), "o": o2}, None, None)  # u is not torch
    assert not fast.rebind({"t": t2, "u": u, "o": TorchLike(65536 + 8, 8)}, None, None)  # o overlaps t
    wrong = TorchLike(200000, 8)
    wrong.dtype = np.dtype(np.float64)
    assert not fast.rebind({"t": wrong, "u": u, "o": o2}, None, None)
    assert rec.calls[-1]["params"] == _abi([t2, u, o2])  # refusals changed nothing


def test_a_graph_capture_stream_takes_every_cached_launch() -> None:
    from vyre.driver.fast_launch import CAPTURE

    a = FakeDeviceArray(4096, 8)
    rec = Recorder(True, 7)
    fast = _fast({"a": a}, rec)
    CAPTURE.stream = 0x7000
    try:
        assert fast({"a": a}) is not None
    finally:
        CAPTURE.stream = None
    assert fast({"a": a}) is not None
    assert [c["stream"] for c in rec.calls] == [0x7000, None]


def test_dispatch_takes_the_cached_launch_for_the_same_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    a_, b_, o_ = read("a", 0, F32), read("b", 1, F32), output("o", 2, F32)
    i = var("i")
    prog = Program.wrapped([a_, b_, o_], 64, [let("i", gid()), if_(i.lt(buflen(o_)),
                                                                    [store(o_, i, a_[i] + b_[i])])])
    kernel = vyre.compile(prog, backend="cpu")
    arrays = {"a": FakeDeviceArray(4096, 16), "b": FakeDeviceArray(8192, 16), "o": FakeDeviceArray(12288, 16)}
    rec = Recorder(True, 23)
    kernel._fast = build_fast_launch(rec.launcher, 7, arrays, list(arrays.values()), (16, 1), (1, 1, 1),
                                     (64, 1, 1), None, kernel.launch, None, ("o",))
    monkeypatch.setitem(dispatch_mod._by_identity, (id(prog), "cuda"), (prog, kernel))
    assert vyre.dispatch(prog, arrays, backend="cuda") == {"o": arrays["o"]}
    assert vyre.dispatch(prog, dict(arrays), backend="cuda")["o"] is arrays["o"]
    assert len(rec.calls) == 2 and rec.calls[0]["params"][-2:] == [16, 1]
    # the tuner changed the kernel's launch since: the packed launch no longer stands
    kernel.launch = vyre.driver.dispatch.Launch(128, 2)
    with pytest.raises(Exception):  # noqa: B017 - the slow path cannot run fake arrays on the CPU
        vyre.dispatch(prog, arrays, backend="cuda")
    assert len(rec.calls) == 2


def test_launch_config_has_the_layout_of_cuda_h() -> None:
    # typedef struct CUlaunchConfig_st { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
    #   blockDimZ, sharedMemBytes; CUstream hStream; CUlaunchAttribute *attrs; unsigned numAttrs; }
    offsets = {name: getattr(LaunchConfig, name).offset for name, _ in LaunchConfig._fields_}
    assert offsets == {"grid_x": 0, "grid_y": 4, "grid_z": 8, "block_x": 12, "block_y": 16, "block_z": 20,
                       "shared_mem_bytes": 24, "stream": 32, "attrs": 40, "num_attrs": 48}
    assert ctypes.sizeof(LaunchConfig) == 56


def test_a_thread_without_a_context_takes_the_checked_path() -> None:
    # CUDA_ERROR_INVALID_CONTEXT: the cached launch ran on a thread where numba never made its
    # context current; nothing ran, and the caller falls back to numba's launch
    a = FakeDeviceArray(4096, 8)
    rec = Recorder(True, 7, status=201)
    assert _fast({"a": a}, rec)({"a": a}) is None
    assert len(rec.calls) == 1


def test_dispatch_falls_back_when_the_cached_launch_has_no_context(monkeypatch: pytest.MonkeyPatch) -> None:
    a_, o_ = read("a", 0, F32), output("o", 1, F32)
    i = var("i")
    prog = Program.wrapped([a_, o_], 64, [let("i", gid()), if_(i.lt(buflen(o_)), [store(o_, i, a_[i])])])
    kernel = vyre.compile(prog, backend="cpu")
    arrays = {"a": FakeDeviceArray(4096, 16), "o": FakeDeviceArray(8192, 16)}
    rec = Recorder(True, 16, status=201)
    kernel._fast = build_fast_launch(rec.launcher, 7, arrays, list(arrays.values()), (16, 1), (1, 1, 1),
                                     (64, 1, 1), None, kernel.launch, None, ("o",))
    monkeypatch.setitem(dispatch_mod._by_identity, (id(prog), "cuda"), (prog, kernel))
    checked: list[Any] = []
    monkeypatch.setattr(dispatch_mod.Kernel, "__call__",
                        lambda self, inputs, **kw: checked.append(inputs) or {"o": "slow"})
    assert vyre.dispatch(prog, arrays, backend="cuda") == {"o": "slow"}
    assert len(rec.calls) == 1 and checked == [arrays]


def test_inside_a_graph_capture_the_checked_path_is_refused_with_a_fix() -> None:
    from vyre.driver.cuda_launch import launch_cuda
    from vyre.driver.fast_launch import CAPTURE

    a_, o_ = read("a", 0, F32), output("o", 1, F32)
    prog = Program.wrapped([a_, o_], 64, [let("i", gid()), store(o_, var("i"), a_[var("i")])])
    kernel = vyre.compile(prog, backend="cpu")
    CAPTURE.stream = 0x7000
    try:
        with pytest.raises(DispatchError, match="run the step once"):
            launch_cuda(kernel, {"a": FakeDeviceArray(4096, 8), "o": FakeDeviceArray(8192, 8)}, None, None)
    finally:
        CAPTURE.stream = None


def test_a_capture_redirects_only_its_own_threads_launches() -> None:
    import threading

    from vyre.driver.fast_launch import CAPTURE

    seen: list[int | None] = []
    CAPTURE.stream = 0x7000
    try:
        t = threading.Thread(target=lambda: seen.append(CAPTURE.stream))
        t.start()
        t.join()
    finally:
        CAPTURE.stream = None
    assert seen == [None]
