"""Timers the tuner measures candidates with.

A :class:`BackendTimer` maps one candidate configuration to elapsed nanoseconds. Errors a timer
raises stop a sweep (the instrumentation itself is broken); a candidate that merely fails to
launch should score ``math.inf`` instead, which :class:`SafeTimer` arranges around any timer.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from ..errors import TunerError

__all__ = [
    "BackendTimer", "Budget", "BudgetExhausted", "BudgetedTimer", "CallableTimer", "CudaEventTimer",
    "PerfCounterTimer", "SafeTimer",
]

C_contra = TypeVar("C_contra", contravariant=True)
C = TypeVar("C")


class BackendTimer(Protocol[C_contra]):
    """Measure one candidate; return elapsed nanoseconds (``math.inf`` for a failed candidate)."""

    def time_ns(self, candidate: C_contra) -> float: ...


def _check_counts(warmup: int, repeats: int) -> None:
    if warmup < 0 or repeats < 1:
        raise TunerError(
            f"timer needs warmup >= 0 and repeats >= 1, found warmup={warmup}, repeats={repeats}. "
            "Fix: use e.g. warmup=1, repeats=5."
        )


@dataclass(frozen=True, slots=True)
class CallableTimer(Generic[C]):
    """Adapt a plain ``f(candidate) -> ns`` (a model, a table lookup) to :class:`BackendTimer`."""

    fn: Callable[[C], float]

    def time_ns(self, candidate: C) -> float:
        return float(self.fn(candidate))


@dataclass(frozen=True, slots=True)
class PerfCounterTimer(Generic[C]):
    """CPU wall time: ``fn(candidate)`` runs ``warmup`` times untimed (compilation, caches), then
    ``repeats`` timed runs; the result is the median of their ``perf_counter_ns`` durations.
    ``setup(candidate)``, when given, runs before every run, outside the timed region (e.g. to
    restore scratch buffers)."""

    fn: Callable[[C], object]
    warmup: int = 1
    repeats: int = 5
    setup: Callable[[C], object] | None = None

    def __post_init__(self) -> None:
        _check_counts(self.warmup, self.repeats)

    def time_ns(self, candidate: C) -> float:
        for _ in range(self.warmup):
            if self.setup is not None:
                self.setup(candidate)
            self.fn(candidate)
        runs = []
        for _ in range(self.repeats):
            if self.setup is not None:
                self.setup(candidate)
            start = time.perf_counter_ns()
            self.fn(candidate)
            runs.append(time.perf_counter_ns() - start)
        return float(statistics.median(runs))


@dataclass(frozen=True, slots=True)
class CudaEventTimer(Generic[C]):
    """GPU time between two CUDA events recorded around ``fn(candidate)`` on ``stream`` (default:
    the default stream). ``fn`` must enqueue its launch on that stream. Median of ``repeats``.
    ``setup(candidate)``, when given, is enqueued before each run's start event (not timed)."""

    fn: Callable[[C], object]
    warmup: int = 1
    repeats: int = 5
    stream: Any = None
    setup: Callable[[C], object] | None = None

    def __post_init__(self) -> None:
        _check_counts(self.warmup, self.repeats)

    def time_ns(self, candidate: C) -> float:
        from numba import cuda  # deferred: importing numba.cuda is slow and needs the CUDA extra

        stream = self.stream if self.stream is not None else cuda.default_stream()
        for _ in range(self.warmup):
            if self.setup is not None:
                self.setup(candidate)
            self.fn(candidate)
        stream.synchronize()
        runs = []
        for _ in range(self.repeats):
            if self.setup is not None:
                self.setup(candidate)
            start, stop = cuda.event(), cuda.event()  # timing events by default
            start.record(stream)
            self.fn(candidate)
            stop.record(stream)
            stop.synchronize()
            runs.append(start.elapsed_time(stop) * 1e6)  # ms -> ns
        return float(statistics.median(runs))


@dataclass(slots=True)
class SafeTimer(Generic[C]):
    """Wrap a timer so a candidate whose launch raises one of ``catch`` scores ``math.inf``
    instead of aborting the sweep. Failures are kept in ``failures`` for diagnostics."""

    inner: BackendTimer[C]
    catch: tuple[type[BaseException], ...] = (Exception,)
    failures: list[tuple[C, BaseException]] = field(default_factory=list)

    def time_ns(self, candidate: C) -> float:
        try:
            t = float(self.inner.time_ns(candidate))
        except BudgetExhausted:
            raise  # not a candidate failure: the search is over
        except self.catch as e:
            self.failures.append((candidate, e))
            return math.inf
        return t if not math.isnan(t) else math.inf


class BudgetExhausted(Exception):
    """The tuning budget is spent: the search stops and keeps what it measured so far. Never a
    candidate failure (:class:`SafeTimer` lets it through)."""


@dataclass(slots=True)
class Budget:
    """Wall time the tuner may spend on one decision, from its creation. ``seconds`` may be
    ``math.inf``. ``clock`` (seconds) is injectable so tests can count instead of time; ``runs``
    counts the kernel runs the budgeted timers made."""

    seconds: float
    clock: Callable[[], float] = time.perf_counter
    start: float = math.nan
    runs: int = 0

    def __post_init__(self) -> None:
        if not self.seconds >= 0:
            raise TunerError(f"a tuning budget must be >= 0 seconds, found {self.seconds!r}. "
                             "Fix: pass e.g. 0.25, or math.inf for no limit")
        if math.isnan(self.start):
            self.start = self.clock()

    def spent(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.seconds - self.spent()


@dataclass(slots=True)
class BudgetedTimer(Generic[C]):
    """Wall time of ``fn(candidate)`` under a :class:`Budget`: like :class:`PerfCounterTimer`
    (``warmup`` untimed runs, then the median of ``repeats``; ``setup`` before each run, ``sync``
    after each, both outside the timed region), except that

    * it raises :class:`BudgetExhausted` before a candidate when the budget is spent, or when the
      fastest run seen so far would not fit in what is left;
    * a candidate stops after any run that spends the budget, and after a run slower than
      ``slow_factor`` times the fastest run seen (it cannot win; the run's time is its score).

    So a search overruns its budget by at most one run."""

    fn: Callable[[C], object]
    budget: Budget
    warmup: int = 1
    repeats: int = 5
    setup: Callable[[C], object] | None = None
    sync: Callable[[], object] | None = None
    slow_factor: float = 2.0
    fastest: float = math.inf

    def __post_init__(self) -> None:
        _check_counts(self.warmup, self.repeats)

    def time_ns(self, candidate: C) -> float:
        b = self.budget
        left = b.left()
        if left <= 0 or (math.isfinite(self.fastest) and self.fastest > left):
            raise BudgetExhausted
        runs: list[float] = []
        t = math.inf
        for i in range(self.warmup + self.repeats):
            if self.setup is not None:
                self.setup(candidate)
            start = b.clock()
            self.fn(candidate)
            if self.sync is not None:
                self.sync()
            t = b.clock() - start
            b.runs += 1
            if i >= self.warmup:
                runs.append(t)
            slow = t > self.slow_factor * self.fastest
            self.fastest = min(self.fastest, t)
            if slow or b.left() <= 0:
                break
        return float(statistics.median(runs) if runs else t) * 1e9
