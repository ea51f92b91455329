"""The autotuner: the seed's ``Tuner`` (modes, per-adapter cache, best-of-N sweeps, the
natural-gradient step) and search loops over richer launch-configuration spaces.

Public names of :mod:`vyre.tuning.cache`, :mod:`vyre.tuning.policy`,
:mod:`vyre.tuning.timers` and :class:`vyre.settings.Mode` are re-exported here. ``docs/tuner.md``
has the design; this module has the contracts.
"""

from __future__ import annotations

import enum
import math
import random
import re
import warnings
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import blake3
import numpy as np

from ..errors import TunerError
from ..settings import TUNER_DIR, Mode, cache_root
from .timers import BackendTimer, CallableTimer, CudaEventTimer, PerfCounterTimer, SafeTimer
from .cache import (
    MAX_LAUNCH_INVOCATIONS, MAX_TUNER_CACHE_BYTES, MAX_WORKGROUP_INVOCATIONS, StaticProgramShape, TunerCache,
    TunerCacheWarning, TunerProgramKey, WorkgroupSize, check_workgroup_size,
)
from .policy import (
    Q16_ONE, ApplyFn, DefaultPolicy, InvSqrtFn, LatencyModel, LatencyPrior, NaturalGradientPolicy,
    NaturalGradientTuningError, NaturalGradientTuningErrorKind, NaturalGradientTuningStep,
    TunerFeedback, TuningMeasurement, checked_inv_sqrt, estimate_fisher, fisher_inv_sqrt_q16,
    fit_latency_model, identity_fisher_q16, matrix_to_q16, reference_inv_sqrt, precondition_q16,
)

__all__ = [
    "DEFAULT_1D_WORKGROUP_SIZE", "MAX_LAUNCH_INVOCATIONS", "MAX_TUNER_CACHE_BYTES", "MAX_WORKGROUP_INVOCATIONS",
    "Q16_ONE", "WORKGROUP_CANDIDATES", "ApplyFn", "BackendTimer", "CallableTimer", "CudaEventTimer",
    "DefaultPolicy", "ExhaustiveSearch", "FisherKind", "InvSqrtFn", "LatencyModel", "LatencyPrior",
    "Mode", "NaturalGradientPolicy", "NaturalGradientSearch", "NaturalGradientTuningError",
    "NaturalGradientTuningErrorKind", "NaturalGradientTuningStep", "PerfCounterTimer", "RandomSearch",
    "SafeTimer", "SearchCandidate", "SearchResult", "SearchStrategy", "StaticProgramShape", "Tuner",
    "TunerCache", "TunerCacheWarning", "TunerFeedback", "TunerProgramKey", "TuningMeasurement",
    "WorkgroupSize", "adapter_file_stem", "candidates_for", "check_workgroup_size", "estimate_fisher",
    "fisher_inv_sqrt_q16", "fit_latency_model", "identity_fisher_q16", "log2_candidates",
    "matrix_to_q16", "reference_inv_sqrt", "precondition_q16",
]

#: Canonical 1D workgroup-size probes (the seed's).
WORKGROUP_CANDIDATES: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
#: Used when no decision is cached (the seed's ``DEFAULT_1D_WORKGROUP_SIZE``).
DEFAULT_1D_WORKGROUP_SIZE: WorkgroupSize = (64, 1, 1)
_DEFAULT_POLICY = NaturalGradientPolicy()

C = TypeVar("C", bound=Hashable)


def candidates_for(max_invocations: int) -> list[int]:
    """The canonical candidates no larger than ``max_invocations``."""
    return [c for c in WORKGROUP_CANDIDATES if c <= max_invocations]


_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_MAX_STEM = 96


def adapter_file_stem(adapter_fp: str) -> str:
    """A file name stem for ``adapter_fp`` that cannot leave the cache directory.

    Safe fingerprints (letters, digits, ``._-``, no leading dot, short) are kept as they are;
    anything else is sanitised and suffixed with a hash of the original, so two adapters never
    share a file."""
    if not isinstance(adapter_fp, str) or not adapter_fp:
        raise TunerError(
            f"adapter fingerprint must be a non-empty string, found {adapter_fp!r}. Fix: pass the "
            "adapter's name/driver fingerprint."
        )
    cleaned = _UNSAFE_FILE_CHARS.sub("_", adapter_fp).lstrip(".")
    if cleaned == adapter_fp and len(cleaned) <= _MAX_STEM:
        return cleaned
    digest = blake3.blake3(adapter_fp.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{cleaned[:_MAX_STEM]}-{digest}"


def _as_size(candidate: int | Sequence[int], max_invocations: int = MAX_WORKGROUP_INVOCATIONS) -> WorkgroupSize:
    triple = (candidate, 1, 1) if isinstance(candidate, int) else tuple(candidate)
    return check_workgroup_size(triple, max_invocations)


def _finite_ns(t: float, candidate: object) -> float | None:
    """None for a failed candidate (``inf``/NaN); raises for a negative time."""
    t = float(t)
    if math.isnan(t) or math.isinf(t):
        if t < 0:
            raise TunerError(f"timer returned -inf for {candidate!r}. Fix: return elapsed nanoseconds >= 0.")
        return None
    if t < 0:
        raise TunerError(f"timer returned {t} ns for {candidate!r}. Fix: return elapsed nanoseconds >= 0.")
    return t


class Tuner:
    """Workgroup-size autotuner for one adapter: decisions in memory, persisted per adapter."""

    def __init__(self, adapter_fp: str, mode: Mode, cache_path: str | Path | None = None, *,
                 max_invocations: int = MAX_WORKGROUP_INVOCATIONS) -> None:
        """``max_invocations`` bounds ``x * y * z`` of decisions (the seed's 1024 for workgroup
        sizes; :data:`MAX_LAUNCH_INVOCATIONS` for the launch decisions of
        :mod:`vyre.tuning.autotune`, stored as ``[wg, ipt, 1]``)."""
        self._mode = mode
        self.cache_path = (
            Path(cache_path) if cache_path is not None else self.cache_path_for_adapter(adapter_fp)
        )
        try:
            self.cache = TunerCache.load(self.cache_path, max_invocations=max_invocations)
        except TunerError as e:  # the seed starts empty on an unreadable cache; we also say so
            warnings.warn(f"starting with an empty tuner cache: {e}", TunerCacheWarning, stacklevel=2)
            self.cache = TunerCache(max_invocations=max_invocations)

    @staticmethod
    def cache_path_for_adapter(adapter_fp: str, root: Path | None = None) -> Path:
        """``cache_root()/tuner/<sanitised adapter_fp>.toml``."""
        base = root if root is not None else cache_root()
        return base / TUNER_DIR / f"{adapter_file_stem(adapter_fp)}.toml"

    @staticmethod
    def candidates_for(max_invocations: int) -> list[int]:
        return candidates_for(max_invocations)

    @staticmethod
    def default_workgroup_size() -> WorkgroupSize:
        return DEFAULT_1D_WORKGROUP_SIZE

    @property
    def mode(self) -> Mode:
        return self._mode

    def resolve(self, program_key: str | TunerProgramKey) -> WorkgroupSize:
        """The cached decision, else the default workgroup size."""
        cached = self.cache.get(program_key)
        return cached if cached is not None else DEFAULT_1D_WORKGROUP_SIZE

    def record_decision(self, program_key: str | TunerProgramKey, size: int | Sequence[int]) -> None:
        """Record a decision in memory (``persist`` writes it)."""
        self.cache.set(program_key, _as_size(size, self.cache.max_invocations))

    def _measure(
        self, candidates: Iterable[int | Sequence[int]], timer: BackendTimer[WorkgroupSize]
    ) -> tuple[list[TuningMeasurement[WorkgroupSize]], list[int]]:
        """Measure in order; timer exceptions propagate (stopping the sweep); ``inf`` is skipped.
        Returns the measurements and the candidate positions they came from."""
        out: list[TuningMeasurement[WorkgroupSize]] = []
        positions: list[int] = []
        for pos, candidate in enumerate(candidates):
            size = _as_size(candidate)
            t = _finite_ns(timer.time_ns(size), size)
            if t is not None:
                out.append(TuningMeasurement(size, round(t)))
                positions.append(pos)
        return out, positions

    def best_of(
        self,
        program_key: str | TunerProgramKey | None,
        candidates: Iterable[int | Sequence[int]],
        timer: BackendTimer[WorkgroupSize],
    ) -> TuningMeasurement[WorkgroupSize] | None:
        """Measure every candidate and return the fastest (the first on a tie), or None when every
        candidate failed. The winner is recorded under ``program_key`` unless it is None."""
        measured, _ = self._measure(candidates, timer)
        best: TuningMeasurement[WorkgroupSize] | None = None
        for m in measured:
            if best is None or m.elapsed_ns < best.elapsed_ns:
                best = m
        if best is not None and program_key is not None:
            self.record_decision(program_key, best.config)
        return best

    def best_of_natural_gradient(
        self,
        program_key: str | TunerProgramKey | None,
        candidates: Iterable[int | Sequence[int]],
        timer: BackendTimer[WorkgroupSize],
        fisher_inv_sqrt_q16: Sequence[int],
        policy: NaturalGradientPolicy = _DEFAULT_POLICY,
    ) -> NaturalGradientTuningStep[WorkgroupSize]:
        """Measure every candidate, then let the policy choose the next probe.

        A failed candidate (``inf``) is dropped together with its row and column of the matrix
        when the matrix was sized for every candidate. The fastest measurement is recorded under
        ``program_key`` unless it is None; the step's ``selected`` is the next probe."""
        cand = list(candidates)
        measured, positions = self._measure(cand, timer)
        matrix = list(fisher_inv_sqrt_q16)
        n_all = len(cand)
        if len(positions) < n_all and len(matrix) == n_all * n_all:
            matrix = [matrix[r * n_all + c] for r in positions for c in positions]
        step = policy.suggest(measured, matrix)
        if program_key is not None:
            self.record_decision(program_key, step.best_measured)
        return step

    def natural_gradient_step(
        self,
        measurements: Sequence[TuningMeasurement[C]],
        fisher_inv_sqrt_q16: Sequence[int],
        policy: NaturalGradientPolicy = _DEFAULT_POLICY,
    ) -> NaturalGradientTuningStep[C]:
        """The policy update on measurements the caller already has."""
        return policy.suggest(measurements, fisher_inv_sqrt_q16)

    def persist(self) -> None:
        """Merge this tuner's decisions into its cache file (see :meth:`TunerCache.save`)."""
        self.cache.save(self.cache_path)


# -- searches over launch configurations ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SearchCandidate(Generic[C]):
    """An opaque launch configuration and its feature vector (e.g. log2 sizes)."""

    config: C
    features: tuple[float, ...] = ()


def log2_candidates(configs: Iterable[tuple[int, ...]]) -> list[SearchCandidate[tuple[int, ...]]]:
    """Candidates whose features are the log2 of each (positive) integer of the config, e.g.
    ``(workgroup_x, items_per_thread)``."""
    out = []
    for cfg in configs:
        if not cfg or not all(isinstance(v, int) and v > 0 for v in cfg):
            raise TunerError(f"log2_candidates needs tuples of positive ints, found {cfg!r}. Fix: drop it.")
        out.append(SearchCandidate(cfg, tuple(math.log2(v) for v in cfg)))
    return out


@dataclass(frozen=True, slots=True)
class SearchResult(Generic[C]):
    """Outcome of a search: the fastest configuration seen, how many measurements it took, and
    every measurement in order (failed ones as ``inf``)."""

    best: C | None
    best_ns: float
    measurements: int
    trace: tuple[tuple[C, float], ...]

    def measurements_to_within(self, reference_ns: float, rel: float = 0.05) -> int | None:
        """How many measurements until one was within ``rel`` of ``reference_ns`` (None: never)."""
        for i, (_, t) in enumerate(self.trace, start=1):
            if t <= reference_ns * (1.0 + rel):
                return i
        return None


class SearchStrategy(Protocol):
    def run(self, candidates: Sequence[SearchCandidate[C]], timer: BackendTimer[C]) -> SearchResult[C]: ...


@dataclass(slots=True)
class _Log(Generic[C]):
    candidates: Sequence[SearchCandidate[C]]
    timer: BackendTimer[C]
    samples: list[list[float]] = field(default_factory=list)
    failed: set[int] = field(default_factory=set)
    trace: list[tuple[C, float]] = field(default_factory=list)
    best: int | None = None

    def __post_init__(self) -> None:
        if not self.candidates:
            raise TunerError("search received no candidates. Fix: pass at least one SearchCandidate.")
        self.samples = [[] for _ in self.candidates]

    def measure(self, i: int) -> bool:
        """Measure candidate ``i``; True when it became the new best."""
        cfg = self.candidates[i].config
        t = _finite_ns(self.timer.time_ns(cfg), cfg)
        self.trace.append((cfg, math.inf if t is None else t))
        if t is None:
            self.failed.add(i)
            return False
        self.samples[i].append(t)
        if self.best is None or t < min(self.samples[self.best]):
            self.best = i
            return True
        return False

    def result(self) -> SearchResult[C]:
        if self.best is None:
            return SearchResult(None, math.inf, len(self.trace), tuple(self.trace))
        best = self.candidates[self.best].config
        return SearchResult(best, min(self.samples[self.best]), len(self.trace), tuple(self.trace))


def _budget(budget: int | None, n: int) -> int:
    if budget is not None and budget < 1:
        raise TunerError(f"search budget must be >= 1, found {budget}. Fix: pass None or a positive count.")
    return n if budget is None else min(budget, n)


@dataclass(frozen=True, slots=True)
class ExhaustiveSearch:
    """Measure candidates in the given order (the seed's sweep), up to ``budget``."""

    budget: int | None = None

    def run(self, candidates: Sequence[SearchCandidate[C]], timer: BackendTimer[C]) -> SearchResult[C]:
        log = _Log(candidates, timer)
        for i in range(_budget(self.budget, len(candidates))):
            log.measure(i)
        return log.result()


@dataclass(frozen=True, slots=True)
class RandomSearch:
    """Measure a seeded random permutation of the candidates, up to ``budget``."""

    budget: int | None = None
    seed: int = 0

    def run(self, candidates: Sequence[SearchCandidate[C]], timer: BackendTimer[C]) -> SearchResult[C]:
        log = _Log(candidates, timer)
        order = list(range(len(candidates)))
        random.Random(self.seed).shuffle(order)
        for i in order[: _budget(self.budget, len(candidates))]:
            log.measure(i)
        return log.result()


class FisherKind(enum.Enum):
    """Which preconditioner the natural-gradient search hands the policy."""

    #: ``F^{-1/2}`` of the latency model's Fisher information (the point of the exercise).
    POSTERIOR = "posterior"
    #: The seed's launch path: identity, i.e. greedy on the predicted latency.
    IDENTITY = "identity"


#: Scale of the policy's integer latencies: units of 1e-6 of the predicted best, so the policy is
#: independent of the timer's units and resolution.
_PPM = 1_000_000


@dataclass(frozen=True, slots=True)
class NaturalGradientSearch:
    """Probe candidates chosen by :class:`NaturalGradientPolicy` with a fitted Fisher matrix.

    Each step fits the log-latency model to the samples so far (:func:`fit_latency_model`),
    predicts every candidate's latency, and asks the policy (temperature ``rel_temperature`` of
    the predicted best) for the next probe with ``F^{-1/2}`` as preconditioner. When the policy
    selects an already-measured candidate it is exploiting: that counts toward ``patience``
    (reset by a new best) and the unmeasured candidate with the largest preconditioned score is
    probed instead. The search stops after ``patience`` such steps, after ``budget``
    measurements, or when every candidate is measured. ``inv_sqrt`` and ``apply`` are injectable
    so both matrix steps can run as vyre IR programs."""

    budget: int | None = None
    patience: int = 4
    rel_temperature: float = 0.05
    prior: LatencyPrior = field(default_factory=LatencyPrior)
    fisher: FisherKind = FisherKind.POSTERIOR
    start: int | None = None
    inv_sqrt: InvSqrtFn = field(default=reference_inv_sqrt, compare=False, repr=False)
    apply: ApplyFn = field(default=precondition_q16, compare=False, repr=False)

    def run(self, candidates: Sequence[SearchCandidate[C]], timer: BackendTimer[C]) -> SearchResult[C]:
        log = _Log(candidates, timer)
        n = len(candidates)
        budget = _budget(self.budget, n)
        features = self._features(candidates)
        log.measure(self._start_index(n, features))
        stable = 0
        while len(log.trace) < budget:
            active = [i for i in range(n) if i not in log.failed]
            unmeasured = [j for j, i in enumerate(active) if not log.samples[i]]
            if not unmeasured:
                break
            if log.best is None:  # everything measured so far failed: no model yet
                log.measure(active[unmeasured[0]])
                continue
            scores, chosen, pred, spread = self._scores(log, active, features)
            if log.samples[active[chosen]]:
                stable += 1
                if stable >= self.patience:
                    break
                chosen = max(unmeasured, key=lambda j: (scores[j], -pred[j], spread[j]))
            if log.measure(active[chosen]):
                stable = 0
        return log.result()

    def _features(self, candidates: Sequence[SearchCandidate[C]]) -> np.ndarray | None:
        dims = {len(c.features) for c in candidates}
        if dims == {0}:
            return None
        if len(dims) != 1:
            raise TunerError(
                f"search candidates have feature vectors of lengths {sorted(dims)}. "
                "Fix: give every candidate the same number of features."
            )
        return np.array([c.features for c in candidates], dtype=np.float64)

    def _start_index(self, n: int, features: np.ndarray | None) -> int:
        """``start`` if given, else the candidate nearest the features' centroid."""
        if self.start is not None:
            if not 0 <= self.start < n:
                raise TunerError(
                    f"search start {self.start} is not a candidate index (0..{n - 1}). "
                    "Fix: pass a valid index or None."
                )
            return self.start
        if features is None:
            return 0
        centroid = features.mean(axis=0)
        return int(np.argmin(np.sum((features - centroid) ** 2, axis=1)))

    def _scores(
        self, log: _Log[C], active: list[int], features: np.ndarray | None
    ) -> tuple[list[int], int, np.ndarray, np.ndarray]:
        """Preconditioned policy scores (16.16), the policy's selection, predicted log-latency and
        posterior spread, all indexed by position in ``active``."""
        feats = None if features is None else features[active]
        model = fit_latency_model([log.samples[i] for i in active], feats, self.prior)
        s = checked_inv_sqrt(model.fisher, self.inv_sqrt)
        pred = model.posterior_log_latency(s)
        rel = np.exp(np.minimum(pred - pred.min(), 40.0))  # 40: e^40 ppm still fits in u64
        window = [TuningMeasurement(j, round(float(r) * _PPM)) for j, r in enumerate(rel)]
        m = len(active)
        matrix = identity_fisher_q16(m) if self.fisher is FisherKind.IDENTITY else matrix_to_q16(s)
        policy = NaturalGradientPolicy(max(1, round(self.rel_temperature * _PPM)), self.apply)
        step = policy.suggest(window, matrix)
        return list(step.natural_gradient_q16), step.selected_index, pred, np.diag(s).copy()
