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

This module decides (:func:`tune`, :func:`launch_for`, the natural-gradient steps as IR programs);
the candidates, adapter fingerprints and decision keys are in :mod:`vyre.tuning.search_space`, the
scratch-copy bench and its timers (:class:`Harness`) in :mod:`vyre.tuning.harness`.
"""
from __future__ import annotations

import contextlib
import enum
import logging
import math
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TunerError, VyreError
from ..ir import DataType
from ..settings import Mode, read_settings
from ..driver.dispatch import Grid, Kernel, Launch
from ..driver.launch_policy import measurable
# The bench and the search space live in their own modules; their public names stay importable here.
from .harness import CUDA_LAUNCHES_PER_SAMPLE, Harness, check_tunable, invocations_for
from .search_space import (
    CPU_IPT, CPU_SERIAL, CPU_SMALL_CHUNKS, CPU_UNIT, CUDA_IPT, CUDA_WORKGROUPS, MIN_TUNE_INVOCATIONS,
    adapter_fingerprint, candidates, decode_decision, encode_decision, program_key, size_class,
)
from .timers import BackendTimer, Budget, BudgetedTimer, BudgetExhausted
from .tuner import (
    MAX_LAUNCH_INVOCATIONS, ExhaustiveSearch, NaturalGradientSearch, SearchResult, Tuner, log2_candidates,
)

__all__ = [
    "CPU_IPT", "CPU_SERIAL", "CPU_SMALL_CHUNKS", "CPU_UNIT", "CUDA_IPT", "CUDA_LAUNCHES_PER_SAMPLE", "CUDA_WORKGROUPS",
    "MIN_TUNE_INVOCATIONS", "AutotuneWarning", "DecisionSource", "Harness", "TuneOutcome",
    "adapter_fingerprint", "candidates", "check_tunable", "decode_decision", "encode_decision",
    "invocations_for", "ir_apply", "ir_inv_sqrt", "launch_for", "program_key", "recent_outcomes",
    "reset", "size_class", "tune", "tuner_for",
]

_I32_MAX = 2**31 - 1
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


# -- the per-adapter tuners ----------------------------------------------------------------------------

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


# -- deciding -------------------------------------------------------------------------------------------


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
        if not measurable(kernel, arrays, invocations):
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
