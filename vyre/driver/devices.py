"""Which GPU a dispatch runs on: the device its arrays live on, or ``device=``.

A CUDA dispatch runs on the device that holds its device arrays (CuPy's ``.device``, PyTorch's
``.device``, or, for any other ``__cuda_array_interface__`` object, the driver's answer for the
pointer). Arrays on two devices, or arrays on another device than ``device=``, are a
:class:`DispatchError`: vyre never copies between devices behind the caller's back. Host arrays
follow the device: they are copied to it and back. Kernels are loaded once per device (numba keeps
one module per context); the cached launch path serves the thread's current device only, other
devices take the checked path inside their context.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import DispatchError
from .geometry import is_int


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device that owns device pointer ``ptr`` (None when the driver cannot say)."""
    from .cuda_driver import driver

    try:
        return driver().pointer_device(ptr)
    except Exception:  # no driver: the caller falls back to the current device
        return None


def array_device(obj: Any) -> int | None:
    """The CUDA device ordinal of a device array; None for host arrays (and the simulator's)."""
    if isinstance(obj, np.ndarray) or not hasattr(obj, "__cuda_array_interface__"):
        return None
    dev = getattr(obj, "device", None)
    for attr in ("id", "index"):  # CuPy's Device.id, torch.device.index
        v = getattr(dev, attr, None)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return int(v)
    ptr = obj.__cuda_array_interface__["data"][0]
    return pointer_device(int(ptr)) if ptr else None


def inputs_device(inputs: Mapping[str, Any], device: int | None = None) -> int | None:
    """The one device the device arrays of ``inputs`` live on (or ``device``, checked against
    them); None when there are no device arrays and no ``device``."""
    if device is not None and (not is_int(device) or device < 0):
        raise DispatchError(f"device must be a CUDA device ordinal (an int >= 0), got {device!r}. "
                            "Fix: pass device=0, 1, ...")
    seen: dict[int, str] = {}
    for name, obj in inputs.items():
        d = array_device(obj)
        if d is not None and d not in seen:
            seen[d] = name
    if len(seen) > 1:
        where = ", ".join(f"{n!r} on GPU {d}" for d, n in sorted(seen.items()))
        raise DispatchError(f"the device arrays live on different GPUs ({where}); one dispatch runs on one "
                            "device. Fix: move them to one device first (cupy: `with cupy.cuda.Device(i): "
                            "cupy.asarray(a)`; torch: `t.to('cuda:i')`), or split the work with vyre.dask")
    if device is not None:
        if seen and device not in seen:
            d, n = next(iter(seen.items()))
            raise DispatchError(f"device={device} was asked for, but {n!r} lives on GPU {d}. "
                                f"Fix: pass device={d}, or move the arrays to GPU {device}")
        return int(device)
    return next(iter(seen), None)


def current_device() -> int:
    """The ordinal of the calling thread's current CUDA device: its current context's (numba's,
    CuPy's and PyTorch's are the primary contexts), else 0, the one numba would make current.
    Asked of the driver (vyre/driver/cuda_driver.py), without numba."""
    from .cuda_driver import driver

    return driver().current_device()


@contextmanager
def on_device(device: int) -> Iterator[None]:
    """Make ``device`` current on this thread for the block (numba's primary context of it)."""
    from numba import cuda

    if device >= len(cuda.gpus):
        raise DispatchError(f"GPU {device} does not exist: this machine has {len(cuda.gpus)}. "
                            f"Fix: pass a device below {len(cuda.gpus)}")
    with cuda.gpus[device]:
        yield


_cu: Any = None  # cuda.bindings.driver, imported once (an import statement per call costs about 0.5 us)


def current_ordinal() -> int | None:
    """The ordinal of the device whose context is current on this thread, from the driver (about a
    microsecond; numba's :func:`current_device` costs more), or None (no context, no driver)."""
    global _cu
    try:
        if _cu is None:
            from cuda.bindings import driver

            _cu = driver
        err, dev = _cu.cuCtxGetDevice()
    except Exception:  # no bindings or no driver
        return None
    return int(dev) if int(err) == 0 else None
