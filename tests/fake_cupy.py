"""A fake of the few CuPy calls ``vyre.dask.on_gpus`` makes, for tests without a GPU.

"GPU arrays" are NumPy arrays that remember a device ordinal (the calling thread's current
device when they were made, as CuPy's are); ``Device(d).synchronize()`` is logged, so tests can check that a copy from
another GPU waited for it. Device-to-host copies (``runtime.memcpyAsync``), events and pinned
memory run at once and are logged in order (``state["log"]``). The array type's module is not
``cupy``, so Dask treats the arrays as NumPy arrays (its CuPy registrations are never asked for)."""

from __future__ import annotations

import ctypes
import threading
import types
from typing import Any

import numpy as np


class FakeDevice:
    def __init__(self, ordinal: int) -> None:
        self.id = ordinal


class FakeArray(np.ndarray):
    """A NumPy array on a fake GPU (views keep their base's device)."""

    def __array_finalize__(self, obj: Any) -> None:
        self._device = getattr(obj, "_device", None)

    @property
    def device(self) -> FakeDevice:  # type: ignore[override]
        return FakeDevice(-1 if self._device is None else self._device)

    def copy(self, order: Any = "C") -> FakeArray:  # type: ignore[override]
        return _on_current(np.array(self, order=order, copy=True))


def install(monkeypatch: Any, gpus: int) -> types.ModuleType:
    """Put a fake ``cupy`` with ``gpus`` devices into ``sys.modules`` for one test."""
    state: dict[str, Any] = {"local": threading.local(), "synced": [], "log": []}
    mod = types.ModuleType("cupy")

    class Device:
        def __init__(self, ordinal: int) -> None:
            self.ordinal = ordinal

        def __enter__(self) -> Device:
            self.prev = _current()
            state["local"].device = self.ordinal
            return self

        def __exit__(self, *exc: Any) -> None:
            state["local"].device = self.prev

        def synchronize(self) -> None:
            state["synced"].append(self.ordinal)

    def memcpy_async(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        """Runs at once (a queue that is always empty), logged with its stream."""
        assert kind == runtime.memcpyDeviceToHost
        ctypes.memmove(dst, src, size)
        state["log"].append(("copy", stream, size))

    class Event:
        def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
            pass

        def record(self, stream: Any = None) -> None:
            state["log"].append(("record", getattr(stream, "ptr", stream)))

        def synchronize(self) -> None:
            state["log"].append(("wait",))

    runtime = types.SimpleNamespace(getDeviceCount=lambda: gpus, memcpyAsync=memcpy_async, memcpyDeviceToHost=2)
    stream = types.SimpleNamespace(null=types.SimpleNamespace(ptr=0))
    mod.cuda = types.SimpleNamespace(Device=Device, runtime=runtime, Event=Event, Stream=stream,  # type: ignore[attr-defined]
                                     alloc_pinned_memory=bytearray)
    mod.ndarray = FakeArray  # type: ignore[attr-defined]
    mod.asarray = lambda a: _on_current(np.array(a, copy=True))  # type: ignore[attr-defined]
    mod.empty = lambda shape, dtype=np.float32: _on_current(np.empty(shape, dtype))  # type: ignore[attr-defined]
    mod.state = state  # type: ignore[attr-defined]
    global _state
    _state = state
    monkeypatch.setitem(__import__("sys").modules, "cupy", mod)
    return mod


_state: dict[str, Any] = {"local": threading.local()}


def _current() -> int:
    """The calling thread's current device (0 until it enters another), as in CuPy."""
    return int(getattr(_state["local"], "device", 0))


def _on_current(a: np.ndarray) -> FakeArray:
    out = a.view(FakeArray)
    out._device = _current()
    return out


def on_device(a: np.ndarray, ordinal: int) -> FakeArray:
    """``a`` as a fake GPU array on ``ordinal``."""
    out = np.array(a, copy=True).view(FakeArray)
    out._device = ordinal
    return out
