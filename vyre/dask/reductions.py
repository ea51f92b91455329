"""``vyre.dask.reduce``: a :mod:`vyre.ops` kernel per chunk, the partials combined on the host
(Dask's tree), or one task per chunk over a :func:`~vyre.dask.chunks.map_blocks` result."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np

from ..errors import DispatchError
from .chunks import _contiguous, _is_dask, _on_gpu, _Recipe
from .gpus import PendingPartial
from .graph import Task, TaskRef, vyre_array

__all__ = ["reduce"]

_REDUCTIONS = ("sum", "max", "min")


def _partial(op: str, backend: str | None, chunk: Any) -> Any:
    """One chunk's partial result, computed by a ``vyre.ops`` kernel over the whole chunk: a host
    scalar for NumPy chunks; for a CuPy chunk a :class:`~vyre.dask.gpus.PendingPartial`, the 0-d
    result on its GPU on its way to the host (the task does not wait: :func:`_finish` does)."""
    from .. import ops

    fn = getattr(ops, op)
    if _on_gpu(chunk):
        import cupy

        with cupy.cuda.Device(chunk.device.id):
            r = fn(_contiguous(chunk).reshape(-1), backend=backend)
            return PendingPartial(r) if isinstance(r, cupy.ndarray) else r
    r = fn(_contiguous(chunk).reshape(-1), backend=backend)
    return np.asarray(r.get() if hasattr(r, "get") else r)


class _Parts:
    """Partials gathered by a task, not yet waited for (an opaque box, so Dask and NumPy never try
    to convert the CuPy arrays inside)."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items


def _unbox(parts: np.ndarray) -> list[Any]:
    return [p for box in parts.ravel().tolist() for p in box.items]


def _partial_block(op: str, backend: str | None, chunk: Any, axis: Any = None, keepdims: bool = False,
                   computing_meta: bool = False) -> np.ndarray:
    if computing_meta:  # Dask asking for the kind of array the tree carries: a box is an object
        return np.empty((0,) * chunk.ndim, chunk.dtype)
    out = np.empty((1,) * chunk.ndim, object)
    out.flat[0] = _Parts([_partial(op, backend, chunk)])
    return out


def _gather_block(parts: np.ndarray, axis: Any = None, keepdims: bool = False, **_dask_options: Any) -> np.ndarray:
    """Dask's tree combine: gathers the partials of several chunks without waiting for any."""
    out = np.empty((1,) * parts.ndim, object)
    out.flat[0] = _Parts(_unbox(parts))
    return out


def _host(partial: Any) -> np.ndarray:
    if isinstance(partial, np.ndarray):
        return partial
    if isinstance(partial, PendingPartial):
        return partial.value()
    import cupy

    with cupy.cuda.Device(partial.device.id):
        return np.asarray(partial.get())  # waits (GIL released) for the chunk's GPU work so far


def _finish_block(op: str, result: np.dtype, parts: np.ndarray, axis: Any = None, keepdims: bool = False,
                  **_dask_options: Any) -> np.ndarray:
    """The reduction of every partial: each brought to the host (the one wait per chunk), float
    partials widened to f64, combined, rounded once to the result dtype."""
    # reduce() takes float arrays only: every partial widens to f64
    wide = np.array([_host(p) for p in _unbox(parts)], np.float64)
    fn: Any = getattr(np, op)  # np.sum / np.max / np.min
    value = np.asarray(fn(wide) if wide.size else np.zeros((), np.float64)).astype(result)
    return value.reshape((1,) * parts.ndim) if keepdims else value


def reduce(op: str, x: Any, *, backend: str | None = None, split_every: int | None = None) -> Any:
    """``sum``, ``max`` or ``min`` of a whole dask array: a :mod:`vyre.ops` kernel per chunk, then
    the partials combined on the host (Dask's tree, ``split_every`` as in
    ``dask.array.reduction``). Returns a 0-d dask array of ``x``'s dtype. Float partials are
    combined in f64, so a sum's error is vyre.ops' per-chunk bound plus one final rounding; max
    and min follow vyre.ops' NaN rule (a NaN anywhere gives NaN).

    A CuPy chunk's partial is copied to pinned host memory behind its own kernel, and only the
    final task waits for those copies (:class:`~vyre.dask.gpus.PendingPartial`): the tree's
    other tasks pass partials along without waiting, so every chunk's kernels can be queued on
    every GPU at once.

    When ``x`` is the very array :func:`map_blocks` returned, each chunk is one plain task that
    runs the program and then the partial (:func:`_fused_reduce`): the same values, less host
    time per chunk and per compute than Dask's fusion of the two steps. The result is then a
    :class:`vyre.dask.graph.VyreArray`, whose graph Dask only culls before each compute.
    ``split_every`` defaults to Dask's (4 per task) on the general path and to 32 on this one."""
    if op not in _REDUCTIONS:
        raise DispatchError(f"unknown reduction {op!r}. Fix: use one of {list(_REDUCTIONS)}")
    if not _is_dask(x):
        raise DispatchError(f"expected a dask array, got {type(x).__name__}. Fix: da.from_array(x, chunks=...)")
    if np.dtype(x.dtype) not in (np.float32, np.float64):
        raise DispatchError(f"vyre.ops reduces float32 and float64 arrays, this one is {x.dtype}. "
                            "Fix: x.astype(np.float32) (or reduce integers with dask's own x.sum())")
    if x.size == 0 and op != "sum":
        raise DispatchError(f"{op} of an empty array has no value. Fix: reduce a non-empty array")
    if split_every is not None and (not isinstance(split_every, int) or isinstance(split_every, bool)
                                    or split_every < 2):
        raise DispatchError(f"split_every must be an int >= 2, got {split_every!r}. Fix: pass e.g. 8")
    dt = np.dtype(x.dtype)
    recipe = getattr(x, "_vyre_recipe", None)
    if isinstance(recipe, _Recipe) and recipe.name == x.name:
        return _fused_reduce(op, recipe, dt, backend, split_every or 32)
    # the tree's inner arrays hold boxes of partials (object arrays); only the last task's value is
    # of the result dtype
    return da.reduction(x, functools.partial(_partial_block, op, backend), functools.partial(_finish_block, op, dt),
                        combine=_gather_block, dtype=dt, split_every=split_every, concatenate=True,
                        meta=np.empty((), dt))


def _run_partial(fn: Callable[..., Any], op: str, backend: str | None, *chunks: Any) -> _Parts:
    """One task of a reduction over a map_blocks result: the program on the chunk, then its partial
    (neither waited for)."""
    return _Parts([_partial(op, backend, fn(*chunks))])


def _gather(*boxes: _Parts) -> _Parts:
    return _Parts([p for box in boxes for p in box.items])


def _finish(op: str, result: np.dtype, *boxes: _Parts) -> np.ndarray:
    out = np.empty(len(boxes), object)
    out[:] = list(boxes)
    return _finish_block(op, result, out)


def _fused_reduce(op: str, recipe: _Recipe, dt: np.dtype, backend: str | None, split_every: int) -> Any:
    """``reduce(op, map_blocks(...))`` as one task per chunk (the program, then the partial) and a
    tree of gathering tasks that ends in one final task, written as one materialized layer of
    Dask's task objects (:mod:`vyre.dask.graph`), cheap for Dask to prepare on every compute.

    Why not Dask's blockwise fusion of the two steps: each fused task runs a small subgraph
    (``dask.order`` on it, per task), and Dask spends more time per compute fusing and ordering;
    on several GPUs that host time is what keeps the GPUs waiting. The values are the unfused
    path's: the same functions on the same chunks, combined in the same way."""
    from dask.base import tokenize

    first = recipe.arrays[0]
    # keys differ with everything that shapes the graph, so two such reductions never share a key
    # (the names of the inputs stand for their data: nothing is hashed)
    tag = tokenize(recipe.name, op, backend, split_every)
    part = f"{op}-partial-{tag}"
    run = functools.partial(_run_partial, recipe.fn, op, backend)
    layer: dict[Any, Any] = {}
    keys: list[Any] = []
    for idx in itertools.product(*(range(n) for n in first.numblocks)):
        key = (part, *idx)
        layer[key] = Task(key, run, *[TaskRef((a.name, *idx)) for a in recipe.arrays])
        keys.append(key)
    level = 0
    while len(keys) > split_every:  # a box gathers at most split_every boxes (nothing waits here)
        name = f"{op}-gather{level}-{tag}"
        nxt = []
        for j in range(0, len(keys), split_every):
            layer[(name, j)] = Task((name, j), _gather, *[TaskRef(k) for k in keys[j:j + split_every]])
            nxt.append((name, j))
        keys, level = nxt, level + 1
    final = f"{op}-{tag}"
    layer[(final,)] = Task((final,), functools.partial(_finish, op, dt), *[TaskRef(k) for k in keys])
    return vyre_array(final, layer, recipe.arrays, chunks=(), meta=np.empty((), dt))
