"""A checked CUDA launch repeated on any GPU over new CuPy arrays of the same layout.

``vyre.dask`` launches one kernel per chunk. Every chunk brings new array objects, so the cached
launch (vyre/driver/fast_launch.py, which keys on array identity and serves the current device)
never applies, and the checked path costs far more host time than a large chunk's kernel on an
H100 (numba's array import and argument handling, under the GIL that every Dask thread shares).
But the chunks' *layout* repeats: so the first launch of a layout goes through ``dispatch`` (every
check, the tuner, the kernel loaded onto that GPU), :func:`remember` records the launch shape the
checked path used, and later launches of that layout (:func:`launch`) pack numba's kernel ABI for
the new pointers (per array meminfo, parent, nitems, itemsize, data, shape, stride; then the
scalars) and call ``cuLaunchKernelEx`` on the caller's stream, with the kernel's function handle
loaded once per device (:func:`function_on`).

The layout key holds what the checked path's verdict depended on: per storage buffer its dtype,
element count and C-contiguity, and the grid. The launch knobs recorded are those the checked call
left (the tuner's choice for that size); a flat kernel's results do not depend on them. What varies per call is
checked on every call: every array is a CuPy array on the launch's device, and no written buffer
overlaps another buffer (a few integer compares).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import DispatchError
from .devices import on_device

if TYPE_CHECKING:
    from .dispatch import Kernel

__all__ = ["function_on", "launch", "remember"]

# (id(kernel._fn), device) -> (kernel._fn, CUfunction): a kernel's function handle on one device
_functions: dict[tuple[int, int], tuple[Any, int]] = {}
# (id(kernel), layout key) -> (kernel, (griddim, blockdim, scalars)) of a checked launch
_shapes: dict[tuple[int, Any], tuple[Any, tuple[Any, Any, tuple[int, ...]]]] = {}
_MAX_SHAPES = 4096
_lock = threading.Lock()


def function_on(kernel: Kernel, device: int) -> int | None:
    """The ``CUfunction`` of ``kernel`` on ``device`` (loading its module there the first time), or
    None where the driver API cannot be reached (then launches go through ``dispatch``)."""
    fn = kernel._fn
    hit = _functions.get((id(fn), device))
    if hit is not None and hit[0] is fn:
        return hit[1]
    from .cuda_binary import CubinKernel
    from .cuda_launch import _load_lock
    from .fast_launch import driver_launcher

    try:
        # numba's module table races when two threads load into two contexts (cuda_launch._loaded)
        with _load_lock, on_device(device):
            if isinstance(fn, CubinKernel):
                func = fn.handle()
            else:
                overloads = list(fn.overloads.values())
                if len(overloads) != 1:
                    return None
                from cuda.bindings import driver as cu

                err, func = cu.cuKernelGetFunction(overloads[0]._codelibrary.get_cufunc().handle)
                if int(err) != 0:
                    return None
        if not driver_launcher().extended:  # a CUDA 11 driver: the checked path launches
            return None
    except Exception:  # no driver bindings, no libcuda: dispatch keeps working
        return None
    with _lock:
        _functions[(id(fn), device)] = (fn, int(func))
    return int(func)


def _layout(kernel: Kernel, arrays: Mapping[str, Any], grid: tuple[int, int, int]) -> Any:
    """The key of what the checked path judged: per storage buffer (dtype, count, contiguous)."""
    return (tuple((a.dtype, a.size, a.flags.c_contiguous) for a in (arrays[b.name] for b in kernel.storage)),
            grid)


def remember(kernel: Kernel, arrays: Mapping[str, Any], grid: tuple[int, int, int]) -> None:
    """Record the launch shape of a call the checked path just ran over ``arrays`` with ``grid``
    (CuPy arrays for every storage buffer), so :func:`launch` repeats it for this layout."""
    import cupy

    from .cuda_launch import launch_dims

    if len(arrays) != len(kernel.storage) or any(
            not isinstance(arrays.get(b.name), cupy.ndarray) for b in kernel.storage):
        return
    key = (id(kernel), _layout(kernel, arrays, grid))
    dims = launch_dims(kernel, grid, kernel.launch)
    with _lock:
        if len(_shapes) > _MAX_SHAPES:
            _shapes.clear()
        _shapes[key] = (kernel, dims)


def launch(kernel: Kernel, arrays: Mapping[str, Any], grid: tuple[int, int, int], device: int,
           stream: int) -> bool:
    """Launch ``kernel`` over ``arrays`` (CuPy, on ``device``, which must be the thread's current
    device) on ``stream`` (a ``CUstream`` as an int, 0: legacy default) when a call of this layout
    passed the checked path before (:func:`remember`); False (nothing ran) otherwise."""
    import cupy

    storage = kernel.storage
    if len(arrays) != len(storage):
        return False
    bound = []
    for b in storage:
        a = arrays.get(b.name)
        if not isinstance(a, cupy.ndarray) or a.device.id != device:
            return False
        bound.append(a)
    hit = _shapes.get((id(kernel), _layout(kernel, arrays, grid)))
    if hit is None or hit[0] is not kernel:
        return False
    func = function_on(kernel, device)
    if func is None:
        return False
    spans = [(a.data.ptr, a.data.ptr + a.nbytes) for a in bound]
    for k, b in enumerate(storage):  # a written buffer overlapping another: the checked path says so
        if b.access.writable and spans[k][0] < spans[k][1]:
            lo, hi = spans[k]
            if any(j != k and max(lo, s[0]) < min(hi, s[1]) for j, s in enumerate(spans)):
                return False
    griddim, blockdim, scalars = hit[1]
    vals: list[int] = []
    for a, (lo, _) in zip(bound, spans, strict=True):
        n, item = int(a.size), int(a.itemsize)
        vals += [0, 0, n, item, lo, n, item]
    vals += scalars
    from .fast_launch import launch_now, pack

    packed, ptrs = pack(vals)
    err = launch_now(func, griddim, blockdim, stream, ptrs)
    del packed  # (kept alive until the launch has read it)
    if err:
        raise DispatchError(f"the CUDA driver refused a launch on GPU {device} (CUDA error {err}). Fix: check the "
                            "device state (a previous kernel may have faulted)")
    return True
