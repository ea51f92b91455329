"""Launching an op's passes on CUDA and the CPU without re-checking what the op built itself.

``vyre.dispatch`` checks every array on every call (names, dtypes, lengths, contiguity, overlap,
launch coverage) and numba re-derives every argument: tens to hundreds of microseconds of host
time per launch, more than a reduction of 2^26 elements takes on an H100. An op's arrays are
already known to be right: the op checked the caller's inputs (vyre.ops._runtime.prepare) and
allocated everything else flat, contiguous and of the program's element types. So the first
launch of each program goes through ``dispatch`` (which compiles it and checks everything once),
and later launches pack numba's kernel ABI for the new arrays (per array: meminfo, parent, nitems,
itemsize, data, shape, stride) and call ``cuLaunchKernelEx`` directly, on the stream ``dispatch``
would use (PyTorch's current stream for tensors, else the legacy default stream).

Where the driver entry point cannot be reached, every launch goes through ``dispatch``.

On the CPU likewise: the first call of a program over given lengths goes through ``dispatch``, and
later ones call the compiled entry it chose (serial or parallel) with the arrays (vyre's dispatch
costs 10-30 us of Python, a reduction of 2^16 elements about 5 us of work)."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..driver import fast_launch
from ..driver.backend import pool_lock, pool_usable
from ..driver.devices import array_device, current_ordinal, on_device
from ..driver.dispatch import dispatch
from ..driver.fast_launch import LaunchConfig
from ..errors import DispatchError
from ..ir import Program

__all__ = ["CpuCall", "DeviceLaunch", "cpu_call", "device_launch", "device_of", "launch"]


@dataclass(frozen=True)
class _Lean:
    func: ctypes.c_void_p
    order: tuple[tuple[str, int], ...]  # storage buffer name, element size, in kernel order
    block: tuple[int, int, int]
    flat: bool  # a flat kernel (vyre.codegen.flat) also takes (invocations, invocations per thread)
    #: per thread: the packed argument slots, the pointers to them and the launch config, built
    #: once and refilled per launch (the driver copies the arguments during the call)
    slots: threading.local = field(default_factory=threading.local, compare=False)


_lean: dict[tuple[int, int | None], tuple[Program, _Lean | None]] = {}
_lock = threading.Lock()


def _ptr(a: Any) -> int:
    mod = type(a).__module__
    if mod.startswith("cupy"):
        return int(a.data.ptr)
    if mod.startswith("torch"):
        return int(a.data_ptr())
    return int(a.__cuda_array_interface__["data"][0])


def device_of(a: Any) -> int | None:
    """``array_device`` without building a CuPy array's or tensor's interface dict (PyTorch's
    costs microseconds): their own device attribute says it."""
    mod = type(a).__module__
    if mod.startswith("torch"):
        return a.device.index  # type: ignore[no-any-return]
    if mod.startswith("cupy"):
        return int(a.device.id)
    return array_device(a)


def _build(program: Program, device: int | None) -> _Lean | None:
    """The direct launch of ``program`` on ``device`` (its function handle loaded there), after a
    checked dispatch compiled it; None where the driver cannot be reached."""
    from ..driver.device_launch import function_on
    from ..driver.dispatch import _kernel_for

    k = _kernel_for(program, "cuda")  # dispatch's own kernel: the one its launch just loaded
    where = current_ordinal() if device is None else device
    func = None if where is None else function_on(k, where)
    if func is None:
        return None
    order = tuple((b.name, b.element.size_bytes) for b in program.buffers if not b.is_workgroup)
    return _Lean(ctypes.c_void_p(func), order, program.workgroup_size, k.flat)


def launch(program: Program, arrays: Mapping[str, Any], grid: int, backend: str) -> None:
    """Run ``program`` over ``grid`` workgroups; every storage buffer must be in ``arrays`` (flat,
    contiguous, of its element type: the op's contract). The direct launch is per device (a
    function handle belongs to one GPU's context) and runs in the context of the arrays' GPU."""
    if backend == "cpu":
        _launch_cpu(program, arrays, grid)
        return
    if backend != "cuda":
        dispatch(program, arrays, backend=backend, grid=grid, return_device=backend == "cudasim")
        return
    device = device_of(next(iter(arrays.values())))
    hit = _lean.get((id(program), device))
    if hit is None or hit[0] is not program:
        dispatch(program, arrays, backend="cuda", grid=grid, return_device=True)
        with _lock:
            _lean[(id(program), device)] = (program, _build(program, device))
        return
    if device is not None and device != current_ordinal():
        with on_device(device):
            _direct(hit[1], program, arrays, grid)
        return
    _direct(hit[1], program, arrays, grid)


def _direct(lean: _Lean | None, program: Program, arrays: Mapping[str, Any], grid: int) -> None:
    if lean is None:
        dispatch(program, arrays, backend="cuda", grid=grid, return_device=True)
        return
    buf = getattr(lean.slots, "buf", None)
    if buf is None:
        count = 7 * len(lean.order) + (2 if lean.flat else 0)
        packed = (ctypes.c_int64 * count)()
        base = ctypes.addressof(packed)
        for k, (_, item) in enumerate(lean.order):
            packed[7 * k + 3] = packed[7 * k + 6] = item  # meminfo, parent stay 0
        ptrs = (ctypes.c_void_p * count)(*range(base, base + 8 * count, 8))
        buf = lean.slots.buf = (packed, ptrs, LaunchConfig(1, 1, 1, *lean.block, 0, None, None, 0))
    packed, ptrs, cfg = buf
    k = 0
    for name, _ in lean.order:  # per array: nitems, data, shape (numba's kernel ABI)
        a = arrays[name]
        packed[k + 2] = packed[k + 5] = int(a.shape[0])
        packed[k + 4] = _ptr(a)
        k += 7
    if lean.flat:
        # one invocation per thread, blocks of the program's workgroup size: the grid the op
        # computed covers its invocations exactly as a general kernel's would
        packed[k] = grid * lean.block[0]
        packed[k + 1] = 1
    cfg.grid_x = grid
    cfg.stream = fast_launch.launch_stream(arrays) or None
    err = fast_launch.driver_launcher().fn(ctypes.byref(cfg), lean.func, ptrs, None)
    if err:
        raise DispatchError(f"the CUDA driver refused an op's launch (CUDA error {err}). Fix: check the "
                            "device state (a previous kernel may have faulted)")


class DeviceLaunch:
    """One pass of a device plan (vyre.ops._plans.DevicePlan): the direct launch of a program
    loaded on one GPU over buffers whose lengths the plan fixes. The packed arguments hold the
    lengths from the start (per thread, as :func:`_direct`'s do); a call writes the buffers' data
    pointers, the stream, and launches: none of :func:`launch`'s lookups (the program's launch,
    the device, the stream per pass), which cost a plan call several microseconds per pass."""

    __slots__ = ("_count", "_func", "_grid", "_lean", "_lengths", "_picks", "_slots")

    def __init__(self, lean: _Lean, picks: Mapping[str, int], lengths: Mapping[str, int], grid: int) -> None:
        self._lean = lean
        self._func = lean.func
        self._grid = grid
        #: per storage buffer in kernel order: its index in the plan's buffers, its length
        self._picks = tuple(picks[name] for name, _ in lean.order)
        self._lengths = tuple(lengths[name] for name, _ in lean.order)
        self._count = 7 * len(lean.order) + (2 if lean.flat else 0)
        self._slots = threading.local()

    def _buffers(self) -> tuple[Any, Any, LaunchConfig]:
        packed = (ctypes.c_int64 * self._count)()
        base = ctypes.addressof(packed)
        for k, ((_, item), n) in enumerate(zip(self._lean.order, self._lengths, strict=True)):
            packed[7 * k + 2] = packed[7 * k + 5] = n  # nitems, shape; meminfo, parent stay 0
            packed[7 * k + 3] = packed[7 * k + 6] = item  # itemsize, stride
        if self._lean.flat:  # as _direct: one invocation per thread
            packed[self._count - 2] = self._grid * self._lean.block[0]
            packed[self._count - 1] = 1
        ptrs = (ctypes.c_void_p * self._count)(*range(base, base + 8 * self._count, 8))
        cfg = LaunchConfig(self._grid, 1, 1, *self._lean.block, 0, None, None, 0)
        self._slots.buf = (packed, ptrs, cfg)
        return packed, ptrs, cfg

    def __call__(self, pointers: list[int], stream: int) -> None:
        """Launch over the buffers whose data pointers are ``pointers`` (the plan's buffer order)
        on ``stream`` (0: the legacy default stream), in the current context (the plan's GPU)."""
        buf = getattr(self._slots, "buf", None)
        packed, ptrs, cfg = buf if buf is not None else self._buffers()
        k = 4
        for i in self._picks:
            packed[k] = pointers[i]
            k += 7
        cfg.stream = stream or None
        err = fast_launch.driver_launcher().fn(ctypes.byref(cfg), self._func, ptrs, None)
        if err:
            raise DispatchError(f"the CUDA driver refused an op's launch (CUDA error {err}). Fix: check the "
                                "device state (a previous kernel may have faulted)")


def device_launch(program: Program, device: int | None, picks: Mapping[str, int], lengths: Mapping[str, int],
                  grid: int) -> DeviceLaunch | None:
    """The pre-packed launch of ``program`` on ``device`` over buffers of these lengths, once a
    launch of it there went through :func:`launch` (which loaded it); None where none did or the
    driver cannot be reached (the plan then launches through :func:`launch`)."""
    hit = _lean.get((id(program), device))
    if hit is None or hit[0] is not program or hit[1] is None:
        return None
    return DeviceLaunch(hit[1], picks, lengths, grid)


class CpuCall(NamedTuple):
    """A CPU pass ready to call: the compiled entry a checked dispatch chose for these lengths and
    grid. ``call(*arrays)`` takes the storage buffers in ``order``."""

    fn: Any
    parallel: bool
    order: tuple[str, ...]
    grid: int
    serial: Any  # the serial entry: what a forked child whose pool is gone runs (pool_usable)

    def call(self, *arrays: Any) -> None:
        if not self.parallel:
            self.fn(*arrays, self.grid, 1, 1)
        elif pool_usable():
            with pool_lock():
                self.fn(*arrays, self.grid, 1, 1)
        else:
            self.serial(*arrays, self.grid, 1, 1)


@dataclass
class _CpuLean:
    """A CPU program's direct calls: its compiled kernel, the storage buffers in argument order,
    and per (lengths, grid) the call :meth:`CpuBackend.grouped_entry` picked after a checked
    dispatch over those lengths."""

    kernel: Any
    order: tuple[str, ...]
    calls: dict[tuple[tuple[int, ...], int], CpuCall] = field(default_factory=dict)


_cpu_lean: dict[int, tuple[Program, _CpuLean]] = {}
#: direct calls a program keeps (per lengths and grid) before it starts again
CPU_CALLS_KEPT = 64


def _launch_cpu(program: Program, arrays: Mapping[str, Any], grid: int) -> None:
    """The CPU launch of an op's pass: the first call over each set of lengths goes through
    ``dispatch`` (compile, check everything, choose serial or parallel); later calls call that
    compiled entry with the arrays directly (about 1 us instead of 10-30)."""
    hit = _cpu_lean.get(id(program))
    if hit is not None and hit[0] is program:
        args = [arrays[name] for name in hit[1].order]
        known = hit[1].calls.get((tuple(a.size for a in args), grid))
        if known is not None:
            known.call(*args)
            return
    dispatch(program, arrays, backend="cpu", grid=grid)
    from ..driver.dispatch import _kernel_for

    if hit is None or hit[0] is not program:
        k = _kernel_for(program, "cpu")
        hit = (program, _CpuLean(k, tuple(b.name for b in k.storage)))
        with _lock:
            if len(_cpu_lean) > 1024:
                _cpu_lean.clear()
            _cpu_lean[id(program)] = hit
    lean = hit[1]
    ordered = {name: arrays[name] for name in lean.order}
    entry = lean.kernel.impl.grouped_entry(lean.kernel, ordered, (grid, 1, 1))
    if entry is not None:
        fn, parallel, serial = entry
        if len(lean.calls) >= CPU_CALLS_KEPT:
            # start again, as the kernel's own memo of lengths does: refusing new lengths once full
            # left every later length of this program without a direct call, so without a plan
            lean.calls.clear()
        lean.calls[(tuple(a.size for a in ordered.values()), grid)] = CpuCall(fn, parallel, lean.order, grid, serial)


def cpu_call(program: Program, sizes: Mapping[str, int], grid: int) -> CpuCall | None:
    """The direct call of ``program`` over buffers of these lengths (by name) and ``grid``, if a
    launch over them went through :func:`launch` before (checked once, then remembered)."""
    hit = _cpu_lean.get(id(program))
    if hit is None or hit[0] is not program:
        return None
    return hit[1].calls.get((tuple(sizes[name] for name in hit[1].order), grid))


_resident: dict[int, tuple[Program, int]] = {}


def resident_workgroups(program: Program) -> int | None:
    """How many workgroups of ``program`` the current GPU holds at once (SMs times the occupancy
    of its compiled kernel), or None where the driver cannot say. A grid-stride reduction launched
    with exactly this many runs in one wave: no workgroup waits for another to finish. The first
    call compiles the kernel (one launch over one-element arrays)."""
    hit = _resident.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    from numba import cuda

    tiny = {b.name: cuda.device_array(1, b.element.np_dtype) for b in program.buffers if not b.is_workgroup}
    launch(program, tiny, 1, "cuda")
    lean = _lean.get((id(program), device_of(next(iter(tiny.values())))), (program, None))[1]
    if lean is None:
        return None
    try:
        from cuda.bindings import driver as cu

        err, per_sm = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            lean.func.value, lean.block[0] * lean.block[1] * lean.block[2], 0)
        if int(err) != 0 or int(per_sm) < 1:
            return None
        n = int(per_sm) * int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    except Exception:
        return None
    with _lock:
        _resident[id(program)] = (program, n)
    return n
