"""DLPack: arrays of other frameworks (PyTorch, JAX, numpy, ...) bound without copies.

``dispatch`` accepts any object with ``__dlpack__`` and ``__dlpack_device__``. Host (CPU) objects
become numpy arrays through ``np.from_dlpack`` (zero-copy: a PyTorch CPU tensor written by a kernel
is written in place). CUDA objects that have no ``__cuda_array_interface__`` (JAX arrays) are
imported here: the capsule is opened with ctypes and wrapped in a :class:`DLPackView`, a
plain ``__cuda_array_interface__`` view that keeps the capsule's tensor alive until the view dies.
The producer is asked for the capsule on the legacy default stream (``stream=1``), the stream
vyre's launches use, so it orders its pending work before ours (the DLPack stream contract).

Only what DLPack describes is read: the data pointer, device, dtype, shape, strides and byte
offset. DLPack before 1.0 carries no read-only flag, so writability is the producer's contract:
JAX arrays are immutable, and a program that writes into one is rejected (:func:`is_immutable`).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..errors import DispatchError, VyreError

# DLDeviceType codes (dlpack.h)
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
# DLDataTypeCode (dlpack.h): int, uint, float, ..., bool
_DL_KIND = {0: "i", 1: "u", 2: "f", 6: "b"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


def is_dlpack(obj: Any) -> bool:
    """Does ``obj`` speak DLPack (and is not already a numpy array or a CUDA-array-interface object)?"""
    return hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__") and not isinstance(obj, np.ndarray)


def dlpack_device(obj: Any) -> int:
    """The DLPack device type of ``obj`` (``DL_CPU``, ``DL_CUDA``, ...)."""
    return int(obj.__dlpack_device__()[0])


def is_immutable(obj: Any) -> bool:
    """Arrays whose framework promises they never change (JAX): vyre must not write into them."""
    return type(obj).__module__.split(".")[0] in ("jax", "jaxlib")


def check_not_traced(obj: Any, name: str, err: type[VyreError] = DispatchError) -> None:
    """Refuse a value being traced by a JIT (``jax.jit``): it has no data to run a kernel on."""
    t = type(obj)
    if "Tracer" in t.__name__ and t.__module__.split(".")[0] in ("jax", "jaxlib"):
        raise err(f"buffer {name!r} is a JAX tracer: vyre kernels run on concrete arrays and cannot be traced "
                  "by jax.jit (an XLA custom call would be needed). Fix: call vyre outside jax.jit on concrete "
                  "arrays, or wrap the call in jax.pure_callback (host arrays)")


def host_view(obj: Any, name: str, err: type[VyreError] = DispatchError) -> np.ndarray:
    """A zero-copy numpy view of a host DLPack object (a PyTorch CPU tensor, a JAX CPU array)."""
    try:
        return np.from_dlpack(obj)
    except (BufferError, TypeError, RuntimeError, ValueError) as e:
        raise err(f"buffer {name!r}: could not import the {type(obj).__name__} through DLPack ({e}). "
                  "Fix: pass a plain tensor (PyTorch: tensor.detach()) of a numpy-supported dtype") from e


class DLPackView:
    """An array imported from a DLPack capsule, described by ``__cuda_array_interface__``.

    It owns the capsule's ``DLManagedTensor`` and calls its deleter when it dies, so the producer's
    memory stays valid exactly as long as this view. ``device_type`` is the DLPack device."""

    __slots__ = ("__cuda_array_interface__", "__weakref__", "_managed", "device_type", "source")

    def __init__(self, obj: Any, name: str) -> None:
        self._managed: Any = None
        try:
            # CUDA producers order their pending work before the consumer's stream (1: legacy default)
            capsule = obj.__dlpack__(stream=1) if dlpack_device(obj) != DL_CPU else obj.__dlpack__()
        except (BufferError, TypeError, RuntimeError, ValueError) as e:
            raise DispatchError(f"buffer {name!r}: could not export the {type(obj).__name__} through DLPack "
                                f"({e}). Fix: pass a contiguous device array") from e
        if not _api.PyCapsule_IsValid(capsule, b"dltensor"):
            raise DispatchError(f"buffer {name!r}: the DLPack capsule of the {type(obj).__name__} is not an "
                                "unused 'dltensor'. Fix: pass the array itself, not a capsule")
        ptr = _api.PyCapsule_GetPointer(capsule, b"dltensor")
        # we own the tensor now: the capsule's own destructor must not free it a second time
        _api.PyCapsule_SetName(capsule, b"used_dltensor")
        managed = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor))
        self._managed = managed
        self.source = obj
        t = managed.contents.dl_tensor
        self.device_type = int(t.device.device_type)
        kind = _DL_KIND.get(int(t.dtype.code))
        if kind is None or t.dtype.lanes != 1:
            raise DispatchError(f"buffer {name!r}: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
                                f"{t.dtype.lanes} lanes) has no vyre element type. Fix: convert it first")
        dt = np.dtype(f"{kind}{t.dtype.bits // 8}") if kind != "b" else np.dtype(bool)
        shape = tuple(int(t.shape[i]) for i in range(t.ndim))
        strides = None if not t.strides else tuple(int(t.strides[i]) * dt.itemsize for i in range(t.ndim))
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": dt.str, "data": (int(t.data or 0) + int(t.byte_offset), False),
            "strides": strides, "version": 3, "stream": None,
        }

    def __del__(self) -> None:
        m = getattr(self, "_managed", None)
        if m is not None and m.contents.deleter:
            m.contents.deleter(m)
            self._managed = None


def device_view(obj: Any, name: str) -> DLPackView:
    """Import a CUDA DLPack object (see :class:`DLPackView`) for a CUDA launch."""
    view = DLPackView(obj, name)
    if view.device_type not in (DL_CUDA, DL_CUDA_MANAGED):
        raise DispatchError(f"buffer {name!r}: a {type(obj).__name__} on DLPack device type {view.device_type} "
                            "cannot be bound on the CUDA backend. Fix: move it to the GPU, or dispatch with "
                            "backend='cpu'")
    return view
