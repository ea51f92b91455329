"""Backend names, availability probes and the default choice."""

from __future__ import annotations

import functools
import os

from ..errors import DispatchError
from ..settings import _RAW_BACKEND_KEY, _RAW_ENV, _backend_name, backend_setting, cuda_simulator

BACKENDS = ("cuda", "cpu", "interp", "cudasim")


def simulator_enabled() -> bool:
    # numba reads this once, when numba.cuda is first imported; we read it the same way.
    return cuda_simulator()


@functools.cache
def cuda_available() -> bool:
    """A real GPU is usable (not the simulator): numba-cuda is installed and the driver (asked
    through ctypes, vyre/driver/cuda_driver.py, without importing numba: a process whose kernels
    come from the binary cache never needs it) sees a GPU. NVVM, which only compiling needs, is
    checked when a kernel is compiled."""
    if simulator_enabled():
        return False
    import importlib.util

    if importlib.util.find_spec("numba_cuda") is None:
        return False
    from .cuda_driver import probe

    return probe()


def default_backend() -> str:
    env = backend_setting()
    if env is not None:
        return check_backend(env)
    return "cuda" if cuda_available() else "cpu"


def default_is_cpu() -> bool:
    """``default_backend() == "cpu"``, without checking a named backend: True when ``VYRE_BACKEND``
    names the CPU, or is unset (or empty) and no GPU is usable. Every op call on numpy arrays
    without ``backend=`` asks this: one dict lookup and one cached call (with ``VYRE_BACKEND=cpu``
    it had answered False, which sent every such call down the checked path, 3-5 us more)."""
    raw = _RAW_ENV.get(_RAW_BACKEND_KEY)  # type: ignore[attr-defined]
    return not cuda_available() if raw is None else _names_cpu(raw)


@functools.lru_cache(maxsize=8)
def _names_cpu(raw: str | bytes) -> bool:
    """Does this raw ``VYRE_BACKEND`` value (bytes on POSIX) make the CPU the default backend?"""
    name = _backend_name(os.fsdecode(raw))
    return not cuda_available() if name is None else name == "cpu"


def check_backend(name: str) -> str:
    """``name`` if it names a backend usable here, else a DispatchError saying why (the backend
    object's own reason, vyre/driver/backend.py)."""
    if not isinstance(name, str) or name not in BACKENDS:
        raise DispatchError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}. "
                            "Fix: pass backend='cpu' (or set VYRE_BACKEND) to one of those")
    from .backend import backend  # imports this module

    why = backend(name).unavailable()
    if why is not None:
        raise DispatchError(why)
    return name
