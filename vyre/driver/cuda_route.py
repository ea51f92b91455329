"""Which compiler makes a CUDA kernel, and the NVRTC route's build.

Two routes make the same kernel (the same ABI, the same results):

* ``nvrtc`` (the default where libnvrtc is found, vyre/driver/nvrtc.py): the lowered IR printed as
  CUDA C++ (vyre/codegen/cuda_c.py), compiled by NVRTC straight to a cubin for the device's
  compute capability, loaded by the driver (vyre/driver/cuda_binary.py ``CubinKernel``) and saved
  in the binary cache at once. numba is never imported: a cold first dispatch costs the C printing
  and NVRTC's compile (0.17 s in all with the CUDA context made first, on an H100) instead of
  importing numba and its compile (2.2 s; BENCHMARKS.md, run N2).
* ``numba``: the numba-cuda kernel (vyre/codegen/cuda.py), whose cubin is saved after its first
  launch. Taken when ``VYRE_CUDA_COMPILER=numba``, when NVRTC is missing or cannot compile for the
  device's architecture (:func:`nvrtc_unusable` names the reason), and always by the simulator.

A cached binary of either route is a valid kernel of its program: a process that finds one
(:func:`lookup_keys`, cheap: no library is loaded to compute them) uses it whatever route made it.
"""

from __future__ import annotations

import functools
import warnings
from typing import Literal

from ..settings import read_settings

Route = Literal["nvrtc", "numba"]
ROUTES: tuple[Route, ...] = ("nvrtc", "numba")


@functools.cache
def nvrtc_dist() -> str:
    """The installed NVRTC wheel's version (the NVRTC route's key part, read from metadata without
    loading the library; ``system`` for a toolkit's NVRTC, whose cubins the driver still checks)."""
    from .dispatch import dist_version

    for dist in ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc-cu11"):
        v = dist_version(dist, "nvidia")
        if v != "?":
            return f"{dist}={v}"
    return "system"


def lookup_routes() -> tuple[Route, ...]:
    """Routes whose binary entries a compile may use, preferred first: the forced one, or both."""
    forced = read_settings().cuda_compiler
    return (forced,) if forced is not None else ROUTES


def route_part(route: Route) -> list[str]:
    """Binary key parts of ``route`` besides program, target and toolchain (the numba route's are
    empty: its keys are those it always had)."""
    if route == "numba":
        return []
    from ..codegen.emit import CUDA_C_VERSION

    return ["compiler=nvrtc", f"nvrtc={nvrtc_dist()}", f"cuda-c={CUDA_C_VERSION}"]


def arch_of(cc: str) -> int:
    """``"9.0"`` -> 90."""
    major, minor = cc.split(".")
    return int(major) * 10 + int(minor)


def nvrtc_unusable(cc: str) -> str | None:
    """Why the NVRTC route cannot compile for compute capability ``cc`` here (None: it can)."""
    from . import nvrtc

    nv = nvrtc.find()
    if nv is None:
        return nvrtc.unavailable()
    from .cuda_driver import driver

    drv_major = driver().version()[0]
    if nv.version[0] > drv_major:  # its cubins need a driver of its major version (minor versions are compatible)
        return (f"NVRTC {nv.version[0]}.{nv.version[1]} ({nv.path}) is newer than the driver's CUDA "
                f"{drv_major}; its cubins would not load")
    arch = arch_of(cc)
    if arch not in nv.archs:
        return (f"NVRTC {nv.version[0]}.{nv.version[1]} cannot compile for sm_{arch} (it knows "
                f"{', '.join(f'sm_{a}' for a in nv.archs)})")
    return None


def compile_route(cc: str) -> tuple[Route, str | None]:
    """The route a kernel is compiled by now, and why it is not NVRTC when it is not."""
    forced = read_settings().cuda_compiler
    if forced == "numba":
        return "numba", "VYRE_CUDA_COMPILER=numba"
    why = nvrtc_unusable(cc)
    if why is None:
        return "nvrtc", None
    if forced == "nvrtc":
        warnings.warn(f"VYRE_CUDA_COMPILER=nvrtc, but {why}; compiling through numba instead. Fix: install "
                      "an NVRTC for this GPU (pip install nvidia-cuda-nvrtc) or unset VYRE_CUDA_COMPILER",
                      stacklevel=4)
    return "numba", why
