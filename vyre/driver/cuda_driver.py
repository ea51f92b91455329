"""libcuda through ctypes: the few driver calls a cached CUDA kernel needs, without numba.

A process whose kernels all come from the binary cache (vyre/driver/cuda_binary.py) does not need
numba at all: it needs the driver (``cuInit``), the device's *primary* context made current on the
thread (``cuDevicePrimaryCtxRetain`` + ``cuCtxSetCurrent``: the very context numba, CuPy and
PyTorch use, so device pointers of any of them are valid in it and theirs in ours), the cubin
loaded into it (``cuModuleLoadData``, ``cuModuleGetFunction``), device memory for host arrays
(``cuMemAlloc``/``cuMemcpy*``/``cuMemFree``) and the launch (vyre/driver/fast_launch.py's
``cuLaunchKernelEx``). Importing numba.cuda costs about half a second; this module costs the
``dlopen`` of libcuda.

:class:`Driver` wraps a library object whose attributes are the driver's C functions: the real
``ctypes.CDLL("libcuda.so.1")``, or in tests ctypes callbacks of the same prototypes (a fake
driver, so the argument marshalling and the error paths are exercised without a GPU). Every
failing call raises :class:`CudaDriverError` naming the call and the driver's error.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import DispatchError

__all__ = ["CudaDriverError", "Driver", "PROTOTYPES", "driver", "probe"]

_p = ctypes.POINTER
_int, _uint, _size, _u64, _vp = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_void_p

#: name -> argument types of every driver entry point used here (all return ``CUresult``, an int).
#: ``CUdevice`` is an int, ``CUdeviceptr`` a 64-bit integer, contexts/modules/functions/streams are
#: opaque pointers.
PROTOTYPES: Mapping[str, tuple[Any, ...]] = {
    "cuInit": (_uint,),
    "cuDriverGetVersion": (_p(_int),),
    "cuDeviceGetCount": (_p(_int),),
    "cuDeviceGet": (_p(_int), _int),
    "cuDeviceGetAttribute": (_p(_int), _int, _int),
    "cuDeviceGetName": (ctypes.c_char_p, _int, _int),
    "cuDevicePrimaryCtxRetain": (_p(_vp), _int),
    "cuCtxGetCurrent": (_p(_vp),),
    "cuCtxSetCurrent": (_vp,),
    "cuCtxGetDevice": (_p(_int),),
    "cuModuleLoadData": (_p(_vp), ctypes.c_char_p),
    "cuModuleGetFunction": (_p(_vp), _vp, ctypes.c_char_p),
    "cuMemAlloc_v2": (_p(_u64), _size),
    "cuMemFree_v2": (_u64,),
    "cuMemcpyHtoD_v2": (_u64, _vp, _size),
    "cuMemcpyDtoH_v2": (_vp, _u64, _size),
    "cuStreamSynchronize": (_vp,),
    "cuPointerGetAttribute": (_vp, _int, _u64),
    "cuGetErrorName": (_int, _p(ctypes.c_char_p)),
}

CUDA_SUCCESS = 0
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_STREAM_LEGACY = 1


class CudaDriverError(DispatchError):
    """A CUDA driver call failed (``code`` is its ``CUresult``)."""

    def __init__(self, call: str, code: int, name: str, fix: str) -> None:
        super().__init__(f"the CUDA driver call {call} failed with {name} ({code}). Fix: {fix}")
        self.call, self.code = call, code


class Driver:
    """The driver entry points of ``lib`` (``ctypes.CDLL("libcuda.so.1")`` or a fake with the same
    attributes), typed once; the methods raise :class:`CudaDriverError` on failure."""

    def __init__(self, lib: Any, typed: bool = True) -> None:
        self._fns: dict[str, Callable[..., int]] = {}
        for name, argtypes in PROTOTYPES.items():
            fn = getattr(lib, name)
            if typed:  # a CDLL's functions learn their prototypes; ctypes callbacks already have one
                fn.argtypes = argtypes
                fn.restype = ctypes.c_int
            self._fns[name] = fn
        self._primary: dict[int, int] = {}  # device -> its primary context (retained once)
        self._lock = threading.Lock()
        self._initialised = False

    # -- plumbing --

    def _call(self, name: str, *args: Any, fix: str = "check that the GPU and its driver work (nvidia-smi)") -> None:
        err = int(self._fns[name](*args))
        if err != CUDA_SUCCESS:
            raise CudaDriverError(name, err, self.error_name(err), fix)

    def error_name(self, code: int) -> str:
        s = ctypes.c_char_p()
        try:
            if int(self._fns["cuGetErrorName"](code, ctypes.byref(s))) == CUDA_SUCCESS and s.value:
                return s.value.decode(errors="replace")
        except Exception:  # an error while naming an error: the number still says it
            pass
        return f"CUDA error {code}"

    def init(self) -> None:
        if not self._initialised:
            self._call("cuInit", 0, fix="check the NVIDIA driver installation (nvidia-smi), or use backend='cpu'")
            self._initialised = True

    # -- devices --

    def version(self) -> tuple[int, int]:
        """The driver's CUDA version as (major, minor), numba's ``driver.get_version()``."""
        v = _int()
        self._call("cuDriverGetVersion", ctypes.byref(v))
        return v.value // 1000, (v.value % 1000) // 10

    def device_count(self) -> int:
        self.init()
        n = _int()
        self._call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def _device(self, ordinal: int) -> int:
        d = _int()
        self._call("cuDeviceGet", ctypes.byref(d), ordinal,
                   fix=f"pass a device below {self.device_count()} (the GPUs this process sees)")
        return d.value

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        self.init()
        dev = self._device(ordinal)
        major, minor = _int(), _int()
        self._call("cuDeviceGetAttribute", ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        self._call("cuDeviceGetAttribute", ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        return major.value, minor.value

    def name(self, ordinal: int) -> str:
        self.init()
        buf = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", buf, len(buf), self._device(ordinal))
        return buf.value.decode(errors="replace")

    # -- contexts --

    def current_context(self) -> int:
        """The context current on this thread (0: none)."""
        self.init()
        c = _vp()
        self._call("cuCtxGetCurrent", ctypes.byref(c))
        return int(c.value or 0)

    def primary_context(self, ordinal: int) -> int:
        """Device ``ordinal``'s primary context, retained once per process (never released: numba,
        CuPy and PyTorch share it, and it lives as long as the process)."""
        ctx = self._primary.get(ordinal)
        if ctx is None:
            with self._lock:
                ctx = self._primary.get(ordinal)
                if ctx is None:
                    self.init()
                    c = _vp()
                    self._call("cuDevicePrimaryCtxRetain", ctypes.byref(c), self._device(ordinal))
                    ctx = self._primary[ordinal] = int(c.value or 0)
        return ctx

    def current_device(self) -> int:
        """The device of this thread's current context, else 0 (what numba makes current first)."""
        if not self.current_context():
            return 0
        d = _int()
        self._call("cuCtxGetDevice", ctypes.byref(d))
        return d.value

    def thread_device(self) -> int | None:
        """Make sure this thread has a current context and return its device: the primary context
        of device 0 is made current when there is none (as numba does). None when the current
        context is not its device's primary one (a context someone created for themselves:
        numba refuses it too)."""
        cur = self.current_context()
        if not cur:
            ctx = self.primary_context(0)
            self._call("cuCtxSetCurrent", _vp(ctx))
            return 0
        d = _int()  # the current context is known: its device without asking for the context again
        self._call("cuCtxGetDevice", ctypes.byref(d))
        return d.value if self.primary_context(d.value) == cur else None

    # -- modules --

    def load_module(self, image: bytes) -> int:
        """Load a cubin into the current context."""
        m = _vp()
        self._call("cuModuleLoadData", ctypes.byref(m), image,
                   fix="the cached binary does not fit this GPU or driver: it is deleted and compiled again")
        return int(m.value or 0)

    def module_function(self, module: int, entry: str) -> int:
        f = _vp()
        self._call("cuModuleGetFunction", ctypes.byref(f), _vp(module), entry.encode(),
                   fix="the cached binary lacks its kernel: it is deleted and compiled again")
        return int(f.value or 0)

    # -- memory --

    def alloc(self, nbytes: int) -> int:
        """``nbytes`` of device memory in the current context (0 for 0 bytes)."""
        if nbytes <= 0:
            return 0
        p = _u64()
        self._call("cuMemAlloc_v2", ctypes.byref(p), nbytes,
                   fix="free device memory, or dispatch smaller arrays")
        return int(p.value)

    def free(self, ptr: int) -> None:
        if ptr:
            self._call("cuMemFree_v2", _u64(ptr))

    def to_device(self, dst: int, src: int, nbytes: int) -> None:
        """Copy host memory at ``src`` to device memory at ``dst`` (synchronous, legacy stream)."""
        if nbytes > 0:
            self._call("cuMemcpyHtoD_v2", _u64(dst), _vp(src), nbytes)

    def to_host(self, dst: int, src: int, nbytes: int) -> None:
        """Copy device memory at ``src`` to host memory at ``dst`` (waits for the legacy stream's work)."""
        if nbytes > 0:
            self._call("cuMemcpyDtoH_v2", _vp(dst), _u64(src), nbytes,
                       fix="check the device state: a kernel may have faulted")

    def synchronize(self, stream: int) -> None:
        """Wait for the work queued on ``stream`` (a ``CUstream``; 1: the legacy default stream)."""
        self._call("cuStreamSynchronize", _vp(stream or None),
                   fix="check the device state: a kernel may have faulted")

    def pointer_device(self, ptr: int) -> int | None:
        """The device that owns device pointer ``ptr`` (None: the driver does not know it)."""
        self.init()
        d = _int()
        err = int(self._fns["cuPointerGetAttribute"](ctypes.byref(d), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                       _u64(ptr)))
        return d.value if err == CUDA_SUCCESS else None


_driver: Driver | None = None
_probed: bool | None = None
_lock = threading.Lock()


def driver() -> Driver:
    """The process's :class:`Driver` over libcuda (OSError when there is no libcuda)."""
    global _driver
    if _driver is None:
        with _lock:
            if _driver is None:
                _driver = Driver(ctypes.CDLL("libcuda.so.1"))
    return _driver


def probe() -> bool:
    """Does the driver initialise and see at least one GPU? Cached; never raises."""
    global _probed
    if _probed is None:
        try:
            _probed = driver().device_count() > 0
        except (OSError, AttributeError, DispatchError):  # no libcuda, an ancient one, no device
            _probed = False
    return _probed


def install(drv: Driver | None) -> Driver | None:
    """Use ``drv`` as the process's driver (tests: a fake one; None: libcuda again on next use).
    Returns the previous one."""
    global _driver, _probed
    previous, _driver, _probed = _driver, drv, None
    return previous
