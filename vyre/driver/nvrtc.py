"""NVRTC through ctypes: CUDA C++ to a cubin without numba (the CUDA backend's cold-start route).

``libnvrtc`` is found by ``cuda.pathfinder`` (the NVIDIA wheels PyTorch, CuPy and numba-cuda
install, or a CUDA toolkit); nothing else is imported, so compiling a kernel this way costs the
library load (tens of ms, once) and NVRTC's own compile instead of importing numba (about a
second). :func:`find` says why the library is unusable where it is; callers then take numba's
route (vyre/driver/cuda_route.py).

Options match what numba-cuda asks of NVVM without fast-math: FMA contraction on (NVVM's ``-fma=1``
default, NVRTC's ``--fmad=true``), IEEE division and square root, no flush to zero.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from ..errors import CodegenError

#: what numba-cuda's NVVM compile uses without fastmath (nvvm.py ``compile_ir``: its defaults)
OPTIONS = ("--fmad=true", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "-default-device")


class NvrtcError(CodegenError):
    """NVRTC refused a generated kernel (a bug in vyre's C printer: the log says where)."""


@dataclass(frozen=True)
class Nvrtc:
    lib: ctypes.CDLL
    path: str
    version: tuple[int, int]
    archs: tuple[int, ...]  # the sm_XY values it can compile to

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            msg = self.lib.nvrtcGetErrorString(rc) or b"?"
            raise NvrtcError(f"NVRTC {what} failed: {msg.decode(errors='replace')} (code {rc}). Fix: report this as a "
                             "vyre bug; VYRE_CUDA_COMPILER=numba compiles through numba meanwhile")


_why_not: list[str] = []


@functools.cache
def find() -> Nvrtc | None:
    """The NVRTC library, loaded once; None when there is none usable (:func:`unavailable` says why)."""
    try:
        import cuda.pathfinder as pathfinder
    except ImportError:
        _why_not.append("cuda-pathfinder is not installed (pip install cuda-pathfinder)")
        return None
    try:
        path = pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path
        lib = ctypes.CDLL(path)
        major, minor, n = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
            raise OSError("nvrtcVersion failed")
        if lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) != 0:
            raise OSError("nvrtcGetNumSupportedArchs failed")
        arr = (ctypes.c_int * n.value)()
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        if lib.nvrtcGetSupportedArchs(arr) != 0:
            raise OSError("nvrtcGetSupportedArchs failed")
    except Exception as e:  # pathfinder's not-found errors, OSError from dlopen, a library too old
        _why_not.append(f"libnvrtc could not be loaded ({type(e).__name__}: {e})")
        return None
    return Nvrtc(lib, str(path), (major.value, minor.value), tuple(arr))


def unavailable() -> str | None:
    """Why NVRTC cannot be used here (None: it can)."""
    return None if find() is not None else (_why_not[-1] if _why_not else "libnvrtc was not found")


def compile_cuda(source: str, arch: int, *, name: str = "vyre_kernel.cu", ptx: bool = False) -> bytes:
    """``source`` compiled for ``sm_<arch>``: the cubin, or (``ptx``) the PTX text for ``compute_<arch>``.
    Raises :class:`NvrtcError` with NVRTC's log when it does not compile."""
    nv = find()
    if nv is None:
        raise NvrtcError(f"NVRTC is unavailable: {unavailable()}. Fix: pip install nvidia-cuda-nvrtc, or set "
                         "VYRE_CUDA_COMPILER=numba")
    lib = nv.lib
    prog = ctypes.c_void_p()
    nv.check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
             "nvrtcCreateProgram")
    try:
        opts = [*OPTIONS, f"-arch={'compute' if ptx else 'sm'}_{arch}"]
        c_opts = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
        rc = lib.nvrtcCompileProgram(prog, len(opts), c_opts)
        if rc != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            raise NvrtcError(f"NVRTC could not compile a generated kernel for sm_{arch}:\n"
                             f"{log.value.decode(errors='replace')[-4000:]}\nFix: report this as a vyre bug "
                             "(with the program); VYRE_CUDA_COMPILER=numba compiles it through numba meanwhile")
        what = "PTX" if ptx else "CUBIN"
        size = ctypes.c_size_t()
        nv.check(getattr(lib, f"nvrtcGet{what}Size")(prog, ctypes.byref(size)), f"nvrtcGet{what}Size")
        out = ctypes.create_string_buffer(size.value)
        nv.check(getattr(lib, f"nvrtcGet{what}")(prog, out), f"nvrtcGet{what}")
        data = out.raw
        return data.rstrip(b"\0") if ptx else data
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
