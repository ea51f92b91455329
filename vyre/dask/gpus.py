"""Chunks of a dask array laid out over the GPUs of one process (:func:`on_gpus`), for
``vyre.dask`` on the threaded scheduler; a chunk's reduction partial on its way to the host
(:class:`PendingPartial`). docs/scale_out.md says why the layout decides whether several GPUs
run side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np

from ..errors import DispatchError

__all__ = ["PendingPartial", "on_gpus"]


def _device_count() -> int:
    try:
        import cupy
    except ImportError as e:
        raise DispatchError("on_gpus places chunks as CuPy arrays, and CuPy is not installed. "
                            "Fix: pip install cupy-cuda12x (or the wheel for your CUDA)") from e
    return int(cupy.cuda.runtime.getDeviceCount())


def _place(chunk: Any, devices: tuple[int, ...], numblocks: tuple[int, ...],
           block_id: tuple[int, ...] = ()) -> Any:
    """Chunk ``block_id`` (its C-order index ``i`` in the block grid) on GPU ``devices[i % n]``."""
    import cupy

    d = devices[int(np.ravel_multi_index(block_id, numblocks)) % len(devices)] if block_id else devices[0]
    if isinstance(chunk, cupy.ndarray):
        if chunk.device.id == d:
            return chunk  # already there: the same memory, no copy
        # the chunk may still be being written on its own GPU, whose queue the copy is not ordered after
        cupy.cuda.Device(chunk.device.id).synchronize()
        with cupy.cuda.Device(d):
            return chunk.copy(order="C")  # CuPy copies to the current device
    with cupy.cuda.Device(d):
        return cupy.asarray(np.ascontiguousarray(chunk))


def on_gpus(x: Any, devices: Sequence[int] | None = None) -> Any:
    """``x`` with its chunks on GPUs, round robin, computed now (persisted) on the threaded
    scheduler: chunk ``i`` (C order of the block grid) lives on ``devices[i % len(devices)]``
    (all of this host's GPUs by default) as a CuPy array.

    This is how to lay out data for several GPUs of one process. Two things decide whether the
    GPUs run side by side, and a hand-made layout (``da.concatenate`` of arrays made on each GPU)
    gets both wrong:

    - **Neighbouring chunks on different GPUs.** Dask works through the chunks in its own order
      (``dask.order``), and a task launches on its chunk's GPU as soon as it runs. Round robin
      gives every GPU work from the first tasks on; halves feed one GPU while the other waits.
    - **No loading tasks.** The result's chunks are literal in the graph, not tasks (a getter per
      chunk) that several computations share. Shared loading tasks make Dask run *every*
      computation of one chunk before the next chunk (to free the chunk early), so all the work of
      one GPU is queued before the other's; with literal chunks it runs computation by computation.
      It also saves the loading tasks' host time on every compute.

    Host (NumPy) chunks are copied to their GPU; CuPy chunks on another GPU are copied there after
    their own GPU finished writing them; chunks already in place are used as they are (no copy).
    With ``dask-cuda`` (a worker process per GPU) do not use this: Dask places chunks on workers."""
    if not isinstance(x, da.Array):
        raise DispatchError(f"on_gpus places the chunks of a dask array, got {type(x).__name__}. "
                            "Fix: da.from_array(x, chunks=...) first")
    count = _device_count()
    devs = tuple(range(count)) if devices is None else tuple(devices)
    if not devs or any(not isinstance(d, int) or isinstance(d, bool) or not 0 <= d < count for d in devs) \
            or len(set(devs)) != len(devs):
        raise DispatchError(f"devices must be distinct GPU ordinals in range({count}), got {devices!r}. "
                            f"Fix: pass e.g. devices={list(range(count))} (or None for all of them)")
    import cupy

    placed = da.map_blocks(_place, x, devs, tuple(x.numblocks), dtype=x.dtype,
                           meta=cupy.empty((0,) * x.ndim, x.dtype))
    (out,) = dask.persist(placed, scheduler="threads")
    return out


class PendingPartial:
    """A chunk's partial on its GPU, its copy to (pinned) host memory queued right behind it, and
    an event behind the copy; all on the legacy default stream, where ``vyre.ops`` launched the
    partial's kernel (so in order after it). Made inside the partial's device context.

    Why not ``partial.get()`` in the final task: that copy goes to the back of the GPU's queue, so
    it waits for everything the other tasks queued on that GPU since (later passes' kernels), and
    keeps a scheduler thread from launching more work meanwhile. The event waits for this chunk's
    own work alone. The value is the same bytes either way."""

    __slots__ = ("_device_value", "done", "host")

    def __init__(self, partial: Any) -> None:
        import cupy

        self._device_value = partial  # kept alive until the copy ran (its memory is not reused sooner)
        mem = cupy.cuda.alloc_pinned_memory(max(1, partial.nbytes))
        self.host = np.frombuffer(mem, partial.dtype, partial.size).reshape(partial.shape)
        rt = cupy.cuda.runtime
        rt.memcpyAsync(self.host.ctypes.data, partial.data.ptr, partial.nbytes, rt.memcpyDeviceToHost, 0)
        self.done = cupy.cuda.Event(disable_timing=True)
        self.done.record(cupy.cuda.Stream.null)

    def value(self) -> np.ndarray:
        """The partial on the host, once its copy has run (waits with the GIL released)."""
        self.done.synchronize()
        self._device_value = None
        return np.array(self.host, copy=True)
