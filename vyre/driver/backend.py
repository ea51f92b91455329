"""Backends as objects: one :class:`Backend` per target, so the driver asks instead of branching on
names.

A backend says whether it is usable (:meth:`Backend.unavailable`), what besides the program and the
toolchain versions its kernel key needs (:meth:`Backend.target_parts`: the compute capability on
CUDA), how a validated program becomes something to call (:meth:`Backend.build`: lower, load, with
the binary cache), the launch a flat kernel gets without the tuner's choice
(:meth:`Backend.default_launch`), how a kernel runs one call (:meth:`Backend.run`) and which timer
measures it (:attr:`Backend.timer`). ``vyre.driver.dispatch`` keeps ``Kernel.backend`` as the name
and finds the object with :func:`backend`.

Launch candidates and the timers themselves belong to the tuner (``vyre.tuning``, above the
driver); :attr:`Backend.timer` names which of its timers fits (``"wall"`` or ``"cuda-events"``).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from ..errors import DispatchError
from ..ir import Program
from ..settings import read_settings
from . import cache
from .backends import cuda_available, simulator_enabled
from .coverage import check_id_lengths
from .geometry import check_ids_fit, flat_invocations, grid3
from .launch_policy import choose_launch

if TYPE_CHECKING:
    from .dispatch import Kernel, Launch
    from .geometry import Grid

__all__ = ["Backend", "Built", "backend"]


@dataclass
class Built:
    """A loaded kernel, as :meth:`Backend.build` returns it (``dispatch.compile`` wraps it in a
    ``Kernel``)."""

    fn: Any  # the launcher: numba's dispatcher, cached machine code, a CubinKernel; None (interpreter)
    flat: bool
    hit: bool
    source: str | None  # None: generated on demand through ``emit``
    parallel: Any = None  # the CPU's parallel entry point
    emit: Callable[[], str] | None = None
    module: Callable[[], Any] | None = None  # numba's module, made on demand (CPU machine code)
    save_binary: Callable[[], Any] | None = None  # keeps the cubin after the first launch (CUDA)


class Backend(Protocol):
    name: str
    #: which tuner timer measures this backend's launches
    timer: Literal["wall", "cuda-events"]
    #: where a kernel's arguments live: numpy arrays on the host, or device arrays (the tuner's
    #: scratch copies and the runners' buffers are made there)
    memory: Literal["host", "device"]

    def unavailable(self) -> str | None:
        """Why this backend cannot run here (None: it can)."""

    def target_parts(self) -> list[str]:
        """Kernel key parts besides program, options and toolchain versions."""

    def build(self, program: Program, key: str, parts: list[str | bytes], *, parallel: bool,
              disk_cache: bool) -> Built:
        """Lower ``program`` (validated) and load it, through the kernel caches."""

    def default_launch(self, kernel: Kernel, invocations: int, work: float) -> Launch:
        """A flat kernel's launch when no policy chose one."""

    def run(self, kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None, return_device: bool | None,
            device: int | None, strict: bool, tune: bool) -> dict[str, Any]:
        """Run one call of ``kernel`` (inputs already carry the scalar parameters)."""


# -- host backends ----------------------------------------------------------------------------------


@functools.cache
def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _no_device(kernel: Kernel, device: int | None) -> None:
    if device is not None:
        raise DispatchError(f"device={device!r} names a GPU, but this kernel runs on {kernel.backend!r}. "
                            "Fix: drop device=, or dispatch with backend='cuda'")


class _Host:
    timer: Literal["wall", "cuda-events"] = "wall"
    memory: Literal["host", "device"] = "host"

    def unavailable(self) -> str | None:
        return None

    def target_parts(self) -> list[str]:
        return []

    def bind(self, kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None,
             strict: bool) -> tuple[dict[str, Any], tuple[int, int, int]]:
        arrays = kernel.binder.bind(inputs)
        lengths = {k: v.size for k, v in arrays.items()}
        g = grid3(grid) if grid is not None else kernel.grid_for(lengths)
        check_ids_fit(kernel.program, g)
        check_id_lengths(kernel.program, lengths, strict)
        return arrays, g

    @staticmethod
    def results(kernel: Kernel, inputs: Mapping[str, Any], arrays: Mapping[str, Any]) -> dict[str, Any]:
        # the caller's own array (numpy, or a DLPack object such as a PyTorch CPU tensor, written in
        # place through its view), else the allocated one
        return {b.name: (arrays[b.name] if inputs.get(b.name) is None else inputs[b.name])
                for b in kernel.writable}


_POOL_LOCK = threading.Lock()


def pool_lock() -> threading.Lock:
    """The lock every parallel CPU kernel runs under (one at a time: see CpuBackend.run)."""
    return _POOL_LOCK


_POOL_FORKED = False  # this process was forked from one whose OpenMP pool had started


def pool_usable() -> bool:
    """May this process run parallel CPU kernels? Not a child forked after its parent started GNU
    OpenMP's thread pool: its threads do not survive fork, and numba's OpenMP layer ends such a
    child at its first parallel launch ("Terminating: fork() called from a process already using
    GNU OpenMP"). Such a child runs every CPU kernel's serial entry instead."""
    return not _POOL_FORKED


def _openmp_started() -> bool:
    """Has this process started an OpenMP thread pool (vyre's machine-code loader or numba)?"""
    native = sys.modules.get("vyre.driver.native_cpu")
    runtime = getattr(native, "_runtime", None)
    pool = getattr(runtime, "pool", None)
    if pool is not None and "omppool" in getattr(pool, "__name__", ""):
        return True
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return bool(getattr(parallel, "_is_initialized", False) and getattr(parallel, "_threading_layer", "") == "omp")


def _after_fork_in_child() -> None:
    global _POOL_FORKED
    _POOL_FORKED = _POOL_FORKED or _openmp_started()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _CpuShape(NamedTuple):
    """What a CPU call over buffers of given lengths (and ``grid=``) needs besides the arrays,
    worked out once per kernel and lengths: the checks that depend on nothing else (the grid
    covers the work, ids fit in u32, the id-indexed buffers agree in length) passed."""

    grid: tuple[int, int, int]
    invocations: int  # flat: along x (a row); else in all
    rows: int  # flat: y and z rows of the grid, each running the x-row again
    work: float | None  # statements per invocation, when it does not depend on the arrays' elements
    default: Launch | None  # flat: the default launch, when ``work`` is known


_MAX_SHAPES = 64  # per kernel: lengths seen (a kernel called over ever new lengths starts again)
_args_fit: Callable[[Any], bool] | None = None


class CpuBackend(_Host):
    """numba on the CPU, through the binary cache (vyre/driver/cpu_compile.py)."""

    name = "cpu"

    def build(self, program: Program, key: str, parts: list[str | bytes], *, parallel: bool,
              disk_cache: bool) -> Built:
        from . import cpu_compile

        b = cpu_compile.build(program, key, parts, parallel=parallel, disk_cache=disk_cache)
        if b.source is not None:
            return Built(b.serial, b.flat, b.hit, b.source, b.parallel)
        return Built(b.serial, b.flat, b.hit, None, b.parallel,
                     lambda: cpu_compile.emit(program, parallel=parallel, disk_cache=disk_cache), b.module)

    def default_launch(self, kernel: Kernel, invocations: int, work: float) -> Launch:
        from .dispatch import PARALLEL_MIN_INVOCATIONS, PARALLEL_MIN_WORK, _launch

        if invocations < PARALLEL_MIN_INVOCATIONS and invocations * work >= PARALLEL_MIN_WORK:
            # few heavy invocations (rows of a softmax): four chunks per core
            return _launch(max(1, min(1024, -(-invocations // (4 * _cores())))), 1)
        # a few chunks per core: small enough to balance, big enough to amortise the scheduler
        return _launch(1024, max(1, min(4096, invocations // (64 * 1024))))

    def shape(self, kernel: Kernel, arrays: Mapping[str, Any], grid: Grid | None, strict: bool) -> _CpuShape:
        """The call's :class:`_CpuShape`, from the kernel's memo or worked out (raising what the
        checks raise); memoised only when the checks passed without a warning."""
        sizes = tuple(a.size for a in arrays.values())
        # grid= as checked (True or 1.0 would equal 1 as a key, skipping grid3's error)
        key = (sizes, None if grid is None else grid3(grid))
        hit: _CpuShape | None = kernel._shapes.get(key)
        if hit is not None:
            return hit
        from .dispatch import PARALLEL_MIN_INVOCATIONS
        from .work import work_model

        program = kernel.program
        lengths = dict(zip(arrays, sizes, strict=True))
        g = key[1] if key[1] is not None else kernel.grid_for(lengths)
        check_ids_fit(program, g)
        agree = check_id_lengths(program, lengths, strict)
        model = work_model(program)
        if kernel.flat:
            n, rows = flat_invocations(program, g), g[1] * g[2]
        else:
            n, rows = g[0] * g[1] * g[2] * program.workgroup_invocations, 1
        work = 0.0 if n >= PARALLEL_MIN_INVOCATIONS else model.constant
        if work is None and not model.reads_elements:
            work = model.fn(arrays)  # depends on these lengths only: worked out once for them
        default = kernel.default_launch(n, work) if kernel.flat and work is not None else None
        shape = _CpuShape(g, n, rows, work, default)
        if agree:
            if len(kernel._shapes) >= _MAX_SHAPES:
                kernel._shapes.clear()
            kernel._shapes[key] = shape
        return shape

    def grouped_entry(self, kernel: Kernel, arrays: Mapping[str, Any], grid: tuple[int, int, int]
                      ) -> tuple[Callable[..., Any], bool, Callable[..., Any]] | None:
        """For a caller that checked a first call through :meth:`run` and then calls again over
        arrays of the same lengths and ``grid`` (vyre.ops): the compiled entry a call would run
        (``fn(*storage arrays in kernel.storage order, *grid)``), whether it is the parallel one
        (run it under :func:`pool_lock`, and only where :func:`pool_usable`), and the serial
        entry. None for a flat kernel (its scalars depend on the launch), for arrays the machine
        code cannot take, or lengths whose checks warned."""
        if kernel.flat or (kernel._module is not None and not _fits(arrays.values())):
            return None
        shape: _CpuShape | None = kernel._shapes.get((tuple(a.size for a in arrays.values()), grid))
        if shape is None:
            return None
        fn = kernel._cpu_entry(shape.invocations, shape.grid != (1, 1, 1), _work(kernel, shape, arrays))
        return fn, fn is not kernel._fn, kernel._fn

    def run(self, kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None, return_device: bool | None,
            device: int | None, strict: bool, tune: bool) -> dict[str, Any]:
        if device is not None:
            _no_device(kernel, device)
        arrays = kernel.binder.bind(inputs)
        shape = self.shape(kernel, arrays, grid, strict)
        n = shape.invocations
        work = _work(kernel, shape, arrays)
        if kernel.flat:
            if tune:
                kernel.launch = choose_launch(kernel, arrays, n)
            la = kernel.launch or shape.default or kernel.default_launch(n, work)
            chunk = la.wg * la.ipt
            fn = kernel._cpu_entry(n, n > chunk, work)
            scalars: tuple[int, ...] = (n, chunk)
        else:
            fn = kernel._cpu_entry(n, shape.grid != (1, 1, 1), work)
            scalars = shape.grid
        args = (*arrays.values(), *scalars)  # storage order (BindPlan.bind's)
        parallel = fn is not kernel._fn
        if kernel._module is not None and not _fits(arrays.values()):
            from .dispatch import PARALLEL, SERIAL

            fn = getattr(kernel._module(), PARALLEL if parallel else SERIAL)
        if not parallel:
            for _ in range(shape.rows):
                fn(*args)
        else:
            # one parallel kernel at a time: numba's workqueue pool (NUMBA_THREADING_LAYER=workqueue
            # or forksafe) aborts the process when two threads enter it at once (threads of a Dask
            # scheduler, say), and one parallel kernel uses every core anyway
            with _POOL_LOCK:
                for _ in range(shape.rows):
                    fn(*args)
        return self.results(kernel, inputs, arrays)


def _work(kernel: Kernel, shape: _CpuShape, arrays: Mapping[str, Any]) -> float:
    """Statements per invocation of this call: the shape's, else counted from the arrays (a loop
    bound read from a scalar parameter)."""
    if shape.work is not None:
        return shape.work
    from .work import work_per_invocation

    return work_per_invocation(kernel.program, arrays)


def _fits(arrays: Iterable[Any]) -> bool:
    """:func:`vyre.driver.native_cpu.args_fit` (imported once: only kernels loaded as machine code ask)."""
    global _args_fit
    if _args_fit is None:
        from .native_cpu import args_fit

        _args_fit = args_fit
    return _args_fit(arrays)


class InterpBackend(_Host):
    """The reference interpreter: nothing to compile."""

    name = "interp"

    def build(self, program: Program, key: str, parts: list[str | bytes], *, parallel: bool,
              disk_cache: bool) -> Built:
        return Built(None, False, True, None)

    def default_launch(self, kernel: Kernel, invocations: int, work: float) -> Launch:
        from .dispatch import _launch

        return _launch(kernel.program.workgroup_size[0], 1)

    def run(self, kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None, return_device: bool | None,
            device: int | None, strict: bool, tune: bool) -> dict[str, Any]:
        from ..interp import run

        _no_device(kernel, device)
        arrays, g = self.bind(kernel, inputs, grid, strict)
        run(kernel.program, arrays, grid=g)
        return self.results(kernel, inputs, arrays)


# -- CUDA -------------------------------------------------------------------------------------------


class CudaBackend:
    """A real GPU: kernels compiled by NVRTC or numba (vyre/driver/cuda_route.py), cubins kept in the
    binary cache (vyre/driver/cuda_binary.py)."""

    name = "cuda"
    timer: Literal["wall", "cuda-events"] = "cuda-events"
    memory: Literal["host", "device"] = "device"
    simulator = False

    def unavailable(self) -> str | None:
        if cuda_available():
            return None
        why = "NUMBA_ENABLE_CUDASIM=1 is set" if simulator_enabled() else "no usable CUDA GPU was found"
        return (f"backend 'cuda' is unavailable: {why}. Fix: use backend='cpu', or run on a machine with an "
                "NVIDIA GPU and numba-cuda installed (pip install 'vyre[cuda]')")

    def target_parts(self) -> list[str]:
        from .cuda_launch import compute_capability  # through the driver: no numba on a cache hit

        return [f"cc={compute_capability()}"]

    def build(self, program: Program, key: str, parts: list[str | bytes], *, parallel: bool,
              disk_cache: bool) -> Built:
        if not self.simulator and disk_cache and read_settings().binary_cache:
            from . import cuda_binary, cuda_route

            # the cubin of either compile route (vyre/driver/cuda_route.py): no codegen, no compiler
            for route in cuda_route.lookup_routes():
                found = cuda_binary.load(self._binary_key(program, parts, route))
                if found is not None:
                    fn = found[0]
                    # a cubin the driver refuses is deleted and the program compiled here instead
                    fn.rebuild = functools.partial(self._compile, program, key, parts, disk_cache)
                    emit = self._emit_c if fn.compiler == "nvrtc" else self._emit
                    return Built(fn, found[1], True, None, emit=functools.partial(emit, program, disk_cache))
        return self._compile(program, key, parts, disk_cache)

    def _binary_key(self, program: Program, parts: list[str | bytes], route: str) -> str:
        from . import cuda_binary, cuda_route
        from .dispatch import dist_version

        return cache.kernel_key(*parts, "order=" + ",".join(x.name for x in program.buffers),
                                f"nvvm={dist_version('nvidia-nvvm', 'nvidia')}",
                                f"cuda-binary={cuda_binary.CUDA_BINARY_VERSION}",
                                *cuda_route.route_part(route))  # type: ignore[arg-type]

    def _emit(self, program: Program, disk_cache: bool) -> str:
        from ..codegen.cuda import emit_cuda

        return emit_cuda(program, cache=disk_cache and not self.simulator, simulator=self.simulator)

    def _emit_c(self, program: Program, disk_cache: bool) -> str:
        from ..codegen.cuda_c import emit_cuda_c

        return emit_cuda_c(program).source

    def _compile(self, program: Program, key: str, parts: list[str | bytes], disk_cache: bool) -> Built:
        """Compile ``program`` by the route chosen now (vyre/driver/cuda_route.py), keeping the
        cubin in the binary cache when ``disk_cache`` and the binary cache are on."""
        keep = disk_cache and not self.simulator and read_settings().binary_cache
        if not self.simulator:
            from . import cuda_route
            from .cuda_launch import compute_capability

            cc = compute_capability()
            route, _ = cuda_route.compile_route(cc)
            if route == "nvrtc":
                built = self._compile_nvrtc(program, key, parts, disk_cache, cc,
                                            self._binary_key(program, parts, "nvrtc") if keep else None)
                if built is not None:
                    return built
        return self._compile_numba(program, key, self._binary_key(program, parts, "numba") if keep else None,
                                   disk_cache)

    def _compile_nvrtc(self, program: Program, key: str, parts: list[str | bytes], disk_cache: bool, cc: str,
                       bkey: str | None) -> Built | None:
        """The NVRTC route: C++ to a cubin, loaded by the driver (numba is not imported); None when
        NVRTC refuses the printed kernel (a printer bug: warned, and numba compiles it)."""
        import warnings

        from ..codegen.cuda_c import emit_cuda_c
        from . import cuda_binary, cuda_route, nvrtc

        ck = emit_cuda_c(program)
        try:
            cubin = nvrtc.compile_cuda(ck.source, cuda_route.arch_of(cc))
        except nvrtc.NvrtcError as e:
            warnings.warn(f"{e}\n(compiling this kernel through numba instead)", stacklevel=5)
            return None
        if bkey is not None:
            cuda_binary.save_cubin(bkey, cubin, ck.entry, ck.flat, "nvrtc")
        fn = cuda_binary.CubinKernel(cubin, ck.entry, bkey or "", compiler="nvrtc")
        # a cubin the driver refuses (it should not: NVRTC made it for this device) goes to numba
        fn.rebuild = functools.partial(
            self._compile_numba, program, key,
            self._binary_key(program, parts, "numba") if bkey is not None else None, disk_cache)
        return Built(fn, ck.flat, False, ck.source)

    def _compile_numba(self, program: Program, key: str, bkey: str | None, disk_cache: bool) -> Built:
        """Generate the source and load it through numba (which compiles at the first launch);
        ``bkey``: the binary entry its cubin is saved under after that launch."""
        if not self.simulator:
            _check_toolchain()
        source = self._emit(program, disk_cache)
        mod, hit = cache.load_module(self.name, key, source, use_disk=disk_cache and not self.simulator)
        fn = mod.vyre_kernel
        flat = bool(mod.VYRE_FLAT)
        save = None
        if bkey is not None:
            from . import cuda_binary

            save = functools.partial(cuda_binary.save, fn, bkey, flat)
        return Built(fn, flat, hit, source, save_binary=save)

    def default_launch(self, kernel: Kernel, invocations: int, work: float) -> Launch:
        from ..codegen.emit import INTERLEAVE, INTERLEAVE_MIN_INVOCATIONS
        from .dispatch import _launch

        if invocations >= INTERLEAVE_MIN_INVOCATIONS:
            # enough to fill the GPU with INTERLEAVE invocations per thread, which a flat kernel
            # runs interleaved (vyre.codegen.interleave): more loads in flight per thread
            return _launch(256, INTERLEAVE)
        return _launch(kernel.program.workgroup_size[0], 1)

    def run(self, kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None, return_device: bool | None,
            device: int | None, strict: bool, tune: bool) -> dict[str, Any]:
        from .cuda_launch import launch_cuda

        return launch_cuda(kernel, inputs, grid, return_device, device, strict, tune)


@functools.cache
def _toolchain_missing() -> str | None:
    from numba import cuda

    return None if cuda.is_available() else "numba-cuda finds the GPU but not NVVM, its compiler"


def _check_toolchain() -> None:
    """Compiling needs numba's CUDA toolchain (NVVM); availability (vyre/driver/backends.py) only
    asks the driver, which is all a kernel from the binary cache needs."""
    why = _toolchain_missing()
    if why is not None:
        raise DispatchError(f"backend 'cuda' cannot compile this kernel: {why}. Fix: pip install 'vyre[cuda]' "
                            "(numba-cuda with its NVVM), or use backend='cpu'")


class CudaSimBackend(CudaBackend):
    """numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): CUDA kernels run on the host."""

    name = "cudasim"
    timer: Literal["wall", "cuda-events"] = "wall"
    simulator = True

    def unavailable(self) -> str | None:
        if simulator_enabled():
            return None
        return ("backend 'cudasim' needs numba's CUDA simulator, which is chosen when numba.cuda is first "
                "imported. Fix: start the process with NUMBA_ENABLE_CUDASIM=1")

    def target_parts(self) -> list[str]:
        return []


_BACKENDS: dict[str, Backend] = {b.name: b for b in (CudaBackend(), CpuBackend(), InterpBackend(), CudaSimBackend())}


def backend(name: str) -> Backend:
    """The backend object of a (checked) backend name."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise DispatchError(f"unknown backend {name!r}; expected one of {', '.join(_BACKENDS)}. "
                            "Fix: pass backend='cpu' (or set VYRE_BACKEND) to one of those") from None
