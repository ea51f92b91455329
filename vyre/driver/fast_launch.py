"""The cached CUDA launch: a repeated dispatch over the very same device arrays.

numba's own launch re-derives every argument on every call (about 20 us). When a kernel is
dispatched again over the very same device arrays nothing needs re-checking, so the first launch
leaves behind a ``FastLaunch``: the arguments packed once in numba's kernel ABI (per 1-D array:
meminfo, parent, nitems, itemsize, data, shape, stride; then the scalars) and a ready
``cuLaunchKernelEx`` call through ctypes. Its cost is the identity check of the arrays (a Python
loop, ~0.1 us) and one ctypes call of four arguments (~0.2 us; the 11-argument ``cuLaunchKernel``
costs ~0.55 us in ctypes conversions alone).

Identity is the contract: an array object passed again is the same device storage (numba, CuPy
and other CAI arrays cannot swap their pointer under the same object; arrays exported from a
stream other than a default one never take this path, see :func:`_on_a_default_stream`). PyTorch
tensors can swap their storage in place (``.set_()``, ``.resize_()``, ``.as_strided_()``), so for
them the cached launch also compares the data pointer, the element count and contiguity (about
0.2 us per tensor); other tensors of the very same layout are taken by rewriting the packed
pointers (:meth:`FastLaunch.rebind`), since PyTorch code makes new tensor objects all the time.
The arrays are held weakly (an array that cannot be is never pinned), so a kernel's last launch
keeps no caller memory alive.

Streams: vyre launches on the legacy default stream, except for PyTorch tensors, whose launches
(cached or not) go to PyTorch's current stream of the tensor's device (``torch.cuda.stream(s)``
is honoured, read on every call), and inside a :func:`vyre.graph.capture` block, whose capture
stream takes every launch.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import DispatchError

if TYPE_CHECKING:
    from .dispatch import Kernel


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h, CUDA 12+): the launch shape, the stream and no attributes."""

    _fields_ = [
        ("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
        ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
        ("shared_mem_bytes", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("num_attrs", ctypes.c_uint),
    ]


class Launcher(NamedTuple):  # not a dataclass: defined on a warm start's first launch (0.07 ms, not 0.6)
    """The driver entry point: ``cuLaunchKernelEx(config*, func, params, extra)`` when the driver
    has it (CUDA 12+), else ``cuLaunchKernel(func, gx, gy, gz, bx, by, bz, shmem, stream, params,
    extra)``."""

    fn: Callable[..., int]
    extended: bool


_launcher: Launcher | None = None
CUDA_ERROR_INVALID_CONTEXT = 201


class _Capture(threading.local):
    """The stream a :func:`vyre.graph.capture` block of *this thread* captures on (None outside one):
    other threads' launches are not redirected into a capture they did not start."""

    stream: int | None = None


CAPTURE = _Capture()


_raw_stream: Callable[[int], int] | None = None  # torch._C._cuda_getCurrentRawStream, once torch is in use


def torch_stream(device_index: int | None) -> int:
    """PyTorch's current stream (a ``CUstream`` as an int) on device ``device_index``: one C call per
    launch (PyTorch keeps the current stream per thread and device; ``torch.cuda.current_stream()``
    would build a Stream object, about 1 us)."""
    global _raw_stream
    get = _raw_stream
    if get is None or device_index is None:
        import torch

        get = _raw_stream = torch._C._cuda_getCurrentRawStream
        if device_index is None:
            device_index = torch.cuda.current_device()
    return get(device_index)


def launch_stream(inputs: Mapping[str, Any]) -> int:
    """The stream a launch over ``inputs`` goes to: the capture stream inside a graph capture, else
    PyTorch's current stream when any input is a PyTorch tensor, else 0 (legacy default)."""
    if CAPTURE.stream is not None:
        return CAPTURE.stream
    for v in inputs.values():
        if type(v).__module__.startswith("torch"):
            return torch_stream(v.device.index)
    return 0


def driver_launcher() -> Launcher:
    """The launch entry point of libcuda (OSError without a driver)."""
    global _launcher
    if _launcher is None:
        lib = ctypes.CDLL("libcuda.so.1")
        try:
            fn, extended = lib.cuLaunchKernelEx, True
        except AttributeError:  # a CUDA 11 driver
            fn, extended = lib.cuLaunchKernel, False
        fn.restype = ctypes.c_int
        _launcher = Launcher(fn, extended)
    return _launcher


def pack(vals: list[int]) -> tuple[Any, Any]:
    """``vals`` as the int64 slots a launch reads and the array of pointers to them (the
    ``kernelParams`` of cuLaunchKernel); both must outlive the launch call."""
    packed = (ctypes.c_int64 * len(vals))(*vals)
    base = ctypes.addressof(packed)
    return packed, (ctypes.c_void_p * len(vals))(*range(base, base + 8 * len(vals), 8))


def launch_now(func: int, griddim: tuple[int, int, int], blockdim: tuple[int, int, int], stream: int,
               params: Any) -> int:
    """One launch of ``func`` through the driver's entry point (cuLaunchKernelEx, or cuLaunchKernel
    on an older driver); returns the CUDA error code."""
    launcher = driver_launcher()
    if launcher.extended:
        cfg = LaunchConfig(*griddim, *blockdim, 0, ctypes.c_void_p(stream or None), None, 0)
        return int(launcher.fn(ctypes.byref(cfg), ctypes.c_void_p(func), params, None))
    u = ctypes.c_uint
    return int(launcher.fn(ctypes.c_void_p(func), *(u(v) for v in (*griddim, *blockdim)), u(0),
                           ctypes.c_void_p(stream or None), params, None))


def packed_values(dev_args: list[Any], scalars: tuple[int, ...]) -> list[int]:
    """numba's kernel ABI for 1-D C-contiguous arrays, then the scalar arguments, as int64 slots."""
    vals: list[int] = []
    for d in dev_args:
        n = int(d.shape[0])
        item = int(d.dtype.itemsize)
        ptr = int(d.__cuda_array_interface__["data"][0])
        vals += [0, 0, n, item, ptr, n, item]
    return vals + list(scalars)


class FastLaunch:
    """A launch of one kernel over fixed device arrays, ready to repeat.

    It holds the arrays only weakly: a kernel's last launch must not keep a caller's device memory
    alive, and an array that died (its pointer freed, perhaps reused) can never match again.

    (A plain class, not a dataclass: a warm start defines it on its first launch, and a dataclass
    costs about 0.5 ms to define.)"""

    def __init__(self, refs: tuple[tuple[str, weakref.ref[Any]], ...], written: tuple[str, ...], grid: Any,
                 launch: Any, return_device: bool | None, call: Callable[[], int], keep: tuple[Any, ...],
                 tensors: tuple[tuple[str, int, int, Any], ...] = (), torch_device: int | None = None,
                 cfg: Any = None, stream: int = 0, slots: dict[str, int] | None = None) -> None:
        self.refs = refs  # buffer name -> the array object bound last time
        self.written = written  # the names a call returns, in the slow path's order
        self.grid = grid
        self.launch = launch  # the Kernel.launch it was packed for (the tuner may change it)
        self.return_device = return_device
        self.call = call
        self.keep = keep  # the ctypes storage the argument pointers point into
        # PyTorch tensors: (name, data pointer, element count, dtype) as packed; their stream is PyTorch's
        self.tensors = tensors
        self.torch_device = torch_device
        self.cfg = cfg  # the CUlaunchConfig whose stream field is set per call (cuLaunchKernelEx)
        self.stream = stream
        self.slots = slots  # buffer name -> its index among the packed arrays
        # (name, weak ref, (data pointer, element count) for a PyTorch tensor else None): what matches() checks
        self.checks: tuple[tuple[str, Callable[[], Any], tuple[int, int] | None], ...] = ()
        self._set_checks()

    def _set_checks(self) -> None:
        sig = {name: (ptr, n) for name, ptr, n, _ in self.tensors}
        self.checks = tuple((name, ref, sig.get(name)) for name, ref in self.refs)

    def rebind(self, inputs: Mapping[str, Any], grid: Any, return_device: bool | None) -> bool:
        """Take other PyTorch tensors of the very same layout (dtype, element count, contiguous, same
        device, no grad) in place of the packed ones by rewriting their pointers; every other input
        must be the very same object, and no written buffer may overlap another. False (nothing
        changed) otherwise. A PyTorch function allocates a new output and makes new detached views
        on every call, so identity alone would never match again."""
        if (not self.tensors or self.slots is None or grid != self.grid or return_device != self.return_device
                or len(inputs) != len(self.refs)):
            return False
        new = []
        for name, _, n, dt in self.tensors:
            t: Any = inputs.get(name)
            if (getattr(t, "dtype", None) is not dt or not type(t).__module__.startswith("torch")
                    or t.numel() != n or not t.is_contiguous() or t.requires_grad
                    or t.device.index != self.torch_device):
                return False
            new.append((name, int(t.data_ptr()), n, dt))
        moved = {name for name, _, _, _ in new}
        for name, ref in self.refs:
            if name not in moved and (ref() is None or inputs.get(name) is not ref()):
                return False
        vals = self.keep[0]
        spans = {}
        for name, slot in self.slots.items():
            start = int(vals[7 * slot + 4])
            spans[name] = (start, start + int(vals[7 * slot + 2]) * int(vals[7 * slot + 3]))
        for name, ptr, n, _ in new:
            spans[name] = (ptr, ptr + n * int(vals[7 * self.slots[name] + 3]))
        for w in self.written:
            a = spans[w]
            for other, b in spans.items():
                if other != w and max(a[0], b[0]) < min(a[1], b[1]):
                    return False  # the checked path reports it
        try:
            refs = tuple((name, weakref.ref(inputs[name])) for name, _ in self.refs)
        except TypeError:
            return False
        for name, ptr, _, _ in new:
            vals[7 * self.slots[name] + 4] = ptr
        self.tensors = tuple(new)
        self.refs = refs
        self._set_checks()
        return True

    def matches(self, inputs: Mapping[str, Any], grid: Any, return_device: bool | None) -> bool:
        if grid != self.grid or return_device != self.return_device or len(inputs) != len(self.refs):
            return False
        for name, ref, sig in self.checks:  # a plain loop: cheaper than all(map(...)) for a few buffers
            obj = ref()
            if obj is None or inputs.get(name) is not obj:
                return False
            # a PyTorch tensor: storage swapped under the same object (set_, resize_, as_strided_)?
            if sig is not None:
                t: Any = obj
                if t.data_ptr() != sig[0] or t.numel() != sig[1] or not t.is_contiguous():
                    return False
        return True

    def run(self) -> bool:
        """Launch over the packed arguments, on the stream the call must use (the capture stream,
        PyTorch's current stream, else the legacy default). False when this thread has no current
        CUDA context (a thread other than the first dispatch's) or the launch would need another
        stream than this launch can be given: then nothing ran."""
        s = CAPTURE.stream
        if s is None:
            s = 0 if self.torch_device is None else torch_stream(self.torch_device)
        if s != self.stream:
            if self.cfg is None:
                return False
            self.cfg.stream = s
            self.stream = s
        err = self.call()
        if err:
            if err == CUDA_ERROR_INVALID_CONTEXT:
                return False
            raise DispatchError(f"the CUDA driver refused the launch (CUDA error {err}). Fix: check the "
                                "device state (a previous kernel may have faulted) and the launch shape")
        return True

    def clone(self) -> FastLaunch:
        """A copy with its own packed arguments (and launch config), for a caller that rewrites
        pointers (:meth:`set_pointer`) or must not see :meth:`rebind` of the kernel's cached launch."""
        new_vals, ptrs = pack(list(self.keep[0]))
        fn, args = self.call.func, self.call.args  # type: ignore[attr-defined]
        cfg = None
        if self.cfg is not None:  # cuLaunchKernelEx(config*, func, params, extra)
            cfg = LaunchConfig.from_buffer_copy(self.cfg)
            call = functools.partial(fn, ctypes.byref(cfg), args[1], ptrs, None)
            keep: tuple[Any, ...] = (new_vals, ptrs, cfg)
        else:  # cuLaunchKernel(func, 3 grid, 3 block, shmem, stream, params, extra)
            call = functools.partial(fn, *args[:-2], ptrs, None)
            keep = (new_vals, ptrs)
        return FastLaunch(self.refs, self.written, self.grid, self.launch, self.return_device, call, keep,
                          self.tensors, self.torch_device, cfg, self.stream,
                          None if self.slots is None else dict(self.slots))

    def set_pointer(self, slot: int, ptr: int) -> None:
        """Point packed array ``slot`` at device address ``ptr`` (same length and element size)."""
        self.keep[0][7 * slot + 4] = ptr

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """Launch (:meth:`run`); ``inputs`` must be what :meth:`matches` just accepted. Returns a
        new dict of the written buffers (the caller's own arrays, written in place), or None when
        nothing ran and the checked path must take the call."""
        if not self.run():
            return None
        w = self.written
        if len(w) == 1:  # the common case, without a comprehension's frame (about 0.1 us less)
            return {w[0]: inputs[w[0]]}
        return {name: inputs[name] for name in w}


def build_fast_launch(launcher: Launcher, func: int, inputs: Mapping[str, Any], dev_args: list[Any],
                      scalars: tuple[int, ...], griddim: tuple[int, int, int],
                      blockdim: tuple[int, int, int], grid: Any, launch: Any,
                      return_device: bool | None, written: tuple[str, ...], stream: int = 0,
                      slots: tuple[str, ...] | None = None) -> FastLaunch | None:
    """Pack the arguments of one launch of ``func`` (a CUfunction handle) once, for repeating; None
    when an input cannot be referenced weakly. ``stream``: the stream of this launch; ``slots``: the
    buffer names of ``dev_args``, in order (lets PyTorch tensors be rebound, :meth:`FastLaunch.rebind`)."""
    try:
        refs = tuple((name, weakref.ref(obj)) for name, obj in inputs.items())
    except TypeError:
        return None
    vals, ptrs = pack(packed_values(dev_args, scalars))
    handle = ctypes.c_void_p(func)
    tensors = tuple((name, int(obj.data_ptr()), int(obj.numel()), obj.dtype) for name, obj in inputs.items()
                    if type(obj).__module__.startswith("torch"))
    torch_device = next((int(obj.device.index) for obj in inputs.values()
                         if type(obj).__module__.startswith("torch")), None)
    cfg = None
    if launcher.extended:
        cfg = LaunchConfig(*griddim, *blockdim, 0, stream or None, None, 0)
        call = functools.partial(launcher.fn, ctypes.byref(cfg), handle, ptrs, None)
        keep: tuple[Any, ...] = (vals, ptrs, cfg)
    else:
        u = ctypes.c_uint
        call = functools.partial(launcher.fn, handle, *(u(v) for v in (*griddim, *blockdim)), u(0),
                                 ctypes.c_void_p(stream or None), ptrs, None)
        keep = (vals, ptrs)
    slot_of = None if slots is None else {name: k for k, name in enumerate(slots)}
    return FastLaunch(refs, written, grid, launch, return_device, call, keep, tensors, torch_device, cfg, stream,
                      slot_of)


def _on_a_default_stream(obj: Any) -> bool:
    """Does the array's producer use a stream that our launches (legacy default stream) are ordered
    after? The checked path imports every array through numba, which synchronises with the stream
    the array interface names; the cached path does not look again, so arrays exported from any
    other stream (CuPy inside ``with cupy.cuda.Stream(...)``) are never pinned."""
    stream = obj.__cuda_array_interface__.get("stream")
    return stream is None or stream in (1, 2)  # none given, legacy, per-thread default


def make_fast_launch(kernel: Kernel, inputs: Mapping[str, Any], dev_args: list[Any], scalars: tuple[int, ...],
                     griddim: tuple[int, int, int], blockdim: tuple[int, int, int], grid: Any,
                     return_device: bool | None, written: tuple[str, ...], stream: int = 0) -> FastLaunch | None:
    """The repeatable launch for this call, or None when the inputs cannot be pinned (host arrays,
    DLPack imports, arrays exported from another stream) or the driver is not reachable."""
    if any(isinstance(v, np.ndarray) or not hasattr(v, "__cuda_array_interface__")
           or not _on_a_default_stream(v) for v in inputs.values()):
        return None
    try:
        from .cuda_binary import CubinKernel

        if isinstance(kernel._fn, CubinKernel):  # a cubin from the binary cache
            func = kernel._fn.handle()
        else:
            overloads = list(kernel._fn.overloads.values())
            if len(overloads) != 1:
                return None
            from cuda.bindings import driver as cu

            handle = overloads[0]._codelibrary.get_cufunc().handle
            err, func = cu.cuKernelGetFunction(handle)
            if int(err) != 0:
                return None
        launcher = driver_launcher()
    except Exception:  # no libcuda / bindings: numba's own launch keeps working
        return None
    return build_fast_launch(launcher, int(func), inputs, dev_args, scalars, griddim, blockdim, grid,
                             kernel.launch, return_device, written, stream, tuple(b.name for b in kernel.storage))
