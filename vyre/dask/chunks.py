"""``vyre.dask``'s chunk tasks: a program run on every chunk of dask arrays (:func:`map_blocks`),
with halos for stencils (:func:`map_overlap`). The contract is in the package's docstring
(:mod:`vyre.dask`)."""

from __future__ import annotations

import functools
import inspect
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dask.array as da
import numpy as np

from ..driver.full_write import covers, writes_every_element
from ..errors import DispatchError
from ..ir.program import Program, program_of
from ..ir.wire import from_wire, to_wire

__all__ = ["map_blocks", "map_overlap"]

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
    from ..driver.dispatch import _kernel_for

    return _kernel_for(_decoded(wire), backend)


def _cuda_backend(backend: str | None) -> bool:
    from ..driver.backends import check_backend, default_backend

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
    from ..driver.dispatch import dispatch

    arrays = _arrays_for(program, chunked, outputs, whole, chunks, grid)
    dispatch(program, arrays, backend=backend, grid=grid)
    res = tuple(arrays[o].reshape(shape) for o in outputs)
    return res[0] if len(res) == 1 else res


def _run_chunk_cuda(wire: bytes, program: Program, chunked: tuple[str, ...], outputs: tuple[str, ...],
                    whole: Mapping[str, Any], chunks: tuple[Any, ...], grid: tuple[int, ...]) -> Any:
    import cupy

    from ..driver import device_launch
    from ..driver.dispatch import dispatch
    from ..driver.geometry import grid3

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
