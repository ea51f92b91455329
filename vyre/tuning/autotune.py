"""The autotuner wired into dispatch: launch knobs of flat kernels, chosen by measurement.

A *flat* kernel (:mod:`vyre.codegen.flat`) takes its launch knobs at call time, and every
:class:`~vyre.driver.dispatch.Launch` gives identical results, so the tuner can try candidates on
one compiled kernel. :func:`launch_for` is the hook ``vyre.dispatch`` calls for flat kernels on
``cpu`` and ``cuda``; :func:`tune` is the same machinery for the CLI and the benchmark.

* Candidates (:func:`candidates`): CUDA ``wg in (32..1024) x ipt in (1..16)`` (threads per block,
  invocations per thread), a candidate whose one block exceeds the invocation count more than
  twice dropped (at least one kept); CPU chunks ``Launch(1024, ipt)``, ``ipt in (1, 2, 4, ...,
  512)``, smaller than the problem, plus :data:`CPU_SERIAL` (one chunk: the serial entry).
* Timing never changes results: candidates run on scratch copies of every buffer the program
  writes (host copies on the CPU, device copies on CUDA; read-only inputs are shared), restored
  from the caller's contents before every timed run; the real run comes afterwards. CPU:
  ``perf_counter_ns`` median; CUDA: events around :data:`CUDA_LAUNCHES_PER_SAMPLE` back-to-back
  launches, median. A candidate that raises scores ``inf`` (:class:`SafeTimer`).
* Modes (``VYRE_AUTOTUNER``, read when a kernel and size class are first seen): OFF uses the
  cached decision or the kernel's default launch; ON sweeps every candidate; NATURAL_GRADIENT runs
  :class:`NaturalGradientSearch` whose ``F^{-1/2}`` (Newton-Schulz) and preconditioning product
  are vyre IR programs dispatched on the kernel's own backend.
* Decisions persist per adapter (:func:`adapter_fingerprint`) through :class:`Tuner`, stored as
  ``[wg, ipt, 1]`` under a key of the program and the power-of-two size class of the invocation
  count (:func:`program_key`); a second process starts tuned.
* Below :data:`MIN_TUNE_INVOCATIONS` invocations the hook does not measure (launch overhead
  dominates); it uses a cached decision or the default.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import math
import os
import platform
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DispatchError, TunerError, VyreError
from ..ir import DataType, Program
from ..settings import Mode, read_settings
from ..driver.bind import bind_host_arrays, storage_buffers
from ..driver.dispatch import PARALLEL_MIN_WORK, Grid, Kernel, Launch
from ..driver.geometry import flat_invocations, grid3
from ..driver.work import work_per_invocation
from .timers import (
    BackendTimer, Budget, BudgetedTimer, BudgetExhausted, CudaEventTimer, PerfCounterTimer, SafeTimer,
)
from .tuner import (
    MAX_LAUNCH_INVOCATIONS, ExhaustiveSearch, NaturalGradientSearch, SearchResult, StaticProgramShape,
    Tuner, TunerProgramKey, log2_candidates,
)

__all__ = [
    "CPU_IPT", "CPU_SERIAL", "CPU_SMALL_CHUNKS", "CPU_UNIT", "CUDA_IPT", "CUDA_LAUNCHES_PER_SAMPLE", "CUDA_WORKGROUPS",
    "MIN_TUNE_INVOCATIONS", "AutotuneWarning", "DecisionSource", "Harness", "TuneOutcome",
    "adapter_fingerprint", "candidates", "check_tunable", "decode_decision", "encode_decision",
    "invocations_for", "ir_apply", "ir_inv_sqrt", "launch_for", "program_key", "recent_outcomes",
    "reset", "size_class", "tune", "tuner_for",
]

CUDA_WORKGROUPS: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
CUDA_IPT: tuple[int, ...] = (1, 2, 4, 8, 16)
#: The CPU's unit of work: a parallel chunk is ``CPU_UNIT * ipt`` invocations.
CPU_UNIT = 1024
CPU_IPT: tuple[int, ...] = tuple(2**k for k in range(10))
#: Chunks finer than CPU_UNIT, offered below MIN_TUNE_INVOCATIONS (only heavy invocations are
#: tuned there: rows of a softmax).
CPU_SMALL_CHUNKS: tuple[int, ...] = (64, 256)
#: One chunk of 2^22 invocations: for problems up to that size, the serial entry.
CPU_SERIAL = Launch(CPU_UNIT, 4096)
#: The dispatch hook measures nothing below this many invocations.
MIN_TUNE_INVOCATIONS = 1 << 15
#: Back-to-back launches between the two CUDA events of one sample (amortises launch overhead).
CUDA_LAUNCHES_PER_SAMPLE = 3
_CUDA_LIKE = ("cuda", "cudasim")
_TUNABLE_BACKENDS = ("cpu", *_CUDA_LIKE)
_I32_MAX = 2**31 - 1
_U32_MAX = 2**32 - 1
_HISTORY = 64


class AutotuneWarning(UserWarning):
    """Tuning failed and the default launch was used (the dispatch itself went ahead)."""


class DecisionSource(enum.Enum):
    """Where a launch decision came from."""

    CACHED = "cached"  # the per-adapter cache (this process or an earlier one)
    DEFAULT = "default"  # mode off, or too small to tune: the kernel's default launch
    SINGLE = "single"  # only one candidate fits the problem size
    SWEEP = "sweep"  # Mode.ON: every candidate measured
    NATURAL = "natural"  # Mode.NATURAL_GRADIENT: the natural-gradient search
    FAILED = "failed"  # every candidate failed or the search raised: default launch
    OVER_BUDGET = "over budget"  # one run costs too much of the budget to measure two candidates


@dataclass(frozen=True, slots=True)
class TuneOutcome:
    """One tuning decision and how it was reached. ``trace`` holds every measurement in order
    (``inf`` for a failed candidate); ``failures`` the failed candidates and their errors."""

    backend: str
    key: str
    invocations: int
    mode: Mode
    source: DecisionSource
    launch: Launch
    candidates: tuple[Launch, ...]
    trace: tuple[tuple[Launch, float], ...] = ()
    failures: tuple[tuple[Launch, str], ...] = ()
    seconds: float = 0.0
    budget: float = math.inf
    truncated: bool = False  # the budget ran out before the search ended
    runs: int = 0  # kernel runs the measurements made (probes included)
    measuring: float = 0.0  # seconds counted against the budget (``seconds`` also counts one-time loads)

    @property
    def measured(self) -> dict[Launch, float]:
        """Fastest measurement per measured candidate."""
        out: dict[Launch, float] = {}
        for la, t in self.trace:
            out[la] = min(t, out.get(la, math.inf))
        return out


# -- adapters, candidates, keys ---------------------------------------------------------------------


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or "unknown"


@functools.cache
def adapter_fingerprint(backend: str) -> str:
    """A stable string naming the hardware that tuning results belong to.

    CPU: model, architecture and usable core count; CUDA: device name, compute capability and
    driver version; the simulator: a fixed name."""
    match backend:
        case "cpu":
            return f"cpu {_cpu_model()} {platform.machine()} x{_usable_cores()}"
        case "cuda":
            # the driver's answers (vyre/driver/cuda_driver.py), as numba gave them: no numba import
            from ..driver.cuda_driver import driver

            drv = driver()
            dev = drv.current_device()
            try:
                ver = ".".join(str(v) for v in drv.version())
            except Exception:  # an old or odd driver: the rest still identifies the GPU
                ver = "?"
            cc = "{}.{}".format(*drv.compute_capability(dev))
            return f"cuda {drv.name(dev)} sm {cc} driver {ver}"
        case "cudasim":
            return "cudasim numba simulator"
        case _:
            raise TunerError(f"backend {backend!r} has no tunable launch knobs (expected one of "
                             f"{', '.join(_TUNABLE_BACKENDS)}). Fix: tune on cpu or cuda")


def candidates(backend: str, invocations: int) -> list[Launch]:
    """Launch candidates for ``invocations`` on ``backend`` (see module docs)."""
    if backend in _CUDA_LIKE:
        full = [Launch(w, i) for w in CUDA_WORKGROUPS for i in CUDA_IPT]
    elif backend == "cpu":
        # parallel chunks smaller than the problem, and one chunk covering it all: the serial
        # entry (CPU_SERIAL), which wins when the pool's wake-up costs more than it saves
        split = [Launch(CPU_UNIT, i) for i in CPU_IPT if CPU_UNIT * i < invocations]
        if invocations < MIN_TUNE_INVOCATIONS:  # few heavy invocations (tuned for their work): finer chunks
            split = [Launch(c, 1) for c in CPU_SMALL_CHUNKS if c < invocations] + split
        return [*split, CPU_SERIAL] if invocations <= CPU_SERIAL.wg * CPU_SERIAL.ipt else split
    else:
        adapter_fingerprint(backend)  # raises the error that names the backends
        raise AssertionError(backend)
    keep = [c for c in full if c.wg * c.ipt <= 2 * invocations]
    return keep or [min(full, key=lambda c: (c.wg * c.ipt, c.wg))]


def size_class(invocations: int) -> int:
    """Power-of-two bucket: class ``k`` holds ``2**(k-1) <= invocations < 2**k``."""
    return max(1, int(invocations)).bit_length()


def program_key(program: Program, invocations: int) -> TunerProgramKey:
    """The decision key: the seed's key with the workgroup-count field set to the number of
    declared workgroups of the size class's upper bound, ``ceil(2**k / workgroup_x)``."""
    wg = program.workgroup_size
    count = min(-(-(1 << size_class(invocations)) // wg[0]), _U32_MAX)
    return TunerProgramKey.from_program(program, StaticProgramShape(wg, (count, 1, 1)))


def encode_decision(launch: Launch) -> tuple[int, int, int]:
    """A launch as the tuner cache's triple ``[wg, ipt, 1]``."""
    return (launch.wg, launch.ipt, 1)


def decode_decision(triple: tuple[int, int, int] | None) -> Launch | None:
    """The launch a cached triple stands for, or None when it is not ``[wg, ipt, 1]`` with valid
    knobs (a decision written by something else: ignored, the program is re-tuned)."""
    if triple is None or triple[2] != 1:
        return None
    try:
        return Launch(triple[0], triple[1])
    except DispatchError:
        return None


_tuners: dict[tuple[str, str, Mode], Tuner] = {}


def tuner_for(backend: str, mode: Mode | None = None) -> Tuner:
    """The process's :class:`Tuner` for ``backend``'s adapter (reloaded when the cache root or
    the mode changes)."""
    m = read_settings().autotuner if mode is None else mode
    fp = adapter_fingerprint(backend)
    path = Tuner.cache_path_for_adapter(fp)
    k = (backend, str(path), m)
    t = _tuners.get(k)
    if t is None:
        t = Tuner(fp, m, path, max_invocations=MAX_LAUNCH_INVOCATIONS)
        _tuners[k] = t
    return t


# -- the natural-gradient steps as IR programs --------------------------------------------------------


def ir_inv_sqrt(backend: str, run: Any = None) -> Callable[[np.ndarray], np.ndarray]:
    """``F -> F^{-1/2}`` by the Newton-Schulz IR programs on ``backend`` (f32, retried in f64
    when f32 does not converge). ``run``: a runner or byte-level dispatcher replacing the
    driver's (tests)."""
    # deferred, as in ir_apply: only the natural-gradient search needs the IR programs (a process
    # that only reads cached decisions starts faster without them)
    from ..primitives import ConvergenceError, driver_runner, newton_schulz_inv_sqrt
    from ..self_substrate import as_runner

    runner = driver_runner(backend) if run is None else as_runner(run)

    def inv_sqrt(f: np.ndarray) -> np.ndarray:
        try:
            return newton_schulz_inv_sqrt(f, run=runner)
        except ConvergenceError:
            return newton_schulz_inv_sqrt(f, dtype=DataType.F64, run=runner)

    return inv_sqrt


ApplyQ16 = Callable[[Sequence[int], Sequence[int], int], list[int]]


def ir_apply(backend: str, run: Any = None) -> ApplyQ16:
    """The policy's ``M @ g >> 16`` by the ``natural_gradient_block_apply`` IR program.

    The seed's cells are unsigned and its sums saturate; the IR program reads cells as signed
    16.16 and wraps. Conversion: cells and weights are saturated at ``2**31 - 1`` (a cell that
    large would be an inverse-Fisher entry of 32768, which the latency prior rules out: see
    docs/tuner.md), so the program only sees non-negative values; with weights summing to one,
    every row sum is at most the largest cell and cannot wrap. A result above ``2**31 - 1``
    would mean it did, and raises :class:`TunerError` instead of steering the search."""
    from ..primitives import driver_runner
    from ..self_substrate import as_runner, precondition_q16_via

    runner = driver_runner(backend) if run is None else as_runner(run)

    def apply(matrix_q16: Sequence[int], vector_q16: Sequence[int], n: int) -> list[int]:
        m = [min(int(v), _I32_MAX) for v in matrix_q16]
        g = [min(int(v), _I32_MAX) for v in vector_q16]
        out = precondition_q16_via(runner, m, g, n)
        if any(v > _I32_MAX for v in out):
            raise TunerError(
                f"the preconditioning program wrapped (a result above 2**31-1 in {out}). "
                "Fix: report it; the tuner's matrix cells and weights should never allow this")
        return out

    return apply


# -- measuring candidates -----------------------------------------------------------------------------


def _length(obj: Any) -> int:
    if isinstance(obj, np.ndarray):
        return obj.size
    shape = getattr(obj, "shape", None)
    if shape is None:
        try:
            return len(obj)
        except TypeError:
            raise DispatchError(f"got a {type(obj).__name__}, which has no length or shape. Fix: pass a "
                                "numpy array (on the CPU) or a device array (CUDA)") from None
    n = 1
    for d in shape:
        n *= int(d)
    return n


def invocations_for(kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None) -> int:
    """How many invocations along x ``kernel(inputs, grid=grid)`` runs per row (what the launch
    knobs split; rows along y and z repeat it: geometry.flat_invocations)."""
    g = grid3(grid) if grid is not None else kernel.grid_for({k: _length(v) for k, v in inputs.items()})
    return flat_invocations(kernel.program, g)


def check_tunable(kernel: Kernel) -> None:
    """Raise :class:`TunerError` unless ``kernel`` is flat and on a backend with launch knobs."""
    if not kernel.flat or kernel.backend not in _TUNABLE_BACKENDS:
        raise TunerError(
            f"kernel for backend {kernel.backend!r} is not tunable (flat={kernel.flat}): its results "
            "depend on the launch shape (workgroup/local ids, barriers, workgroup memory, subgroups "
            "or 2-D ids) or the backend has no launch knobs. Fix: tune a 1-D program that uses only "
            "invocation ids, on cpu or cuda")


class Harness:
    """Scratch buffers and a timer for one flat kernel, its inputs and grid.

    Buffers the program writes are copied (host copies on the CPU, device copies on CUDA) and
    restored from the caller's contents before every run; read-only inputs are shared. The
    caller's arrays are never written. Binding errors are the ones the real call would raise."""

    def __init__(self, kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None, *,
                 warmup: int = 1, repeats: int = 5) -> None:
        check_tunable(kernel)
        self.kernel = kernel
        self.warmup, self.repeats = warmup, repeats
        self.invocations = invocations_for(kernel, inputs, grid)
        self.grid = (-(-self.invocations // kernel.program.workgroup_size[0]), 1, 1)
        self._restore: list[tuple[Any, Any]] = []
        self.host = kernel.impl.memory == "host"
        if self.host:
            arrays = bind_host_arrays(kernel.program, inputs)
            self.args: dict[str, Any] = {}
            for b in storage_buffers(kernel.program):
                a = arrays[b.name]
                if b.access.writable:
                    s = a.copy()
                    self._restore.append((s, a))
                    a = s
                self.args[b.name] = a
        else:
            self._bind_device(inputs)

    def _bind_device(self, inputs: Mapping[str, Any]) -> None:
        from numba import cuda

        from ..driver.cuda_launch import device_arg

        self.dev_args: list[Any] = []
        for b in storage_buffers(self.kernel.program):
            src, _ = device_arg(b, inputs.get(b.name))
            if b.access.writable:
                scratch = cuda.device_array(src.shape, dtype=src.dtype)
                self._restore.append((scratch, src))
                src = scratch
            self.dev_args.append(src)

    def restore(self, _launch: Launch | None = None) -> None:
        """Reset every scratch buffer to the caller's contents."""
        for scratch, src in self._restore:
            if isinstance(scratch, np.ndarray):
                np.copyto(scratch, src)
            else:
                scratch.copy_to_device(src)

    def run(self, launch: Launch, invocations: int | None = None) -> None:
        """One run of ``launch`` on the scratch buffers (CUDA: enqueued, not synchronised);
        ``invocations`` (rounded up to whole workgroups) runs only the first ones (a probe)."""
        k = self.kernel
        n = self.invocations if invocations is None else min(self.invocations, invocations)
        if self.host:
            previous = k.launch
            k.launch = launch
            try:
                wg = k.program.workgroup_size[0]
                k(self.args, grid=self.grid if invocations is None else (-(-n // wg), 1, 1), tune=False)
            finally:
                k.launch = previous
        else:
            blocks = max(1, -(-n // (launch.wg * launch.ipt)))
            k._fn[blocks, launch.wg](*self.dev_args, n, launch.ipt)

    def sync(self) -> None:
        """Wait for the runs enqueued so far (a no-op where launches are synchronous: the CPU, the
        simulator)."""
        if self.kernel.impl.timer == "cuda-events":
            from numba import cuda

            cuda.synchronize()

    def estimate_seconds(self, launch: Launch, budget: Budget) -> float:
        """Wall time of one full run of ``launch``, estimated from runs over the first
        invocations only (4096, then 4x more until a run takes a millisecond or covers every
        invocation; the last size runs twice and the faster counts, so a one-time cost such as
        compiling the parallel entry is not taken for the kernel's), so that a kernel too slow to
        tune costs a small fraction of one run to find out. Assumes work spread evenly over the
        invocations."""
        n = self.invocations
        m = min(n, 4096)
        while True:
            t = self._probe(launch, m, budget)
            if m >= n or t >= 1e-3 or budget.left() <= 0:
                if budget.left() > t:
                    t = min(t, self._probe(launch, m, budget))
                return t * n / m
            m = min(n, m * 4)

    def warm(self, launch: Launch) -> None:
        """Pay the one-time costs the real dispatch would pay anyway, over a few invocations and
        outside any budget: loading the module into the GPU context, compiling the CPU's parallel
        entry (compiled on its first call) when the real run will take it. Without this a cold
        first dispatch charged them to the kernel and judged it too slow to tune."""
        k = self.kernel
        m = min(self.invocations, 4096)
        self.restore()
        if self.host:
            n = self.invocations
            if k._fn_parallel is not None and k._cpu_entry(n, True, work_per_invocation(k.program, self.args)) \
                    is k._fn_parallel:
                k._fn_parallel(*(self.args[b.name] for b in storage_buffers(k.program)), m, 1024)
            return
        self.run(launch, m)
        self.sync()

    def _probe(self, launch: Launch, m: int, budget: Budget) -> float:
        self.restore()
        self.sync()  # the restore's copies are not the kernel's time
        start = budget.clock()
        self.run(launch, m)
        self.sync()
        budget.runs += 1
        return budget.clock() - start

    def _sample(self, launch: Launch) -> None:
        for _ in range(CUDA_LAUNCHES_PER_SAMPLE):
            self.run(launch)

    def raw_timer(self, budget: Budget | None = None) -> BackendTimer[Launch]:
        """Median latency per run in nanoseconds; exceptions propagate. Under ``budget`` the
        search stops (:class:`BudgetExhausted`) when it is spent (see :class:`BudgetedTimer`)."""
        b = Budget(math.inf) if budget is None else budget
        if self.host:
            return BudgetedTimer(self.run, b, self.warmup, self.repeats, setup=self.restore)
        if self.kernel.impl.timer == "wall":  # the simulator runs synchronously; its events are fake
            return _Gated(_Scaled(PerfCounterTimer(self._sample, self.warmup, self.repeats, setup=self.restore),
                                  1.0 / CUDA_LAUNCHES_PER_SAMPLE), b)
        events = CudaEventTimer(self._sample, self.warmup, self.repeats, setup=self.restore)
        return _Gated(_Scaled(events, 1.0 / CUDA_LAUNCHES_PER_SAMPLE), b)

    def timer(self, budget: Budget | None = None) -> SafeTimer[Launch]:
        """:meth:`raw_timer` with failing candidates scored ``inf``."""
        return SafeTimer(self.raw_timer(budget))


@dataclass(frozen=True, slots=True)
class _Gated:
    """Stop the search before a candidate once the budget is spent (GPU timers, whose runs are
    short: the budget is checked per candidate, not per run)."""

    inner: BackendTimer[Launch]
    budget: Budget

    def time_ns(self, candidate: Launch) -> float:
        if self.budget.left() <= 0:
            raise BudgetExhausted
        return self.inner.time_ns(candidate)


@dataclass(frozen=True, slots=True)
class _Scaled:
    inner: BackendTimer[Launch]
    factor: float

    def time_ns(self, candidate: Launch) -> float:
        return float(self.inner.time_ns(candidate)) * self.factor


@dataclass(slots=True)
class _Observed:
    """Maps the searches' ``(wg, ipt)`` configs to launches and reports each measurement."""

    inner: BackendTimer[Launch]
    progress: Callable[[int, Launch, float], object] | None
    count: int = 0
    trace: list[tuple[Launch, float]] = field(default_factory=list)

    def time_ns(self, config: tuple[int, ...]) -> float:
        la = Launch(config[0], config[1])
        t = float(self.inner.time_ns(la))
        self.count += 1
        self.trace.append((la, t))
        if self.progress is not None:
            self.progress(self.count, la, t)
        return t


# -- deciding -------------------------------------------------------------------------------------------

_lock = threading.RLock()
_local = threading.local()
_memo: dict[int, tuple[Kernel, dict[int, Launch | None]]] = {}
_history: list[TuneOutcome] = []


@contextlib.contextmanager
def _tuning() -> Iterator[None]:
    """Mark this thread as tuning: dispatches it makes meanwhile (the self-substrate's IR
    programs) are not tuned themselves."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def _remember(outcome: TuneOutcome) -> TuneOutcome:
    _history.append(outcome)
    del _history[:-_HISTORY]
    return outcome


def recent_outcomes() -> list[TuneOutcome]:
    """The last decisions :func:`tune` made in this process (oldest first)."""
    return list(_history)


def reset() -> None:
    """Forget in-process decisions and tuners (the disk cache stays)."""
    with _lock:
        _memo.clear()
        _tuners.clear()
        _history.clear()


#: Seconds, for the tuner's budget (a module attribute so tests can count instead of time).
_clock: Callable[[], float] = time.perf_counter
log = logging.getLogger("vyre.tuning")


def tune(kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None = None, *,
         mode: Mode | None = None, use_cache: bool = True, persist: bool = True,
         progress: Callable[[int, Launch, float], object] | None = None,
         warmup: int = 1, repeats: int = 5, dispatcher: Any = None,
         budget: float | None = None) -> TuneOutcome:
    """Choose the launch of a flat ``kernel`` for ``inputs`` and ``grid``; never writes the
    caller's arrays. ``mode`` defaults to ``VYRE_AUTOTUNER``. With ``use_cache`` a cached
    decision is returned without measuring; measured decisions are recorded (and saved when
    ``persist``). ``progress(i, launch, ns)`` is called after each measurement; ``dispatcher`` (a
    runner or a byte-level dispatcher) replaces the driver's runner of the natural-gradient IR
    programs (tests).

    ``budget`` (seconds; default ``VYRE_TUNE_BUDGET``, 0.25; ``math.inf``: none) bounds the wall
    time spent measuring: one run is first estimated from a run over the first invocations only,
    and a kernel for which two candidates would not fit is not measured at all
    (:attr:`DecisionSource.OVER_BUDGET`, not saved); otherwise the search stops when the budget is
    spent and keeps the best launch measured (``truncated``). It overruns by at most one run.
    Each measured decision logs one INFO line on the ``vyre.tuning`` logger. ``KeyboardInterrupt``
    propagates at once: nothing is recorded, the scratch buffers are dropped, and the decision
    cache on disk is only ever replaced whole.

    Raises :class:`TunerError` for a kernel that is not tunable and the dispatch errors of the
    inputs; a search that fails is reported as :attr:`DecisionSource.FAILED` with a warning."""
    t0 = time.perf_counter()
    settings = read_settings()
    m = settings.autotuner if mode is None else mode
    check_tunable(kernel)
    n, b = invocations_for(kernel, inputs, grid), kernel.backend
    cands = candidates(b, n)
    key = program_key(kernel.program, n)
    tuner = tuner_for(b, m)
    allowed = Budget(settings.tune_budget if budget is None else budget, clock=_clock)

    def done(source: DecisionSource, launch: Launch, trace: Sequence[tuple[Launch, float]] = (),
             failures: Sequence[tuple[Launch, str]] = (), truncated: bool = False) -> TuneOutcome:
        out = _remember(TuneOutcome(b, key.value, n, m, source, launch, tuple(cands), tuple(trace),
                                    tuple(failures), time.perf_counter() - t0, allowed.seconds, truncated,
                                    allowed.runs, max(0.0, allowed.spent())))
        if source in (DecisionSource.SWEEP, DecisionSource.NATURAL):
            _log_decision(kernel, out)
        return out

    cached = decode_decision(tuner.cache.get(key)) if use_cache else None
    if cached is not None:
        return done(DecisionSource.CACHED, cached)
    if m is Mode.OFF_USE_DEFAULT:
        return done(DecisionSource.DEFAULT, kernel.default_launch(n))
    if len(cands) == 1:
        return done(DecisionSource.SINGLE, cands[0])
    harness = Harness(kernel, inputs, grid, warmup=warmup, repeats=repeats)
    estimate = math.inf
    if math.isfinite(allowed.seconds):
        harness.warm(kernel.default_launch(n))
        allowed.start = allowed.clock()  # the budget is the tuner's own time, not the module's load
        estimate = harness.estimate_seconds(kernel.default_launch(n), allowed)
        if 2 * (warmup + repeats) * estimate > allowed.left():  # confirm: a stall is not the kernel
            estimate = min(estimate, harness.estimate_seconds(kernel.default_launch(n), allowed))
        if 2 * (warmup + repeats) * estimate > allowed.left():
            log.info("vyre: not tuning the %s kernel %s (%d invocations): one run takes about %.3g s, too "
                     "long for two candidates in the %.3g s budget (VYRE_TUNE_BUDGET); default launch",
                     b, kernel.key[:12], n, estimate, allowed.seconds)
            return done(DecisionSource.OVER_BUDGET, kernel.default_launch(n))
    safe = harness.timer(allowed)
    if isinstance(safe.inner, BudgetedTimer):
        safe.inner.fastest = estimate
    observed = _Observed(safe, progress)
    search_cands = log2_candidates([(c.wg, c.ipt) for c in cands])
    truncated = False
    try:
        with _tuning():
            if m is Mode.ON:
                result: SearchResult[tuple[int, ...]] = ExhaustiveSearch().run(search_cands, observed)
                source = DecisionSource.SWEEP
            else:
                search = NaturalGradientSearch(inv_sqrt=ir_inv_sqrt(b, dispatcher),
                                               apply=ir_apply(b, dispatcher))
                source = DecisionSource.NATURAL
                result = search.run(search_cands, observed)
    except BudgetExhausted:
        truncated = True
        source = DecisionSource.SWEEP if m is Mode.ON else DecisionSource.NATURAL
        result = _best_of(observed.trace)
    except VyreError as e:
        warnings.warn(f"autotuning {b} kernel failed ({e}); using the default launch. Fix: see the "
                      "error, or set VYRE_AUTOTUNER=off", AutotuneWarning, stacklevel=2)
        return done(DecisionSource.FAILED, kernel.default_launch(n), observed.trace)
    failures = [(la, f"{type(e).__name__}: {e}") for la, e in safe.failures]
    if result.best is None:
        if truncated and not failures:  # the budget ran out before anything was measured
            return done(DecisionSource.OVER_BUDGET, kernel.default_launch(n), observed.trace, truncated=True)
        first = failures[0][1] if failures else "no measurement"
        warnings.warn(f"every launch candidate of the {b} kernel failed (first: {first}); using the "
                      "default launch. Fix: check that the kernel runs at all", AutotuneWarning, stacklevel=2)
        return done(DecisionSource.FAILED, kernel.default_launch(n), observed.trace, failures)
    best = Launch(result.best[0], result.best[1])
    tuner.record_decision(key, encode_decision(best))
    if persist:
        try:
            tuner.persist()
        except TunerError as e:  # the decision still holds for this process
            warnings.warn(f"could not save the tuning decision: {e}", AutotuneWarning, stacklevel=2)
    return done(source, best, observed.trace, failures, truncated)


def _best_of(trace: Sequence[tuple[Launch, float]]) -> SearchResult[tuple[int, ...]]:
    """The fastest finite measurement of a search the budget cut short."""
    finite = [(la, t) for la, t in trace if math.isfinite(t)]
    if not finite:
        return SearchResult(None, math.inf, len(trace), ())
    la, t = min(finite, key=lambda p: p[1])
    return SearchResult((la.wg, la.ipt), t, len(trace), ())


def _log_decision(kernel: Kernel, out: TuneOutcome) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    what = f"{kernel.backend} kernel {kernel.key[:12]} ({out.invocations} invocations)"
    cut = ", budget spent" if out.truncated else ""
    log.info("vyre: tuned the %s: %s (%s, %d measurements in %.3f s%s, budget %.3g s; %.3f s in all, "
             "one-time module loads included)", what, out.launch, out.source.value, len(out.trace), out.measuring,
             cut, out.budget, out.seconds)


_MISS = Launch(1)  # sentinel: never returned
_NO_DECISION = (DecisionSource.DEFAULT, DecisionSource.OVER_BUDGET, DecisionSource.FAILED)


def launch_for(kernel: Kernel, arrays: Mapping[str, Any], invocations: int) -> Launch | None:
    """The launch policy (:func:`vyre.driver.launch_policy.set_launch_policy`): the launch for this call
    of a flat ``kernel`` over checked, bound ``arrays`` (None: its default).

    Repeated calls cost a dict lookup keyed by the kernel's identity and the size class of the
    invocation count, and return the same :class:`Launch` object. The first call of a (kernel,
    size class) consults the tuner (see the module docs); dispatches made while tuning, and
    problems below :data:`MIN_TUNE_INVOCATIONS` (unless, on the CPU, their estimated work reaches
    the driver's ``PARALLEL_MIN_WORK``), are never measured; nothing here changes results."""
    memo = _memo.get(id(kernel))
    if memo is None or memo[0] is not kernel:
        memo = (kernel, {})
    sc = invocations.bit_length()
    launch = memo[1].get(sc, _MISS)
    if launch is not _MISS:
        return launch
    if getattr(_local, "depth", 0):
        return None
    grid = (-(-invocations // kernel.program.workgroup_size[0]), 1, 1)
    with _lock:
        mode = read_settings().autotuner
        if invocations < MIN_TUNE_INVOCATIONS and not (
                kernel.backend == "cpu"
                and invocations * work_per_invocation(kernel.program, arrays) >= PARALLEL_MIN_WORK):
            mode = Mode.OFF_USE_DEFAULT  # small and light: launch overhead dominates any choice
        try:
            outcome = tune(kernel, arrays, grid, mode=mode)
            # without a measured or cached decision the kernel's own default applies (on the CPU
            # it knows the call's work: few heavy invocations are split across the cores)
            launch = None if outcome.source in _NO_DECISION else outcome.launch
        except TunerError as e:  # the tuner's own trouble (cache, adapter) never stops a dispatch
            warnings.warn(f"autotuning skipped ({e}); using the default launch", AutotuneWarning, stacklevel=3)
            launch = None
        memo[1][sc] = launch
        _memo[id(kernel)] = memo
    return launch
