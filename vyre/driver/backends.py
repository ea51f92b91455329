"""Backend names, availability probes and the default choice."""

from __future__ import annotations

import functools
import os

from ..errors import DispatchError

BACKENDS = ("cuda", "cpu", "interp", "cudasim")


def simulator_enabled() -> bool:
    # numba reads this once, when numba.cuda is first imported; we read it the same way.
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@functools.cache
def cuda_available() -> bool:
    """A real GPU is usable (not the simulator)."""
    if simulator_enabled():
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # numba-cuda missing or driver broken: no GPU for us
        return False


def default_backend() -> str:
    from ..settings import read_settings

    env = read_settings().backend
    if env is not None:
        return check_backend(env)
    return "cuda" if cuda_available() else "cpu"


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise DispatchError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}. "
                            "Fix: pass backend='cpu' (or set VYRE_BACKEND) to one of those")
    if name == "cudasim" and not simulator_enabled():
        raise DispatchError(
            "backend 'cudasim' needs numba's CUDA simulator, which is chosen when numba.cuda is first "
            "imported. Fix: start the process with NUMBA_ENABLE_CUDASIM=1"
        )
    if name == "cuda" and not cuda_available():
        why = "NUMBA_ENABLE_CUDASIM=1 is set" if simulator_enabled() else "no usable CUDA GPU was found"
        raise DispatchError(f"backend 'cuda' is unavailable: {why}. Fix: use backend='cpu', or run on a "
                            "machine with an NVIDIA GPU and numba-cuda installed (pip install 'vyre[cuda]')")
    return name
