"""Launching CUDA (and simulator) kernels: argument checks, host/device transfers."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DispatchError
from ..ir import BufferDecl
from .bind import (
    Span, check_disjoint, check_host_array, check_names, host_array, missing_buffer, spans_overlap,
    storage_buffers,
)
from .devices import current_device, inputs_device, on_device
from .coverage import check_id_lengths
from .cuda_binary import ensure_loadable
from .cuda_direct import check_device_array, check_device_input, launch_direct
from .dlpack import DL_CPU, device_view, dlpack_device, is_dlpack
from .fast_launch import CAPTURE, launch_stream, make_fast_launch
from .geometry import check_ids_fit, flat_invocations, grid3
from .launch_policy import choose_launch

if TYPE_CHECKING:
    from .dispatch import Grid, Kernel, Launch


def compute_capability() -> str:
    """The compute capability of this thread's current device, ``"9.0"`` (asked of the driver:
    kernel keys are computed before anything needs numba)."""
    from .cuda_driver import driver

    drv = driver()
    return "{}.{}".format(*drv.compute_capability(drv.current_device()))


def _device_view(decl: BufferDecl, obj: Any, legacy_launch: bool = False) -> Any:
    """Zero-copy numba view of a device array (numba, CuPy, PyTorch, ...), checked like host arrays.

    numba synchronises the host with the stream the array interface names; a launch on the legacy
    default stream (``legacy_launch``) is already ordered after work on it or on the per-thread
    default stream, so then the host does not wait (it would serialise host and GPU: one chunk at a
    time instead of several GPUs at once)."""
    from numba import cuda

    cai, n = check_device_array(decl, obj)
    ordered = legacy_launch and cai.get("stream") in (None, 1, 2)
    arr = cuda.as_cuda_array(obj, sync=not ordered)
    return arr.reshape(n) if arr.ndim != 1 else arr


def _check_torch(decl: BufferDecl | None, obj: Any) -> None:
    if getattr(obj, "requires_grad", False):
        name = "?" if decl is None else decl.name
        raise DispatchError(f"buffer {name!r} is a PyTorch tensor that requires grad; vyre's kernels are "
                            "outside autograd. Fix: pass tensor.detach(), or use vyre.torch.function for "
                            "gradients through autograd")


def device_arg(decl: BufferDecl, obj: Any, legacy_launch: bool = False) -> tuple[Any, np.ndarray | None]:
    """The device array a launch binds to ``decl``: a zero-filled allocation when ``obj`` is None
    (written buffers with a declared count only), a zero-copy view of a device array (CUDA array
    interface or DLPack), or a copy of a checked host array (returned too, as the second element, so
    results can be copied back; host DLPack objects such as PyTorch CPU tensors are viewed as numpy
    arrays first)."""
    from numba import cuda

    if obj is None:
        if not decl.access.writable or decl.count <= 0:
            raise missing_buffer(decl)
        return cuda.to_device(np.zeros(decl.count, dtype=decl.element.np_dtype)), None
    if isinstance(obj, np.ndarray):
        flat = check_host_array(decl, obj)
        return cuda.to_device(flat), flat
    check_device_input(decl, obj)
    if type(obj).__module__.startswith("torch"):
        _check_torch(decl, obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return _device_view(decl, obj, legacy_launch), None
    if is_dlpack(obj):
        if dlpack_device(obj) != DL_CPU:
            return _device_view(decl, device_view(obj, decl.name)), None
        flat = check_host_array(decl, host_array(decl, obj))
        return cuda.to_device(flat), flat
    flat = check_host_array(decl, obj)
    return cuda.to_device(flat), flat


def launch_cuda(kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None,
                return_device: bool | None, device: int | None = None, strict: bool = False,
                tune: bool = False) -> dict[str, Any]:
    fast = kernel._fast
    if (fast is not None and device is None and fast.launch is kernel.launch
            and (fast.matches(inputs, grid, return_device) or fast.rebind(inputs, grid, return_device))):
        done = fast(inputs)
        if done is not None:
            return done
    if CAPTURE.stream is not None:
        raise DispatchError(f"a dispatch of a {len(kernel.program.entry)}-statement program inside "
                            "vyre.graph.capture cannot take the cached launch (first call of this kernel, "
                            "other arrays or grid than its last call, or the tuner still choosing its launch), "
                            "and only the cached launch can be captured. Fix: run the step once (or a few "
                            "times) with these very arrays before capturing")
    for name, obj in inputs.items():  # before anything reads a tensor's __cuda_array_interface__
        if type(obj).__module__.startswith("torch"):
            _check_torch(kernel.program.buffer(name) if isinstance(name, str) and name in kernel.binder.names
                         else None, obj)
    if kernel.backend == "cuda":
        dev = inputs_device(inputs, device)
        if dev is not None and dev != current_device():
            # another GPU than this thread's: its context, the checked path (the cached launch
            # serves the current device only)
            with on_device(dev):
                ensure_loadable(kernel)
                return _launch_checked(kernel, inputs, grid, return_device, pin=False, strict=strict, tune=tune)
        ensure_loadable(kernel)  # a cubin the driver refuses: compiled afresh here, never used
        # a cached cubin over device arrays (or numpy): the driver alone, numba not needed
        out = launch_direct(kernel, inputs, grid, return_device, strict, tune)
        if out is not None:
            return out
    return _launch_checked(kernel, inputs, grid, return_device, pin=True, strict=strict, tune=tune)


# (kernel id, device) pairs whose module is loaded: numba loads a kernel into a context on its first
# launch there, and two threads doing that at once for two devices race in numba's module table.
_loaded: set[tuple[int, int]] = set()
_load_lock = threading.Lock()


def _first_launch_guarded(kernel: Kernel, griddim: tuple[int, int, int], blockdim: tuple[int, int, int],
                          dev_args: list[Any], scalars: tuple[int, ...], stream: int = 0) -> None:
    """Launch ``kernel._fn`` (on ``stream``, 0: the legacy default); its first launch on each device
    is serialised (see ``_loaded``)."""
    if stream:
        from numba import cuda

        fn = kernel._fn[griddim, blockdim, cuda.external_stream(stream)]
    else:
        fn = kernel._fn[griddim, blockdim]
    if kernel.backend != "cuda":
        fn(*dev_args, *scalars)
        return
    key = (id(kernel._fn), current_device())
    if key in _loaded:
        fn(*dev_args, *scalars)
        return
    with _load_lock:
        fn(*dev_args, *scalars)
        _loaded.add(key)


def launch_dims(kernel: Kernel, g: tuple[int, int, int], launch: Launch | None
                ) -> tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, ...]]:
    """(griddim, blockdim, scalar arguments) of a launch over grid ``g``; ``launch``: a flat
    kernel's knobs (None: its default launch). Shared by the checked path and
    vyre.driver.device_launch, which repeats a checked launch on other arrays."""
    program = kernel.program
    if kernel.flat:
        n = flat_invocations(program, g)
        la = launch or kernel.default_launch(n)
        blocks = max(1, -(-n // (la.wg * la.ipt)))
        # y and z rows of a flat program repeat the x-row (geometry.flat_invocations), concurrently
        return (blocks, g[1], g[2]), (la.wg, 1, 1), (n, la.ipt)
    check_ids_fit(program, g)
    return g, program.workgroup_size, ()


def _launch_checked(kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None,
                    return_device: bool | None, pin: bool, strict: bool, tune: bool) -> dict[str, Any]:
    """Bind, check and launch on the current device; ``pin``: keep a cached launch for repeats;
    ``strict`` and ``tune`` as in :meth:`Kernel.__call__`."""
    from numba import cuda

    program = kernel.program
    check_names(program, list(inputs))
    dev_args: list[Any] = []
    copy_back: list[tuple[Any, np.ndarray]] = []
    any_device = False
    results: dict[str, Any] = {}
    host_arrays: dict[str, np.ndarray] = {}
    device_spans: dict[str, Span] = {}
    stream = launch_stream(inputs)
    for decl in storage_buffers(program):
        obj = inputs.get(decl.name)
        d, flat = device_arg(decl, obj, legacy_launch=stream == 0)
        dev_args.append(d)
        if obj is None:
            results[decl.name] = d
        elif flat is None:
            any_device = True
            results[decl.name] = obj
            start = int(d.__cuda_array_interface__["data"][0])
            device_spans[decl.name] = (start, start + int(d.shape[0]) * d.dtype.itemsize)
        else:
            host_arrays[decl.name] = flat
            if decl.access.writable:
                copy_back.append((d, flat))
                results[decl.name] = obj
    written = {b.name for b in program.buffers if b.access.writable}
    check_disjoint(host_arrays, written, np.may_share_memory)
    check_disjoint(device_spans, written, spans_overlap)
    lengths = {b.name: int(a.shape[0]) for b, a in zip(storage_buffers(program), dev_args, strict=True)}
    g = grid3(grid) if grid is not None else kernel.grid_for(lengths)
    lengths_agree = check_id_lengths(program, lengths, strict)
    if kernel.flat and tune and kernel.backend == "cuda":
        kernel.launch = choose_launch(kernel, {b.name: a for b, a in zip(storage_buffers(program), dev_args,
                                                                         strict=True)},
                                      flat_invocations(program, g))
    griddim, blockdim, scalars = launch_dims(kernel, g, kernel.launch)
    _first_launch_guarded(kernel, griddim, blockdim, dev_args, scalars, stream)
    if kernel._save_binary is not None:  # compiled by that launch: keep the cubin for later processes
        save, kernel._save_binary = kernel._save_binary, None
        save()
    for d, flat in copy_back:
        d.copy_to_host(flat)
    want_device = any_device if return_device is None else return_device
    out: dict[str, Any] = {}
    for b in storage_buffers(program):
        if not b.access.writable:
            continue
        r = results[b.name]
        if want_device:
            out[b.name] = r if not isinstance(r, np.ndarray) else cuda.to_device(r)
        else:
            out[b.name] = r if isinstance(r, np.ndarray) else (
                r.copy_to_host() if hasattr(r, "copy_to_host") else cuda.as_cuda_array(r).copy_to_host())
    # the cached launch skips every check, so only a call that passed them all leaves one behind
    if (pin and not copy_back and want_device and len(inputs) == len(dev_args) and kernel.backend == "cuda"
            and lengths_agree):
        kernel._fast = make_fast_launch(kernel, inputs, dev_args, scalars, griddim, blockdim, grid,
                                        return_device, tuple(out), stream)
    return out
