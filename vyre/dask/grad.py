"""``vyre.dask.value_and_grad``: the loss and gradients of a per-chunk program over dask arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np

from ..errors import DispatchError
from .chunks import DimFn, _aligned, _decoded, _grid_for, _program_of, _split, _wire_of

__all__ = ["value_and_grad"]

def _grad_chunk(wire: bytes, chunked: tuple[str, ...], output: str, wrt: tuple[str, ...],
                backend: str | None, dim: DimFn | None, whole: Mapping[str, Any], *chunks: Any
                ) -> tuple[float, dict[str, Any]]:
    from ..autodiff import value_and_grad as vg

    program = _decoded(wire)
    shape = tuple(chunks[0].shape)
    arrays: dict[str, Any] = dict(whole)
    for name, chunk in zip(chunked, chunks, strict=True):
        arrays[name] = np.ascontiguousarray(chunk).reshape(-1)
    if output not in arrays:
        arrays[output] = np.zeros(int(np.prod(shape, dtype=np.int64)), program.buffer(output).element.np_dtype)
    loss, grads = vg(program, arrays, output, list(wrt), backend=backend,
                     grid=_grid_for(program, shape, dim))
    return loss, {w: (g.reshape(shape) if w in chunked else g) for w, g in grads.items()}


def value_and_grad(program: Any, inputs: Mapping[str, Any], output: str, wrt: str | Sequence[str], *,
                   backend: str | None = None, dim: DimFn | None = None) -> tuple[Any, dict[str, Any]]:
    """``(loss, {w: dloss/dw})`` of ``loss = sum(output)`` over every chunk (host arrays).

    The loss is a 0-d dask array (the sum of the chunks' losses, each accumulated in float64); the
    gradient of a chunked input is a dask array with its chunks; the gradient of a buffer given
    whole (a weight every chunk reads) is the sum of the chunks' gradients, a dask array of its
    shape. Nothing is computed until you call ``dask.compute`` (or ``.compute()``)."""
    p = _program_of(program)
    names = (wrt,) if isinstance(wrt, str) else tuple(wrt)
    chunked, whole = _split(p, inputs, (output,))
    for w in names:
        if w not in inputs:
            raise DispatchError(f"wrt buffer {w!r} is not among the inputs. Fix: pass an array for it")
    arrays = _aligned([inputs[n] for n in chunked])
    wire = _wire_of(p)
    blocks = [a.to_delayed() for a in arrays]
    task = dask.delayed(_grad_chunk, pure=True, nout=2)
    losses = []
    chunk_grads: dict[str, Any] = {w: np.empty(blocks[0].shape, object) for w in names if w in chunked}
    whole_grads: dict[str, list[Any]] = {w: [] for w in names if w not in chunked}
    first = arrays[0]
    for index in np.ndindex(*blocks[0].shape):
        loss, grads = task(wire, tuple(chunked), output, names, backend, dim, whole,
                           *[b[index] for b in blocks])
        losses.append(loss)
        shape = tuple(c[i] for c, i in zip(first.chunks, index, strict=True))
        for w in chunk_grads:
            dt = p.buffer(w).element.np_dtype
            chunk_grads[w][index] = da.from_delayed(grads[w], shape=shape, dtype=dt)
        for w in whole_grads:
            whole_grads[w].append(grads[w])
    total = da.from_delayed(dask.delayed(sum)(losses), shape=(), dtype=np.float64)
    out: dict[str, Any] = {w: da.block(arr.tolist()) for w, arr in chunk_grads.items()}
    for w, parts in whole_grads.items():
        ref = np.asarray(inputs[w])
        out[w] = da.from_delayed(dask.delayed(_sum_arrays)(parts), shape=ref.shape, dtype=ref.dtype)
    return total, {w: out[w] for w in names}


def _sum_arrays(parts: list[np.ndarray]) -> np.ndarray:
    acc = np.array(parts[0], copy=True)
    for q in parts[1:]:
        acc += q
    return acc
