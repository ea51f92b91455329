"""A fake libcuda for tests without a GPU: ctypes callbacks behind foreign function pointers.

Each driver entry point of vyre/driver/cuda_driver.py is a Python function wrapped as a C callback
(with the C prototype of the real call) and exposed as a plain foreign function pointer, so
:class:`vyre.driver.cuda_driver.Driver` types and calls it exactly as it does the real
``libcuda.so.1``: the argument marshalling (out-pointers, 64-bit device pointers, byte images)
is the real one. "Device memory" is host memory (ctypes buffers), so device pointers can be
read back; a "cubin" is ``FAKECUBN | u32 length | JSON {"entries": [...]}``; launches go through a
fake ``cuLaunchKernelEx`` that decodes numba's argument ABI and calls a Python kernel registered
per entry name.
"""

from __future__ import annotations

import ctypes
import json
import struct
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from vyre.driver.cuda_driver import PROTOTYPES, Driver
from vyre.driver.fast_launch import LaunchConfig, Launcher

MAGIC = b"FAKECUBN"
ERRORS = {1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 100: "CUDA_ERROR_NO_DEVICE",
          101: "CUDA_ERROR_INVALID_DEVICE", 200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT",
          500: "CUDA_ERROR_NOT_FOUND", 700: "CUDA_ERROR_ILLEGAL_ADDRESS"}


def fake_cubin(*entries: str) -> bytes:
    payload = json.dumps({"entries": list(entries)}).encode()
    return MAGIC + struct.pack("<I", len(payload)) + payload


def seed_cubins(entry: str) -> None:
    """Make the binary cache's lookups of CUDA kernels find a fake cubin holding ``entry``, written
    at the first lookup of each key (what an earlier process would have left), so a dispatch takes
    the no-numba cubin path through the fake driver."""
    from vyre.driver import binary_cache, cuda_binary

    read = binary_cache.read

    def leave_one(backend: str, key: str) -> binary_cache.Record | None:
        if backend == "cuda" and not binary_cache.path_for(backend, key).exists():
            meta = {"entry": entry, "flat": True, "format": cuda_binary.CUDA_BINARY_VERSION}
            binary_cache.write(backend, binary_cache.Record(key, meta, {cuda_binary.CUBIN: fake_cubin(entry)}))
        return read(backend, key)

    binary_cache.read = leave_one  # type: ignore[assignment]


class Array:
    """A numpy view of ``n`` elements at a (fake) device pointer."""

    @staticmethod
    def at(ptr: int, n: int, itemsize: int, dtype: Any) -> np.ndarray:
        if n == 0:
            return np.empty(0, dtype)
        buf = (ctypes.c_char * (n * itemsize)).from_address(ptr)
        return np.frombuffer(buf, dtype=dtype, count=n)


class FakeCuda:
    """The fake driver's state: devices, contexts, memory, modules, launches and calls made."""

    def __init__(self, devices: int = 1, cc: tuple[int, int] = (9, 0), init_status: int = 0) -> None:
        self.devices, self.cc, self.init_status = devices, cc, init_status
        self.memory: dict[int, Any] = {}  # device pointer -> its ctypes buffer
        self.modules: dict[int, list[str]] = {}
        self.functions: dict[int, str] = {}
        self.kernels: dict[str, Callable[..., None]] = {}  # entry -> python kernel
        self.dtypes: dict[str, list[Any]] = {}  # entry -> dtype of each array argument
        self.scalars: dict[str, int] = {}  # entry -> how many scalar arguments follow the arrays
        self.launches: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.fail: dict[str, int] = {}  # driver call -> the error it returns
        self.retained: list[int] = []
        self.synced: list[int] = []
        # exceptions raised inside the C callbacks: ctypes would only print them, so each is kept
        # here and the call fails (the tests assert this stays empty)
        self.errors: list[BaseException] = []
        self._current = threading.local()
        self._names = {code: ctypes.c_char_p(name.encode()) for code, name in ERRORS.items()}
        self._keep: list[Any] = []
        self.lib = SimpleNamespace(**{name: self._fn(name, argtypes) for name, argtypes in PROTOTYPES.items()})
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        self._launch_cb = proto(self._caught_launch)
        self.launcher = Launcher(self._launch_cb, True)

    def driver(self) -> Driver:
        return Driver(self.lib)

    def register(self, entry: str, dtypes: list[Any], scalars: int, fn: Callable[..., None]) -> None:
        """``fn(arrays, scalars, launch)`` runs when ``entry`` is launched (arrays as numpy views of
        the device memory, scalars as ints)."""
        self.kernels[entry], self.dtypes[entry] = fn, [np.dtype(d) for d in dtypes]
        self.scalars[entry] = scalars

    def device_ptr(self, data: np.ndarray) -> int:
        """Make ``data``'s memory count as device memory (a CAI array's pointer)."""
        return int(data.ctypes.data)

    # -- the C side --

    def _fn(self, name: str, argtypes: tuple[Any, ...]) -> Any:
        # char* arguments arrive as addresses (a c_char_p callback argument would stop at a NUL)
        cargs = tuple(ctypes.c_void_p if t is ctypes.c_char_p else t for t in argtypes)
        impl = getattr(self, "_" + name)

        def call(*args: Any) -> int:
            self.calls.append(name)
            if name in self.fail:
                return self.fail[name]
            try:
                return int(impl(*args))
            except BaseException as e:
                self.errors.append(e)
                return 999  # CUDA_ERROR_UNKNOWN

        cb = ctypes.CFUNCTYPE(ctypes.c_int, *cargs)(call)
        self._keep.append(cb)
        # a plain foreign function pointer, as CDLL hands out: the Driver sets its prototype
        return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(cb, ctypes.c_void_p).value)

    def _cuInit(self, flags: int) -> int:
        return self.init_status

    def _cuDriverGetVersion(self, p: Any) -> int:
        p[0] = 12040
        return 0

    def _cuDeviceGetCount(self, p: Any) -> int:
        p[0] = self.devices
        return 0

    def _cuDeviceGet(self, p: Any, ordinal: int) -> int:
        if not 0 <= ordinal < self.devices:
            return 101
        p[0] = ordinal
        return 0

    def _cuDeviceGetAttribute(self, p: Any, attr: int, dev: int) -> int:
        if attr not in (75, 76):
            return 1
        p[0] = self.cc[0] if attr == 75 else self.cc[1]
        return 0

    def _cuDeviceGetName(self, buf: int, size: int, dev: int) -> int:
        name = f"Fake GPU {dev}".encode()[: size - 1] + b"\0"
        ctypes.memmove(buf, name, len(name))
        return 0

    def _cuDevicePrimaryCtxRetain(self, p: Any, dev: int) -> int:
        self.retained.append(dev)
        p[0] = 0x1000 + dev
        return 0

    def current(self) -> int:
        return int(getattr(self._current, "ctx", 0))

    def _cuCtxGetCurrent(self, p: Any) -> int:
        p[0] = self.current() or None
        return 0

    def _cuCtxSetCurrent(self, ctx: int | None) -> int:
        self._current.ctx = ctx or 0
        return 0

    def _cuCtxGetDevice(self, p: Any) -> int:
        ctx = self.current()
        if not ctx:
            return 201
        p[0] = ctx - 0x1000 if 0x1000 <= ctx < 0x1000 + self.devices else 0
        return 0

    def _cuModuleLoadData(self, p: Any, image: int) -> int:
        if not self.current():
            return 201
        if ctypes.string_at(image, len(MAGIC)) != MAGIC:
            return 200
        (n,) = struct.unpack("<I", ctypes.string_at(image + len(MAGIC), 4))
        try:
            entries = json.loads(ctypes.string_at(image + len(MAGIC) + 4, n))["entries"]
        except (ValueError, KeyError):
            return 200
        handle = 0x5000 + len(self.modules)
        self.modules[handle] = entries
        p[0] = handle
        return 0

    def _cuModuleGetFunction(self, p: Any, module: int, name: int) -> int:
        entry = ctypes.string_at(name).decode()
        if entry not in self.modules.get(module or 0, []):
            return 500
        handle = 0x9000 + len(self.functions)
        self.functions[handle] = entry
        p[0] = handle
        return 0

    def _cuMemAlloc_v2(self, p: Any, size: int) -> int:
        buf = ctypes.create_string_buffer(size)
        ptr = ctypes.addressof(buf)
        self.memory[ptr] = buf
        p[0] = ptr
        return 0

    def _cuMemFree_v2(self, ptr: int) -> int:
        return 0 if self.memory.pop(ptr, None) is not None else 1

    def _cuMemcpyHtoD_v2(self, dst: int, src: int, n: int) -> int:
        ctypes.memmove(dst, src, n)
        return 0

    def _cuMemcpyDtoH_v2(self, dst: int, src: int, n: int) -> int:
        ctypes.memmove(dst, src, n)
        return 0

    def _cuStreamSynchronize(self, stream: int | None) -> int:
        self.synced.append(int(stream or 0))
        return 0

    def _cuPointerGetAttribute(self, data: int, attr: int, ptr: int) -> int:
        if attr != 9:
            return 1
        ctypes.c_int.from_address(data).value = 0
        return 0

    def _cuGetErrorName(self, code: int, p: Any) -> int:
        name = self._names.get(code)
        if name is None:
            return 1
        p[0] = name
        return 0

    def _caught_launch(self, cfg: int, func: int, params: int, extra: int | None) -> int:
        try:
            return self._launch(cfg, func, params, extra)
        except BaseException as e:  # a failed ABI check or kernel assert: kept, and the launch fails
            self.errors.append(e)
            return 719  # CUDA_ERROR_LAUNCH_FAILED

    def _launch(self, cfg: int, func: int, params: int, extra: int | None) -> int:
        c = LaunchConfig.from_address(cfg)
        entry = self.functions.get(func)
        if entry is None:
            return 400  # CUDA_ERROR_INVALID_HANDLE
        dtypes = self.dtypes[entry]
        n_slots = 7 * len(dtypes) + self.scalars[entry]
        slots = (ctypes.c_void_p * n_slots).from_address(params)
        vals = [ctypes.c_int64.from_address(int(slots[k])).value for k in range(n_slots)]
        arrays = []
        for k, dt in enumerate(dtypes):
            meminfo, parent, n, item, ptr, shape, stride = vals[7 * k:7 * k + 7]
            assert (meminfo, parent, shape, stride) == (0, 0, n, item) and item == dt.itemsize
            arrays.append(Array.at(ptr, n, item, dt))
        launch = {"entry": entry, "grid": (c.grid_x, c.grid_y, c.grid_z), "block": (c.block_x, c.block_y, c.block_z),
                  "stream": c.stream or 0, "params": vals}
        self.launches.append(launch)
        self.kernels[entry](arrays, vals[7 * len(dtypes):], launch)
        return 0


class FakeDeviceArray:
    """A CAI array over host memory the fake driver treats as device memory."""

    def __init__(self, data: np.ndarray, readonly: bool = False, stream: int | None = None) -> None:
        self.data = data
        self.shape = data.shape
        self.dtype = data.dtype
        self.__cuda_array_interface__ = {"data": (int(data.ctypes.data), readonly), "shape": data.shape,
                                         "typestr": data.dtype.str, "version": 3, "strides": None,
                                         "stream": stream}
