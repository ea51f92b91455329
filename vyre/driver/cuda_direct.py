"""The CUDA launch without numba: a cubin from the binary cache over device or numpy arrays.

A process whose kernel came from the binary cache (vyre/driver/cuda_binary.py) launches it through
the driver alone (vyre/driver/cuda_driver.py): device arrays (anything with
``__cuda_array_interface__``: CuPy, PyTorch, numba) pass their pointers; numpy arrays are copied to
device memory allocated here (``cuMemAlloc``, ``cuMemcpyHtoD``), copied back when written
(``cuMemcpyDtoH``, which waits for the kernel) and freed. The checks are the checked path's
(vyre/driver/cuda_launch.py), with the same messages, so a call is accepted or refused the same
way on either path; the launch leaves behind the same cached launch for repeats.

Everything else takes numba's path (:func:`launch_direct` returns None before doing anything):
a kernel numba compiled in this process, buffers left out (vyre allocates them and hands back
numba device arrays), device arrays wanted back for numpy inputs, objects that are neither numpy
nor device arrays (DLPack-only, lists), host arrays mixed with a PyTorch stream, a thread whose
current context is not a primary one, or no driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DispatchError
from ..ir import BufferDecl
from .bind import check_disjoint, check_host_array, check_names, spans_overlap
from .coverage import check_id_lengths
from .cuda_binary import CubinKernel
from .dlpack import check_not_traced, is_immutable
from .fast_launch import launch_stream, make_fast_launch
from .geometry import check_ids_fit, flat_invocations, grid3
from .launch_policy import choose_launch

if TYPE_CHECKING:
    from .cuda_driver import Driver
    from .dispatch import Grid, Kernel

__all__ = ["DeviceSpan", "check_device_array", "launch_direct"]


def check_device_input(decl: BufferDecl, obj: Any) -> None:
    """A device array given for ``decl``: not a tracer, and writable where the program writes it."""
    check_not_traced(obj, decl.name)
    if decl.access.writable and is_immutable(obj):
        raise DispatchError(f"buffer {decl.name!r} is written by the program but a {type(obj).__name__} is "
                            "immutable. Fix: pass a writable array for it (or leave it out to have it allocated)")


def check_device_array(decl: BufferDecl, obj: Any) -> tuple[dict[str, Any], int]:
    """The ``__cuda_array_interface__`` of a device array for ``decl`` and its element count, once
    its dtype, C-contiguity, length and writability are checked."""
    cai = obj.__cuda_array_interface__
    dt = np.dtype(cai["typestr"])
    if dt != decl.element.np_dtype:
        raise DispatchError(
            f"buffer {decl.name!r} has dtype {dt}, expected {decl.element.np_dtype}. "
            "Fix: convert it on the device before dispatching"
        )
    shape = tuple(cai["shape"])
    n = int(np.prod(shape)) if shape else 1
    strides = cai.get("strides")
    if strides is not None and n > 1:
        expect = []
        acc = dt.itemsize
        for s in reversed(shape):
            expect.append(acc)
            acc *= s
        if tuple(strides) != tuple(reversed(expect)):
            raise DispatchError(f"device buffer {decl.name!r} is not C-contiguous. Fix: pass a contiguous copy")
    if decl.count and n != decl.count:
        raise DispatchError(f"buffer {decl.name!r} has {n} elements, the program declares {decl.count}. "
                            "Fix: pass an array of the declared length")
    if decl.access.writable and cai["data"][1]:
        raise DispatchError(f"buffer {decl.name!r} is written by the program but the device array is "
                            "read-only. Fix: pass a writable array")
    return cai, n


class DeviceSpan:
    """A flat device array as a launch binds it: pointer, element count, dtype. It owns nothing
    (the memory is the caller's, or a host array's copy freed after the call); what the argument
    packing (vyre/driver/fast_launch.py) and the launch policy read of a bound array. (A plain
    class: a warm start defines it on its first dispatch, where a dataclass costs 0.6 ms.)"""

    __slots__ = ("dtype", "n", "ptr", "readonly")

    def __init__(self, ptr: int, n: int, dtype: np.dtype[Any], readonly: bool = False) -> None:
        self.ptr, self.n, self.dtype, self.readonly = ptr, n, dtype, readonly

    def __repr__(self) -> str:
        return f"DeviceSpan(ptr={self.ptr:#x}, n={self.n}, dtype={self.dtype})"

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    @property
    def size(self) -> int:
        return self.n

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.n,), "typestr": self.dtype.str, "data": (self.ptr, self.readonly),
                "version": 3, "strides": None, "stream": None}


def _takes(kernel: Kernel, inputs: Mapping[str, Any], return_device: bool | None) -> tuple[bool, bool] | None:
    """(any device array, results wanted on the device) when this path can run the call; None
    when numba's path must (see the module docs). Reads nothing but types."""
    host_written = any_device = False
    for decl in kernel.storage:
        obj = inputs.get(decl.name)
        if obj is None:
            return None  # allocated by numba's path, handed back as a numba device array
        if isinstance(obj, np.ndarray):
            host_written = host_written or decl.access.writable
        elif hasattr(obj, "__cuda_array_interface__"):
            any_device = True
        else:
            return None
    want_device = any_device if return_device is None else return_device
    if want_device and host_written:
        return None  # numpy results wanted as device arrays: numba's
    return any_device, want_device


def launch_direct(kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None, return_device: bool | None,
                  strict: bool, tune: bool) -> dict[str, Any] | None:
    """Run one call of a cubin kernel on this thread's current device through the driver alone;
    None (nothing done) when numba's path must take it. ``inputs`` went through the torch checks
    of :func:`vyre.driver.cuda_launch.launch_cuda`; the device is the current one."""
    if kernel.backend != "cuda" or not isinstance(getattr(kernel, "_fn", None), CubinKernel):
        return None
    took = _takes(kernel, inputs, return_device)
    if took is None:
        return None
    any_host = any(isinstance(v, np.ndarray) for v in inputs.values())
    stream = launch_stream(inputs)
    if any_host and stream:
        return None  # host copies go through the legacy stream, the kernel would not
    from .cuda_driver import driver

    try:
        drv = driver()
        if drv.thread_device() is None:
            return None  # a context that is not a primary one: numba says what it thinks of it
    except (OSError, DispatchError):
        return None
    return _run(drv, kernel, inputs, grid, return_device, strict, tune, stream, *took)


def _run(drv: Driver, kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None, return_device: bool | None,
         strict: bool, tune: bool, stream: int, any_device: bool, want_device: bool) -> dict[str, Any]:
    from .cuda_launch import launch_dims  # (cuda_launch imports this module)

    program = kernel.program
    check_names(program, list(inputs))
    written = {b.name for b in program.buffers if b.access.writable}
    host: dict[str, np.ndarray] = {}
    device_spans: dict[str, tuple[int, int]] = {}
    spans: dict[str, DeviceSpan] = {}
    for decl in kernel.storage:
        obj = inputs[decl.name]
        if isinstance(obj, np.ndarray):
            host[decl.name] = check_host_array(decl, obj)
            continue
        check_device_input(decl, obj)
        cai, n = check_device_array(decl, obj)
        s = cai.get("stream")
        if not (stream == 0 and s in (None, 1, 2)) and isinstance(s, int) and s:
            drv.synchronize(s)  # the producer's stream is not ordered before ours: wait, as numba does
        span = DeviceSpan(int(cai["data"][0]), n, decl.element.np_dtype)
        spans[decl.name] = span
        device_spans[decl.name] = (span.ptr, span.ptr + n * span.dtype.itemsize)
    check_disjoint(host, written, np.may_share_memory)
    check_disjoint(device_spans, written, spans_overlap)
    lengths = {b.name: (host[b.name].size if b.name in host else spans[b.name].n) for b in kernel.storage}
    g = grid3(grid) if grid is not None else kernel.grid_for(lengths)
    lengths_agree = check_id_lengths(program, lengths, strict)
    if not kernel.flat:
        check_ids_fit(program, g)
    owned: list[int] = []
    try:
        for name, flat in host.items():  # device copies of the numpy arrays
            ptr = drv.alloc(flat.nbytes)
            owned.append(ptr)
            drv.to_device(ptr, flat.ctypes.data, flat.nbytes)
            spans[name] = DeviceSpan(ptr, flat.size, flat.dtype)
        args = [spans[b.name] for b in kernel.storage]
        if kernel.flat and tune:
            kernel.launch = choose_launch(kernel, {b.name: a for b, a in zip(kernel.storage, args, strict=True)},
                                          flat_invocations(program, g))
        griddim, blockdim, scalars = launch_dims(kernel, g, kernel.launch)
        kernel._fn.launch(griddim, blockdim, stream, (*args, *scalars))
        copied = False
        for name, flat in host.items():
            if name in written:
                drv.to_host(flat.ctypes.data, spans[name].ptr, flat.nbytes)  # waits for the kernel
                copied = True
        if owned and not copied:
            drv.synchronize(stream)  # the kernel reads memory freed below
    finally:
        for ptr in owned:
            drv.free(ptr)
    out: dict[str, Any] = {}
    for b in kernel.storage:
        if not b.access.writable:
            continue
        obj = inputs[b.name]
        if want_device or isinstance(obj, np.ndarray):
            out[b.name] = obj
        else:  # a device array wanted on the host: a copy
            if stream:
                drv.synchronize(stream)  # the copy runs on the legacy stream, the kernel ran on this one
            cai = obj.__cuda_array_interface__
            copy = np.empty(tuple(cai["shape"]), dtype=b.element.np_dtype)
            drv.to_host(copy.ctypes.data, spans[b.name].ptr, copy.nbytes)
            out[b.name] = copy
    # the cached launch skips every check, so only a call that passed them all leaves one behind
    # (make_fast_launch refuses numpy inputs)
    if not host and want_device and lengths_agree:
        kernel._fast = make_fast_launch(kernel, inputs, args, scalars, griddim, blockdim, grid, return_device,
                                        tuple(out), stream)
    return out
