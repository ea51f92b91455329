"""CUDA kernels kept as cubin: saved after numba's first compile, loaded without compiling again.

numba compiles a CUDA kernel at its first launch (NVVM to PTX, then the driver's linker to cubin:
about 0.5 s on an H100). After that launch :func:`save` writes the linked cubin and the kernel's
entry symbol to the binary cache (vyre/driver/binary_cache.py) under a key that covers the
program, the compute capability and the toolchain. A later ``compile`` that finds it gets a
:class:`CubinKernel`: the cubin is loaded through the driver API alone (vyre/driver/cuda_driver.py:
``cuModuleLoadData`` into the device's primary context, the one numba, CuPy and PyTorch share) and
launched with numba's kernel ABI (vyre/driver/fast_launch.py: per array meminfo, parent, nitems,
itemsize, data, shape, stride, then the scalars), so the checked launch path, the cached launch
path and the launch without numba (vyre/driver/cuda_direct.py) run it exactly as they run
numba's own kernel. A cubin the driver refuses is deleted and the program compiled again
(:func:`ensure_loadable`), never used.

Kernels that need numba's per-module setup (its CUDA runtime, cooperative launches) are not kept.
The NVRTC route (vyre/driver/cuda_route.py) compiles straight to a cubin of the same ABI and
saves it here at once (:func:`save_cubin`), under keys of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..errors import DispatchError
from . import binary_cache

#: Bump when what a CUDA binary entry holds, or how it is launched, changes.
CUDA_BINARY_VERSION = 1
CUBIN = "cubin"


def save(dispatcher: Any, key: str, flat: bool) -> bool:
    """Write the cubin of ``dispatcher`` (numba's CUDA dispatcher, launched once) to the binary
    cache; False when it cannot be kept (several overloads, numba runtime setup, cooperative)."""
    overloads = list(getattr(dispatcher, "overloads", {}).values())
    if len(overloads) != 1:
        return False
    kernel = overloads[0]
    lib = kernel._codelibrary
    if getattr(kernel, "cooperative", False) or lib._setup_functions or lib._teardown_functions:
        return False
    entry = lib._entry_name
    image = lib.get_cubin()
    # numba-cuda hands out raw bytes or, lately, a cuda.core ObjectCode holding them
    wrapped = not isinstance(image, (bytes, bytearray, memoryview))
    code = getattr(image, "code", None) if wrapped else image
    if wrapped and getattr(image, "code_type", "cubin") != "cubin":
        return False
    if not entry or not isinstance(code, (bytes, bytearray, memoryview)) or not code:
        return False
    return save_cubin(key, bytes(code), entry, flat, "numba", object_code=wrapped)


def save_cubin(key: str, cubin: bytes, entry: str, flat: bool, compiler: str, *, object_code: bool = False) -> bool:
    """Write a linked cubin whose kernel ``entry`` takes numba's ABI; ``compiler``: the route that
    made it (vyre/driver/cuda_route.py), kept for ``CubinKernel.compiler``."""
    rec = binary_cache.Record(key, {"entry": entry, "flat": flat, "format": CUDA_BINARY_VERSION,
                                    "object_code": object_code, "compiler": compiler}, {CUBIN: cubin})
    return binary_cache.write("cuda", rec) is not None


def load(key: str) -> tuple[CubinKernel, bool] | None:
    """The kernel of the binary entry ``key`` and whether it is flat, or None (no usable entry;
    an unusable one is deleted)."""
    rec = binary_cache.read("cuda", key)
    if rec is None:
        return None
    entry, flat, cubin = rec.meta.get("entry"), rec.meta.get("flat"), rec.blobs.get(CUBIN)
    if not isinstance(entry, str) or not isinstance(flat, bool) or not cubin \
            or rec.meta.get("format") != CUDA_BINARY_VERSION:
        binary_cache.discard("cuda", key)
        return None
    compiler = rec.meta.get("compiler")
    return CubinKernel(cubin, entry, key, bool(rec.meta.get("object_code")),
                       compiler if isinstance(compiler, str) else "numba"), flat


def _stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of a numba stream (or an int); 0 is the legacy default stream."""
    if stream is None:
        return 0
    h = getattr(stream, "handle", stream)
    h = getattr(h, "value", h)
    return int(h or 0)


#: driver errors that say the image itself is unusable here (CUDA_ERROR_INVALID_VALUE,
#: INVALID_IMAGE, NO_BINARY_FOR_GPU, INVALID_PTX and JIT_COMPILER_NOT_FOUND / UNSUPPORTED_PTX_VERSION
#: for bytes the driver took for PTX, INVALID_SOURCE, NOT_FOUND: the entry symbol is missing): the
#: entry is deleted and the kernel compiled again. Others (memory, a faulted context) are raised.
REFUSED_IMAGE = frozenset({1, 200, 209, 218, 221, 222, 300, 500})


class CubinLoadError(DispatchError):
    """A cached cubin the driver would not load (another GPU or driver than its key says, or a
    damaged image that passed the digest): its entry is deleted and the kernel compiled again."""


class CubinKernel:
    """A cached CUDA kernel, used where numba's dispatcher was: ``k[griddim, blockdim](*args)`` or
    ``k[griddim, blockdim, stream](*args)`` with numba device arrays (or anything with
    ``__cuda_array_interface__``) and int scalars, in the compiled order.

    The cubin is loaded through the driver directly (vyre/driver/cuda_driver.py) into the context
    current on the calling thread: the device's primary context, which numba, CuPy and PyTorch
    share, so the same ``CUfunction`` serves numba's launch path and the one without numba.
    ``rebuild`` (set by the backend) compiles the program afresh when the cubin cannot be loaded."""

    def __init__(self, cubin: bytes, entry: str, key: str, object_code: bool = False,
                 compiler: str = "numba") -> None:
        self.cubin = cubin
        self.compiler = compiler  # the route that compiled it: "numba" or "nvrtc" (vyre/driver/cuda_route.py)
        self.object_code = object_code  # how numba-cuda handed it out; the driver takes the bytes either way
        self.entry = entry
        self.key = key
        self._functions: dict[int, tuple[int, int]] = {}  # context -> (CUmodule, CUfunction), kept loaded
        self._lock = threading.Lock()
        self.rebuild: Callable[[], Any] | None = None

    def handle(self) -> int:
        """The ``CUfunction`` in this thread's current context (the primary context of device 0 is
        made current when there is none), loading the cubin there on first use. A cubin the
        driver refuses raises :class:`CubinLoadError` after deleting its entry."""
        from .cuda_driver import CudaDriverError, driver

        drv = driver()
        ctx = drv.current_context()
        got = self._functions.get(ctx) if ctx else None
        if got is not None:
            return got[1]
        with self._lock:
            if not ctx:
                drv.thread_device()
                ctx = drv.current_context()
            got = self._functions.get(ctx)
            if got is None:
                try:
                    module = drv.load_module(self.cubin)
                    got = (module, drv.module_function(module, self.entry))
                except CudaDriverError as e:
                    if e.code not in REFUSED_IMAGE:
                        raise  # the device's trouble (memory, a faulted kernel), not the cubin's: keep it
                    binary_cache.discard("cuda", self.key)
                    raise CubinLoadError(f"the cached CUDA kernel {self.key} could not be loaded ({e}); its entry "
                                         "was deleted. Fix: dispatch again (it is compiled afresh)") from e
                self._functions[ctx] = got
        return got[1]

    def __getitem__(self, config: tuple[Any, ...]) -> Callable[..., None]:
        griddim, blockdim = config[0], config[1]
        stream = _stream_handle(config[2]) if len(config) > 2 else 0

        def launch(*args: Any) -> None:
            self.launch(_dims(griddim), _dims(blockdim), stream, args)

        return launch

    def launch(self, griddim: tuple[int, int, int], blockdim: tuple[int, int, int], stream: int,
               args: tuple[Any, ...]) -> None:
        from .fast_launch import launch_now, pack, packed_values

        arrays = [a for a in args if hasattr(a, "__cuda_array_interface__")]
        scalars = tuple(int(a) for a in args if not hasattr(a, "__cuda_array_interface__"))
        vals, ptrs = pack(packed_values(arrays, scalars))
        err = launch_now(self.handle(), griddim, blockdim, stream, ptrs)
        del vals  # (kept alive until the launch has read it)
        if err:
            raise DispatchError(f"the CUDA driver refused the launch of a cached kernel (CUDA error {err}). "
                                "Fix: check the device state (a previous kernel may have faulted) and the launch "
                                "shape")


def _dims(d: Any) -> tuple[int, int, int]:
    t = (d,) if isinstance(d, int) else tuple(d)
    x, y, z = (*(int(v) for v in t), 1, 1)[:3]
    return x, y, z


def ensure_loadable(kernel: Any) -> None:
    """Load ``kernel``'s cubin (a :class:`CubinKernel`) in this thread's context now; when the
    driver refuses it, its entry is already deleted and the kernel is compiled afresh through
    the cubin's ``rebuild`` (numba's path, which saves a new entry after its first launch)."""
    fn = getattr(kernel, "_fn", None)
    if not isinstance(fn, CubinKernel):
        return
    try:
        fn.handle()
    except CubinLoadError:
        if fn.rebuild is None:
            raise
        built = fn.rebuild()
        kernel._fn, kernel._source, kernel._save_binary = built.fn, built.source, built.save_binary
        kernel.cache_hit = False
