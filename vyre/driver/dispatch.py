"""``vyre.compile`` and ``vyre.dispatch``: from a Program and arrays to results on a backend."""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen.emit import CODEGEN_VERSION
from ..errors import DispatchError
from ..ir import BufferDecl, Program
from . import cache
from .backend import Backend, pool_usable
from .backend import backend as backend_impl
from .backends import check_backend, default_backend
from .bind import BindPlan, check_mapping, check_names
from .geometry import Grid, default_grid, grid3, is_int, launch_grid
from ..settings import backend_forced

SERIAL, PARALLEL = "vyre_kernel", "vyre_kernel_parallel"
# CPU dispatches run on the thread pool when they have this many invocations, or fewer
# invocations doing at least PARALLEL_MIN_WORK statements in all (loop trip counts included,
# vyre.driver.work): below that the pool's wake-up costs more than it saves. 2^18 statements is
# a reduction of about 2^17 elements (vyre.ops): measured alone, a parallel pass wins from 2^16
# by 1-3 us, but beside another thread pool still spinning (OpenBLAS's after a numpy dot, for
# 0.2 s) a parallel pass that small waits for a core and runs 4-6x slower; a serial one does not.
PARALLEL_MIN_INVOCATIONS = 1 << 15
PARALLEL_MIN_WORK = 1 << 18


def _versions(backend: str) -> tuple[str, ...]:
    """Toolchain versions in the kernel key, read without importing the toolchain (importing numba
    to ask it would cost half a second on a binary cache hit)."""
    parts = [f"codegen={CODEGEN_VERSION}", f"numba={dist_version('numba')}", f"numpy={np.__version__}"]
    if backend in ("cuda", "cudasim"):
        parts.append(f"numba-cuda={dist_version('numba-cuda', 'numba_cuda')}")
    return tuple(parts)


@functools.cache
def dist_version(dist: str, package: str | None = None) -> str:
    """The installed version of distribution ``dist`` (whose import package is ``package``, default
    ``dist``), read from its ``<dist>-<version>.dist-info`` (or ``.egg-info``) folder: beside the
    package first, else in the first ``sys.path`` folder holding one, which is where
    ``importlib.metadata`` would find it, without importing that (its import and its scan of every
    installed distribution cost tens of milliseconds on a binary cache hit); ``?`` when not
    installed."""
    import importlib.util

    name = _normalised(dist)
    spec = importlib.util.find_spec(package or dist)
    beside = [str(Path(p).parent) for p in (spec.submodule_search_locations or [])] if spec is not None else []
    for folder in (*beside, *(p or "." for p in sys.path)):
        version = _dist_infos(folder).get(name)
        if version is not None:
            return version
    return "?"


def _normalised(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


@functools.cache
def _dist_infos(folder: str) -> dict[str, str]:
    """Normalised distribution name -> version, from the metadata folders in ``folder`` (listed once)."""
    out: dict[str, str] = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    for n in names:
        for suffix in (".dist-info", ".egg-info"):
            if n.endswith(suffix):
                dist, sep, version = n[:-len(suffix)].partition("-")
                if sep and version:
                    out.setdefault(_normalised(dist), version)
    return out


@dataclass(frozen=True, slots=True)
class Launch:
    """Launch knobs of a flat kernel (vyre.codegen.flat): CUDA runs ``wg`` threads per block, each
    doing ``ipt`` invocations; the CPU runs parallel chunks of ``wg * ipt`` invocations."""

    wg: int
    ipt: int = 1

    def __post_init__(self) -> None:
        if not (is_int(self.wg) and is_int(self.ipt)):
            raise DispatchError(f"launch knobs must be ints, got wg={self.wg!r}, ipt={self.ipt!r}. "
                                "Fix: pass e.g. Launch(256, 4)")
        if not (1 <= self.wg <= 1024 and 1 <= self.ipt <= 4096):
            raise DispatchError(f"launch {self} is out of range (wg 1..1024, ipt 1..4096). "
                                "Fix: pick a candidate from vyre.tuning.tuner")


@functools.lru_cache(maxsize=512)
def _launch(wg: int, ipt: int) -> Launch:
    """A default launch, built (and checked) once per shape: the dispatch path asks every call."""
    return Launch(wg, ipt)


@dataclass
class Kernel:
    """A program compiled for one backend: its generated source, launch geometry and a call.

    ``flat`` kernels (programs whose results do not depend on the launch shape) take their launch
    knobs at call time (``launch``); the autotuner sets them."""

    program: Program
    backend: str
    _source: str | None
    key: str
    cache_hit: bool
    compile_seconds: float
    _fn: Any = field(repr=False, default=None)
    flat: bool = False
    launch: Launch | None = None
    _fast: Any = field(repr=False, default=None)
    _fn_parallel: Any = field(repr=False, default=None)
    # CPU kernels loaded as machine code (vyre.driver.cpu_compile): the source and numba's module,
    # made on demand (the source for reading, the module for arrays the machine code cannot take)
    _emit: Any = field(repr=False, default=None)
    _module: Any = field(repr=False, default=None)
    # CUDA kernels compiled here: writes the cubin to the binary cache after the first launch
    _save_binary: Any = field(repr=False, default=None)
    # the backend's memo of what a call over buffers of given lengths needs (CpuBackend.shape)
    _shapes: dict[Any, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def source(self) -> str | None:
        """The generated numba source (None for the interpreter)."""
        if self._source is None and self._emit is not None:
            self._source = self._emit()
        return self._source

    def default_launch(self, invocations: int, work: float = 0.0) -> Launch:
        """The launch used without a policy's choice; ``work``: statements per invocation, when
        known (CPU: few invocations doing much work are split across the cores)."""
        return self.impl.default_launch(self, invocations, work)

    @property
    def impl(self) -> Backend:
        """This kernel's backend object (vyre/driver/backend.py)."""
        return backend_impl(self.backend)

    def grid_for(self, lengths: Mapping[str, int]) -> tuple[int, int, int]:
        """The default grid for buffers of these lengths (covers the largest output)."""
        return default_grid(self.program, lengths)

    @functools.cached_property
    def binder(self) -> BindPlan:
        return BindPlan(self.program)

    @property
    def storage(self) -> tuple[BufferDecl, ...]:
        return self.binder.storage

    @functools.cached_property
    def writable(self) -> list[BufferDecl]:
        return [b for b in self.storage if b.access.writable]

    def _cpu_entry(self, invocations: int, splittable: bool, work: float) -> Any:
        """The serial kernel, or the parallel one for problems big enough to pay for the thread
        pool: many invocations, or ``work`` (statements per invocation) enough in all."""
        if self._fn_parallel is not None and splittable and pool_usable() and (
                invocations >= PARALLEL_MIN_INVOCATIONS or invocations * work >= PARALLEL_MIN_WORK):
            return self._fn_parallel
        return self._fn

    def __call__(self, inputs: Mapping[str, Any], *, grid: Grid | None = None, dim: Grid | None = None,
                 return_device: bool | None = None, device: int | None = None, strict: bool = False,
                 tune: bool = False) -> dict[str, Any]:
        """Run once over ``inputs`` (see :func:`dispatch`) with ``self.launch`` (None: the default
        launch); ``tune=True`` (what :func:`dispatch` passes) asks the launch policy first."""
        if return_device is not None and not isinstance(return_device, bool):
            raise DispatchError(f"return_device must be True, False or None, got {return_device!r}. "
                                "Fix: pass a bool (None: device arrays back when device arrays went in)")
        inputs = self.binder.with_scalars(inputs)  # numbers for scalar parameters
        if dim is not None:
            grid = launch_grid(self.program, grid, dim)
        return self.impl.run(self, inputs, grid, return_device, device, strict, tune)


def compile(program: Program, backend: str | None = None, *, parallel: bool = True,
            disk_cache: bool = True) -> Kernel:
    """Validate ``program`` and compile it for ``backend`` (default: CUDA if usable, else CPU).

    Compiled kernels are cached in memory and on disk (see :mod:`vyre.driver.cache`)."""
    if not isinstance(program, Program):
        raise DispatchError(f"expected a vyre Program, got {type(program).__name__}. "
                            "Fix: build one with Program.wrapped(...)")
    b = check_backend(backend) if backend is not None else default_backend()
    program.validate()
    t0 = time.perf_counter()
    impl = backend_impl(b)
    if b == "interp":
        return Kernel(program, b, None, program.fingerprint().hex(), True, 0.0)
    opts = f"parallel={parallel}" if b == "cpu" else ""
    parts: list[str | bytes] = [program.fingerprint(), b, opts, *_versions(b), *impl.target_parts()]
    key = cache.kernel_key(*parts)
    built = impl.build(program, key, parts, parallel=parallel, disk_cache=disk_cache)
    k = Kernel(program, b, built.source, key, built.hit, time.perf_counter() - t0, built.fn, built.flat)
    k._fn_parallel, k._emit, k._module, k._save_binary = built.parallel, built.emit, built.module, built.save_binary
    return k


_kernels: dict[tuple[bytes, str, tuple[int, int, int]], Kernel] = {}
# Programs are immutable: once seen, the same object maps straight to its kernel (no hashing).
_by_identity: dict[tuple[int, str | None], tuple[Program, Kernel]] = {}
# A Program equal to one seen before (code that builds its programs inside a function builds a new,
# identical tree every call) finds its kernel by structural hash and equality: about 20x cheaper
# than fingerprinting the tree (blake3 over the canonical encoding, which is a Python walk).
_by_structure: dict[tuple[Program, str], Kernel] = {}
_MAX_REMEMBERED = 4096


def _kernel_for(program: Program, b: str) -> Kernel:
    """The kernel of ``program`` on backend ``b``: by structure, else by fingerprint (declaration
    order does not count), else compiled."""
    if not isinstance(program, Program):
        return compile(program, b)  # raises the DispatchError for a non-Program
    try:
        k = _by_structure.get((program, b))
    except TypeError:  # an unhashable field (a list where a tuple belongs): validation will say
        k = None
    except RecursionError:  # a tree too deep to hash is invalid (validation bounds depth): say so
        program.validate()
        raise
    if k is not None:
        return k
    key = (program.fingerprint(), b, program.workgroup_size)
    k = _kernels.get(key)
    if k is None:
        k = compile(program, b)
        _kernels[key] = k
    if len(_by_structure) > _MAX_REMEMBERED:
        _by_structure.clear()
    try:
        _by_structure[(program, b)] = k
    except TypeError:
        pass
    return k


def dispatched_kernel(program: Program, backend: str | None) -> Kernel | None:
    """The kernel :func:`dispatch` last ran for this very Program object and ``backend`` argument
    (None if it has not), e.g. to take over its cached launch (:mod:`vyre.autodiff.handle`)."""
    hit = _by_identity.get((id(program), backend))
    return hit[1] if hit is not None and hit[0] is program else None


def dispatch(program: Program, inputs: Mapping[str, Any], *, backend: str | None = None,
             grid: Grid | None = None, dim: Grid | None = None, workgroup_size: Grid | None = None,
             return_device: bool | None = None, device: int | None = None,
             strict: bool = False) -> dict[str, Any]:
    """Run ``program`` once over ``inputs`` (buffer name -> array) and return its written buffers.

    Arrays passed for written buffers are written in place; written buffers not passed are
    allocated (zero-filled, ``count`` elements). The launch: ``dim`` counts invocations per axis
    (rounded up to whole workgroups), ``grid`` counts workgroups; pass at most one. Without either,
    the default grid covers the largest output along x, and a program for which that is not known
    to cover the work (ids along y/z, or a buffer indexed by the invocation id that is longer) is
    a :class:`DispatchError`. Buffers indexed by the invocation id whose lengths differ give a
    :class:`~vyre.driver.coverage.LaunchWarning`, or a :class:`DispatchError` with ``strict=True``.
    ``workgroup_size`` overrides the program's (and skips the launch policy). On CUDA the dispatch
    runs on the GPU its device arrays live on, or on ``device`` (:mod:`vyre.driver.devices`).

    A repeated dispatch of the same Program object over the same device arrays reuses the
    checks and the packed launch of the previous call (about the cost of cuLaunchKernel)."""
    if workgroup_size is None and (backend is not None or not backend_forced()):
        hit = _by_identity.get((id(program), backend))
        if hit is not None and hit[0] is program:
            check_mapping(inputs)  # the cached path checks what the first call did
            k = hit[1]
            if dim is not None:
                grid = launch_grid(program, grid, dim)
            fast = k._fast
            # same device arrays as last time: same size class, so the tuned launch stands
            if (fast is not None and device is None and fast.launch is k.launch
                    and (fast.matches(inputs, grid, return_device) or fast.rebind(inputs, grid, return_device))):
                out = fast(inputs)
                if out is not None:
                    return out  # type: ignore[no-any-return]
            return k(inputs, grid=grid, return_device=return_device, device=device, strict=strict, tune=True)
    if workgroup_size is not None:
        if not isinstance(program, Program):
            raise DispatchError(f"expected a vyre Program, got {type(program).__name__}. "
                                "Fix: build one with Program.wrapped(...)")
        program = replace(program, workgroup_size=grid3(workgroup_size, "workgroup_size"))
    check_mapping(inputs)
    if isinstance(program, Program):
        check_names(program, list(inputs))
    b = check_backend(backend) if backend is not None else default_backend()
    k = _kernel_for(program, b)
    if workgroup_size is None and isinstance(program, Program):
        if len(_by_identity) > _MAX_REMEMBERED:
            _by_identity.clear()
        _by_identity[(id(program), backend)] = (program, k)
    return k(inputs, grid=grid, dim=dim, return_device=return_device, device=device, strict=strict,
             tune=workgroup_size is None)

