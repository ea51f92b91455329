"""Array kinds: allocate, copy, zero and sum arrays of the caller's framework on the caller's device.

The runners of :mod:`vyre.autodiff` return results of the kind they were given (numpy arrays,
CuPy arrays, PyTorch tensors on the same device, numba device arrays), without a host round trip.
An :class:`ArrayKind` is the handful of operations they need; :func:`kind_of` picks it from an
array. Objects that only speak DLPack (JAX) are worked on through their host (numpy) or device
(numba) view, and results are handed back through the framework's own ``from_dlpack``.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DispatchError
from . import fast_launch
from .dlpack import DL_CPU, dlpack_device, is_dlpack
from .fast_launch import CAPTURE, CUDA_ERROR_INVALID_CONTEXT


class ArrayKind:
    """Operations on one kind of array. ``device``: its arrays live on the GPU."""

    name = "numpy"
    device = False
    pooled_scalars = False  # scalar_chunk works (a ScalarPool can hand out device scalars)

    def zeros(self, n: int, dtype: np.dtype) -> Any:
        return np.zeros(n, dtype=dtype)

    def empty(self, n: int, dtype: np.dtype) -> Any:
        return np.empty(n, dtype=dtype)

    def copy(self, a: Any) -> Any:
        return np.array(a, copy=True)

    def zero_(self, a: Any) -> None:
        a.fill(0)

    def total(self, a: Any) -> Any:
        """``sum(a)`` accumulated in float64: a float on the host, a device scalar on the GPU."""
        return float(np.sum(a, dtype=np.float64))

    def ones(self, n: int, dtype: np.dtype) -> Any:
        return np.ones(n, dtype=dtype)

    def zeros_like(self, a: Any) -> Any:
        """Zeros of ``a``'s shape and dtype, of this kind (a writable array even when ``a`` is not)."""
        return np.zeros(np.shape(a), dtype=a.dtype)

    def vdot(self, a: Any, b: Any) -> Any:
        """``<a, b>`` of two flat-equal arrays in float64 (a float on the host, else a device scalar)."""
        return float(np.dot(np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)))

    def to_host(self, a: Any) -> np.ndarray:
        return np.asarray(a)

    def size(self, a: Any) -> int:
        return int(np.size(a))

    def wrap(self, a: Any) -> Any:
        """A result array (of this kind, or a view vyre made) as the caller's kind."""
        return a

    def device_scalar(self) -> tuple[Any, int] | None:
        """A new float64 0-d device array and its pointer (None: this kind has no device scalar)."""
        return None

    def scalar_chunk(self, n: int) -> tuple[Sequence[Any], int] | None:
        """``n`` zero-filled float64 0-d device arrays over one allocation, and its device pointer
        (scalar ``k`` lies at ``pointer + 8 k``); None: this kind has no device scalar
        (:class:`ScalarPool`)."""
        return None


class CupyKind(ArrayKind):
    name = "cupy"
    device = True
    pooled_scalars = True

    def __init__(self, cp: Any) -> None:
        self.cp = cp

    def zeros(self, n: int, dtype: np.dtype) -> Any:
        return self.cp.zeros(n, dtype=dtype)

    def empty(self, n: int, dtype: np.dtype) -> Any:
        return self.cp.empty(n, dtype=dtype)

    def copy(self, a: Any) -> Any:
        return a.copy()

    def zero_(self, a: Any) -> None:
        memset_zero(a)

    def total(self, a: Any) -> Any:
        return a.sum(dtype=np.float64) if a.size != 1 else a.reshape(()).astype(np.float64)

    def ones(self, n: int, dtype: np.dtype) -> Any:
        return self.cp.ones(n, dtype=dtype)

    def zeros_like(self, a: Any) -> Any:
        return self.cp.zeros_like(a)

    def vdot(self, a: Any, b: Any) -> Any:
        return self.cp.dot(a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64))

    def to_host(self, a: Any) -> np.ndarray:
        return np.asarray(a.get())

    def device_scalar(self) -> tuple[Any, int] | None:
        out = self.cp.empty((), dtype=np.float64)
        return out, int(out.data.ptr)

    def scalar_chunk(self, n: int) -> tuple[Sequence[Any], int] | None:
        chunk = self.cp.zeros(n, dtype=np.float64)
        return _CupyScalars(self.cp, chunk), int(chunk.data.ptr)

    def size(self, a: Any) -> int:
        return int(a.size)


class TorchKind(ArrayKind):
    name = "torch"

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.dev = device
        self.device = self.pooled_scalars = device.type == "cuda"

    @functools.cached_property
    def _dtypes(self) -> dict[np.dtype, Any]:
        t = self.torch
        return {np.dtype(k): v for k, v in ((np.float32, t.float32), (np.float64, t.float64), (np.int32, t.int32),
                                            (np.uint32, t.uint32), (np.bool_, t.bool))}

    def tdtype(self, dtype: np.dtype) -> Any:
        return self._dtypes[np.dtype(dtype)]

    def zeros(self, n: int, dtype: np.dtype) -> Any:
        return self.torch.zeros(n, dtype=self.tdtype(dtype), device=self.dev)

    def empty(self, n: int, dtype: np.dtype) -> Any:
        return self.torch.empty(n, dtype=self.tdtype(dtype), device=self.dev)

    def copy(self, a: Any) -> Any:
        return a.detach().clone()

    def zero_(self, a: Any) -> None:
        if self.device:
            memset_zero(a)
        else:
            a.detach().zero_()

    def total(self, a: Any) -> Any:
        s = a.detach().sum(dtype=self.torch.float64) if a.numel() != 1 else a.detach().reshape(()).double()
        return s if self.device else float(s)

    def ones(self, n: int, dtype: np.dtype) -> Any:
        return self.torch.ones(n, dtype=self.tdtype(dtype), device=self.dev)

    def zeros_like(self, a: Any) -> Any:
        return self.torch.zeros_like(a, requires_grad=False, memory_format=self.torch.contiguous_format)

    def vdot(self, a: Any, b: Any) -> Any:
        s = self.torch.dot(a.detach().reshape(-1).double(), b.detach().reshape(-1).double())
        return s if self.device else float(s)

    def to_host(self, a: Any) -> np.ndarray:
        return np.asarray(a.detach().cpu().numpy())

    def device_scalar(self) -> tuple[Any, int] | None:
        if not self.device:
            return None
        out = self.torch.empty((), dtype=self.torch.float64, device=self.dev)
        return out, int(out.data_ptr())

    def scalar_chunk(self, n: int) -> tuple[Sequence[Any], int] | None:
        if not self.device:
            return None
        chunk = self.torch.zeros(n, dtype=self.torch.float64, device=self.dev)
        return chunk.unbind(), int(chunk.data_ptr())  # unbind: n views in one C++ call

    def size(self, a: Any) -> int:
        return int(a.numel())


class NumbaKind(ArrayKind):
    name = "numba"
    device = True

    def zeros(self, n: int, dtype: np.dtype) -> Any:
        a = self.empty(n, dtype)
        memset_zero(a)
        return a

    def empty(self, n: int, dtype: np.dtype) -> Any:
        from numba import cuda

        return cuda.device_array(n, dtype=dtype)

    def copy(self, a: Any) -> Any:
        from numba import cuda

        src = cuda.as_cuda_array(a)
        out = cuda.device_array(src.shape, dtype=src.dtype)
        out.copy_to_device(src)
        return out

    def zero_(self, a: Any) -> None:
        memset_zero(a)

    def total(self, a: Any) -> Any:
        # numba has no device reduction of its own that returns a device scalar: this is a float
        return float(np.sum(self.to_host(a), dtype=np.float64))

    def ones(self, n: int, dtype: np.dtype) -> Any:
        from numba import cuda

        return cuda.to_device(np.ones(n, dtype=dtype))

    def zeros_like(self, a: Any) -> Any:
        from numba import cuda

        src = cuda.as_cuda_array(a)
        out = cuda.device_array(src.shape, dtype=src.dtype)
        memset_zero(out)
        return out

    def vdot(self, a: Any, b: Any) -> Any:
        return ArrayKind.vdot(self, self.to_host(a), self.to_host(b))

    def to_host(self, a: Any) -> np.ndarray:
        from numba import cuda

        return np.asarray(cuda.as_cuda_array(a).copy_to_host())

    def size(self, a: Any) -> int:
        return int(np.prod(a.shape))


class JaxKind(ArrayKind):
    """JAX arrays (immutable): vyre works on numpy (CPU) or numba (GPU) buffers and hands results
    back as JAX arrays through ``jax.dlpack.from_dlpack``."""

    name = "jax"

    def __init__(self, inner: ArrayKind) -> None:
        self.inner = inner
        self.device = inner.device

    def zeros(self, n: int, dtype: np.dtype) -> Any:
        return self.inner.zeros(n, dtype)

    def empty(self, n: int, dtype: np.dtype) -> Any:
        return self.inner.empty(n, dtype)

    def copy(self, a: Any) -> Any:
        return self.inner.copy(self.view(a))

    def zero_(self, a: Any) -> None:
        self.inner.zero_(a)

    def total(self, a: Any) -> Any:
        t = self.inner.total(self.view(a))
        return t if isinstance(t, float) else self.wrap(t)

    def ones(self, n: int, dtype: np.dtype) -> Any:
        return self.inner.ones(n, dtype)

    def zeros_like(self, a: Any) -> Any:
        return self.inner.zeros_like(self.view(a))

    def vdot(self, a: Any, b: Any) -> Any:
        return self.inner.vdot(self.view(a), self.view(b))

    def to_host(self, a: Any) -> np.ndarray:
        return self.inner.to_host(self.view(a))

    def size(self, a: Any) -> int:
        return int(np.prod(a.shape))

    def view(self, a: Any) -> Any:
        if not is_dlpack(a):
            return a
        if not self.device:
            return np.from_dlpack(a)
        if isinstance(self.inner, CupyKind):
            return self.inner.cp.from_dlpack(a)
        from numba import cuda

        from .dlpack import device_view

        return cuda.as_cuda_array(device_view(a, "?"))

    def wrap(self, a: Any) -> Any:
        import jax

        if isinstance(a, np.ndarray):
            return jax.numpy.asarray(a)
        if hasattr(a, "__dlpack__"):  # CuPy: zero-copy
            return jax.dlpack.from_dlpack(a)
        return jax.numpy.asarray(self.to_host(a))  # numba arrays speak no DLPack: through the host


class _CupyScalars(Sequence[Any]):
    """The 0-d views of a CuPy float64 chunk, each made when first asked for (about 1 us)."""

    __slots__ = ("chunk", "cp")

    def __init__(self, cp: Any, chunk: Any) -> None:
        self.cp, self.chunk = cp, chunk

    def __len__(self) -> int:
        return int(self.chunk.size)

    def __getitem__(self, k: Any) -> Any:
        return self.cp.ndarray((), np.float64, self.chunk.data + 8 * k)


class ScalarPool:
    """Zero-filled float64 device scalars, one handed out per call: the loss a kernel adds into
    (:mod:`vyre.autodiff.handle`) without a zero fill, a copy or an allocation per call. A chunk of
    ``size`` scalars is allocated and zeroed at once; each :meth:`take` gives the next one as a new
    0-d array of the kind, and no scalar is ever given out twice (a chunk lives as long as one of its
    scalars does), so a value returned earlier is never overwritten."""

    __slots__ = ("kind", "next", "ptr", "size", "views")

    def __init__(self, kind: ArrayKind, size: int = 128) -> None:
        self.kind, self.size = kind, size
        self.views: Sequence[Any] = ()
        self.ptr = 0
        self.next = 0

    def take(self) -> tuple[Any, int]:
        """A new zero scalar and its device pointer."""
        k = self.next
        if k >= len(self.views):
            made = self.kind.scalar_chunk(self.size)
            # a pool is only made for kinds with pooled_scalars (vyre/autodiff/handle.py)
            assert made is not None, f"{self.kind.name} arrays have no device scalar"
            self.views, self.ptr = made
            k = 0
        self.next = k + 1
        return self.views[k], self.ptr + 8 * k


NUMPY = ArrayKind()


def kind_of(a: Any) -> ArrayKind:
    """The :class:`ArrayKind` of one array (numpy for anything host-side that is not a framework's)."""
    mod = type(a).__module__.split(".")[0]
    if isinstance(a, np.ndarray):
        return NUMPY
    if mod == "cupy":
        import cupy

        return _cupy_kind(cupy)
    if mod == "torch":
        import torch

        return TorchKind(torch, a.device)
    if mod in ("jax", "jaxlib") and is_dlpack(a):
        return JaxKind(NUMPY if dlpack_device(a) == DL_CPU else _device_kind())
    if hasattr(a, "__cuda_array_interface__"):
        return NumbaKind()
    if is_dlpack(a):
        return NUMPY if dlpack_device(a) == DL_CPU else NumbaKind()
    raise DispatchError(f"cannot work with a {type(a).__name__}: vyre takes numpy arrays, objects with "
                        "__cuda_array_interface__ (CuPy, PyTorch CUDA, numba) and __dlpack__ objects "
                        "(PyTorch, JAX). Fix: convert it, e.g. np.asarray(value)")


def _device_kind() -> ArrayKind:
    """Device buffers for frameworks vyre does not allocate in (JAX): CuPy's, whose arrays export
    DLPack, when CuPy is installed, else numba's."""
    try:
        import cupy
    except ImportError:
        return NumbaKind()
    return _cupy_kind(cupy)


@functools.lru_cache(maxsize=1)
def _cupy_kind(cp: Any) -> CupyKind:
    return CupyKind(cp)


def first_kind(arrays: Any) -> ArrayKind:
    """The kind of the first array in ``arrays`` (an iterable); numpy when there is none."""
    for a in arrays:
        if a is not None:
            return kind_of(a)
    return NUMPY


# -- zero fill on the device: one driver call (a library's fill is a kernel launch, ~5 us of host) --

_memset: Any = None


def device_pointer(a: Any) -> int:
    return int(a.__cuda_array_interface__["data"][0])


def current_stream(a: Any) -> int:
    """The stream vyre's launches and fills use for ``a``: the capture stream inside
    :func:`vyre.graph.capture`, PyTorch's current stream for PyTorch tensors (see
    :mod:`vyre.driver.fast_launch`), else the legacy default stream (0)."""
    if CAPTURE.stream is not None:
        return CAPTURE.stream
    if type(a).__module__.startswith("torch"):
        return fast_launch.torch_stream(a.device.index)
    return 0


def _driver_fn(name: str, argtypes: list[Any]) -> Any:
    """A libcuda entry point: the ``_v2`` symbol where there is one (cuda.h maps the plain name to it;
    the plain symbol is the old 32-bit-pointer ABI)."""
    lib = ctypes.CDLL("libcuda.so.1")
    try:
        fn = getattr(lib, name + "_v2")
    except AttributeError:
        fn = getattr(lib, name)
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def _call_in_context(fn: Any, *args: Any) -> None:
    err = fn(*args)
    if err == CUDA_ERROR_INVALID_CONTEXT:  # a thread without a current context: make numba's current
        from numba import cuda

        cuda.current_context()
        err = fn(*args)
    if err:
        raise DispatchError(f"{fn.__name__} failed (CUDA error {err}). Fix: check the device state")


class DeviceFill:
    """The zero fill of one C-contiguous device array, worked out once: each call is one
    ``cuMemsetD8Async`` on the array's stream (:func:`current_stream`)."""

    __slots__ = ("args", "torch_device")

    def __init__(self, a: Any) -> None:
        global _memset
        if _memset is None:
            _memset = _driver_fn("cuMemsetD8Async", [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t,
                                                     ctypes.c_void_p])
        cai = a.__cuda_array_interface__
        self.args = (int(cai["data"][0]), int(np.prod(cai["shape"])) * np.dtype(cai["typestr"]).itemsize)
        self.torch_device = a.device.index if type(a).__module__.startswith("torch") else None

    def __call__(self) -> None:
        if not self.args[1]:
            return
        if CAPTURE.stream is not None:
            stream: int = CAPTURE.stream
        elif self.torch_device is not None:
            stream = fast_launch.torch_stream(self.torch_device)
        else:
            stream = 0
        _call_in_context(_memset, self.args[0], 0, self.args[1], stream or None)


_memcpy: Any = None


def copy_device_bytes(dst: int, src: int, nbytes: int, stream: int) -> None:
    """``cuMemcpyDtoDAsync`` of ``nbytes`` from device pointer ``src`` to ``dst`` on ``stream``."""
    global _memcpy
    if _memcpy is None:
        _memcpy = _driver_fn("cuMemcpyDtoDAsync", [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t,
                                                   ctypes.c_void_p])
    _call_in_context(_memcpy, dst, src, nbytes, stream or None)


def memset_zero(a: Any) -> None:
    """Zero a C-contiguous device array with ``cuMemsetD8Async`` on its stream (see
    :func:`current_stream`)."""
    DeviceFill(a)()
