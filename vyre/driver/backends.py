"""Backend names, availability probes and the default choice."""

from __future__ import annotations

import functools

from ..errors import DispatchError
from ..settings import _RAW_BACKEND_KEY, _RAW_ENV, backend_setting, cuda_simulator

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
    """``default_backend() == "cpu"`` without naming an unset backend: True when ``VYRE_BACKEND``
    is unset and no GPU is usable (a set ``VYRE_BACKEND`` answers False: ask
    :func:`default_backend`, which checks it). Every op call on numpy arrays asks this, at the
    cost of one dict lookup and one cached call."""
    return _RAW_BACKEND_KEY not in _RAW_ENV and not cuda_available()  # type: ignore[operator]


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
