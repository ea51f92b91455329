"""What every op function shares: checking arrays, choosing the backend, allocating results of the
caller's kind (numpy in, numpy out; a CuPy / PyTorch / numba device array in, the same kind out)
and dispatching with explicit launch geometry.

Host arrays sent to a GPU backend are copied to the device once; every pass of an op then runs on
device arrays and only the result comes back."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from ..driver.backends import check_backend, default_backend, simulator_enabled
from ..driver.devices import array_device, on_device
from ..errors import DispatchError
from ..ir import DataType, Program
from ._launch import launch
from ._plans import INDEX, RESULT, SCALAR, USED, Recorder, device_element0, recording

__all__ = ["OpsError", "Arr", "Ctx", "prepare"]

#: Every op takes arrays of up to this many elements: indices are u32 and grid-stride loops add a
#: stride to an index, so 2^31 leaves room.
MAX_ELEMENTS = 1 << 31
GPU_BACKENDS = ("cuda", "cudasim")


class OpsError(DispatchError):
    """An op (vyre.ops) was called with arrays or options it cannot take."""


class Kind(enum.Enum):
    NUMPY = "numpy"
    CUPY = "cupy"
    TORCH = "torch"
    DEVICE = "device"  # any other __cuda_array_interface__ exporter: results are numba device arrays


class Arr(NamedTuple):  # not a dataclass: built per array per op call (a frozen dataclass costs 1 us)
    """A checked input: the flat contiguous array to bind (host or device), its logical shape and
    element type."""

    data: Any
    shape: tuple[int, ...]
    dtype: DataType

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _kind(x: Any) -> Kind:
    if isinstance(x, np.ndarray):
        if type(x).__module__.startswith("numpy.ma"):
            # its data holds the masked elements too: a reduction over them would be silently wrong
            raise OpsError(f"vyre.ops does not read masks, got a masked array ({type(x).__name__}). "
                           "Fix: pass x.filled(v), with v the value a masked element stands for "
                           "(0 for a sum, -np.inf for a max), or x.compressed()")
        return Kind.NUMPY
    mod = type(x).__module__
    # CuPy arrays and CUDA tensors by type: PyTorch builds its interface dict on every hasattr
    if mod.startswith("cupy") and hasattr(x, "data") and hasattr(x, "device"):
        return Kind.CUPY
    if mod.startswith("torch") and getattr(x, "is_cuda", False):
        return Kind.TORCH
    if hasattr(x, "__cuda_array_interface__"):
        mod = type(x).__module__.split(".")[0]
        return {"cupy": Kind.CUPY, "torch": Kind.TORCH}.get(mod, Kind.DEVICE)
    if type(x).__module__.startswith("numba.cuda.simulator"):
        return Kind.DEVICE  # the simulator's device arrays export no interface
    if mod.startswith("torch") and hasattr(x, "device"):
        raise OpsError(f"vyre.ops takes PyTorch tensors on a CUDA device, got one on {x.device}. Fix: pass "
                       "t.numpy() (no copy; t.detach().numpy() if it requires grad) and torch.from_numpy() the "
                       "answer, or move the tensor to the GPU with t.cuda()")
    raise OpsError(f"vyre.ops takes numpy arrays or device arrays (CuPy, PyTorch, numba), got "
                   f"{type(x).__name__}. Fix: pass np.asarray(value, dtype=np.float32), or float64 where the "
                   "call's other arrays are float64")


_DTYPES: dict[Any, DataType] = {}  # an array's own dtype object -> its DataType (hashable in numpy,
#                                   CuPy and PyTorch), so a call looks it up instead of parsing it


def _dtype_of(name: str, x: Any, kind: Kind) -> DataType:
    try:
        return _DTYPES[x.dtype]
    except (KeyError, TypeError):
        pass
    dt = np.dtype(x.dtype) if kind is not Kind.TORCH else np.dtype(str(x.dtype).removeprefix("torch."))
    if dt == np.float32:
        return _DTYPES.setdefault(x.dtype, DataType.F32)
    if dt == np.float64:
        return _DTYPES.setdefault(x.dtype, DataType.F64)
    raise OpsError(f"{name} has dtype {dt}; vyre.ops reduces float32 and float64 arrays. "
                   f"Fix: convert explicitly, e.g. {name}.astype(np.float32)")


def _contiguous(x: Any, kind: Kind) -> Any:
    if kind is Kind.NUMPY:
        return np.ascontiguousarray(x)
    if kind is Kind.CUPY:
        import cupy

        return x if x.flags.c_contiguous else cupy.ascontiguousarray(x)
    if kind is Kind.TORCH:
        return x.contiguous()
    if not hasattr(x, "__cuda_array_interface__"):
        return x  # a simulator array: dispatch checks it
    cai = x.__cuda_array_interface__
    strides, shape = cai.get("strides"), tuple(cai["shape"])
    if strides is not None and int(np.prod(shape)) > 1:
        expect, acc = [], np.dtype(cai["typestr"]).itemsize
        for s in reversed(shape):
            expect.append(acc)
            acc *= s
        if tuple(strides) != tuple(reversed(expect)):
            raise OpsError("a device array is not C-contiguous. Fix: pass a contiguous copy")
    return x


class Ctx:
    """One op call: the backend, the kind of the caller's arrays, allocation and dispatch."""

    def __init__(self, backend: str, kind: Kind, like: Any) -> None:
        self.backend = backend
        self.kind = kind
        self._like = like
        #: which program form the passes use (vyre.ops.reduce): the GPU form on CUDA and the
        #: simulator, the CPU form elsewhere; tests flip it to run either form on any backend
        self.gpu_form = backend in GPU_BACKENDS
        #: the record of this call, when vyre.ops._plans is turning it into a plan
        self.recorder: Recorder | None = None

    @property
    def gpu(self) -> bool:
        return self.backend in GPU_BACKENDS

    def empty(self, n: int, dtype: DataType) -> Any:
        """An uninitialised flat array of ``n`` elements where the passes run (device for GPU
        backends, in the caller's library when the caller passed device arrays)."""
        arr = self._allocate(n, dtype)
        if self.recorder is not None:
            self.recorder.empty(arr, n, dtype)
        return arr

    def _allocate(self, n: int, dtype: DataType) -> Any:
        npd = dtype.np_dtype
        if not self.gpu:
            return np.empty(n, npd)
        if self.kind is Kind.CUPY:  # on the caller's GPU, wherever the current device is
            import cupy

            where = self._like.device.id
            if cupy.cuda.runtime.getDevice() == where:
                return cupy.empty(n, npd)
            with cupy.cuda.Device(where):
                return cupy.empty(n, npd)
        if self.kind is Kind.TORCH:
            import torch

            return torch.empty(n, dtype=torch_dtype(dtype), device=self._like.device)
        from numba import cuda

        where = array_device(self._like) if self.backend == "cuda" else None
        if where is None:
            return cuda.device_array(n, npd)
        with on_device(where):
            return cuda.device_array(n, npd)

    def run(self, program: Program, arrays: Mapping[str, Any], grid: int) -> None:
        """Run ``program`` over ``grid`` workgroups; results land in the passed arrays (on CUDA and
        the CPU through vyre.ops._launch: checked once per program and lengths, then launched
        directly)."""
        launch(program, arrays, max(1, grid), self.backend)
        if self.recorder is not None:
            self.recorder.run(program, arrays, max(1, grid))

    def result(self, arr: Any, shape: tuple[int, ...]) -> Any:
        """``arr`` (flat, where the passes ran) as the caller's kind, shaped ``shape`` (``arr``
        itself where it has that shape: a reshape of a tensor costs 1-2 us)."""
        if self.gpu and self.kind is Kind.NUMPY:
            out = _to_host(arr).reshape(shape)
        else:
            out = arr if arr.shape == shape else arr.reshape(shape)
        if self.recorder is not None:
            self.recorder.answer(out, arr, RESULT, shape)
        return out

    def scalar(self, arr: Any) -> Any:
        """Element 0 of ``arr``: a numpy scalar for host callers, a 0-d device array otherwise."""
        if not self.gpu:
            value = arr[0]
        elif self.kind is Kind.NUMPY:
            value = _to_host(arr)[0]
        else:
            value = device_element0(arr)
        if self.recorder is not None:
            self.recorder.answer(value, arr, SCALAR)
        return value

    def index(self, arr: Any) -> Any:
        """Element 0 of ``arr`` (u32) as an index: an int64 numpy scalar for host callers, a 0-d
        uint32 device array otherwise."""
        if self.gpu and self.kind is not Kind.NUMPY:
            return self.scalar(arr)
        value = np.int64(self.scalar(arr))
        if self.recorder is not None:
            self.recorder.answer(value, arr, INDEX)
        return value


def host_indices(r: Any) -> Any:
    """argmax's u32 indices as numpy's int64 for numpy callers; device arrays keep their uint32."""
    if not isinstance(r, np.ndarray):
        return r
    out = r.astype(np.int64)
    if USED.watching:
        USED.indices = (r, out)
    return out


def torch_dtype(dtype: DataType) -> Any:
    """The PyTorch dtype of a vyre element type."""
    import torch

    if dtype is DataType.F32:
        return torch.float32
    if dtype is DataType.F64:
        return torch.float64
    return getattr(torch, dtype.np_dtype.name)


def _to_host(arr: Any) -> np.ndarray:
    if isinstance(arr, np.ndarray):
        return arr
    if hasattr(arr, "copy_to_host"):
        return np.asarray(arr.copy_to_host())
    from numba import cuda

    return np.asarray(cuda.as_cuda_array(arr).copy_to_host())


def prepare(named: Mapping[str, Any], backend: str | None, *, ndim: int | None = None,
            same_dtype: bool = True) -> tuple[Ctx, dict[str, Arr]]:
    """Check the arrays of one op call and pick its backend (see :func:`_prepare`); a call being
    recorded (vyre.ops._plans) gets its recorder, which learns the inputs' flat arrays."""
    ctx, out = _prepare(named, backend, ndim, same_dtype)
    rec = recording()
    if rec is not None and ctx.backend == rec.backend:
        ctx.recorder = rec
        for position, arr in enumerate(out.values()):
            rec.input(position, arr.data)
    return ctx, out


def _prepare(named: Mapping[str, Any], backend: str | None, ndim: int | None, same_dtype: bool
             ) -> tuple[Ctx, dict[str, Arr]]:
    """Check the arrays of one op call and pick its backend.

    ``backend=None``: ``cuda`` when any array is a device array (``cudasim`` under numba's
    simulator), else vyre's default
    (``VYRE_BACKEND``, else CUDA when a GPU is usable, else CPU). Host arrays on a GPU backend are
    copied to the device once. Device arrays on ``cpu``/``interp`` are an error."""
    if all(type(x) is np.ndarray for x in named.values()):
        host = default_backend() if backend is None else backend
        if isinstance(host, str) and host in _HOST_CHECKED:
            return _prepare_host(named, host, ndim, same_dtype)
    kinds = {name: _kind(x) for name, x in named.items()}
    dev = [n for n, k in kinds.items() if k is not Kind.NUMPY]
    if backend is None:
        b = ("cudasim" if simulator_enabled() else "cuda") if dev else default_backend()
    else:
        if not isinstance(backend, str):
            raise OpsError(f"backend must be a str or None, got {backend!r}. Fix: pass backend='cpu'")
        b = check_backend(backend)
    if dev and b not in GPU_BACKENDS:
        raise OpsError(f"{dev[0]} is a device array but backend={b!r} runs on the host. Fix: pass "
                       "backend='cuda' (or None), or copy the array to the host first")
    if b in ("cpu", "interp"):
        _HOST_CHECKED.add(b)
    kset = {kinds[n] for n in dev}
    if len(kset) > 1:
        raise OpsError(f"the arrays come from different libraries ({sorted(k.value for k in kset)}). "
                       "Fix: pass arrays of one kind")
    kind = kset.pop() if kset else Kind.NUMPY
    out: dict[str, Arr] = {}
    like: Any = None
    for name, x in named.items():
        k = kinds[name]
        dt = _dtype_of(name, x, k)
        shape = tuple(int(s) for s in x.shape)
        _check_shape(name, shape, ndim)
        data = _contiguous(x, k)
        if k is Kind.NUMPY:
            data = _flat_host(data)
            if b in GPU_BACKENDS:
                from numba import cuda

                data = cuda.to_device(data)
        elif len(shape) != 1:
            data = data.reshape(-1)
        like = x if like is None and k is not Kind.NUMPY else like
        out[name] = Arr(data, shape, dt)
    if same_dtype:
        _check_same_dtype(out)
    return Ctx(b, kind, like), out


#: host backends checked usable once (their availability does not change in a process)
_HOST_CHECKED: set[str] = set()


def _prepare_host(named: Mapping[str, Any], backend: str, ndim: int | None, same_dtype: bool
                  ) -> tuple[Ctx, dict[str, Arr]]:
    """:func:`prepare` for numpy arrays on a host backend checked before: the same checks, in a
    few microseconds less (an op on a small array is mostly this)."""
    out: dict[str, Arr] = {}
    for name, x in named.items():
        dt = _dtype_of(name, x, Kind.NUMPY)
        _check_shape(name, x.shape, ndim)
        out[name] = Arr(_flat_host(x if x.flags.c_contiguous else np.ascontiguousarray(x)), x.shape, dt)
    if same_dtype and len(out) > 1:
        _check_same_dtype(out)
    return Ctx(backend, Kind.NUMPY, None), out


def _check_shape(name: str, shape: tuple[int, ...], ndim: int | None) -> None:
    if ndim is not None and len(shape) != ndim:
        raise OpsError(f"{name} has shape {shape}; this op takes a {ndim}-D array. "
                       f"Fix: reshape it{' to (rows, cols)' if ndim == 2 else ' to 1-D'}")
    n = math.prod(shape)
    if n >= MAX_ELEMENTS:
        raise OpsError(f"{name} has {n} elements; vyre.ops takes fewer than 2^31. Fix: split the work")


def _flat_host(data: np.ndarray) -> np.ndarray:
    """A C-contiguous host array, flat and aligned (an odd-offset view is copied, so every pass may
    call machine code directly)."""
    flat = data.reshape(-1)
    return flat if flat.flags.aligned else flat.copy()


def _check_same_dtype(out: Mapping[str, Arr]) -> None:
    if len({a.dtype for a in out.values()}) > 1:
        desc = ", ".join(f"{n}: {a.dtype.short}" for n, a in out.items())
        raise OpsError(f"the arrays have different dtypes ({desc}). Fix: convert them to one dtype")


def gpu_workgroups_cap() -> int:
    """Workgroups a grid-stride reduction launches at most: enough for every SM to hold several,
    fixed (not derived from the device) so a result's bits do not depend on the GPU. 2048: a
    count that is not a whole number of waves leaves some SMs a workgroup more than others, and
    twice 1024 halves that imbalance (on an H100, 2^26 f32: `sum` 99.4 -> 93.5 us of GPU time,
    `dot` 267 -> 220, `argmax` 113 -> 107, `max` even; 4096 and more were slower:
    bench/deterministic_cap.py, BENCHMARKS.md)."""
    return 2048
