"""vyre over Dask: run a program on every chunk of dask arrays (NumPy chunks on the CPU backend,
CuPy chunks on CUDA), with halos for stencils, gradients over chunked data, and reductions.

vyre builds no scheduler of its own: Dask (threads, ``dask.distributed`` processes, or a cluster)
decides where each chunk runs. Programs travel to the workers as their wire format
(:func:`vyre.ir.to_wire`, digest-checked), are decoded once per worker process, and every worker
uses the disk kernel cache (``VYRE_CACHE_DIR``), so workers that share it compile a kernel once.

The contract of :func:`map_blocks`: the program is run on each chunk *as if the chunk were the whole
array* (one dispatch per chunk, the chunk's elements flattened in C order). That is exact for
programs whose invocation ``i`` only touches element ``i`` of the chunked buffers (elementwise
maps); stencils that read neighbours need :func:`map_overlap`, which gives each chunk a halo.
Buffers passed as plain arrays (not dask arrays) are given whole to every chunk: weights, tables.

For several GPUs in one process, :func:`on_gpus` lays the chunks out round robin (docs/scale_out.md
says why the layout decides whether the GPUs run side by side).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import DispatchError
from .ir.program import Program, program_of
from .driver.full_write import covers, writes_every_element
from .ir.wire import from_wire, to_wire

try:
    import dask
    import dask.array as da
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("vyre.dask needs Dask. Fix: pip install 'vyre[dask]' (or dask[array])") from e

from .dask_gpus import PendingPartial, on_gpus  # after the check that Dask is there
from .dask_graph import Task, TaskRef, vyre_array

__all__ = ["map_blocks", "map_overlap", "on_gpus", "reduce", "value_and_grad"]

DimFn = Callable[[tuple[int, ...]], Sequence[int]]


def _program_of(program: Any) -> Program:
    """A Program, or the program of a frontend kernel, validated."""
    p = program_of(program, DispatchError)
    _wire_of(p)
    return p


_WIRES: dict[int, tuple[Program, bytes]] = {}
_WIRES_LOCK = threading.Lock()  # graphs may be built from several threads


def _wire_of(p: Program) -> bytes:
    """``p`` validated and encoded, once per Program object (Programs are frozen; a graph built
    every iteration would otherwise validate and encode the program on every call). The entry
    holds the program, so its id is not reused while it is remembered."""
    hit = _WIRES.get(id(p))
    if hit is not None and hit[0] is p:
        return hit[1]
    p.validate()
    wire = to_wire(p)
    with _WIRES_LOCK:
        if len(_WIRES) >= 64:
            _WIRES.pop(next(iter(_WIRES)))
        _WIRES[id(p)] = (p, wire)
    return wire


class _ChunkFn:
    """The function of a :func:`map_blocks` / :func:`map_overlap` task: :func:`_run_chunk` with
    the program's wire bytes and the call's settings.

    Its Dask token (the graph's key names when no ``name`` is given) never hashes device data:
    a whole buffer on a GPU (CuPy, PyTorch, ...) would be pickled, so copied to the host, by
    Dask's tokenizer; each such buffer gets a token of its own instead (two calls that share one
    are then two computations, not one). Host arrays are hashed as Dask hashes them."""

    __slots__ = ("_device_tokens", "backend", "chunked", "dim", "outputs", "whole", "wire")
    #: Dask asks map_blocks' function whether it takes block_id / block_info (inspect.signature,
    #: slow on a partial): it takes only the chunks
    __signature__ = inspect.Signature([inspect.Parameter("chunks", inspect.Parameter.VAR_POSITIONAL)])
    #: the key names' prefix when no name is given (Dask's funcname)
    __name__ = "_run_chunk"

    def __init__(self, wire: bytes, chunked: tuple[str, ...], outputs: tuple[str, ...], backend: str | None,
                 dim: DimFn | None, whole: Mapping[str, Any]) -> None:
        self.wire, self.chunked, self.outputs, self.backend, self.dim = wire, chunked, outputs, backend, dim
        self.whole = dict(whole)
        # one token per device buffer and task function, the same each time Dask asks
        self._device_tokens = {n: uuid.uuid4().hex for n, v in self.whole.items() if not isinstance(v, np.ndarray)}

    def __call__(self, *chunks: Any) -> Any:
        return _run_chunk(self.wire, self.chunked, self.outputs, self.backend, self.dim, self.whole, *chunks)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        from dask.base import tokenize

        whole = tuple((n, self._device_tokens[n] if n in self._device_tokens else tokenize(v))
                      for n, v in sorted(self.whole.items()))
        return ("vyre-chunk", self.wire, self.chunked, self.outputs, self.backend, tokenize(self.dim), whole)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ChunkFn, (self.wire, self.chunked, self.outputs, self.backend, self.dim, self.whole))


@functools.lru_cache(maxsize=64)
def _decoded(wire: bytes) -> Program:
    """The program a task carries, decoded once per worker process."""
    return from_wire(wire)


def _is_dask(x: Any) -> bool:
    return isinstance(x, da.Array)


def _split(program: Program, inputs: Mapping[str, Any], outputs: Sequence[str]
           ) -> tuple[list[str], dict[str, Any]]:
    """Check names and shapes; return (chunked buffer names in order, whole buffers)."""
    if not isinstance(inputs, Mapping):
        raise DispatchError(f"inputs must be a mapping of buffer name to array, got {type(inputs).__name__}. "
                            "Fix: pass a dict like {'x': dask_x}")
    known = {b.name: b for b in program.buffers if not b.is_workgroup}
    for name in [*inputs, *outputs]:
        if name not in known:
            raise DispatchError(f"unknown buffer {name!r}; the program declares {sorted(known)}. "
                                "Fix: name only the program's storage buffers")
    chunked = [n for n, v in inputs.items() if _is_dask(v)]
    if not chunked:
        raise DispatchError("no input is a dask array, so there are no chunks to map over. "
                            "Fix: pass at least one dask.array (da.from_array(x, chunks=...))")
    shape = inputs[chunked[0]].shape
    for n in chunked[1:]:
        if inputs[n].shape != shape:
            raise DispatchError(f"dask inputs {chunked[0]!r} {shape} and {n!r} {inputs[n].shape} differ in "
                                "shape; map_blocks pairs chunks element for element. Fix: pass arrays of one "
                                "shape, or pass the smaller one as a plain (numpy/cupy) array given whole to "
                                "every chunk")
    for o in outputs:
        decl = known[o]
        if not decl.access.writable:
            raise DispatchError(f"output {o!r} is not written by the program. Fix: name a written buffer")
        if decl.count:
            raise DispatchError(f"output {o!r} declares a fixed count ({decl.count}), so it cannot follow the "
                                "chunks. Fix: declare it without a count, or use vyre.dask.reduce for "
                                "per-chunk results that are combined")
    whole = {n: v for n, v in inputs.items() if not _is_dask(v)}
    return chunked, whole


def _aligned(arrays: list[Any]) -> list[Any]:
    """The dask arrays rechunked to common chunks (Dask's ``unify_chunks``)."""
    if len(arrays) == 1:
        return arrays
    pairs = [part for a in arrays for part in (a, tuple(range(a.ndim)))]
    return list(da.core.unify_chunks(*pairs)[1])


def _grid_for(program: Program, shape: tuple[int, ...], dim: DimFn | None) -> tuple[int, ...]:
    """Workgroups that cover one chunk: one invocation per element (flat), or ``dim(shape)``."""
    wg = program.workgroup_size
    if dim is None:
        n = int(np.prod(shape, dtype=np.int64))
        return (max(1, -(-n // wg[0])),)
    d = tuple(int(v) for v in dim(shape))
    if not 1 <= len(d) <= 3 or any(v < 0 for v in d):
        raise DispatchError(f"dim({shape}) returned {d}; it must give 1-3 invocation counts. "
                            "Fix: return e.g. (shape[1], shape[0]) for a 2-D program")
    return tuple(max(1, -(-v // w)) for v, w in zip(d, wg, strict=False))


def _on_gpu(chunk: Any) -> bool:
    return not isinstance(chunk, np.ndarray) and hasattr(chunk, "__cuda_array_interface__")


def _output_for(program: Program, name: str, grid: tuple[int, ...], like: Any, shape: tuple[int, ...]) -> Any:
    """A new array for output ``name`` of the chunk's kind (numpy, or CuPy on the chunk's GPU):
    uninitialised where the launch provably writes every element and never reads it
    (vyre.driver.full_write), else zero-filled as dispatch's own allocations are."""
    n = int(np.prod(shape, dtype=np.int64))
    full = writes_every_element(program, name) and covers(program, grid, n)
    dt = program.buffer(name).element.np_dtype
    if not _on_gpu(like):
        return (np.empty if full else np.zeros)(shape, dt)
    import cupy

    with cupy.cuda.Device(like.device.id):
        return (cupy.empty if full else cupy.zeros)(shape, dt)


def _copy(chunk: Any) -> Any:
    """A C-contiguous private copy: dask chunks are shared and must never be written."""
    if isinstance(chunk, np.ndarray):
        return np.array(chunk, order="C", copy=True)
    import cupy

    with cupy.cuda.Device(chunk.device.id):
        return cupy.array(chunk, order="C", copy=True)


def _contiguous(chunk: Any) -> Any:
    if isinstance(chunk, np.ndarray):
        return np.ascontiguousarray(chunk)
    if chunk.flags.c_contiguous:
        return chunk
    import cupy

    with cupy.cuda.Device(chunk.device.id):
        return cupy.ascontiguousarray(chunk)


@functools.lru_cache(maxsize=64)
def _chunk_kernel(wire: bytes, backend: str) -> Any:
    """The kernel dispatch runs for a task's program (the very object, so its tuned launch and
    the launch shapes recorded by vyre.driver.device_launch are shared by every chunk)."""
    from .driver.dispatch import _kernel_for

    return _kernel_for(_decoded(wire), backend)


def _cuda_backend(backend: str | None) -> bool:
    from .driver.backends import check_backend, default_backend

    return (check_backend(backend) if backend is not None else default_backend()) == "cuda"


def _arrays_for(program: Program, chunked: tuple[str, ...], outputs: tuple[str, ...],
                whole: Mapping[str, Any], chunks: tuple[Any, ...], grid: tuple[int, ...]) -> dict[str, Any]:
    """The task's buffers: chunks (private copies where written), whole buffers, new outputs."""
    shape = tuple(chunks[0].shape)
    arrays: dict[str, Any] = dict(whole)
    for name, chunk in zip(chunked, chunks, strict=True):
        arrays[name] = _copy(chunk) if program.buffer(name).access.writable else _contiguous(chunk)
    for o in outputs:
        if o not in arrays:
            arrays[o] = _output_for(program, o, grid, chunks[0], shape)
    for name in whole:  # whole buffers the program writes get a private copy per chunk too
        if program.buffer(name).access.writable:
            arrays[name] = _copy(arrays[name])
    return arrays


def _run_chunk(wire: bytes, chunked: tuple[str, ...], outputs: tuple[str, ...], backend: str | None,
               dim: DimFn | None, whole: Mapping[str, Any], *chunks: Any) -> Any:
    """The task: dispatch the program over one chunk; returns the output chunk(s).

    CuPy chunks run on their own GPU, on CuPy's current stream of it: the first chunk of each
    layout through ``dispatch`` (every check), the others through the direct launch
    (vyre.driver.device_launch). On the legacy default stream (CuPy's default) the task returns
    without waiting: later work on that GPU is ordered after the kernel, and whatever needs the
    values on the host waits there (:func:`reduce`'s partials, ``.compute()``). On any other
    stream the task waits for its kernel, since other threads' streams are not ordered after it."""
    program = _decoded(wire)
    shape = tuple(chunks[0].shape)
    grid = _grid_for(program, shape, dim)
    if _on_gpu(chunks[0]) and _cuda_backend(backend):
        return _run_chunk_cuda(wire, program, chunked, outputs, whole, chunks, grid)
    from .driver.dispatch import dispatch

    arrays = _arrays_for(program, chunked, outputs, whole, chunks, grid)
    dispatch(program, arrays, backend=backend, grid=grid)
    res = tuple(arrays[o].reshape(shape) for o in outputs)
    return res[0] if len(res) == 1 else res


def _run_chunk_cuda(wire: bytes, program: Program, chunked: tuple[str, ...], outputs: tuple[str, ...],
                    whole: Mapping[str, Any], chunks: tuple[Any, ...], grid: tuple[int, ...]) -> Any:
    import cupy

    from .driver import device_launch
    from .driver.dispatch import dispatch
    from .driver.geometry import grid3

    device = chunks[0].device.id
    with cupy.cuda.Device(device):
        stream = cupy.cuda.get_current_stream()
        arrays = _arrays_for(program, chunked, outputs, whole, chunks, grid)
        for name, v in whole.items():  # host tables the program reads: on this GPU, as dispatch would copy them
            if isinstance(v, np.ndarray) and not program.buffer(name).access.writable:
                arrays[name] = cupy.asarray(v)
        kernel = _chunk_kernel(wire, "cuda")
        g = grid3(grid)
        if device_launch.launch(kernel, arrays, g, device, stream.ptr):
            if stream.ptr:
                _wait(stream)
        else:  # a new layout (or not CuPy arrays throughout): every check, then remembered
            dispatch(program, arrays, backend="cuda", grid=grid)
            device_launch.remember(kernel, arrays, g)
            if stream.ptr:  # dispatch launched on the legacy default stream
                cupy.cuda.Stream.null.synchronize()
    shape = tuple(chunks[0].shape)
    res = tuple(arrays[o].reshape(shape) for o in outputs)
    return res[0] if len(res) == 1 else res


def _wait(stream: Any) -> None:
    """Wait (GIL released) for the work queued on ``stream`` so far, not for later work of others."""
    import cupy

    ev = cupy.cuda.Event(block=False, disable_timing=True)
    ev.record(stream)
    ev.synchronize()


def _meta(chunked_first: Any, dtype: np.dtype) -> Any:
    meta = getattr(chunked_first, "_meta", None)
    if meta is not None and not isinstance(meta, np.ndarray):
        import cupy

        return cupy.empty((0,) * chunked_first.ndim, dtype)
    return np.empty((0,) * chunked_first.ndim, dtype)


def map_blocks(program: Any, inputs: Mapping[str, Any], output: str | Sequence[str], *,
               backend: str | None = None, dim: DimFn | None = None, name: str | None = None) -> Any:
    """Run ``program`` on every chunk of the dask arrays in ``inputs``; returns the dask array of
    ``output`` (a tuple of them when ``output`` is a list).

    Dask arrays must share a shape (their chunks are aligned by Dask); plain arrays are given whole
    to every chunk. Written buffers get private copies (chunks are never written in place).
    ``dim``, a function of a chunk's shape, gives the invocations per axis for programs that are not
    one invocation per element (e.g. ``lambda s: (s[1], s[0])`` for a 2-D program). ``name``: the
    output's key name in the graph, as Dask's ``map_blocks`` takes it (by default a hash of the
    program and inputs, so two identical calls are one computation; a distinct name keeps them
    apart)."""
    p = _program_of(program)
    if name is not None and not isinstance(name, str):
        raise DispatchError(f"name must be a str, got {name!r}. Fix: pass e.g. name='chain-1'")
    outputs = (output,) if isinstance(output, str) else tuple(output)
    if not outputs:
        raise DispatchError("no output named. Fix: pass output='name' (or a list of names)")
    chunked, whole = _split(p, inputs, outputs)
    arrays = _aligned([inputs[n] for n in chunked])
    fn = _ChunkFn(_wire_of(p), tuple(chunked), outputs, backend, dim, whole)
    dtypes = [p.buffer(o).element.np_dtype for o in outputs]
    if len(outputs) == 1:
        out = da.map_blocks(fn, *arrays, dtype=dtypes[0], meta=_meta(arrays[0], dtypes[0]), name=name)
        out._vyre_recipe = _Recipe(out.name, fn, tuple(arrays))  # for reduce(): one task per chunk
        return out
    pieces = da.map_blocks(fn, *arrays, dtype=object, meta=np.empty((0,) * arrays[0].ndim, object), name=name)
    return tuple(pieces.map_blocks(_pick, k, dtype=dt, meta=_meta(arrays[0], dt))
                 for k, dt in enumerate(dtypes))


class _Recipe:
    """How :func:`map_blocks` made an array (the exact object it returned): its task function and
    aligned inputs, so :func:`reduce` can run the program and the partial in one task per chunk."""

    __slots__ = ("arrays", "fn", "name")

    def __init__(self, name: str, fn: Callable[..., Any], arrays: tuple[Any, ...]) -> None:
        self.name, self.fn, self.arrays = name, fn, arrays


def _pick(t: Any, k: int) -> Any:
    return t[k]


def map_overlap(program: Any, inputs: Mapping[str, Any], output: str, *, depth: int | Mapping[int, int],
                boundary: Any = "none", backend: str | None = None, dim: DimFn | None = None) -> Any:
    """:func:`map_blocks` with a halo of ``depth`` elements from the neighbouring chunks (Dask's
    ``map_overlap``), trimmed after the program ran: a stencil that reads at most ``depth``
    elements away matches the single-array dispatch exactly at chunk borders.

    ``boundary="none"`` (the default) adds nothing past the array's own ends, so reads there see
    vyre's out-of-bounds rule (0) and ``buflen`` is the array's, as in one dispatch over the whole
    array; Dask's other boundaries (``0``, ``"reflect"``, ``"periodic"``, ...) pad instead."""
    p = _program_of(program)
    chunked, whole = _split(p, inputs, (output,))
    arrays = _aligned([inputs[n] for n in chunked])
    fn = _ChunkFn(_wire_of(p), tuple(chunked), (output,), backend, dim, whole)
    dt = p.buffer(output).element.np_dtype
    ndim = arrays[0].ndim
    depths = dict(depth) if isinstance(depth, Mapping) else dict.fromkeys(range(ndim), depth)
    if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in depths.values()) \
            or not set(depths) <= set(range(ndim)):
        raise DispatchError(f"depth must be an int >= 0 or a mapping axis -> int for {ndim}-D arrays, got "
                            f"{depth!r}. Fix: pass e.g. depth=2 (the stencil's reach)")
    for axis, d in list(depths.items()):
        # a halo as deep as the axis is the whole axis: one chunk along it, and nothing to exchange
        if d and (d >= arrays[0].shape[axis] or len(arrays[0].chunks[axis]) == 1):
            arrays = [a.rechunk({axis: -1}) for a in arrays]
            depths[axis] = 0
    return da.map_overlap(fn, *arrays, depth=depths, boundary=boundary, trim=True, dtype=dt,
                          meta=_meta(arrays[0], dt), align_arrays=True)


_REDUCTIONS = ("sum", "max", "min")


def _partial(op: str, backend: str | None, chunk: Any) -> Any:
    """One chunk's partial result, computed by a ``vyre.ops`` kernel over the whole chunk: a host
    scalar for NumPy chunks; for a CuPy chunk a :class:`~vyre.dask_gpus.PendingPartial`, the 0-d
    result on its GPU on its way to the host (the task does not wait: :func:`_finish` does)."""
    from . import ops

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
    host = [_host(p) for p in _unbox(parts)]
    wide = np.array([h.astype(np.float64) if h.dtype.kind == "f" else h for h in host])
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
    final task waits for those copies (:class:`~vyre.dask_gpus.PendingPartial`): the tree's
    other tasks pass partials along without waiting, so every chunk's kernels can be queued on
    every GPU at once.

    When ``x`` is the very array :func:`map_blocks` returned, each chunk is one plain task that
    runs the program and then the partial (:func:`_fused_reduce`): the same values, less host
    time per chunk and per compute than Dask's fusion of the two steps. The result is then a
    :class:`vyre.dask_graph.VyreArray`, whose graph Dask only culls before each compute.
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
    Dask's task objects (:mod:`vyre.dask_graph`), cheap for Dask to prepare on every compute.

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


def _grad_chunk(wire: bytes, chunked: tuple[str, ...], output: str, wrt: tuple[str, ...],
                backend: str | None, dim: DimFn | None, whole: Mapping[str, Any], *chunks: Any
                ) -> tuple[float, dict[str, Any]]:
    from .autodiff import value_and_grad as vg

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
